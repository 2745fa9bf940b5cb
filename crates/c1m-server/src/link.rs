//! A framed, non-blocking Unix stream between master and a worker: whole frames out through a
//! bounded buffer, whole frames in. Both sides register it with their mio loop, and watch its
//! writable edges only while bytes wait to go out ([`Link::flush_and_watch`]).
//!
//! Nothing is ever dropped here. The bound is kept by the producers: above [`HIGH_WATER`]
//! unsent bytes a link is *congested*, and new work that would add to it is refused at its
//! source (a publish gets 503 with Retry-After, a new subscriber 503, the master stops reading
//! the worker's requests). A link that still grows past [`STUCK`] means the peer stopped
//! reading altogether: `send` fails and the caller treats the peer as dead (loudly), rather
//! than buffering without end or losing a frame in silence.

use crate::growing_read::GrowingRead;
use crate::ipc::MAX_FRAME;
use mio::net::UnixStream;
use mio::{Interest, Registry, Token};
use std::io::{self, Read, Write};

/// Unsent bytes above which a link is congested and producers are pushed back.
pub const HIGH_WATER: usize = 16 * 1024 * 1024;
/// Unsent bytes at which the peer counts as stuck (no longer reading).
pub const STUCK: usize = 256 * 1024 * 1024;

/// Queued bytes past which `send` writes at once instead of waiting for the loop's flush phase
/// (a long turn still keeps the peer busy, and the buffer stays small).
const FLUSH_AT: usize = 64 * 1024;

/// Largest read of the link (see `growing_read`: a quiet link, stats and the odd join, never
/// makes its buffer grow).
const MAX_READ: usize = 64 * 1024;

pub struct Link {
    pub stream: UnixStream,
    inbuf: Vec<u8>,
    reads: GrowingRead,
    outbuf: Vec<u8>,
    out_pos: usize,
    /// The registration includes writable edges (bytes were left unsent at the last flush).
    watching_writable: bool,
}

impl Link {
    pub fn new(stream: UnixStream) -> Link {
        Link {
            stream,
            inbuf: Vec::new(),
            reads: GrowingRead::new(MAX_READ),
            outbuf: Vec::new(),
            out_pos: 0,
            watching_writable: false,
        }
    }

