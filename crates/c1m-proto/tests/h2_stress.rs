#![allow(clippy::manual_is_multiple_of)] // the same style as the other stress tests
//! Bounded, deterministic stand-in for the `h2_frames` fuzzer, run by plain `cargo test`:
//! generated client flights through the same property checks (fuzz/src/h2.rs). Flights are
//! built from the frames attacks are made of (resets right after HEADERS, CONTINUATION runs,
//! PING and SETTINGS bursts, window updates of 0 and 2^31, padding, HPACK bombs, bad stream
//! ids), then a few bytes are flipped. The test also checks that every outcome was reached, so
//! a generator that drifts into producing only garbage fails instead of passing quietly.

use crate::harness;

use c1m_proto::h2::frame::{self, flags, setting, Kind, PREFACE};
use c1m_proto::h2::{hpack, huffman, ErrorCode};
use harness::XorShift;

fn pick<'a, T>(rng: &mut XorShift, from: &'a [T]) -> &'a T {
    &from[(rng.next() as usize) % from.len()]
}

fn block(rng: &mut XorShift) -> Vec<u8> {
    let mut b = Vec::new();
    if rng.next() % 8 != 0 {
        b.push(0x20); // table size update to 0: the client saw our SETTINGS
    }
    let fields: &[(&str, &str)] = &[
        (":method", "GET"),
        (":method", "POST"),
        (":method", "CONNECT"),
        (":scheme", "https"),
        (":path", "/sub/a"),
        (":authority", "h"),
        (":protocol", "websocket"),
        (":status", "200"),
        ("accept", "text/event-stream"),
        ("Upper", "x"),
        ("connection", "close"),
        ("te", "trailers"),
        ("x", " padded "),
    ];
    for (n, v) in [
        (":method", "GET"),
        (":scheme", "https"),
        (":path", "/sub/a"),
        (":authority", "h"),
    ] {
        if rng.next() % 10 != 0 {
            hpack::encode_field(&mut b, n.as_bytes(), v.as_bytes());
        }
    }
    for _ in 0..rng.next() % 3 {
        let (n, v) = pick(rng, fields);
        hpack::encode_field(&mut b, n.as_bytes(), v.as_bytes());
    }
    match rng.next() % 12 {
        0 => {
            // A bomb: one big value, indexed name, repeated.
            for _ in 0..4 {
                hpack::encode_field(&mut b, b"cookie", &[b'c'; 900]);
            }
        }
        1 => {
            // Huffman literal, with incremental indexing.
            b.extend_from_slice(&[0x40, 0x03, b'x', b'-', b'h']);
            let v = b"huffman value";
            b.push(0x80 | huffman::encoded_len(v) as u8);
            huffman::encode(v, &mut b);
        }
        _ => {}
    }
    b
}

