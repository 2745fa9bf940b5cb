//! HTTP/2 state kept beside the connection table: each HTTP/2 connection's codec
//! ([`c1m_proto::h2::Connection`]) and its streams, and for each request stream the bridge
//! that turns the HTTP/1.1 answer the worker writes into HEADERS and DATA frames.
//!
//! # Why streams are connections of their own
//! A request stream is given a slot in the connection table like an HTTP/1.1 connection
//! (a [`super::conn::Conn`] marked [`super::conn::H2_STREAM`]), so routing, auth, CORS, limits,
//! channel membership, fan-out, heartbeats, replay, timers and counters are the same code for
//! both: HTTP/2 is a framing, not a second server. What differs is only the byte path: a
//! stream's [`super::conn::ConnMut`] sends through [`StreamIo`] into the codec, whose output the
//! worker writes to the parent socket once per loop turn ([`H2State::dirty`]). The codec and the
//! per-stream records live here, in side maps keyed by token, so an HTTP/1.1 connection pays
//! nothing for HTTP/2 (its `Conn` stays 32 bytes). A stream's slot holds a duplicate of the
//! parent's descriptor (one descriptor table entry, the same open socket) because `Conn` owns a
//! socket; nothing reads or writes through it, and it is never registered with epoll.
//!
//! The answer bridge ([`Bridge`]) reads the response head the worker wrote (status and fields,
//! connection-specific ones dropped), then passes the body on as DATA: `Content-Length` bytes,
//! or, for a close-delimited body (SSE), every later send until the stream's slot is removed,
//! which then ends the stream (END_STREAM) or, when it was dropped for falling behind or its
//! answer was cut short, resets it.
//!
//! # WebSocket over HTTP/2 (RFC 8441)
//! Every connection advertises SETTINGS_ENABLE_CONNECT_PROTOCOL. An extended CONNECT with
//! `:protocol websocket` on a `/sub/` path is handed to the worker as the HTTP/1.1 upgrade
//! request it stands for ([`websocket_request`]: `GET`, `Upgrade`, `Connection` and a fixed
//! `Sec-WebSocket-Key`, since RFC 8441 §5 drops the key), so the same validation (version,
//! Origin), auth, CORS, publish rule and subscribe path as HTTP/1.1 judge it. Its slot becomes a
//! WebSocket like any other; its bridge is marked `websocket`, turns the worker's `101` into
//! `:status 200` without `Sec-WebSocket-Accept`, and then carries the frames as DATA until the
//! slot goes (END_STREAM after a close frame, RST_STREAM when it failed). The client's DATA on
//! the stream are WebSocket frames, decoded by the same `ws_input` as a socket's reads; its
//! END_STREAM is the TCP end-of-file of RFC 6455.
//!
//! Cost per WebSocket stream: nothing beyond an SSE stream's (a 32-byte slot, the 40-byte
//! [`Child`], the codec's 32-byte stream and a (id, token) pair): the `websocket` mark fits in
//! the bridge's padding, and the frame decoder's state is kept in the slot's side box only while
//! a client message is half-read, as on HTTP/1.1. Measured with bench/h2-memory.sh's method
//! (serve's PSS, streams held by python-h2, 500 connections × 1 and × 20 idle streams): 223-227
//! bytes per further WebSocket stream, 204 per further SSE stream in the same runs.

use super::conn::Sent;
use c1m_proto::h2::{self, ErrorCode, SendError};
use std::collections::HashMap;

/// Largest response head the bridge collects (the worker's own heads are far smaller).
const MAX_RESPONSE_HEAD: usize = 16 * 1024;
/// Per-stream DATA held for a peer whose window is shut, at most (and never more than
/// `--max-unsent`): well below the connection's output bound, so one stalled stream is reset
/// as a slow consumer before it can hold up its siblings.
pub const STREAM_QUEUE_MAX: usize = 256 * 1024;
/// The connection's output plus held DATA, at most (the codec refuses sends past it).
pub const CONN_OUTPUT_MAX: u32 = 1024 * 1024;

