//! All Linux specifics behind safe functions: rlimits, socket options, process control,
//! /proc, /sys and /etc readers under a chosen root ([`procfs`]), netlink sock_diag and the
//! io_uring send ring. The only crate allowed `unsafe`; every block carries a `// SAFETY:`
//! note, and every libc call goes through [`cvt`] so errors become `io::Error`.

// The modules below marked `allow(unsafe_code)` call libc or io_uring directly; the crate
// denies unsafe everywhere else (procfs and sock_diag are plain reads and byte decoding).
#[allow(unsafe_code)]
pub mod bench_sys;
#[allow(unsafe_code)]
pub mod fd;
#[allow(unsafe_code)]
pub mod fd_passing;
#[allow(unsafe_code)]
pub mod mem;
#[allow(unsafe_code)]
pub mod process;
pub mod procfs;
#[allow(unsafe_code)]
pub mod rlimit;
#[allow(unsafe_code)]
pub mod shm;
pub mod sock_diag;
#[allow(unsafe_code)]
pub mod sockopt;
#[allow(unsafe_code)]
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
