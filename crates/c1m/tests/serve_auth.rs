//! Subscriber and publisher auth by JWT against the real binary. Tokens are minted
//! by tests/auth/mint.py (python3 hmac/hashlib, and the openssl CLI for RS256/ES256/EdDSA),
//! not by the crate the server verifies with; clients are curl, tungstenite and the harness's
//! spec-written SSE reader.

use crate::auth;
use crate::common;

use auth::{curl_answer, curl_status, now, Keys};
use common::{Server, Sse};
use serde_json::json;
use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

/// Opens a WebSocket offering `protocols` (comma-separated); panics unless it gets a 101.
fn ws(server: &Server, path: &str, protocols: &str) -> Ws {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("ws://{}{path}", server.http)
        .into_client_request()
        .unwrap();
    if !protocols.is_empty() {
        request.headers_mut().append(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_str(protocols).unwrap(),
        );
    }
    let (socket, response) = tungstenite::client(request, stream).unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// The next text message (pings are answered by tungstenite).
fn next_text(socket: &mut Ws) -> serde_json::Value {
    loop {
        match socket.read().expect("read a message") {
            Message::Text(t) => return serde_json::from_str(&t).unwrap(),
            Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    }
}

fn expect_close(socket: &mut Ws) -> (CloseCode, String) {
    loop {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => return (frame.code, frame.reason.to_string()),
            Ok(Message::Text(t)) => panic!("unexpected data before the close: {t}"),
            Ok(_) => {}
            Err(e) => panic!("connection ended without a close frame: {e}"),
        }
    }
}

fn metric(server: &Server, line_start: &str) -> String {
    let text = server.metrics();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in /metrics"))
        .to_string()
}

/// `c1m serve` with `--auth MODE --jwt-key KEY` on WORKERS workers, then EXTRA flags.
fn auth_server(workers: u32, mode: &str, key: &str, extra: &[&str]) -> Server {
    let workers = workers.to_string();
    let mut args = vec!["--workers", &workers, "--auth", mode, "--jwt-key", key];
    args.extend_from_slice(extra);
    Server::start(&args)
}

#[test]
fn subscribers_need_a_token_that_grants_their_channels() {
    let keys = Keys::new("grants");
    let server = auth_server(2, "required", &keys.secret(), &["--auth-cookie", "c1m_jwt"]);
    let chat = keys.hs256(&json!({"exp": now() + 300, "sub": "u1", "channels": ["chat.*"]}));
    let expired = keys.hs256(&json!({"exp": now() - 5, "channels": ["chat.*"]}));
    let forged = {
        let other = Keys::new("forged-other");
        std::fs::write(
            other.dir.join("secret"),
            "another-secret-of-at-least-32-bytes!!",
        )
        .unwrap();
        other.hs256(&json!({"exp": now() + 300, "channels": ["chat.*"]}))
    };
    let sse = "Accept: text/event-stream";
    let url = |path: &str| server.url(path);

    // No token, an expired one, a forged one: 401 with a Bearer challenge.
    let answer = curl_answer(&["-H", sse, &url("/sub/chat.a")]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("WWW-Authenticate: Bearer"), "{answer}");
    assert_eq!(
        curl_status(&["-H", sse, &url(&format!("/sub/chat.a?token={expired}"))]),
        401
    );
    let bearer = format!("Authorization: Bearer {forged}");
    assert_eq!(
        curl_status(&["-H", sse, "-H", &bearer, &url("/sub/chat.a")]),
        401
    );
    // A good token, channels it does not grant: 403 (one of several is enough to refuse).
    let bearer = format!("Authorization: Bearer {chat}");
    assert_eq!(
        curl_status(&["-H", sse, "-H", &bearer, &url("/sub/news")]),
        403
    );
    assert_eq!(
        curl_status(&["-H", sse, "-H", &bearer, &url("/sub/chat.a,news")]),
        403
    );
    assert_eq!(
        curl_status(&["-H", sse, "-H", &bearer, &url("/sub/chat.a.b")]),
        403
    );
    // A WebSocket without a token is refused before the upgrade.
    let ws_head = "GET /sub/chat.a HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    assert_eq!(
        common::status_code(&common::raw_exchange(server.http, ws_head.as_bytes())),
        401
    );

    // Granted: by Bearer (harness SSE), by ?token= (tungstenite), by cookie (curl), by the
    // WebSocket subprotocol (tungstenite) — all receive the publish.
    let mut by_bearer = Sse::connect(server.http, "/sub/chat.room1", &format!("{bearer}\r\n"));
    let mut by_query = ws(&server, &format!("/sub/chat.room1?token={chat}"), "");
    let mut by_protocol = ws(
        &server,
        "/sub/chat.room1",
        &format!("c1m, c1m.token.{chat}"),
    );
    let mut by_cookie = Command::new("curl")
        .args(["-s", "-N", "--max-time", "10", "-H", sse, "-b"])
        .arg(format!("theme=dark; c1m_jwt={chat}"))
        .arg(url("/sub/chat.room1"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let _kill = KillOnDrop(&mut by_cookie);
    server.wait_status(|s| s["connections"]["sse"] == 2 && s["connections"]["websocket"] == 2);
    let id = server.publish("chat.room1", b"hello members");
    assert_eq!(by_bearer.next().data, "hello members");
    for socket in [&mut by_query, &mut by_protocol] {
        let m = next_text(socket);
        assert_eq!(
            (m["id"].as_u64(), m["data"].as_str()),
            (Some(id), Some("hello members"))
        );
    }
    let mut lines = BufReader::new(_kill.0.stdout.take().unwrap()).lines();
    let data = lines
        .find_map(|l| l.ok().filter(|l| l.starts_with("data:")))
        .expect("curl got an event");
    assert_eq!(data, "data: hello members");

    let s =
        server.wait_status(|s| s["refused"]["unauthorized"] == 4 && s["refused"]["forbidden"] == 3);
    assert_eq!(s["refused"]["expired"], 0, "{s}");
    assert_eq!(
        metric(&server, "c1m_refused_total{reason=\"unauthorized\"}"),
        "c1m_refused_total{reason=\"unauthorized\"} 4"
    );
}

struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_held_stream_ends_at_its_token_expiry_with_a_clear_signal() {
    let keys = Keys::new("expiry");
    let server = auth_server(1, "required", &keys.secret(), &[]);
    let exp = now() + 3; // margin for a loaded box: the publish must come before it
    let short = keys.hs256(&json!({"exp": exp, "channels": "news"}));
    let mut sse = Sse::connect(server.http, &format!("/sub/news?token={short}"), "");
    let mut socket = ws(&server, &format!("/sub/news?token={short}"), "");
    server.wait_status(|s| s["connections"]["sse"] == 1 && s["connections"]["websocket"] == 1);
    let id = server.publish("news", b"before expiry");
    assert_eq!(sse.next().id, Some(id.to_string()));
    assert_eq!(next_text(&mut socket)["data"], "before expiry");

    let expired = sse.next();
    assert!(now() >= exp, "ended before the token's exp");
    assert_eq!(expired.event.as_deref(), Some("expired"), "{expired:?}");
    let rest = sse.read_to_close(); // the server closes the stream after the signal
    assert!(
        !rest.contains("data: "),
        "nothing after the expiry signal: {rest:?}"
    );
    let (code, reason) = expect_close(&mut socket);
    assert!(now() >= exp);
    assert_eq!(code, CloseCode::from(4001), "{reason}");
    assert!(reason.contains("expired"), "{reason}");
    let s = server.wait_status(|s| s["refused"]["expired"] == 2);
    assert_eq!(s["connections"]["sse"], 0, "{s}");
    assert_eq!(s["connections"]["websocket"], 0, "{s}");
}

#[test]
fn a_waiting_long_poll_ends_at_its_token_expiry_and_a_longer_token_waits_out_the_poll() {
    let keys = Keys::new("poll-expiry");
    let server = auth_server(1, "required", &keys.secret(), &["--poll-timeout", "8s"]);
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(20))
        .build();
    // (status, body) of one poll; ureq reports a 4xx as an Err carrying the response.
    let poll = |token: &str| -> (u16, String) {
        match agent
            .get(&server.url(&format!("/sub/news?token={token}")))
            .call()
        {
            Ok(answer) | Err(ureq::Error::Status(_, answer)) => {
                (answer.status(), answer.into_string().unwrap())
            }
            Err(e) => panic!("poll failed: {e}"),
        }
    };

    // A token that expires before the poll timeout: 401 at its exp, not a 204 after 8 s, and
    // no message after the expiry reaches it.
    let exp = now() + 2;
    let short = keys.hs256(&json!({"exp": exp, "channels": "news"}));
    let started = Instant::now();
    let (status, body) = poll(&short);
    assert_eq!(status, 401, "expected 401 at the token's expiry: {body}");
    assert!(now() >= exp, "answered before the token's exp");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(7), "{waited:?}");
    assert!(body.contains("token expired"), "{body}");
    let s = server.wait_status(|s| s["refused"]["expired"] == 1);
    assert_eq!(s["connections"]["longpoll"], 0, "{s}");

    // A token that outlives the poll: the plain 204 at the poll timeout, on the same
    // keep-alive connection the 401 left open.
    let long = keys.hs256(&json!({"exp": now() + 300, "channels": "news"}));
    let started = Instant::now();
    assert_eq!(poll(&long).0, 204);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(7), "{waited:?}");
    assert_eq!(server.status()["refused"]["expired"], 1);
}

