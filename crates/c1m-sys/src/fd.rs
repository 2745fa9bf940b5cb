//! Passing a descriptor to a child process across exec: clear FD_CLOEXEC on one end of a
//! socketpair, spawn, then drop that end in the parent; the child adopts it by number.

use crate::cvt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Clears FD_CLOEXEC so the descriptor survives the next exec.
pub fn set_inheritable(fd: &impl AsRawFd) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own (borrowed for the call), integer args only.
    let flags = cvt(unsafe { libc::fcntl(raw, libc::F_GETFD) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
    Ok(())
}

/// Sets FD_CLOEXEC again (after a spawn that needed the descriptor inherited).
pub fn set_cloexec(fd: &impl AsRawFd) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor the caller holds open, integer args only.
    let flags = cvt(unsafe { libc::fcntl(raw, libc::F_GETFD) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(raw, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    Ok(())
}

/// Takes ownership of a descriptor inherited from the parent, after checking it is open, and
/// sets FD_CLOEXEC on it again so it does not leak into our own children.
pub fn adopt_inherited(raw: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only validates the number; it does not take ownership.
    let flags = cvt(unsafe { libc::fcntl(raw, libc::F_GETFD) })?;
    // SAFETY: as above, integer args only.
    cvt(unsafe { libc::fcntl(raw, libc::F_SETFD, flags | libc::FD_CLOEXEC) })?;
    // SAFETY: the descriptor is open (checked above), was handed to this process by its parent
    // for its exclusive use, and nothing else in this process owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// A copy of `fd` at the lowest free descriptor number at or above `min` (FD_CLOEXEC set).
/// Used to renumber a descriptor above all others (drop the original afterwards): a process
/// killed with SIGKILL releases its sockets in the reverse order of their numbers, so the
/// highest is released first.
pub fn dup_at_least(fd: &impl AsRawFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller holds open (borrowed for the call),
    // integer args only; it returns a new descriptor and leaves `fd` as it was.
    let raw = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: `raw` was just returned by fcntl: an open descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}
