//! An SSE stream that was sent anything within the heartbeat interval gets no heartbeat: at 1M
//! streams each heartbeat is a write and a wake-up in the client, and any bytes keep proxies'
//! idle timers and the client's dead-connection check fed as well. Seen from real sockets, with
//! `--sse-heartbeat 1s`: a stream sent a message every 300 ms gets none, a silent one beside it
//! gets one a period (never more than 2 periods after its last byte), and a stream that just
//! subscribed gets none in its first period (its response head counts as traffic). With a 1 s
//! period the sweep visits every stream each 0.5 s (worker/heartbeats.rs `send_heartbeats`).

use crate::common::Server;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const PERIOD: Duration = Duration::from_secs(1);
/// Scheduling slack on a loaded 2-core box (the server's loop turn and the test's reading).
const SLACK: Duration = Duration::from_millis(300);

/// A raw SSE subscriber: the time the response head arrived, and what came after it.
struct Stream {
    sock: TcpStream,
    subscribed: Instant,
    pending: Vec<u8>,
    /// Each complete block after the head (`:` for a heartbeat) and when it arrived.
    blocks: Vec<(Instant, String)>,
}

impl Stream {
    fn subscribe(server: &Server, channel: &str) -> Stream {
        let mut sock = TcpStream::connect(server.http).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            sock,
            "GET /sub/{channel} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n"
        )
        .unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let n = sock.read(&mut chunk).unwrap();
            assert!(n > 0, "closed before the response head");
            got.extend_from_slice(&chunk[..n]);
        };
        let subscribed = Instant::now();
        assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
        sock.set_nonblocking(true).unwrap();
        Stream {
            sock,
            subscribed,
            pending: got.split_off(head_end),
            blocks: Vec::new(),
        }
    }

    /// Reads what has arrived and splits it into blocks.
    fn poll(&mut self) {
        let mut chunk = [0u8; 4096];
        loop {
            match self.sock.read(&mut chunk) {
                Ok(0) => panic!("server closed the stream"),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        let now = Instant::now();
        while let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
            let block: Vec<u8> = self.pending.drain(..end + 2).collect();
            let text = String::from_utf8(block).unwrap();
            self.blocks.push((now, text.trim_end().to_string()));
        }
    }

    /// Arrival times of the heartbeat comments.
    fn heartbeats(&self) -> Vec<Instant> {
        self.blocks
            .iter()
            .filter(|(_, b)| b == ":")
            .map(|(t, _)| *t)
            .collect()
    }
}

#[test]
fn a_stream_sent_messages_more_often_than_the_period_gets_no_heartbeat() {
    let server = Server::start(&["--workers", "1", "--sse-heartbeat", "1s"]);
    let mut quiet = Stream::subscribe(&server, "quiet");
    let mut busy = Stream::subscribe(&server, "busy");
    let start = Instant::now();
    let publisher = {
        let url = server.url("/pub/busy");
        std::thread::spawn(move || {
            let mut sent = 0;
            while start.elapsed() < Duration::from_millis(5500) {
                ureq::post(&url).send_bytes(b"tick").unwrap();
                sent += 1;
                std::thread::sleep(Duration::from_millis(300));
            }
            sent
        })
    };
    while start.elapsed() < Duration::from_millis(5800) {
        quiet.poll();
        busy.poll();
        std::thread::sleep(Duration::from_millis(5));
    }
    let published = publisher.join().unwrap();

    let busy_beats = busy.heartbeats().len();
    let messages = busy.blocks.len() - busy_beats;
    assert!(
        messages >= published - 1,
        "{messages} of {published} arrived"
    );
    assert_eq!(
        busy_beats, 0,
        "a stream sent a message every 300 ms got {busy_beats} heartbeats in 5 periods"
    );

    // The silent stream: one a period once started, never 2 periods without a byte, the first
    // included (its response head is the only byte sent before it; docs/PROTOCOL.md).
    let beats = quiet.heartbeats();
    assert_eq!(beats.len(), quiet.blocks.len(), "only heartbeats on quiet");
    assert!(
        beats.len() >= 3,
        "{} heartbeats in 5.8 s on a silent stream",
        beats.len()
    );
    assert!(
        beats.len() <= 6,
        "{} heartbeats in 5.8 s on a silent stream",
        beats.len()
    );
    let first = beats[0] - quiet.subscribed;
    assert!(
        first >= PERIOD && first <= 2 * PERIOD + SLACK,
        "first heartbeat {first:?} after the head"
    );
    for pair in beats.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap <= 2 * PERIOD + SLACK, "{gap:?} between heartbeats");
    }

    // Both counted, in /status and /metrics.
    let status = server.wait_status(|s| s["heartbeats"]["sent"].as_u64() >= Some(3));
    let skipped = status["heartbeats"]["skipped"].as_u64().unwrap();
    assert!(skipped >= 4, "skipped {skipped}: {status}");
    let metrics = server.metrics();
    assert!(
        metrics.contains("\nc1m_heartbeats_skipped_total ")
            && metrics.contains("\nc1m_heartbeats_sent_total "),
        "{metrics}"
    );
}

#[test]
fn a_stream_gets_no_heartbeat_in_its_first_period() {
    let server = Server::start(&["--workers", "1", "--sse-heartbeat", "1s"]);
    // Subscribed mid-period, so that on a sweep without skipping several would be visited (and
    // sent a heartbeat) less than a period after their response head.
    std::thread::sleep(Duration::from_millis(1500));
    let mut streams: Vec<Stream> = (0..10)
        .map(|i| Stream::subscribe(&server, &format!("new{i}")))
        .collect();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(3800) {
        for s in &mut streams {
            s.poll();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for (i, s) in streams.iter().enumerate() {
        let beats = s.heartbeats();
        assert_eq!(beats.len(), s.blocks.len(), "stream {i}: only heartbeats");
        let first = beats
            .first()
            .unwrap_or_else(|| panic!("stream {i}: no heartbeat in 3.8 s"));
        let after = *first - s.subscribed;
        assert!(
            after >= PERIOD,
            "stream {i}: a heartbeat {after:?} after its response head"
        );
        assert!(
            after <= 2 * PERIOD + SLACK,
            "stream {i}: first heartbeat {after:?} after its response head"
        );
    }
}