#[test]
fn a_refreshed_websocket_stays_and_a_resubscribe_with_last_id_loses_nothing() {
    let keys = Keys::new("refresh");
    let server = auth_server(1, "required", &keys.secret(), &[]);
    // Tokens are minted just before use with a few seconds to live: on a loaded CI box a
    // step can take a second or more, and an expiry before the step under test is not the
    // case being tested.
    let long = keys.hs256(&json!({"exp": now() + 300, "channels": ["room.*"]}));
    let elsewhere = keys.hs256(&json!({"exp": now() + 300, "channels": ["other"]}));

    // WebSocket: a refresh message moves the expiry; the old one passes without a close.
    let ws_exp = now() + 4;
    let short = keys.hs256(&json!({"exp": ws_exp, "channels": ["room.*"]}));
    let mut kept = ws(&server, "/sub/room.1", &format!("c1m.token.{short}"));
    kept.send(Message::Text(
        json!({"type": "refresh", "token": long}).to_string().into(),
    ))
    .unwrap();
    let ack = next_text(&mut kept);
    assert_eq!(ack["type"], "refreshed", "{ack}");
    assert!(now() < ws_exp, "the refresh came too late to test anything");
    let mut refused = ws(&server, "/sub/room.1", &format!("c1m.token.{long}"));
    refused
        .send(Message::Text(
            json!({"type": "refresh", "token": elsewhere})
                .to_string()
                .into(),
        ))
        .unwrap();
    let (code, _) = expect_close(&mut refused);
    assert_eq!(code, CloseCode::from(4003));

    // SSE: ends at exp; the client comes back with a new token and its last id.
    let sse_exp = now() + 3;
    let short = keys.hs256(&json!({"exp": sse_exp, "channels": ["room.*"]}));
    let mut sse = Sse::connect(server.http, &format!("/sub/room.1?token={short}"), "");
    // The 200 head means subscribed: the publish reaches it (well before sse_exp).
    let first = server.publish("room.1", b"m1");
    assert_eq!(sse.next().data, "m1");
    assert_eq!(next_text(&mut kept)["data"], "m1");
    assert_eq!(sse.next().event.as_deref(), Some("expired"));
    assert!(now() >= sse_exp);
    let _ = sse.read_to_close();
    let missed: Vec<u64> = (2..=3)
        .map(|i| server.publish("room.1", format!("m{i}").as_bytes()))
        .collect();
    // Past the WebSocket's old expiry (plus a wheel tick) before looking at it again.
    while now() < ws_exp + 1 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut again = Sse::connect(
        server.http,
        &format!("/sub/room.1?token={long}&last_id={first}"),
        "",
    );
    for (i, id) in missed.iter().enumerate() {
        let ev = again.next();
        assert_eq!(
            (ev.id, ev.data),
            (Some(id.to_string()), format!("m{}", i + 2))
        );
    }
    // The refreshed WebSocket got everything, live, and is still open.
    for i in 2..=3 {
        assert_eq!(next_text(&mut kept)["data"], format!("m{i}"));
    }
    let s = server.wait_status(|s| s["refused"]["expired"] == 1);
    assert_eq!(s["connections"]["websocket"], 1, "{s}");
    assert_eq!(s["refused"]["forbidden"], 1, "{s}");
}

