//! HTTP/2 on the HTTP listener: which connections speak it (ALPN `h2` on TLS; on plaintext,
//! h2c with prior knowledge: the first bytes are the client preface), the codec driven from the
//! connection's reads and writes, each request stream given a slot of its own and handed to the
//! same request code as HTTP/1.1 (see `h2_streams` for why), and the per-turn work: slots whose
//! answer is complete are removed, codec output is written, rate windows start over each
//! second. `--no-http2` turns both ways in off. An extended CONNECT (RFC 8441) opens a
//! WebSocket on its stream (`h2_streams` says how); any other CONNECT is refused.

use super::conn::{self, Conn, Kind, H2_STREAM, PROXY_PENDING};
use super::h2_streams::{request_bytes, request_head, websocket_request};
use super::{token_of, Worker};
use c1m_proto::h2::{frame::PREFACE, ErrorCode, Event, Request, Scope};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// Streams one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
pub const MAX_STREAMS: u32 = 100;
/// How often each codec starts a new rate window (peer resets per window).
const TICK: Duration = Duration::from_secs(1);

/// Whether a connection's first bytes start HTTP/2.
pub enum Start {
    /// Not HTTP/2: go on as HTTP/1.1.
    No,
    /// A prefix of the preface so far: wait for more.
    NeedMore,
    /// Now an HTTP/2 connection; the bytes it used.
    Started(usize),
}

impl Worker {
    /// A connection's first request: HTTP/2 when TLS negotiated `h2`, or when the plaintext
    /// bytes are the client preface.
    pub(super) fn h2_start(&mut self, idx: usize, data: &[u8]) -> Start {
        let conn = &self.conns[idx];
        if self.cfg.no_http2 || conn.flags & conn::SERVED != 0 || conn.edge & H2_STREAM != 0 {
            return Start::No;
        }
        if !self.conns.tls.negotiated_h2(idx) {
            let n = data.len().min(PREFACE.len());
            if data[..n] != PREFACE[..n] {
                return Start::No;
            }
            if n < PREFACE.len() {
                return Start::NeedMore;
            }
        }
        let token = self.conns.token(idx);
        self.conns.h2.add_parent(token, MAX_STREAMS);
        if self.conns.h2.next_tick.is_none() {
            self.conns.h2.next_tick = Some(Instant::now() + TICK);
        }
        let mut c = self.conns.at(idx);
        c.kind = Kind::H2;
        c.flags |= conn::SERVED;
        // Streams have their own timers; the connection's checks for idleness (`h2_idle_check`).
        self.arm_head_timer(idx);
        Start::Started(self.h2_input(idx, data))
    }

    /// An HTTP/2 connection's timer (every `--head-timeout`): one with no stream open is idle,
    /// as an HTTP/1.1 keep-alive connection with no request would be, and is closed with
    /// GOAWAY(NO_ERROR); one with streams is checked again later.
    pub(super) fn h2_idle_check(&mut self, idx: usize) {
        let token = self.conns.token(idx);
        let Some(p) = self.conns.h2.parents.get_mut(&token) else {
            return;
        };
        if p.streams.is_empty() && p.bodies.is_empty() && p.conn.open_streams() == 0 {
            p.conn.goaway(ErrorCode::NO_ERROR, b"idle");
            return self.h2_flush(idx);
        }
        self.arm_head_timer(idx);
    }

    /// Input on an HTTP/2 connection: frames to the codec, its events to the streams. Returns
    /// the bytes used (the rest is an unfinished frame).
    pub(super) fn h2_input(&mut self, idx: usize, data: &[u8]) -> usize {
        let token = self.conns.token(idx);
        let mut events = Vec::new();
        let Some(p) = self.conns.h2.parents.get_mut(&token) else {
            return data.len();
        };
        let used = p.conn.receive(data, &mut events);
        for ev in events {
            self.h2_event(idx, token, ev);
        }
        self.h2_flush(idx);
        used
    }

