//! Client side of the wire protocols bench speaks (docs/PROTOCOL.md): request bytes and
//! incremental parsers for SSE, WebSocket, long-poll and the raw TCP line protocol.
//!
//! No I/O here: a parser gets the bytes received so far and reports events through a callback,
//! returning how many bytes it consumed; the caller keeps the unconsumed tail. A malformed or
//! unexpected answer is a [`ProtoError`] (counted by the worker), never a panic.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which protocol a run speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// Server-sent events: `GET /sub/{ch}` with `Accept: text/event-stream`.
    Sse,
    /// WebSocket: upgrade handshake, then frames.
    Ws,
    /// HTTP long-poll loop with `last_id`.
    Poll,
    /// Raw TCP line protocol (`SUB ch`), address from `--tcp`.
    Tcp,
    /// Plain TCP connect and hold; works against any listener.
    Connect,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Sse => "sse",
            Proto::Ws => "ws",
            Proto::Poll => "poll",
            Proto::Tcp => "tcp",
            Proto::Connect => "connect",
        }
    }
}

/// A protocol violation or refusal by the server; the string is the error kind counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn perr(kind: impl Into<String>) -> ProtoError {
    ProtoError(kind.into())
}

/// Where a connection is in its protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the response head (HTTP) or `OK` line (TCP).
    Head,
    /// Streaming messages.
    Body,
}

/// What a parser found.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The server confirmed the subscription (SSE 200, WS 101, TCP `OK`).
    Online,
    /// One message; `id` is the server's message id when the protocol carries one.
    Message { id: Option<u64>, data: &'a [u8] },
    /// The server says messages were lost to this client.
    Gap,
    /// A long-poll answer is complete; poll again with this last id (if any).
    PollDone { last_id: Option<u64> },
    /// WebSocket ping: answer with a pong carrying this payload.
    Ping(&'a [u8]),
    /// The server ends the stream on purpose (SSE `shutdown`, WS close, TCP `BYE`).
    Closed,
}

/// Anything larger than this without completing a unit is treated as a broken server.
pub const MAX_PENDING: usize = 1 << 20;

const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Request bytes that open a subscription (none for `connect`).
pub fn subscribe_request(
    proto: Proto,
    host: &str,
    path: &str,
    channel: &str,
    last_id: Option<u64>,
    ws_key: &str,
) -> Vec<u8> {
    let mut r = String::with_capacity(256);
    match proto {
        Proto::Sse => {
            r.push_str(&format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n"
            ));
            if let Some(id) = last_id {
                r.push_str(&format!("Last-Event-ID: {id}\r\n"));
            }
            r.push_str("\r\n");
        }
        Proto::Ws => {
            let q = last_id
                .map(|id| format!("?last_id={id}"))
                .unwrap_or_default();
            r.push_str(&format!(
                "GET {path}{q} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {ws_key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ));
        }
        Proto::Poll => {
            let q = last_id
                .map(|id| format!("?last_id={id}"))
                .unwrap_or_default();
            r.push_str(&format!(
                "GET {path}{q} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\r\n"
            ));
        }
        Proto::Tcp => {
            r.push_str(&format!("SUB {channel}"));
            if let Some(id) = last_id {
                r.push_str(&format!(" {id}"));
            }
            r.push('\n');
        }
        Proto::Connect => {}
    }
    r.into_bytes()
}

/// A WebSocket key derived from a number (keys need only be unique-ish, not secret).
pub fn ws_key(seed: u64) -> String {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&seed.to_le_bytes());
    raw[8..].copy_from_slice(&(seed ^ 0x9E37_79B9_7F4A_7C15).to_be_bytes());
    base64(&raw)
}

/// The `Sec-WebSocket-Accept` value a server must answer for `key` (RFC 6455 §4.2.2).
pub fn ws_accept(key: &str) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.as_bytes());
    sha.update(WS_GUID.as_bytes());
    base64(&sha.digest().bytes())
}

fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// A client frame (always masked, RFC 6455 §5.3) with `opcode` and `payload`.
pub fn ws_client_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(payload.len() + 14);
    f.push(0x80 | (opcode & 0x0f));
    let len = payload.len();
    if len < 126 {
        f.push(0x80 | len as u8);
    } else if len <= 0xffff {
        f.push(0x80 | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(len as u64).to_be_bytes());
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// Per-connection context a parser needs beyond the bytes.
pub struct Ctx<'a> {
    pub proto: Proto,
    /// Expected `Sec-WebSocket-Accept` (ws only).
    pub ws_accept: &'a str,
}

