//! The chunked transfer coding (RFC 9112 §7.1), strictly and with bounds, over a buffer that
//! holds the bytes after a request head. Pure: the caller re-runs [`decode_resume`] as more
//! bytes arrive, passing back the [`Progress`] of the last run, so each run scans only what
//! arrived since (a trickle of one-byte chunks would otherwise cost a rescan of every earlier
//! chunk per read: quadratic, seconds of CPU for one 64 KiB body). Data is skipped by its size
//! and nothing is copied until the body is whole; then one pass copies it.
//!
//! Strict means: chunk sizes are `1*HEXDIG` (no sign, no `0x`, no whitespace before them, no
//! overflow); every line ends in CRLF (a bare CR or LF is an error, not a line end); chunk data
//! is followed by exactly CRLF; extensions follow their grammar and trailers are well-formed
//! fields (both are read and ignored). Bounds: the decoded body ≤ `max_body` (else 413), the
//! coded body ≤ [`wire_limit`] (else 413: framing overhead is bounded too), a size line
//! ≤ [`MAX_SIZE_LINE`], the trailer section ≤ [`MAX_TRAILERS`] bytes.

use crate::token::is_tchar;

/// Longest chunk-size line (size and extensions, without CRLF).
pub const MAX_SIZE_LINE: usize = 1024;
/// Largest trailer section (all trailer lines and the final CRLF).
pub const MAX_TRAILERS: usize = 8192;

/// Most coded bytes accepted for a body of at most `max_body` bytes: the body, 1/8 of it for
/// chunk framing, and 16 KiB so that small bodies may come in small pieces.
pub fn wire_limit(max_body: usize) -> usize {
    max_body
        .saturating_add(max_body / 8)
        .saturating_add(16 * 1024)
}

/// A decoded body.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// More bytes are needed.
    Partial,
    /// The whole body; `used` coded bytes (through the trailer section's blank line).
    Complete { body: Vec<u8>, used: usize },
}

/// Why a chunked body is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkedError {
    /// Over `max_body` decoded or [`wire_limit`] coded bytes: 413.
    TooLarge,
    /// Not valid chunked coding: 400.
    Malformed(&'static str),
}

/// Where the previous scan of a growing buffer stopped: the start of the first element (chunk
/// or trailer line) that had not fully arrived. Start each body with `Progress::default()`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Offset of the first unfinished element.
    pos: usize,
    /// Decoded bytes before it.
    total: usize,
    /// Set once the last chunk was read: `pos` is then a trailer line, and this is where the
    /// trailer section started (its size is bounded).
    trailers_from: Option<usize>,
}

/// Decodes a chunked body at the start of `buf` in one go.
pub fn decode(buf: &[u8], max_body: usize) -> Result<Decoded, ChunkedError> {
    decode_resume(buf, max_body, &mut Progress::default())
}

/// Decodes a chunked body at the start of `buf`, which holds at least the bytes the previous
/// call (that left `progress`) saw. Same answers as [`decode`] on the same bytes.
pub fn decode_resume(
    buf: &[u8],
    max_body: usize,
    progress: &mut Progress,
) -> Result<Decoded, ChunkedError> {
    let Some((used, total)) = scan(buf, max_body, progress, None)? else {
        return Ok(Decoded::Partial);
    };
    let mut body = Vec::with_capacity(total);
    scan(buf, max_body, &mut Progress::default(), Some(&mut body))?;
    Ok(Decoded::Complete { body, used })
}