    fn h2_event(&mut self, idx: usize, token: u64, ev: Event) {
        match ev {
            Event::Request {
                stream,
                request,
                end_stream,
            } => {
                if request.method == "CONNECT" {
                    return self.h2_connect(idx, token, stream, &request, end_stream);
                }
                let mut head = request_head(&request);
                let has_body = matches!(request.method.as_str(), "POST" | "PUT" | "PATCH");
                if end_stream {
                    let bytes = request_bytes(head, &[], has_body);
                    return self.h2_dispatch(idx, token, stream, bytes, false);
                }
                if let Some(n) = request
                    .content_length
                    .filter(|&n| n > self.cfg.max_payload as u64)
                {
                    // A declared length over the limit is refused (413) now, as HTTP/1.1
                    // refuses it at the head, before the client sends any of the body.
                    head.extend_from_slice(format!("content-length: {n}\r\n\r\n").as_bytes());
                    return self.h2_dispatch(idx, token, stream, head, false);
                }
                if let Some(p) = self.conns.h2.parents.get_mut(&token) {
                    p.bodies.push((stream, head, Vec::new()));
                }
            }
            Event::Data {
                stream,
                data,
                end_stream,
            } => {
                let max = self.cfg.max_payload;
                let Some(p) = self.conns.h2.parents.get_mut(&token) else {
                    return;
                };
                let Some(i) = p.bodies.iter().position(|b| b.0 == stream) else {
                    if let Some(child) = self.conns.h2.child_of(token, stream) {
                        if self.conns.h2.is_websocket(child) {
                            return self.h2_ws_data(child, &data, end_stream);
                        }
                    }
                    return; // answered early (413) and reset: in flight before the client saw it
                };
                p.bodies[i].2.extend_from_slice(&data);
                // Past the payload limit the request goes now: it is refused with 413 by the
                // same check as HTTP/1.1, and no more of it is kept.
                if end_stream || p.bodies[i].2.len() > max {
                    let (_, head, body) = p.bodies.swap_remove(i);
                    let bytes = request_bytes(head, &body, true);
                    self.h2_dispatch(idx, token, stream, bytes, false);
                }
            }
            Event::Reset { stream, .. }
            | Event::StreamError(c1m_proto::h2::H2Error {
                scope: Scope::Stream(stream),
                ..
            }) => self.h2_stream_gone(token, stream),
            Event::StreamError(_) | Event::GoAway { .. } => {}
            Event::ConnectionError(e) => {
                tracing::debug!(error = %e, "HTTP/2 connection error; GOAWAY sent");
                self.close_h2_streams(idx);
            }
        }
    }

    /// The peer reset a stream, or the codec did: its slot goes (leaving its channels).
    fn h2_stream_gone(&mut self, token: u64, stream: u32) {
        if let Some(p) = self.conns.h2.parents.get_mut(&token) {
            p.bodies.retain(|b| b.0 != stream);
        }
        if let Some(child) = self.conns.h2.child_of(token, stream) {
            if let Some((cidx, _)) = self.conns.by_token(child) {
                self.close(cidx);
            }
        }
    }

    /// A CONNECT: with `:protocol websocket` on a `/sub/` path, a WebSocket on this stream
    /// (RFC 8441), judged by the HTTP/1.1 upgrade path; anything else is answered with 405
    /// (plain CONNECT: no proxy here), 400 (another protocol) or 404 (no WebSocket on that
    /// path), counted, and the stream ends.
    fn h2_connect(
        &mut self,
        idx: usize,
        token: u64,
        stream: u32,
        request: &Request,
        end_stream: bool,
    ) {
        let route = request
            .path
            .as_deref()
            .unwrap_or("")
            .split('?')
            .next()
            .unwrap_or("");
        let refusal = match request.protocol.as_deref() {
            None => Some((
                405,
                "CONNECT: this server is not a proxy; a WebSocket over HTTP/2 is an extended CONNECT with :protocol websocket",
            )),
            Some(p) if !p.eq_ignore_ascii_case("websocket") => Some((
                400,
                "extended CONNECT: the only :protocol served is websocket",
            )),
            Some(_) if !route.starts_with("/sub/") => Some((
                404,
                "extended CONNECT: WebSocket is served on /sub/{channel}[,{channel}...] only",
            )),
            Some(_) if end_stream => Some((
                400,
                "extended CONNECT: the request ended its stream, so no WebSocket can follow",
            )),
            Some(_) => None,
        };
        let Some((status, why)) = refusal else {
            return self.h2_dispatch(idx, token, stream, websocket_request(request), true);
        };
        self.conns.h2.counters.connect_refused += 1;
        let r = &mut self.counters.refused;
        match status {
            405 => r.method += 1,
            404 => r.not_found += 1,
            _ => r.bad_request += 1,
        }
        let Some(p) = self.conns.h2.parents.get_mut(&token) else {
            return;
        };
        let body = format!("{why}\n");
        let length = body.len().to_string();
        let mut fields: Vec<(&str, &[u8])> = vec![
            ("content-type", b"text/plain; charset=utf-8"),
            ("content-length", length.as_bytes()),
        ];
        if status == 405 {
            fields.push(("allow", b"GET, POST, OPTIONS"));
        }
        let answered = p.conn.send_headers(stream, status, &fields, false).is_ok()
            && p.conn.send_data(stream, body.as_bytes(), true).is_ok();
        if !answered {
            p.conn.reset(stream, ErrorCode::REFUSED_STREAM);
        }
    }

