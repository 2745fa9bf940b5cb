//! Bounded, deterministic stand-in for the `client_stream` fuzzer, run by plain `cargo test`:
//! valid server streams of every protocol (c1m's own encodings and nchan-style SSE), cut and
//! mutated, through the property check of fuzz/src/client.rs (no panic, consumed ≤ input,
//! events independent of read boundaries).

use crate::harness;

use harness::XorShift;

fn valid_streams() -> Vec<Vec<u8>> {
    let mut sse = c1m_proto::sse::RESPONSE_HEAD.to_vec();
    sse.extend(c1m_proto::sse::encode_message(None, 41, b"c1mb 0 1 5"));
    sse.extend(c1m_proto::sse::encode_gap("news", 1, 9));
    sse.extend(b": hi\n\nid: 1795438449:0\ndata: c1mb 0 2 6\n\n");
    let mut ws = b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n".to_vec();
    ws.extend(c1m_proto::ws::encode::envelope_frame("a", 9, b"c1mb 0 1 5"));
    ws.extend(c1m_proto::ws::encode::message_frame(b"c1mb 0 2 6"));
    ws.extend(c1m_proto::ws::encode::ping(b"p").as_bytes());
    let body = br#"{"messages":[{"channel":"n","id":5,"data":"p"}],"gaps":[],"last_id":5}"#;
    let mut poll =
        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    poll.extend_from_slice(body);
    poll.extend_from_slice(b"HTTP/1.1 204 No Content\r\n\r\n");
    let mut tcp = b"OK 7\n".to_vec();
    tcp.extend(c1m_proto::line::encode_msg("news", 8, b"a\nb"));
    tcp.extend(c1m_proto::line::encode_gap("news", 1, 2));
    vec![sse, ws, poll, tcp]
}

#[test]
fn client_parsers_hold_their_properties() {
    let streams = valid_streams();
    let mut rng = XorShift(0x00C1_1E57);
    for round in 0..20_000u32 {
        let mut input = (rng.next() as u16).to_le_bytes().to_vec();
        let base = &streams[round as usize % streams.len()];
        if round % 5 == 0 {
            input.extend((0..rng.next() % 300).map(|_| rng.next() as u8));
        } else {
            input.extend_from_slice(base);
            for _ in 0..(rng.next() % 3) {
                // Bytes 0..2 are the cut point; mutate the stream after them.
                let at = 2 + (rng.next() as usize) % (input.len() - 2);
                input[at] = rng.next() as u8;
            }
        }
        harness::client::client_stream(&input);
    }
    // Unmutated streams, every split point.
    for s in &streams {
        for cut in 0..=s.len() as u16 {
            let mut input = cut.to_le_bytes().to_vec();
            input.extend_from_slice(s);
            harness::client::client_stream(&input);
        }
    }
    // A line longer than the limit is refused whether or not its newline came in the same
    // read (it was accepted whole and refused when cut: errors by chance of read boundaries).
    let mut long = 4500u16.to_le_bytes().to_vec();
    long.extend_from_slice(format!("OK 1\nMSG {} 1 3\nabc\n", "c".repeat(5000)).as_bytes());
    harness::client::client_stream(&long);
}
