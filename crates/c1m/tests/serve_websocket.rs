//! WebSocket subscribers against the real server: tungstenite as an independent client for the
//! happy paths, and frames built by hand on a raw TcpStream for the fragmented and invalid ones.

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

fn ws(server: &Server, path: &str) -> Ws {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (socket, response) =
        tungstenite::client(format!("ws://{}{path}", server.http), stream).unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// Next data message (tungstenite answers pings by itself).
fn next_data(socket: &mut Ws) -> Message {
    loop {
        match socket.read().unwrap() {
            m @ (Message::Text(_) | Message::Binary(_)) => return m,
            Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    }
}

fn json(m: Message) -> serde_json::Value {
    serde_json::from_str(m.to_text().unwrap()).unwrap()
}

#[test]
fn tungstenite_receives_text_binary_and_envelopes() {
    let server = Server::start(&["--workers", "2"]);
    let mut plain = ws(&server, "/sub/w?format=plain");
    let mut env = ws(&server, "/sub/w?envelope=json");
    let mut multi = ws(&server, "/sub/w,v");
    server.wait_status(|s| s["connections"]["websocket"] == 3);
    let id = server.publish("w", b"hello\nworld");
    assert_eq!(next_data(&mut plain), Message::Text("hello\nworld".into()));
    let v = json(next_data(&mut env));
    assert_eq!(
        (v["channel"].as_str(), v["id"].as_u64(), v["data"].as_str()),
        (Some("w"), Some(id), Some("hello\nworld"))
    );
    assert_eq!(json(next_data(&mut multi))["id"].as_u64(), Some(id));
    // A payload that is not UTF-8 arrives as a binary frame, unchanged.
    server.publish("w", &[0xff, 0x00, 0xfe]);
    assert_eq!(
        next_data(&mut plain),
        Message::Binary(vec![0xff, 0x00, 0xfe].into())
    );
    let idv = server.publish("v", b"other");
    let v = json(next_data(&mut multi));
    assert_eq!(
        (v["channel"].as_str(), v["id"].as_u64()),
        (Some("w"), v["id"].as_u64())
    );
    let v = json(next_data(&mut multi));
    assert_eq!(
        (v["channel"].as_str(), v["id"].as_u64()),
        (Some("v"), Some(idv))
    );
}

#[test]
fn websocket_resume_replays_and_reports_gaps() {
    let server = Server::start(&["--workers", "1", "--history-size", "2"]);
    let first = server.publish("r", b"1");
    let lost = server.publish("r", b"2");
    let kept: Vec<u64> = (3..=4)
        .map(|i| server.publish("r", i.to_string().as_bytes()))
        .collect();
    let mut socket = ws(&server, &format!("/sub/r?last_id={first}"));
    let gap = json(next_data(&mut socket));
    assert_eq!(
        (
            gap["type"].as_str(),
            gap["after"].as_u64(),
            gap["through"].as_u64()
        ),
        (Some("gap"), Some(first), Some(lost))
    );
    assert_eq!(json(next_data(&mut socket))["id"].as_u64(), Some(kept[0]));
    assert_eq!(json(next_data(&mut socket))["id"].as_u64(), Some(kept[1]));
    let live = server.publish("r", b"5");
    assert_eq!(json(next_data(&mut socket))["id"].as_u64(), Some(live));
}

fn raw_upgrade(server: &Server, path: &str, headers: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n{headers}\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (s, String::from_utf8(head).unwrap())
}

const GOOD: &str = "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

#[test]
fn handshake_errors_get_their_status_and_reason() {
    let server = Server::start(&["--workers", "1", "--ws-origins", "https://ok.example"]);
    let (_, head) = raw_upgrade(&server, "/sub/h", GOOD);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        "RFC 6455 1.3 accept value: {head}"
    );
    let old = GOOD.replace("Version: 13", "Version: 8");
    let (_, head) = raw_upgrade(&server, "/sub/h", &old);
    assert!(
        head.starts_with("HTTP/1.1 426") && head.contains("Sec-WebSocket-Version: 13"),
        "{head}"
    );
    let no_key = GOOD.replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "");
    let (mut s, head) = raw_upgrade(&server, "/sub/h", &no_key);
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    assert!(!body.trim().is_empty(), "a 400 says why");
    let (_, head) = raw_upgrade(
        &server,
        "/sub/h",
        &format!("{GOOD}Origin: https://evil.example\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let (_, head) = raw_upgrade(
        &server,
        "/sub/h",
        &format!("{GOOD}origin: https://ok.example\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let s = server.wait_status(|s| s["refused"]["forbidden"] == 1);
    assert_eq!(s["refused"]["bad_request"], 2);
}

/// A client frame built by hand: FIN/RSV bits in `first`, masked with a fixed key.
fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![first];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n < 65536 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

/// Reads one server frame: (opcode, payload).
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[1] & 0x80, 0, "server frames are unmasked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).unwrap();
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            s.read_exact(&mut l).unwrap();
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).unwrap();
    (h[0] & 0x0f, payload)
}

fn close_code(payload: &[u8]) -> u16 {
    u16::from_be_bytes([payload[0], payload[1]])
}

/// Expects a close frame with `code`, then the server closing the TCP connection.
fn expect_close(s: &mut TcpStream, code: u16) {
    let (op, payload) = read_frame(s);
    assert_eq!(
        (op, close_code(&payload)),
        (8, code),
        "reason: {:?}",
        String::from_utf8_lossy(&payload[2..])
    );
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
}

#[test]
fn invalid_frames_close_with_the_rfc_code_and_others_carry_on() {
    let server = Server::start(&["--workers", "1", "--ws-max-message", "1000"]);
    let mut bystander = ws(&server, "/sub/calm");
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("unmasked", vec![0x81, 0x02, b'h', b'i'], 1002),
        ("reserved bit", frame(0x80 | 0x40 | 0x1, b"x"), 1002),
        ("reserved opcode", frame(0x80 | 0x3, b"x"), 1002),
        ("invalid UTF-8", frame(0x81, &[0xc3, 0x28]), 1007),
        (
            "invalid UTF-8 across fragments",
            [frame(0x01, &[0xe2, 0x82]), frame(0x80, &[0x28])].concat(),
            1007,
        ),
        ("continuation without start", frame(0x80, b"x"), 1002),
        (
            "data frame inside a fragmented message",
            [frame(0x01, b"a"), frame(0x81, b"b")].concat(),
            1002,
        ),
        ("fragmented control frame", frame(0x09, b"p"), 1002),
        ("oversize message", frame(0x82, &[0u8; 1001]), 1009),
        (
            "oversize across fragments",
            [frame(0x02, &[0u8; 600]), frame(0x80, &[0u8; 600])].concat(),
            1009,
        ),
        ("close with a 1-byte payload", frame(0x88, &[3]), 1002),
    ];
    for (what, bytes, code) in &cases {
        let (mut s, head) = raw_upgrade(&server, "/sub/bad", GOOD);
        assert!(head.starts_with("HTTP/1.1 101"), "{what}: {head}");
        s.write_all(bytes).unwrap();
        let (op, payload) = read_frame(&mut s);
        assert_eq!((op, close_code(&payload)), (8, *code), "{what}");
    }
    let s = server.wait_status(|s| s["refused"]["ws_protocol"] == cases.len() as u64);
    assert_eq!(s["connections"]["websocket"], 1);
    let id = server.publish("calm", b"unbothered");
    assert_eq!(json(next_data(&mut bystander))["data"], "unbothered");
    assert!(id > 0);
}

