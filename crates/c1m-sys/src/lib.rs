//! All Linux specifics behind safe functions: rlimits, socket options, process control,
//! /proc, /sys and /etc readers under a chosen root ([`procfs`]), netlink sock_diag and the
//! io_uring send ring. The only crate allowed `unsafe`; every block carries a `// SAFETY:`
//! note, and every libc call goes through [`cvt`] so errors become `io::Error`.

pub mod bench_sys;
pub mod fd;
pub mod fd_passing;
pub mod mem;
pub mod process;
pub mod procfs;
pub mod rlimit;
pub mod shm;
pub mod sock_diag;
pub mod sockopt;
pub mod uring;

use std::io;

/// Turns a libc return value into `io::Result`, reading errno on -1.
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
