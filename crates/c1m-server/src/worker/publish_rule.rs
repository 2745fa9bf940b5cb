//! Who may publish: one rule for `POST /pub/{ch}` and for WebSocket client messages
//! (`--ws-client-publish`), so a WebSocket is never a way around the publish key.
//!
//! With `--publish-key`, the request must carry the key: `Authorization: Bearer KEY`, or, on a
//! WebSocket upgrade only, a `Sec-WebSocket-Protocol` entry `c1m.publish-key.KEY` (browsers
//! cannot set headers on a WebSocket). The key is never accepted in the query string: URLs end
//! up in access logs, proxy logs and browser history. Without a key, only loopback peers may
//! publish, and a loopback request that carries a proxy's forwarding header (`Forwarded`,
//! `X-Forwarded-For`, `X-Real-IP`) is not one: behind a reverse proxy on the same host every
//! client arrives from loopback, and the header is the proxy saying so.
//!
//! With `--jwt-key`, a publisher may instead show a JWT (`Authorization: Bearer JWT`, or on a
//! WebSocket upgrade the subprotocol `c1m.token.JWT`) whose `publish` claim covers the
//! channel. A JWT that is shown is judged even where the key or loopback would let the request
//! in: a bad token is a plain 401, not silently ignored.

use crate::auth::{Auth, Refusal};
use c1m_proto::http::Request;
use c1m_proto::ws::handshake;
use std::net::IpAddr;

/// The close reason (1008) for a WebSocket that publishes without the key.
pub const WS_NEEDS_KEY: &str =
    "publishing needs the key: Authorization: Bearer KEY or subprotocol c1m.publish-key.KEY";

/// Why a publisher is turned away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// A key is configured and the request did not carry it (HTTP 401).
    NeedsKey,
    /// No key is configured and the peer is not on loopback (HTTP 403).
    LoopbackOnly,
    /// No key is configured and the loopback peer is a proxy forwarding someone else (HTTP 403).
    Proxied,
    /// A JWT was shown and does not verify (401) or does not grant the channel (403).
    Token(Refusal),
}

impl Denied {
    pub fn http_status(&self) -> u16 {
        match self {
            Denied::NeedsKey => 401,
            Denied::LoopbackOnly | Denied::Proxied => 403,
            Denied::Token(r) => r.status(),
        }
    }

    /// The reason, short enough for a WebSocket close frame (≤ 123 bytes).
    pub fn message(&self) -> &str {
        match self {
            Denied::Token(r) => r.message(),
            Denied::NeedsKey => "publishing needs Authorization: Bearer <publish key>",
            Denied::LoopbackOnly => {
                "publishing is allowed from loopback only unless --publish-key is set"
            }
            Denied::Proxied => {
                "a request forwarded by a proxy is not a loopback publisher: set --publish-key"
            }
        }
    }
}

/// Judges a publish to `channels`, or a WebSocket upgrade for the right to publish later to
/// the channels it subscribes: a JWT when one is shown, else the key or loopback rule.
pub fn check_with_token(
    key: Option<&str>,
    auth: &Auth,
    req: &Request<'_>,
    peer: Option<IpAddr>,
    channels: &[&str],
) -> Result<(), Denied> {
    if key.is_some() && check(key, req, None).is_ok() {
        return Ok(());
    }
    match auth.publish(req, channels) {
        Some(Ok(())) => Ok(()),
        Some(Err(refusal)) => Err(Denied::Token(refusal)),
        None => check(key, req, peer),
    }
}

/// Judges a publish request, or a WebSocket upgrade for the right to publish later.
pub fn check(key: Option<&str>, req: &Request<'_>, peer: Option<IpAddr>) -> Result<(), Denied> {
    let Some(key) = key else {
        return match peer {
            Some(ip) if is_loopback(ip) && is_forwarded(req) => Err(Denied::Proxied),
            Some(ip) if is_loopback(ip) => Ok(()),
            _ => Err(Denied::LoopbackOnly),
        };
    };
    let bearer = req
        .header_str("Authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let is_upgrade = handshake::is_upgrade(req.headers.iter().copied());
    let offered = is_upgrade
        .then(|| handshake::offered_publish_key(req))
        .flatten();
    let matches =
        |given: Option<&str>| given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes()));
    if matches(bearer) || matches(offered) {
        Ok(())
    } else {
        Err(Denied::NeedsKey)
    }
}

