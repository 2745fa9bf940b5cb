//! Request body framing (RFC 9112 §6): from a parsed head, exactly one unambiguous answer to
//! "where does this request's body end?", or a refusal. This is what keeps a request from being
//! smuggled past a front proxy: whenever two readings of the head could disagree on the body's
//! length (two lengths, a length and a transfer coding, an obfuscated coding), the answer is a
//! refusal, and the gateway closes the connection after it, so nothing after the ambiguous head
//! is ever read as a request.
//!
//! Rules (docs/PROTOCOL.md, "HTTP framing"):
//! - `Content-Length`: at most one field, whose value is `1*DIGIT` that fits a u64. A second
//!   field (even an equal one), a list, a sign, a space inside, or any other byte: 400.
//! - `Transfer-Encoding` with `Content-Length`: 400. In an HTTP/1.0 request: 400.
//! - `Transfer-Encoding` must be exactly `chunked` (case-insensitive, one element over all its
//!   fields). `chunked` twice, or not last, or a malformed element (`xchunked` is not chunked): 400.
//!   Other codings before a final `chunked` (`gzip, chunked`): 501, we decode none.

use crate::token::{is_tchar, trim_ows};

/// How a request's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no Content-Length, no Transfer-Encoding).
    None,
    /// `Content-Length: n` (n may be 0).
    Length(u64),
    /// `Transfer-Encoding: chunked`; see [`crate::chunked`].
    Chunked,
}

/// A head whose body cannot be delimited safely. The connection must close after the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramingError {
    /// 400 (ambiguous or malformed) or 501 (a transfer coding we do not implement).
    pub status: u16,
    pub reason: &'static str,
}

fn bad(reason: &'static str) -> FramingError {
    FramingError {
        status: 400,
        reason,
    }
}

/// Decides the body framing of a request head from its header fields (name, value) and its
/// HTTP/1.x minor version, strictly (see the module doc). Takes the fields rather than a parsed
/// request, so this module does not depend on the head parser; `Request::body_framing` in the
/// `http` module is the usual entry point.
pub fn body_framing(
    headers: &[(&str, &[u8])],
    minor_version: u8,
) -> Result<BodyFraming, FramingError> {
    let mut lengths = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
        .map(|(_, v)| *v);
    let length = lengths.next();
    if lengths.next().is_some() {
        return Err(bad("more than one Content-Length"));
    }
    let has_te = headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("Transfer-Encoding"));
    if has_te {
        if length.is_some() {
            return Err(bad("both Transfer-Encoding and Content-Length"));
        }
        if minor_version == 0 {
            return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        return transfer_coding(headers);
    }
    match length {
        None => Ok(BodyFraming::None),
        Some(v) => parse_content_length(v).map(BodyFraming::Length),
    }
}

/// `Content-Length = 1*DIGIT` (httparse has already trimmed the surrounding whitespace).
pub fn parse_content_length(value: &[u8]) -> Result<u64, FramingError> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return Err(bad("Content-Length must be digits only"));
    }
    value.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)
            .and_then(|n| n.checked_add(u64::from(d - b'0')))
            .ok_or(bad("Content-Length overflows"))
    })
}

