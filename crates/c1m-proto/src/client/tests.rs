//! Parser and request tests, including the contract against c1m-proto's encoders.

use super::*;

#[derive(Debug, PartialEq)]
enum Ev {
    Online,
    Msg(Option<u64>, String),
    Gap,
    Done(Option<u64>),
    Ping,
    Closed,
}

fn run(wire: Wire, phase: &mut Phase, buf: &[u8]) -> (Result<usize, ProtoError>, Vec<Ev>) {
    let accept = ws_accept("dGhlIHNhbXBsZSBub25jZQ==");
    let ctx = Ctx {
        wire,
        ws_accept: &accept,
    };
    let mut evs = Vec::new();
    let r = parse(&ctx, phase, buf, &mut |e| {
        evs.push(match e {
            Event::Online => Ev::Online,
            Event::Message { id, data } => Ev::Msg(id, String::from_utf8_lossy(data).into_owned()),
            Event::Gap => Ev::Gap,
            Event::PollDone { last_id } => Ev::Done(last_id),
            Event::Ping(_) => Ev::Ping,
            Event::Closed => Ev::Closed,
        })
    });
    (r, evs)
}

#[test]
fn rfc6455_accept_example() {
    assert_eq!(
        ws_accept("dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}

#[test]
fn sse_head_events_and_partial_tail() {
    let mut ph = Phase::Head;
    let buf = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nid: 7\ndata: hello\n\n:\n\nevent: gap\ndata: {}\n\nid: 8\ndata: par";
    let (r, evs) = run(Wire::Sse, &mut ph, buf);
    assert_eq!(
        evs,
        vec![Ev::Online, Ev::Msg(Some(7), "hello".into()), Ev::Gap]
    );
    assert_eq!(&buf[r.unwrap()..], b"id: 8\ndata: par");
    let (r, evs) = run(Wire::Sse, &mut ph, b"id: 8\r\ndata: x\r\n\r\n");
    assert_eq!(r.unwrap(), 18);
    assert_eq!(evs, vec![Ev::Msg(Some(8), "x".into())]);
}

#[test]
fn sse_refusal_is_an_error() {
    let mut ph = Phase::Head;
    let (r, _) = run(Wire::Sse, &mut ph, b"HTTP/1.1 503 Busy\r\n\r\n");
    assert_eq!(r.unwrap_err().0, "HTTP 503");
    let mut ph = Phase::Head;
    let (r, _) = run(
        Wire::Sse,
        &mut ph,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    );
    assert_eq!(r.unwrap_err().0, "sse chunked body unsupported");
}

#[test]
fn ws_handshake_and_frames() {
    let mut ph = Phase::Head;
    let mut buf = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n".to_vec();
    buf.extend_from_slice(&[0x81, 5]);
    buf.extend_from_slice(b"hello");
    let json = br#"{"channel":"a","id":9,"data":"x y"}"#;
    buf.extend_from_slice(&[0x81, json.len() as u8]);
    buf.extend_from_slice(json);
    buf.extend_from_slice(&[0x89, 0, 0x88, 0, 0x81]);
    let (r, evs) = run(Wire::Ws, &mut ph, &buf);
    assert_eq!(
        evs,
        vec![
            Ev::Online,
            Ev::Msg(None, "hello".into()),
            Ev::Msg(Some(9), "x y".into()),
            Ev::Ping,
            Ev::Closed
        ]
    );
    assert_eq!(r.unwrap(), buf.len() - 1);
    let (r, _) = run(Wire::Ws, &mut ph, &[0x81, 0x85, 0, 0, 0, 0, 1]);
    assert!(r.is_err(), "masked server frame must be refused");
}

#[test]
fn ws_bad_accept_refused() {
    let mut ph = Phase::Head;
    let (r, _) = run(
        Wire::Ws,
        &mut ph,
        b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: nope\r\n\r\n",
    );
    assert!(r.is_err());
}

#[test]
fn client_frame_is_masked() {
    let f = ws_client_frame(10, b"ab", [1, 2, 3, 4]);
    assert_eq!(f, vec![0x8a, 0x82, 1, 2, 3, 4, b'a' ^ 1, b'b' ^ 2]);
}

#[test]
fn poll_answers() {
    let body = br#"{"messages":[{"channel":"n","id":5,"data":"p"}],"gaps":[{"channel":"n","after":1,"through":2}],"last_id":5}"#;
    let mut buf = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    buf.extend_from_slice(body);
    buf.extend_from_slice(
        b"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{",
    );
    let mut ph = Phase::Head;
    let (r, evs) = run(Wire::Poll, &mut ph, &buf);
    assert_eq!(
        evs,
        vec![
            Ev::Gap,
            Ev::Msg(Some(5), "p".into()),
            Ev::Done(Some(5)),
            Ev::Done(None)
        ]
    );
    assert_eq!(buf.len() - r.unwrap(), 40);
}

#[test]
fn tcp_lines() {
    let mut ph = Phase::Head;
    let buf = b"OK 100\nMSG news 101 3\na\nb\nGAP news 1 2\nBYE\nMSG news 102 5\nab";
    let (r, evs) = run(Wire::Tcp, &mut ph, buf);
    assert_eq!(
        evs,
        vec![
            Ev::Online,
            Ev::Msg(Some(101), "a\nb".into()),
            Ev::Gap,
            Ev::Closed
        ]
    );
    assert_eq!(&buf[r.unwrap()..], b"MSG news 102 5\nab");
    let (r, _) = run(Wire::Tcp, &mut ph, b"ERR limit\n");
    assert_eq!(r.unwrap_err().0, "tcp ERR limit");
}

/// Contract: bench parses exactly what c1m serve's encoders (c1m-proto) produce.
#[test]
fn parses_c1m_proto_encodings() {
    let mut buf = crate::sse::RESPONSE_HEAD.to_vec();
    buf.extend(crate::sse::encode_message(None, 41, b"c1mb 0 1 5"));
    buf.extend(crate::sse::encode_message(Some("news"), 42, b"two"));
    buf.extend(crate::sse::HEARTBEAT);
    buf.extend(crate::sse::encode_gap("news", 1, 9));
    buf.extend(crate::sse::SHUTDOWN);
    let mut ph = Phase::Head;
    let (r, evs) = run(Wire::Sse, &mut ph, &buf);
    assert_eq!(r.unwrap(), buf.len());
    assert_eq!(
        evs,
        vec![
            Ev::Online,
            Ev::Msg(Some(41), "c1mb 0 1 5".into()),
            Ev::Msg(Some(42), "two".into()),
            Ev::Gap,
            Ev::Closed
        ]
    );

    let mut buf = b"OK 7\n".to_vec();
    buf.extend(crate::line::encode_msg("news", 8, b"a\nb"));
    buf.extend(crate::line::encode_gap("news", 1, 2));
    let mut ph = Phase::Head;
    let (r, evs) = run(Wire::Tcp, &mut ph, &buf);
    assert_eq!(r.unwrap(), buf.len());
    assert_eq!(
        evs,
        vec![Ev::Online, Ev::Msg(Some(8), "a\nb".into()), Ev::Gap]
    );

    let body = crate::longpoll::encode_body(
        &[crate::longpoll::PollMessage {
            channel: "news",
            id: 9,
            payload: b"p",
        }],
        &[crate::longpoll::PollGap {
            channel: "news",
            after: 1,
            through: 3,
        }],
        9,
    );
    let mut buf = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    buf.extend(body);
    let mut ph = Phase::Head;
    let (r, evs) = run(Wire::Poll, &mut ph, &buf);
    assert_eq!(r.unwrap(), buf.len());
    assert_eq!(
        evs,
        vec![Ev::Gap, Ev::Msg(Some(9), "p".into()), Ev::Done(Some(9))]
    );
}

fn req(wire: Wire, path: &str, last_id: Option<u64>, extra: &str) -> String {
    String::from_utf8(subscribe_request(&SubscribeRequest {
        wire,
        host: "h",
        path,
        channel: "a",
        last_id,
        ws_key: "k",
        extra_headers: extra,
    }))
    .unwrap()
}

#[test]
fn requests() {
    assert!(req(Wire::Sse, "/sub/a", Some(3), "").contains("Last-Event-ID: 3\r\n"));
    assert_eq!(req(Wire::Tcp, "/sub/a", None, ""), "SUB a\n");
    assert!(req(Wire::Connect, "/", None, "").is_empty());
    // Extra headers go into the head, before the blank line that ends it.
    let r = req(
        Wire::Ws,
        "/sub/a?auth=x",
        Some(7),
        "Authorization: Bearer t\r\n",
    );
    assert!(
        r.starts_with("GET /sub/a?auth=x&last_id=7 HTTP/1.1\r\n"),
        "{r}"
    );
    assert!(r.ends_with("Authorization: Bearer t\r\n\r\n"), "{r}");
    let r = req(Wire::Poll, "/sub/a", Some(7), "X-A: 1\r\n");
    assert!(r.starts_with("GET /sub/a?last_id=7 HTTP/1.1\r\n"), "{r}");
    assert!(r.ends_with("X-A: 1\r\n\r\n"), "{r}");
}

/// nchan's ids are `time:tag`, not numbers: the message must still be delivered (with no
/// numeric id), not refused as a protocol error (it was: "sse bad id" ended every nchan stream).
#[test]
fn sse_opaque_ids_are_not_errors() {
    let mut ph = Phase::Body;
    let buf = b": hi\n\nid: 1795438449:0\ndata: c1mb 0 1 5\n\n";
    let (r, evs) = run(Wire::Sse, &mut ph, buf);
    assert_eq!(r.unwrap(), buf.len());
    assert_eq!(evs, vec![Ev::Msg(None, "c1mb 0 1 5".into())]);
}

/// Bad input from a server is an error, never a panic: random bytes and random cuts of valid
/// streams through every parser, in both phases.
#[test]
fn random_input_never_panics() {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let valid: [&[u8]; 4] = [
        b"HTTP/1.1 200 OK\r\n\r\nid: 1\ndata: x\n\nevent: gap\ndata: {}\n\n",
        b"HTTP/1.1 101 OK\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi\x89\x00\x88\x00",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 204 No Content\r\n\r\n",
        b"OK 1\nMSG a 2 3\nabc\nGAP a 1 2\nBYE\n",
    ];
    for round in 0..4000 {
        let len = (rnd() % 200) as usize;
        let mut buf: Vec<u8> = if round % 2 == 0 {
            (0..len).map(|_| rnd() as u8).collect()
        } else {
            let v = valid[round % 4];
            let mut b = v[..(rnd() as usize % (v.len() + 1))].to_vec();
            if !b.is_empty() {
                let i = rnd() as usize % b.len();
                b[i] = rnd() as u8;
            }
            b
        };
        if round % 7 == 0 {
            buf.extend_from_slice(b"\n\n\r\n");
        }
        for wire in [Wire::Sse, Wire::Ws, Wire::Poll, Wire::Tcp, Wire::Connect] {
            for phase in [Phase::Head, Phase::Body] {
                let mut ph = phase;
                if let (Ok(used), _) = run(wire, &mut ph, &buf) {
                    assert!(used <= buf.len());
                }
            }
        }
    }
}
