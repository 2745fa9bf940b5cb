//! WebSocket over HTTP/2 (RFC 8441 extended CONNECT) against the real binary, driven by an
//! independent client: python-h2 for the HTTP/2 frames and wsproto's frame codec for the
//! WebSocket frames in them (tests/http2/websocket.py over a loopback socket, h2c), and by
//! headless Chromium over TLS.

use crate::auth::{now, Keys};
use crate::common::Server;
use crate::serve_http2::{metric, PyClient};
use crate::tls_support::{read_until, TestPki, TlsServer};
use serde_json::json;
use std::time::Duration;

fn websocket_py(port: u16, args: &[&str]) -> PyClient {
    PyClient::script("websocket.py", port, args)
}

/// An extended CONNECT spec for websocket.py's `open` mode.
fn spec(path: &str, headers: &[(&str, &str)]) -> serde_json::Value {
    let mut h = vec![json!(["sec-websocket-version", "13"])];
    h.extend(headers.iter().map(|(n, v)| json!([n, v])));
    json!({"path": path, "headers": h})
}

#[test]
fn a_websocket_stream_subscribes_publishes_pings_and_closes_beside_another_and_an_sse_stream() {
    let srv = Server::start(&["--workers", "1", "--ws-client-publish"]);
    let mut py = websocket_py(srv.http.port(), &["session"]);
    py.ready();
    // Two WebSockets and one SSE stream, all on the client's one connection.
    let s = srv.wait_status(|s| {
        s["connections"]["websocket"] == 2
            && s["connections"]["sse"] == 1
            && s["http2"]["websocket_streams_open"] == 2
    });
    assert_eq!(s["http2"]["connections"], 1, "{s}");
    assert_eq!(s["http2"]["websocket_streams"], 2, "{s}");
    let m = srv.metrics();
    assert_eq!(metric(&m, "c1m_http2_websocket_streams "), 2, "{m}");
    srv.publish("alpha", b"to alpha");
    srv.publish("beta", b"to beta");
    srv.publish("gamma", b"to gamma");
    let v = py.result();
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(
        v["enable_connect_protocol"], 1,
        "setting not advertised: {v}"
    );
    assert_eq!(
        v["status"],
        json!({"alpha": "200", "beta": "200", "gamma": "200"})
    );
    assert_eq!(
        v["accept_header"], false,
        "RFC 8441 §5: no Sec-WebSocket-Accept: {v}"
    );
    // alpha's own publish came back to it through the channel.
    assert_eq!(
        v["data"]["alpha"],
        json!(["to alpha", "from client"]),
        "{v}"
    );
    assert_eq!(v["data"]["beta"], json!(["to beta"]), "{v}");
    assert_eq!(v["data"]["gamma"], json!(["to gamma"]), "{v}");
    assert_eq!(v["pong"], json!(["are you there"]), "{v}");
    // The closing handshake: the code echoed, then END_STREAM (not a reset with an error).
    assert_eq!(v["close"][0], 1000, "{v}");
    assert_eq!(v["beta_ended"], true, "{v}");
    assert!(matches!(v["beta_reset"].as_u64(), None | Some(0)), "{v}");
    assert!(
        v["alpha_reset"].is_null() && v["alpha_close"].is_null(),
        "{v}"
    );
    // Every stream slot went with the connection.
    let s = srv.wait_status(|s| {
        s["connections"]["websocket"] == 0 && s["http2"]["websocket_streams_open"] == 0
    });
    assert_eq!(s["http2"]["connect_refused"], 0, "{s}");
    assert_eq!(s["http2"]["stream_errors"], 0, "{s}");
}

