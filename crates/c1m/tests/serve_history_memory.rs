//! `--history-max-bytes` bounds the master's memory, not only its payload bytes: many channels
//! of one tiny message each are charged what a channel really costs, so the master's RSS grows
//! by about the bound, however many channels are published. Publishes go over keep-alive
//! connections, pipelined, to keep the test short.

use crate::common;

use common::Server;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const BOUND: usize = 4 << 20;
const CHANNELS: usize = 150_000;
const BATCH: usize = 500;

/// The master's resident set in bytes, from /proc/PID/status.
fn rss(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<usize>()
        .unwrap()
        * 1024
}

/// Publishes one 1-byte message to each of `channels`, pipelined on one connection.
fn publish_all(server: &Server, channels: impl Iterator<Item = String>) {
    let mut s = TcpStream::connect(server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let names: Vec<String> = channels.collect();
    for batch in names.chunks(BATCH) {
        let mut req = Vec::new();
        for name in batch {
            write!(
                req,
                "POST /pub/{name} HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx"
            )
            .unwrap();
        }
        s.write_all(&req).unwrap();
        // The answers of this batch, whole (about 100 B each).
        let (mut got, mut buf) = (Vec::new(), [0u8; 64 * 1024]);
        while count(&got, b"HTTP/1.1 ") < batch.len() {
            let n = s.read(&mut buf).expect("publish answers");
            assert!(n > 0, "server closed the publishing connection");
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(
            count(&got, b"HTTP/1.1 200"),
            batch.len(),
            "{}",
            String::from_utf8_lossy(&got)
        );
    }
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

#[test]
fn many_tiny_channels_keep_the_master_within_the_history_bound() {
    let bound = BOUND.to_string();
    let server = Server::start(&["--workers", "1", "--history-max-bytes", &bound]);
    let master = server.child.id();
    // Warm up (the master's first publishes allocate its buffers), then measure.
    publish_all(&server, (0..2_000).map(|i| format!("warm{i}")));
    let before = rss(master);
    let started = Instant::now();
    publish_all(&server, (0..CHANNELS).map(|i| format!("tiny{i:07}")));
    assert!(started.elapsed() < Duration::from_secs(120));
    // Let the once-a-second expiry pass run (it frees what it frees).
    std::thread::sleep(Duration::from_millis(1_500));
    let status = server.status();
    let held = status["history_bytes"].as_u64().unwrap() as usize;
    let growth = rss(master).saturating_sub(before);
    eprintln!(
        "{CHANNELS} channels of 1 B under --history-max-bytes {BOUND}: history_bytes {held}, \
         channels {}, master RSS growth {growth} B",
        status["channels"]
    );
    assert!(held <= BOUND, "history_bytes {held} over the bound {BOUND}");
    // The bound, plus 50% for the allocator's and the map's slack.
    assert!(
        growth <= BOUND + BOUND / 2,
        "master RSS grew {growth} B under a {BOUND} B history bound"
    );
}
