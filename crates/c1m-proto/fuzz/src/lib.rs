//! Fuzz harness for c1m-proto's parsers of network bytes: the property checks each target runs
//! on one input. WebSocket here; HTTP heads and bodies in [`http`]; the TCP `SUB` line in
//! [`line`]; HTTP/2 frames and HPACK in [`h2`]. Shared by the libFuzzer targets (fuzz_targets/) and by the bounded random-input
//! stress tests in `cargo test` (crates/c1m-proto/tests/ws_stress.rs and http_stress.rs include
//! this file), so the properties checked are the same whether or not libFuzzer can run.
//!
//! A panic here is a finding: either the code under test panicked or a property failed.

pub mod client;
pub mod h2;
pub mod http;
pub mod line;

use c1m_proto::ws::encode;
use c1m_proto::ws::handshake::{self, OriginPolicy, RejectReason};
use c1m_proto::ws::{close, DataKind, Decoder, Event, Limits, Masking, WsError, MAX_BUFFERED};

/// What a stream decoded to, independent of how it was split into reads.
#[derive(Debug, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Messages (kind, whole payload) and control frames, in order.
    pub seen: Vec<(u8, Vec<u8>)>,
    pub error: Option<WsError>,
    /// Bytes of an unfinished message at the end (pieces already handed out).
    pub partial: usize,
}

/// Plays the server's read loop over `reads` and checks the decoder's contract on every call.
pub fn feed<'a>(reads: impl IntoIterator<Item = &'a [u8]>, limits: &Limits) -> Outcome {
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
                    assert!(dec.is_done(), "errors are sticky");
                    out.error = Some(e);
                    out.partial = msg.map_or(0, |m| m.1.len());
                    return out;
                }
            };
            assert!(d.consumed <= len, "consumed {} of {}", d.consumed, len);
            if let Some(ev) = d.event {
                assert!(d.consumed > 0, "event without progress");
                let take = |r: std::ops::Range<usize>| {
                    assert!(
                        r.start <= r.end && r.end <= d.consumed,
                        "range {r:?} > {}",
                        d.consumed
                    );
                    buf[r].to_vec()
                };
                match ev {
                    Event::Data { kind, payload, fin } => {
                        let m = msg.get_or_insert_with(|| (kind, Vec::new()));
                        assert_eq!(m.0, kind, "kind changed inside a message");
                        m.1.extend_from_slice(&take(payload));
                        assert!(m.1.len() as u64 <= limits.max_message, "message over limit");
                        if fin {
                            if let Some((k, b)) = msg.take() {
                                if k == DataKind::Text {
                                    assert!(
                                        std::str::from_utf8(&b).is_ok(),
                                        "bad text let through"
                                    );
                                }
                                out.seen.push((if k == DataKind::Text { 1 } else { 2 }, b));
                            }
                        }
                    }
                    Event::Ping(r) => {
                        let p = take(r);
                        assert!(p.len() <= 125);
                        out.seen.push((9, p));
                    }
                    Event::Pong(r) => {
                        let p = take(r);
                        assert!(p.len() <= 125);
                        out.seen.push((10, p));
                    }
                    Event::Close { code, reason } => {
                        let r = take(reason);
                        assert!(
                            std::str::from_utf8(&r).is_ok(),
                            "bad close reason let through"
                        );
                        if let Some(c) = code {
                            assert!(close::is_valid_on_wire(c), "bad close code {c}");
                        }
                        assert!(dec.is_done());
                        let mut v = code.map_or(Vec::new(), |c| c.to_be_bytes().to_vec());
                        v.extend_from_slice(&r);
                        out.seen.push((8, v));
                    }
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
            "caller must keep {} bytes",
            kept.len()
        );
    }
    out.partial = msg.map_or(0, |m| m.1.len());
    out
}

