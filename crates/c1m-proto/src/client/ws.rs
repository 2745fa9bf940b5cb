//! WebSocket client parser: server frames (unmasked, RFC 6455 §5.1) into messages, pings and
//! close. c1m serve's JSON envelope (`{"id":N,"data":"…"}`, `{"type":"gap",…}`) is unwrapped;
//! any other payload is reported as it is.

use super::{perr, Event, ProtoError, MAX_PENDING};

/// Parses one frame if `buf` holds a complete one; Some(bytes used) or None for "need more".
pub(super) fn frame(
    buf: &[u8],
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Option<usize>, ProtoError> {
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
        1 | 2 => message(payload, on),
        8 => on(Event::Closed),
        9 => on(Event::Ping(payload)),
        10 => {}
        _ => return Err(perr(format!("ws bad opcode {opcode}"))),
    }
    Ok(Some(total))
}

/// A data frame: JSON `{"id":N,"data":"…"}` (or `{"type":"gap",…}`), else the raw payload.
fn message(payload: &[u8], on: &mut dyn FnMut(Event<'_>)) {
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
