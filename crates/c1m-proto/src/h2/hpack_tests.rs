//! HPACK decoder against every example of RFC 7541 Appendix C.2-C.6 (the hex dumps and the
//! decoded header lists and table sizes as the RFC prints them), then the limits.

use super::hpack::{encode_field, encode_response, write_int, Decoder, HpackError};
use super::huffman;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn decode(dec: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
    let mut got = Vec::new();
    dec.decode(block, usize::MAX, |n, v| {
        got.push((
            String::from_utf8(n.to_vec()).unwrap(),
            String::from_utf8(v.to_vec()).unwrap(),
        ))
    })?;
    Ok(got)
}

fn list(s: &[(&str, &str)]) -> Vec<(String, String)> {
    s.iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

/// One block of an RFC example: hex dump, decoded header list, table size after it.
type Step<'a> = (&'a str, &'a [(&'a str, &'a str)], usize);

/// Decodes the blocks in order on one connection; checks each header list and table size.
fn sequence(dec: &mut Decoder, steps: &[Step<'_>]) {
    for (i, (dump, want, size)) in steps.iter().enumerate() {
        let got = decode(dec, &hex(dump)).unwrap_or_else(|e| panic!("block {}: {e:?}", i + 1));
        assert_eq!(got, list(want), "block {}", i + 1);
        assert_eq!(dec.table_size(), *size, "table size after block {}", i + 1);
    }
}

#[test]
fn rfc7541_c2_field_representations() {
    let mut d = Decoder::default();
    let got = decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    );
    assert_eq!(got.unwrap(), list(&[("custom-key", "custom-header")]));
    assert_eq!(d.table_size(), 55);
    let mut d = Decoder::default();
    let got = decode(&mut d, &hex("040c 2f73 616d 706c 652f 7061 7468"));
    assert_eq!(got.unwrap(), list(&[(":path", "/sample/path")]));
    assert_eq!(d.table_size(), 0);
    let mut d = Decoder::default();
    let got = decode(&mut d, &hex("1008 7061 7373 776f 7264 0673 6563 7265 74"));
    assert_eq!(got.unwrap(), list(&[("password", "secret")]));
    assert_eq!(d.table_size(), 0);
    let mut d = Decoder::default();
    assert_eq!(
        decode(&mut d, &hex("82")).unwrap(),
        list(&[(":method", "GET")])
    );
    assert_eq!(d.table_size(), 0);
}

const REQ1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQ2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQ3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];

#[test]
fn rfc7541_c3_requests_without_huffman() {
    sequence(
        &mut Decoder::default(),
        &[
            (
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                REQ1,
                57,
            ),
            ("8286 84be 5808 6e6f 2d63 6163 6865", REQ2, 110),
            (
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
                REQ3,
                164,
            ),
        ],
    );
}

#[test]
fn rfc7541_c4_requests_with_huffman() {
    sequence(
        &mut Decoder::default(),
        &[
            ("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff", REQ1, 57),
            ("8286 84be 5886 a8eb 1064 9cbf", REQ2, 110),
            (
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
                REQ3,
                164,
            ),
        ],
    );
}

const RESP1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESP2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESP3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
    ("location", "https://www.example.com"),
    ("content-encoding", "gzip"),
    (
        "set-cookie",
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
    ),
];

#[test]
fn rfc7541_c5_responses_without_huffman_evict_at_256() {
    sequence(
        &mut Decoder::with_table_size(256),
        &[
            (
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
                 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
                 6c65 2e63 6f6d",
                RESP1,
                222,
            ),
            ("4803 3330 37c1 c0bf", RESP2, 222),
            (
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
                 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
                 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
                 3d31",
                RESP3,
                215,
            ),
        ],
    );
}

#[test]
fn rfc7541_c6_responses_with_huffman_evict_at_256() {
    sequence(
        &mut Decoder::with_table_size(256),
        &[
            (
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
                RESP1,
                222,
            ),
            ("4883 640e ffc1 c0bf", RESP2, 222),
            (
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
                RESP3,
                215,
            ),
        ],
    );
}

#[test]
fn rfc7541_c1_integers_encode_as_printed() {
    let mut out = Vec::new();
    write_int(&mut out, 0, 5, 10);
    write_int(&mut out, 0, 5, 1337);
    write_int(&mut out, 0, 8, 42);
    assert_eq!(out, [0x0a, 0x1f, 0x9a, 0x0a, 0x2a]);
}