#[test]
fn ping_pong_close_handshake_and_fragments_with_interleaved_control_frames() {
    let server = Server::start(&["--workers", "1", "--ws-client-publish"]);
    let mut sse = Sse::connect(server.http, "/sub/frag", "");
    let (mut s, _) = raw_upgrade(&server, "/sub/frag", GOOD);
    server.wait_status(|st| st["connections"]["websocket"] == 1);
    // Ping → pong with the same payload.
    s.write_all(&frame(0x89, b"are you there")).unwrap();
    assert_eq!(read_frame(&mut s), (0xA, b"are you there".to_vec()));
    // A text message in three fragments, a codepoint (€ = e2 82 ac) split across them, and a
    // ping between fragments: the pong comes back at once and the message is whole.
    s.write_all(&frame(0x01, &[b'p', b'r', b'i', b'c', b'e', b' ', 0xe2]))
        .unwrap();
    s.write_all(&frame(0x89, b"mid")).unwrap();
    s.write_all(&frame(0x00, &[0x82])).unwrap();
    s.write_all(&frame(0x80, &[0xac, b'5'])).unwrap();
    assert_eq!(read_frame(&mut s), (0xA, b"mid".to_vec()));
    // With --ws-client-publish the message went to the channel; the SSE subscriber sees it and
    // so does the sender.
    assert_eq!(sse.next().data, "price €5");
    let (op, envelope) = read_frame(&mut s);
    assert_eq!(op, 0x1);
    let v: serde_json::Value = serde_json::from_slice(&envelope).unwrap();
    assert_eq!(v["data"], "price €5");
    // Close handshake: the server echoes the code and closes.
    s.write_all(&frame(0x88, &[0x03, 0xe8, b'b', b'y', b'e']))
        .unwrap();
    expect_close(&mut s, 1000);
}