/// Parses as much of `buf` as forms complete units; returns the bytes consumed.
pub fn parse(
    ctx: &Ctx<'_>,
    phase: &mut Phase,
    buf: &[u8],
    on: &mut dyn FnMut(Event<'_>),
) -> Result<usize, ProtoError> {
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        if rest.is_empty() {
            return Ok(pos);
        }
        let used = match (ctx.proto, *phase) {
            (Proto::Connect, _) => rest.len(), // bytes from a plain listener are ignored
            (Proto::Sse, Phase::Head) | (Proto::Ws, Phase::Head) => {
                let Some((status, used, accept_ok)) = http_head(rest, ctx.ws_accept)? else {
                    return Ok(pos);
                };
                match (ctx.proto, status) {
                    (Proto::Sse, 200) | (Proto::Ws, 101) => {}
                    (_, s) => return Err(perr(format!("HTTP {s}"))),
                }
                if ctx.proto == Proto::Ws && !accept_ok {
                    return Err(perr("ws bad Sec-WebSocket-Accept"));
                }
                *phase = Phase::Body;
                on(Event::Online);
                used
            }
            (Proto::Sse, Phase::Body) => match sse_event(rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
            (Proto::Ws, Phase::Body) => match ws_frame(rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
            (Proto::Poll, _) => match poll_response(rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
            (Proto::Tcp, _) => match tcp_unit(phase, rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
        };
        pos += used;
    }
}

/// Parses an HTTP response head: Some((status, head length, ws accept matches)) when complete.
fn http_head(buf: &[u8], ws_accept: &str) -> Result<Option<(u16, usize, bool)>, ProtoError> {
    let mut headers = [httparse::EMPTY_HEADER; 24];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(used)) => {
            let status = resp.code.unwrap_or(0);
            // A chunked SSE body would be misread as events (chunk sizes between lines);
            // c1m serve never chunks it, other servers may: say so instead of guessing.
            if status == 200
                && resp.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("transfer-encoding")
                        && !h.value.eq_ignore_ascii_case(b"identity")
                })
            {
                return Err(perr("sse chunked body unsupported"));
            }
            let accept_ok = resp.headers.iter().any(|h| {
                h.name.eq_ignore_ascii_case("sec-websocket-accept")
                    && h.value.trim_ascii() == ws_accept.as_bytes()
            });
            Ok(Some((status, used, accept_ok)))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(perr(format!("bad HTTP head ({e})"))),
    }
}

/// Finds the end of one SSE event (a blank line); returns (content end, next start).
fn sse_block_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while let Some(off) = buf[i..].iter().position(|&b| b == b'\n') {
        let nl = i + off;
        match buf.get(nl + 1) {
            Some(b'\n') => return Some((nl, nl + 2)),
            Some(b'\r') if buf.get(nl + 2) == Some(&b'\n') => return Some((nl, nl + 3)),
            _ => {}
        }
        i = nl + 1;
    }
    None
}

fn sse_event(buf: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<Option<usize>, ProtoError> {
    let Some((end, next)) = sse_block_end(buf) else {
        return Ok(None);
    };
    let mut id = None;
    let mut event: &[u8] = b"";
    let mut data: Option<&[u8]> = None;
    for line in buf[..end].split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() || line[0] == b':' {
            continue;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"id" => {
                id = Some(parse_u64(value).ok_or_else(|| perr("sse bad id"))?);
            }
            b"event" => event = value,
            // Only the first data line is looked at: bench payloads are one line.
            b"data" if data.is_none() => data = Some(value),
            _ => {}
        }
    }
    match event {
        b"gap" => on(Event::Gap),
        b"shutdown" => on(Event::Closed),
        _ => {
            if let Some(data) = data {
                on(Event::Message { id, data });
            }
        }
    }
    Ok(Some(next))
}

fn ws_frame(buf: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<Option<usize>, ProtoError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let fin = buf[0] & 0x80 != 0;
    let opcode = buf[0] & 0x0f;
    if buf[1] & 0x80 != 0 {
        return Err(perr("ws masked server frame"));
    }
    let (len, hdr) = match buf[1] & 0x7f {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(None);
            };
            (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            (u64::from_be_bytes(a), 10)
        }
        n => (u64::from(n), 2),
    };
    if len > MAX_PENDING as u64 {
        return Err(perr("ws frame too large"));
    }
    let total = hdr + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let payload = &buf[hdr..total];
    match opcode {
        1 | 2 if !fin => return Err(perr("ws fragmented message")),
        0 => return Err(perr("ws fragmented message")),
        1 | 2 => ws_message(payload, on),
        8 => on(Event::Closed),
        9 => on(Event::Ping(payload)),
        10 => {}
        _ => return Err(perr(format!("ws bad opcode {opcode}"))),
    }
    Ok(Some(total))
}