#[test]
fn rs256_es256_and_eddsa_keys_from_openssl_verify() {
    let keys = Keys::new("asym");
    for (alg, genpkey) in [
        (
            "RS256",
            &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"][..],
        ),
        (
            "ES256",
            &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"][..],
        ),
        ("EdDSA", &["-algorithm", "ED25519"][..]),
    ] {
        let (private, public) = keys.openssl_pair(alg, genpkey);
        let server = auth_server(1, "required", public.to_str().unwrap(), &[]);
        let good = auth::mint(
            alg,
            &private,
            &json!({"exp": now() + 60, "channels": ["a"]}),
        );
        let mut sse = Sse::connect(server.http, &format!("/sub/a?token={good}"), "");
        server.wait_status(|s| s["connections"]["sse"] == 1);
        server.publish("a", alg.as_bytes());
        assert_eq!(sse.next().data, alg);
        // The HS256 token of a secret is refused: no algorithm confusion with a public key.
        let hs = keys.hs256(&json!({"exp": now() + 60, "channels": ["a"]}));
        let sse_h = "Accept: text/event-stream";
        assert_eq!(
            curl_status(&["-H", sse_h, &server.url(&format!("/sub/a?token={hs}"))]),
            401,
            "{alg}"
        );
    }
}

#[test]
fn publishers_may_show_a_jwt_with_a_publish_claim_beside_the_key() {
    let keys = Keys::new("publish");
    let server = Server::start(&[
        "--workers",
        "1",
        "--jwt-key",
        &keys.secret(),
        "--publish-key",
        "the-publish-key",
        "--ws-client-publish",
    ]);
    let writer = keys.hs256(&json!({"exp": now() + 60, "publish": ["chat.*"]}));
    let reader = keys.hs256(&json!({"exp": now() + 60, "channels": ["chat.*"]}));
    let post = |channel: &str, auth: &str| {
        let mut args = vec!["-X", "POST", "-d", "x"];
        let header = format!("Authorization: Bearer {auth}");
        if !auth.is_empty() {
            args.extend(["-H", &header]);
        }
        let url = server.url(&format!("/pub/{channel}"));
        args.push(&url);
        curl_status(&args)
    };
    assert_eq!(post("chat.a", &writer), 200);
    assert_eq!(
        post("news", &writer),
        403,
        "publish claim does not cover news"
    );
    assert_eq!(post("chat.a", &reader), 403, "no publish claim");
    assert_eq!(
        post("chat.a", "the-publish-key"),
        200,
        "the key still works"
    );
    assert_eq!(post("chat.a", ""), 401, "a key is configured");
    let forged = format!("{}x", &writer[..writer.len() - 1]);
    assert_eq!(post("chat.a", &forged), 401);

    // WebSocket client publish: the upgrade's token decides, by the same rule.
    let mut watcher = Sse::connect(server.http, "/sub/chat.b", "");
    let mut may = ws(&server, "/sub/chat.b", &format!("c1m, c1m.token.{writer}"));
    let mut may_not = ws(&server, "/sub/chat.b", &format!("c1m, c1m.token.{reader}"));
    server.wait_status(|s| s["connections"]["websocket"] == 2);
    may.send(Message::Text("from a jwt".into())).unwrap();
    assert_eq!(watcher.next().data, "from a jwt");
    assert_eq!(next_text(&mut may_not)["data"], "from a jwt"); // it may read, not write
    may_not.send(Message::Text("refused".into())).unwrap();
    assert_eq!(expect_close(&mut may_not).0, CloseCode::Policy);
    // 401 ×2 (no key, the forged JWT); 403 ×2 (claims) and the WebSocket's publish.
    server.wait_status(|s| s["refused"]["unauthorized"] == 2 && s["refused"]["forbidden"] == 3);
    std::thread::sleep(Duration::from_millis(300)); // and no more than these
    let s = server.status();
    assert_eq!(
        (
            s["refused"]["unauthorized"].as_u64(),
            s["refused"]["forbidden"].as_u64()
        ),
        (Some(2), Some(3)),
        "{s}"
    );
}