#[test]
fn connect_without_the_websocket_protocol_or_off_the_subscribe_path_is_refused_and_counted() {
    let srv = Server::start(&["--workers", "1"]);
    let specs = json!([
        {"path": "/", "protocol": null},
        {"path": "/sub/x", "protocol": "chat", "headers": [["sec-websocket-version", "13"]]},
        spec("/status", &[]),
        {"path": "/sub/x", "headers": []},
    ]);
    let mut py = websocket_py(srv.http.port(), &["open", &specs.to_string()]);
    py.ready();
    let v = py.result();
    assert_eq!(v["complete"], true, "{v}");
    let streams = v["streams"].as_array().unwrap();
    let statuses: Vec<&str> = streams
        .iter()
        .map(|s| s["status"].as_str().unwrap_or("none"))
        .collect();
    // Plain CONNECT: no proxy here; another protocol; no WebSocket on /status; and the same
    // version check as an HTTP/1.1 upgrade (426 naming the version).
    assert_eq!(statuses, ["405", "400", "404", "426"], "{v}");
    assert_eq!(streams[0]["headers"]["allow"], "GET, POST, OPTIONS", "{v}");
    assert!(
        streams[1]["body"]
            .as_str()
            .unwrap()
            .contains("only :protocol served is websocket"),
        "{v}"
    );
    assert_eq!(streams[3]["headers"]["sec-websocket-version"], "13", "{v}");
    for s in streams {
        assert_eq!(s["ended"], true, "each answer ends its stream: {v}");
    }
    let s = srv.wait_status(|s| s["http2"]["connect_refused"] == 3);
    assert_eq!(s["http2"]["websocket_streams"], 0, "{s}");
    assert_eq!(s["refused"]["method"], 1, "{s}");
    assert_eq!(s["refused"]["not_found"], 1, "{s}");
    assert_eq!(s["refused"]["bad_request"], 2, "{s}");
    assert_eq!(metric(&srv.metrics(), "c1m_http2_connect_refused_total"), 3);
}

#[test]
fn a_websocket_stream_is_judged_by_the_same_auth_and_origin_rules_as_an_upgrade() {
    let keys = Keys::new("h2ws");
    let srv = Server::start(&[
        "--workers",
        "1",
        "--auth",
        "required",
        "--jwt-key",
        &keys.secret(),
        "--ws-origins",
        "https://app.example",
    ]);
    let token = keys.hs256(&json!({"exp": now() + 300, "channels": ["chat.*"]}));
    let good = format!("/sub/chat.a?token={token}");
    let specs = json!([
        spec("/sub/chat.a", &[]),
        spec(&format!("/sub/news?token={token}"), &[]),
        spec(&good, &[("origin", "https://evil.example")]),
        spec(&good, &[("origin", "https://app.example")]),
    ]);
    let mut py = websocket_py(srv.http.port(), &["open", &specs.to_string()]);
    py.ready();
    srv.wait_status(|s| s["connections"]["websocket"] == 1);
    srv.publish("chat.a", b"for the token holder");
    let v = py.result();
    let streams = v["streams"].as_array().unwrap();
    let statuses: Vec<&str> = streams
        .iter()
        .map(|s| s["status"].as_str().unwrap_or("none"))
        .collect();
    // No token: 401 with the challenge; a channel the token does not grant: 403; an Origin
    // outside --ws-origins: 403; the token and an allowed Origin: open.
    assert_eq!(statuses, ["401", "403", "403", "200"], "{v}");
    assert!(
        streams[0]["headers"]["www-authenticate"]
            .as_str()
            .is_some_and(|c| c.starts_with("Bearer")),
        "{v}"
    );
    let data: serde_json::Value = serde_json::from_str(streams[3]["texts"][0].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {v}"));
    assert_eq!(data["data"], "for the token holder", "{v}");
    let s = srv.status();
    assert_eq!(s["refused"]["unauthorized"], 1, "{s}");
    assert_eq!(s["refused"]["forbidden"], 2, "{s}");
}

#[test]
fn a_websocket_stream_publishes_only_with_the_key_and_resumes_from_last_id() {
    let srv = Server::start(&[
        "--workers",
        "1",
        "--ws-client-publish",
        "--publish-key",
        "k3y",
    ]);
    let publish = |payload: &str| -> u64 {
        let body = ureq::post(&srv.url("/pub/r"))
            .set("Authorization", "Bearer k3y")
            .send_string(payload)
            .unwrap()
            .into_string()
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap()
    };
    let first = publish("one");
    publish("two");
    let mut with_key = spec("/sub/k", &[("authorization", "Bearer k3y")]);
    with_key["send"] = json!("published with the key");
    let mut without = spec("/sub/n", &[]);
    without["send"] = json!("published without");
    let specs = json!([
        with_key,
        without,
        spec(&format!("/sub/r?last_id={first}"), &[])
    ]);
    let mut py = websocket_py(srv.http.port(), &["open", &specs.to_string()]);
    py.ready();
    let v = py.result();
    let streams = v["streams"].as_array().unwrap();
    let data = |i: usize| -> Vec<String> {
        streams[i]["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                let e: serde_json::Value = serde_json::from_str(t.as_str().unwrap()).unwrap();
                e["data"].as_str().unwrap().to_string()
            })
            .collect()
    };
    // With the key its message went to its channel and back to it; without, 1008 as on HTTP/1.1.
    assert_eq!(data(0), ["published with the key"], "{v}");
    assert_eq!(streams[1]["close"][0], 1008, "{v}");
    assert!(
        streams[1]["close"][1]
            .as_str()
            .unwrap()
            .contains("publishing needs the key"),
        "{v}"
    );
    assert_eq!(data(2), ["two"], "replay after last_id: {v}");
}

