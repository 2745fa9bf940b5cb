//! The control socket between the two masters of a live upgrade: length-prefixed frames of
//! the hand-over format, bounded by `MAX_CONTROL`. The old master's end ([`Ctl`]) is
//! non-blocking and stepped by its loop; the new master's end is blocking with a deadline
//! ([`write_msg`], [`read_msg`], [`bound`]).

use super::MAX_CONTROL;
use anyhow::{bail, Context};
use c1m_proto::handover::Control;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// The old master's end of the control socket: non-blocking, length-prefixed frames (the
/// same framing as [`write_msg`] / [`read_msg`] on the new master's blocking end).
pub(super) struct Ctl {
    pub(super) stream: mio::net::UnixStream,
    out: Vec<u8>,
    out_pos: usize,
    inbuf: Vec<u8>,
    closed: bool,
}

impl Ctl {
    pub(super) fn new(stream: mio::net::UnixStream) -> Ctl {
        Ctl {
            stream,
            out: Vec::new(),
            out_pos: 0,
            inbuf: Vec::new(),
            closed: false,
        }
    }

    pub(super) fn send(&mut self, msg: &Control) -> anyhow::Result<()> {
        let body = msg.encode();
        self.out
            .extend_from_slice(&(body.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&body);
        self.flush()
    }

    /// Writes what the socket takes now; the loop calls again when it is writable.
    pub(super) fn flush(&mut self) -> anyhow::Result<()> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => bail!("writing to the new master: it closed the control socket"),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("writing to the new master"),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    pub(super) fn pending(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// The next whole message from the new master, if one has arrived.
    pub(super) fn receive(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        let mut buf = [0u8; 4096];
        while !self.closed {
            match self.stream.read(&mut buf) {
                Ok(0) => self.closed = true,
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the new master"),
            }
        }
        if self.inbuf.len() >= 4 {
            let len = u32::from_le_bytes(self.inbuf[..4].try_into().expect("4 bytes")) as usize;
            if len > MAX_CONTROL {
                bail!("control message of {len} bytes refused");
            }
            if self.inbuf.len() >= 4 + len {
                let body = self.inbuf[4..4 + len].to_vec();
                self.inbuf.drain(..4 + len);
                return Ok(Some(body));
            }
        }
        if self.closed {
            bail!("the new master closed the control socket");
        }
        Ok(None)
    }
}

pub(super) fn write_msg(s: &mut UnixStream, msg: &Control) -> anyhow::Result<()> {
    let body = msg.encode();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    s.write_all(&frame).context("writing to the other master")
}

pub(super) fn read_msg(s: &mut UnixStream) -> anyhow::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .context("reading from the other master (gone or too slow)")?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_CONTROL {
        bail!("control message of {len} bytes refused");
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .context("reading from the other master (gone or too slow)")?;
    Ok(body)
}

pub(super) fn bound(s: &UnixStream, deadline: Instant) -> anyhow::Result<()> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    s.set_write_timeout(Some(left))?;
    Ok(())
}