/// Tiny deterministic PRNG (xorshift64) for read sizes: no dependency, same on every run.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Target: byte 0 picks role and limit, byte 1 seeds the read sizes, the rest is the stream.
/// The stream decoded in one read and in random small reads must give the same outcome.
pub fn ws_frame(data: &[u8]) {
    let &[cfg, seed, ref stream @ ..] = data else {
        return;
    };
    let limits = Limits {
        // Small limits reach the 1009 path; large ones the 16/64-bit lengths.
        max_message: match cfg & 3 {
            0 => 0,
            1 => 16,
            2 => 200,
            _ => u64::MAX,
        },
        // The client role lets unmasked (plain) payloads through, which reaches UTF-8 paths.
        masking: if cfg & 4 == 0 {
            Masking::Required
        } else {
            Masking::Forbidden
        },
    };
    let whole = feed([stream], &limits);
    let mut rng = XorShift(u64::from(seed) << 32 | u64::from(cfg) | 0x5555);
    let mut rest = stream;
    let mut reads = Vec::new();
    while !rest.is_empty() {
        let n = ((rng.next() % 17) as usize + 1).min(rest.len());
        let (a, b) = rest.split_at(n);
        reads.push(a);
        rest = b;
    }
    let pieces = feed(reads.iter().copied(), &limits);
    assert_eq!(whole.seen, pieces.seen, "split changed the messages");
    assert_eq!(whole.error, pieces.error, "split changed the error");
    // Where the stream stops mid-message, the split may stop at another piece boundary.
    if whole.error.is_none() {
        assert_eq!(whole.partial, pieces.partial);
    }
    if let Some(e) = whole.error {
        assert!(matches!(e.close_code(), 1002 | 1007 | 1009));
        // The reason must fit a Close frame.
        let f = encode::close(Some(e.close_code()), e.reason());
        assert_eq!(&f.as_bytes()[4..], e.reason().as_bytes());
    }
}

/// Target: the input as an HTTP request head (httparse, as the server parses it), and as raw
/// `name: value` lines that httparse would refuse. Every answer must be a well-formed response.
/// Returns each answer (None = accepted) so tests can see which paths were reached.
pub fn ws_handshake(data: &[u8]) -> Vec<Option<RejectReason>> {
    let mut answers = Vec::new();
    let list = OriginPolicy::from_list("https://a.example,http://b.example:8080", false);
    let mut hs = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut hs);
    if let Ok(httparse::Status::Complete(_)) = req.parse(data) {
        let (method, path) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
        let minor = req.version.unwrap_or(0);
        let pairs: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
        for policy in [&OriginPolicy::Any, &list] {
            let r = handshake::validate(method, path, minor, pairs.iter().copied(), policy);
            answers.push(check_answer(r));
        }
        let _ = handshake::is_upgrade(pairs.iter().copied());
    }
    // The server's own head parser, as the event loop calls it.
    if let Ok(req) = c1m_proto::http::parse_request(data) {
        for policy in [&OriginPolicy::Any, &list] {
            answers.push(check_answer(handshake::validate_request(&req, policy)));
        }
    }
    // Raw lines: names and values may hold anything httparse would reject.
    let pairs: Vec<(&str, &[u8])> = data
        .split(|&b| b == b'\n')
        .take(64)
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&b| b == b':')?;
            let name = std::str::from_utf8(&line[..colon]).ok()?;
            Some((name, &line[colon + 1..]))
        })
        .collect();
    for policy in [&OriginPolicy::Any, &list] {
        let r = handshake::validate("GET", "/sub/x", 1, pairs.iter().copied(), policy);
        answers.push(check_answer(r));
    }
    answers
}

