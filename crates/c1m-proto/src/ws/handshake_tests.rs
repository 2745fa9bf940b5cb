//! Handshake rules, each test named after the RFC 6455 section it checks.

use super::*;

const KEY: &[u8] = b"dGhlIHNhbXBsZSBub25jZQ==";

fn good() -> Vec<(&'static str, &'static [u8])> {
    vec![
        ("Host", b"server.example.com"),
        ("Upgrade", b"websocket"),
        ("Connection", b"Upgrade"),
        ("Sec-WebSocket-Key", KEY),
        ("Sec-WebSocket-Version", b"13"),
    ]
}

fn run(headers: &[(&'static str, &'static [u8])], policy: &OriginPolicy) -> Result<Accept, Reject> {
    validate("GET", "/sub/news", 1, headers.iter().copied(), policy)
}

fn reason(headers: &[(&'static str, &'static [u8])]) -> RejectReason {
    run(headers, &OriginPolicy::Any).unwrap_err().reason
}

fn with(name: &'static str, value: Option<&'static [u8]>) -> Vec<(&'static str, &'static [u8])> {
    let mut h: Vec<_> = good()
        .into_iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case(name))
        .collect();
    if let Some(v) = value {
        h.push((name, v));
    }
    h
}

#[test]
fn rfc6455_1_3_accept_key_example() {
    assert_eq!(accept_key(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

#[test]
fn rfc6455_4_2_2_accept_response() {
    let a = run(&good(), &OriginPolicy::Any).unwrap();
    assert_eq!(a.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    let text = String::from_utf8(a.response).unwrap();
    assert!(text.starts_with("HTTP/1.1 101 Switching Protocols\r\n"));
    assert!(text.contains("\r\nUpgrade: websocket\r\n"));
    assert!(text.contains("\r\nConnection: Upgrade\r\n"));
    assert!(text.ends_with("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"));
    // The response must parse as HTTP.
    let mut hs = [httparse::EMPTY_HEADER; 8];
    let mut r = httparse::Response::new(&mut hs);
    assert!(r.parse(text.as_bytes()).unwrap().is_complete());
    assert_eq!(r.code, Some(101));
}

#[test]
fn rfc6455_9_1_extensions_negotiated_off() {
    let mut h = good();
    h.push((
        "Sec-WebSocket-Extensions",
        b"permessage-deflate; client_max_window_bits",
    ));
    h.push(("Sec-WebSocket-Protocol", b"chat"));
    let a = run(&h, &OriginPolicy::Any).unwrap();
    let text = String::from_utf8(a.response).unwrap().to_ascii_lowercase();
    assert!(!text.contains("extensions"));
    assert!(!text.contains("protocol:"));
}

#[test]
fn rfc6455_4_2_1_names_case_insensitive_and_token_lists() {
    let h = vec![
        ("hOsT", b"x" as &[u8]),
        ("UPGRADE", b"h2c, WebSocket"),
        ("connection", b"keep-alive,  upgrade "),
        ("sec-websocket-key", b" dGhlIHNhbXBsZSBub25jZQ== "),
        ("SEC-WEBSOCKET-VERSION", b" 13"),
    ];
    assert!(run(&h, &OriginPolicy::Any).is_ok());
    // Connection split over two header lines.
    let mut h = with("Connection", Some(b"keep-alive"));
    h.push(("Connection", b"Upgrade"));
    assert!(run(&h, &OriginPolicy::Any).is_ok());
}

#[test]
fn rfc6455_4_1_method_version_target() {
    let p = &OriginPolicy::Any;
    let e = validate("POST", "/", 1, good(), p).unwrap_err();
    assert_eq!((e.reason, e.status), (RejectReason::Method, 400));
    let e = validate("get", "/", 1, good(), p).unwrap_err();
    assert_eq!(e.reason, RejectReason::Method);
    let e = validate("GET", "/", 0, good(), p).unwrap_err();
    assert_eq!(e.reason, RejectReason::HttpVersion);
    for bad in ["", "sub", "/a#frag", "*"] {
        let e = validate("GET", bad, 1, good(), p).unwrap_err();
        assert_eq!(e.reason, RejectReason::Path, "{bad}");
    }
}

#[test]
fn rfc6455_4_2_1_required_headers_400() {
    assert_eq!(reason(&with("Host", None)), RejectReason::MissingHost);
    assert_eq!(reason(&with("Upgrade", None)), RejectReason::Upgrade);
    assert_eq!(
        reason(&with("Upgrade", Some(b"websockets"))),
        RejectReason::Upgrade
    );
    assert_eq!(reason(&with("Connection", None)), RejectReason::Connection);
    assert_eq!(
        reason(&with("Connection", Some(b"keep-alive"))),
        RejectReason::Connection
    );
    assert_eq!(
        reason(&with("Connection", Some(b"upgrade-ish"))),
        RejectReason::Connection
    );
    assert_eq!(
        reason(&with("Sec-WebSocket-Key", None)),
        RejectReason::MissingKey
    );
    let e = run(&with("Upgrade", None), &OriginPolicy::Any).unwrap_err();
    assert_eq!(e.status, 400);
    let text = String::from_utf8(e.response).unwrap();
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"));
    assert!(text.ends_with("\r\n\r\nwebsocket handshake: Upgrade header must be websocket\n"));
}

#[test]
fn rfc6455_4_2_1_key_must_be_base64_of_16_bytes() {
    for bad in [
        &b""[..],
        b"dGhlIHNhbXBsZSBub25jZQ=",   // 23 chars
        b"dGhlIHNhbXBsZSBub25jZQ===", // 25 chars
        b"dGhlIHNhbXBsZSBub25jZQ!!",  // not base64
        b"dGhlIHNhbXBsZSBub25jZR==",  // non-canonical trailing bits
        b"dGhlIHNhbXBsZSBub25jZXh4",  // 18 bytes
        b"dGhlIHNhbXBs ZSBub25jZQ=",
    ] {
        let h = with("Sec-WebSocket-Key", Some(bad));
        assert_eq!(
            reason(&h),
            RejectReason::BadKey,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn rfc6455_11_3_1_key_only_once() {
    let mut h = good();
    h.push(("sec-websocket-key", KEY));
    assert_eq!(reason(&h), RejectReason::DuplicateKey);
}

#[test]
fn rfc6455_4_4_wrong_version_426() {
    for v in [Some(&b"8"[..]), Some(b"13, 8"), Some(b"14"), None] {
        let e = run(&with("Sec-WebSocket-Version", v), &OriginPolicy::Any).unwrap_err();
        assert_eq!((e.reason, e.status), (RejectReason::Version, 426));
        let mut hs = [httparse::EMPTY_HEADER; 8];
        let mut r = httparse::Response::new(&mut hs);
        assert!(r.parse(&e.response).unwrap().is_complete());
        assert_eq!(r.code, Some(426));
        let ver = r
            .headers
            .iter()
            .find(|h| h.name == "Sec-WebSocket-Version")
            .unwrap();
        assert_eq!(ver.value, b"13");
    }
    let mut h = good();
    h.push(("Sec-WebSocket-Version", b"8"));
    assert_eq!(reason(&h), RejectReason::Version);
}

#[test]
fn rfc6455_10_2_origin_allow_list_403() {
    let policy = OriginPolicy::from_list(" https://a.example , https://B.example/", false);
    let mut h = good();
    h.push(("Origin", b"https://b.EXAMPLE"));
    assert!(run(&h, &policy).is_ok());
    let mut h = good();
    h.push(("Origin", b"https://evil.example"));
    let e = run(&h, &policy).unwrap_err();
    assert_eq!((e.reason, e.status), (RejectReason::Origin, 403));
    assert!(e.response.starts_with(b"HTTP/1.1 403 Forbidden\r\n"));
    // Missing Origin: per policy.
    assert_eq!(
        run(&good(), &policy).unwrap_err().reason,
        RejectReason::Origin
    );
    let lenient = OriginPolicy::from_list("https://a.example", true);
    assert!(run(&good(), &lenient).is_ok());
    // Any origin passes without a list.
    assert_eq!(OriginPolicy::from_list(" , ", false), OriginPolicy::Any);
    assert!(run(&h, &OriginPolicy::Any).is_ok());
}

#[test]
fn is_upgrade_detects_websocket_requests() {
    assert!(is_upgrade(good()));
    assert!(is_upgrade([("upgrade", &b"foo, WEBSOCKET"[..])]));
    assert!(!is_upgrade([("Accept", &b"text/event-stream"[..])]));
}

#[test]
fn reject_responses_have_exact_content_length() {
    for r in [
        RejectReason::Method,
        RejectReason::BadKey,
        RejectReason::Version,
        RejectReason::Origin,
    ] {
        let resp = reject(r).response;
        let mut hs = [httparse::EMPTY_HEADER; 8];
        let mut p = httparse::Response::new(&mut hs);
        let httparse::Status::Complete(head) = p.parse(&resp).unwrap() else {
            panic!()
        };
        let cl = p
            .headers
            .iter()
            .find(|h| h.name == "Content-Length")
            .unwrap();
        let cl: usize = std::str::from_utf8(cl.value).unwrap().parse().unwrap();
        assert_eq!(resp.len() - head, cl);
        assert_eq!(p.code, Some(r.status()));
    }
}

#[test]
fn rfc6455_4_1_client_request_round_trips() {
    let (req, expect) = client_request("localhost:8080", "/sub/a,b", [7; 16]);
    let mut hs = [httparse::EMPTY_HEADER; 16];
    let mut r = httparse::Request::new(&mut hs);
    assert!(r.parse(&req).unwrap().is_complete());
    let pairs: Vec<(&str, &[u8])> = r.headers.iter().map(|h| (h.name, h.value)).collect();
    let a = validate(
        r.method.unwrap(),
        r.path.unwrap(),
        r.version.unwrap(),
        pairs,
        &OriginPolicy::Any,
    )
    .unwrap();
    assert_eq!(a.accept, expect);
    let mut hs = [httparse::EMPTY_HEADER; 16];
    let mut resp = httparse::Response::new(&mut hs);
    assert!(resp.parse(&a.response).unwrap().is_complete());
    let pairs: Vec<(&str, &[u8])> = resp.headers.iter().map(|h| (h.name, h.value)).collect();
    assert!(client_accepts(101, pairs.iter().copied(), &expect));
    assert!(!client_accepts(200, pairs.iter().copied(), &expect));
    assert!(!client_accepts(
        101,
        pairs.iter().copied(),
        "AAAAAAAAAAAAAAAAAAAAAAAAAAA="
    ));
}

#[test]
fn validate_request_takes_the_servers_parsed_head() {
    let head = b"GET /sub/news?last_id=3 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                 Sec-WebSocket-Version: 13\r\n\r\n";
    let req = crate::http::parse_request(head).unwrap();
    assert!(is_upgrade(req.headers.iter().copied()));
    let a = validate_request(&req, &OriginPolicy::Any).unwrap();
    assert_eq!(a.accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

#[test]
fn rfc6455_4_2_2_subprotocol_selected_and_publish_key_offered() {
    let head = b"GET /sub/n HTTP/1.1\r\nHost: h\r\nSec-WebSocket-Protocol: chat, c1m\r\n\
                 Sec-WebSocket-Protocol: c1m.publish-key.s3cr3t\r\n\r\n";
    let req = crate::http::parse_request(head).unwrap();
    let offered: Vec<&str> = offered_protocols(&req).collect();
    assert_eq!(offered, ["chat", "c1m", "c1m.publish-key.s3cr3t"]);
    assert_eq!(offered_publish_key(&req), Some("s3cr3t"));
    let plain = crate::http::parse_request(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").unwrap();
    assert_eq!(offered_publish_key(&plain), None);
    let mut accept = run(&good(), &OriginPolicy::Any).unwrap();
    accept.select_protocol(PROTOCOL);
    let text = String::from_utf8(accept.response).unwrap();
    assert!(
        text.ends_with("\r\nSec-WebSocket-Protocol: c1m\r\n\r\n"),
        "{text}"
    );
}