#[test]
fn a_websocket_stream_sending_a_message_over_the_limit_is_closed_with_1009_and_counted() {
    let srv = Server::start(&["--workers", "1", "--ws-max-message", "64"]);
    let mut big = spec("/sub/big", &[]);
    big["send"] = json!("x".repeat(200));
    let specs = json!([big, spec("/sub/calm", &[])]);
    let mut py = websocket_py(srv.http.port(), &["open", &specs.to_string()]);
    py.ready();
    srv.publish("calm", b"unbothered");
    let v = py.result();
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams[0]["close"][0], 1009, "{v}");
    assert!(streams[1]["close"].is_null(), "the sibling was closed: {v}");
    assert_eq!(streams[1]["texts"].as_array().map(Vec::len), Some(1), "{v}");
    let s = srv.wait_status(|s| s["refused"]["ws_protocol"] == 1);
    assert_eq!(s["http2"]["stream_errors"], 0, "{s}");
}

#[test]
fn frames_past_the_input_limit_while_the_connect_proxy_is_pending_close_with_1008() {
    // A backend that accepts the proxy's call and never answers: the WebSocket (already
    // answered 200, as an upgrade gets its 101 first) waits, and its frames wait with it.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = format!("http://{}/connect", silent.local_addr().unwrap());
    // Input limit: an 8 KiB head plus a 1000-byte body's chunked wire size, about 25 KiB.
    let srv = Server::start(&[
        "--workers",
        "1",
        "--max-payload",
        "1000",
        "--api-max-body",
        "1000",
        "--proxy-connect-url",
        &backend,
        "--proxy-timeout",
        "10s",
    ]);
    let mut flood = spec("/sub/held", &[]);
    flood["send"] = json!("x".repeat(40_000));
    let specs = json!([flood]);
    let mut py = websocket_py(srv.http.port(), &["open", &specs.to_string()]);
    py.ready();
    let v = py.result();
    let stream = &v["streams"][0];
    assert_eq!(stream["status"], "200", "{v}");
    assert_eq!(stream["close"][0], 1008, "{v}");
    assert!(
        stream["close"][1]
            .as_str()
            .unwrap()
            .contains("before the subscription"),
        "{v}"
    );
    let s = srv.wait_status(|s| s["refused"]["bad_request"] == 1);
    assert_eq!(s["connections"]["websocket"], 0, "{s}");
}

