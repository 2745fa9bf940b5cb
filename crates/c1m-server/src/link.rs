//! A framed, non-blocking Unix stream between master and a worker: whole frames out through a
//! bounded buffer, whole frames in. Both sides register it with their mio loop.
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
use std::io::{self, Read, Write};

/// Unsent bytes above which a link is congested and producers are pushed back.
pub const HIGH_WATER: usize = 16 * 1024 * 1024;
/// Unsent bytes at which the peer counts as stuck (no longer reading).
pub const STUCK: usize = 256 * 1024 * 1024;

/// Largest read of the link (see `growing_read`: a quiet link, stats and the odd join, never
/// makes its buffer grow).
const MAX_READ: usize = 64 * 1024;

pub struct Link {
    pub stream: UnixStream,
    inbuf: Vec<u8>,
    reads: GrowingRead,
    outbuf: Vec<u8>,
    out_pos: usize,
}

impl Link {
    pub fn new(stream: UnixStream) -> Link {
        Link {
            stream,
            inbuf: Vec::new(),
            reads: GrowingRead::new(MAX_READ),
            outbuf: Vec::new(),
            out_pos: 0,
        }
    }

    /// Queues an encoded frame and tries to send. Fails when the peer is stuck (the backlog
    /// passed [`STUCK`]) or the socket broke.
    pub fn send(&mut self, frame: Vec<u8>) -> io::Result<()> {
        if self.backlog() > STUCK {
            return Err(io::Error::other(format!(
                "peer stuck: {} bytes unread on the link",
                self.backlog()
            )));
        }
        if self.outbuf.is_empty() {
            self.outbuf = frame;
        } else {
            self.outbuf.extend_from_slice(&frame);
        }
        self.flush()
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

    /// Reads until WouldBlock and calls `on_frame` with every complete frame body.
    /// Returns Ok(false) when the peer closed the link.
    pub fn read_frames(&mut self, mut on_frame: impl FnMut(&[u8])) -> io::Result<bool> {
        let mut open = true;
        loop {
            let stream = &mut self.stream;
            match self.reads.append(&mut self.inbuf, |dst| stream.read(dst)) {
                Ok(0) => {
                    open = false;
                    break;
                }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