#[test]
fn optional_auth_lets_anonymous_in_but_judges_a_token_that_is_shown() {
    let keys = Keys::new("optional");
    let server = auth_server(1, "optional", &keys.secret(), &[]);
    let mut anonymous = Sse::connect(server.http, "/sub/open", "");
    let wrong = keys.hs256(&json!({"exp": now() + 60, "channels": ["other"]}));
    let sse = "Accept: text/event-stream";
    assert_eq!(
        curl_status(&["-H", sse, &server.url(&format!("/sub/open?token={wrong}"))]),
        403
    );
    assert_eq!(
        curl_status(&["-H", sse, &server.url("/sub/open?token=not.a.jwt")]),
        401
    );
    server.publish("open", b"hi");
    assert_eq!(anonymous.next().data, "hi");
    // Raw read to make sure the anonymous stream is not ended by any timer.
    anonymous
        .stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = anonymous.stream.read(&mut buf);
    assert!(
        n.is_err() && started.elapsed() >= Duration::from_millis(250),
        "{n:?}"
    );
}

#[test]
fn bad_auth_configurations_are_refused_at_start() {
    let keys = Keys::new("config");
    let short = keys.dir.join("short");
    std::fs::write(&short, "too-short").unwrap();
    let private = keys
        .openssl_pair(
            "p",
            &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        )
        .0;
    for (args, expect) in [
        // The mode as the flag spells it, not as the program's enum does.
        (
            vec!["--auth", "required"],
            "--auth required needs --jwt-key",
        ),
        (
            vec![
                "--auth",
                "required",
                "--jwt-key",
                &keys.secret(),
                "--auth-cookie",
                "c1m_jwt",
                "--cors-origins",
                "*",
            ],
            "--auth-cookie cannot be combined with --cors-origins '*'",
        ),
        (
            vec!["--auth", "required", "--jwt-key", short.to_str().unwrap()],
            "at least 32 bytes",
        ),
        (
            vec!["--auth", "required", "--jwt-key", private.to_str().unwrap()],
            "private key",
        ),
        (
            vec!["--auth", "required", "--jwt-key", "/nonexistent/key"],
            "reading --jwt-key",
        ),
        (
            vec![
                "--auth",
                "required",
                "--jwt-key",
                &keys.secret(),
                "--tcp-listen",
                "127.0.0.1:0",
            ],
            "--tcp-listen",
        ),
    ] {
        let out = common::c1m()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{args:?}: {err}");
    }
}

