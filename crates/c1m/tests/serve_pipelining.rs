//! Pipelined HTTP/1.1 input, against the real binary on loopback: however much
//! a client pipelines, and however slowly it reads the answers, every request is answered in
//! order. Before the fix the worker stopped reading at its input limit (~73 KB with the default
//! --max-payload) without reaching WouldBlock, and edge-triggered epoll never woke it again.

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// Writes `input` from a thread (a client that pipelines does not wait for answers), reads
/// until the server closes, after `read_delay` (a client that reads late), at most
/// `READ_FOR`. That bound is also the test of cost: while each answer copied all the input
/// still waiting behind it, 40,000 pipelined requests took ~30 s and failed it; now ~9 s.
const READ_FOR: Duration = Duration::from_secs(30);

fn pipeline(addr: SocketAddr, input: Vec<u8>, read_delay: Duration) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = thread::spawn(move || writer.write_all(&input));
    thread::sleep(read_delay);
    let mut answers = Vec::new();
    let started = Instant::now();
    let mut chunk = [0u8; 64 * 1024];
    while started.elapsed() < READ_FOR {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => answers.extend_from_slice(&chunk[..n]),
        }
    }
    sender
        .join()
        .unwrap()
        .expect("the server read all the pipelined input");
    answers
}

/// Status codes of the responses in `answers` (each starts a line with `HTTP/1.1 `).
fn statuses(answers: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(answers);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| text[i + 9..].get(..3)?.parse().ok())
        .collect()
}

fn healthz_requests(n: usize) -> Vec<u8> {
    let mut input = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n".repeat(n - 1);
    input.extend_from_slice(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    input
}

#[test]
fn pipelined_200k_is_answered() {
    let server = Server::start(&["--workers", "1"]);
    let n = 6000; // 35 bytes each: 210 KB, three times the old stall point
    let input = healthz_requests(n);
    assert!(input.len() > 200_000);
    let answers = pipeline(server.http, input, Duration::ZERO);
    let got = statuses(&answers);
    assert_eq!(got.len(), n, "answered {} of {n}", got.len());
    assert!(got.iter().all(|&s| s == 200));
    // The connection is usable by others all along, and nothing was refused.
    let s = server.status();
    assert_eq!(s["refused"]["bad_request"], 0, "{s}");
}

#[test]
fn pipelined_input_to_a_late_reader_is_held_back_not_dropped() {
    // The client sends 1.4 MB and reads nothing for a second: answers fill the socket, the
    // worker stops taking requests (its unsent queue stays small), TCP holds the rest in the
    // client, and everything is answered once the client reads.
    let server = Server::start(&["--workers", "1", "--max-unsent", "65536"]);
    let n = 40_000;
    let answers = pipeline(server.http, healthz_requests(n), Duration::from_secs(1));
    let got = statuses(&answers);
    assert_eq!(got.len(), n, "answered {} of {n}", got.len());
    let s = server.status();
    assert_eq!(s["refused"]["slow_consumer"], 0, "{s}");
}

#[test]
fn pipelined_publishes_are_all_delivered_in_order() {
    // Each publish waits for the master's answer before the next is read, so the input sits in
    // the socket and the worker's buffer fills: the path that paused reading for good.
    let server = Server::start(&["--workers", "1"]);
    let mut sub = Sse::connect(server.http, "/sub/pipe", "");
    let n = 600;
    let mut input = Vec::new();
    for i in 0..n {
        let body = format!("{i:04}{}", "p".repeat(400));
        let close = if i == n - 1 {
            "Connection: close\r\n"
        } else {
            ""
        };
        input.extend_from_slice(
            format!(
                "POST /pub/pipe HTTP/1.1\r\nHost: t\r\n{close}Content-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }
    assert!(input.len() > 200_000);
    let answers = pipeline(server.http, input, Duration::ZERO);
    let got = statuses(&answers);
    assert_eq!(got.len(), n, "answered {} of {n}", got.len());
    assert!(got.iter().all(|&s| s == 200), "{got:?}");
    for i in 0..n {
        let ev = sub.next();
        assert_eq!(&ev.data[..4], format!("{i:04}"), "message {i} out of order");
    }
    let s = server.wait_status(|s| s["messages"]["published"] == n as u64);
    assert_eq!(s["messages"]["publish_refused"], 0, "{s}");
}

#[test]
fn pipelined_publishes_cost_their_parse_not_a_copy_of_the_input_behind_them() {
    // Each publish waits for the master's answer, so each is taken in an event of its own
    // with the rest of the pipeline (up to the input limit, ~90 KB) waiting behind it. When
    // every answer copied that rest, 40,000 publishes took ~38 s on this box; ~3 s without
    // the copy. READ_FOR (30 s) is the bound.
    let server = Server::start(&["--workers", "1"]);
    let n = 40_000;
    let mut input = Vec::new();
    for i in 0..n {
        let close = if i == n - 1 {
            "Connection: close\r\n"
        } else {
            ""
        };
        input.extend_from_slice(
            format!(
                "POST /pub/p{} HTTP/1.1\r\nHost: t\r\n{close}Content-Length: 5\r\n\r\nhello",
                i % 50
            )
            .as_bytes(),
        );
    }
    let answers = pipeline(server.http, input, Duration::ZERO);
    let got = statuses(&answers);
    assert_eq!(
        got.len(),
        n,
        "answered {} of {n} within {READ_FOR:?}",
        got.len()
    );
    assert!(got.iter().all(|&s| s == 200));
    let s = server.wait_status(|s| s["messages"]["published"] == n as u64);
    assert_eq!(s["messages"]["publish_refused"], 0, "{s}");
}

/// A masked client text frame (RFC 6455 §5.2), payload < 64 KiB.
fn ws_client_frame(payload: &[u8]) -> Vec<u8> {
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut out = vec![0x81, 0x80 | 126];
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

#[test]
fn websocket_input_past_the_limit_during_a_long_replay_is_read_on() {
    // A WebSocket that resumes 7 MB of history and does not read stays joining (the replay
    // waits for the socket), while it sends 200 KB of frames: the worker buffers up to its input
    // limit and stops reading. When the client reads and the replay ends, reading must go on;
    // it never did (every frame past the limit stayed unread for good).
    let server = Server::start(&["--workers", "1", "--history-size", "120"]);
    let len = 60 * 1024;
    let first = server.publish("big", &vec![b'h'; len]);
    for _ in 1..120 {
        server.publish("big", &vec![b'h'; len]);
    }
    let mut s = TcpStream::connect(server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /sub/big?last_id={} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        first - 1
    )
    .unwrap();
    let frames = 200;
    let mut input = Vec::new();
    for _ in 0..frames {
        input.extend_from_slice(&ws_client_frame(&[b'c'; 1000]));
    }
    let mut writer = s.try_clone().unwrap();
    let sender = thread::spawn(move || writer.write_all(&input));
    thread::sleep(Duration::from_millis(500)); // the worker reads up to its limit, then pauses
                                               // Read the 101 and the whole replay (120 frames of 60 KiB), then the frames must be read.
    let mut got = 0usize;
    let want = 120 * len;
    let mut chunk = [0u8; 64 * 1024];
    let started = Instant::now();
    while got < want && started.elapsed() < Duration::from_secs(20) {
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    assert!(got >= want, "replay stopped after {got} bytes");
    sender.join().unwrap().unwrap();
    let st = server.wait_status(|st| st["messages"]["client_ignored"] == frames);
    assert_eq!(st["refused"]["ws_protocol"], 0, "{st}");
}
