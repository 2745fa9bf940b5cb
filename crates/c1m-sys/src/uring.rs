//! Batched socket sends through io_uring: the one `unsafe` piece of the uring send path.
//!
//! [`SendRing::send_all`] takes a batch of (socket, shared bytes), queues one `IORING_OP_SEND`
//! per socket with `MSG_DONTWAIT | MSG_NOSIGNAL`, enters the kernel once per ring-full
//! (thousands of sends per `io_uring_enter`) and returns only after every completion is
//! reaped. `MSG_DONTWAIT` makes the kernel complete a send to a full socket with `-EAGAIN` (or a
//! short count) instead of parking it on a poll, so nothing is ever left in flight: the bytes
//! the kernel reads are borrowed only for the duration of the call, and the caller owns the
//! rest (its out-queue, EPOLLOUT) exactly as with write().
//!
//! Safety argument in one place: the kernel reads `buf` after `io_uring_enter`, so the buffer
//! must outlive the completion. Each entry holds an `Rc<[u8]>` (heap bytes that do not move
//! when the batch `Vec` does) and the batch is borrowed for the whole call; if the ring fails
//! with sends still in flight (never seen: `MSG_DONTWAIT` sends complete inline) the buffers
//! are cloned into `stranded`, kept for the ring's life, and the ring refuses further use.

use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::fd::RawFd;
use std::rc::Rc;

/// How the ring is set up. The flags are the kernel's own (see io_uring_setup(2)); which ones
/// pay is measured in BENCHMARKS.md ("Fan-out with io_uring").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSetup {
    /// Submission queue entries: sends per `io_uring_enter`.
    pub entries: u32,
    pub single_issuer: bool,
    pub defer_taskrun: bool,
    pub coop_taskrun: bool,
}

impl Default for RingSetup {
    fn default() -> Self {
        RingSetup {
            entries: 1024,
            single_issuer: true,
            defer_taskrun: false,
            coop_taskrun: true,
        }
    }
}

/// A ring that only sends. One per worker (single-threaded use: `Rc` keeps it `!Send`).
pub struct SendRing {
    ring: IoUring,
    entries: u32,
    /// Buffers of sends left in flight by a ring failure: kept alive while the kernel may read them.
    stranded: Vec<Rc<[u8]>>,
    broken: bool,
    /// `io_uring_enter` calls made (each one submits up to `entries` sends).
    pub submits: u64,
}

