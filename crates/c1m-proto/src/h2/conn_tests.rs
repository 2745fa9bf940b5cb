//! The connection state machine driven by hand-built client frames: handshake, stream rules,
//! flow control (the hardening limits are in `hardening_tests`, with the helpers here).

use super::frame::{self, flags, setting, Kind, PREFACE};
use super::hpack::{self, encode_field};
use super::{Config, Connection, ErrorCode, Event, Limits, Scope, SendError, Stream};

/// A frame the server wrote: (kind, flags, stream, payload).
pub(super) type Out = (u8, u8, u32, Vec<u8>);

pub(super) fn frames(bytes: &[u8]) -> Vec<Out> {
    let mut v = Vec::new();
    let mut pos = 0;
    while let Some(h) = frame::head(&bytes[pos..]) {
        let end = pos + frame::HEADER_LEN + h.len as usize;
        v.push((
            h.kind,
            h.flags,
            h.stream,
            bytes[pos + frame::HEADER_LEN..end].to_vec(),
        ));
        pos = end;
    }
    assert_eq!(pos, bytes.len(), "output ends inside a frame");
    v
}

pub(super) fn drain(c: &mut Connection) -> Vec<Out> {
    let f = frames(c.output());
    c.advance(c.output().len());
    f
}

/// Starts with a table size update to 0: the client's confirmation (RFC 7541 §4.2) that it saw
/// this side's SETTINGS_HEADER_TABLE_SIZE of 0, valid at the start of any block.
pub(super) fn request_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0x20];
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", path),
        (":authority", "h"),
    ] {
        encode_field(&mut b, n.as_bytes(), v.as_bytes());
    }
    for (n, v) in extra {
        encode_field(&mut b, n.as_bytes(), v.as_bytes());
    }
    b
}

pub(super) fn headers(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let mut v = Vec::new();
    frame::write_headers(&mut v, stream, block, end_stream, 16_384);
    v
}

/// A connection past the preface and SETTINGS exchange, output drained.
pub(super) fn open_with(
    config: Config,
    limits: Limits,
    client_settings: &[(u16, u32)],
) -> Connection {
    let mut c = Connection::new(config, limits);
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, client_settings);
    frame::write_settings_ack(&mut input);
    let mut ev = Vec::new();
    assert_eq!(c.receive(&input, &mut ev), input.len());
    assert!(ev.is_empty(), "{ev:?}");
    let out = drain(&mut c);
    assert_eq!(out[0].0, Kind::Settings as u8);
    assert_eq!(out[1], (Kind::Settings as u8, flags::ACK, 0, vec![]));
    c
}

pub(super) fn open() -> Connection {
    open_with(Config::default(), Limits::default(), &[])
}

pub(super) fn feed(c: &mut Connection, input: &[u8]) -> Vec<Event> {
    let mut ev = Vec::new();
    assert_eq!(c.receive(input, &mut ev), input.len());
    ev
}

pub(super) fn goaway_code(out: &[Out]) -> Option<ErrorCode> {
    out.iter()
        .find(|f| f.0 == Kind::GoAway as u8)
        .map(|f| ErrorCode(u32::from_be_bytes(f.3[4..8].try_into().unwrap())))
}

pub(super) fn rst_code(out: &[Out], stream: u32) -> Option<ErrorCode> {
    out.iter()
        .find(|f| f.0 == Kind::RstStream as u8 && f.2 == stream)
        .map(|f| ErrorCode(u32::from_be_bytes(f.3[..4].try_into().unwrap())))
}
#[test]
fn sizes_stay_within_the_memory_budget() {
    // Asserted at compile time in conn.rs too; printed here for the record.
    let (s, c) = (size_of::<Stream>(), size_of::<Connection>());
    eprintln!("Stream {s} B, Connection {c} B");
    assert!(s <= 32);
    assert!(c <= 320, "Connection is {c} bytes");
}

