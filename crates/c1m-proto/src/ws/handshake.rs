//! The opening handshake, server side (RFC 6455 4.2): validates an upgrade request head that
//! the caller has already parsed (httparse) and builds the response bytes.
//!
//! Accepted → `101 Switching Protocols` with `Sec-WebSocket-Accept`. Extensions such as
//! permessage-deflate are negotiated off by not echoing them (RFC 6455 9.1). The only
//! subprotocol ever selected is [`PROTOCOL`], when offered: a browser passes its publish key as
//! a `c1m.publish-key.KEY` entry ([`offered_publish_key`]) and must be answered with an entry it
//! offered, and echoing the key back would put it in the response. Rejected → a complete response to write before closing:
//! 400 with the reason as body, 426 with `Sec-WebSocket-Version: 13` for a version we do not
//! speak (RFC 6455 4.4), 403 for an Origin outside the allow-list (RFC 6455 10.2).
//! Header names are matched case-insensitively and list-valued headers are split on commas,
//! since browsers send e.g. `Connection: keep-alive, Upgrade`.

use base64::Engine as _;

/// Appended to the client's key before hashing (RFC 6455 1.3).
pub const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Which `Origin` headers may open a WebSocket (`--ws-origins`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OriginPolicy {
    /// No check.
    #[default]
    Any,
    /// Only these origins (compared ASCII case-insensitively, e.g. `https://example.com`).
    /// Browsers always send Origin; other clients usually do not, and `allow_missing` says
    /// whether those are let in (an Origin check only protects browsers, RFC 6455 10.2).
    AllowList {
        origins: Vec<String>,
        allow_missing: bool,
    },
}

impl OriginPolicy {
    /// Parses a comma-separated list (the `--ws-origins` value); empty means [`Any`].
    ///
    /// [`Any`]: OriginPolicy::Any
    pub fn from_list(list: &str, allow_missing: bool) -> OriginPolicy {
        let origins: Vec<String> = list
            .split(',')
            .map(|o| o.trim().trim_end_matches('/').to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        if origins.is_empty() {
            OriginPolicy::Any
        } else {
            OriginPolicy::AllowList {
                origins,
                allow_missing,
            }
        }
    }

    fn allows(&self, origin: Option<&[u8]>) -> bool {
        match (self, origin) {
            (OriginPolicy::Any, _) => true,
            (OriginPolicy::AllowList { allow_missing, .. }, None) => *allow_missing,
            (OriginPolicy::AllowList { origins, .. }, Some(o)) => {
                let o = trim(o);
                origins.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(o))
            }
        }
    }
}

/// Why a handshake was refused; also the label for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// RFC 6455 4.1: the method MUST be GET.
    Method,
    /// RFC 6455 4.1: HTTP/1.1 or higher.
    HttpVersion,
    /// RFC 6455 3: a resource name starting with `/` and without a fragment.
    Path,
    /// RFC 6455 4.1: a Host header is required.
    MissingHost,
    /// RFC 6455 4.2.1: Upgrade must list `websocket`.
    Upgrade,
    /// RFC 6455 4.2.1: Connection must list `Upgrade`.
    Connection,
    /// RFC 6455 4.2.1: Sec-WebSocket-Version must be 13 → 426.
    Version,
    /// RFC 6455 4.2.1: Sec-WebSocket-Key missing.
    MissingKey,
    /// RFC 6455 11.3.1: Sec-WebSocket-Key must not appear more than once.
    DuplicateKey,
    /// RFC 6455 4.2.1: Sec-WebSocket-Key must be base64 of 16 bytes.
    BadKey,
    /// RFC 6455 10.2: Origin not in the allow-list → 403.
    Origin,
}

impl RejectReason {
    pub fn status(self) -> u16 {
        match self {
            RejectReason::Version => 426,
            RejectReason::Origin => 403,
            _ => 400,
        }
    }

    /// The response body (plus a newline).
    pub fn message(self) -> &'static str {
        match self {
            RejectReason::Method => "websocket handshake: method must be GET",
            RejectReason::HttpVersion => "websocket handshake: HTTP/1.1 required",
            RejectReason::Path => "websocket handshake: bad request target",
            RejectReason::MissingHost => "websocket handshake: missing Host header",
            RejectReason::Upgrade => "websocket handshake: Upgrade header must be websocket",
            RejectReason::Connection => {
                "websocket handshake: Connection header must include Upgrade"
            }
            RejectReason::Version => "websocket handshake: unsupported version, use 13",
            RejectReason::MissingKey => "websocket handshake: missing Sec-WebSocket-Key",
            RejectReason::DuplicateKey => "websocket handshake: repeated Sec-WebSocket-Key",
            RejectReason::BadKey => {
                "websocket handshake: Sec-WebSocket-Key must be base64 of 16 bytes"
            }
            RejectReason::Origin => "websocket handshake: origin not allowed",
        }
    }
}

