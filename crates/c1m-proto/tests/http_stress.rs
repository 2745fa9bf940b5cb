#![allow(clippy::manual_is_multiple_of)] // the declared MSRV (1.80) predates is_multiple_of
//! Bounded, deterministic stand-in for the HTTP and TCP-line fuzzers, run by plain `cargo test`:
//! generated inputs through the same property checks the libFuzzer targets use
//! (fuzz/src/http.rs, fuzz/src/line.rs). Inputs are built from the pieces smuggling attacks are
//! made of (duplicate and signed lengths, obfuscated codings, bare LF, obs-fold, odd chunk
//! lines), then a few bytes are flipped, so they reach deep paths, not just the first check.
//! Each test also checks that every outcome was reached, so a generator that drifts into
//! producing only garbage fails instead of passing quietly.

use crate::harness;

use c1m_proto::chunked;
use c1m_proto::http_framing::BodyFraming;
use harness::XorShift;

/// Flips, inserts or deletes up to two bytes (a third of the inputs stay as built).
fn mutate(rng: &mut XorShift, input: &mut Vec<u8>) {
    const BYTES: &[u8] = b"\r\n \t:,;0+-x\"\x00\x7f\xff9aF";
    for _ in 0..(rng.next() % 3) {
        if input.is_empty() {
            return;
        }
        let at = (rng.next() as usize) % input.len();
        let byte = BYTES[(rng.next() as usize) % BYTES.len()];
        match rng.next() % 3 {
            0 => input[at] = byte,
            1 => input.insert(at, byte),
            _ => {
                input.remove(at);
            }
        }
    }
}

fn pick<'a>(rng: &mut XorShift, from: &[&'a str]) -> &'a str {
    from[(rng.next() as usize) % from.len()]
}

#[test]
fn http_head_framing_holds_for_200k_generated_heads() {
    let mut rng = XorShift(0x00C1_4EAD_0000_0001);
    let (mut none, mut length, mut chunked, mut refused) = (0, 0, 0, 0);
    let mut input = Vec::new();
    for _ in 0..200_000 {
        input.clear();
        let start = [
            "GET /healthz HTTP/1.1",
            "POST /pub/a HTTP/1.1",
            "POST /pub/a HTTP/1.0",
            "GET /sub/x?last_id=5 HTTP/1.1",
            "HEAD / HTTP/1.1",
            "\r\nPOST /pub/a HTTP/1.1",
        ];
        input.extend_from_slice(pick(&mut rng, &start).as_bytes());
        input.extend_from_slice(b"\r\n");
        let fields = [
            "Host: t",
            "Content-Length: 5",
            "Content-Length: 0",
            "content-length:  007 ",
            "Content-Length: +5",
            "Content-Length: 5, 5",
            "Content-Length: 18446744073709551616",
            "Transfer-Encoding: chunked",
            "transfer-encoding: CHUNKED",
            "Transfer-Encoding:\tchunked",
            "Transfer-Encoding: gzip, chunked",
            "Transfer-Encoding: chunked, identity",
            "Transfer-Encoding: xchunked",
            "Transfer-Encoding : chunked",
            "X-Y: a\nContent-Length: 7",
            " Content-Length: 9",
            "Expect: 100-continue",
            "Connection: keep-alive, close",
            "X-Bin: \u{e9}t\u{e9}",
        ];
        for _ in 0..(rng.next() % 5) {
            input.extend_from_slice(pick(&mut rng, &fields).as_bytes());
            input.extend_from_slice(if rng.next() % 40 == 0 { b"\n" } else { b"\r\n" });
        }
        input.extend_from_slice(b"\r\nhello");
        mutate(&mut rng, &mut input);
        match harness::http::http_head(&input) {
            Some(BodyFraming::None) => none += 1,
            Some(BodyFraming::Length(_)) => length += 1,
            Some(BodyFraming::Chunked) => chunked += 1,
            None => refused += 1,
        }
    }
    // Every outcome is reached often (chunked, the rarest, in about 2% of the heads).
    for (what, n) in [
        ("none", none),
        ("length", length),
        ("chunked", chunked),
        ("refused", refused),
    ] {
        assert!(n > 2_000, "{what}: only {n} of 200k");
    }
}

