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

/// Bytes a record of a freed channel's loss is charged (the hub's `RECORD_COST`).
const RECORD_COST: u64 = 64;

/// A channel whose history all expired is freed: nobody subscribed and nothing held, it
/// leaves only a small record of what it lost, and the master gives the memory of a mass of
/// such channels back to the kernel.
#[test]
fn channels_whose_history_expired_are_freed() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--history-age",
        "1s",
        "--history-max-bytes",
        "536870912",
    ]);
    let master = server.child.id();
    publish_all(&server, (0..2_000).map(|i| format!("warm{i}")));
    let before = rss(master);
    publish_all(&server, (0..CHANNELS).map(|i| format!("gone{i:07}")));
    let peak = rss(master);
    // The once-a-second expiry pass empties every channel (figures every 250 ms).
    let status = server.wait_status(|s| s["channels"] == 0);
    let held = status["history_bytes"].as_u64().unwrap();
    // Memory goes back to the allocator in the pass that freed it; read it after the next.
    std::thread::sleep(Duration::from_millis(1_500));
    let after = rss(master);
    eprintln!(
        "{CHANNELS} channels expired: history_bytes {held}, master RSS before {before}, \
         peak {peak}, after {after}"
    );
    let total = (CHANNELS + 2_000) as u64;
    assert!(
        held <= total * RECORD_COST,
        "history_bytes {held} after every channel expired: more than {RECORD_COST} B for \
         each of {total} freed channels"
    );
    // What stays is the records (charged above) and the allocator's slack: at most twice
    // the records' charge. (A freed channel that kept its name and map entry costs about
    // four times a record.)
    let kept = after.saturating_sub(before) as u64;
    assert!(
        kept <= 2 * total * RECORD_COST,
        "master RSS {after} B after expiry, {before} B before publishing ({peak} B at the \
         peak): {kept} B kept for {total} freed channels"
    );
}