impl SendRing {
    /// Creates the ring and checks that the kernel knows `IORING_OP_SEND`. Fails (with the
    /// kernel's reason) where io_uring is missing, disabled (`kernel.io_uring_disabled`),
    /// filtered by seccomp, or too old.
    pub fn new(setup: RingSetup) -> io::Result<SendRing> {
        let mut b = IoUring::builder();
        // Twice the submission size: completions never overflow even if a batch is reaped late.
        b.setup_cqsize(setup.entries * 2);
        if setup.single_issuer {
            b.setup_single_issuer();
        }
        if setup.defer_taskrun {
            b.setup_defer_taskrun();
        }
        if setup.coop_taskrun {
            b.setup_coop_taskrun();
        }
        let ring = b.build(setup.entries)?;
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        if !probe.is_supported(opcode::Send::CODE) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "io_uring has no IORING_OP_SEND (kernel older than 5.6)",
            ));
        }
        Ok(SendRing {
            ring,
            entries: setup.entries,
            stranded: Vec::new(),
            broken: false,
            submits: 0,
        })
    }

    /// Sends `batch[i].1` to socket `batch[i].0` for every i; `results[i]` gets the send's
    /// result: bytes taken (possibly fewer than asked), or `-errno` (`-EAGAIN`: the socket is
    /// full). Returns only when every send has completed. An `Err` means the ring itself
    /// failed; `results` then holds what completed (entries not reached stay `-ECANCELED`).
    pub fn send_all(
        &mut self,
        batch: &[(RawFd, Rc<[u8]>)],
        results: &mut Vec<i32>,
    ) -> io::Result<()> {
        results.clear();
        results.resize(batch.len(), -libc::ECANCELED);
        if self.broken {
            return Err(io::Error::other("io_uring send ring failed earlier"));
        }
        let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
        let mut start = 0;
        while start < batch.len() {
            let end = (start + self.entries as usize).min(batch.len());
            {
                let mut sq = self.ring.submission();
                for (i, (fd, buf)) in batch.iter().enumerate().take(end).skip(start) {
                    // A send larger than u32 is cut; the rest is a short write the caller queues.
                    let len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
                    let sqe = opcode::Send::new(types::Fd(*fd), buf.as_ptr(), len)
                        .flags(flags)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: the SQE points at `buf`'s heap bytes (an `Rc<[u8]>`, which does
                    // not move) and `batch` stays borrowed until every completion of this chunk
                    // is reaped below (or the buffers are moved to `stranded`). The queue has
                    // room: chunks are at most `entries` long and the previous one was fully
                    // submitted.
                    unsafe { sq.push(&sqe) }
                        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                }
            }
            let want = end - start;
            let mut reaped = 0;
            while reaped < want {
                // Submits whatever is still queued and waits for the rest of this chunk.
                let r = self.ring.submit_and_wait(want - reaped);
                self.submits += 1;
                match r {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {} // reap, then retry
                    Err(e) => {
                        self.strand(batch, start, end, results);
                        return Err(e);
                    }
                }
                for cqe in self.ring.completion() {
                    let i = cqe.user_data() as usize;
                    if let Some(slot) = results.get_mut(i) {
                        *slot = cqe.result();
                        reaped += 1;
                    }
                }
            }
            start = end;
        }
        Ok(())
    }

    /// The ring failed with sends of `batch[start..end]` possibly still in flight: keep their
    /// buffers alive as long as the ring and refuse further use.
    fn strand(&mut self, batch: &[(RawFd, Rc<[u8]>)], start: usize, end: usize, results: &[i32]) {
        self.broken = true;
        for i in start..end {
            if results[i] == -libc::ECANCELED {
                self.stranded.push(batch[i].1.clone());
            }
        }
    }
}

impl Drop for SendRing {
    fn drop(&mut self) {
        if !self.stranded.is_empty() {
            // The kernel may still read them after the ring's fd closes (its cancel runs
            // asynchronously): leak rather than free memory the kernel could read.
            std::mem::forget(std::mem::take(&mut self.stranded));
        }
    }
}

/// Whether this kernel lets this process create an io_uring (for `--io auto`): `Err` carries
/// the reason (e.g. "Operation not permitted" under `kernel.io_uring_disabled=2`).
pub fn probe(setup: RingSetup) -> io::Result<()> {
    SendRing::new(setup).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn sends_reach_the_peers_and_full_sockets_say_eagain() {
        // CI's kernel allows io_uring; a refusal here is a failure, not a skip.
        let mut ring = SendRing::new(RingSetup {
            entries: 4,
            ..RingSetup::default()
        })
        .expect("io_uring ring");
        let pairs: Vec<_> = (0..10).map(|_| UnixStream::pair().unwrap()).collect();
        for (a, _) in &pairs {
            a.set_nonblocking(true).unwrap();
        }
        let msg: Rc<[u8]> = Rc::from(&b"hello"[..]);
        let batch: Vec<_> = pairs
            .iter()
            .map(|(a, _)| (a.as_raw_fd(), msg.clone()))
            .collect();
        let mut results = Vec::new();
        ring.send_all(&batch, &mut results).unwrap();
        assert_eq!(results, vec![5; 10]);
        for (_, b) in &pairs {
            let mut buf = [0u8; 5];
            (&*b).read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"hello");
        }
        // Fill one socket: its send must come back short or -EAGAIN, not block.
        let big: Rc<[u8]> = Rc::from(vec![7u8; 8 << 20]);
        let batch = vec![(pairs[0].0.as_raw_fd(), big.clone())];
        ring.send_all(&batch, &mut results).unwrap();
        assert!(
            results[0] > 0 && (results[0] as usize) < big.len(),
            "{results:?}"
        );
        ring.send_all(&batch, &mut results).unwrap();
        assert_eq!(results[0], -libc::EAGAIN);
        assert!(
            ring.submits >= 4,
            "10 sends in rings of 4 take 3 enters, then 2 more"
        );
    }
}
