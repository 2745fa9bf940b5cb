//! CORS (Fetch standard, "CORS protocol") for `/sub` and `/pub`: the headers an allowed
//! Origin gets on every answer, and the `OPTIONS` preflight. The allow-list is the one the
//! WebSocket Origin check uses (`Config::origin_list`).
//!
//! A list echoes the request's Origin and allows credentials (cookies, for `--auth-cookie`);
//! `*` answers `Access-Control-Allow-Origin: *` and never allows credentials: with a wildcard,
//! credentials would let any site act with the user's cookie.

use crate::config::Config;
use c1m_proto::http::{self, Request};
use std::rc::Rc;

/// Request headers a preflight may ask for (what subscribers and publishers send).
const ALLOWED_HEADERS: &str = "Authorization, Content-Type, Last-Event-ID, Cache-Control";
/// How long a browser may cache a preflight answer.
const MAX_AGE_S: u32 = 600;

pub enum Cors {
    /// No CORS headers (same-origin pages and non-browser clients only).
    Off,
    Any,
    /// Allowed origins (lower-cased, no trailing `/`) and their ready-made header lines.
    List(Vec<(String, Rc<str>)>),
}

impl Cors {
    pub fn from_config(cfg: &Config) -> Cors {
        let Some(list) = cfg.cors_origins.as_deref() else {
            return Cors::Off;
        };
        if list.trim() == "*" {
            return Cors::Any;
        }
        let origins = list
            .split(',')
            .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|o| !o.is_empty())
            .map(|o| {
                let lines = format!(
                    "Access-Control-Allow-Origin: {o}\r\nAccess-Control-Allow-Credentials: true\r\nVary: Origin\r\n"
                );
                (o, Rc::from(lines))
            })
            .collect();
        Cors::List(origins)
    }

    /// The header lines an answer to a request from `origin` carries; None when there is no
    /// Origin, CORS is off, or the origin is not on the list.
    pub fn headers(&self, origin: Option<&str>) -> Option<Rc<str>> {
        let origin = origin?.trim().trim_end_matches('/');
        match self {
            Cors::Off => None,
            Cors::Any => Some(Rc::from("Access-Control-Allow-Origin: *\r\n")),
            Cors::List(list) => list
                .iter()
                .find(|(o, _)| o.eq_ignore_ascii_case(origin))
                .map(|(_, h)| h.clone()),
        }
    }

    /// A browser request from an origin the list leaves out (refused with 403: its page could
    /// not read the answer anyway, and a simple POST would otherwise still publish).
    pub fn refuses(&self, req: &Request<'_>) -> bool {
        matches!(self, Cors::List(_))
            && req.header_str("Origin").is_some()
            && self.headers(req.header_str("Origin")).is_none()
    }

    pub fn is_on(&self) -> bool {
        !matches!(self, Cors::Off)
    }

    /// The answer to an `OPTIONS` preflight for a route served with `method`: 204 with the
    /// `Access-Control-*` headers, or Err(403 answer) for an origin not allowed.
    pub fn preflight(
        &self,
        req: &Request<'_>,
        method: &str,
        keep_alive: bool,
    ) -> Result<Vec<u8>, Vec<u8>> {
        let Some(allow) = self.headers(req.header_str("Origin")) else {
            return Err(http::error(403, "origin not allowed (see --cors-origins)"));
        };
        let extra = format!(
            "{allow}Access-Control-Allow-Methods: {method}, OPTIONS\r\nAccess-Control-Allow-Headers: {ALLOWED_HEADERS}\r\nAccess-Control-Max-Age: {MAX_AGE_S}\r\nVary: Access-Control-Request-Method, Access-Control-Request-Headers\r\n"
        );
        let mut answer = http::response(204, "text/plain", &extra, b"", keep_alive);
        // 204 carries no body (RFC 9110 15.3.5): drop the Content-Length line response() adds.
        if let Some(at) = find(&answer, b"Content-Length: 0\r\n") {
            answer.drain(at..at + b"Content-Length: 0\r\n".len());
        }
        Ok(answer)
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use c1m_proto::http::parse_request;

    fn cors(list: &str) -> Cors {
        Cors::from_config(&Config {
            cors_origins: Some(list.into()),
            ..Config::default()
        })
    }

    #[test]
    fn a_list_echoes_the_origin_with_credentials_and_a_wildcard_never_does() {
        let list = cors("https://App.example/, http://127.0.0.2:9000");
        let h = list.headers(Some("https://app.example")).unwrap();
        assert!(h.contains("Access-Control-Allow-Origin: https://app.example\r\n"));
        assert!(h.contains("Access-Control-Allow-Credentials: true"));
        assert!(list.headers(Some("https://evil.example")).is_none());
        assert!(list.headers(None).is_none());
        let any = cors("*");
        let h = any.headers(Some("https://x.example")).unwrap();
        assert_eq!(&*h, "Access-Control-Allow-Origin: *\r\n");
    }

    #[test]
    fn preflight_names_the_method_and_refuses_strangers() {
        let list = cors("https://app.example");
        let req = parse_request(
            b"OPTIONS /pub/a HTTP/1.1\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\r\n",
        )
        .unwrap();
        let ok = String::from_utf8(list.preflight(&req, "POST", true).unwrap()).unwrap();
        assert!(ok.starts_with("HTTP/1.1 204"), "{ok}");
        assert!(
            ok.contains("Access-Control-Allow-Methods: POST, OPTIONS"),
            "{ok}"
        );
        assert!(!ok.contains("Content-Length"), "{ok}");
        let req = parse_request(b"OPTIONS /pub/a HTTP/1.1\r\nOrigin: https://evil.example\r\n\r\n")
            .unwrap();
        assert!(list.preflight(&req, "POST", true).is_err());
        assert!(list.refuses(&req));
    }
}
