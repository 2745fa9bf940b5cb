//! Process control: tie a worker's life to its parent's, and small pid helpers.

use crate::cvt;
use std::io;

/// Asks the kernel to send `signal` to this process when its parent dies (PR_SET_PDEATHSIG),
/// then checks the parent did not already die before the call (in which case we were
/// re-parented and the signal will never come).
pub fn die_with_parent(signal: i32, expected_parent: u32) -> io::Result<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes an integer signal number and touches no memory.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) })?;
    if std::os::unix::process::parent_id() != expected_parent {
        return Err(io::Error::other(
            "parent exited before PR_SET_PDEATHSIG was set",
        ));
    }
    Ok(())
}

/// Sends `signal` to `pid`.
pub fn kill(pid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: kill() takes plain integers and touches no memory.
    cvt(unsafe { libc::kill(pid as libc::pid_t, signal) }).map(|_| ())
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