#[test]
fn client_data_is_ignored_and_counted_or_refused_with_1003() {
    let server = Server::start(&["--workers", "1"]);
    let mut socket = ws(&server, "/sub/quiet");
    socket.send(Message::Text("hello?".into())).unwrap();
    socket.send(Message::Binary(vec![1, 2, 3].into())).unwrap();
    server.wait_status(|s| s["messages"]["client_ignored"] == 2);
    let id = server.publish("quiet", b"still subscribed");
    assert!(id > 0);
    assert_eq!(json(next_data(&mut socket))["data"], "still subscribed");

    let strict = Server::start(&["--workers", "1", "--ws-close-on-client-data"]);
    let (mut s, _) = raw_upgrade(&strict, "/sub/quiet", GOOD);
    s.write_all(&frame(0x81, b"hello?")).unwrap();
    expect_close(&mut s, 1003);
    strict.wait_status(|s| s["refused"]["ws_client_data"] == 1);
}

#[test]
fn keepalive_pings_and_closes_peers_that_do_not_answer() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--ws-ping-interval",
        "300ms",
        "--ws-pong-timeout",
        "200ms",
    ]);
    // tungstenite answers pings by itself while we read.
    let mut alive = ws(&server, "/sub/k");
    alive
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // The raw socket never answers.
    let (mut dead, _) = raw_upgrade(&server, "/sub/k", GOOD);
    let until = Instant::now() + Duration::from_millis(1200);
    let mut pings = 0;
    while Instant::now() < until {
        match alive.read() {
            Ok(Message::Ping(_)) => pings += 1,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        let _ = alive.flush();
    }
    assert!(pings >= 2, "saw {pings} pings");
    let (op, payload) = read_frame(&mut dead);
    assert_eq!((op, payload), (0x9, b"c1m".to_vec()));
    expect_close(&mut dead, 1001);
    let s = server.wait_status(|s| s["refused"]["ws_pong_timeout"] == 1);
    assert_eq!(
        s["connections"]["websocket"], 1,
        "the answering client stays"
    );
}

#[test]
fn sigterm_sends_close_1001_to_every_websocket() {
    let mut server = Server::start(&["--workers", "2", "--grace", "2s"]);
    let mut sockets: Vec<Ws> = (0..4).map(|_| ws(&server, "/sub/bye")).collect();
    server.wait_status(|s| s["connections"]["websocket"] == 4);
    server.signal(libc::SIGTERM);
    for socket in &mut sockets {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => assert_eq!(frame.code, CloseCode::Away),
            other => panic!("expected close 1001, got {other:?}"),
        }
    }
    assert!(server.wait_exit(Duration::from_secs(4)).success());
}

#[test]
fn a_large_client_message_in_one_burst_is_read_whole() {
    // 100 KiB in one write, then a ping: more than the server buffers for a request
    // (8 KiB + max payload), so it must decode as it reads. (This checks the behaviour; it does
    // not reliably reproduce the stall that decoding only after reading could cause.)
    let server = Server::start(&["--workers", "1", "--ws-max-message", "300000"]);
    let (mut s, _) = raw_upgrade(&server, "/sub/big", GOOD);
    server.wait_status(|st| st["connections"]["websocket"] == 1);
    let payload = vec![b'x'; 100 * 1024];
    s.write_all(&[frame(0x82, &payload), frame(0x89, b"after")].concat())
        .unwrap();
    assert_eq!(read_frame(&mut s), (0xA, b"after".to_vec()));
    server.wait_status(|st| st["messages"]["client_ignored"] == 1);
}
