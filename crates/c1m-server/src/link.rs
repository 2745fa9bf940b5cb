//! A framed, non-blocking Unix stream between master and a worker: whole frames out through a
//! bounded buffer, whole frames in. Both sides register it with their mio loop.

use crate::ipc::MAX_FRAME;
use mio::net::UnixStream;
use std::io::{self, Read, Write};

/// Unsent bytes a link may hold before the peer counts as stuck. Publishes to a stuck worker
/// are dropped (and counted) rather than queued without bound.
pub const MAX_BUFFERED: usize = 256 * 1024 * 1024;

pub struct Link {
    pub stream: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    out_pos: usize,
}

impl Link {
    pub fn new(stream: UnixStream) -> Link {
        Link {
            stream,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            out_pos: 0,
        }
    }

    /// Queues an encoded frame and tries to send. Returns false (frame dropped) when the
    /// buffer is over [`MAX_BUFFERED`].
    pub fn send(&mut self, frame: Vec<u8>) -> io::Result<bool> {
        if self.outbuf.len() - self.out_pos > MAX_BUFFERED {
            return Ok(false);
        }
        if self.outbuf.is_empty() {
            self.outbuf = frame;
        } else {
            self.outbuf.extend_from_slice(&frame);
        }
        self.flush()?;
        Ok(true)
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
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    open = false;
                    break;
                }
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
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