/// HTTP/2 counters of one worker beyond the codec's own.
#[derive(Default, Clone, Copy)]
pub struct StreamCounters {
    /// Streams reset because their DATA could not be queued (window shut, output bound).
    pub slow_streams: u64,
    /// HTTP/2 connections started (ALPN h2 or h2c prior knowledge).
    pub connections: u64,
    /// Request streams served (each one a request as HTTP/1.1 would have it).
    pub streams: u64,
    /// WebSocket streams opened (extended CONNECT answered 200).
    pub websocket_streams: u64,
    /// CONNECT requests refused: no `:protocol`, one other than `websocket`, or a path that
    /// serves no WebSocket.
    pub connect_refused: u64,
}

/// Every HTTP/2 connection and stream of the worker.
#[derive(Default)]
pub struct H2State {
    /// HTTP/2 connections by their token.
    pub parents: HashMap<u64, Box<Parent>>,
    /// Request streams by their slot's token.
    pub children: HashMap<u64, Child>,
    /// Parents whose codec has output to write (each listed once: [`Parent::dirty`]).
    pub dirty: Vec<u64>,
    /// Streams whose answer is complete: their slots are removed at the end of the turn.
    pub finished: Vec<u64>,
    /// Sums of the codecs' counters.
    pub codec: h2::Counters,
    pub counters: StreamCounters,
    /// When the codecs next start a new rate window (set by the first HTTP/2 connection).
    pub next_tick: Option<std::time::Instant>,
}

/// One HTTP/2 connection.
pub struct Parent {
    pub conn: h2::Connection,
    /// Open streams: (stream id, token of its slot).
    pub streams: Vec<(u32, u64)>,
    /// Requests whose body is still arriving: (stream id, HTTP/1.1 head, body so far).
    pub bodies: Vec<(u32, Vec<u8>, Vec<u8>)>,
    /// Listed in [`H2State::dirty`].
    pub dirty: bool,
}

/// One request stream: where its answer goes.
pub struct Child {
    pub parent: u64,
    pub stream: u32,
    bridge: Bridge,
}

/// Where the bridge is in the answer.
enum Phase {
    /// Collecting the response head (boxed: the head is only collected for a moment, and an
    /// inline `Vec` would make every held stream's record 16 bytes larger).
    #[allow(clippy::box_collection)]
    Head(Box<Vec<u8>>),
    /// Body bytes still owed by Content-Length.
    Length(u64),
    /// Close-delimited body: until the slot is removed.
    UntilEnd,
    /// The answer is complete.
    Done,
}

struct Bridge {
    phase: Phase,
    /// Refused for falling behind (or the connection failed): reset, not ended, at removal.
    failed: bool,
    /// An extended CONNECT (RFC 8441): the worker's `101` is answered as `200`.
    websocket: bool,
}

// Every held stream has one record in `H2State::children`: keep it small.
const _: () = assert!(std::mem::size_of::<Child>() <= 40);

