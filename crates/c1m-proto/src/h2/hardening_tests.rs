//! Each hardening limit of the connection state machine, with its counter: zero-window stalls
//! and the output bound, PING and SETTINGS floods, rapid reset, CONTINUATION floods, HPACK
//! bombs, malformed requests.

use super::conn_tests::{
    drain, feed, goaway_code, headers, open, open_with, request_block, rst_code,
};
use super::frame::{self, flags, setting, Kind};
use super::hpack::{self, encode_field};
use super::{Config, Connection, Counters, ErrorCode, Event, Limits, SendError};

#[test]
fn a_peer_that_never_opens_its_window_leaves_data_queued_and_bounded() {
    let limits = Limits {
        max_output: 4096,
        ..Limits::default()
    };
    let mut c = open_with(
        Config::default(),
        limits,
        &[(setting::INITIAL_WINDOW_SIZE, 0)],
    );
    feed(&mut c, &headers(1, &request_block("/sub/a", &[]), true));
    c.send_headers(1, 200, &[], false).unwrap();
    c.send_data(1, &[b'x'; 1000], false).unwrap();
    let out = drain(&mut c);
    assert!(
        out.iter().all(|f| f.0 != Kind::Data as u8),
        "no DATA through a zero window"
    );
    assert_eq!(c.queued(1), Some(1000));
    assert_eq!(c.queued_total(), 1000);
    c.send_data(1, &[b'y'; 3000], false).unwrap();
    assert_eq!(c.send_data(1, &[b'z'; 100], false), Err(SendError::Full));
    assert_eq!(c.take_counters().output_full, 1);
    // The peer opens 1500 bytes: that much goes out, the rest stays.
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 1, 1500);
    feed(&mut c, &wu);
    let out = drain(&mut c);
    let sent: usize = out
        .iter()
        .filter(|f| f.0 == Kind::Data as u8)
        .map(|f| f.3.len())
        .sum();
    assert_eq!(sent, 1500);
    assert_eq!(c.queued(1), Some(2500));
}

#[test]
fn ping_is_answered_and_a_ping_flood_is_cut() {
    let limits = Limits {
        max_pending_control: 10,
        ..Limits::default()
    };
    let mut c = open_with(Config::default(), limits, &[]);
    let mut p = Vec::new();
    frame::write_ping(&mut p, false, *b"12345678");
    feed(&mut c, &p);
    assert_eq!(
        drain(&mut c),
        [(Kind::Ping as u8, flags::ACK, 0, b"12345678".to_vec())]
    );
    // Drained output resets the count: ten more are fine.
    let flood: Vec<u8> = p.iter().copied().cycle().take(p.len() * 10).collect();
    feed(&mut c, &flood);
    assert_eq!(drain(&mut c).len(), 10);
    assert_eq!(c.take_counters(), Counters::default());
    // Eleven without draining are a flood.
    let flood: Vec<u8> = p.iter().copied().cycle().take(p.len() * 11).collect();
    feed(&mut c, &flood);
    assert_eq!(
        goaway_code(&drain(&mut c)),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert_eq!(c.take_counters().control_flood, 1);
}

#[test]
fn a_settings_flood_is_cut() {
    let mut c = open();
    let mut s = Vec::new();
    frame::write_settings(&mut s, &[(setting::MAX_FRAME_SIZE, 20_000)]);
    let flood: Vec<u8> = s.iter().copied().cycle().take(s.len() * 1000).collect();
    feed(&mut c, &flood);
    let out = drain(&mut c);
    assert!(out.len() <= 66, "{} frames queued", out.len());
    assert_eq!(goaway_code(&out), Some(ErrorCode::ENHANCE_YOUR_CALM));
    assert_eq!(c.take_counters().control_flood, 1);
}

#[test]
fn rapid_reset_gets_goaway_enhance_your_calm_and_a_tick_forgives() {
    let limits = Limits {
        max_resets_per_tick: 20,
        ..Limits::default()
    };
    let mut c = open_with(Config::default(), limits, &[]);
    let mut id = 1;
    let mut burst = |c: &mut Connection, n: u32| {
        let mut input = Vec::new();
        for _ in 0..n {
            input.extend(headers(id, &request_block("/sub/a", &[]), true));
            frame::write_rst_stream(&mut input, id, ErrorCode::CANCEL);
            id += 2;
        }
        feed(c, &input)
    };
    let ev = burst(&mut c, 20);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::Reset { .. }))
            .count(),
        20
    );
    c.tick();
    burst(&mut c, 20);
    assert_eq!(c.take_counters().rapid_reset, 0);
    burst(&mut c, 1);
    assert_eq!(
        goaway_code(&drain(&mut c)),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert_eq!(c.take_counters().rapid_reset, 1);
}

