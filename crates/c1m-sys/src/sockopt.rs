//! Socket options that socket2 does not cover.

use crate::cvt;
use std::io;
use std::os::fd::AsRawFd;

/// IP_LOCAL_PORT_RANGE, Linux 6.3 (not yet in every libc release).
const IP_LOCAL_PORT_RANGE: libc::c_int = 51;

fn set_int(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int, value: u32) -> io::Result<()> {
    let v = value as libc::c_int;
    // SAFETY: `v` is a live c_int and the length passed is its size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// IP_BIND_ADDRESS_NO_PORT (Linux 4.2): bind() to a source address without picking a port;
/// connect() picks one per 4-tuple, so one port serves many destinations.
pub fn set_bind_address_no_port(fd: &impl AsRawFd) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)
}

/// IP_LOCAL_PORT_RANGE (Linux 6.3): clamp this socket's ephemeral range to `lo..=hi`.
/// Returns the error on older kernels (ENOPROTOOPT); callers treat that as "not available".
pub fn set_local_port_range(fd: &impl AsRawFd, lo: u16, hi: u16) -> io::Result<()> {
    set_int(
        fd,
        libc::IPPROTO_IP,
        IP_LOCAL_PORT_RANGE,
        (u32::from(hi) << 16) | u32::from(lo),
    )
}

/// TCP keepalive on a connected socket: probes start after `idle_s` seconds without traffic,
/// repeat every `interval_s`, and the kernel drops the connection after `count` unanswered
/// ones (the socket then reports ETIMEDOUT).
pub fn set_keepalive(
    fd: &impl AsRawFd,
    idle_s: u32,
    interval_s: u32,
    count: u32,
) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle_s)?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, interval_s)?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, count)?;
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)
}

/// SO_KEEPALIVE off (sockets accepted from a listener inherit it, so a listener whose
/// keepalive was turned off on reload must say so explicitly).
pub fn clear_keepalive(fd: &impl AsRawFd) -> io::Result<()> {
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 0)
}

/// TCP_USER_TIMEOUT (Linux 2.6.37): drop the connection when written data stays
/// unacknowledged this long (also bounds keepalive's detection time).
pub fn set_user_timeout(fd: &impl AsRawFd, ms: u32) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, ms)
}

/// SO_INCOMING_CPU on a listener of a SO_REUSEPORT group (Linux 6.1 for listeners): a
/// connection whose handshake the kernel handles on `cpu` goes to this listener rather than to
/// the one its hash picks; `None` takes the preference back (-1, a new socket's value).
pub fn set_incoming_cpu(fd: &impl AsRawFd, cpu: Option<u32>) -> io::Result<()> {
    set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_INCOMING_CPU,
        cpu.unwrap_or(u32::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_apply_to_a_real_socket() {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        set_bind_address_no_port(&s).unwrap();
        set_keepalive(&s, 7, 3, 4).unwrap();
        assert!(s.keepalive().unwrap());
        assert_eq!(
            s.keepalive_time().unwrap(),
            std::time::Duration::from_secs(7)
        );
        set_user_timeout(&s, 2500).unwrap();
        assert_eq!(
            s.tcp_user_timeout().unwrap(),
            Some(std::time::Duration::from_millis(2500))
        );
        // Present on this project's kernels (6.x); an older kernel answers ENOPROTOOPT.
        match set_local_port_range(&s, 20000, 30000) {
            Ok(()) => {}
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOPROTOOPT)),
        }
    }
}
