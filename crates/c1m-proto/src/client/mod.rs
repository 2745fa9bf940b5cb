//! Client halves of the wire formats (docs/PROTOCOL.md), the counterparts of the server
//! encoders beside this module: subscribe request bytes ([`request`]) and incremental parsers
//! for SSE ([`sse`]), WebSocket ([`ws`]), long-poll ([`poll`]) and the raw TCP line protocol
//! ([`mod@line`]), and an HTTP/2 session for many SSE streams on one connection ([`h2`]).
//! `c1m bench` drives connections with these; they also read other servers'
//! streams (nchan, Centrifugo, …) as long as those speak the standard framing.
//!
//! No I/O here: a parser gets the bytes received so far and reports events through a callback,
//! returning how many bytes it consumed; the caller keeps the unconsumed tail. A malformed or
//! unexpected answer is a [`ProtoError`] (the caller counts it), never a panic.

pub mod h2;
pub mod line;
pub mod poll;
pub mod request;
pub mod sse;
pub mod ws;

pub use request::{subscribe_request, ws_accept, ws_client_frame, ws_key, SubscribeRequest};

use std::fmt;

/// Which protocol a client connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Server-sent events: `GET path` with `Accept: text/event-stream`.
    Sse,
    /// WebSocket: upgrade handshake, then frames.
    Ws,
    /// HTTP long-poll loop with `last_id` (c1m's JSON answer format).
    Poll,
    /// Raw TCP line protocol (`SUB ch`).
    Tcp,
    /// Plain TCP connect and hold; the bytes a listener sends are ignored.
    Connect,
}

/// A protocol violation or refusal by the server; the string is the error kind counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub(crate) fn perr(kind: impl Into<String>) -> ProtoError {
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
    /// One message; `id` is the server's message id when the protocol carries a numeric one.
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

/// Per-connection context a parser needs beyond the bytes.
pub struct Ctx<'a> {
    pub wire: Wire,
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
        let used = match (ctx.wire, *phase) {
            (Wire::Connect, _) => rest.len(),
            (Wire::Sse, Phase::Head) | (Wire::Ws, Phase::Head) => {
                let Some((status, used, accept_ok)) = http_head(rest, ctx.ws_accept)? else {
                    return Ok(pos);
                };
                match (ctx.wire, status) {
                    (Wire::Sse, 200) | (Wire::Ws, 101) => {}
                    (_, s) => return Err(perr(format!("HTTP {s}"))),
                }
                if ctx.wire == Wire::Ws && !accept_ok {
                    return Err(perr("ws bad Sec-WebSocket-Accept"));
                }
                *phase = Phase::Body;
                on(Event::Online);
                used
            }
            (Wire::Sse, Phase::Body) => match sse::event(rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
            (Wire::Ws, Phase::Body) => match ws::frame(rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
            (Wire::Poll, _) => match poll::response(rest, on)? {
                Some(used) => used,
                None => return Ok(pos),
            },
            (Wire::Tcp, _) => match line::unit(phase, rest, on)? {
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
            // c1m serve and nchan never chunk it, other servers may: say so instead of guessing.
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

/// Decimal digits (surrounding whitespace allowed) as a u64; None for anything else.
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests;
