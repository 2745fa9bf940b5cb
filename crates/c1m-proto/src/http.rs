//! HTTP/1.1 request heads (parsed by httparse) and the small responses the gateway writes.
//! Only what a push gateway needs: method, path, query, a few headers. Where a body ends is
//! decided by [`crate::http_framing`]; chunked bodies are decoded by [`crate::chunked`].
//!
//! httparse already refuses obs-fold (a line starting with whitespace), whitespace before a
//! colon, and NUL, CR, other controls or DEL in values; it accepts a bare LF as a line end,
//! which we refuse here (a proxy that reads it as part of a value would see other headers).

/// Largest request head accepted; a larger one gets 431.
pub const MAX_HEAD: usize = 8192;
/// Most headers accepted in one head; more gets 431 too.
pub const MAX_HEADERS: usize = 48;

/// Why a head could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// The head is not complete yet; read more.
    Partial,
    /// Over [`MAX_HEAD`] bytes or [`MAX_HEADERS`] headers: 431.
    TooLarge,
    /// Not HTTP/1.x or malformed: 400.
    Malformed(&'static str),
}

/// A parsed request head borrowing from the read buffer.
#[derive(Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    /// HTTP/1.0 (`0`) or HTTP/1.1 (`1`).
    pub minor_version: u8,
    pub headers: Vec<(&'a str, &'a [u8])>,
    /// Bytes of the head including its blank line; the body (if any) follows.
    pub head_len: usize,
}

impl<'a> Request<'a> {
    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }

    /// First value of a header as trimmed UTF-8.
    pub fn header_str(&self, name: &str) -> Option<&'a str> {
        self.header(name)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
    }

    /// True when a comma-separated header (Connection, Upgrade) holds `token`.
    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .filter_map(|(_, v)| std::str::from_utf8(v).ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Value of `key` in the query string (no percent-decoding: our keys and values are plain).
    pub fn query_param(&self, key: &str) -> Option<&'a str> {
        self.query?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then_some(v)
        })
    }

    /// Whether the connection stays open after the response (HTTP/1.1 default yes, 1.0 no).
    pub fn keep_alive(&self) -> bool {
        if self.header_has_token("Connection", "close") {
            return false;
        }
        self.minor_version == 1 || self.header_has_token("Connection", "keep-alive")
    }

    /// How the body is delimited (strict RFC 9112 §6 rules; see [`crate::http_framing`]).
    pub fn body_framing(
        &self,
    ) -> Result<crate::http_framing::BodyFraming, crate::http_framing::FramingError> {
        crate::http_framing::body_framing(&self.headers, self.minor_version)
    }
}

/// Parses a request head from the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Result<Request<'_>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => {
            if buf.len() >= MAX_HEAD {
                Err(HeadError::TooLarge)
            } else {
                Err(HeadError::Partial)
            }
        }
        Ok(httparse::Status::Complete(head_len)) => {
            if head_len > MAX_HEAD {
                return Err(HeadError::TooLarge);
            }
            if has_bare_lf(&buf[..head_len]) {
                return Err(HeadError::Malformed(
                    "bare LF in request head; lines end in CRLF",
                ));
            }
            let target = req.path.ok_or(HeadError::Malformed("no request target"))?;
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (target, None),
            };
            Ok(Request {
                method: req.method.ok_or(HeadError::Malformed("no method"))?,
                path,
                query,
                minor_version: req.version.unwrap_or(1),
                headers: req.headers.iter().map(|h| (h.name, h.value)).collect(),
                head_len,
            })
        }
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(_) => Err(HeadError::Malformed("malformed request head")),
    }
}

/// True when a `\n` in `head` is not preceded by `\r`.
fn has_bare_lf(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'))
}

/// Reason phrase for the statuses the gateway uses.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// A complete response with a Content-Length body. `extra` holds whole header lines
/// (each ending in `\r\n`).
pub fn response(
    status: u16,
    content_type: &str,
    extra: &str,
    body: &[u8],
    keep_alive: bool,
) -> Vec<u8> {
    let conn = if keep_alive { "keep-alive" } else { "close" };
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: {conn}\r\n{extra}\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// A plain-text error response that closes the connection.
pub fn error(status: u16, message: &str) -> Vec<u8> {
    response(
        status,
        "text/plain; charset=utf-8",
        "",
        format!("{message}\n").as_bytes(),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_head_and_helpers() {
        let raw = b"GET /sub/a,b?last_id=5&x HTTP/1.1\r\nAccept: text/event-stream\r\nConnection: Keep-Alive, Upgrade\r\n\r\nrest";
        let req = parse_request(raw).unwrap();
        assert_eq!((req.method, req.path), ("GET", "/sub/a,b"));
        assert_eq!(req.query_param("last_id"), Some("5"));
        assert_eq!(req.query_param("x"), Some(""));
        assert_eq!(req.header_str("accept"), Some("text/event-stream"));
        assert!(req.header_has_token("connection", "upgrade"));
        assert!(req.keep_alive());
        assert_eq!(&raw[req.head_len..], b"rest");
    }

    #[test]
    fn partial_large_and_malformed() {
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap_err(),
            HeadError::Partial
        );
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        assert_eq!(parse_request(&big).unwrap_err(), HeadError::TooLarge);
        assert!(matches!(
            parse_request(b"\x01\x02 nonsense\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn http10_closes_and_lengths() {
        let req = parse_request(b"POST /pub/a HTTP/1.0\r\nContent-Length: 12\r\n\r\n").unwrap();
        assert!(!req.keep_alive());
        assert_eq!(
            req.body_framing(),
            Ok(crate::http_framing::BodyFraming::Length(12))
        );
    }

    #[test]
    fn bare_lf_and_obs_fold_are_malformed() {
        for raw in [
            &b"GET / HTTP/1.1\nHost: x\n\n"[..],
            b"GET / HTTP/1.1\r\nHost: x\nContent-Length: 5\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\n\n",
            b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            b"GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
        ] {
            assert!(
                matches!(parse_request(raw), Err(HeadError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn response_shape() {
        let r = response(200, "application/json", "", b"{}", true);
        assert_eq!(
            r,
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}".to_vec()
        );
    }
}