impl H2State {
    /// The worker's HTTP/2 figures for the master (totals since the worker started).
    pub fn stats(&self) -> crate::ipc::H2Stats {
        let (c, s) = (&self.codec, &self.counters);
        crate::ipc::H2Stats {
            connections: s.connections,
            streams: s.streams,
            slow_streams: s.slow_streams,
            websocket_streams: s.websocket_streams,
            connect_refused: s.connect_refused,
            rapid_reset: c.rapid_reset.into(),
            continuation_flood: c.continuation_flood.into(),
            control_flood: c.control_flood.into(),
            header_list_too_large: c.header_list_too_large.into(),
            refused_streams: c.refused_streams.into(),
            malformed_requests: c.malformed_requests.into(),
            connection_errors: c.connection_errors.into(),
            stream_errors: c.stream_errors.into(),
            output_full: c.output_full.into(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.parents.is_empty() && self.children.is_empty()
    }

    /// Starts the codec for a connection that speaks HTTP/2.
    pub fn add_parent(&mut self, token: u64, max_streams: u32) {
        let config = h2::Config {
            max_concurrent_streams: max_streams,
            enable_connect_protocol: true,
            ..h2::Config::default()
        };
        let limits = h2::Limits {
            max_output: CONN_OUTPUT_MAX,
            ..h2::Limits::default()
        };
        let mut parent = Box::new(Parent {
            conn: h2::Connection::new(config, limits),
            streams: Vec::new(),
            bodies: Vec::new(),
            dirty: false,
        });
        mark_dirty(&mut self.dirty, token, &mut parent);
        self.parents.insert(token, parent);
        self.counters.connections += 1;
    }

    /// Records a stream's slot; `websocket`: it answers an extended CONNECT.
    pub fn add_child(&mut self, token: u64, parent: u64, stream: u32, websocket: bool) {
        if let Some(p) = self.parents.get_mut(&parent) {
            // One slot at a time (a doubling Vec held 4 for a connection's one stream).
            p.streams.reserve_exact(1);
            p.streams.push((stream, token));
        }
        self.counters.streams += 1;
        self.children.insert(
            token,
            Child {
                parent,
                stream,
                bridge: Bridge {
                    phase: Phase::Head(Box::default()),
                    failed: false,
                    websocket,
                },
            },
        );
    }

    /// The slot token of `stream` on `parent`.
    pub fn child_of(&self, parent: u64, stream: u32) -> Option<u64> {
        let p = self.parents.get(&parent)?;
        p.streams.iter().find(|s| s.0 == stream).map(|s| s.1)
    }

    /// Whether the stream in slot `token` is a WebSocket (an extended CONNECT).
    pub fn is_websocket(&self, token: u64) -> bool {
        self.children
            .get(&token)
            .is_some_and(|c| c.bridge.websocket)
    }

    /// Every stream slot of `parent`.
    pub fn children_of(&self, parent: u64) -> Vec<u64> {
        self.parents
            .get(&parent)
            .map_or_else(Vec::new, |p| p.streams.iter().map(|s| s.1).collect())
    }

    /// A slot is being removed: a stream's answer is ended or reset, a connection's codec is
    /// dropped (its streams were removed before it, by the worker).
    pub fn remove(&mut self, token: u64) {
        if let Some(mut p) = self.parents.remove(&token) {
            self.codec.add(&p.conn.take_counters());
            self.dirty.retain(|&t| t != token);
            return;
        }
        let Some(child) = self.children.remove(&token) else {
            return;
        };
        let Some(p) = self.parents.get_mut(&child.parent) else {
            return;
        };
        p.streams.retain(|s| s.1 != token);
        let conn = &mut p.conn;
        match child.bridge.phase {
            Phase::Done => {}
            Phase::UntilEnd if !child.bridge.failed => {
                // Ends like a close-delimited HTTP/1.1 body: a clean end for the client.
                if conn.send_data(child.stream, &[], true).is_err() {
                    conn.reset(child.stream, ErrorCode::CANCEL);
                }
            }
            _ => conn.reset(child.stream, ErrorCode::CANCEL),
        }
        mark_dirty(&mut self.dirty, child.parent, p);
    }

    /// The byte path of the stream in slot `token`, for [`super::conn::ConnMut`].
    pub fn io(&mut self, token: u64) -> StreamIo<'_> {
        StreamIo { state: self, token }
    }
}

fn mark_dirty(dirty: &mut Vec<u64>, token: u64, parent: &mut Parent) {
    if !parent.dirty {
        parent.dirty = true;
        dirty.push(token);
    }
}

/// A stream's byte path: what the worker sends it goes through its answer bridge into the
/// parent's codec.
pub struct StreamIo<'a> {
    state: &'a mut H2State,
    token: u64,
}

