//! The server's edge against the real binary: who may publish over a WebSocket
//! (item 5), per-source-address connection limits, and WebSocket resume and slow-consumer
//! closes (item 11). tungstenite is the independent WebSocket client.

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

/// Opens a WebSocket with extra request headers; returns it with the 101's headers.
fn ws_with(
    server: &Server,
    path: &str,
    headers: &[(&'static str, &str)],
) -> (Ws, Vec<(String, String)>) {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!("ws://{}{path}", server.http)
        .into_client_request()
        .unwrap();
    for (name, value) in headers {
        request
            .headers_mut()
            .append(*name, HeaderValue::from_str(value).unwrap());
    }
    let (socket, response) = tungstenite::client(request, stream).unwrap();
    assert_eq!(response.status(), 101);
    let head = response
        .headers()
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    (socket, head)
}

/// Reads until the server's close frame; returns its code (panics on data or a bare EOF).
fn expect_close(socket: &mut Ws) -> (CloseCode, String) {
    loop {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => return (frame.code, frame.reason.to_string()),
            Ok(Message::Close(None)) => panic!("close frame without a code"),
            Ok(Message::Text(t)) => panic!("unexpected data before the close: {t}"),
            Ok(_) => {}
            Err(e) => panic!("connection ended without a close frame: {e}"),
        }
    }
}

#[test]
fn ws_client_publish_needs_key() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--ws-client-publish",
        "--publish-key",
        "k1-secret",
    ]);
    let mut watcher = Sse::connect(server.http, "/sub/auth", "");
    let (mut anonymous, _) = ws_with(&server, "/sub/auth", &[]);
    let (mut wrong, _) = ws_with(&server, "/sub/auth", &[("Authorization", "Bearer nope")]);
    let (mut bearer, _) = ws_with(
        &server,
        "/sub/auth",
        &[("Authorization", "Bearer k1-secret")],
    );
    let (mut browser, head) = ws_with(
        &server,
        "/sub/auth",
        &[("Sec-WebSocket-Protocol", "c1m, c1m.publish-key.k1-secret")],
    );
    // The browser form gets the plain `c1m` entry back, never the key.
    let selected: Vec<&str> = head
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(selected, ["c1m"]);
    let (mut by_query, _) = ws_with(&server, "/sub/auth?publish_key=k1-secret", &[]);
    server.wait_status(|s| s["connections"]["websocket"] == 5);

    for (socket, text) in [
        (&mut anonymous, "anonymous"),
        (&mut wrong, "wrong key"),
        (&mut by_query, "key in the URL"),
    ] {
        socket.send(Message::Text(text.into())).unwrap();
        let (code, reason) = expect_close(socket);
        assert_eq!(code, CloseCode::Policy, "{text}");
        assert!(reason.contains("publish"), "{reason}");
    }
    server.wait_status(|s| s["refused"]["forbidden"] == 3);
    bearer.send(Message::Text("from bearer".into())).unwrap();
    assert_eq!(watcher.next().data, "from bearer");
    browser.send(Message::Text("from browser".into())).unwrap();
    assert_eq!(watcher.next().data, "from browser");
    // Nothing the refused sockets sent reached the channel: the next event is a fresh publish.
    ureq::post(&server.url("/pub/auth"))
        .set("Authorization", "Bearer k1-secret")
        .send_bytes(b"last")
        .unwrap();
    assert_eq!(watcher.next().data, "last");
}

/// Opens a WebSocket by hand (for byte-exact client input); returns it after the 101 head.
fn raw_ws(server: &Server, path: &str) -> TcpStream {
    raw_ws_on(TcpStream::connect(server.http).unwrap(), path)
}

/// The upgrade of [`raw_ws`] on a stream the caller connected (e.g. with a small receive
/// buffer).
fn raw_ws_on(mut stream: TcpStream, path: &str) -> TcpStream {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "EOF in the 101 head");
        got.push(byte[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    stream
}

/// A masked client text frame (mask key 0: valid, and the payload stays readable).
fn masked_text(payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mut f = vec![0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0];
    f.extend_from_slice(payload);
    f
}

/// Splits unmasked server frames into (opcode, payload).
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while bytes.len() >= 2 {
        let op = bytes[0] & 0x0f;
        let (len, start) = match bytes[1] & 0x7f {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize,
                10,
            ),
            n => (n as usize, 2),
        };
        frames.push((op, bytes[start..start + len].to_vec()));
        bytes = &bytes[start + len..];
    }
    assert!(bytes.is_empty(), "truncated frame: {bytes:?}");
    frames
}