/// Opens a WebSocket with extra request headers; the HTTP status of the answer (101 when
/// upgraded, else the refusal's) and, when upgraded, the socket.
fn ws_with_headers(server: &Server, path: &str, headers: &[(&str, &str)]) -> (u16, Option<Ws>) {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("ws://{}{path}", server.http)
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request.headers_mut().append(
            tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    match tungstenite::client(request, stream) {
        Ok((socket, response)) => (response.status().as_u16(), Some(socket)),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            (response.status().as_u16(), None)
        }
        Err(e) => panic!("handshake: {e}"),
    }
}

#[test]
fn the_auth_cookie_is_not_honoured_from_a_foreign_origin() {
    let keys = Keys::new("cookie-origin");
    let token = keys.hs256(&json!({"exp": now() + 300, "channels": ["private.*"]}));
    let cookie = format!("c1m_jwt={token}");
    let evil = ("Origin", "https://evil.example");
    let sse = "Accept: text/event-stream";

    // No origin list: a page on any site would open a WebSocket with the visitor's cookie.
    let server = auth_server(1, "required", &keys.secret(), &["--auth-cookie", "c1m_jwt"]);
    let (status, _) = ws_with_headers(&server, "/sub/private.alice", &[evil, ("Cookie", &cookie)]);
    assert_eq!(status, 403, "a foreign Origin's cookie opened the stream");
    // The same for an EventSource (SSE) and a long-poll from that page.
    let url = server.url("/sub/private.alice");
    let origin = "Origin: https://evil.example";
    let answer = curl_answer(&["-H", sse, "-H", origin, "-b", &cookie, &url]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("--cors-origins"), "{answer}");
    assert_eq!(curl_status(&["-H", origin, "-b", &cookie, &url]), 403);
    // A program (no Origin) still may use the cookie, and a token the page itself shows (not
    // sent by the browser on its own) is judged as usual.
    let (status, socket) = ws_with_headers(&server, "/sub/private.alice", &[("Cookie", &cookie)]);
    assert_eq!(status, 101);
    drop(socket);
    let protocol = format!("c1m, c1m.token.{token}");
    let (status, _) = ws_with_headers(
        &server,
        "/sub/private.alice",
        &[evil, ("Sec-WebSocket-Protocol", &protocol)],
    );
    assert_eq!(status, 101);
    server.wait_status(|s| s["refused"]["forbidden"] == 3);
    // Without any token, the 401 says where one may travel, the configured cookie included.
    let answer = curl_answer(&["-H", sse, &url]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("cookie c1m_jwt"), "{answer}");
    drop(server);

    // With a list: the listed page's cookie works, a stranger's is refused before the upgrade.
    let app = "https://app.example";
    let server = auth_server(
        1,
        "required",
        &keys.secret(),
        &["--auth-cookie", "c1m_jwt", "--cors-origins", app],
    );
    let (status, socket) = ws_with_headers(
        &server,
        "/sub/private.alice",
        &[("Origin", app), ("Cookie", &cookie)],
    );
    assert_eq!(status, 101);
    let mut socket = socket.unwrap();
    server.wait_status(|s| s["connections"]["websocket"] == 1);
    let id = server.publish("private.alice", b"for alice");
    assert_eq!(next_text(&mut socket)["id"].as_u64(), Some(id));
    let (status, _) = ws_with_headers(&server, "/sub/private.alice", &[evil, ("Cookie", &cookie)]);
    assert_eq!(status, 403);
}