    /// DATA on a WebSocket stream: frames for the slot's WebSocket, decoded as a socket's
    /// reads are. Frames that come while it cannot take them (its subscription or a publish
    /// still pending) wait in the slot, up to the input limit of a request; a client that sends
    /// more meanwhile is closed with 1008, since its stream's window is not held back as TCP's
    /// would be. END_STREAM is the client's end-of-file: the stream ends.
    fn h2_ws_data(&mut self, child: u64, data: &[u8], end_stream: bool) {
        let Some((cidx, mut c)) = self.conns.by_token(child) else {
            return;
        };
        let mut buf = c.take_inbuf().unwrap_or_default();
        buf.for_append(data.len()).extend_from_slice(data);
        if c.kind == Kind::Ws && c.edge & PROXY_PENDING == 0 {
            let used = self.ws_input(cidx, buf.unused_mut());
            buf.consume(used);
        }
        let limit = super::requests::input_limit(&self.cfg);
        match self.conns.get_mut(cidx) {
            Some(c) if c.kind == Kind::Closing || buf.is_empty() => {}
            Some(_) if buf.len() > limit => {
                self.counters.refused.bad_request += 1;
                self.ws_close(
                    cidx,
                    c1m_proto::ws::close::POLICY_VIOLATION,
                    "too many frames sent before the subscription (or a publish) was answered",
                );
            }
            Some(mut c) => c.keep_inbuf(buf),
            None => return,
        }
        if end_stream && self.conns.contains(cidx) {
            self.close(cidx);
        }
    }

    /// A whole request (as HTTP/1.1 bytes): a slot for its stream, then the HTTP/1.1 request
    /// path. `websocket`: the request is an extended CONNECT's upgrade.
    fn h2_dispatch(
        &mut self,
        idx: usize,
        token: u64,
        stream: u32,
        bytes: Vec<u8>,
        websocket: bool,
    ) {
        let parent = &self.conns[idx];
        let edge = H2_STREAM | (parent.edge & conn::ADMIN);
        let sock = match parent.stream.as_fd().try_clone_to_owned() {
            Ok(fd) => mio::net::TcpStream::from_std(std::net::TcpStream::from(fd)),
            Err(e) => {
                if let Some(held_back) = self.socket_errors.allow(Instant::now()) {
                    tracing::warn!(error = %e, held_back, "no descriptor for an HTTP/2 stream; refused");
                }
                self.counters.refused.fd_limit += 1;
                if let Some(p) = self.conns.h2.parents.get_mut(&token) {
                    p.conn.reset(stream, ErrorCode::REFUSED_STREAM);
                }
                return;
            }
        };
        let generation = self.conns.next_generation();
        let mut c = Conn::new(sock, generation, Kind::Http);
        c.edge = edge;
        let cidx = self.conns.insert(c);
        let child = token_of(cidx, generation);
        self.conns.h2.add_child(child, token, stream, websocket);
        self.process_input(cidx, &bytes);
        // A request that neither answered nor waits for anything (cannot happen for a whole
        // request, but a slot must never be left behind).
        if let Some(c) = self.conns.get(cidx) {
            if c.kind == Kind::Http && c.deadline == 0 && !self.conns.h2.finished.contains(&child) {
                self.close(cidx);
            }
        }
    }

