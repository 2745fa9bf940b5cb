//! A connection's readiness: flush what it owes when writable (and go on with what waited
//! for that), read to WouldBlock (or to a short read, see [`ReadUntil`]) when readable, and
//! hand the input to its protocol.

use super::conn::{self, Kind};
use super::requests;
use super::Worker;
use std::io;

/// How far one pass of reads on a readable socket goes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum ReadUntil {
    /// To WouldBlock: bytes may be waiting that no new event will announce (a resumed read, a
    /// connection taken over from another process).
    WouldBlock,
    /// Also stop at a read that left room in the buffer, on a plaintext socket that epoll has
    /// just reported readable and neither closed nor in error. Such a read drained the socket,
    /// and bytes or a FIN arriving later raise a new edge (epoll(7) on stream sockets), so the
    /// read that would return WouldBlock is a system call for nothing: one per request on a
    /// subscribe or a keep-alive publish. TLS input is read to WouldBlock (the session
    /// buffers records, so a short plaintext read says nothing about the socket).
    ShortRead,
}

impl ReadUntil {
    /// What an epoll event allows: a short read ends the pass unless the peer closed or the
    /// socket is in error (then the read to EOF or to the error must happen now).
    pub(super) fn for_event(event: &mio::event::Event) -> ReadUntil {
        if event.is_read_closed() || event.is_error() {
            ReadUntil::WouldBlock
        } else {
            ReadUntil::ShortRead
        }
    }
}

impl Worker {
    pub(super) fn on_conn_event(
        &mut self,
        token: u64,
        readable: bool,
        writable: bool,
        until: ReadUntil,
    ) {
        let Some((idx, mut conn)) = self.conns.by_token(token) else {
            return;
        };
        if conn.kind == Kind::H2 {
            if writable {
                self.h2_flush(idx);
            }
            if readable {
                self.on_readable(idx, until);
            }
            return;
        }
        if writable && !conn.has_out() {
            // TLS handshake bytes the socket refused earlier.
            if let Err(e) = conn.flush_tls() {
                self.count_lost_peer(&e);
                return self.close(idx);
            }
        }
        if writable && conn.has_out() {
            match conn.flush() {
                Ok(true) if conn.kind == Kind::Closing => return self.close(idx),
                Ok(true) if conn.kind.is_joining() => self.continue_replay(idx),
                // Pipelined requests wait while answers are unwritten (requests::process_input).
                Ok(true) if conn.kind == Kind::Http => self.resume_input(idx),
                Ok(_) => {}
                Err(e) => {
                    self.count_lost_peer(&e);
                    return self.close(idx);
                }
            }
        }
        if readable {
            self.on_readable(idx, until);
        }
    }

    /// Reads until WouldBlock (or a short read, `until`): with edge-triggered epoll, bytes
    /// left unread get no new event.
    /// Kinds that expect input accumulate it; streams discard it. Input is used as it arrives
    /// (pipelined requests are answered while the rest is read), so the buffer stays within
    /// `input_limit`. The one exception to reading to WouldBlock: a full buffer that the
    /// connection cannot use yet (its request waits for the master, or its answers wait for the
    /// peer to read). Then reading stops, TCP flow control holds the rest in the peer, and the
    /// connection is marked READ_PAUSED so `resume_input` reads on when it can go on.
    /// Input kept from earlier events is read on in its own buffer (nothing copied); otherwise
    /// the worker's scratch buffer takes the reads and only a leftover tail is copied out.
    pub(super) fn on_readable(&mut self, idx: usize, until: ReadUntil) {
        if self.handover.frozen {
            return; // read after an abort, or by the new worker
        }
        let Some(mut conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.flags &= !conn::READ_PAUSED;
        let (mut buf, scratch) = match conn.take_inbuf() {
            Some(pending) => (pending, false),
            None => (conn::Input::new(std::mem::take(&mut self.scratch)), true),
        };
        let limit = requests::input_limit(&self.cfg);
        let mut eof = false;
        let mut error = None;
        while let Some(kind) = self.conns.get(idx).map(|c| c.kind) {
            // A WebSocket whose publish waits for the proxy reads no further frames meanwhile:
            // its input piles up to the limit like a request's, then reading pauses.
            let held = kind == Kind::Ws && self.conns[idx].edge & conn::PROXY_PENDING != 0;
            if buf.len() >= limit
                && keeps_input(kind)
                && (held || !matches!(kind, Kind::Ws | Kind::H2))
            {
                let used = self.process_input(idx, buf.unused());
                buf.consume(used);
                match self.conns.get_mut(idx) {
                    None => break,
                    Some(c) if c.kind == Kind::Closing => break,
                    Some(mut c) if buf.len() >= limit && keeps_input(c.kind) => {
                        c.flags |= conn::READ_PAUSED;
                        break;
                    }
                    Some(_) => continue,
                }
            }
            let Some(mut conn) = self.conns.get_mut(idx) else {
                break;
            };
            let old = buf.len();
            let asked = self.reads.size();
            let stop_short = until == ReadUntil::ShortRead && conn.reads_socket_directly();
            let room = buf.for_append(asked);
            let got = self.reads.append(room, |dst| conn.read(dst));
            let drained = stop_short && matches!(got, Ok(n) if n > 0 && n < asked);
            match got {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(_) if kind == Kind::Ws => {
                    // Frames are decoded as they arrive, so a large message never piles up and
                    // the socket is always read to WouldBlock (edge-triggered).
                    let used = self.ws_input(idx, buf.unused_mut());
                    buf.consume(used);
                    if self.conns.get(idx).is_none_or(|c| c.kind != Kind::Ws) {
                        break;
                    }
                }
                Ok(_) if kind == Kind::H2 => {
                    // Frames go to the codec as they arrive, like WebSocket frames.
                    let used = self.h2_input(idx, buf.unused());
                    buf.consume(used);
                    if self.conns.get(idx).is_none_or(|c| c.kind != Kind::H2) {
                        break;
                    }
                }
                Ok(_) if keeps_input(kind) => {}
                Ok(_) => buf.truncate(old), // a stream's input is discarded
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eof = true;
                    error = Some(e);
                    break;
                }
            }
            if drained {
                break;
            }
        }
        let kind = self.conns.get(idx).map(|c| c.kind);
        if kind.is_some_and(keeps_input) && !buf.is_empty() {
            // WebSocket input was decoded while reading; what is left is an unfinished tail.
            if !matches!(kind, Some(Kind::Ws | Kind::H2)) {
                let used = self.process_input(idx, buf.unused());
                buf.consume(used);
            }
        }
        let keep = self
            .conns
            .get(idx)
            .is_some_and(|c| keeps_input(c.kind) && !buf.is_empty());
        if !scratch {
            if keep {
                self.conns.at(idx).keep_inbuf(buf);
            }
        } else {
            if keep {
                self.conns.at(idx).set_inbuf(buf.unused());
                // Nothing was kept before: these are the first bytes of a new request.
                self.next_request_started(idx);
            }
            let mut buf = buf.into_cleared();
            if buf.capacity() > 256 * 1024 {
                buf = Vec::with_capacity(64 * 1024);
            }
            self.scratch = buf;
        }
        if eof {
            self.on_peer_end(idx, error.as_ref());
        }
    }
}

/// Kinds whose input is kept (requests, WebSocket frames); streams discard what they are sent.
fn keeps_input(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::Sse
            | Kind::SseJoining
            | Kind::SseProxying
            | Kind::TcpStream
            | Kind::TcpJoining
            | Kind::TcpProxying
            | Kind::Closing
    )
}