#[test]
fn chunked_body_decodes_consistently_for_100k_generated_bodies() {
    let mut rng = XorShift(0x00C1_C4C4_0000_0001);
    let (mut complete, mut partial, mut refused) = (0, 0, 0);
    let mut input = Vec::new();
    for _ in 0..100_000 {
        input.clear();
        let r = rng.next();
        input.push(r as u8); // body limit choice
        input.push((r >> 8) as u8); // cut-point seed
        let len = (r >> 16) as usize % 600;
        let body: Vec<u8> = (0..len).map(|i| b"ab\r\n0;"[i % 6]).collect();
        let mut pieces = Vec::new();
        let mut rest = &body[..];
        while !rest.is_empty() {
            let n = ((rng.next() % 200) as usize + 1).min(rest.len());
            pieces.push(&rest[..n]);
            rest = &rest[n..];
        }
        let mut coded = chunked::encode(pieces.iter().copied());
        // Sometimes extensions and trailers, as curl and proxies send them.
        if rng.next() % 4 == 0 {
            let at = coded.iter().position(|&b| b == b'\r').unwrap();
            coded.splice(at..at, b";ext=\"v;1\"".iter().copied());
        }
        if rng.next() % 4 == 0 {
            let at = coded.len() - 2;
            coded.splice(at..at, b"X-Sum: 1\r\n".iter().copied());
        }
        if rng.next() % 8 == 0 {
            coded.truncate((rng.next() as usize) % coded.len());
        }
        input.extend_from_slice(&coded);
        input.extend_from_slice(b"GET /next HTTP/1.1\r\n");
        mutate(&mut rng, &mut input);
        harness::http::chunked_body(&input);
        let max =
            [0usize, 1, 16, 300, 4096, 1 << 20][input.first().copied().unwrap_or(0) as usize % 6];
        match chunked::decode(input.get(2..).unwrap_or_default(), max) {
            Ok(chunked::Decoded::Complete { .. }) => complete += 1,
            Ok(chunked::Decoded::Partial) => partial += 1,
            Err(_) => refused += 1,
        }
    }
    for (what, n) in [
        ("complete", complete),
        ("partial", partial),
        ("refused", refused),
    ] {
        assert!(n > 2_000, "{what}: only {n} of 100k");
    }
}

#[test]
fn tcp_sub_line_holds_for_200k_generated_lines() {
    let mut rng = XorShift(0x00C1_5AB0_0000_0001);
    let (mut accepted, mut refused) = (0, 0);
    let mut input = Vec::new();
    for _ in 0..200_000 {
        input.clear();
        let verb = ["SUB ", "SUB ", "SUB ", "sub ", "SUB  ", "PUB "];
        input.extend_from_slice(pick(&mut rng, &verb).as_bytes());
        let lists = ["a", "a,b", "news.eu:1", "a,a,b", "a,,b", "x-y_z", "é", ""];
        input.extend_from_slice(pick(&mut rng, &lists).as_bytes());
        let ids = [
            "",
            " 0",
            " 42",
            " 007",
            " +5",
            " -1",
            " 18446744073709551615",
            " 18446744073709551616",
            " 1 2",
        ];
        input.extend_from_slice(pick(&mut rng, &ids).as_bytes());
        input.extend_from_slice(if rng.next() % 3 == 0 { b"\r\n" } else { b"\n" });
        mutate(&mut rng, &mut input);
        match harness::line::tcp_line(&input) {
            Some(_) => accepted += 1,
            None => refused += 1,
        }
    }
    // About one line in ten is accepted (lines are built to be nearly valid).
    assert!(
        accepted > 10_000 && refused > 10_000,
        "{accepted} / {refused}"
    );
}
