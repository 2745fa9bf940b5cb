//! Fuzz harness for the HTTP/2 codec: peer bytes through `h2::Connection::receive` the way the
//! event loop feeds them (a kept tail plus each read), with the server answering every request,
//! and the HPACK decoder alone. Shared by the libFuzzer target `h2_frames` and by
//! tests/h2_stress.rs, so the properties are the same with or without libFuzzer.
//!
//! Properties: no panic; `receive` never uses more than it was given; a connection error is
//! final (nothing consumed is reinterpreted, no event after it); memory stays under the caps
//! (output, queued DATA, header block, HPACK table, stream count); decoded header lists stay
//! under SETTINGS_MAX_HEADER_LIST_SIZE.

#![allow(clippy::manual_is_multiple_of)] // the same style as the other harnesses

use super::XorShift;
use c1m_proto::h2::{hpack, Config, Connection, Event, Limits};

/// What a run reached, so a generator can check that it covers every outcome.
#[derive(Debug, Default, Clone, Copy)]
pub struct H2Outcome {
    pub requests: usize,
    pub data: usize,
    pub peer_resets: usize,
    pub stream_errors: usize,
    pub connection_error: bool,
    pub limit_hit: bool,
}

/// Small limits so generated inputs reach them.
pub fn limits() -> (Config, Limits) {
    let config = Config {
        max_concurrent_streams: 8,
        max_header_list_size: 2048,
        ..Config::default()
    };
    let limits = Limits {
        max_header_block: 4096,
        max_continuations: 8,
        max_resets_per_tick: 16,
        max_pending_control: 16,
        max_output: 16 * 1024,
    };
    (config, limits)
}

/// Target: byte 0 seeds the read sizes and how often the output is drained, the rest is what
/// the peer sends.
pub fn h2_frames(data: &[u8]) -> H2Outcome {
    let Some((&seed, input)) = data.split_first() else {
        return H2Outcome::default();
    };
    let (config, limits) = limits();
    let mut conn = Connection::new(config, limits);
    let mut rng = XorShift(u64::from(seed) << 8 | 0x2b);
    let mut out = H2Outcome::default();
    let mut kept: Vec<u8> = Vec::new();
    let mut events = Vec::new();
    let mut rest = input;
    let bound = limits.max_output as usize + 4096;
    while !rest.is_empty() {
        let n = ((rng.next() % 64) as usize + 1).min(rest.len());
        kept.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        events.clear();
        let used = conn.receive(&kept, &mut events);
        assert!(used <= kept.len(), "used {used} of {}", kept.len());
        kept.drain(..used);
        assert!(
            kept.len() <= limits.max_header_block as usize + 16 * 1024 + 9,
            "kept {}",
            kept.len()
        );
        for ev in &events {
            assert!(
                !out.connection_error,
                "event after a connection error: {ev:?}"
            );
            match ev {
                Event::Request {
                    stream,
                    request,
                    end_stream,
                } => {
                    out.requests += 1;
                    let listed: usize = request
                        .headers
                        .iter()
                        .map(|(n, v)| n.len() + v.len() + 32)
                        .sum::<usize>();
                    assert!(listed <= config.max_header_list_size as usize);
                    assert!(stream % 2 == 1);
                    // Answer like the server: a head, then a body bigger than a small window.
                    let _ = conn.send_headers(
                        *stream,
                        200,
                        &[("content-type", b"text/event-stream")],
                        false,
                    );
                    let _ =
                        conn.send_data(*stream, &[b'x'; 3000], *end_stream && rng.next() % 2 == 0);
                }
                Event::Data { .. } => out.data += 1,
                Event::Reset { .. } => out.peer_resets += 1,
                Event::StreamError(_) => out.stream_errors += 1,
                Event::GoAway { .. } => {}
                Event::ConnectionError(_) => out.connection_error = true,
            }
        }
        assert!(conn.open_streams() <= config.max_concurrent_streams as usize);
        assert!(
            conn.output().len() + conn.queued_total() <= bound,
            "output {}",
            conn.output().len()
        );
        assert!(
            conn.heap_bytes() <= 2 * bound + 8192,
            "heap {}",
            conn.heap_bytes()
        );
        if rng.next() % 3 == 0 {
            conn.advance(conn.output().len());
        }
    }
    if out.connection_error {
        // Final: more bytes are swallowed without events.
        events.clear();
        assert_eq!(conn.receive(b"\0\0\0\x04\0\0\0\0\0", &mut events), 9);
        assert!(events.is_empty());
    }
    let c = conn.take_counters();
    out.limit_hit = c.rapid_reset
        + c.continuation_flood
        + c.control_flood
        + c.header_list_too_large
        + c.refused_streams
        > 0;
    out
}

/// Target: one header block through a fresh decoder with a small list cap.
pub fn hpack_block(data: &[u8]) -> bool {
    let mut dec = hpack::Decoder::default();
    let mut listed = 0;
    let cap = 1024;
    let r = dec.decode(data, cap, |n, v| listed += n.len() + v.len() + 32);
    assert!(listed <= cap, "handed out {listed} past the cap");
    assert!(dec.table_size() <= hpack::DEFAULT_TABLE_SIZE);
    r.is_ok()
}