    /// Removes every stream slot of the HTTP/2 connection in `idx` (it is closing).
    pub(super) fn close_h2_streams(&mut self, idx: usize) {
        let token = self.conns.token(idx);
        if let Some(p) = self.conns.h2.parents.get_mut(&token) {
            p.bodies.clear();
        }
        for child in self.conns.h2.children_of(token) {
            if let Some((cidx, _)) = self.conns.by_token(child) {
                self.close(cidx);
            }
        }
    }

    /// Writes the codec's output; closes the connection once the codec is done (after a
    /// GOAWAY) or the socket failed.
    pub(super) fn h2_flush(&mut self, idx: usize) {
        let token = self.conns.token(idx);
        match self.conns.write_h2(idx) {
            Err(e) => {
                self.count_lost_peer(&e);
                self.close(idx);
            }
            Ok(_) => {
                if self
                    .conns
                    .h2
                    .parents
                    .get(&token)
                    .is_some_and(|p| p.conn.is_done())
                {
                    self.close(idx);
                }
            }
        }
    }

    /// Shutdown: each open stream its own goodbye (an SSE stream the `shutdown` event, a
    /// WebSocket close 1001), then GOAWAY(NO_ERROR); the connection closes when the last
    /// stream is gone. Goodbyes first, because a client may stop reading its streams at a
    /// GOAWAY (python-h2 refuses every frame after one), and then never learns why they ended.
    pub(super) fn h2_goodbye(&mut self, idx: usize) {
        let token = self.conns.token(idx);
        for child in self.conns.h2.children_of(token) {
            if let Some((cidx, _)) = self.conns.by_token(child) {
                self.goodbye(cidx);
            }
        }
        self.h2_goaway(idx, b"server shutting down");
    }

    fn h2_goaway(&mut self, idx: usize, why: &[u8]) {
        let token = self.conns.token(idx);
        if let Some(p) = self.conns.h2.parents.get_mut(&token) {
            p.conn.goaway(ErrorCode::NO_ERROR, why);
        }
        self.h2_flush(idx);
    }

    /// A live upgrade committed: HTTP/2 connections were not handed over (no record holds a
    /// codec's state) and end with this worker. They end the way an HTTP/2 server goes away:
    /// each stream its protocol's goodbye (an SSE stream the `shutdown` event, then
    /// END_STREAM), then GOAWAY(NO_ERROR), written before the process exits (best effort: an
    /// idle socket takes these few hundred bytes at once). A client then reconnects at once,
    /// to the new workers (an EventSource resuming with Last-Event-ID), instead of finding its
    /// connection cut without a word.
    pub(super) fn h2_part_for_upgrade(&mut self) {
        let parents: Vec<usize> = self
            .conns
            .slots()
            .into_iter()
            .filter(|&i| self.conns[i].kind == Kind::H2)
            .collect();
        for idx in parents {
            let token = self.conns.token(idx);
            for child in self.conns.h2.children_of(token) {
                if let Some((cidx, _)) = self.conns.by_token(child) {
                    self.goodbye(cidx);
                }
            }
            self.h2_goaway(idx, b"server upgrading");
        }
    }

    /// Once per loop turn: slots whose answer is complete go, codec output is written, and
    /// each second every codec starts a new rate window.
    pub(super) fn h2_turn(&mut self) {
        if self.conns.h2.is_empty() {
            return;
        }
        for child in std::mem::take(&mut self.conns.h2.finished) {
            if let Some((cidx, _)) = self.conns.by_token(child) {
                self.close(cidx);
            }
        }
        let now = Instant::now();
        if self.conns.h2.next_tick.is_some_and(|t| t <= now) {
            self.conns.h2.next_tick = Some(now + TICK);
            let h2 = &mut self.conns.h2;
            for p in h2.parents.values_mut() {
                p.conn.tick();
                h2.codec.add(&p.conn.take_counters());
            }
        }
        for parent in std::mem::take(&mut self.conns.h2.dirty) {
            if let Some((idx, _)) = self.conns.by_token(parent) {
                self.h2_flush(idx);
            }
        }
    }
}
