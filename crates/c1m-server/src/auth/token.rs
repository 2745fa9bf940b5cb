//! Where a subscriber's or publisher's JWT is found in a request, in this order:
//! `Authorization: Bearer`, the `token` query parameter (EventSource cannot set headers), the
//! cookie named by `--auth-cookie`, and on a WebSocket upgrade a `Sec-WebSocket-Protocol`
//! entry `c1m.token.<JWT>` (browsers cannot set headers on a WebSocket either; a JWT is made
//! of token characters, so it fits a subprotocol name).

use c1m_proto::http::Request;
use c1m_proto::ws::handshake;

/// Prefix of the subprotocol entry that carries a JWT.
pub const TOKEN_PROTOCOL: &str = "c1m.token.";

/// Where a request's token was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Bearer,
    Query,
    /// The browser adds it by itself, whichever site's page made the request.
    Cookie,
    Subprotocol,
}

/// The token a request carries, if any, and where it was found. `cookie`: the name
/// `--auth-cookie` gives.
pub fn find_with_source<'a>(
    req: &'a Request<'_>,
    cookie: Option<&str>,
) -> Option<(&'a str, Source)> {
    if let Some(bearer) = bearer(req) {
        return Some((bearer, Source::Bearer));
    }
    if let Some(t) = req.query_param("token").filter(|t| !t.is_empty()) {
        return Some((t, Source::Query));
    }
    if let Some(t) = cookie.and_then(|name| cookie_value(req, name)) {
        return Some((t, Source::Cookie));
    }
    if handshake::is_upgrade(req.headers.iter().copied()) {
        return handshake::offered_protocols(req)
            .find_map(|p| p.strip_prefix(TOKEN_PROTOCOL))
            .filter(|t| !t.is_empty())
            .map(|t| (t, Source::Subprotocol));
    }
    None
}

/// The `Authorization: Bearer` value (scheme case-insensitive, RFC 9110 11.1).
pub fn bearer<'a>(req: &Request<'a>) -> Option<&'a str> {
    let value = req.header_str("Authorization")?;
    let (scheme, rest) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim())
        .filter(|t| !t.is_empty())
}

/// The value of cookie `name` from every `Cookie` header (`a=1; b=2`, RFC 6265 4.2.1).
fn cookie_value<'a>(req: &Request<'a>, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("cookie"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name)
                .then(|| v.trim_matches('"'))
                .filter(|v| !v.is_empty())
        })
}

/// The subprotocol entry a browser used for its token, when it offered no `c1m` entry (the
/// answer must name one of the offered entries, or the browser fails the connection).
pub fn offered_token_protocol<'a>(req: &'a Request<'_>) -> Option<&'a str> {
    handshake::offered_protocols(req).find(|p| p.starts_with(TOKEN_PROTOCOL))
}

#[cfg(test)]
mod tests {
    use super::*;
    use c1m_proto::http::parse_request;

    fn found(head: &str, cookie: Option<&str>) -> Option<String> {
        let req = parse_request(head.as_bytes()).unwrap();
        find_with_source(&req, cookie).map(|(t, _)| t.to_string())
    }

    #[test]
    fn every_place_a_token_may_travel() {
        assert_eq!(
            found(
                "GET /sub/a HTTP/1.1\r\nAuthorization: bearer h.p.s\r\n\r\n",
                None
            )
            .as_deref(),
            Some("h.p.s")
        );
        assert_eq!(
            found("GET /sub/a?last_id=3&token=q.p.s HTTP/1.1\r\n\r\n", None).as_deref(),
            Some("q.p.s")
        );
        let cookie = "GET /sub/a HTTP/1.1\r\nCookie: x=1; c1m_jwt=c.p.s; y=2\r\n\r\n";
        assert_eq!(found(cookie, Some("c1m_jwt")).as_deref(), Some("c.p.s"));
        assert_eq!(
            found(cookie, None),
            None,
            "cookies are read only when named"
        );
        let ws = "GET /sub/a HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: c1m, c1m.token.w.p.s\r\n\r\n";
        assert_eq!(found(ws, None).as_deref(), Some("w.p.s"));
        let not_ws = "GET /sub/a HTTP/1.1\r\nSec-WebSocket-Protocol: c1m.token.w.p.s\r\n\r\n";
        assert_eq!(found(not_ws, None), None);
        assert_eq!(
            found(
                "GET /sub/a HTTP/1.1\r\nAuthorization: Basic abc\r\n\r\n",
                None
            ),
            None
        );
    }
}