#[test]
fn an_idle_sse_stream_fits_1_kb_and_each_further_one_256_bytes() {
    // After the handshake, with every response head written and the output drained: what an
    // idle subscriber connection holds in user space (struct + heap), TLS aside.
    let mut c = open();
    let cost = |c: &Connection| size_of::<Connection>() + c.heap_bytes();
    let mut stream = 1;
    let mut subscribe = |c: &mut Connection| {
        feed(
            c,
            &headers(
                stream,
                &request_block("/sub/a", &[("accept", "text/event-stream")]),
                true,
            ),
        );
        c.send_headers(
            stream,
            200,
            &[("content-type", b"text/event-stream")],
            false,
        )
        .unwrap();
        c.send_data(stream, b"data: hi\n\n", false).unwrap();
        drain(c);
        stream += 2;
    };
    subscribe(&mut c);
    let one = cost(&c);
    for _ in 1..20 {
        subscribe(&mut c);
    }
    let twenty = cost(&c);
    let per_stream = (twenty - one) / 19;
    eprintln!("one stream {one} B, twenty {twenty} B, {per_stream} B per further stream");
    assert!(one <= 1024, "one idle SSE stream costs {one} bytes");
    assert!(
        per_stream <= 256,
        "each further stream costs {per_stream} bytes"
    );
}

