//! Frame decoder rules, each test named after the RFC 6455 section it checks. Every stream
//! is also fed split at every byte boundary and one byte at a time, the way reads really
//! arrive, and must decode to the same result.

use super::frame::*;
use super::opcode::*;

const MASK: [u8; 4] = [0x37, 0xFA, 0x21, 0x3D];

/// A client frame: `flags` is the first byte's high nibble (FIN 0x8, RSV1-3 0x4/0x2/0x1).
fn raw(flags: u8, op: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![(flags << 4) | op];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..=125 => f.push(m | n as u8),
        n @ 126..=0xFFFF => {
            f.push(m | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(m | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            f.extend_from_slice(&k);
            f.extend(payload.iter().zip(k.iter().cycle()).map(|(b, k)| b ^ k));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// A masked client frame.
fn frame(fin: bool, op: u8, payload: &[u8]) -> Vec<u8> {
    raw(if fin { 8 } else { 0 }, op, payload, Some(MASK))
}

#[derive(Debug, PartialEq, Eq, Clone)]
enum Seen {
    Message(DataKind, Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<u16>, Vec<u8>),
}

#[derive(Debug, PartialEq, Eq, Default)]
struct Outcome {
    seen: Vec<Seen>,
    error: Option<WsError>,
}

/// Plays the server's read loop: append each read to the kept tail, decode until stuck,
/// keep the unconsumed rest (checked to stay ≤ MAX_BUFFERED).
fn feed<'a>(reads: impl IntoIterator<Item = &'a [u8]>, limits: &Limits) -> Outcome {
    let mut dec = Decoder::default();
    let mut kept: Vec<u8> = Vec::new();
    let mut out = Outcome::default();
    let mut msg: Option<(DataKind, Vec<u8>)> = None;
    for read in reads {
        kept.extend_from_slice(read);
        let mut pos = 0;
        loop {
            let buf = &mut kept[pos..];
            let len = buf.len();
            let d = match dec.decode(buf, limits) {
                Ok(d) => d,
                Err(e) => {
                    assert!(dec.is_done());
                    out.error = Some(e);
                    return out;
                }
            };
            assert!(d.consumed <= len);
            if let Some(ev) = d.event {
                assert!(d.consumed > 0, "an event always consumes bytes");
                let at = |r: std::ops::Range<usize>| {
                    assert!(r.end <= d.consumed);
                    buf[r].to_vec()
                };
                match ev {
                    Event::Data { kind, payload, fin } => {
                        let m = msg.get_or_insert_with(|| (kind, Vec::new()));
                        assert_eq!(m.0, kind);
                        m.1.extend_from_slice(&at(payload));
                        if fin {
                            let (k, b) = msg.take().unwrap();
                            out.seen.push(Seen::Message(k, b));
                        }
                    }
                    Event::Ping(r) => out.seen.push(Seen::Ping(at(r))),
                    Event::Pong(r) => out.seen.push(Seen::Pong(at(r))),
                    Event::Close { code, reason } => out.seen.push(Seen::Close(code, at(reason))),
                }
            }
            pos += d.consumed;
            if d.consumed == 0 {
                break;
            }
        }
        kept.drain(..pos);
        assert!(
            kept.len() <= MAX_BUFFERED,
            "caller kept {} bytes",
            kept.len()
        );
    }
    out
}

/// Decodes `stream` whole, split in two at every boundary, and bytewise; all must agree.
fn decode_everyhow(stream: &[u8], limits: &Limits) -> Outcome {
    let whole = feed([stream], limits);
    for cut in 0..=stream.len() {
        let (a, b) = stream.split_at(cut);
        assert_eq!(feed([a, b], limits), whole, "split at {cut}");
    }
    assert_eq!(feed(stream.chunks(1), limits), whole, "bytewise");
    assert_eq!(feed(stream.chunks(3), limits), whole, "3 bytes at a time");
    whole
}

fn server() -> Limits {
    Limits {
        max_message: 1 << 20,
        masking: Masking::Required,
    }
}

fn msg(kind: DataKind, b: &[u8]) -> Seen {
    Seen::Message(kind, b.to_vec())
}

fn error_of(stream: &[u8]) -> Option<WsError> {
    decode_everyhow(stream, &server()).error
}

#[test]
fn decoder_state_is_small_and_plain() {
    // The whole per-connection budget is 256 bytes; the decoder gets 24 of them.
    assert!(
        std::mem::size_of::<Decoder>() <= 24,
        "{}",
        std::mem::size_of::<Decoder>()
    );
    fn is_copy<T: Copy>() {}
    is_copy::<Decoder>();
}

#[test]
fn rfc6455_5_7_examples() {
    // A single-frame masked text message.
    let hello = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(
        decode_everyhow(&hello, &server()).seen,
        [msg(DataKind::Text, b"Hello")]
    );
    // A fragmented unmasked text message, decoded in the client role.
    let client = Limits {
        masking: Masking::Forbidden,
        ..server()
    };
    let frag = [0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f];
    assert_eq!(
        decode_everyhow(&frag, &client).seen,
        [msg(DataKind::Text, b"Hello")]
    );
    // Masked Ping "Hello" and an unmasked Pong "Hello" (client role).
    let ping = [
        0x89, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    assert_eq!(
        decode_everyhow(&ping, &server()).seen,
        [Seen::Ping(b"Hello".to_vec())]
    );
    let pong = [0x8a, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    assert_eq!(
        decode_everyhow(&pong, &client).seen,
        [Seen::Pong(b"Hello".to_vec())]
    );
}

#[test]
fn rfc6455_5_2_extended_lengths() {
    let limits = Limits {
        max_message: 1 << 20,
        ..server()
    };
    for n in [125usize, 126, 256, 65535, 65536, 70_000] {
        let payload: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let f = frame(true, BINARY, &payload);
        let out = feed([&f[..]], &limits);
        assert_eq!(out.seen, [msg(DataKind::Binary, &payload)], "{n}");
        let out = feed(f.chunks(1000), &limits);
        assert_eq!(
            out.seen,
            [msg(DataKind::Binary, &payload)],
            "{n} in reads of 1000"
        );
    }
}

#[test]
fn rfc6455_5_2_length_with_high_bit_is_1002() {
    let mut f = vec![0x82, 0x80 | 127];
    f.extend_from_slice(&(1u64 << 63).to_be_bytes());
    f.extend_from_slice(&MASK);
    let limits = Limits {
        max_message: u64::MAX,
        ..server()
    };
    let e = feed([&f[..]], &limits).error.unwrap();
    assert_eq!((e, e.close_code()), (WsError::LengthOverflow, 1002));
}

#[test]
fn rfc6455_5_3_unmasks_in_place_and_across_reads() {
    let payload: Vec<u8> = (0..=255).collect();
    for mask in [[1, 2, 3, 4], [0, 0, 0, 0], [0xFF, 0, 0xAA, 0x55]] {
        let f = raw(8, BINARY, &payload, Some(mask));
        // Odd-sized reads shift the mask phase on every piece.
        for size in [1, 2, 3, 5, 7, 64] {
            let out = feed(f.chunks(size), &server());
            assert_eq!(
                out.seen,
                [msg(DataKind::Binary, &payload)],
                "{mask:?} {size}"
            );
        }
    }
    let mut buf = frame(true, TEXT, b"abc");
    let d = Decoder::default().decode(&mut buf, &server()).unwrap();
    let Some(Event::Data { payload, .. }) = d.event else {
        panic!()
    };
    assert_eq!(&buf[payload], b"abc");
}

#[test]
fn rfc6455_5_1_unmasked_client_frame_is_1002() {
    let f = raw(8, TEXT, b"hi", None);
    let e = error_of(&f).unwrap();
    assert_eq!((e, e.close_code()), (WsError::Unmasked, 1002));
    // Detected from the first two bytes.
    let e = Decoder::default()
        .decode(&mut f.clone()[..2], &server())
        .unwrap_err();
    assert_eq!(e, WsError::Unmasked);
}

#[test]
fn rfc6455_5_1_masked_server_frame_is_1002_for_clients() {
    let client = Limits {
        masking: Masking::Forbidden,
        ..server()
    };
    let e = feed([&frame(true, TEXT, b"hi")[..]], &client)
        .error
        .unwrap();
    assert_eq!((e, e.close_code()), (WsError::Masked, 1002));
}

#[test]
fn rfc6455_5_2_reserved_bits_are_1002() {
    for rsv in [4, 2, 1, 7] {
        let f = raw(8 | rsv, TEXT, b"x", Some(MASK));
        let e = error_of(&f).unwrap();
        assert_eq!(
            (e, e.close_code()),
            (WsError::ReservedBits, 1002),
            "rsv {rsv}"
        );
    }
    // Also on control frames.
    assert_eq!(
        error_of(&raw(8 | 4, PING, b"", Some(MASK))),
        Some(WsError::ReservedBits)
    );
}

#[test]
fn rfc6455_5_2_reserved_opcodes_are_1002() {
    for op in (3..=7).chain(0xB..=0xF) {
        let e = error_of(&frame(true, op, b"")).unwrap();
        assert_eq!((e, e.close_code()), (WsError::ReservedOpcode(op), 1002));
    }
}

#[test]
fn rfc6455_5_5_control_frames_max_125_and_unfragmented() {
    assert_eq!(
        decode_everyhow(&frame(true, PING, &[7; 125]), &server()).seen,
        [Seen::Ping(vec![7; 125])]
    );
    let e = error_of(&frame(true, PING, &[7; 126])).unwrap();
    assert_eq!((e, e.close_code()), (WsError::ControlTooLong, 1002));
    // A short length in the 16-bit form is still a "long" control frame.
    let mut f = vec![0x89, 0x80 | 126, 0, 5];
    f.extend_from_slice(&MASK);
    f.extend_from_slice(&[0; 5]);
    assert_eq!(error_of(&f), Some(WsError::ControlTooLong));
    for op in [PING, PONG, CLOSE] {
        let e = error_of(&frame(false, op, b"")).unwrap();
        assert_eq!((e, e.close_code()), (WsError::ControlFragmented, 1002));
    }
}

#[test]
fn rfc6455_5_4_fragmentation_with_interleaved_control_frames() {
    let mut s = frame(false, TEXT, "frag".as_bytes());
    s.extend(frame(true, PING, b"p1"));
    s.extend(frame(false, CONTINUATION, b""));
    s.extend(frame(false, CONTINUATION, "mé".as_bytes()));
    s.extend(frame(true, PONG, b""));
    s.extend(frame(true, CONTINUATION, b"nts"));
    s.extend(frame(true, BINARY, &[0xFF; 200]));
    let out = decode_everyhow(&s, &server());
    assert_eq!(out.error, None);
    assert_eq!(
        out.seen,
        [
            Seen::Ping(b"p1".to_vec()),
            Seen::Pong(vec![]),
            msg(
                DataKind::Text,
                "fragmé"
                    .as_bytes()
                    .iter()
                    .chain(b"nts")
                    .copied()
                    .collect::<Vec<_>>()
                    .as_slice()
            ),
            msg(DataKind::Binary, &[0xFF; 200]),
        ]
    );
}

#[test]
fn rfc6455_5_4_continuation_without_start_is_1002() {
    let e = error_of(&frame(true, CONTINUATION, b"x")).unwrap();
    assert_eq!(
        (e, e.close_code()),
        (WsError::ContinuationWithoutStart, 1002)
    );
    // Also after a complete message.
    let mut s = frame(true, TEXT, b"done");
    s.extend(frame(true, CONTINUATION, b"x"));
    let out = decode_everyhow(&s, &server());
    assert_eq!(out.seen, [msg(DataKind::Text, b"done")]);
    assert_eq!(out.error, Some(WsError::ContinuationWithoutStart));
}

#[test]
fn rfc6455_5_4_new_data_frame_inside_fragmented_message_is_1002() {
    for op in [TEXT, BINARY] {
        let mut s = frame(false, BINARY, b"a");
        s.extend(frame(true, op, b"b"));
        let e = error_of(&s).unwrap();
        assert_eq!(
            (e, e.close_code()),
            (WsError::DataDuringFragmentedMessage, 1002)
        );
    }
}

#[test]
fn rfc6455_5_6_empty_messages() {
    let mut s = frame(true, TEXT, b"");
    s.extend(frame(false, BINARY, b""));
    s.extend(frame(true, CONTINUATION, b""));
    let out = decode_everyhow(&s, &server());
    assert_eq!(
        out.seen,
        [msg(DataKind::Text, b""), msg(DataKind::Binary, b"")]
    );
}

#[test]
fn rfc6455_8_1_invalid_utf8_text_is_1007() {
    let e = error_of(&frame(true, TEXT, &[b'a', 0xFF])).unwrap();
    assert_eq!((e, e.close_code()), (WsError::InvalidUtf8, 1007));
    // Surrogates and overlongs are not UTF-8 either.
    assert_eq!(
        error_of(&frame(true, TEXT, &[0xED, 0xA0, 0x80])),
        Some(WsError::InvalidUtf8)
    );
    assert_eq!(
        error_of(&frame(true, TEXT, &[0xC0, 0xAF])),
        Some(WsError::InvalidUtf8)
    );
    // Binary messages are not checked.
    assert_eq!(
        decode_everyhow(&frame(true, BINARY, &[0xFF]), &server()).error,
        None
    );
}

#[test]
fn rfc6455_8_1_utf8_checked_across_fragments() {
    // "κ" = CE BA and "€" = E2 82 AC, each split over two frames: fine.
    let mut s = frame(false, TEXT, &[b'a', 0xCE]);
    s.extend(frame(true, PING, b""));
    s.extend(frame(false, CONTINUATION, &[0xBA, 0xE2]));
    s.extend(frame(true, CONTINUATION, &[0x82, 0xAC]));
    let out = decode_everyhow(&s, &server());
    assert_eq!(
        out.seen,
        [Seen::Ping(vec![]), msg(DataKind::Text, "aκ€".as_bytes())]
    );
    // A split codepoint whose continuation is wrong fails in the second frame.
    let mut s = frame(false, TEXT, &[0xCE]);
    s.extend(frame(true, CONTINUATION, b"A"));
    assert_eq!(error_of(&s), Some(WsError::InvalidUtf8));
    // A message that ends inside a codepoint fails at its last frame.
    let mut s = frame(false, TEXT, b"ok");
    s.extend(frame(true, CONTINUATION, &[0xE2, 0x82]));
    assert_eq!(error_of(&s), Some(WsError::InvalidUtf8));
    // Same with an empty final fragment.
    let mut s = frame(false, TEXT, &[0xE2]);
    s.extend(frame(true, CONTINUATION, b""));
    assert_eq!(error_of(&s), Some(WsError::InvalidUtf8));
}

#[test]
fn rfc6455_8_1_invalid_utf8_fails_fast_before_the_message_ends() {
    // The bad byte arrives in the first of many frames; no later frame is needed to fail.
    let s = frame(false, TEXT, &[b'x', 0xFF, b'y']);
    assert_eq!(feed([&s[..]], &server()).error, Some(WsError::InvalidUtf8));
    // And inside one frame, before the frame's end arrives.
    let s = frame(true, TEXT, &[0xFF; 50]);
    assert_eq!(
        feed([&s[..10]], &server()).error,
        Some(WsError::InvalidUtf8)
    );
}

#[test]
fn rfc6455_7_4_1_message_too_big_is_1009() {
    let limits = Limits {
        max_message: 10,
        ..server()
    };
    assert_eq!(
        feed([&frame(true, TEXT, &[b'a'; 10])[..]], &limits).error,
        None
    );
    let f = frame(true, TEXT, &[b'a'; 11]);
    let e = feed([&f[..]], &limits).error.unwrap();
    assert_eq!((e, e.close_code()), (WsError::MessageTooBig, 1009));
    // Rejected on the header alone, before the payload is read.
    assert_eq!(feed([&f[..6]], &limits).error, Some(WsError::MessageTooBig));
    // Across fragments.
    let mut s = frame(false, BINARY, &[0; 6]);
    s.extend(frame(false, CONTINUATION, &[0; 4]));
    s.extend(frame(true, CONTINUATION, &[0; 1]));
    assert_eq!(feed([&s[..]], &limits).error, Some(WsError::MessageTooBig));
    // The count restarts with each message.
    let mut s = frame(true, BINARY, &[0; 10]);
    s.extend(frame(true, BINARY, &[0; 10]));
    assert_eq!(feed([&s[..]], &limits).seen.len(), 2);
    // A huge announced length does not overflow the sum.
    let mut s = frame(false, BINARY, &[0; 6]);
    let mut huge = vec![0x80, 0x80 | 127];
    huge.extend_from_slice(&(u64::MAX >> 1).to_be_bytes());
    huge.extend_from_slice(&MASK);
    s.extend(huge);
    let big = Limits {
        max_message: u64::MAX >> 1,
        ..server()
    };
    assert_eq!(feed([&s[..]], &big).error, Some(WsError::MessageTooBig));
}

#[test]
fn rfc6455_5_5_1_close_frames() {
    let out = decode_everyhow(&frame(true, CLOSE, b""), &server());
    assert_eq!(out.seen, [Seen::Close(None, vec![])]);
    let mut p = 1000u16.to_be_bytes().to_vec();
    p.extend_from_slice("bye é".as_bytes());
    let out = decode_everyhow(&frame(true, CLOSE, &p), &server());
    assert_eq!(
        out.seen,
        [Seen::Close(Some(1000), "bye é".as_bytes().to_vec())]
    );
    let e = error_of(&frame(true, CLOSE, &[3])).unwrap();
    assert_eq!((e, e.close_code()), (WsError::CloseTooShort, 1002));
}

#[test]
fn rfc6455_7_4_close_codes_checked() {
    for code in [1000u16, 1001, 1002, 1003, 1007, 1011, 1014, 3000, 4999] {
        let out = feed([&frame(true, CLOSE, &code.to_be_bytes())[..]], &server());
        assert_eq!(out.seen, [Seen::Close(Some(code), vec![])], "{code}");
    }
    for code in [0u16, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
        let e = error_of(&frame(true, CLOSE, &code.to_be_bytes())).unwrap();
        assert_eq!(
            (e, e.close_code()),
            (WsError::InvalidCloseCode(code), 1002),
            "{code}"
        );
    }
}

#[test]
fn rfc6455_5_5_1_close_reason_must_be_utf8_1007() {
    let mut p = 1000u16.to_be_bytes().to_vec();
    p.extend_from_slice(&[b'o', 0xFF]);
    let e = error_of(&frame(true, CLOSE, &p)).unwrap();
    assert_eq!((e, e.close_code()), (WsError::InvalidUtf8, 1007));
}

#[test]
fn rfc6455_1_4_after_close_input_is_discarded() {
    let mut s = frame(true, CLOSE, &1000u16.to_be_bytes());
    s.extend(frame(true, TEXT, b"late"));
    s.extend(raw(8, TEXT, b"unmasked garbage", None));
    let out = decode_everyhow(&s, &server());
    assert_eq!(
        out,
        Outcome {
            seen: vec![Seen::Close(Some(1000), vec![])],
            error: None
        }
    );
    // Errors are sticky the same way.
    let mut dec = Decoder::default();
    let mut bad = raw(8, TEXT, b"x", None);
    assert!(dec.decode(&mut bad, &server()).is_err());
    let mut good = frame(true, TEXT, b"x");
    assert_eq!(
        dec.decode(&mut good, &server()).unwrap(),
        Decoded {
            consumed: good.len(),
            event: None
        }
    );
}

#[test]
fn data_pieces_stream_without_buffering_the_frame() {
    // A 1000-byte frame read in 100-byte pieces: every piece is handed out at once, so the
    // caller never keeps payload bytes.
    let payload = vec![b'z'; 1000];
    let f = frame(true, TEXT, &payload);
    let mut dec = Decoder::default();
    let mut total = 0;
    for read in f.chunks(100) {
        let mut read = read.to_vec();
        let mut pos = 0;
        while pos < read.len() {
            let d = dec.decode(&mut read[pos..], &server()).unwrap();
            assert!(d.consumed > 0, "nothing kept");
            if let Some(Event::Data { payload, fin, .. }) = d.event {
                total += payload.len();
                assert_eq!(fin, total == 1000);
            }
            pos += d.consumed;
        }
        assert!(!dec.in_message() || total < 1000);
    }
    assert_eq!(total, 1000);
    assert!(!dec.in_message());
}

#[test]
fn kept_bytes_never_exceed_max_buffered() {
    // The largest thing a caller keeps: a whole masked 125-byte ping minus its last byte.
    let f = frame(true, PING, &[1; 125]);
    assert_eq!(f.len(), MAX_BUFFERED);
    let d = Decoder::default()
        .decode(&mut f.clone()[..MAX_BUFFERED - 1], &server())
        .unwrap();
    assert_eq!(
        d,
        Decoded {
            consumed: 0,
            event: None
        }
    );
}

#[test]
fn encoded_frames_decode_in_client_role() {
    use super::encode;
    let client = Limits {
        masking: Masking::Forbidden,
        ..server()
    };
    let mut s = encode::message_frame("héllo".as_bytes());
    s.extend(encode::message_frame(&[0xFF; 300]));
    s.extend(encode::envelope_frame("news", 5, b"x"));
    s.extend_from_slice(encode::ping(b"p").as_bytes());
    s.extend_from_slice(encode::close(Some(1001), "going").as_bytes());
    let out = decode_everyhow(&s, &client);
    assert_eq!(out.error, None);
    assert_eq!(
        out.seen,
        [
            msg(DataKind::Text, "héllo".as_bytes()),
            msg(DataKind::Binary, &[0xFF; 300]),
            msg(DataKind::Text, br#"{"channel":"news","id":5,"data":"x"}"#),
            Seen::Ping(b"p".to_vec()),
            Seen::Close(Some(1001), b"going".to_vec()),
        ]
    );
    // And the masked client encoder decodes in the server role.
    let mut c = Vec::new();
    encode::write_masked(&mut c, TEXT, false, b"ab", [9, 8, 7, 6]);
    encode::write_masked(&mut c, CONTINUATION, true, b"c", [1, 2, 3, 4]);
    assert_eq!(
        decode_everyhow(&c, &server()).seen,
        [msg(DataKind::Text, b"abc")]
    );
}

#[test]
fn state_returns_to_default_between_messages() {
    // So the server may keep a decoder only while a client is mid-message.
    let limits = server();
    let mut dec = Decoder::default();
    assert!(dec.is_idle());
    let mut s = frame(false, TEXT, &[0xCE]);
    s.extend(frame(true, PING, b"x"));
    s.extend(frame(true, CONTINUATION, &[0xBA]));
    s.extend(frame(true, BINARY, &[1; 300]));
    let mut pos = 0;
    let mut idle_after = Vec::new();
    while pos < s.len() {
        let d = dec.decode(&mut s[pos..], &limits).unwrap();
        pos += d.consumed;
        idle_after.push(dec.is_idle());
    }
    // Text start (mid-message), ping (still mid-message), continuation end, binary end.
    assert_eq!(idle_after, [false, false, true, true]);
    assert_eq!(dec, Decoder::default());
    // Half a frame header is kept by the caller, not the decoder: still idle.
    let mut half = frame(true, TEXT, b"abc");
    assert_eq!(dec.decode(&mut half[..3], &limits).unwrap().consumed, 0);
    assert!(dec.is_idle());
    // After a Close it is not idle (it discards input from then on).
    let mut c = frame(true, CLOSE, b"");
    dec.decode(&mut c, &limits).unwrap();
    assert!(!dec.is_idle());
}
