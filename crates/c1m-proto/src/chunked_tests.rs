use super::*;

fn complete(buf: &[u8], max: usize) -> (Vec<u8>, usize) {
    match decode(buf, max) {
        Ok(Decoded::Complete { body, used }) => (body, used),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

fn malformed(buf: &[u8]) -> bool {
    matches!(decode(buf, 1 << 20), Err(ChunkedError::Malformed(_)))
}

#[test]
fn decodes_and_reports_used() {
    let (body, used) = complete(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET /next", 100);
    assert_eq!(body, b"hello world");
    assert_eq!(used, 26);
    let (body, _) = complete(b"0\r\n\r\n", 0);
    assert!(body.is_empty());
    // Extensions and trailers are read and ignored; upper-case hex and leading zeros are hex.
    let raw = b"00A;name=val;q=\"a \\\" b\" ; flag\r\n0123456789\r\n0;last\r\nX-Sum: 1\r\n\r\n";
    let (body, used) = complete(raw, 100);
    assert_eq!(body, b"0123456789");
    assert_eq!(used, raw.len());
}

#[test]
fn partial_until_whole() {
    let whole = encode([&b"abc"[..], b"defgh"]);
    for cut in 0..whole.len() {
        assert_eq!(
            decode(&whole[..cut], 100),
            Ok(Decoded::Partial),
            "cut {cut}"
        );
    }
    assert_eq!(complete(&whole, 100).0, b"abcdefgh");
}

#[test]
fn strict_sizes() {
    for raw in [
        &b"+5\r\nhello\r\n0\r\n\r\n"[..],
        b"-5\r\nhello\r\n0\r\n\r\n",
        b" 5\r\nhello\r\n0\r\n\r\n",
        b"0x5\r\nhello\r\n0\r\n\r\n",
        b"\r\nhello\r\n0\r\n\r\n",
        b"5 x\r\nhello\r\n0\r\n\r\n",
        b"g\r\n",
        b"10000000000000000\r\n", // 2^64: overflows u64
        b"fffffffffffffffffffff\r\n",
    ] {
        assert!(malformed(raw), "{:?}", String::from_utf8_lossy(raw));
    }
    // Fits u64 but not the limit: 413 as soon as the size line is read, before any data.
    assert_eq!(
        decode(b"ffffffffffffffff\r\n", 1000),
        Err(ChunkedError::TooLarge)
    );
}

#[test]
fn strict_line_ends_and_data() {
    for raw in [
        &b"5\nhello\r\n0\r\n\r\n"[..],
        b"5\rhello\r\n0\r\n\r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"5\r\nhelloXY0\r\n\r\n",
        b"5\r\nhello world\r\n0\r\n\r\n", // data longer than its size
        b"5\r\nhello\r\n0\r\n\n",
        b"5\r\nhello\r\n0\r\nX: y\n\r\n",
        b"5;\r\nhello\r\n0\r\n\r\n",
        b"5;a=\r\nhello\r\n0\r\n\r\n",
        b"5;a=\"open\r\nhello\r\n0\r\n\r\n",
        b"5;a\x01\r\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\r\n0\r\nno colon\r\n\r\n",
        b"5\r\nhello\r\n0\r\n: empty name\r\n\r\n",
        b"5\r\nhello\r\n0\r\nX: a\x00b\r\n\r\n",
    ] {
        assert!(malformed(raw), "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn bounds() {
    // The body limit is exact.
    assert_eq!(complete(&encode([&[7u8; 10][..]]), 10).0, vec![7u8; 10]);
    assert_eq!(
        decode(&encode([&[7u8; 6][..], &[7u8; 5]]), 10),
        Err(ChunkedError::TooLarge)
    );
    // A size line may not grow without end...
    let mut long = b"5".to_vec();
    long.resize(MAX_SIZE_LINE + 10, b' ');
    assert!(malformed(&long));
    // ...nor trailers...
    let mut trailers = b"0\r\n".to_vec();
    while trailers.len() < MAX_TRAILERS + 100 {
        trailers.extend_from_slice(b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
    }
    assert!(malformed(&trailers));
    // ...nor framing overhead: one-byte chunks of a body near the limit cost 6x on the wire.
    let body = vec![b'x'; 64 * 1024];
    let tiny = encode(body.chunks(1));
    assert_eq!(decode(&tiny, body.len()), Err(ChunkedError::TooLarge));
    // A partial buffer already past the wire limit can never complete.
    let open = b"1\r\nx\r\n".repeat(5000);
    assert_eq!(decode(&open, 10 * 1024), Err(ChunkedError::TooLarge));
    // Reasonable chunking of a full-size body fits.
    assert_eq!(complete(&encode(body.chunks(1024)), body.len()).0, body);
}

#[test]
fn resumed_scans_agree_and_cost_linear_time() {
    // A body trickled one 1-byte chunk per read, each read decoded with the last progress: the
    // same answer as one decode, and linear work. Rescanning from the start on every read (the
    // first version) took ~6 s here for 64 KiB; with 256 KiB it would take minutes.
    let max = 256 * 1024;
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    let mut progress = Progress::default();
    let mut reads = 0;
    let outcome = loop {
        buf.extend_from_slice(b"1;e=1\r\nx\r\n");
        reads += 1;
        match decode_resume(&buf, max, &mut progress) {
            Ok(Decoded::Partial) => {}
            other => break other,
        }
    };
    // Ten coded bytes per decoded byte: over the wire limit long before max.
    assert_eq!(outcome, Err(ChunkedError::TooLarge));
    assert!(reads > 25_000, "{reads}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{reads} resumed scans took {:?}",
        started.elapsed()
    );
    // Byte by byte, including trailers, resumed decoding matches one decode.
    let whole = b"3;a=\"b\"\r\nabc\r\n2\r\nde\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\nnext";
    let mut progress = Progress::default();
    for cut in 0..whole.len() {
        let got = decode_resume(&whole[..cut], 100, &mut progress);
        assert_eq!(got, decode(&whole[..cut], 100), "cut {cut}");
    }
    assert_eq!(
        decode_resume(whole, 100, &mut progress),
        Ok(Decoded::Complete {
            body: b"abcde".to_vec(),
            used: whole.len() - 4
        })
    );
}