#[test]
fn request_response_round_trip_with_preface_split_across_reads() {
    let mut c = Connection::new(Config::default(), Limits::default());
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[(setting::INITIAL_WINDOW_SIZE, 100_000)]);
    input.extend(headers(
        1,
        &request_block("/sub/news", &[("accept", "text/event-stream")]),
        true,
    ));
    let mut ev = Vec::new();
    // Byte by byte: every prefix is either used or left for the next read.
    let mut kept = Vec::new();
    for b in &input {
        kept.push(*b);
        let used = c.receive(&kept, &mut ev);
        kept.drain(..used);
    }
    assert!(kept.is_empty());
    let [Event::Request {
        stream: 1,
        request,
        end_stream: true,
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(request.method, "GET");
    assert_eq!(request.path.as_deref(), Some("/sub/news"));
    assert_eq!(request.header("accept"), Some(&b"text/event-stream"[..]));
    c.send_headers(1, 200, &[("content-type", b"text/event-stream")], false)
        .unwrap();
    c.send_data(1, b"data: hi\n\n", false).unwrap();
    let out = drain(&mut c);
    let kinds: Vec<u8> = out.iter().map(|f| f.0).collect();
    assert_eq!(kinds, [4, 4, 1, 0], "SETTINGS, ACK, HEADERS, DATA");
    let mut got = Vec::new();
    hpack::Decoder::default()
        .decode(&out[2].3, 1 << 20, |n, v| {
            got.push((n.to_vec(), v.to_vec()))
        })
        .unwrap();
    assert_eq!(got[0], (b":status".to_vec(), b"200".to_vec()));
    assert_eq!(out[3], (0, 0, 1, b"data: hi\n\n".to_vec()));
    assert!(c.output().is_empty());
}

#[test]
fn bad_preface_and_missing_settings_are_protocol_errors() {
    let mut c = Connection::new(Config::default(), Limits::default());
    let ev = feed(&mut c, b"GET / HTTP/1.1\r\n\r\n");
    assert!(matches!(ev[..], [Event::ConnectionError(e)] if e.code == ErrorCode::PROTOCOL_ERROR));
    assert_eq!(goaway_code(&drain(&mut c)), Some(ErrorCode::PROTOCOL_ERROR));
    assert!(c.is_done());

    let mut c = Connection::new(Config::default(), Limits::default());
    let mut input = PREFACE.to_vec();
    frame::write_ping(&mut input, false, [0; 8]);
    feed(&mut c, &input);
    assert_eq!(goaway_code(&drain(&mut c)), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn stream_ids_must_be_odd_and_increasing() {
    let mut c = open();
    feed(&mut c, &headers(2, &request_block("/", &[]), true));
    assert_eq!(goaway_code(&drain(&mut c)), Some(ErrorCode::PROTOCOL_ERROR));

    let mut c = open();
    let ev = feed(&mut c, &headers(5, &request_block("/", &[]), true));
    assert!(matches!(ev[..], [Event::Request { stream: 5, .. }]));
    feed(&mut c, &headers(3, &request_block("/", &[]), true));
    assert_eq!(goaway_code(&drain(&mut c)), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn streams_over_the_concurrency_limit_are_refused_and_counted() {
    let config = Config {
        max_concurrent_streams: 2,
        ..Config::default()
    };
    let mut c = open_with(config, Limits::default(), &[]);
    let mut input = Vec::new();
    for id in [1, 3, 5] {
        input.extend(headers(id, &request_block("/sub/a", &[]), true));
    }
    let ev = feed(&mut c, &input);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, Event::Request { .. }))
            .count(),
        2
    );
    assert_eq!(rst_code(&drain(&mut c), 5), Some(ErrorCode::REFUSED_STREAM));
    assert_eq!(c.take_counters().refused_streams, 1);
    // A finished stream frees its slot.
    c.send_headers(1, 204, &[], true).unwrap();
    let ev = feed(&mut c, &headers(7, &request_block("/", &[]), true));
    assert!(matches!(ev[..], [Event::Request { stream: 7, .. }]));
}

#[test]
fn window_overflow_and_overrun_are_flow_control_errors() {
    let mut c = open();
    feed(&mut c, &headers(1, &request_block("/", &[]), false));
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 1, frame::MAX_WINDOW);
    let ev = feed(&mut c, &wu);
    assert!(matches!(ev[..], [Event::StreamError(e)] if e.scope == Scope::Stream(1)));
    assert_eq!(
        rst_code(&drain(&mut c), 1),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );
    let mut wu = Vec::new();
    frame::write_window_update(&mut wu, 0, frame::MAX_WINDOW);
    feed(&mut c, &wu);
    assert_eq!(
        goaway_code(&drain(&mut c)),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );

    // DATA past the stream window this side advertised.
    let config = Config {
        initial_window_size: 100,
        ..Config::default()
    };
    let mut c = open_with(config, Limits::default(), &[]);
    feed(&mut c, &headers(1, &request_block("/", &[]), false));
    let mut d = Vec::new();
    frame::write_data(&mut d, 1, &[0; 101], false);
    feed(&mut c, &d);
    assert_eq!(
        rst_code(&drain(&mut c), 1),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );
}

#[test]
fn padded_data_counts_padding_against_the_window_and_surfaces_only_data() {
    let mut c = open();
    feed(&mut c, &headers(1, &request_block("/pub/a", &[]), false));
    let mut d = Vec::new();
    frame::write_head(
        &mut d,
        1 + 5 + 10,
        Kind::Data,
        flags::PADDED | flags::END_STREAM,
        1,
    );
    d.push(10);
    d.extend_from_slice(b"hello");
    d.extend_from_slice(&[0; 10]);
    let ev = feed(&mut c, &d);
    assert_eq!(
        ev,
        [Event::Data {
            stream: 1,
            data: b"hello".to_vec(),
            end_stream: true
        }]
    );
    assert_eq!(c.recv_window, 65_535 - 16);
    // Padding as long as the payload.
    let mut d = Vec::new();
    frame::write_head(&mut d, 3, Kind::Data, flags::PADDED, 1);
    d.extend_from_slice(&[3, 0, 0]);
    feed(&mut c, &d);
    assert_eq!(goaway_code(&drain(&mut c)), Some(ErrorCode::PROTOCOL_ERROR));
}

#[test]
fn frames_over_max_frame_size_are_refused_before_the_payload_arrives() {
    let mut c = open();
    let mut d = Vec::new();
    frame::write_head(&mut d, 16_385, Kind::Data, 0, 1);
    let ev = feed(&mut c, &d);
    assert!(matches!(ev[..], [Event::ConnectionError(e)] if e.code == ErrorCode::FRAME_SIZE_ERROR));
}

#[test]
fn extended_connect_is_surfaced_only_when_advertised() {
    let config = Config {
        enable_connect_protocol: true,
        ..Config::default()
    };
    let mut c = Connection::new(config, Limits::default());
    let out = frames(c.output());
    let settings: Vec<(u16, u32)> = frame::settings(&out[0].3).collect();
    assert!(settings.contains(&(setting::ENABLE_CONNECT_PROTOCOL, 1)));
    assert!(
        !frames(Connection::new(Config::default(), Limits::default()).output())
            .iter()
            .any(|f| { frame::settings(&f.3).any(|s| s.0 == setting::ENABLE_CONNECT_PROTOCOL) })
    );
    let mut input = PREFACE.to_vec();
    frame::write_settings(&mut input, &[]);
    let mut b = Vec::new();
    for (n, v) in [
        (":method", "CONNECT"),
        (":protocol", "websocket"),
        (":scheme", "https"),
        (":path", "/sub/a"),
        (":authority", "h"),
    ] {
        encode_field(&mut b, n.as_bytes(), v.as_bytes());
    }
    input.extend(headers(1, &b, false));
    let ev = feed(&mut c, &input);
    let [Event::Request {
        request,
        end_stream: false,
        ..
    }] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (request.method.as_str(), request.protocol.as_deref()),
        ("CONNECT", Some("websocket"))
    );
}

