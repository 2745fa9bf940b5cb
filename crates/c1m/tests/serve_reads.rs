//! How a worker reads a plaintext socket: it stops at a read that leaves room in its buffer
//! (the socket is drained; later bytes raise a new epoll edge) instead of paying one more read
//! for WouldBlock, unless epoll said the peer closed. These tests hold the two ways that can
//! go wrong: input arriving in pieces after a short read, and a FIN that came with the data
//! (a client that half-closes after its request, `nc -N`'s way, still gets its answer, also
//! one the master gives: a publish's id, /healthz).

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::Duration;

#[test]
fn a_publish_that_arrives_in_pieces_is_answered_and_delivered() {
    let server = Server::start(&["--workers", "1"]);
    let mut subscriber = Sse::connect(server.http, "/sub/pieces", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    let mut publisher = TcpStream::connect(server.http).unwrap();
    publisher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    publisher.set_nodelay(true).unwrap();
    // Each piece is read short; the next one must still be read when it comes.
    for piece in [
        &b"POST /pub/pie"[..],
        b"ces HTTP/1.1\r\nContent-Le",
        b"ngth: 11\r\n\r\nin ",
        b"pieces!!",
    ] {
        publisher.write_all(piece).unwrap();
        thread::sleep(Duration::from_millis(40));
    }
    let mut answer = [0u8; 512];
    let n = publisher.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(subscriber.next().data, "in pieces!!");
}

/// Sends `request` and a FIN at once; returns the whole answer up to the server's close
/// (panics when no close comes within 5 s).
fn half_closed_exchange(server: &Server, request: &[u8], what: &str) -> String {
    let mut s = TcpStream::connect(server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    let end = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).to_string();
    assert!(
        end.is_ok(),
        "{what}: no close within 5 s after the FIN ({end:?}); got {answer:?}"
    );
    answer
}

#[test]
fn a_request_sent_with_its_fin_is_answered_and_the_connection_closed_at_once() {
    // The keep-alive idle timeout is far longer than the 5 s bound, so only noticing the FIN
    // closes these connections in time. Many tries: the FIN must often reach the socket
    // before the worker's epoll_wait returns, the case a short read must not end.
    let server = Server::start(&["--workers", "1", "--keepalive-timeout", "60s"]);
    let mut subscriber = Sse::connect(server.http, "/sub/fin", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    for i in 0..30 {
        let what = format!("/healthz, try {i}");
        let answer =
            half_closed_exchange(&server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", &what);
        assert!(answer.starts_with("HTTP/1.1 200"), "{what}: {answer:?}");
        assert!(answer.contains("Connection: close"), "{what}: {answer:?}");

        let what = format!("publish, try {i}");
        let body = format!("half-closed {i}");
        let request = format!(
            "POST /pub/fin HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let answer = half_closed_exchange(&server, request.as_bytes(), &what);
        assert!(answer.starts_with("HTTP/1.1 200"), "{what}: {answer:?}");
        assert!(answer.contains("\"id\""), "{what}: {answer:?}");
        assert_eq!(subscriber.next().data, body, "{what}");
    }
}
