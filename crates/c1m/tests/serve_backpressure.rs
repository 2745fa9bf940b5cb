//! Resumes larger than any internal frame or socket queue arrive
//! whole, in chunks, on every protocol; a worker that falls behind pushes publishers back (503
//! with Retry-After) instead of the master buffering without end or dropping in silence.

use crate::common;

use common::{status_code, Server, Sse};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Payload `i` of a test run: distinct per message, `len` bytes, no newlines.
fn payload(i: usize, len: usize) -> Vec<u8> {
    let mut p = format!("m{i:05}-").into_bytes();
    p.resize(len, b'a' + (i % 26) as u8);
    p
}

fn publish_all(server: &Server, channel: &str, count: usize, len: usize) -> Vec<u64> {
    (0..count)
        .map(|i| server.publish(channel, &payload(i, len)))
        .collect()
}

/// Long-polls from `last_id` until the answer's `last_id` reaches `through`, returning every
/// (id, data length) and every gap seen, in order. Bounded in rounds.
fn long_poll_all(server: &Server, channel: &str, through: u64) -> (Vec<(u64, usize)>, usize) {
    let mut last = 0u64;
    let mut got = Vec::new();
    let mut gaps = 0;
    for _ in 0..500 {
        let resp = ureq::get(&server.url(&format!("/sub/{channel}?last_id={last}")))
            .call()
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: serde_json::Value = serde_json::from_str(&resp.into_string().unwrap()).unwrap();
        gaps += v["gaps"].as_array().unwrap().len();
        for m in v["messages"].as_array().unwrap() {
            got.push((m["id"].as_u64().unwrap(), m["data"].as_str().unwrap().len()));
        }
        let next = v["last_id"].as_u64().unwrap();
        assert!(next > last, "last_id must move forward: {last} then {next}");
        last = next;
        if last >= through {
            return (got, gaps);
        }
    }
    panic!(
        "long-poll never reached {through}; got {} messages",
        got.len()
    );
}

#[test]
fn replay_larger_than_an_ipc_frame_arrives_whole_and_no_worker_dies() {
    // 20 × 1 MiB of history: the old join answer was one 20 MiB frame, over the 16 MiB limit,
    // and the worker that asked died ("ipc frame too large") with all of its clients.
    let server = Server::start(&[
        "--workers",
        "1",
        "--max-payload",
        "2097152",
        "--history-size",
        "20",
    ]);
    let len = 1024 * 1024;
    let ids = publish_all(&server, "big", 20, len);

    // From 0 with the whole history held: every message, no gap.
    let mut sse = Sse::connect(server.http, "/sub/big", "Last-Event-ID: 0\r\n");
    for (i, id) in ids.iter().enumerate() {
        let ev = sse.next();
        assert_eq!(ev.id, Some(id.to_string()), "message {i}");
        assert_eq!(ev.data.as_bytes(), &payload(i, len)[..], "message {i}");
    }
    // The stream is live after the replay.
    let live = server.publish("big", b"after");
    assert_eq!(sse.next().id, Some(live.to_string()));

    // History holds 20: the live message pushed out the first one (a gap says so).
    let (got, gaps) = long_poll_all(&server, "big", live);
    assert_eq!(gaps, 1);
    let expected: Vec<(u64, usize)> = ids[1..]
        .iter()
        .map(|&id| (id, len))
        .chain([(live, 5)])
        .collect();
    assert_eq!(got, expected);

    let s = server.status();
    assert_eq!(s["worker_restarts"], 0, "{s}");
}

#[test]
fn resume_larger_than_the_unsent_cap_arrives_whole_on_every_protocol() {
    // 100 × 60 KiB = 6 MB of history, six times --max-unsent: the old long-poll answer was cut
    // at ~4 MB (the client looped on the same last_id) and SSE was cut at ~6 MB.
    let server = Server::start(&[
        "--workers",
        "1",
        "--history-size",
        "100",
        "--tcp-listen",
        "127.0.0.1:0",
    ]);
    let len = 60 * 1024;
    let ids = publish_all(&server, "six", 100, len);
    let first = ids[0];

    let (got, gaps) = long_poll_all(&server, "six", *ids.last().unwrap());
    assert_eq!(gaps, 0, "from 0 with the whole history held: no gap");
    assert_eq!(got, ids.iter().map(|&id| (id, len)).collect::<Vec<_>>());

    let mut sse = Sse::connect(
        server.http,
        "/sub/six",
        &format!("Last-Event-ID: {}\r\n", first - 1),
    );
    for (i, id) in ids.iter().enumerate() {
        let ev = sse.next();
        assert_eq!(ev.id, Some(id.to_string()), "sse message {i}");
        assert_eq!(ev.data.len(), len);
    }

    // The raw TCP line protocol: OK, then every message, length-prefixed.
    let mut tcp = TcpStream::connect(server.tcp.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    writeln!(tcp, "SUB six {}", first - 1).unwrap();
    let mut r = BufReader::new(tcp);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("OK "), "{line}");
    for (i, id) in ids.iter().enumerate() {
        line.clear();
        r.read_line(&mut line).unwrap();
        assert_eq!(line, format!("MSG six {id} {len}\n"), "tcp message {i}");
        let mut body = vec![0u8; len + 1];
        r.read_exact(&mut body).unwrap();
        assert_eq!(&body[..len], &payload(i, len)[..]);
    }

    // WebSocket (tungstenite as an independent client), resuming with ?last_id=.
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let url = format!("ws://{}/sub/six?last_id={}", server.http, first - 1);
    let (mut ws, _) = tungstenite::client(url, stream).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let msg = ws.read().unwrap();
        let v: serde_json::Value = serde_json::from_str(msg.to_text().unwrap()).unwrap();
        assert_eq!(v["id"].as_u64(), Some(*id), "ws message {i}");
        assert_eq!(v["data"].as_str().unwrap().len(), len);
    }
    let s = server.status();
    assert_eq!(s["refused"]["slow_consumer"], 0, "{s}");
}