impl StreamIo<'_> {
    /// Sends HTTP/1.1 answer bytes as frames. `max_unsent` caps the DATA the stream may hold
    /// for the peer's window (with [`STREAM_QUEUE_MAX`]) as it caps a socket's queue.
    pub fn send(&mut self, data: &[u8], max_unsent: usize) -> Sent {
        let state = &mut *self.state;
        let Some(child) = state.children.get_mut(&self.token) else {
            return Sent::Failed;
        };
        let Some(parent) = state.parents.get_mut(&child.parent) else {
            return Sent::Failed;
        };
        let cap = max_unsent.min(STREAM_QUEUE_MAX);
        let was_head = matches!(child.bridge.phase, Phase::Head(_));
        let sent = child.bridge.push(data, &mut parent.conn, child.stream, cap);
        if was_head && child.bridge.websocket && matches!(child.bridge.phase, Phase::UntilEnd) {
            state.counters.websocket_streams += 1;
        }
        match sent {
            Sent::Done => {}
            Sent::Overflow => {
                // Counted once: a WebSocket's close frame, tried after the refusal, is refused
                // again by the same stream.
                if !std::mem::replace(&mut child.bridge.failed, true) {
                    state.counters.slow_streams += 1;
                }
            }
            Sent::Failed => child.bridge.failed = true,
        }
        if matches!(child.bridge.phase, Phase::Done) {
            state.finished.push(self.token);
        }
        mark_dirty(&mut state.dirty, child.parent, parent);
        sent
    }
}

impl Bridge {
    fn push(&mut self, data: &[u8], conn: &mut h2::Connection, stream: u32, cap: usize) -> Sent {
        match &mut self.phase {
            Phase::Head(buf) => {
                buf.extend_from_slice(data);
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    if buf.len() > MAX_RESPONSE_HEAD {
                        return Sent::Failed;
                    }
                    return Sent::Done;
                };
                let rest = buf.split_off(end + 4);
                let head = std::mem::take(&mut **buf);
                let Some((mut status, mut fields, length)) = parse_head(&head) else {
                    return Sent::Failed;
                };
                if self.websocket {
                    match status {
                        // RFC 8441 §5: success is 200, and no key was sent to be answered.
                        101 => {
                            status = 200;
                            fields.retain(|f| f.0 != "sec-websocket-accept");
                        }
                        // A client would take any 2xx for an open WebSocket.
                        200..=299 => return Sent::Failed,
                        _ => {}
                    }
                }
                if status == 100 {
                    // `100 Continue` answers HTTP/1.1's Expect; the body is all here already.
                    return self.push(&rest, conn, stream, cap);
                }
                let body_less = matches!(status, 204 | 304) || length == Some(0);
                let refs: Vec<(&str, &[u8])> =
                    fields.iter().map(|(n, v)| (n.as_str(), &v[..])).collect();
                if let Err(e) = conn.send_headers(stream, status, &refs, body_less) {
                    return refused(e);
                }
                self.phase = match length {
                    _ if body_less => Phase::Done,
                    Some(n) => Phase::Length(n),
                    None => Phase::UntilEnd,
                };
                if rest.is_empty() {
                    return Sent::Done;
                }
                self.push(&rest, conn, stream, cap)
            }
            Phase::Length(left) => {
                let n = data.len().min(*left as usize);
                let last = n as u64 == *left;
                if let Err(e) = conn.send_data(stream, &data[..n], last) {
                    return refused(e);
                }
                *left -= n as u64;
                if last {
                    self.phase = Phase::Done;
                }
                Sent::Done
            }
            Phase::UntilEnd => {
                if conn.queued(stream).unwrap_or(0) > cap {
                    return Sent::Overflow;
                }
                match conn.send_data(stream, data, false) {
                    Ok(()) => Sent::Done,
                    Err(e) => refused(e),
                }
            }
            Phase::Done => Sent::Done,
        }
    }
}

fn refused(e: SendError) -> Sent {
    match e {
        SendError::Full => Sent::Overflow,
        _ => Sent::Failed,
    }
}

/// Fields that mean something only to one HTTP/1.1 connection (RFC 9113 §8.2.2).
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Response fields: lowercase names and their values.
type Fields = Vec<(String, Vec<u8>)>;

/// Status, fields (lowercase names, connection-specific ones dropped) and Content-Length of
/// an HTTP/1.1 response head the worker wrote.
fn parse_head(head: &[u8]) -> Option<(u16, Fields, Option<u64>)> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let status = resp.code?;
    let mut length = None;
    let mut fields = Vec::new();
    for h in resp.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if CONNECTION_SPECIFIC.contains(&name.as_str()) {
            continue;
        }
        if name == "content-length" {
            length = std::str::from_utf8(h.value).ok()?.trim().parse().ok();
        }
        fields.push((name, h.value.to_vec()));
    }
    Some((status, fields, length))
}