/// Every Transfer-Encoding field, read as one comma-separated list, must be exactly `chunked`.
fn transfer_coding(headers: &[(&str, &[u8])]) -> Result<BodyFraming, FramingError> {
    let values = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Transfer-Encoding"))
        .map(|(_, v)| *v);
    let mut codings = 0usize;
    let mut chunked_seen = false;
    let mut last_is_chunked = false;
    for value in values {
        for element in value.split(|&b| b == b',') {
            let element = trim_ows(element);
            if element.is_empty() || !element.iter().copied().all(is_tchar) {
                // Empty elements, parameters, quotes, stray bytes: some parser somewhere reads
                // these differently, which is all a smuggler needs.
                return Err(bad("malformed Transfer-Encoding"));
            }
            let is_chunked = element.eq_ignore_ascii_case(b"chunked");
            if is_chunked && chunked_seen {
                return Err(bad("chunked applied more than once"));
            }
            chunked_seen |= is_chunked;
            last_is_chunked = is_chunked;
            codings += 1;
        }
    }
    if !last_is_chunked {
        // RFC 9112 §6.3: the body length cannot be determined; 400 and close.
        return Err(bad("Transfer-Encoding must end in chunked"));
    }
    if codings > 1 {
        return Err(FramingError {
            status: 501,
            reason: "only Transfer-Encoding: chunked is implemented",
        });
    }
    Ok(BodyFraming::Chunked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse_request;

    fn framing(head: &str) -> Result<BodyFraming, FramingError> {
        let raw = format!("POST /pub/a HTTP/1.1\r\nHost: x\r\n{head}\r\n");
        parse_request(raw.as_bytes())
            .expect("head parses")
            .body_framing()
    }

    fn status(head: &str) -> u16 {
        framing(head).map_or_else(|e| e.status, |_| 200)
    }

    #[test]
    fn plain_lengths() {
        assert_eq!(framing(""), Ok(BodyFraming::None));
        assert_eq!(framing("Content-Length: 0\r\n"), Ok(BodyFraming::Length(0)));
        assert_eq!(
            framing("content-length:  44 \r\n"),
            Ok(BodyFraming::Length(44))
        );
        assert_eq!(
            framing("Content-Length: 007\r\n"),
            Ok(BodyFraming::Length(7))
        );
        assert_eq!(
            framing("Content-Length: 18446744073709551615\r\n"),
            Ok(BodyFraming::Length(u64::MAX))
        );
    }

    #[test]
    fn ambiguous_lengths_are_400() {
        for head in [
            "Content-Length: 5\r\nContent-Length: 6\r\n",
            "Content-Length: 5\r\nContent-Length: 5\r\n",
            "Content-Length: 5, 5\r\n",
            "Content-Length: 5,6\r\n",
            "Content-Length: +5\r\n",
            "Content-Length: -5\r\n",
            "Content-Length: 5 5\r\n",
            "Content-Length: 0x5\r\n",
            "Content-Length: 5a\r\n",
            "Content-Length: \r\n",
            "Content-Length: 18446744073709551616\r\n",
            "Content-Length: 99999999999999999999999999\r\n",
            "Content-Length: \u{665}\r\n", // Arabic-Indic five
        ] {
            assert_eq!(status(head), 400, "{head:?}");
        }
    }

    #[test]
    fn transfer_encodings() {
        assert_eq!(
            framing("Transfer-Encoding: chunked\r\n"),
            Ok(BodyFraming::Chunked)
        );
        assert_eq!(
            framing("Transfer-Encoding: CHUNKED\r\n"),
            Ok(BodyFraming::Chunked)
        );
        // Leading/trailing OWS is whitespace, not part of the coding (RFC 9110 §5.5).
        assert_eq!(
            framing("Transfer-Encoding:  chunked\r\n"),
            Ok(BodyFraming::Chunked)
        );
        assert_eq!(
            framing("Transfer-Encoding:\tchunked\t\r\n"),
            Ok(BodyFraming::Chunked)
        );
        for head in [
            "Transfer-Encoding: xchunked\r\n",
            "Transfer-Encoding: chunkedx\r\n",
            "Transfer-Encoding: chunked, identity\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked, chunked\r\n",
            "Transfer-Encoding: ,chunked\r\n",
            "Transfer-Encoding: chunked,\r\n",
            "Transfer-Encoding: \"chunked\"\r\n",
            "Transfer-Encoding: chunked;x=1\r\n",
            "Transfer-Encoding: chun ked\r\n",
            "Transfer-Encoding: \r\n",
            "Transfer-Encoding: identity\r\n",
            "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
            "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
        ] {
            assert_eq!(status(head), 400, "{head:?}");
        }
        assert_eq!(status("Transfer-Encoding: gzip, chunked\r\n"), 501);
        assert_eq!(
            status("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"),
            501
        );
    }

    #[test]
    fn transfer_encoding_in_http10_is_400() {
        let raw = b"POST /pub/a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        let err = parse_request(raw).unwrap().body_framing().unwrap_err();
        assert_eq!(err.status, 400);
    }
}
