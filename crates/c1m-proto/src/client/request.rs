//! Client request bytes: the subscribe request of each protocol, WebSocket keys and the
//! masked frames a client sends (RFC 6455 §5.3).

use super::Wire;
use base64::Engine;

/// What a subscribe request is made of. `path` may carry a query (`/sub/a?x=1`); a resume
/// position is then appended with `&`.
pub struct SubscribeRequest<'a> {
    pub wire: Wire,
    pub host: &'a str,
    pub path: &'a str,
    /// Channel name (the TCP line protocol names it in `SUB`).
    pub channel: &'a str,
    /// Resume after this message id (SSE `Last-Event-ID`, `?last_id=` for ws and poll).
    pub last_id: Option<u64>,
    pub ws_key: &'a str,
    /// Extra header lines, each ending in `\r\n` (e.g. `Authorization: Bearer …\r\n`).
    pub extra_headers: &'a str,
}

/// Request bytes that open a subscription (none for `connect`).
pub fn subscribe_request(r: &SubscribeRequest<'_>) -> Vec<u8> {
    let (path, host, extra) = (r.path, r.host, r.extra_headers);
    let sep = if path.contains('?') { '&' } else { '?' };
    let resume = r
        .last_id
        .map(|id| format!("{sep}last_id={id}"))
        .unwrap_or_default();
    let mut out = String::with_capacity(256 + extra.len());
    match r.wire {
        Wire::Sse => {
            out.push_str(&format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n{extra}"
            ));
            if let Some(id) = r.last_id {
                out.push_str(&format!("Last-Event-ID: {id}\r\n"));
            }
            out.push_str("\r\n");
        }
        Wire::Ws => out.push_str(&format!(
            "GET {path}{resume} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n",
            r.ws_key
        )),
        Wire::Poll => out.push_str(&format!(
            "GET {path}{resume} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n{extra}\r\n"
        )),
        Wire::Tcp => {
            out.push_str(&format!("SUB {}", r.channel));
            if let Some(id) = r.last_id {
                out.push_str(&format!(" {id}"));
            }
            out.push('\n');
        }
        Wire::Connect => {}
    }
    out.into_bytes()
}

/// A WebSocket key derived from a number (keys need only be unique-ish, not secret).
pub fn ws_key(seed: u64) -> String {
    let mut raw = [0u8; 16];
    raw[..8].copy_from_slice(&seed.to_le_bytes());
    raw[8..].copy_from_slice(&(seed ^ 0x9E37_79B9_7F4A_7C15).to_be_bytes());
    base64::engine::general_purpose::STANDARD.encode(raw)
}

/// The `Sec-WebSocket-Accept` value a server must answer for `key` (RFC 6455 §4.2.2): the
/// server half's own function, so both sides compute it one way.
pub fn ws_accept(key: &str) -> String {
    crate::ws::handshake::accept_key(key.as_bytes())
}

/// A client frame (always masked, RFC 6455 §5.3) with `opcode` and `payload`.
pub fn ws_client_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::with_capacity(payload.len() + 14);
    crate::ws::encode::write_masked(&mut f, opcode, true, payload, mask);
    f
}