    /// Registers the link with a loop, for reading; writable edges are added by
    /// [`Link::flush_and_watch`] when a flush leaves bytes behind.
    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(&mut self.stream, token, Interest::READABLE)?;
        self.watching_writable = false;
        Ok(())
    }

    /// The loop's flush phase: writes what it can, then makes the registration watch writable
    /// edges exactly while bytes wait. A Unix socket signals writable space each time its
    /// peer reads, so a registration that always watched them would wake this process once
    /// per frame the peer took (a publish's two frames, every worker's figures) for nothing.
    /// Switching costs one `epoll_ctl` per congestion episode, not per frame.
    pub fn flush_and_watch(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        self.flush()?;
        let waiting = self.backlog() > 0;
        if waiting != self.watching_writable {
            let interest = if waiting {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            registry.reregister(&mut self.stream, token, interest)?;
            self.watching_writable = waiting;
        }
        Ok(())
    }

    /// Queues an encoded frame; it is written by the owner loop's flush phase (one write per
    /// turn for all of the turn's frames, instead of one write and one wake-up of the peer per
    /// frame), or at once past [`FLUSH_AT`] queued bytes. Fails when the peer is stuck (the
    /// backlog passed [`STUCK`]) or the socket broke.
    pub fn send(&mut self, frame: Vec<u8>) -> io::Result<()> {
        self.check_stuck()?;
        if self.outbuf.is_empty() {
            self.outbuf = frame;
        } else {
            self.outbuf.extend_from_slice(&frame);
        }
        self.flush_when_full()
    }

    /// As [`Link::send`], for a frame that goes to several links (copied into the queue, no
    /// clone of the frame per link).
    pub fn send_slice(&mut self, frame: &[u8]) -> io::Result<()> {
        self.check_stuck()?;
        self.outbuf.extend_from_slice(frame);
        self.flush_when_full()
    }

    fn check_stuck(&self) -> io::Result<()> {
        if self.backlog() > STUCK {
            return Err(io::Error::other(format!(
                "peer stuck: {} bytes unread on the link",
                self.backlog()
            )));
        }
        Ok(())
    }

    fn flush_when_full(&mut self) -> io::Result<()> {
        if self.backlog() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Bytes queued but not yet taken by the socket.
    pub fn backlog(&self) -> usize {
        self.outbuf.len() - self.out_pos
    }

    /// Above [`HIGH_WATER`]: producers must refuse new work for this link.
    pub fn is_congested(&self) -> bool {
        self.backlog() > HIGH_WATER
    }

    /// Writes what it can; call again when the socket is writable.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.out_pos < self.outbuf.len() {
            match self.stream.write(&self.outbuf[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.outbuf.len() {
            self.outbuf.clear();
            self.out_pos = 0;
        } else if self.out_pos > 1 << 20 {
            self.outbuf.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(())
    }

    /// Reads until the socket is drained and calls `on_frame` with every complete frame body.
    /// Returns Ok(false) when the peer closed the link.
    ///
    /// A read that returns less than it asked for has drained the socket: it stops there
    /// rather than paying one more read for the WouldBlock (the registration is
    /// edge-triggered, and every later write of the peer raises a new edge). The peer's death
    /// is seen through its process (SIGCHLD in the master, PR_SET_PDEATHSIG in a worker) as
    /// well as through the EOF the next read finds.
    pub fn read_frames(&mut self, mut on_frame: impl FnMut(&[u8])) -> io::Result<bool> {
        let mut open = true;
        loop {
            let stream = &mut self.stream;
            let asked = self.reads.size();
            match self.reads.append(&mut self.inbuf, |dst| stream.read(dst)) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) if n < asked => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            self.drain_frames(&mut on_frame)?;
        }
        self.drain_frames(&mut on_frame)?;
        Ok(open)
    }

    fn drain_frames(&mut self, on_frame: &mut impl FnMut(&[u8])) -> io::Result<()> {
        let mut pos = 0;
        while self.inbuf.len() - pos >= 4 {
            let len =
                u32::from_le_bytes(self.inbuf[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            if len > MAX_FRAME {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "ipc frame too large",
                ));
            }
            if self.inbuf.len() - pos - 4 < len {
                break;
            }
            on_frame(&self.inbuf[pos + 4..pos + 4 + len]);
            pos += 4 + len;
        }
        self.inbuf.drain(..pos);
        Ok(())
    }
}

/// Whether a link's readiness event needs a read: data, the peer's close or an error; not a
/// bare writable edge.
pub fn wants_read(event: &mio::event::Event) -> bool {
    event.is_readable() || event.is_read_closed() || event.is_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(byte: u8, len: usize) -> Vec<u8> {
        let mut f = (len as u32).to_le_bytes().to_vec();
        f.extend(std::iter::repeat_n(byte, len));
        f
    }

    #[test]
    fn a_turns_small_frames_wait_for_the_flush_and_go_out_together() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut tx = Link::new(a);
        let mut rx = Link::new(b);
        for i in 0..3 {
            tx.send(frame(i, 100)).unwrap();
        }
        let mut got = Vec::new();
        assert!(rx.read_frames(|f| got.push(f[0])).unwrap());
        assert!(got.is_empty(), "nothing is written before the flush phase");
        assert_eq!(tx.backlog(), 3 * 104);
        tx.flush().unwrap();
        assert_eq!(tx.backlog(), 0);
        assert!(rx.read_frames(|f| got.push(f[0])).unwrap());
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn a_long_turn_writes_once_enough_is_queued() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut tx = Link::new(a);
        let mut rx = Link::new(b);
        let mut sent = 0;
        for _ in 0..1000 {
            tx.send(frame(7, 1000)).unwrap();
            sent += 1;
            if tx.backlog() == 0 {
                break;
            }
        }
        assert_eq!(
            sent,
            FLUSH_AT.div_ceil(1004),
            "the write came at FLUSH_AT bytes"
        );
        let mut n = 0;
        assert!(rx.read_frames(|_| n += 1).unwrap());
        assert_eq!(n, sent);
    }

    #[test]
    fn a_closed_peer_is_seen_after_a_short_read() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut tx = Link::new(a);
        let mut rx = Link::new(b);
        tx.send(frame(1, 10)).unwrap();
        tx.flush().unwrap();
        drop(tx);
        let mut n = 0;
        // The short read stops before the EOF; the next read (the edge the close raised) finds it.
        let first = rx.read_frames(|_| n += 1).unwrap();
        let open = first && rx.read_frames(|_| n += 1).unwrap();
        assert_eq!(n, 1);
        assert!(!open, "the close is seen");
    }

    #[test]
    fn frames_of_any_size_arrive_whole_through_growing_reads() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut tx = Link::new(a);
        let mut rx = Link::new(b);
        let sizes = [10usize, 5000, 200_000, 1, 70_000];
        let mut got = Vec::new();
        for (i, &len) in sizes.iter().enumerate() {
            let mut frame = (len as u32).to_le_bytes().to_vec();
            frame.extend(std::iter::repeat_n(i as u8, len));
            tx.send(frame).unwrap();
            // Alternate: read what is there, then flush the rest (the socket buffer is smaller
            // than the big frames).
            for _ in 0..10_000 {
                assert!(rx
                    .read_frames(|f| got.push((f.len(), f.first().copied())))
                    .unwrap());
                tx.flush().unwrap();
                if got.len() > i {
                    break;
                }
            }
        }
        let want: Vec<_> = sizes
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, Some(i as u8)))
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            rx.reads.size(),
            MAX_READ,
            "a busy link reads in large steps"
        );
    }

    /// The sender's events within `wait`: (readable, writable) seen at all.
    fn events_within(poll: &mut mio::Poll, wait: std::time::Duration) -> (bool, bool) {
        let mut events = mio::Events::with_capacity(8);
        poll.poll(&mut events, Some(wait)).unwrap();
        events.iter().fold((false, false), |(r, w), e| {
            (r || e.is_readable(), w || e.is_writable())
        })
    }

    /// A sending link registered (as `Token(1)`) with its own poll, and its peer.
    fn registered_pair() -> (mio::Poll, Link, Link) {
        let (a, b) = UnixStream::pair().unwrap();
        let poll = mio::Poll::new().unwrap();
        let mut tx = Link::new(a);
        tx.register(poll.registry(), Token(1)).unwrap();
        (poll, tx, Link::new(b))
    }

    #[test]
    fn a_frame_the_peer_reads_does_not_wake_the_sender() {
        let (mut poll, mut tx, mut rx) = registered_pair();
        for i in 0..3 {
            tx.send(frame(i, 100)).unwrap();
            tx.flush_and_watch(poll.registry(), Token(1)).unwrap();
            let mut n = 0;
            assert!(rx.read_frames(|_| n += 1).unwrap());
            assert_eq!(n, 1);
            // The read frees space in the sender's socket; a registration watching writable
            // edges would get one here, a wake-up for nothing.
            let (readable, writable) =
                events_within(&mut poll, std::time::Duration::from_millis(50));
            assert!(!readable && !writable, "frame {i}: the sender was woken");
        }
    }

    #[test]
    fn a_backlog_is_watched_until_it_is_written_then_no_longer() {
        let (mut poll, mut tx, mut rx) = registered_pair();
        // More than the socket takes: bytes are left behind, so writable edges are watched.
        let frames = 40;
        for i in 0..frames {
            tx.send(frame(i as u8, 60_000)).unwrap();
        }
        tx.flush_and_watch(poll.registry(), Token(1)).unwrap();
        assert!(
            tx.backlog() > 0,
            "the socket took everything; the test needs a backlog"
        );
        assert!(tx.watching_writable);
        let mut got = 0;
        for _ in 0..10_000 {
            assert!(rx.read_frames(|_| got += 1).unwrap());
            // The peer's read is announced as a writable edge, and the flush goes on.
            let (_, writable) = events_within(&mut poll, std::time::Duration::from_secs(2));
            assert!(
                writable || tx.backlog() == 0,
                "no writable edge with bytes waiting"
            );
            tx.flush_and_watch(poll.registry(), Token(1)).unwrap();
            if tx.backlog() == 0 {
                break;
            }
        }
        assert_eq!(tx.backlog(), 0);
        assert!(
            !tx.watching_writable,
            "nothing waits: writable edges are no longer watched"
        );
        for _ in 0..10_000 {
            if got == frames {
                break;
            }
            assert!(rx.read_frames(|_| got += 1).unwrap());
        }
        assert_eq!(got, frames);
        let (readable, writable) = events_within(&mut poll, std::time::Duration::from_millis(50));
        assert!(!readable && !writable, "the last reads woke the sender");
    }
}