#[test]
fn tokens_are_judged_by_nbf_by_the_exact_exp_and_wildcards_never_grant_an_empty_segment() {
    let keys = Keys::new("claims");
    let server = auth_server(1, "required", &keys.secret(), &[]);
    let sse = "Accept: text/event-stream";
    let status = |token: &str, channel: &str| {
        let bearer = format!("Authorization: Bearer {token}");
        curl_status(&[
            "-H",
            sse,
            "-H",
            &bearer,
            "--max-time",
            "1",
            &server.url(&format!("/sub/{channel}")),
        ])
    };
    // A stream that is let in is held open: curl's timeout leaves the 200 it saw.
    let fresh = keys.hs256(&json!({"exp": now() + 300, "channels": ["chat.*", "chat.*.x"]}));
    assert_eq!(status(&fresh, "chat.room"), 200);
    // Not before a minute from now: refused (RFC 7519 4.1.5).
    let early = keys.hs256(&json!({"exp": now() + 300, "nbf": now() + 60, "channels": "chat.*"}));
    let answer = curl_answer(&[
        "-H",
        sse,
        "-H",
        &format!("Authorization: Bearer {early}"),
        &server.url("/sub/chat.room"),
    ]);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("not valid yet"), "{answer}");
    // Expiring at the start of this very second: already past.
    let this_second = keys.hs256(&json!({"exp": now(), "channels": "chat.*"}));
    assert_eq!(status(&this_second, "chat.room"), 401);
    // A wildcard is one or more characters: not the empty segment.
    assert_eq!(status(&fresh, "chat."), 403);
    assert_eq!(status(&fresh, "chat..x"), 403);
    assert_eq!(status(&fresh, "chat.a.x"), 200);
}
