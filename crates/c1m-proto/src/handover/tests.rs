//! Round trips, version refusal and malformed input for the hand-over format.

use super::*;
use crate::codec::Writer;

fn record() -> ConnRecord {
    ConnRecord {
        kind: 9,
        keep_alive: true,
        flags: 5,
        edge: 2,
        timer_ms: 1234,
        channels: vec!["a".into(), "news/β".into()],
        inbuf: b"GET / HT".to_vec(),
        out: b"data: x\n\n".to_vec(),
        replay_after: Some(77),
        cors: Some("Access-Control-Allow-Origin: *\r\n".into()),
        dashboard: false,
        ws_decoder: Some(vec![1, 2, 3]),
        ws_data: b"half".to_vec(),
        user: None,
        info: None,
        token: None,
    }
}

fn controls() -> Vec<Control> {
    vec![
        Control::Hello {
            format: FORMAT_VERSION,
            old_pid: 42,
            workers: 3,
            listen: "127.0.0.1:80".into(),
            tcp_listen: Some("127.0.0.1:81".into()),
            admin_listen: None,
            control_worker: false,
        },
        Control::Hello {
            format: FORMAT_VERSION,
            old_pid: 42,
            workers: 4,
            listen: "127.0.0.1:80".into(),
            tcp_listen: None,
            admin_listen: Some("127.0.0.1:82".into()),
            control_worker: true,
        },
        Control::Accept {
            pid: 7,
            version: "0.1.0 (commit x)".into(),
        },
        Control::Refuse {
            reason: "no".into(),
        },
        Control::Hub(Box::new(HubState {
            last_id: 9,
            forgotten_through: 3,
            channels: vec![ChannelHistory {
                name: "c".into(),
                forgotten_through: 4,
                messages: vec![(5, 10, b"p".to_vec()), (9, 0, Vec::new())],
            }],
            interest: vec![("c".into(), vec![0, 2])],
            published: 6,
            publish_refused: 1,
            upgrades_attempted: 2,
            upgrades_completed: 1,
            upgrades_failed: 1,
            lost_buckets: vec![(7, 3)],
        })),
        Control::HubTaken,
        Control::Commit,
        Control::Abort {
            reason: "timeout".into(),
        },
    ]
}

fn pairs() -> Vec<Pair> {
    vec![
        Pair::Hello {
            format: FORMAT_VERSION,
        },
        Pair::Listeners {
            kinds: vec![LISTENER_HTTP, LISTENER_TCP],
        },
        Pair::Part {
            last: true,
            data: vec![1, 2],
        },
        Pair::End { conns: 3 },
        Pair::Received { conns: 3 },
        Pair::Commit,
        Pair::Abort,
    ]
}

#[test]
fn round_trips() {
    for c in controls() {
        assert_eq!(Control::decode(&c.encode()).unwrap(), c);
    }
    for p in pairs() {
        assert_eq!(Pair::decode(&p.encode()).unwrap(), p);
    }
    let batch = vec![record(), ConnRecord::default(), record()];
    let bytes = ConnRecord::encode_batch(&batch);
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), batch);
    let mut with_users = batch.clone();
    with_users[1].user = Some("ann".into());
    with_users[2].user = Some("bob".into());
    let bytes = ConnRecord::encode_batch(&with_users);
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), with_users);
    // Presence infos, with and without users beside them.
    let mut with_infos = batch.clone();
    with_infos[0].info = Some("{\"name\":\"Ann\"}".into());
    let bytes = ConnRecord::encode_batch(&with_infos);
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), with_infos);
    // Tokens (the old worker's slot and generation), beside users and alone.
    let mut with_tokens = with_infos.clone();
    with_tokens[0].token = Some(0x7fff_fff0_0000_0003);
    with_tokens[2].token = Some(5);
    let bytes = ConnRecord::encode_batch(&with_tokens);
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), with_tokens);
    let mut only_tokens = batch.clone();
    only_tokens[1].token = Some(1 << 32);
    let bytes = ConnRecord::encode_batch(&only_tokens);
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), only_tokens);
    // The old worker's next generation, with records and in an empty batch.
    let bytes = ConnRecord::encode_batch_with(&with_tokens, Some(77));
    assert_eq!(
        ConnRecord::decode_batch_with(&bytes).unwrap(),
        (with_tokens.clone(), Some(77))
    );
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), with_tokens);
    let bytes = ConnRecord::encode_batch_with(&[], Some(5));
    assert_eq!(
        ConnRecord::decode_batch_with(&bytes).unwrap(),
        (Vec::new(), Some(5))
    );
    with_infos[2].user = Some("bob".into());
    let bytes = ConnRecord::encode_batch(&with_infos);
    assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), with_infos);
    // A batch larger than a packet is split and joins back to the same bytes.
    let big = vec![0xabu8; 3 * MAX_PACKET];
    let parts = Pair::parts(&big);
    assert!(parts.len() >= 3);
    let mut joined = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        let encoded = p.encode();
        assert!(encoded.len() <= MAX_PACKET);
        let Pair::Part { last, data } = Pair::decode(&encoded).unwrap() else {
            panic!("not a part")
        };
        assert_eq!(last, i == parts.len() - 1);
        joined.extend(data);
    }
    assert_eq!(joined, big);
}