/// A refused handshake: write `response`, then close.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reject {
    pub reason: RejectReason,
    pub status: u16,
    pub response: Vec<u8>,
}

/// An accepted handshake: write `response`, then speak frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accept {
    /// The Sec-WebSocket-Accept value (28 base64 characters).
    pub accept: String,
    pub response: Vec<u8>,
}

impl Accept {
    /// Adds `Sec-WebSocket-Protocol: {name}` to the 101 (the caller checked that it was offered).
    pub fn select_protocol(&mut self, name: &str) {
        debug_assert!(self.response.ends_with(b"\r\n\r\n"));
        self.response.truncate(self.response.len() - 2);
        self.response.extend_from_slice(b"Sec-WebSocket-Protocol: ");
        self.response.extend_from_slice(name.as_bytes());
        self.response.extend_from_slice(b"\r\n\r\n");
    }
}

/// The subprotocol c1m selects when a client offers it (next to a publish-key entry).
pub const PROTOCOL: &str = "c1m";
/// Prefix of the `Sec-WebSocket-Protocol` entry that carries the publish key, for browsers,
/// which cannot set `Authorization` on a WebSocket. The key must then be made of token
/// characters (RFC 7230 3.2.6), e.g. letters, digits and `-._~`.
pub const PUBLISH_KEY_PROTOCOL: &str = "c1m.publish-key.";

/// The entries of every `Sec-WebSocket-Protocol` header, trimmed, in order.
pub fn offered_protocols<'a>(req: &'a crate::http::Request<'_>) -> impl Iterator<Item = &'a str> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty())
}

/// The publish key offered as a `c1m.publish-key.KEY` subprotocol entry, if any.
pub fn offered_publish_key<'a>(req: &'a crate::http::Request<'_>) -> Option<&'a str> {
    offered_protocols(req).find_map(|p| p.strip_prefix(PUBLISH_KEY_PROTOCOL))
}

/// `base64(SHA-1(key + GUID))` (RFC 6455 4.2.2 step 5.4). Clients use it to check our answer.
pub fn accept_key(key: &[u8]) -> String {
    let mut h = sha1_smol::Sha1::new();
    h.update(key);
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.digest().bytes())
}

/// Does this request ask for WebSocket at all (`Upgrade` lists `websocket`)? The `/sub`
/// negotiation uses it to pick WebSocket over SSE and long-poll before [`validate`].
pub fn is_upgrade<'h>(headers: impl IntoIterator<Item = (&'h str, &'h [u8])>) -> bool {
    headers
        .into_iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("upgrade") && has_token(v, b"websocket"))
}

/// Validates an upgrade request. `version_minor` is HTTP/1.x's x (httparse's `version`);
/// `headers` are (name, value) pairs as parsed, in any case, repeated names allowed.
pub fn validate<'h>(
    method: &str,
    path: &str,
    version_minor: u8,
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    origins: &OriginPolicy,
) -> Result<Accept, Reject> {
    check(method, path, version_minor, headers, origins).map_err(reject)
}

/// [`validate`] for a head parsed by [`crate::http::parse_request`] (the server's path).
pub fn validate_request(
    req: &crate::http::Request<'_>,
    origins: &OriginPolicy,
) -> Result<Accept, Reject> {
    validate(
        req.method,
        req.path,
        req.minor_version,
        req.headers.iter().copied(),
        origins,
    )
}