/// The HTTP/1.1 request head the worker parses for an HTTP/2 request (the body, whole, follows
/// it with the Content-Length given here).
pub fn request_head(req: &h2::Request) -> Vec<u8> {
    let mut head = Vec::with_capacity(256);
    let path = req.path.as_deref().unwrap_or("/");
    head.extend_from_slice(req.method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(path.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(host) = &req.authority {
        if req.header("host").is_none() {
            head.extend_from_slice(b"host: ");
            head.extend_from_slice(host.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
    }
    for (name, value) in &req.headers {
        if name == "content-length" {
            continue;
        }
        head.extend_from_slice(name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n");
    }
    head
}

/// Any base64 of 16 bytes: RFC 8441 §5 drops the key, and the `Sec-WebSocket-Accept` the
/// worker computes from it is removed from the answer.
const WEBSOCKET_KEY: &[u8] = b"AAAAAAAAAAAAAAAAAAAAAA==";

/// The HTTP/1.1 upgrade request an extended CONNECT with `:protocol websocket` stands for
/// (RFC 8441 §4-5), whole: the worker's WebSocket path validates and answers it.
pub fn websocket_request(req: &h2::Request) -> Vec<u8> {
    let mut get = req.clone();
    get.method = "GET".into();
    get.headers
        .retain(|(n, _)| n != "sec-websocket-key" && n != "content-length");
    let mut head = request_head(&get);
    head.extend_from_slice(b"upgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-key: ");
    head.extend_from_slice(WEBSOCKET_KEY);
    head.extend_from_slice(b"\r\n");
    request_bytes(head, &[], false)
}

/// Ends a request head with the body's length, then the body.
pub fn request_bytes(mut head: Vec<u8>, body: &[u8], method_has_body: bool) -> Vec<u8> {
    if method_has_body || !body.is_empty() {
        head.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(body);
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads_lose_connection_fields_and_keep_the_rest() {
        let (status, fields, len) = parse_head(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 3\r\n\r\n",
        )
        .unwrap();
        assert_eq!(status, 200);
        assert_eq!(len, Some(3));
        let names: Vec<&str> = fields.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["content-type", "content-length"]);
    }

    #[test]
    fn an_extended_connect_becomes_the_http1_upgrade_it_stands_for() {
        let req = h2::Request {
            method: "CONNECT".into(),
            scheme: Some("https".into()),
            authority: Some("example".into()),
            path: Some("/sub/a".into()),
            protocol: Some("websocket".into()),
            headers: vec![
                ("sec-websocket-version".into(), b"13".to_vec()),
                ("sec-websocket-key".into(), b"client's own".to_vec()),
            ],
            ..Default::default()
        };
        let bytes = websocket_request(&req);
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Request::new(&mut headers);
        assert!(parsed.parse(&bytes).unwrap().is_complete());
        assert_eq!((parsed.method, parsed.path), (Some("GET"), Some("/sub/a")));
        let keys: Vec<&[u8]> = parsed
            .headers
            .iter()
            .filter(|h| h.name == "sec-websocket-key")
            .map(|h| h.value)
            .collect();
        assert_eq!(keys, [WEBSOCKET_KEY], "one key, not the client's");
    }

    #[test]
    fn a_request_becomes_the_same_http1_request() {
        let req = h2::Request {
            method: "POST".into(),
            scheme: Some("https".into()),
            authority: Some("example:8080".into()),
            path: Some("/pub/a?x=1".into()),
            headers: vec![
                ("authorization".into(), b"Bearer t".to_vec()),
                ("content-length".into(), b"2".to_vec()),
            ],
            ..Default::default()
        };
        let bytes = request_bytes(request_head(&req), b"hi", true);
        assert_eq!(
            bytes,
            b"POST /pub/a?x=1 HTTP/1.1\r\nhost: example:8080\r\nauthorization: Bearer t\r\ncontent-length: 2\r\n\r\nhi"
        );
    }
}
