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

/// Sends `signal` to every process in the process group `pgid` (a child started with its own
/// group, and whatever it started in turn). A group with no process left is not an error.
pub fn kill_group(pgid: u32, signal: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: killpg() takes plain integers and touches no memory.
    match cvt(unsafe { libc::killpg(pgid as libc::pid_t, signal) }) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Number of CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Lowers the calling thread's CPU priority by `by` nice steps (capped at 19) and returns the
/// nice value it now has. Threads it starts later inherit it. Raising a nice value needs no
/// privilege; nothing here ever lowers one.
pub fn lower_priority(by: i32) -> io::Result<i32> {
    let current = nice_value()?;
    let wanted = (current + by.max(0)).min(19);
    // SAFETY: setpriority takes plain integers and touches no memory; who = 0 is this thread.
    cvt(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, wanted) })?;
    nice_value()
}

/// The calling thread's nice value.
pub fn nice_value() -> io::Result<i32> {
    // getpriority may legitimately return -1, so errno is cleared first and read after.
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: getpriority takes plain integers and touches no memory.
    let value = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let err = io::Error::last_os_error();
    if value == -1 && err.raw_os_error() != Some(0) {
        return Err(err);
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    #[test]
    fn lowering_priority_raises_the_nice_value_and_caps_it() {
        // In a thread of its own: nice values are per thread, the test harness's stay as they are.
        std::thread::spawn(|| {
            let before = super::nice_value().unwrap();
            let after = super::lower_priority(3).unwrap();
            assert_eq!(after, (before + 3).min(19));
            assert_eq!(super::lower_priority(100).unwrap(), 19);
            assert_eq!(super::lower_priority(-5).unwrap(), 19, "never raised back");
        })
        .join()
        .unwrap();
    }
}
