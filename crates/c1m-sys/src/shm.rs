//! Memory shared by a process and the children it starts: a zero-filled anonymous file
//! (memfd) mapped `MAP_SHARED`, whose descriptor the children inherit across exec and map
//! themselves. It is seen only as atomics, so processes count together without locks and no
//! plain reference ever aliases memory another process writes. Also the clock such counters
//! may share: `CLOCK_MONOTONIC` is one clock for every process on the machine.

use crate::cvt;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// A shared mapping of `len` bytes (a multiple of 8), zero-filled when created.
pub struct SharedMemory {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is only ever handed out as atomics (`u32s`, `u64s`), which are Sync; the
// pointer stays valid until Drop, which needs `&mut self`.
unsafe impl Send for SharedMemory {}
// SAFETY: as above.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// Creates the memory (close-on-exec; see [`crate::fd::set_inheritable`] to pass it on).
    /// Pages are allocated by the kernel only when first touched.
    pub fn create(name: &str, len: usize) -> io::Result<SharedMemory> {
        if len == 0 || !len.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "shared memory length must be a positive multiple of 8",
            ));
        }
        let cname =
            CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a valid NUL-terminated name and flags; returns a new descriptor or -1.
        let raw = cvt(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) })?;
        // SAFETY: memfd_create just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on the descriptor we own; a fresh memfd reads as zeros.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
        SharedMemory::map(fd, len)
    }

    /// Maps memory whose descriptor a parent passed down (see [`crate::fd::adopt_inherited`]);
    /// its size must be `len`.
    pub fn open_inherited(raw: RawFd, len: usize) -> io::Result<SharedMemory> {
        let fd = crate::fd::adopt_inherited(raw)?;
        // SAFETY: fstat writes into the zeroed struct we pass; the descriptor is ours.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
        if st.st_size as u64 != len as u64 || !len.is_multiple_of(8) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "inherited shared memory is {} bytes, expected {len}",
                    st.st_size
                ),
            ));
        }
        SharedMemory::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMemory> {
        // SAFETY: a new shared mapping of a descriptor we own, at an address the kernel picks;
        // the file is `len` bytes long, so every mapped page is backed.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(addr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(SharedMemory { ptr, len, fd })
    }

    /// The descriptor, for passing to a child.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `count` u64 atomics starting `offset` bytes in (offset a multiple of 8, inside).
    pub fn u64s(&self, offset: usize, count: usize) -> &[AtomicU64] {
        assert!(
            offset.is_multiple_of(8) && offset + count * 8 <= self.len,
            "u64s out of range"
        );
        // SAFETY: in bounds and 8-aligned (mmap returns page-aligned memory); the memory lives
        // as long as `self`; it is only ever accessed through atomics, by every process.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset).cast(), count) }
    }

    /// `count` u32 atomics starting `offset` bytes in (offset a multiple of 4, inside).
    pub fn u32s(&self, offset: usize, count: usize) -> &[AtomicU32] {
        assert!(
            offset.is_multiple_of(4) && offset + count * 4 <= self.len,
            "u32s out of range"
        );
        // SAFETY: as for `u64s`, with 4-byte alignment.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset).cast(), count) }
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no slice from `u64s`/`u32s` can
        // outlive `self`, so nothing refers to it any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Microseconds on `CLOCK_MONOTONIC`: the same clock in every process of the machine (unlike
/// `Instant`, which cannot be compared across processes), never stepped by NTP.
pub fn monotonic_micros() -> u64 {
    // SAFETY: zeroed timespec written by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid clock id and pointer; CLOCK_MONOTONIC cannot fail on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn two_mappings_of_one_memfd_see_each_other() {
        let a = SharedMemory::create("c1m-test", 4096).unwrap();
        // SAFETY: dup of a descriptor we own; the copy is handed to open_inherited, which owns it.
        let dup = cvt(unsafe { libc::dup(a.fd().as_raw_fd()) }).unwrap();
        let b = SharedMemory::open_inherited(dup, 4096).unwrap();
        a.u64s(8, 1)[0].store(42, Ordering::Relaxed);
        assert_eq!(b.u64s(8, 1)[0].load(Ordering::Relaxed), 42);
        b.u32s(16, 2)[1].fetch_add(7, Ordering::Relaxed);
        assert_eq!(a.u32s(16, 2)[1].load(Ordering::Relaxed), 7);
        assert_eq!(a.u32s(0, 2)[0].load(Ordering::Relaxed), 0, "zero-filled");
        // SAFETY: as above.
        let dup = cvt(unsafe { libc::dup(a.fd().as_raw_fd()) }).unwrap();
        assert!(SharedMemory::open_inherited(dup, 8192).is_err());
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let t0 = monotonic_micros();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(monotonic_micros() >= t0 + 2000);
    }
}