#[test]
fn a_websocket_stream_whose_window_stays_shut_is_closed_while_its_sibling_keeps_receiving() {
    let srv = Server::start(&["--workers", "1"]);
    let mut py = websocket_py(srv.http.port(), &["stall", "40"]);
    py.ready();
    srv.wait_status(|s| s["connections"]["websocket"] == 2);
    // 640 KiB to the stalled stream: past its 64 KiB window and the 256 KiB it may hold. Each
    // message spans two DATA frames; it is numbered so that a lost, doubled or split one shows.
    let message = |i: usize| format!("{i:08}{}", "x".repeat(16 * 1024 - 8));
    for i in 0..40 {
        srv.publish("stall", message(i).as_bytes());
        srv.publish("live", message(i).as_bytes());
    }
    let v = py.result();
    assert_eq!(v["complete"], true, "{v}");
    let heads: Vec<String> = (0..40).map(|i| format!("{i:08}")).collect();
    assert_eq!(v["live_heads"], json!(heads), "{v}");
    assert_eq!(v["stall_reset"], 8, "expected RST_STREAM CANCEL: {v}");
    assert!(v["live_reset"].is_null(), "{v}");
    let s = srv.wait_status(|s| s["http2"]["slow_streams"] == 1);
    assert_eq!(s["refused"]["slow_consumer"], 1, "{s}");
}

#[test]
fn shutdown_closes_a_websocket_stream_with_1001_then_goaway() {
    let mut srv = Server::start(&["--workers", "1", "--grace", "5s"]);
    let mut py = websocket_py(srv.http.port(), &["goaway"]);
    py.ready();
    srv.wait_status(|s| s["connections"]["websocket"] == 1);
    srv.signal(libc::SIGTERM);
    let v = py.result();
    assert_eq!(v["status"], "200", "{v}");
    assert_eq!(v["close"], json!([1001, "server shutting down"]), "{v}");
    assert_eq!(v["ended"], true, "the stream was not ended: {v}");
    assert_eq!(v["goaway"], 0, "expected GOAWAY(NO_ERROR): {v}");
    srv.wait_exit(Duration::from_secs(10));
}

/// Headless Chromium over TLS (the test CA in its NSS database) loads the server's /demo page
/// over HTTP/2; the page opens a same-origin `new WebSocket('wss://…')` and an EventSource, and
/// reports what both received. Chromium sends the WebSocket as an extended CONNECT on the
/// page's HTTP/2 connection once the server advertises ENABLE_CONNECT_PROTOCOL (seen with
/// Debian's Chromium 156, no flags): one HTTP/2 connection carries the page, the EventSource and
/// the WebSocket, and no HTTP/1.1 upgrade is made.
#[test]
fn chromium_opens_a_same_origin_websocket_over_the_pages_http2_connection() {
    let pki = TestPki::new("h2ws-browser");
    let leaf = pki.leaf("c1m-h2ws");
    let srv = TlsServer::start(&leaf, &pki, &["--workers", "1"]);
    let mut report = pki.connect(srv.http);
    std::io::Write::write_all(
        &mut report,
        b"GET /sub/h2ws-report HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
    )
    .unwrap();
    read_until(&mut report, "\r\n\r\n");
    let url = format!("https://{}/demo?channel=h2ws&report=h2ws-report", srv.http);
    let _browser = crate::browser::Browser::open_with(&url, "h2ws", &[], Some(&pki.ca_pem));
    // The page's WebSocket and EventSource, and this test's report stream (HTTP/1.1).
    let s = srv.wait_status(&pki, |s| {
        s["connections"]["websocket"] == 1 && s["connections"]["sse"] == 2
    });
    assert_eq!(s["http2"]["connections"], 1, "{s}");
    assert_eq!(
        s["http2"]["websocket_streams_open"], 1,
        "the WebSocket did not come over HTTP/2: {s}"
    );
    assert_eq!(s["http2"]["websocket_streams"], 1, "{s}");
    srv.publish(&pki, "h2ws", b"over h2");
    let got = read_until(&mut report, "sse=over h2");
    assert!(got.contains("data: ws=over h2 sse=over h2"), "{got}");
}