fn check<'h>(
    method: &str,
    path: &str,
    version_minor: u8,
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    origins: &OriginPolicy,
) -> Result<Accept, RejectReason> {
    if method != "GET" {
        return Err(RejectReason::Method);
    }
    if version_minor < 1 {
        return Err(RejectReason::HttpVersion);
    }
    if !path.starts_with('/') || path.contains('#') {
        return Err(RejectReason::Path);
    }
    // One pass over the headers, remembering what each rule needs.
    let (mut host, mut upgrade, mut connection) = (false, false, false);
    let mut version: Option<bool> = None;
    let mut key: Option<&[u8]> = None;
    let mut keys = 0u32;
    let mut origin_ok = true;
    let mut origin_seen = false;
    for (name, value) in headers {
        let is = |n: &str| name.eq_ignore_ascii_case(n);
        if is("host") {
            host = true;
        } else if is("upgrade") {
            upgrade |= has_token(value, b"websocket");
        } else if is("connection") {
            connection |= has_token(value, b"upgrade");
        } else if is("sec-websocket-version") {
            // Every occurrence must say 13: a client offers exactly one version.
            version = Some(version.unwrap_or(true) && trim(value) == b"13");
        } else if is("sec-websocket-key") {
            keys += 1;
            key = Some(trim(value));
        } else if is("origin") {
            origin_seen = true;
            origin_ok &= origins.allows(Some(value));
        }
    }
    if !host {
        return Err(RejectReason::MissingHost);
    }
    if !upgrade {
        return Err(RejectReason::Upgrade);
    }
    if !connection {
        return Err(RejectReason::Connection);
    }
    // Missing counts as wrong: the 426 tells the client what to send.
    if version != Some(true) {
        return Err(RejectReason::Version);
    }
    let key = key.ok_or(RejectReason::MissingKey)?;
    if keys > 1 {
        return Err(RejectReason::DuplicateKey);
    }
    // 16 bytes encode to exactly 24 characters; checking first bounds the decode.
    let decoded = (key.len() == 24)
        .then(|| base64::engine::general_purpose::STANDARD.decode(key).ok())
        .flatten();
    if decoded.map(|k| k.len()) != Some(16) {
        return Err(RejectReason::BadKey);
    }
    if !(if origin_seen {
        origin_ok
    } else {
        origins.allows(None)
    }) {
        return Err(RejectReason::Origin);
    }
    let accept = accept_key(key);
    let mut response = Vec::with_capacity(128);
    response.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: ",
    );
    response.extend_from_slice(accept.as_bytes());
    response.extend_from_slice(b"\r\n\r\n");
    Ok(Accept { accept, response })
}

fn reject(reason: RejectReason) -> Reject {
    let status = reason.status();
    let (status_line, extra) = match status {
        // RFC 7231 6.5.15: a 426 names the protocol to upgrade to, and RFC 7230 6.7 wants
        // "upgrade" in Connection beside it.
        426 => (
            "426 Upgrade Required",
            "Sec-WebSocket-Version: 13\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n",
        ),
        403 => ("403 Forbidden", "Connection: close\r\n"),
        _ => ("400 Bad Request", "Connection: close\r\n"),
    };
    let body = reason.message();
    let response = format!(
        "HTTP/1.1 {status_line}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\n{extra}\r\n{body}\n",
        body.len() + 1
    )
    .into_bytes();
    Reject {
        reason,
        status,
        response,
    }
}

/// Client side (the load generator): the upgrade request for `path` on `host`, with
/// `nonce` as the key (RFC 6455 4.1: 16 random bytes per connection). Returns the request and
/// the accept value the server must answer with.
pub fn client_request(host: &str, path: &str, nonce: [u8; 16]) -> (Vec<u8>, String) {
    let key = base64::engine::general_purpose::STANDARD.encode(nonce);
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes();
    (request, accept_key(key.as_bytes()))
}

/// Client side: does a parsed response head accept our upgrade (RFC 6455 4.1, the client's
/// checks: 101, Upgrade and Connection tokens, and the expected Sec-WebSocket-Accept)?
pub fn client_accepts<'h>(
    status: u16,
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    expected_accept: &str,
) -> bool {
    let (mut upgrade, mut connection, mut accept) = (false, false, false);
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("upgrade") {
            upgrade |= has_token(value, b"websocket");
        } else if name.eq_ignore_ascii_case("connection") {
            connection |= has_token(value, b"upgrade");
        } else if name.eq_ignore_ascii_case("sec-websocket-accept") {
            accept = trim(value) == expected_accept.as_bytes();
        }
    }
    status == 101 && upgrade && connection && accept
}

/// Is `token` one of the comma-separated tokens of `value` (ASCII case-insensitive)?
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| trim(t).eq_ignore_ascii_case(token))
}

/// Strips optional whitespace (RFC 7230 3.2.3: SP and HTAB).
fn trim(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

#[cfg(test)]
#[path = "handshake_tests.rs"]
mod tests;