fn flight(rng: &mut XorShift, out: &mut Vec<u8>) {
    out.clear();
    out.push(rng.next() as u8);
    if rng.next() % 30 == 0 {
        out.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    } else {
        out.extend_from_slice(PREFACE);
    }
    if rng.next() % 20 != 0 {
        frame::write_settings(
            out,
            &[(setting::INITIAL_WINDOW_SIZE, *pick(rng, &[0, 1000, 65_535]))],
        );
    }
    let mut next_id = 1u32;
    for _ in 0..(rng.next() % 16) {
        let id = if rng.next() % 10 == 0 {
            (rng.next() % 12) as u32
        } else {
            next_id.saturating_sub(2).max(1)
        };
        match rng.next() % 14 {
            0..=2 => {
                let b = block(rng);
                let end = rng.next() % 2 == 0;
                if rng.next() % 5 == 0 && b.len() > 2 {
                    let f = if end { flags::END_STREAM } else { 0 };
                    frame::write_head(out, 2, Kind::Headers, f, next_id);
                    out.extend_from_slice(&b[..2]);
                    for _ in 0..rng.next() % 12 {
                        frame::write_head(out, 0, Kind::Continuation, 0, next_id);
                    }
                    frame::write_head(
                        out,
                        b.len() - 2,
                        Kind::Continuation,
                        flags::END_HEADERS,
                        next_id,
                    );
                    out.extend_from_slice(&b[2..]);
                } else {
                    frame::write_headers(out, next_id, &b, end, 16_384);
                }
                next_id += 2;
            }
            3 | 4 => {
                let len = *pick(rng, &[0usize, 5, 1000, 1000, 16_000, 20_000]);
                if rng.next() % 4 == 0 {
                    frame::write_head(out, len + 1 + 3, Kind::Data, flags::PADDED, id);
                    out.push(3);
                    out.extend(std::iter::repeat_n(b'd', len));
                    out.extend_from_slice(&[0; 3]);
                } else {
                    frame::write_data(out, id, &vec![b'd'; len], rng.next() % 3 == 0);
                }
            }
            5 | 6 => {
                // Open and reset at once: the rapid-reset pattern.
                for _ in 0..(rng.next() % 20) {
                    frame::write_headers(out, next_id, &block(rng), true, 16_384);
                    frame::write_rst_stream(out, next_id, ErrorCode::CANCEL);
                    next_id += 2;
                }
            }
            7 => {
                for _ in 0..(rng.next() % 24) {
                    frame::write_ping(out, false, [7; 8]);
                }
            }
            8 => {
                let (id, value) = *pick(
                    rng,
                    &[
                        (setting::INITIAL_WINDOW_SIZE, 0),
                        (setting::INITIAL_WINDOW_SIZE, 1 << 31),
                        (setting::MAX_FRAME_SIZE, 100),
                        (setting::MAX_FRAME_SIZE, 20_000),
                        (setting::ENABLE_PUSH, 2),
                        (setting::HEADER_TABLE_SIZE, 0),
                        (0x99, 7),
                    ],
                );
                for _ in 0..(rng.next() % 20) {
                    frame::write_settings(out, &[(id, value)]);
                }
            }
            9 => {
                let inc = *pick(rng, &[0u32, 1, 3000, 0x7fff_ffff]);
                frame::write_window_update(out, if rng.next() % 2 == 0 { 0 } else { id }, inc);
            }
            10 => frame::write_rst_stream(out, id, ErrorCode::CANCEL),
            11 => {
                frame::write_head(out, 5, Kind::Priority, 0, id);
                out.extend_from_slice(&[0, 0, 0, (id % 4) as u8, 16]);
            }
            12 => frame::write_goaway(out, 0, ErrorCode::NO_ERROR, b"bye"),
            _ => {
                let kind = *pick(rng, &[0x4u8, 0x5, 0x9, 0x20]);
                frame::write_head(out, 4, Kind::Data, 0, id);
                let at = out.len() - 6;
                out[at] = kind;
                out.extend_from_slice(&[0, 0, 0, 1]);
            }
        }
    }
    for _ in 0..(rng.next() % 3) {
        if out.len() > 1 {
            let at = 1 + (rng.next() as usize) % (out.len() - 1);
            out[at] ^= 1 << (rng.next() % 8);
        }
    }
}

#[test]
fn h2_connection_holds_its_properties_for_20k_generated_flights() {
    let mut rng = XorShift(0x00C1_0042_0000_0001);
    let mut input = Vec::new();
    let (mut requests, mut data, mut resets, mut stream_errors) = (0, 0, 0, 0);
    let (mut conn_errors, mut clean, mut limits) = (0, 0, 0);
    for _ in 0..20_000 {
        flight(&mut rng, &mut input);
        let o = harness::h2::h2_frames(&input);
        requests += o.requests;
        data += o.data;
        resets += o.peer_resets;
        stream_errors += o.stream_errors;
        conn_errors += usize::from(o.connection_error);
        clean += usize::from(!o.connection_error);
        limits += usize::from(o.limit_hit);
    }
    eprintln!(
        "requests {requests}, data {data}, peer resets {resets}, stream errors {stream_errors}, \
         connection errors {conn_errors}, clean {clean}, limits hit {limits}"
    );
    for (what, n) in [
        ("requests", requests),
        ("data", data),
        ("peer resets", resets),
        ("stream errors", stream_errors),
        ("connection errors", conn_errors),
        ("clean runs", clean),
        ("limits hit", limits),
    ] {
        assert!(n > 100, "the generator reached {what} only {n} times");
    }
}

#[test]
fn hpack_decoder_holds_its_properties_for_100k_generated_blocks() {
    let mut rng = XorShift(0x00C1_4BAC_0000_0001);
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..100_000 {
        let mut b = block(&mut rng);
        for _ in 0..(rng.next() % 4) {
            if !b.is_empty() {
                let at = (rng.next() as usize) % b.len();
                b[at] = rng.next() as u8;
            }
        }
        if harness::h2::hpack_block(&b) {
            ok += 1;
        } else {
            refused += 1;
        }
    }
    assert!(ok > 1000 && refused > 1000, "ok {ok}, refused {refused}");
}
