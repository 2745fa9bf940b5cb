//! Listening sockets. Every worker binds its own SO_REUSEPORT listener on the same address and
//! the kernel spreads connections over them. The master binds the address first without
//! listening: that checks the address early, turns port 0 into a real port the workers can
//! share, and keeps the port reserved while a worker restarts (a socket that never listens
//! receives no connections).
//!
//! SO_REUSEPORT would also let a second `c1m serve` (same user) join the group and silently take
//! half the traffic, so the master first claims the port with [`claim_exclusive`].

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

/// Proof that this process is the one `c1m serve` on a port; dropping it releases the claim.
pub struct PortClaim {
    _socket: std::os::unix::net::UnixDatagram,
}

/// Claims `port` for this server: an abstract Unix socket named after the port (abstract names
/// vanish with their last holder, so a crash leaves no stale lock, and they are per network
/// namespace, like ports). Keyed on the port alone because a wildcard and a specific address on
/// one port would share a SO_REUSEPORT group. Our own workers never claim; a live upgrade hands
/// the claim over with the listeners. The one place that decides who may serve a port.
pub fn claim_exclusive(port: u16) -> anyhow::Result<PortClaim> {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("c1m-serve-port-{port}");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .context("naming the port claim")?;
    match std::os::unix::net::UnixDatagram::bind_addr(&addr) {
        Ok(socket) => Ok(PortClaim { _socket: socket }),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "port {port} is already served by another c1m serve on this host; \
             SO_REUSEPORT would make the two share (and split) its traffic, so this one refuses \
             to start. Stop the other instance or pick another port"
        ),
        Err(e) => Err(e).with_context(|| format!("claiming port {port}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_claimed_once_and_released_on_drop() {
        let (_s, addr) = reserve("127.0.0.1:0".parse().unwrap()).unwrap();
        let claim = claim_exclusive(addr.port()).unwrap();
        let err = claim_exclusive(addr.port()).err().unwrap().to_string();
        assert!(err.contains("already served"), "{err}");
        drop(claim);
        claim_exclusive(addr.port()).unwrap();
    }
}
