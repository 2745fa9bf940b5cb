//! SSE client parser: splits a stream into events at blank lines and reports messages, the
//! `gap` and `shutdown` events c1m serve sends, and skips comments (heartbeats).

use super::{parse_u64, Event, ProtoError};

/// Finds the end of one SSE event (a blank line); returns (content end, next start).
fn block_end(buf: &[u8]) -> Option<(usize, usize)> {
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

/// Parses one event if `buf` holds a complete one; Some(bytes used) or None for "need more".
///
/// An `id:` that is not a decimal number (nchan sends `id: 1795438449:0`) is opaque to the
/// client: the message is reported with no id (it cannot serve as a numeric resume position),
/// not refused.
pub(super) fn event(
    buf: &[u8],
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Option<usize>, ProtoError> {
    let Some((end, next)) = block_end(buf) else {
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
            b"id" => id = parse_u64(value),
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