/// A keep-alive publisher on one raw connection (so it stays on one worker).
struct Publisher {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

enum Outcome {
    Acked(u64),
    Busy,
}

impl Publisher {
    fn connect(addr: std::net::SocketAddr, timeout: Duration) -> Publisher {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(timeout)).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Publisher { stream, reader }
    }

    /// None when no answer came in time (this connection landed on the stopped worker).
    fn publish(&mut self, channel: &str, body: &[u8]) -> Option<Outcome> {
        let head = format!(
            "POST /pub/{channel} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        self.stream.write_all(head.as_bytes()).unwrap();
        self.stream.write_all(body).unwrap();
        let mut status = String::new();
        self.reader.read_line(&mut status).ok()?;
        let mut len = 0;
        let mut retry_after = None;
        loop {
            let mut h = String::new();
            self.reader.read_line(&mut h).unwrap();
            if h == "\r\n" {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if let Some(v) = lower.strip_prefix("retry-after:") {
                retry_after = Some(v.trim().to_string());
            }
        }
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).unwrap();
        match status_code(&status) {
            200 => {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                Some(Outcome::Acked(v["id"].as_u64().unwrap()))
            }
            503 => {
                assert!(retry_after.is_some(), "503 without Retry-After");
                Some(Outcome::Busy)
            }
            other => panic!("unexpected answer {other}: {status}"),
        }
    }
}

#[test]
fn a_stalled_worker_pushes_publishers_back_and_nothing_is_lost() {
    // A generous --max-unsent: this test is about the master's link, and the stalled worker
    // hands its whole backlog to its subscribers at once when it wakes up.
    let server = Server::start(&["--workers", "2", "--max-unsent", "67108864"]);
    // 20 subscribers: SO_REUSEPORT spreads them by hash, so the worker about to be stopped
    // holds some of them but for a 2^-20 chance. (Per-worker counts cannot tell: they include
    // the status client's own keep-alive connections.)
    let subs: Vec<Sse> = (0..20)
        .map(|_| Sse::connect(server.http, "/sub/flood", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == 20);
    // Stop the worker holding the most connections (the subscribers, give or take a status
    // client's): it surely holds some of them.
    let status = server.status();
    let stalled_pid = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|w| w["connections"].as_u64().unwrap())
        .map(|w| w["pid"].as_u64().unwrap() as u32)
        .unwrap();

    // Every subscriber reads on its own thread until the "end" message.
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut sse| {
            std::thread::spawn(move || {
                sse.stream
                    .set_read_timeout(Some(Duration::from_secs(60)))
                    .unwrap();
                let mut ids = Vec::new();
                loop {
                    let ev = sse.next();
                    if ev.data == "end" {
                        return ids;
                    }
                    ids.push(ev.id.unwrap().parse::<u64>().unwrap());
                }
            })
        })
        .collect();

    c1m_sys::process::kill(stalled_pid, libc::SIGSTOP).unwrap();
    let resume = Resume(stalled_pid);
    // A publisher connection that the running worker serves. Probes go to another channel:
    // a probe that landed on the stopped worker is published when it wakes up.
    let (mut publisher, _) = (0..32)
        .find_map(|_| {
            let mut p = Publisher::connect(server.http, Duration::from_millis(500));
            match p.publish("probe", b"probe")? {
                Outcome::Acked(id) => Some((p, id)),
                Outcome::Busy => panic!("a probe was refused"),
            }
        })
        .expect("no connection reached the running worker");
    publisher
        .stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    // 64 KiB messages until the master pushes back (the old master queued 256 MiB, then
    // dropped messages while still answering 200). 6,000 is 384 MiB.
    let mut acked = Vec::new();
    let mut busy = 0;
    let big = vec![b'x'; 64 * 1024];
    for _ in 0..6000 {
        match publisher.publish("flood", &big).unwrap() {
            Outcome::Acked(id) => acked.push(id),
            Outcome::Busy => {
                busy += 1;
                if busy == 3 {
                    break;
                }
            }
        }
    }
    assert_eq!(
        busy,
        3,
        "no 503 after {} acked publishes; stalled worker {stalled_pid} state {:?}; \
         before the stall: {status}",
        acked.len(),
        std::fs::read_to_string(format!("/proc/{stalled_pid}/stat")).map(|s| s
            .split(' ')
            .nth(2)
            .unwrap_or("?")
            .to_string()),
    );
    drop(resume); // SIGCONT: the stalled worker catches up

    let deadline = Instant::now() + Duration::from_secs(30);
    let end_id = loop {
        match publisher.publish("flood", b"end").unwrap() {
            Outcome::Acked(id) => break id,
            Outcome::Busy => {
                assert!(Instant::now() < deadline, "still busy after 30 s");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    assert!(end_id > *acked.last().unwrap());
    for (i, r) in readers.into_iter().enumerate() {
        let ids = r.join().expect("reader thread");
        assert_eq!(ids, acked, "subscriber {i} saw a different sequence");
    }
    let s = server.status();
    assert_eq!(s["worker_restarts"], 0, "{s}");
    assert!(s["refused"]["busy"].as_u64().unwrap() >= 3, "{s}");
    assert!(
        s["messages"]["publish_refused"].as_u64().unwrap() >= 3,
        "{s}"
    );
    assert_eq!(s["refused"]["slow_consumer"], 0, "{s}");
}

/// Sends SIGCONT when dropped, so a failing test never leaves a stopped worker behind.
struct Resume(u32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = c1m_sys::process::kill(self.0, libc::SIGCONT);
    }
}