#[test]
fn peer_reset_and_goaway_are_events_and_graceful_goaway_finishes_streams() {
    let mut c = open();
    let mut input = headers(1, &request_block("/", &[]), true);
    input.extend(headers(3, &request_block("/", &[]), true));
    frame::write_rst_stream(&mut input, 1, ErrorCode::CANCEL);
    frame::write_goaway(&mut input, 0, ErrorCode::NO_ERROR, b"");
    let ev = feed(&mut c, &input);
    assert_eq!(
        ev[2],
        Event::Reset {
            stream: 1,
            code: ErrorCode::CANCEL
        }
    );
    assert_eq!(
        ev[3],
        Event::GoAway {
            last_stream: 0,
            code: ErrorCode::NO_ERROR
        }
    );
    assert_eq!(c.send_data(1, b"x", false), Err(SendError::NoStream));
    c.goaway(ErrorCode::NO_ERROR, b"");
    // New streams after our GOAWAY are ignored; stream 3 is served to the end.
    assert!(feed(&mut c, &headers(5, &request_block("/", &[]), true)).is_empty());
    c.send_headers(3, 200, &[], false).unwrap();
    c.send_data(3, b"bye", true).unwrap();
    let out = drain(&mut c);
    assert_eq!(goaway_code(&out), Some(ErrorCode::NO_ERROR));
    assert!(c.is_done());
}

#[test]
fn a_response_complete_before_its_request_body_resets_the_stream_with_no_error() {
    // A body refused (413) after its first DATA: the answer ends the stream, and the client
    // is told to stop sending the rest (RFC 9113 §8.1) instead of having it read and dropped.
    let mut c = open();
    let mut input = headers(1, &request_block("/pub/a", &[]), false);
    frame::write_data(&mut input, 1, &[b'x'; 1000], false);
    let ev = feed(&mut c, &input);
    assert!(matches!(ev[1], Event::Data { stream: 1, .. }), "{ev:?}");
    drain(&mut c);
    c.send_headers(1, 413, &[("content-length", b"4")], false)
        .unwrap();
    c.send_data(1, b"big\n", true).unwrap();
    let out = drain(&mut c);
    let kinds: Vec<(u8, u8)> = out.iter().map(|f| (f.0, f.1 & flags::END_STREAM)).collect();
    assert_eq!(
        kinds,
        [
            (Kind::Headers as u8, 0),
            (Kind::Data as u8, flags::END_STREAM),
            (Kind::RstStream as u8, 0)
        ],
        "HEADERS, DATA with END_STREAM, then RST_STREAM"
    );
    assert_eq!(rst_code(&out, 1), Some(ErrorCode::NO_ERROR));
    assert_eq!(c.open_streams(), 0);
    // What the client had in flight before it saw the reset is ignored (no reset per frame,
    // no event), but still counts against the connection window, which is given back.
    let mut late = Vec::new();
    for _ in 0..40 {
        frame::write_data(&mut late, 1, &[b'x'; 1000], false);
    }
    let mut trailers = Vec::new();
    hpack::encode_field(&mut trailers, b"x-sum", b"1");
    late.extend(headers(1, &trailers, true));
    let ev = feed(&mut c, &late);
    assert!(ev.is_empty(), "{ev:?}");
    let out = drain(&mut c);
    assert!(
        out.iter()
            .all(|f| f.0 == Kind::WindowUpdate as u8 && f.2 == 0),
        "only connection window updates: {out:?}"
    );
    assert_eq!(c.take_counters().stream_errors, 0);
    // The connection serves on.
    let ev = feed(&mut c, &headers(3, &request_block("/", &[]), true));
    assert!(
        matches!(ev[..], [Event::Request { stream: 3, .. }]),
        "{ev:?}"
    );
}