#[test]
fn encoder_output_decodes_back_without_touching_the_table() {
    let mut block = Vec::new();
    let long = "x".repeat(300);
    encode_response(
        &mut block,
        200,
        [
            ("content-type", &b"text/event-stream"[..]),
            ("x-long", long.as_bytes()),
            ("cache-control", b"no-cache"),
        ],
    );
    let mut d = Decoder::with_table_size(0);
    let got = decode(&mut d, &block).unwrap();
    assert_eq!(
        got,
        list(&[
            (":status", "200"),
            ("content-type", "text/event-stream"),
            ("x-long", &long),
            ("cache-control", "no-cache")
        ])
    );
    assert_eq!(d.table_size(), 0);
    // Statuses that the static table has are one byte.
    let mut one = Vec::new();
    encode_field(&mut one, b":status", b"404");
    assert_eq!(one, [0x8d]);
}

#[test]
fn header_list_cap_refuses_an_hpack_bomb_but_keeps_the_table_in_step() {
    // One 100-byte entry inserted, then referenced 1000 times: ~132 KB decoded from ~1 KB.
    let mut bomb = Vec::new();
    bomb.extend_from_slice(&[0x40, 0x01, b'a', 0x64]);
    bomb.extend_from_slice(&[b'b'; 100]);
    bomb.extend(std::iter::repeat_n(0xbe, 1000));
    let mut d = Decoder::default();
    let mut handed = 0;
    let r = d.decode(&bomb, 8192, |n, v| handed += n.len() + v.len() + 32);
    assert_eq!(r, Err(HpackError::ListTooLarge));
    assert!(handed <= 8192, "handed out {handed} bytes past the cap");
    // The insert still happened, so the next block may reference it.
    let got = decode(&mut d, &[0xbe]).unwrap();
    assert_eq!(got, list(&[("a", &"b".repeat(100))]));
}

#[test]
fn malformed_blocks_are_compression_errors() {
    let cases: &[(&[u8], HpackError)] = &[
        (&[0x80], HpackError::BadIndex),
        (&[0xbe], HpackError::BadIndex),
        (&[0x40, 0x05, b'a'], HpackError::Truncated),
        (
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            HpackError::IntegerOverflow,
        ),
        (&[0xff], HpackError::Truncated),
        // Zero-valued continuation bytes push the shift past 64 bits without raising the value.
        (
            &[
                0x3f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
            ],
            HpackError::IntegerOverflow,
        ),
        (&[0x82, 0x20], HpackError::TableSizeUpdate),
        (&[0x3f, 0xe2, 0x1f], HpackError::TableSizeUpdate),
        (&[0x00, 0x81, 0x00, 0x00], HpackError::Huffman),
    ];
    for (block, want) in cases {
        assert_eq!(
            Decoder::default().decode(block, usize::MAX, |_, _| {}),
            Err(*want),
            "{block:02x?}"
        );
    }
}

#[test]
fn a_smaller_table_size_applies_at_once_with_or_without_the_peers_update() {
    let mut d = Decoder::default();
    decode(
        &mut d,
        &hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
    )
    .unwrap();
    assert_eq!(d.table_size(), 57);
    d.set_limit(0);
    assert_eq!(d.table_size(), 0, "shrinking evicts at once");
    // Go's encoder sends no size update: the block decodes, and what it indexes is dropped.
    assert_eq!(
        decode(&mut d, &hex("8286 4006 6375 7374 6f6d 0161")).unwrap(),
        list(&[(":method", "GET"), (":scheme", "http"), ("custom", "a")]),
        "update missing"
    );
    assert_eq!(d.table_size(), 0);
    let mut d = Decoder::default();
    d.set_limit(0);
    assert_eq!(
        decode(&mut d, &[0x20, 0x82]).unwrap(),
        list(&[(":method", "GET")])
    );
    // With a zero-size table, an indexed literal is decoded and dropped.
    decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    )
    .unwrap();
    assert_eq!(d.table_size(), 0);
    // A Huffman literal that the test encoder wrote decodes too.
    let mut b = vec![0x00, 0x03, b'a', b'b', b'c'];
    b.push(0x80 | huffman::encoded_len(b"hello") as u8);
    huffman::encode(b"hello", &mut b);
    assert_eq!(decode(&mut d, &b).unwrap(), list(&[("abc", "hello")]));
}
