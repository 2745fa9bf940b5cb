//! Fuzz harness for the HTTP/1.1 request side of c1m-proto: the head parser with the framing
//! rules (RFC 9112 §6), and the chunked body decoder. Same properties for the libFuzzer targets
//! and for the bounded generated-input test in `cargo test` (tests/http_stress.rs).
//!
//! The properties are about smuggling: an accepted head has exactly one body length, and that
//! length agrees with a naive reading of the raw header lines (a parser that hides a header
//! from itself, e.g. behind a bare LF, would disagree with the line-by-line reading a proxy
//! does); a chunked body decodes the same however it arrives, and re-encodes to the same bytes.

use super::XorShift;
use c1m_proto::chunked::{self, ChunkedError, Decoded};
use c1m_proto::http::{self, HeadError};
use c1m_proto::http_framing::BodyFraming;

/// Target: `data` as the start of a connection's input, parsed as the worker parses it.
/// Returns the framing decided (None when the head was refused or is incomplete).
pub fn http_head(data: &[u8]) -> Option<BodyFraming> {
    let req = match http::parse_request(data) {
        Ok(req) => req,
        Err(HeadError::Partial) => {
            assert!(data.len() < http::MAX_HEAD, "partial past MAX_HEAD");
            return None;
        }
        Err(HeadError::TooLarge | HeadError::Malformed(_)) => return None,
    };
    assert!(req.head_len <= data.len() && req.head_len <= http::MAX_HEAD);
    let head = &data[..req.head_len];
    assert!(head.ends_with(b"\r\n\r\n"), "head must end in CRLF CRLF");
    // Every LF ends a CRLF line: no line a proxy could read differently.
    for (i, &b) in head.iter().enumerate() {
        if b == b'\n' {
            assert!(i > 0 && head[i - 1] == b'\r', "bare LF accepted");
        }
        if b == b'\r' {
            assert_eq!(head.get(i + 1), Some(&b'\n'), "bare CR accepted");
        }
    }
    for (_, value) in &req.headers {
        assert!(
            !value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n'),
            "control byte in a header value"
        );
    }
    let framing = req.body_framing();
    // The naive view: header lines of the raw head, split on CRLF, names compared as bytes.
    // (httparse skips empty lines before the request line, RFC 9112 §2.2.)
    let mut start = 0;
    while head[start..].starts_with(b"\r\n") {
        start += 2;
    }
    let lines: Vec<&[u8]> = head[start..head.len() - 4]
        .split(|&b| b == b'\n')
        .skip(1) // request line
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .collect();
    let named = |name: &[u8]| -> Vec<&[u8]> {
        lines
            .iter()
            .filter_map(|l| {
                let colon = l.iter().position(|&b| b == b':')?;
                l[..colon]
                    .eq_ignore_ascii_case(name)
                    .then(|| trim(&l[colon + 1..]))
            })
            .collect()
    };
    let lengths = named(b"content-length");
    let codings = named(b"transfer-encoding");
    assert_eq!(lines.len(), req.headers.len(), "a header line went unseen");
    match framing {
        Ok(BodyFraming::None) => assert!(lengths.is_empty() && codings.is_empty()),
        Ok(BodyFraming::Length(n)) => {
            assert!(codings.is_empty(), "length with a transfer coding");
            assert_eq!(lengths.len(), 1, "more than one length");
            let v = lengths[0];
            assert!(!v.is_empty() && v.iter().all(u8::is_ascii_digit), "{v:?}");
            let digits = std::str::from_utf8(v).unwrap().trim_start_matches('0');
            let canonical = if digits.is_empty() { "0" } else { digits };
            assert_eq!(canonical, n.to_string(), "length misread");
        }
        Ok(BodyFraming::Chunked) => {
            assert!(lengths.is_empty(), "chunked with a length");
            assert_eq!(req.minor_version, 1, "chunked in HTTP/1.0");
            let all: Vec<u8> = codings.join(&b","[..]);
            assert!(trim(&all).eq_ignore_ascii_case(b"chunked"), "{all:?}");
        }
        Err(e) => assert!(matches!(e.status, 400 | 501), "{e:?}"),
    }
    framing.ok()
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Target: byte 0 picks the body limit, byte 1 seeds the cut points, the rest is a chunked body
/// (and whatever follows it). Checks the decoder against itself over prefixes, and against the
/// encoder.
pub fn chunked_body(data: &[u8]) {
    let &[cfg, seed, ref coded @ ..] = data else {
        return;
    };
    let max = [0usize, 1, 16, 300, 4096, 1 << 20][cfg as usize % 6];
    let whole = chunked::decode(coded, max);
    let mut rng = XorShift(u64::from(seed) << 8 | u64::from(cfg) | 0x9E37);
    // Arriving in random reads, each resumed from the last read's progress (as the worker does),
    // the body decodes to exactly what one decode of the same bytes gives, at the first read
    // that completes or refuses it.
    let mut progress = chunked::Progress::default();
    let mut seen = 0;
    let resumed = loop {
        seen = (seen + (rng.next() % 40) as usize + 1).min(coded.len());
        let got = chunked::decode_resume(&coded[..seen], max, &mut progress);
        assert_eq!(
            got,
            chunked::decode(&coded[..seen], max),
            "resumed at {seen}"
        );
        if got != Ok(Decoded::Partial) || seen == coded.len() {
            break got;
        }
    };
    if resumed == Ok(Decoded::Partial) {
        assert_eq!(whole, Ok(Decoded::Partial));
    }
    match &whole {
        Ok(Decoded::Complete { body, used }) => {
            assert!(*used <= coded.len() && body.len() <= max);
            assert!(*used <= chunked::wire_limit(max), "over the wire limit");
            // What follows the body does not change it; a shorter prefix is incomplete.
            assert_eq!(chunked::decode(&coded[..*used], max), whole);
            let cut = (rng.next() as usize) % *used;
            assert_eq!(chunked::decode(&coded[..cut], max), Ok(Decoded::Partial));
            roundtrip(body, max, &mut rng);
        }
        Ok(Decoded::Partial) => {
            assert!(coded.len() < chunked::wire_limit(max));
            // A prefix of an incomplete body is incomplete too.
            let cut = (rng.next() as usize) % (coded.len() + 1);
            assert_eq!(chunked::decode(&coded[..cut], max), Ok(Decoded::Partial));
        }
        Err(ChunkedError::TooLarge | ChunkedError::Malformed(_)) => {
            // A refusal is final: more bytes never turn it into a body. (A prefix may still be
            // partial; the same bytes plus anything must stay refused.)
            let mut longer = coded.to_vec();
            longer.extend_from_slice(b"0\r\n\r\n");
            assert!(chunked::decode(&longer, max).is_err(), "refusal undone");
        }
    }
    // And the bytes as a body to encode: always decodes back, whole and in pieces.
    if coded.len() <= max {
        roundtrip(coded, max, &mut rng);
    }
}

/// `body` encoded in random pieces decodes to `body`, using exactly the encoded bytes.
fn roundtrip(body: &[u8], max: usize, rng: &mut XorShift) {
    let mut pieces = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = ((rng.next() % 64) as usize + 1).min(rest.len());
        let (a, b) = rest.split_at(n);
        pieces.push(a);
        rest = b;
    }
    let mut coded = chunked::encode(pieces.iter().copied());
    let len = coded.len();
    let expect = Ok(Decoded::Complete {
        body: body.to_vec(),
        used: len,
    });
    // Tiny pieces of a large body may exceed the framing allowance; one piece never does.
    if len <= chunked::wire_limit(max) {
        coded.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(chunked::decode(&coded, max), expect, "pieces");
    }
    let one = chunked::encode([body]);
    let used = one.len();
    assert_eq!(
        chunked::decode(&one, max),
        Ok(Decoded::Complete {
            body: body.to_vec(),
            used
        }),
        "one piece"
    );
}