/// Decodes all of `buf` with `dec`, returning every event with its unmasked bytes.
fn decode_all(dec: &mut crate::ws::frame::Decoder, buf: &[u8]) -> Vec<(String, Vec<u8>)> {
    let limits = crate::ws::frame::Limits::default();
    let mut buf = buf.to_vec();
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let d = dec.decode(&mut buf[at..], &limits).unwrap();
        if let Some(crate::ws::frame::Event::Data { payload, fin, .. }) = &d.event {
            let bytes = buf[at..][payload.clone()].to_vec();
            out.push((format!("fin={fin}"), bytes));
        }
        if d.consumed == 0 {
            break;
        }
        at += d.consumed;
    }
    out
}

#[test]
fn a_batch_without_users_is_the_format_before_users_and_unknown_extras_are_skipped() {
    // What a binary without the extras wrote: a count, then the records.
    let batch = vec![record(), record()];
    let mut old = Writer::new();
    old.count(2);
    for rec in &batch {
        rec.write(&mut old);
    }
    let old = old.into_bytes();
    assert_eq!(ConnRecord::encode_batch(&batch), old);
    assert_eq!(ConnRecord::decode_batch(&old).unwrap(), batch);
    // A later binary's extra this one does not know is skipped; a users field that names no
    // record is an error, not a panic.
    let mut newer = old.clone();
    let mut w = Writer::new();
    w.record(|e| {
        e.u64("something later", 7);
    });
    newer.extend_from_slice(&w.into_bytes());
    assert_eq!(ConnRecord::decode_batch(&newer).unwrap(), batch);
    for bad in ["2", "x"] {
        let mut wrong = old.clone();
        let mut w = Writer::new();
        w.record(|e| {
            e.record("users", |u| {
                u.str(bad, "ann");
            });
        });
        wrong.extend_from_slice(&w.into_bytes());
        assert!(ConnRecord::decode_batch(&wrong).is_err(), "{bad}");
    }
}

