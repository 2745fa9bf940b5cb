//! Listening sockets. Every worker binds its own SO_REUSEPORT listener on the same address and
//! the kernel spreads connections over them. The master binds the address first without
//! listening: that checks the address early, turns port 0 into a real port the workers can
//! share, and keeps the port reserved while a worker restarts (a socket that never listens
//! receives no connections).
//!
//! SO_REUSEPORT would also let a second `c1m serve` (same user) join the group and silently take
//! half the traffic, so the master takes its addresses with [`reserve_exclusive`].

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
fn reserve(addr: SocketAddr) -> anyhow::Result<(Socket, SocketAddr)> {
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

/// The master's hold on one address: the bound, never-listening socket and the port claim.
/// Dropping it gives both up.
pub struct Reservation {
    pub addr: SocketAddr,
    _socket: Socket,
    _claim: PortClaim,
}

/// Reserves `addr` for this server alone: the one place that decides who may serve a port
/// (a live upgrade hands the reservation over instead of calling this again). Refuses, with a
/// message saying why, a port that another `c1m serve` claimed or that another program listens
/// on (which SO_REUSEPORT would otherwise let us join silently when it set SO_REUSEPORT too).
/// Port 0 is resolved first and the port actually given is claimed. Our own workers bind with
/// SO_REUSEPORT and never come here, so restarting them needs no claim.
pub fn reserve_exclusive(addr: SocketAddr) -> anyhow::Result<Reservation> {
    let early_claim = match addr.port() {
        0 => None,
        port => {
            let claim = claim_port(port)?;
            refuse_foreign_listener(addr)?;
            Some(claim)
        }
    };
    let (socket, addr) = reserve(addr)?;
    let claim = match early_claim {
        Some(claim) => claim,
        None => claim_port(addr.port())?,
    };
    Ok(Reservation {
        addr,
        _socket: socket,
        _claim: claim,
    })
}

impl Reservation {
    /// The bound socket's and the claim's descriptors (passed on at a live upgrade).
    pub fn fds(&self) -> [std::os::fd::RawFd; 2] {
        use std::os::fd::AsRawFd;
        [self._socket.as_raw_fd(), self._claim._socket.as_raw_fd()]
    }
}

/// Which address a reservation holds: `h` http, `t` tcp, `a` admin (the keys of
/// [`reserved_env`]).
pub type Kind = char;

/// `h=SOCK,CLAIM;t=…;a=…`: the reservations of the http, tcp and admin addresses, for the
/// environment of the new master at a live upgrade; and their descriptors.
pub fn reserved_env(list: &[(Kind, Reservation)]) -> (String, Vec<std::os::fd::RawFd>) {
    let mut fds = Vec::new();
    let env = list
        .iter()
        .map(|(k, r)| {
            let [a, b] = r.fds();
            fds.extend([a, b]);
            format!("{k}={a},{b}")
        })
        .collect::<Vec<_>>()
        .join(";");
    (env, fds)
}

/// New master of a live upgrade: takes over the old master's reservations (inherited
/// descriptors named by [`reserved_env`]), so the ports stay claimed when the old one exits.
/// The master keeps them and passes them on at its own upgrade: the descriptors are
/// close-on-exec from here, so the numbers in its environment name nothing in a later child.
pub fn adopt_reserved(
    env: &str,
    cfg: &crate::config::Config,
) -> anyhow::Result<Vec<(Kind, Reservation)>> {
    let mut out = Vec::new();
    for item in env.split(';').filter(|s| !s.is_empty()) {
        let (kind, fds) = item.split_once('=').context("reservation entry")?;
        let (a, b) = fds.split_once(',').context("reservation descriptors")?;
        let (kind, addr) = match kind {
            "h" => ('h', Some(cfg.listen)),
            "t" => ('t', cfg.tcp_listen),
            "a" => ('a', cfg.admin_listen),
            _ => ('?', None),
        };
        let addr = addr.with_context(|| format!("reservation for unknown address {kind:?}"))?;
        let socket = c1m_sys::fd::adopt_inherited(a.parse().context("reserved socket")?)
            .with_context(|| format!("taking over the reservation of {addr}"))?;
        let claim = c1m_sys::fd::adopt_inherited(b.parse().context("reserved claim")?)
            .with_context(|| format!("taking over the port claim of {addr}"))?;
        out.push((
            kind,
            Reservation {
                addr,
                _socket: Socket::from(socket),
                _claim: PortClaim {
                    _socket: std::os::unix::net::UnixDatagram::from(claim),
                },
            },
        ));
    }
    Ok(out)
}

/// Proof that this process is the one `c1m serve` on a port; dropping it releases the claim.
struct PortClaim {
    _socket: std::os::unix::net::UnixDatagram,
}

/// Claims `port` for this server: an abstract Unix socket named after the port (abstract names
/// vanish with their last holder, so a crash leaves no stale lock, and they are per network
/// namespace, like ports). Keyed on the port alone because a wildcard and a specific address on
/// one port would share a SO_REUSEPORT group.
fn claim_port(port: u16) -> anyhow::Result<PortClaim> {
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

/// A plain bind (SO_REUSEADDR, no SO_REUSEPORT) fails while anyone listens on the address,
/// including a program that set SO_REUSEPORT and would otherwise share its traffic with us.
fn refuse_foreign_listener(addr: SocketAddr) -> anyhow::Result<()> {
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    probe.set_reuse_address(true)?;
    match probe.bind(&addr.into()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => anyhow::bail!(
            "{addr} is already in use by another program; c1m serve refuses to share it \
             (SO_REUSEPORT would split the connections between the two)"
        ),
        Err(e) => Err(e).with_context(|| format!("binding {addr}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_reserved_once_and_released_on_drop() {
        let first = reserve_exclusive("127.0.0.1:0".parse().unwrap()).unwrap();
        let err = reserve_exclusive(first.addr).err().unwrap().to_string();
        assert!(err.contains("already served"), "{err}");
        let addr = first.addr;
        drop(first);
        reserve_exclusive(addr).unwrap();
    }

    #[test]
    fn a_foreign_reuseport_listener_is_refused() {
        let other = reuseport_socket("127.0.0.1:0".parse().unwrap()).unwrap();
        other.listen(16).unwrap();
        let addr = other.local_addr().unwrap().as_socket().unwrap();
        let err = reserve_exclusive(addr).err().unwrap().to_string();
        assert!(err.contains("in use by another program"), "{err}");
    }
}
