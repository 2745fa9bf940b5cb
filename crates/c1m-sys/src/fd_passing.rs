//! Passing open file descriptors between unrelated processes (the live upgrade's hand-over):
//! SOCK_SEQPACKET Unix sockets on abstract names (no file on disk, gone with their holder),
//! `sendmsg`/`recvmsg` with SCM_RIGHTS, and the peer's credentials (SO_PEERCRED) so a receiver
//! can check who connected before handing it connections.
//!
//! SEQPACKET rather than a stream: every message keeps its boundary, so the descriptors of a
//! message arrive with exactly its bytes (on a stream socket a read may join or split the
//! bytes around an SCM_RIGHTS message).

use crate::cvt;
use socket2::{Domain, SockAddr, Socket, Type};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Most descriptors one message may carry (the kernel's SCM_MAX_FD).
pub const MAX_FDS_PER_MESSAGE: usize = 253;

fn abstract_addr(name: &str) -> io::Result<SockAddr> {
    // socket2: a path starting with NUL names the abstract namespace (not NUL-terminated).
    use std::os::unix::ffi::OsStrExt;
    let mut path = vec![0u8];
    path.extend_from_slice(name.as_bytes());
    SockAddr::unix(std::ffi::OsStr::from_bytes(&path))
}

/// A listening SEQPACKET socket on the abstract name `name` (blocking; `accept` waits at most
/// `timeout`).
pub fn listen_abstract(name: &str, timeout: Duration) -> io::Result<Socket> {
    let socket = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
    socket.bind(&abstract_addr(name)?)?;
    socket.listen(4)?;
    socket.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    Ok(socket)
}

/// Connects to the SEQPACKET listener on the abstract name `name`.
pub fn connect_abstract(name: &str) -> io::Result<Socket> {
    let socket = Socket::new(Domain::UNIX, Type::SEQPACKET.cloexec(), None)?;
    socket.connect(&abstract_addr(name)?)?;
    Ok(socket)
}

/// The pid of the process at the other end of a connected Unix socket, as the kernel recorded
/// it at connect time.
pub fn peer_pid(socket: &impl AsRawFd) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals; the kernel writes at most `len` bytes to `cred`.
    cvt(unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(cred.pid as u32)
}

/// The parent pid of `pid` (from /proc/PID/stat), or None when the process is gone.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Sends one message with `fds` attached (at most [`MAX_FDS_PER_MESSAGE`]); the descriptors
/// stay open here (the receiver gets its own copies). MSG_NOSIGNAL: a gone peer is an error,
/// not a SIGPIPE.
pub fn send_with_fds(socket: &impl AsRawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one message",
        ));
    }
    let fd_bytes = std::mem::size_of_val(fds) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    // u64 elements keep the buffer aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8).max(1)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: zeroed msghdr is a valid "empty" header; fields are filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` zeroed, aligned bytes, enough for one cmsghdr
        // with `fd_bytes` of data (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and CMSG_DATA
        // has room for `fds.len()` descriptors; copy_nonoverlapping copies exactly that many.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr(),
                libc::CMSG_DATA(cmsg) as *mut RawFd,
                fds.len(),
            );
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` (which borrows `data`) and `control`, all alive for the
        // call; sendmsg only reads them.
        let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            if n as usize != data.len() {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short seqpacket send",
                ));
            }
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message into `buf`; returns its length (0 = the peer closed) and the
/// descriptors it carried (close-on-exec). A message longer than `buf`, or carrying more
/// descriptors than fit, is an error (its descriptors are closed, none leak).
pub fn recv_with_fds(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let fd_bytes = (MAX_FDS_PER_MESSAGE * std::mem::size_of::<RawFd>()) as u32;
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is a valid empty header; fields are filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both alive and writable for
        // `iov_len` / `msg_controllen` bytes; the kernel writes within those bounds.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` and set msg_controllen; CMSG_FIRSTHDR/NXTHDR walk
    // only within it. Each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors
    // that the kernel just installed in this process and nothing else owns, so wrapping each
    // in OwnedFd exactly once is sound. read_unaligned: CMSG_DATA need not be int-aligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let bytes = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "hand-over message longer than the receive buffer",
        ));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "hand-over message carried more descriptors than allowed",
        ));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn descriptors_travel_with_their_message() {
        let name = format!("c1m-fd-passing-test-{}", std::process::id());
        let listener = listen_abstract(&name, Duration::from_secs(5)).unwrap();
        let client = connect_abstract(&name).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert_eq!(peer_pid(&server).unwrap(), std::process::id());
        assert_eq!(
            parent_of(std::process::id()),
            Some(std::os::unix::process::parent_id())
        );
        // Two socketpairs: one end of each travels; writing into the received copy reaches
        // the end kept here.
        let (a1, a2) = std::os::unix::net::UnixStream::pair().unwrap();
        let (b1, b2) = std::os::unix::net::UnixStream::pair().unwrap();
        send_with_fds(&client, b"two fds", &[a1.as_raw_fd(), b1.as_raw_fd()]).unwrap();
        send_with_fds(&client, b"none", &[]).unwrap();
        let mut buf = [0u8; 64];
        let (n, fds) = recv_with_fds(&server, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"two fds");
        assert_eq!(fds.len(), 2);
        let (n, none) = recv_with_fds(&server, &mut buf).unwrap();
        assert_eq!((&buf[..n], none.len()), (&b"none"[..], 0));
        let mut got = std::os::unix::net::UnixStream::from(fds.into_iter().nth(1).unwrap());
        got.write_all(b"hi").unwrap();
        let mut b2 = b2;
        let mut two = [0u8; 2];
        b2.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"hi");
        drop(a2);
        // A message larger than the buffer is refused, not silently cut.
        send_with_fds(&client, &[7u8; 100], &[]).unwrap();
        let mut small = [0u8; 10];
        assert!(recv_with_fds(&server, &mut small).is_err());
        assert!(send_with_fds(&client, b"x", &[0; MAX_FDS_PER_MESSAGE + 1]).is_err());
        drop(client);
        assert_eq!(recv_with_fds(&server, &mut buf).unwrap().0, 0);
    }
}