/// A WebSocket data frame: JSON `{"id":N,"data":"…"}` (or `{"type":"gap",…}`), else raw payload.
fn ws_message(payload: &[u8], on: &mut dyn FnMut(Event<'_>)) {
    if payload.first() == Some(&b'{') {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(payload) {
            let kind = v
                .get("type")
                .or_else(|| v.get("event"))
                .and_then(|t| t.as_str());
            if kind == Some("gap") {
                on(Event::Gap);
                return;
            }
            if let Some(data) = v.get("data").and_then(|d| d.as_str()) {
                on(Event::Message {
                    id: v.get("id").and_then(|i| i.as_u64()),
                    data: data.as_bytes(),
                });
                return;
            }
        }
    }
    on(Event::Message {
        id: None,
        data: payload,
    });
}

#[derive(Deserialize)]
struct PollBody {
    #[serde(default)]
    messages: Vec<PollMessage>,
    #[serde(default)]
    gaps: Vec<serde_json::Value>,
    last_id: Option<u64>,
}

#[derive(Deserialize)]
struct PollMessage {
    id: Option<u64>,
    #[serde(default)]
    data: String,
}

fn poll_response(buf: &[u8], on: &mut dyn FnMut(Event<'_>)) -> Result<Option<usize>, ProtoError> {
    let mut headers = [httparse::EMPTY_HEADER; 24];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(perr(format!("bad HTTP head ({e})"))),
    };
    let status = resp.code.unwrap_or(0);
    let mut content_length = 0usize;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            content_length = std::str::from_utf8(h.value)
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| perr("bad Content-Length"))?;
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(perr("poll chunked answer unsupported"));
        }
    }
    if content_length > MAX_PENDING {
        return Err(perr("poll answer too large"));
    }
    let total = head_len + content_length;
    if buf.len() < total {
        return Ok(None);
    }
    match status {
        200 => {
            let body: PollBody =
                serde_json::from_slice(&buf[head_len..total]).map_err(|_| perr("poll bad JSON"))?;
            for _ in &body.gaps {
                on(Event::Gap);
            }
            for m in &body.messages {
                on(Event::Message {
                    id: m.id,
                    data: m.data.as_bytes(),
                });
            }
            on(Event::PollDone {
                last_id: body.last_id,
            });
        }
        204 => on(Event::PollDone { last_id: None }),
        s => return Err(perr(format!("HTTP {s}"))),
    }
    Ok(Some(total))
}

fn tcp_unit(
    phase: &mut Phase,
    buf: &[u8],
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Option<usize>, ProtoError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > 4096 {
            return Err(perr("tcp line too long"));
        }
        return Ok(None);
    };
    let line = &buf[..nl];
    let mut words = line.split(|&b| b == b' ');
    let verb = words.next().unwrap_or(b"");
    match verb {
        b"OK" if *phase == Phase::Head => {
            *phase = Phase::Body;
            on(Event::Online);
            Ok(Some(nl + 1))
        }
        b"MSG" => {
            let _channel = words.next();
            let id = words.next().and_then(parse_u64);
            let len = words
                .next()
                .and_then(parse_u64)
                .ok_or_else(|| perr("tcp bad MSG line"))?;
            if len > MAX_PENDING as u64 {
                return Err(perr("tcp message too large"));
            }
            let start = nl + 1;
            let end = start + len as usize;
            if buf.len() < end + 1 {
                return Ok(None);
            }
            if buf[end] != b'\n' {
                return Err(perr("tcp MSG payload not followed by newline"));
            }
            on(Event::Message {
                id,
                data: &buf[start..end],
            });
            Ok(Some(end + 1))
        }
        b"GAP" => {
            on(Event::Gap);
            Ok(Some(nl + 1))
        }
        b"BYE" => {
            on(Event::Closed);
            Ok(Some(nl + 1))
        }
        b"ERR" => Err(perr(format!(
            "tcp ERR {}",
            String::from_utf8_lossy(&line[3..]).trim()
        ))),
        _ => Err(perr("tcp unexpected line")),
    }
}

pub fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests;