#[must_use]
fn check_answer(r: Result<handshake::Accept, handshake::Reject>) -> Option<RejectReason> {
    match r {
        Ok(a) => {
            assert_eq!(a.accept.len(), 28);
            assert!(a
                .response
                .starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
            assert!(a.response.ends_with(b"\r\n\r\n"));
            assert!(a.response.len() < 256, "bounded response");
            None
        }
        Err(e) => {
            assert_eq!(e.status, e.reason.status());
            assert!(matches!(e.status, 400 | 403 | 426));
            assert_eq!(e.status == 403, e.reason == RejectReason::Origin);
            assert!(e.response.len() < 512, "bounded response");
            let mut hs = [httparse::EMPTY_HEADER; 8];
            let mut resp = httparse::Response::new(&mut hs);
            match resp.parse(&e.response) {
                Ok(httparse::Status::Complete(head)) => {
                    assert_eq!(resp.code, Some(e.status));
                    let cl = resp.headers.iter().find(|h| h.name == "Content-Length");
                    let cl = cl.and_then(|h| std::str::from_utf8(h.value).ok());
                    assert_eq!(
                        cl.and_then(|v| v.parse::<usize>().ok()),
                        Some(e.response.len() - head)
                    );
                }
                other => panic!("reject response does not parse: {other:?}"),
            }
            Some(e.reason)
        }
    }
}

/// Target: whatever the encoders build from arbitrary bytes decodes back to the same thing
/// (server frames in the client role, masked client frames in the server role).
pub fn ws_roundtrip(data: &[u8]) {
    let client = Limits {
        max_message: u64::MAX,
        masking: Masking::Forbidden,
    };
    let server = Limits {
        max_message: u64::MAX,
        masking: Masking::Required,
    };
    let text = std::str::from_utf8(data).is_ok();
    let out = feed([&encode::message_frame(data)[..]], &client);
    assert_eq!(out.error, None);
    assert_eq!(out.seen, [(if text { 1 } else { 2 }, data.to_vec())]);

    let id = data
        .iter()
        .fold(0u64, |a, &b| a.rotate_left(8) ^ u64::from(b));
    let out = feed([&encode::envelope_frame("ch.1", id, data)[..]], &client);
    assert_eq!(out.error, None);
    let [(1, json)] = &out.seen[..] else {
        panic!("envelope is not one text message")
    };
    let v: serde_json::Value = serde_json::from_slice(json).expect("envelope is JSON");
    assert_eq!(v["channel"], "ch.1");
    assert_eq!(v["id"].as_u64(), Some(id));
    if text {
        assert_eq!(v["data"].as_str(), std::str::from_utf8(data).ok());
    } else {
        use base64::Engine;
        let b64 = v["data_base64"]
            .as_str()
            .expect("binary data as data_base64");
        let back = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(back, data);
    }

    let cut = data.len().min(125);
    let mut control = Vec::new();
    control.extend_from_slice(encode::ping(data).as_bytes());
    control.extend_from_slice(encode::pong(data).as_bytes());
    let reason = String::from_utf8_lossy(data);
    control.extend_from_slice(encode::close(Some(4000), &reason).as_bytes());
    let out = feed([&control[..]], &client);
    assert_eq!(out.error, None);
    assert_eq!(out.seen[0], (9, data[..cut].to_vec()));
    assert_eq!(out.seen[1], (10, data[..cut].to_vec()));
    let (8, close) = &out.seen[2] else {
        panic!("no close")
    };
    assert_eq!(close[..2], 4000u16.to_be_bytes());
    assert!(reason.as_bytes().starts_with(&close[2..]) && close.len() <= 125);

    let mask = [
        data.first().copied().unwrap_or(0),
        1,
        data.last().copied().unwrap_or(2),
        3,
    ];
    let mut masked = Vec::new();
    let (a, b) = data.split_at(data.len() / 2);
    encode::write_masked(&mut masked, 2, false, a, mask);
    encode::write_masked(
        &mut masked,
        0,
        true,
        b,
        [mask[3], mask[2], mask[1], mask[0]],
    );
    let out = feed(masked.chunks(7), &server);
    assert_eq!(out.seen, [(2, data.to_vec())]);
}
