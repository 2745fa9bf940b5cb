//! SSE heartbeats are spread over their interval, not sent to every stream in one pass: at 1M
//! streams one pass held a worker for hundreds of milliseconds every 30 s, stalling accepts and
//! publish acks. Seen from real sockets: every stream still gets one heartbeat per interval,
//! but no short window carries most of them.

use crate::common::{Server, Sse};
use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

const STREAMS: usize = 300;

#[test]
fn heartbeats_reach_every_stream_once_an_interval_spread_over_it() {
    let server = Server::start(&["--workers", "1", "--sse-heartbeat", "1s"]);
    let mut streams: Vec<Sse> = (0..STREAMS)
        .map(|i| Sse::connect(server.http, &format!("/sub/beat{}", i % 7), ""))
        .collect();
    for s in &streams {
        s.stream.set_nonblocking(true).unwrap();
    }
    // Nothing is published: every byte after the response head is a heartbeat (":\n\n").
    // The head counts as traffic (serve_heartbeat_skip.rs), so a stream's first heartbeat
    // comes one pass later than its first visit: 4.5 s holds 2 or 3 of them at 1 s.
    let beat_len = b":\n\n".len();
    let mut bytes = vec![0usize; STREAMS];
    let mut beats: Vec<(Duration, usize)> = Vec::new();
    let start = Instant::now();
    let mut chunk = [0u8; 256];
    while start.elapsed() < Duration::from_millis(4500) {
        for (i, s) in streams.iter_mut().enumerate() {
            match s.stream.read(&mut chunk) {
                Ok(0) => panic!("stream {i} closed"),
                Ok(n) => {
                    let before = bytes[i] / beat_len;
                    bytes[i] += n;
                    for _ in before..bytes[i] / beat_len {
                        beats.push((start.elapsed(), i));
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("stream {i}: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    for (i, n) in bytes.iter().enumerate() {
        assert!(
            n / beat_len >= 2,
            "stream {i} got {} heartbeats in 4.5 s",
            n / beat_len
        );
        assert!(
            n / beat_len <= 5,
            "stream {i} got {} heartbeats in 4.5 s",
            n / beat_len
        );
    }
    // One pass for all would put all 300 within a few milliseconds.
    let busiest = beats
        .iter()
        .map(|(at, _)| {
            beats
                .iter()
                .filter(|(t, _)| *t >= *at && *t < *at + Duration::from_millis(100))
                .count()
        })
        .max()
        .unwrap();
    assert!(
        busiest <= STREAMS * 2 / 3,
        "{busiest} of {} heartbeats within 100 ms: not spread",
        beats.len()
    );
}
