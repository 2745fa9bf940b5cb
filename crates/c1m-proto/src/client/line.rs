//! Raw TCP line protocol, client side: `OK`, `MSG` with its length-prefixed payload, `GAP`,
//! `BYE`, `ERR` (the lines [`crate::line`] encodes).

use super::{parse_u64, perr, Event, Phase, ProtoError, MAX_PENDING};

/// Longest line accepted from a server.
const MAX_LINE: usize = 4096;

/// Parses one line (and a MSG payload); Some(bytes used) or None for "need more".
pub(super) fn unit(
    phase: &mut Phase,
    buf: &[u8],
    on: &mut dyn FnMut(Event<'_>),
) -> Result<Option<usize>, ProtoError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > MAX_LINE {
            return Err(perr("tcp line too long"));
        }
        return Ok(None);
    };
    // The same limit whether the newline came in this read or not: a parser whose verdict
    // depends on read boundaries would count errors by chance (fuzz: client_stream).
    if nl > MAX_LINE {
        return Err(perr("tcp line too long"));
    }
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