#[test]
fn continuation_floods_are_capped_in_bytes_and_in_frames() {
    let block = request_block("/", &[("x-pad", &"a".repeat(1000))]);
    // Bytes: 40 CONTINUATIONs of 1000 bytes pass a 32 KiB cap.
    let mut c = open();
    let mut input = Vec::new();
    frame::write_head(&mut input, block.len(), Kind::Headers, 0, 1);
    input.extend_from_slice(&block);
    for _ in 0..40 {
        frame::write_head(&mut input, 1000, Kind::Continuation, 0, 1);
        input.extend_from_slice(&[0x82; 1000]);
    }
    feed(&mut c, &input);
    assert_eq!(
        goaway_code(&drain(&mut c)),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert_eq!(c.take_counters().continuation_flood, 1);
    // Frames: empty CONTINUATIONs never add a byte.
    let mut c = open();
    let mut input = Vec::new();
    frame::write_head(&mut input, block.len(), Kind::Headers, 0, 1);
    input.extend_from_slice(&block);
    for _ in 0..1000 {
        frame::write_head(&mut input, 0, Kind::Continuation, 0, 1);
    }
    feed(&mut c, &input);
    assert_eq!(
        goaway_code(&drain(&mut c)),
        Some(ErrorCode::ENHANCE_YOUR_CALM)
    );
    assert_eq!(c.take_counters().continuation_flood, 1);
    // A block split in a few CONTINUATIONs is fine; another frame inside it is not.
    let mut c = open();
    let mut input = Vec::new();
    frame::write_head(&mut input, 4, Kind::Headers, flags::END_STREAM, 1);
    input.extend_from_slice(&block[..4]);
    frame::write_head(
        &mut input,
        block.len() - 4,
        Kind::Continuation,
        flags::END_HEADERS,
        1,
    );
    input.extend_from_slice(&block[4..]);
    let ev = feed(&mut c, &input);
    assert!(
        matches!(ev[..], [Event::Request { stream: 1, .. }]),
        "{ev:?}"
    );
    let mut input = Vec::new();
    frame::write_head(&mut input, block.len(), Kind::Headers, 0, 3);
    input.extend_from_slice(&block);
    frame::write_ping(&mut input, false, [0; 8]);
    feed(&mut c, &input);
    assert_eq!(goaway_code(&drain(&mut c)), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn an_hpack_bomb_gets_431_and_the_connection_goes_on() {
    let config = Config {
        max_header_list_size: 4096,
        ..Config::default()
    };
    let mut c = open_with(config, Limits::default(), &[]);
    let mut block = request_block("/", &[]);
    // Before our SETTINGS are acknowledged... they are here: the table is 0, so the bomb uses
    // the static table: an indexed name with a 4000-byte value, repeated.
    for _ in 0..8 {
        encode_field(&mut block, b"cookie", &[b'c'; 4000]);
    }
    let mut input = Vec::new();
    frame::write_headers(&mut input, 1, &block, true, 16_384);
    let mut input_ok = headers(3, &request_block("/", &[]), true);
    input.append(&mut input_ok);
    let ev = feed(&mut c, &input);
    assert!(
        matches!(ev[..], [Event::Request { stream: 3, .. }]),
        "{ev:?}"
    );
    let out = drain(&mut c);
    let mut got = Vec::new();
    hpack::Decoder::default()
        .decode(&out[0].3, 1 << 20, |n, v| {
            got.push((n.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!((out[0].2, &got[0].1[..]), (1, &b"431"[..]));
    assert_eq!(c.take_counters().header_list_too_large, 1);
}

#[test]
fn malformed_requests_are_reset_and_counted() {
    let cases: &[&[(&str, &str)]] = &[
        &[(":method", "GET"), (":path", "/")],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("Host", "x"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("connection", "close"),
        ],
        &[
            (":method", "GET"),
            ("a", "b"),
            (":scheme", "https"),
            (":path", "/"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            (":status", "200"),
        ],
        &[
            (":method", "GET"),
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/"),
            ("x", "a\nb"),
        ],
        &[
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "https"),
            (":path", "/"),
            (":authority", "h"),
        ],
    ];
    for fields in cases {
        let mut c = open();
        let mut b = vec![0x20];
        for (n, v) in *fields {
            encode_field(&mut b, n.as_bytes(), v.as_bytes());
        }
        let ev = feed(&mut c, &headers(1, &b, true));
        assert!(
            matches!(ev[..], [Event::StreamError(_)]),
            "{fields:?}: {ev:?}"
        );
        assert_eq!(
            rst_code(&drain(&mut c), 1),
            Some(ErrorCode::PROTOCOL_ERROR),
            "{fields:?}"
        );
        assert_eq!(c.take_counters().malformed_requests, 1);
    }
}

#[test]
fn a_body_that_disagrees_with_content_length_is_malformed() {
    let data = |stream, body: &[u8], end| {
        let mut d = Vec::new();
        frame::write_data(&mut d, stream, body, end);
        d
    };
    let post = |len: &str| {
        let mut b = request_block("/pub/a", &[("content-length", len)]);
        b[1] = 0x83; // :method POST (static index 3) in place of GET
        b
    };
    let mut c = open();
    let mut input = headers(1, &post("5"), false);
    input.extend(data(1, b"hello", true));
    input.extend(headers(3, &post("5"), false));
    input.extend(data(3, b"hell", true));
    input.extend(headers(5, &post("5"), false));
    input.extend(data(5, b"hello!", false));
    input.extend(headers(7, &post("5"), true));
    input.extend(headers(9, &post("x5"), true));
    let ev = feed(&mut c, &input);
    let data_ok = Event::Data {
        stream: 1,
        data: b"hello".to_vec(),
        end_stream: true,
    };
    assert!(ev.contains(&data_ok), "{ev:?}");
    let out = drain(&mut c);
    for stream in [3, 5, 7, 9] {
        assert_eq!(
            rst_code(&out, stream),
            Some(ErrorCode::PROTOCOL_ERROR),
            "stream {stream}"
        );
    }
    assert_eq!(c.take_counters().malformed_requests, 4);
}