/// Loopback, including IPv4 loopback seen through a dual-stack `[::]` listener as
/// `::ffff:127.0.0.1`.
pub fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// The request passed through a proxy that says whom it forwards (RFC 7239 `Forwarded`, or the
/// de-facto `X-Forwarded-For` / `X-Real-IP` that nginx and HAProxy add when configured to).
fn is_forwarded(req: &Request<'_>) -> bool {
    ["Forwarded", "X-Forwarded-For", "X-Real-IP"]
        .iter()
        .any(|name| req.header(name).is_some())
}

/// Compares secrets without an early exit, so timing does not reveal a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use c1m_proto::http::parse_request;

    #[test]
    fn loopback_publishers_on_any_listener() {
        for ip in ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.0.0.1", "::ffff:10.0.0.1", "2001:db8::1"] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn close_reasons_fit_a_close_frame() {
        // RFC 6455 5.5: control frame payload ≤ 125 bytes, 2 of them the code.
        for reason in [
            WS_NEEDS_KEY,
            Denied::LoopbackOnly.message(),
            Denied::Proxied.message(),
        ] {
            assert!(reason.len() <= 123, "{reason}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_time_eq(b"key", b"key"));
        assert!(!constant_time_eq(b"key", b"kez"));
        assert!(!constant_time_eq(b"key", b"key2"));
    }

    #[test]
    fn key_from_bearer_everywhere_and_from_subprotocol_on_upgrades_only() {
        let remote = Some("10.0.0.1".parse().unwrap());
        let judge =
            |head: &str| check(Some("k1"), &parse_request(head.as_bytes()).unwrap(), remote);
        assert_eq!(
            judge("POST /pub/a HTTP/1.1\r\nAuthorization: Bearer k1\r\n\r\n"),
            Ok(())
        );
        assert_eq!(
            judge("POST /pub/a HTTP/1.1\r\nAuthorization: Bearer k2\r\n\r\n"),
            Err(Denied::NeedsKey)
        );
        let upgrade = "GET /sub/a HTTP/1.1\r\nUpgrade: websocket\r\n";
        assert_eq!(
            judge(&format!(
                "{upgrade}Sec-WebSocket-Protocol: c1m, c1m.publish-key.k1\r\n\r\n"
            )),
            Ok(())
        );
        assert_eq!(
            judge("POST /pub/a HTTP/1.1\r\nSec-WebSocket-Protocol: c1m.publish-key.k1\r\n\r\n"),
            Err(Denied::NeedsKey)
        );
        assert_eq!(
            judge("GET /sub/a?publish_key=k1 HTTP/1.1\r\n\r\n"),
            Err(Denied::NeedsKey)
        );
        // Without a key: the peer address decides.
        let req = parse_request(b"POST /pub/a HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            check(None, &req, Some("127.0.0.1".parse().unwrap())),
            Ok(())
        );
        assert_eq!(check(None, &req, remote), Err(Denied::LoopbackOnly));
        assert_eq!(check(None, &req, None), Err(Denied::LoopbackOnly));
    }

    #[test]
    fn a_proxy_on_loopback_does_not_make_its_clients_loopback_publishers() {
        let loopback = Some("127.0.0.1".parse().unwrap());
        for header in [
            "X-Forwarded-For: 203.0.113.9",
            "Forwarded: for=203.0.113.9",
            "X-Real-IP: 203.0.113.9",
        ] {
            let head = format!("POST /pub/a HTTP/1.1\r\n{header}\r\n\r\n");
            let req = parse_request(head.as_bytes()).unwrap();
            assert_eq!(
                check(None, &req, loopback),
                Err(Denied::Proxied),
                "{header}"
            );
            // With a key, the key decides wherever the request came from.
            let keyed =
                format!("POST /pub/a HTTP/1.1\r\n{header}\r\nAuthorization: Bearer k1\r\n\r\n");
            let req = parse_request(keyed.as_bytes()).unwrap();
            assert_eq!(check(Some("k1"), &req, loopback), Ok(()), "{header}");
        }
    }
}