#[test]
fn a_websocket_decoder_mid_frame_carries_over() {
    use crate::ws::frame::Decoder;
    // A masked text frame (no FIN: the message goes on) whose payload splits "é".
    let text = "caf\u{e9} au lait".as_bytes();
    let mask = [0x11, 0x22, 0x33, 0x44];
    let mut frame = vec![0x01, 0x80 | text.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    let split = 6 + 4; // header + "caf" + the first byte of "é"
    let mut old = Decoder::default();
    let first = decode_all(&mut old, &frame[..split]);
    assert_eq!(first, vec![("fin=false".to_string(), b"caf\xc3".to_vec())]);
    let state = old.to_bytes();
    assert_eq!(state.len(), Decoder::STATE_LEN);
    let mut carried = Decoder::from_bytes(&state).unwrap();
    assert_eq!(carried, old);
    // The rest decodes the same in the carried decoder as in the original.
    let rest_old = decode_all(&mut old, &frame[split..]);
    let rest_new = decode_all(&mut carried, &frame[split..]);
    assert_eq!(rest_new, rest_old);
    assert_eq!(rest_new[0].1, text[4..].to_vec());
    // Bytes no decoder state has are refused.
    assert!(Decoder::from_bytes(&state[..10]).is_none());
    let mut bad = state.clone();
    bad[21] = 9;
    assert!(Decoder::from_bytes(&bad).is_none());
    let mut bad = state;
    bad[20] = 200;
    assert!(Decoder::from_bytes(&bad).is_none());
}

#[test]
fn another_format_version_is_refused_by_name() {
    let mut hello = controls().remove(0).encode();
    assert_eq!(hello_format(&hello), Some(FORMAT_VERSION));
    hello[1..5].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let err = Control::decode(&hello).unwrap_err().to_string();
    assert!(err.contains("format version 2"), "{err}");
    let mut pair = pairs().remove(0).encode();
    pair[1..5].copy_from_slice(&99u32.to_le_bytes());
    assert!(Pair::decode(&pair).is_err());
}

#[test]
fn truncated_or_garbage_messages_are_errors_not_panics() {
    let mut all: Vec<Vec<u8>> = controls().iter().map(Control::encode).collect();
    all.extend(pairs().iter().map(Pair::encode));
    for msg in &all {
        // A hello without its trailing control-worker byte is an older binary's hello.
        let optional_tail = matches!(
            Control::decode(msg),
            Ok(Control::Hello {
                control_worker: true,
                ..
            })
        );
        // A hub without its trailing lost buckets is one that lost no channel's record.
        let buckets_tail = match Control::decode(msg) {
            Ok(Control::Hub(h)) if !h.lost_buckets.is_empty() => 4 + 12 * h.lost_buckets.len(),
            _ => 0,
        };
        for cut in 0..msg.len() {
            let older_hello = optional_tail && cut == msg.len() - 1;
            let no_buckets = buckets_tail > 0 && cut == msg.len() - buckets_tail;
            assert!(Control::decode(&msg[..cut]).is_err() || cut == 1 || older_hello || no_buckets);
            let _ = Pair::decode(&msg[..cut]);
        }
    }
    let batch = ConnRecord::encode_batch(&[record(), record()]);
    for cut in 0..batch.len() {
        assert!(
            ConnRecord::decode_batch(&batch[..cut]).is_err(),
            "cut {cut}"
        );
    }
    // Trailing garbage, huge counts and bad booleans are refused.
    let mut long = batch.clone();
    long.push(0);
    assert!(ConnRecord::decode_batch(&long).is_err());
    assert!(ConnRecord::decode_batch(&[0xff, 0xff, 0xff, 0xff]).is_err());
    let mut bad_bool = ConnRecord::encode_batch(&[record()]);
    bad_bool[5] = 9; // keep_alive
    assert!(ConnRecord::decode_batch(&bad_bool).is_err());
    // Pseudo-random garbage never panics.
    let mut x: u32 = 12345;
    for _ in 0..2000 {
        let len = (x % 64) as usize;
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (x >> 16) as u8
            })
            .collect();
        let _ = Control::decode(&junk);
        let _ = Pair::decode(&junk);
        let _ = ConnRecord::decode_batch(&junk);
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Bytes a binary with format 1 wrote (captured from its encoder): a newer binary must read
/// them, and write the same bytes back, for as long as it announces format 1.
#[test]
fn format_one_bytes_still_read_and_encode_the_same() {
    let hello = unhex("01010000002a000000040000000c0000003132372e302e302e313a3830010c0000003132372e302e302e313a38310001");
    let hub = unhex("040900000000000000030000000000000001000000010000006304000000000000000100000005000000000000000a0000000000000001000000700100000001000000630200000000000000020000000600000000000000010000000000000002000000000000000100000000000000010000000000000001000000070000000300000000000000");
    let part = unhex("0301020000000102");
    let batch = unhex("0100000009010502d204000000000000010000000100000061030000004745540100000078014d0000000000000001010000004301010200000001020100000068");
    let expect_hello = Control::Hello {
        format: 1,
        old_pid: 42,
        workers: 4,
        listen: "127.0.0.1:80".into(),
        tcp_listen: Some("127.0.0.1:81".into()),
        admin_listen: None,
        control_worker: true,
    };
    assert_eq!(Control::decode(&hello).unwrap(), expect_hello);
    assert_eq!(expect_hello.encode(), hello);
    let expect_hub = Control::Hub(Box::new(HubState {
        last_id: 9,
        forgotten_through: 3,
        channels: vec![ChannelHistory {
            name: "c".into(),
            forgotten_through: 4,
            messages: vec![(5, 10, b"p".to_vec())],
        }],
        interest: vec![("c".into(), vec![0, 2])],
        published: 6,
        publish_refused: 1,
        upgrades_attempted: 2,
        upgrades_completed: 1,
        upgrades_failed: 1,
        lost_buckets: vec![(7, 3)],
    }));
    assert_eq!(Control::decode(&hub).unwrap(), expect_hub);
    assert_eq!(expect_hub.encode(), hub);
    let expect_part = Pair::Part {
        last: true,
        data: vec![1, 2],
    };
    assert_eq!(Pair::decode(&part).unwrap(), expect_part);
    assert_eq!(expect_part.encode(), part);
    let expect_batch = vec![ConnRecord {
        kind: 9,
        keep_alive: true,
        flags: 5,
        edge: 2,
        timer_ms: 1234,
        channels: vec!["a".into()],
        inbuf: b"GET".to_vec(),
        out: b"x".to_vec(),
        replay_after: Some(77),
        cors: Some("C".into()),
        dashboard: true,
        ws_decoder: Some(vec![1, 2]),
        ws_data: b"h".to_vec(),
        user: None,
        info: None,
        token: None,
    }];
    assert_eq!(ConnRecord::decode_batch(&batch).unwrap(), expect_batch);
    assert_eq!(ConnRecord::encode_batch(&expect_batch), batch);
}
