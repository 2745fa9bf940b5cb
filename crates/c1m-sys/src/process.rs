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

/// A copy of descriptor `fd` of process `pid` (pidfd_getfd, Linux 5.6): the same open file,
/// numbered in this process. Needs ptrace access to `pid` (a parent has it over its own
/// children unless they made themselves non-dumpable).
pub fn fd_of_process(pid: u32, fd: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags (integers) and returns a new descriptor.
    let pidfd = cvt(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32)?;
    // SAFETY: `pidfd` was just returned open and is owned by nothing else.
    let pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: pidfd_getfd takes the pidfd we hold, a descriptor number in the target and
    // flags (integers); it returns a new descriptor (close-on-exec) or an error.
    let raw = cvt(unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            std::os::fd::AsRawFd::as_raw_fd(&pidfd),
            fd,
            0,
        )
    } as i32)?;
    // SAFETY: `raw` was just returned open and is owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
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
    fn a_descriptor_of_a_child_is_copied_into_this_process() {
        use std::io::Read;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The child's stdout is the write end of a pipe whose read end we hold.
        let write_end = super::fd_of_process(child.id(), 1).unwrap();
        let mut file = std::fs::File::from(write_end);
        std::io::Write::write_all(&mut file, b"via the copy").unwrap();
        drop(file);
        child.kill().unwrap();
        child.wait().unwrap();
        let mut got = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut got)
            .unwrap();
        assert_eq!(got, "via the copy");
    }

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