#[test]
fn refused_websocket_gets_one_close_and_one_count() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--ws-client-publish",
        "--publish-key",
        "k",
    ]);
    let mut ws = raw_ws(&server, "/sub/once");
    server.wait_status(|s| s["connections"]["websocket"] == 1);
    // A delivered message proves the WebSocket is live (its join done); then two messages in
    // one segment, read by the server in one pass.
    ureq::post(&server.url("/pub/once"))
        .set("Authorization", "Bearer k")
        .send_bytes(b"live")
        .unwrap();
    let mut first = [0u8; 2];
    ws.read_exact(&mut first).unwrap();
    let mut rest = vec![0u8; usize::from(first[1])];
    ws.read_exact(&mut rest).unwrap();
    assert!(String::from_utf8_lossy(&rest).contains("live"));
    let mut two = masked_text(b"one");
    two.extend(masked_text(b"two"));
    ws.write_all(&two).unwrap();
    let mut answer = Vec::new();
    let _ = ws.read_to_end(&mut answer);
    let frames = server_frames(&answer);
    assert_eq!(frames.len(), 1, "expected one close frame, got {frames:?}");
    assert_eq!(frames[0].0, 8);
    assert_eq!(&frames[0].1[..2], &1008u16.to_be_bytes());
    let status = server.wait_status(|s| s["refused"]["forbidden"] != 0);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.status()["refused"]["forbidden"], 1, "{status}");
}

