//! Acks independent of fan-out: a worker delivers a published message in bounded
//! slices and serves its other connections between slices, so a publish acknowledgement does
//! not wait for a fan-out to thousands of sockets in the same worker. And the slicing keeps
//! delivery exact: a subscriber resuming in the middle of a sliced fan-out gets every message
//! once, in order.
//!
//! One worker (`--workers 1`) holds the publishers and a few thousand SSE subscribers that do
//! not read, each handed a 60 KB message (a copy into each socket: tens of milliseconds for
//! the whole pass, even on an idle box).

use crate::common;

use common::Server;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SUBSCRIBERS: usize = 2500;
const BIG: usize = 60 * 1024;

/// Opens `n` SSE subscribers of `channel` that the test does not read until it says so.
fn subscribers(server: &Server, channel: &str, n: usize) -> Vec<TcpStream> {
    let subs: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut s = TcpStream::connect(server.http).unwrap();
            write!(
                s,
                "GET /sub/{channel} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n"
            )
            .unwrap();
            s
        })
        .collect();
    server.wait_status(|s| s["connections"]["sse"].as_u64() >= Some(n as u64));
    // The response heads are in; take them so that "readable" means "a message arrived".
    std::thread::sleep(Duration::from_millis(200));
    for s in &subs {
        drain_now(s);
    }
    subs
}

/// Reads whatever is waiting, without blocking; returns the bytes.
fn drain_now(mut s: &TcpStream) -> Vec<u8> {
    s.set_nonblocking(true).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("subscriber read: {e}"),
        }
    }
    s.set_nonblocking(false).unwrap();
    out
}

/// Has anything arrived on `s` (without taking it)?
fn has_data(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let got = match s.peek(&mut b) {
        Ok(n) => n > 0,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("subscriber peek: {e}"),
    };
    s.set_nonblocking(false).unwrap();
    got
}

/// Publishes on a keep-alive connection and returns the id from the 200 answer.
fn publish_on(conn: &mut TcpStream, channel: &str, payload: &[u8]) -> u64 {
    write!(
        conn,
        "POST /pub/{channel} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        payload.len()
    )
    .unwrap();
    conn.write_all(payload).unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).unwrap();
        assert!(n > 0, "publisher connection closed");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        let Some(head_end) = text.find("\r\n\r\n") else {
            continue;
        };
        assert!(text.starts_with("HTTP/1.1 200"), "publish answer: {text}");
        let len = common::content_length(&text[..head_end]);
        if answer.len() >= head_end + 4 + len {
            let body: serde_json::Value =
                serde_json::from_slice(&answer[head_end + 4..head_end + 4 + len]).unwrap();
            return body["id"].as_u64().unwrap();
        }
    }
}

/// Reads `s` until every id in `ids` has arrived (bounded by `limit`); returns the ids seen in
/// the order they arrived.
fn read_ids(s: &mut TcpStream, want: usize, limit: Duration) -> Vec<u64> {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + limit;
    let mut text = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let ids = ids_in(&text);
        if ids.len() >= want || Instant::now() > deadline {
            return ids;
        }
        match s.read(&mut buf) {
            Ok(0) => return ids_in(&text),
            Ok(n) => text.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("subscriber read: {e}"),
        }
    }
}

/// The `id:` lines of complete SSE events in `bytes`.
fn ids_in(bytes: &[u8]) -> Vec<u64> {
    let text = String::from_utf8_lossy(bytes);
    let complete = text.rfind("\n\n").map_or("", |end| &text[..end]);
    complete
        .lines()
        .filter_map(|l| l.strip_prefix("id: ").map(|v| v.trim().parse().unwrap()))
        .collect()
}

fn big_payload(tag: u8) -> Vec<u8> {
    vec![b'a' + tag % 26; BIG]
}

#[test]
fn publish_ack_does_not_wait_for_a_fan_out_in_the_same_worker() {
    c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    let server = Server::start(&["--workers", "1", "--sse-heartbeat", "0"]);
    let subs = subscribers(&server, "big", SUBSCRIBERS);
    let last = subs.last().unwrap();
    let mut big_pub = TcpStream::connect(server.http).unwrap();
    let mut small_pub = TcpStream::connect(server.http).unwrap();
    // The fan-out of the big message goes to the subscribers in the order they joined, so the
    // last one is written last. Before the fix, the small publish was read only after the
    // whole pass, so its ack came after every subscriber had the big message: the last
    // subscriber could never be empty here. A few attempts absorb an unlucky descheduling of
    // this test process on a loaded box (the old code fails every one of them).
    let mut attempts = Vec::new();
    for attempt in 0..3u8 {
        let started = Instant::now();
        let big_id = publish_on(&mut big_pub, "big", &big_payload(attempt));
        publish_on(&mut small_pub, "small", b"x");
        let ack_took = started.elapsed();
        let overtook = !has_data(last);
        // Every subscriber gets the big message once before the next attempt.
        let mut subs_ok = 0;
        for s in &subs {
            let mut s = s.try_clone().unwrap();
            let ids = read_ids(&mut s, 1, Duration::from_secs(20));
            assert_eq!(ids, vec![big_id], "each subscriber gets the message once");
            subs_ok += 1;
        }
        assert_eq!(subs_ok, SUBSCRIBERS);
        eprintln!("attempt {attempt}: second ack overtook the fan-out: {overtook}; both acks in {ack_took:?}");
        attempts.push((overtook, ack_took));
        if overtook {
            break;
        }
    }
    assert!(
        attempts.iter().any(|&(overtook, _)| overtook),
        "the second publish's ack waited for the whole fan-out of the first in every attempt \
         (overtook?, both acks took): {attempts:?}"
    );
}

#[test]
fn a_resume_during_a_sliced_fan_out_gets_each_message_once_in_order() {
    c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    let server = Server::start(&["--workers", "1", "--sse-heartbeat", "0"]);
    let subs = subscribers(&server, "big", SUBSCRIBERS);
    let before = server.publish("big", b"before");
    for s in &subs {
        let mut s = s.try_clone().unwrap();
        assert_eq!(read_ids(&mut s, 1, Duration::from_secs(20)), vec![before]);
    }
    let mut publisher = TcpStream::connect(server.http).unwrap();
    let mut ids = vec![publish_on(&mut publisher, "big", &big_payload(1))];
    // Resume from `before` while that fan-out runs: the replay covers the message, and the
    // rest of the sliced pass must not hand it over a second time.
    let mut resumed = TcpStream::connect(server.http).unwrap();
    write!(
        resumed,
        "GET /sub/big HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\nLast-Event-ID: {before}\r\n\r\n"
    )
    .unwrap();
    ids.push(publish_on(&mut publisher, "big", &big_payload(2)));
    ids.push(publish_on(&mut publisher, "big", b"after"));
    let got = read_ids(&mut resumed, ids.len(), Duration::from_secs(20));
    assert_eq!(
        got, ids,
        "the resumed subscriber: each message once, in order"
    );
    // No more arrives for it.
    std::thread::sleep(Duration::from_millis(300));
    let extra = ids_in(&drain_now(&resumed));
    assert!(extra.is_empty(), "duplicates after the replay: {extra:?}");
    for s in &subs {
        let mut s = s.try_clone().unwrap();
        assert_eq!(read_ids(&mut s, 3, Duration::from_secs(20)), ids);
    }
}
