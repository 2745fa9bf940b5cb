//! Cross-checks against an independent RFC 6455 implementation (tungstenite), over an
//! in-memory pipe: its client's frames through our server-role decoder, our server frames
//! through its client, and its client handshake against our validator.

use crate::harness;

use std::collections::VecDeque;
use std::io::{self, Read, Write};

use c1m_proto::ws::handshake::{self, OriginPolicy};
use c1m_proto::ws::{encode, Limits, Masking};
use tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::{CloseFrame, Role, WebSocket};
use tungstenite::Message;

/// Reads what the test put in `incoming` (WouldBlock when empty); keeps what is written.
#[derive(Default)]
struct Pipe {
    incoming: VecDeque<u8>,
    outgoing: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.incoming.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.incoming.read(buf)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outgoing.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn server() -> Limits {
    Limits {
        max_message: 1 << 20,
        masking: Masking::Required,
    }
}

#[test]
fn tungstenite_client_frames_decode_in_server_role() {
    let mut ws = WebSocket::from_raw_socket(Pipe::default(), Role::Client, None);
    ws.send(Message::text("héllo")).unwrap();
    ws.send(Message::binary(vec![0xA5; 70_000])).unwrap();
    ws.send(Message::Ping(b"p".to_vec().into())).unwrap();
    ws.write(Message::Frame(Frame::message(
        &b"frag\xCE"[..],
        OpCode::Data(Data::Text),
        false,
    )))
    .unwrap();
    ws.write(Message::Frame(Frame::message(
        &b"\xBAment"[..],
        OpCode::Data(Data::Continue),
        true,
    )))
    .unwrap();
    ws.flush().unwrap();
    let _ = ws.close(Some(CloseFrame {
        code: CloseCode::Away,
        reason: "bye".into(),
    }));
    let _ = ws.flush();
    let bytes = ws.get_ref().outgoing.clone();
    let mut close = 1001u16.to_be_bytes().to_vec();
    close.extend_from_slice(b"bye");
    let want = vec![
        (1, "héllo".as_bytes().to_vec()),
        (2, vec![0xA5; 70_000]),
        (9, b"p".to_vec()),
        (1, "fragκment".as_bytes().to_vec()),
        (8, close),
    ];
    for size in [1, 7, 4096, bytes.len()] {
        let out = harness::feed(bytes.chunks(size), &server());
        assert_eq!(out.error, None, "reads of {size}");
        assert_eq!(out.seen, want, "reads of {size}");
    }
}

#[test]
fn our_server_frames_read_by_tungstenite_client() {
    let mut pipe = Pipe::default();
    pipe.incoming
        .extend(encode::message_frame("héllo".as_bytes()));
    pipe.incoming.extend(encode::message_frame(&[0xFF; 70_000]));
    pipe.incoming
        .extend(encode::envelope_frame("news", 42, b"x\"y"));
    pipe.incoming
        .extend(encode::ping(b"are you there").as_bytes());
    pipe.incoming
        .extend(encode::close(Some(1001), "server shutting down").as_bytes());
    let mut ws = WebSocket::from_raw_socket(pipe, Role::Client, None);
    assert_eq!(ws.read().unwrap(), Message::text("héllo"));
    assert_eq!(ws.read().unwrap(), Message::binary(vec![0xFF; 70_000]));
    assert_eq!(
        ws.read().unwrap(),
        Message::text(r#"{"channel":"news","id":42,"data":"x\"y"}"#)
    );
    assert_eq!(
        ws.read().unwrap(),
        Message::Ping(b"are you there".to_vec().into())
    );
    let Message::Close(Some(cf)) = ws.read().unwrap() else {
        panic!("expected close")
    };
    assert_eq!(
        (u16::from(cf.code), cf.reason.as_str()),
        (1001, "server shutting down")
    );
    let _ = ws.flush();
    // Its automatic answers (pong, close echo) decode in our server role.
    let out = harness::feed([&ws.get_ref().outgoing[..]], &server());
    assert_eq!(out.error, None);
    // (tungstenite echoes the close reason too.)
    let mut echo = 1001u16.to_be_bytes().to_vec();
    echo.extend_from_slice(b"server shutting down");
    assert_eq!(out.seen, [(10, b"are you there".to_vec()), (8, echo)]);
}

#[test]
fn tungstenite_client_handshake_against_our_validator() {
    let err =
        tungstenite::client::client("ws://localhost:8080/sub/news?last_id=5", Pipe::default())
            .err()
            .unwrap();
    let tungstenite::HandshakeError::Interrupted(mut mid) = err else {
        panic!("{err:?}")
    };
    let request = mid.get_ref().get_ref().outgoing.clone();
    let mut hs = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut hs);
    assert!(req.parse(&request).unwrap().is_complete());
    let pairs: Vec<(&str, &[u8])> = req.headers.iter().map(|h| (h.name, h.value)).collect();
    let key = pairs
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-key"))
        .unwrap()
        .1;
    assert_eq!(
        handshake::accept_key(key),
        tungstenite::handshake::derive_accept_key(key)
    );
    let accept = handshake::validate(
        req.method.unwrap(),
        req.path.unwrap(),
        req.version.unwrap(),
        pairs.iter().copied(),
        &OriginPolicy::Any,
    )
    .unwrap();
    mid.get_mut().get_mut().incoming.extend(&accept.response);
    let (_ws, response) = mid.handshake().unwrap();
    assert_eq!(response.status(), 101);
}

#[test]
fn accept_key_matches_tungstenite() {
    let mut x = 0x1234_5678_9ABC_DEF0u64;
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&x.to_le_bytes());
        nonce[8..].copy_from_slice(&x.rotate_left(29).to_le_bytes());
        let (request, expect) = handshake::client_request("h", "/", nonce);
        let line = request
            .split(|&b| b == b'\n')
            .find(|l| l.starts_with(b"Sec-WebSocket-Key: "));
        let k = &line.unwrap()[19..43];
        assert_eq!(expect, tungstenite::handshake::derive_accept_key(k));
        let key = tungstenite::handshake::client::generate_key();
        assert_eq!(
            handshake::accept_key(key.as_bytes()),
            tungstenite::handshake::derive_accept_key(key.as_bytes())
        );
    }
}
