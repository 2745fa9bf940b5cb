//! A request's header list, checked as RFC 9113 §8.2-8.3 and RFC 8441 §4 require: pseudo-header
//! fields first, each once, only the request ones; lowercase names; no connection-specific
//! fields; values without NUL, CR, LF or surrounding whitespace. A request that breaks a rule is
//! malformed: the connection answers with RST_STREAM(PROTOCOL_ERROR), never an event.

/// A request's head, as the event loop needs it to route the stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `:method`.
    pub method: String,
    /// `:scheme` (absent only for a plain CONNECT).
    pub scheme: Option<String>,
    /// `:authority` (the Host of HTTP/1.1).
    pub authority: Option<String>,
    /// `:path` with its query (absent only for a plain CONNECT).
    pub path: Option<String>,
    /// `:protocol` of an extended CONNECT (RFC 8441), e.g. `websocket`; only accepted when the
    /// connection advertised SETTINGS_ENABLE_CONNECT_PROTOCOL.
    pub protocol: Option<String>,
    /// The regular fields in order, names lowercase.
    pub headers: Vec<(String, Vec<u8>)>,
    /// `content-length`, checked against the DATA that follows (RFC 9113 §8.1.1).
    pub content_length: Option<u64>,
}

impl Request {
    /// The first value of a regular field.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| &v[..])
    }
}

/// Collects fields from the HPACK decoder; the first rule broken is kept.
#[derive(Default)]
pub(crate) struct Builder {
    req: Request,
    has_method: bool,
    regular_seen: bool,
    trailers: bool,
    error: Option<&'static str>,
}

fn token_lower(b: u8) -> bool {
    matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-'
        | b'.' | b'^' | b'_' | b'`' | b'|' | b'~')
}

fn value_ok(v: &[u8]) -> bool {
    !v.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
        && !matches!(v.first(), Some(b' ' | b'\t'))
        && !matches!(v.last(), Some(b' ' | b'\t'))
}

fn text(v: &[u8]) -> Option<String> {
    std::str::from_utf8(v)
        .ok()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl Builder {
    /// For a trailer section: regular fields only.
    pub(crate) fn trailers() -> Self {
        Builder {
            trailers: true,
            ..Builder::default()
        }
    }

    fn fail(&mut self, why: &'static str) {
        self.error.get_or_insert(why);
    }

    pub(crate) fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if !value_ok(value) {
            return self.fail("field value with NUL, CR, LF or surrounding whitespace");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular_seen || self.trailers {
                return self.fail("pseudo-header field after a regular field or in trailers");
            }
            let slot = match pseudo {
                b"method" => {
                    if std::mem::replace(&mut self.has_method, true) {
                        return self.fail("duplicate :method");
                    }
                    match text(value) {
                        Some(m) => self.req.method = m,
                        None => self.fail("empty :method"),
                    }
                    return;
                }
                b"scheme" => &mut self.req.scheme,
                b"authority" => &mut self.req.authority,
                b"path" => &mut self.req.path,
                b"protocol" => &mut self.req.protocol,
                _ => return self.fail("unknown or response pseudo-header field"),
            };
            if slot.is_some() {
                return self.fail("duplicate pseudo-header field");
            }
            match text(value) {
                Some(v) => *slot = Some(v),
                None => self.fail("empty or non-UTF-8 pseudo-header value"),
            }
            return;
        }
        self.regular_seen = true;
        if name.is_empty() || !name.iter().all(|&b| token_lower(b)) {
            return self.fail("field name not a lowercase token");
        }
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => {
                return self.fail("connection-specific field");
            }
            b"te" if value != b"trailers" => return self.fail("te other than trailers"),
            _ => {}
        }
        if name == b"content-length" {
            let n = std::str::from_utf8(value)
                .ok()
                .filter(|v| v.bytes().all(|b| b.is_ascii_digit()));
            match n.and_then(|v| v.parse::<u64>().ok()) {
                Some(n) if self.req.content_length.is_none_or(|c| c == n) => {
                    self.req.content_length = Some(n)
                }
                _ => return self.fail("invalid or conflicting content-length"),
            }
        }
        // Names are checked ASCII above.
        let name = String::from_utf8_lossy(name).into_owned();
        self.req.headers.push((name, value.to_vec()));
    }

    /// The request, or why it is malformed.
    pub(crate) fn finish(self, connect_protocol: bool) -> Result<Request, &'static str> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.trailers {
            return Ok(self.req);
        }
        let r = self.req;
        if !self.has_method {
            return Err("missing :method");
        }
        if r.method == "CONNECT" {
            if r.protocol.is_some() {
                if !connect_protocol {
                    return Err(":protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL");
                }
                if r.scheme.is_none() || r.path.is_none() || r.authority.is_none() {
                    return Err("extended CONNECT without :scheme, :path or :authority");
                }
            } else if r.scheme.is_some() || r.path.is_some() || r.authority.is_none() {
                return Err("CONNECT needs :authority only");
            }
            return Ok(r);
        }
        if r.protocol.is_some() {
            return Err(":protocol on a method other than CONNECT");
        }
        if r.scheme.is_none() || r.path.is_none() {
            return Err("missing :scheme or :path");
        }
        Ok(r)
    }
}
