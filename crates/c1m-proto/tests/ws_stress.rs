#![allow(clippy::manual_is_multiple_of)] // the declared MSRV (1.80) predates is_multiple_of
//! Bounded, deterministic stand-in for the fuzzers, run by plain `cargo test`: 200k generated
//! inputs per target through the same property checks the libFuzzer targets use
//! (fuzz/src/lib.rs). Inputs are built to be *nearly* valid (real headers, masks, lengths,
//! UTF-8 edges, then a few bytes flipped) so they reach deep paths, not just the first check.

use crate::harness;

use harness::XorShift;

const CASES: usize = 200_000;

/// Appends one plausible frame (any opcode, masked or not, odd lengths, UTF-8 edge bytes).
fn push_frame(rng: &mut XorShift, out: &mut Vec<u8>) {
    let r = rng.next();
    let op = [0u8, 1, 2, 8, 9, 10, 1, 0, 2, 3, 0xB][(r % 11) as usize];
    let fin = r & 0x10 != 0 || op >= 8;
    let rsv = if r % 50 == 0 { 0x40 } else { 0 };
    let masked = r % 13 != 0;
    let len = match (r >> 8) % 8 {
        0 => 0,
        1 => 1,
        2 => 2,
        3..=5 => (r >> 16) as usize % 40,
        6 => 120 + (r >> 16) as usize % 10,
        // 16-bit lengths often; 64 KiB frames (64-bit length form) rarely, they cost time.
        _ if (r >> 16) % 32 == 0 => [65535usize, 65536][(r >> 21) as usize % 2],
        _ => [126usize, 200, 300][(r >> 16) as usize % 3],
    };
    out.push(u8::from(fin) << 7 | rsv | op);
    let m = if masked { 0x80 } else { 0 };
    match len {
        0..=125 if r % 31 != 0 => out.push(m | len as u8),
        0..=0xFFFF if r % 37 != 0 => {
            out.push(m | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(m | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    let key = (rng.next() as u32).to_be_bytes();
    if masked {
        out.extend_from_slice(&key);
    }
    let alphabet: &[&[u8]] = &[
        b"a",
        b"\xCE\xBA",
        b"\xE2\x82\xAC",
        b"\xF0\x9F\x98\x80",
        b"\xFF",
        b"\xED\xA0\x80",
        b"\x03\xE8",
    ];
    let mut payload = Vec::with_capacity(len + 4);
    while payload.len() < len {
        let pick = rng.next();
        let piece = alphabet[(pick % if pick & 0x300 == 0 { 7 } else { 4 }) as usize];
        payload.extend_from_slice(piece);
    }
    payload.truncate(len);
    if masked {
        for (b, k) in payload.iter_mut().zip(key.iter().cycle()) {
            *b ^= k;
        }
    }
    out.extend_from_slice(&payload);
}

#[test]
fn ws_frame_decoder_survives_200k_generated_streams() {
    let mut rng = XorShift(0x00C1_3D5E_ED00_0001);
    let mut input = Vec::new();
    for _ in 0..CASES {
        input.clear();
        let r = rng.next();
        input.push(r as u8);
        input.push((r >> 8) as u8);
        for _ in 0..1 + (r >> 16) % 4 {
            push_frame(&mut rng, &mut input);
        }
        // Flip a few bytes now and then, and cut the stream short now and then.
        if r % 5 == 0 {
            for _ in 0..1 + (r >> 24) % 3 {
                let at = (rng.next() as usize) % input.len();
                input[at] ^= rng.next() as u8;
            }
        }
        if r % 7 == 0 {
            let keep = (rng.next() as usize) % input.len();
            input.truncate(keep.max(2));
        }
        harness::ws_frame(&input);
    }
}

#[test]
fn ws_frame_decoder_survives_200k_random_byte_strings() {
    let mut rng = XorShift(0xDEAD_BEEF_1234_5678);
    let mut input = Vec::new();
    for _ in 0..CASES {
        input.clear();
        let len = (rng.next() % 48) as usize;
        while input.len() < len {
            input.extend_from_slice(&rng.next().to_le_bytes());
        }
        input.truncate(len);
        harness::ws_frame(&input);
    }
}

#[test]
fn ws_handshake_survives_200k_generated_heads() {
    let names = [
        "Host",
        "upgrade",
        "CONNECTION",
        "Sec-WebSocket-Key",
        "sec-websocket-version",
        "Origin",
        "X-Other",
    ];
    let values: &[&str] = &[
        "h",
        "websocket",
        "Upgrade",
        "keep-alive, upgrade",
        "dGhlIHNhbXBsZSBub25jZQ==",
        "13",
        "8",
        "https://a.example",
        "http://B.example:8080",
        "",
        " , ",
        "websocket, h2c",
        "x==",
        "dGhlIHNhbXBsZSBub25jZR==",
        "\t13 ",
        "https://evil.example",
    ];
    let methods = ["GET", "GET", "GET", "POST", "get"];
    let paths = ["/sub/a", "/", "*", "/a#b", "http://x/sub"];
    let mut rng = XorShift(0x0123_4567_89AB_CDEF);
    let mut input = Vec::new();
    let mut reached = std::collections::HashSet::new();
    for _ in 0..CASES {
        input.clear();
        let r = rng.next();
        let method = methods[(r % 5) as usize];
        let path = paths[((r >> 4) % 5) as usize];
        let version = if (r >> 8) % 9 == 0 { "1.0" } else { "1.1" };
        input.extend_from_slice(format!("{method} {path} HTTP/{version}\r\n").as_bytes());
        // Mostly a good handshake: each required header is usually there and usually right.
        let good = [
            ("Host", "h"),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
            ("Origin", "https://a.example"),
        ];
        for (name, value) in good {
            let x = rng.next();
            if x % 12 != 0 {
                let value = if x % 7 == 1 {
                    values[((x >> 8) % values.len() as u64) as usize]
                } else {
                    value
                };
                input.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
            }
        }
        for _ in 0..(r >> 12) % 4 {
            let x = rng.next();
            let name = names[(x % names.len() as u64) as usize];
            let value = values[((x >> 8) % values.len() as u64) as usize];
            input.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        input.extend_from_slice(b"\r\n");
        if r % 11 == 0 {
            let at = (rng.next() as usize) % input.len();
            input[at] = rng.next() as u8;
        }
        reached.extend(harness::ws_handshake(&input));
    }
    // Every answer must have been reached, acceptance included (None), or the test proves little.
    use c1m_proto::ws::handshake::RejectReason as R;
    for want in [
        None,
        Some(R::Method),
        Some(R::HttpVersion),
        Some(R::Path),
        Some(R::MissingHost),
        Some(R::Upgrade),
        Some(R::Connection),
        Some(R::Version),
        Some(R::MissingKey),
        Some(R::DuplicateKey),
        Some(R::BadKey),
        Some(R::Origin),
    ] {
        assert!(reached.contains(&want), "never reached {want:?}");
    }
}

/// The generated streams must actually reach the deep paths, or the test proves little.
#[test]
fn generated_streams_reach_every_outcome() {
    use c1m_proto::ws::WsError;
    let mut rng = XorShift(0x00C1_3D5E_ED00_0001);
    let mut input = Vec::new();
    let mut errors = std::collections::HashSet::new();
    let mut messages = 0;
    for _ in 0..20_000 {
        input.clear();
        for _ in 0..1 + rng.next() % 4 {
            push_frame(&mut rng, &mut input);
        }
        let limits = c1m_proto::ws::Limits {
            max_message: 200,
            masking: c1m_proto::ws::Masking::Required,
        };
        let out = harness::feed([&input[..]], &limits);
        messages += out.seen.len();
        if let Some(e) = out.error {
            errors.insert(std::mem::discriminant(&e));
        }
    }
    let want = [
        WsError::Unmasked,
        WsError::ReservedBits,
        WsError::ReservedOpcode(3),
        WsError::ControlTooLong,
        WsError::ContinuationWithoutStart,
        WsError::DataDuringFragmentedMessage,
        WsError::InvalidCloseCode(0),
        WsError::CloseTooShort,
        WsError::InvalidUtf8,
        WsError::MessageTooBig,
    ];
    for w in want {
        assert!(
            errors.contains(&std::mem::discriminant(&w)),
            "never reached {w:?}"
        );
    }
    assert!(messages > 5_000, "only {messages} events");
}

#[test]
fn ws_encoders_round_trip_200k_payloads() {
    let mut rng = XorShift(0x0BAD_CAFE_F00D_0001);
    let mut input = Vec::new();
    let pieces: &[&[u8]] = &[
        b"a",
        b"\"",
        b"\\",
        b"\n",
        b"\x01",
        "é".as_bytes(),
        "😀".as_bytes(),
        b"\xFF",
        b"\xE2\x82",
    ];
    for i in 0..CASES {
        input.clear();
        // Mostly short payloads; every 1000th crosses the 125 and 16-bit length edges.
        let len = if i % 1000 == 0 {
            100 + (rng.next() % 70_000) as usize
        } else {
            (rng.next() % 140) as usize
        };
        while input.len() < len {
            input.extend_from_slice(pieces[(rng.next() % pieces.len() as u64) as usize]);
        }
        input.truncate(len);
        harness::ws_roundtrip(&input);
    }
}