/// Encodes `pieces` as one chunk each (empty pieces are skipped: a zero size ends the body).
pub fn encode<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces.into_iter().filter(|p| !p.is_empty()) {
        out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        out.extend_from_slice(piece);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Walks the coding from `progress`; returns `(used, body length)` once complete, copying data
/// into `out`. When more bytes are needed, `progress` marks the unfinished element.
fn scan(
    buf: &[u8],
    max_body: usize,
    progress: &mut Progress,
    mut out: Option<&mut Vec<u8>>,
) -> Result<Option<(usize, usize)>, ChunkedError> {
    let limit = wire_limit(max_body);
    let partial = |progress: &mut Progress, at: Progress| {
        *progress = at;
        // Completion would need more than `buf`; past the limit it can never be accepted.
        if buf.len() >= limit {
            Err(ChunkedError::TooLarge)
        } else {
            Ok(None)
        }
    };
    let Progress {
        mut pos,
        mut total,
        trailers_from,
    } = *progress;
    let trailers_start = match trailers_from {
        Some(start) => start,
        None => loop {
            let here = Progress {
                pos,
                total,
                trailers_from: None,
            };
            let Some(end) = find_line(buf, pos, MAX_SIZE_LINE)? else {
                return partial(progress, here);
            };
            let size = parse_size_line(&buf[pos..end])?;
            let data_start = end + 2;
            if size == 0 {
                pos = data_start;
                break pos;
            }
            if size > (max_body - total) as u64 {
                return Err(ChunkedError::TooLarge);
            }
            let size = size as usize; // ≤ max_body, so it fits
            let data_end = data_start.saturating_add(size);
            if buf.len() < data_end.saturating_add(2) {
                return partial(progress, here);
            }
            if &buf[data_end..data_end + 2] != b"\r\n" {
                return Err(ChunkedError::Malformed("chunk data not followed by CRLF"));
            }
            if let Some(out) = out.as_deref_mut() {
                out.extend_from_slice(&buf[data_start..data_end]);
            }
            total += size;
            pos = data_end + 2;
        },
    };
    loop {
        let here = Progress {
            pos,
            total,
            trailers_from: Some(trailers_start),
        };
        let room = MAX_TRAILERS.saturating_sub(pos - trailers_start + 2);
        let Some(end) = find_line(buf, pos, room).map_err(|e| match e {
            ChunkedError::Malformed("line too long") => {
                ChunkedError::Malformed("trailer section over 8 KiB")
            }
            other => other,
        })?
        else {
            return partial(progress, here);
        };
        let line = &buf[pos..end];
        pos = end + 2;
        if line.is_empty() {
            break;
        }
        check_trailer_field(line)?;
    }
    if pos > limit {
        return Err(ChunkedError::TooLarge);
    }
    Ok(Some((pos, total)))
}

/// Index of the CR of the CRLF ending the line that starts at `from`, if it has arrived. A bare
/// CR or LF, or a line longer than `max_len`, is an error.
fn find_line(buf: &[u8], from: usize, max_len: usize) -> Result<Option<usize>, ChunkedError> {
    let rest = &buf[from..];
    let window = &rest[..rest.len().min(max_len + 1)];
    match window.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(i) if window[i] == b'\n' => Err(ChunkedError::Malformed("bare LF in chunked body")),
        Some(i) => match rest.get(i + 1) {
            Some(b'\n') => Ok(Some(from + i)),
            Some(_) => Err(ChunkedError::Malformed("bare CR in chunked body")),
            None => Ok(None),
        },
        None if window.len() > max_len => Err(ChunkedError::Malformed("line too long")),
        None => Ok(None),
    }
}

/// `chunk-size [ chunk-ext ]`: hex digits, then extensions (checked, ignored).
fn parse_size_line(line: &[u8]) -> Result<u64, ChunkedError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ChunkedError::Malformed(
            "chunk size must start with a hex digit",
        ));
    }
    let size = line[..digits].iter().try_fold(0u64, |n, &d| {
        let v = (d as char).to_digit(16).unwrap_or(0);
        n.checked_mul(16)
            .and_then(|n| n.checked_add(u64::from(v)))
            .ok_or(ChunkedError::Malformed("chunk size overflows"))
    })?;
    check_extensions(&line[digits..])?;
    Ok(size)
}

/// `*( BWS ";" BWS ext-name [ BWS "=" BWS ( token / quoted-string ) ] )`.
fn check_extensions(mut s: &[u8]) -> Result<(), ChunkedError> {
    const BAD: ChunkedError = ChunkedError::Malformed("malformed chunk extension");
    loop {
        s = skip_ws(s);
        let Some(rest) = s.strip_prefix(b";") else {
            return if s.is_empty() { Ok(()) } else { Err(BAD) };
        };
        s = skip_ws(rest);
        let name = s.iter().take_while(|&&b| is_tchar(b)).count();
        if name == 0 {
            return Err(BAD);
        }
        s = skip_ws(&s[name..]);
        if let Some(rest) = s.strip_prefix(b"=") {
            s = skip_ws(rest);
            s = if let Some(quoted) = s.strip_prefix(b"\"") {
                skip_quoted(quoted).ok_or(BAD)?
            } else {
                let value = s.iter().take_while(|&&b| is_tchar(b)).count();
                if value == 0 {
                    return Err(BAD);
                }
                &s[value..]
            };
        }
    }
}

/// The rest after a quoted-string whose opening quote is already consumed.
fn skip_quoted(mut s: &[u8]) -> Option<&[u8]> {
    loop {
        match s {
            [b'"', rest @ ..] => return Some(rest),
            [b'\\', c, rest @ ..] if is_field_char(*c) => s = rest,
            [c, rest @ ..] if is_field_char(*c) && *c != b'\\' => s = rest,
            _ => return None,
        }
    }
}

fn skip_ws(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    s
}

/// HTAB, SP, VCHAR, obs-text: what a field value may hold.
fn is_field_char(b: u8) -> bool {
    b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80
}

/// `field-name ":" OWS field-value OWS`.
fn check_trailer_field(line: &[u8]) -> Result<(), ChunkedError> {
    let name = line.iter().take_while(|&&b| is_tchar(b)).count();
    if name == 0
        || line.get(name) != Some(&b':')
        || !line[name + 1..].iter().all(|&b| is_field_char(b))
    {
        return Err(ChunkedError::Malformed("malformed trailer field"));
    }
    Ok(())
}

#[cfg(test)]
#[path = "chunked_tests.rs"]
mod tests;
