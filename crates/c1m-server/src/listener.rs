//! Listening sockets. Every worker binds its own SO_REUSEPORT listener on the same address and
//! the kernel spreads connections over them. The master binds the address first without
//! listening: that checks the address early, turns port 0 into a real port the workers can
//! share, and keeps the port reserved while a worker restarts (a socket that never listens
//! receives no connections).

use anyhow::Context;
use socket2::{Domain, Socket, Type};
use std::net::SocketAddr;

fn reuseport_socket(addr: SocketAddr) -> anyhow::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    Ok(socket)
}

/// Binds without listening; returns the socket and the actual address (port 0 resolved).
pub fn reserve(addr: SocketAddr) -> anyhow::Result<(Socket, SocketAddr)> {
    let socket = reuseport_socket(addr)?;
    let local = socket
        .local_addr()?
        .as_socket()
        .context("bound address is not IP")?;
    Ok((socket, local))
}

/// A non-blocking SO_REUSEPORT listener on `addr`.
pub fn bind_reuseport(
    addr: SocketAddr,
    backlog: Option<i32>,
) -> anyhow::Result<std::net::TcpListener> {
    let socket = reuseport_socket(addr)?;
    socket
        .listen(backlog.unwrap_or(4096))
        .with_context(|| format!("listening on {addr}"))?;
    Ok(socket.into())
}