/// Next data message as JSON (tungstenite answers pings by itself).
fn next_json(socket: &mut Ws) -> serde_json::Value {
    loop {
        match socket.read().unwrap() {
            Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
            Message::Binary(b) => panic!("binary frame: {b:?}"),
            Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    }
}

#[test]
fn websocket_default_frames_carry_ids_and_resume() {
    let server = Server::start(&["--workers", "1", "--history-size", "2"]);
    // No query at all: what a plain `new WebSocket(url)` gets.
    let (mut socket, _) = ws_with(&server, "/sub/res", &[]);
    server.wait_status(|s| s["connections"]["websocket"] == 1);
    let first = server.publish("res", b"one");
    let v = next_json(&mut socket);
    assert_eq!(
        (v["channel"].as_str(), v["id"].as_u64(), v["data"].as_str()),
        (Some("res"), Some(first), Some("one"))
    );
    // A payload that is not UTF-8 arrives whole, as base64 (a JSON string cannot hold it).
    let binary = server.publish("res", &[0xff, 0x00, 0xfe]);
    let v = next_json(&mut socket);
    assert_eq!(v["id"].as_u64(), Some(binary));
    assert_eq!(v["data_base64"].as_str(), Some("/wD+"));
    drop(socket);
    server.wait_status(|s| s["connections"]["websocket"] == 0);
    // Missed while away: three messages, of which history (2) keeps the last two.
    let ids: Vec<u64> = (0..3)
        .map(|i| server.publish("res", format!("missed {i}").as_bytes()))
        .collect();
    let (mut back, _) = ws_with(&server, &format!("/sub/res?last_id={binary}"), &[]);
    let gap = next_json(&mut back);
    assert_eq!(
        (
            gap["type"].as_str(),
            gap["after"].as_u64(),
            gap["through"].as_u64()
        ),
        (Some("gap"), Some(binary), Some(ids[0]))
    );
    assert_eq!(next_json(&mut back)["id"].as_u64(), Some(ids[1]));
    assert_eq!(next_json(&mut back)["id"].as_u64(), Some(ids[2]));
}

#[test]
fn plain_format_is_explicit_and_cannot_resume() {
    let server = Server::start(&["--workers", "1"]);
    let (mut plain, _) = ws_with(&server, "/sub/p?format=plain", &[]);
    let (mut json, _) = ws_with(&server, "/sub/p?format=json", &[]);
    let (mut legacy, _) = ws_with(&server, "/sub/p?envelope=json", &[]);
    server.wait_status(|s| s["connections"]["websocket"] == 3);
    let id = server.publish("p", b"bare");
    assert_eq!(plain.read().unwrap(), Message::Text("bare".into()));
    assert_eq!(next_json(&mut json)["id"].as_u64(), Some(id));
    assert_eq!(next_json(&mut legacy)["id"].as_u64(), Some(id));
    // Plain frames carry no id and no channel: asking plain to resume, or to mix channels,
    // is refused rather than silently served without resume or gap notices.
    let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
                   Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
    for path in [
        "/sub/p?format=plain&last_id=5",
        "/sub/p,q?format=plain",
        "/sub/p?format=xml",
    ] {
        let answer = common::raw_exchange(
            server.http,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n{upgrade}\r\n").as_bytes(),
        );
        assert_eq!(common::status_code(&answer), 400, "{path}: {answer}");
        assert!(answer.contains("format"), "{answer}");
    }
    server.wait_status(|s| s["refused"]["bad_request"] == 3);
}

#[test]
fn slow_websocket_is_closed_with_4008_and_can_resume() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--max-unsent",
        "65536",
        "--history-size",
        "1000",
    ]);
    // A subscriber that stops reading, with a small receive window so the kernel's buffers
    // fill soon.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.http.into()).unwrap();
    let mut slow = raw_ws_on(socket.into(), "/sub/slow");
    server.wait_status(|s| s["connections"]["websocket"] == 1);
    let payload = vec![b'x'; 60_000];
    let mut published = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while server.status()["refused"]["slow_consumer"] == 0 {
        assert!(published.len() < 2000, "never judged slow");
        assert!(std::time::Instant::now() < deadline, "never judged slow");
        published.push(server.publish("slow", &payload));
    }
    // One more, sent after the close was decided: it must come with the resume.
    published.push(server.publish("slow", b"after"));
    // Now read everything: whole envelopes, then the close frame saying why.
    let mut bytes = Vec::new();
    let _ = slow.read_to_end(&mut bytes);
    let frames = server_frames(&bytes);
    let (close, messages) = frames.split_last().expect("no frames at all");
    assert_eq!(close.0, 8, "last frame is a close");
    assert_eq!(&close.1[..2], &4008u16.to_be_bytes());
    assert!(String::from_utf8_lossy(&close.1[2..]).contains("slow consumer"));
    let mut last_read = 0;
    for (op, body) in messages {
        assert_eq!(*op, 1);
        let v: serde_json::Value = serde_json::from_slice(body).unwrap();
        assert!(v["id"].as_u64().unwrap() > last_read);
        last_read = v["id"].as_u64().unwrap();
    }
    assert_eq!(server.status()["refused"]["slow_consumer"], 1);
    // The id it read last is where it picks up: the next published message comes first.
    let next = published.iter().copied().find(|&id| id > last_read);
    let (mut back, _) = ws_with(&server, &format!("/sub/slow?last_id={last_read}"), &[]);
    assert_eq!(next_json(&mut back)["id"].as_u64(), next);
}

#[test]
fn slow_websocket_that_never_reads_is_cut_off() {
    let server = Server::start(&["--workers", "1", "--max-unsent", "65536"]);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.http.into()).unwrap();
    let _never_reads = raw_ws_on(socket.into(), "/sub/stuck");
    server.wait_status(|s| s["connections"]["websocket"] == 1);
    let payload = vec![b'x'; 60_000];
    for _ in 0..2000 {
        if server.status()["refused"]["slow_consumer"] != 0 {
            break;
        }
        server.publish("stuck", &payload);
    }
    // Closing, with the close frame queued behind what it owes; it never reads, so the socket
    // is closed after the linger (5 s) instead of being held forever.
    let judged = std::time::Instant::now();
    server.wait_status(|s| s["refused"]["slow_consumer"] == 1 && s["connections"]["total"] == 1);
    let waited = judged.elapsed();
    assert!(waited < Duration::from_secs(8), "{waited:?}");
}
