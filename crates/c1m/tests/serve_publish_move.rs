//! Publishes on the public listener are answered by the control worker, on default flags: a
//! subscriber worker passes a plain HTTP/1.1 publish connection (descriptor and the bytes read
//! so far) to the control worker, which has no subscriber to deliver to and so acknowledges at
//! once while the subscriber workers are busy with a fan-out. Pipelined requests stay in order,
//! later requests on the connection go to the control worker too, and what cannot be passed
//! is served where it arrived, counted.

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The control worker's entry of `/status` `workers`.
fn control_worker(status: &serde_json::Value) -> serde_json::Value {
    status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["role"] == "control")
        .cloned()
        .unwrap_or_else(|| panic!("no control worker on default flags: {status}"))
}

/// Publishes on fresh connections until one is passed to the control worker: every worker
/// has connected to it (they do at their first beats; a publish before that is served where
/// it arrived, counted `kept_unreachable`). Returns `/status` `publish_moves` once every
/// worker's figures include the warm-up (each reports every 250 ms).
pub fn wait_until_publishes_move(server: &Server) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        server.publish("warm-up", b"x");
        let moves = server.status()["publish_moves"].clone();
        if moves["received"].as_u64() > Some(0) {
            std::thread::sleep(Duration::from_millis(600));
            return server.status()["publish_moves"].clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no publish reached the control worker: {moves}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads `n` HTTP answers with Content-Length bodies from `s`; returns their bodies.
fn read_answers(s: &mut TcpStream, n: usize) -> Vec<String> {
    let mut buf = Vec::new();
    let mut bodies = Vec::new();
    while bodies.len() < n {
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            let mut chunk = [0u8; 4096];
            let got = s.read(&mut chunk).expect("answer");
            assert!(got > 0, "closed after {} answers", bodies.len());
            buf.extend_from_slice(&chunk[..got]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let len = common::content_length(&head);
        while buf.len() < head_end + len {
            let mut chunk = [0u8; 4096];
            let got = s.read(&mut chunk).expect("body");
            assert!(got > 0, "closed mid-body");
            buf.extend_from_slice(&chunk[..got]);
        }
        bodies.push(String::from_utf8_lossy(&buf[head_end..head_end + len]).to_string());
        buf.drain(..head_end + len);
    }
    bodies
}

#[test]
fn a_publish_connection_on_the_public_listener_moves_to_the_control_worker() {
    let server = Server::start(&["--workers", "2"]);
    let mut subs: Vec<Sse> = (0..6)
        .map(|_| Sse::connect(server.http, "/sub/moves", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == 6);
    let before = wait_until_publishes_move(&server);
    let received = before["received"].as_u64().unwrap() + 1;

    // Three publishes pipelined in one write on a keep-alive connection, then a fourth after
    // their answers: all four answered in order, by the control worker.
    let mut publisher = TcpStream::connect(server.http).unwrap();
    publisher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let post = |body: &str| {
        format!(
            "POST /pub/moves HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    let pipelined = format!("{}{}{}", post("m1"), post("m2"), post("m3"));
    publisher.write_all(pipelined.as_bytes()).unwrap();
    let answers = read_answers(&mut publisher, 3);
    publisher.write_all(post("m4").as_bytes()).unwrap();
    let answers: Vec<u64> = answers
        .into_iter()
        .chain(read_answers(&mut publisher, 1))
        .map(|b| {
            serde_json::from_str::<serde_json::Value>(&b).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(
        answers.windows(2).all(|w| w[0] < w[1]),
        "ids in order: {answers:?}"
    );

    for sub in &mut subs {
        let got: Vec<String> = (0..4).map(|_| sub.next().data).collect();
        assert_eq!(got, ["m1", "m2", "m3", "m4"]);
    }
    // The publisher's connection is the control worker's now (still open), and the move was
    // counted on both sides, once for the connection, not per request.
    // Each side's count arrives with its own worker's figures (every 250 ms).
    let status = server.wait_status(|s| {
        s["publish_moves"]["received"] == received && s["publish_moves"]["moved"] == received
    });
    assert_eq!(control_worker(&status)["connections"], 1, "{status}");
    let metrics = server.metrics();
    assert!(
        metrics.contains(&format!(
            "c1m_publish_moves_total{{outcome=\"moved\"}} {received}"
        )),
        "{metrics}"
    );
    drop(publisher);
    server.wait_status(|s| control_worker(s)["connections"] == 0);
}

#[test]
fn a_publish_whose_body_is_still_arriving_moves_with_what_was_read() {
    let server = Server::start(&["--workers", "1", "--max-payload", "200000"]);
    let mut sub = Sse::connect(server.http, "/sub/big", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    let before = wait_until_publishes_move(&server);
    // A byte lost, doubled or reordered at the move shifts the pattern in the delivered message.
    let body: String = (0..150_000u32)
        .map(|i| match i % 1000 {
            0 => '-',
            _ => char::from(b'a' + (i % 26) as u8),
        })
        .collect();
    let mut publisher = TcpStream::connect(server.http).unwrap();
    publisher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The head and the first 10 KB, then the rest once the subscriber worker has read them:
    // the part read before the move travels with the connection, the rest the control worker
    // reads itself.
    let head = format!(
        "POST /pub/big HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    publisher.write_all(head.as_bytes()).unwrap();
    publisher.write_all(&body.as_bytes()[..10_000]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    publisher.write_all(&body.as_bytes()[10_000..]).unwrap();
    read_answers(&mut publisher, 1);
    assert!(
        sub.next().data == body,
        "the delivered message differs from the body sent"
    );
    // Each side's count arrives with its own worker's figures (every 250 ms).
    let want = |outcome: &str| before[outcome].as_u64().map(|n| n + 1);
    server.wait_status(|s| {
        let moves = &s["publish_moves"];
        moves["moved"].as_u64() == want("moved") && moves["received"].as_u64() == want("received")
    });
}

#[test]
fn a_moved_publish_over_the_control_workers_share_is_answered_503_whole_and_counted() {
    // One subscriber worker and the control worker may each hold 4 connections (room for the
    // test's own short /status and warm-up connections on the subscriber worker). Four
    // keep-alive publishers fill the control worker's share; a fifth publish is still taken by
    // the subscriber worker (it holds none of them), passed on, and refused by the control
    // worker itself: the 503 arrives whole (the request was read, so no reset destroys it), the
    // refusal is counted, and the held publishers are not disturbed.
    let server = Server::start(&["--workers", "1", "--max-conns", "4"]);
    wait_until_publishes_move(&server);
    let idle = server.wait_status(|s| control_worker(s)["connections"] == 0);
    let refused = idle["refused"]["max_conns"].as_u64().unwrap();
    let post = "POST /pub/full HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx";
    let open = || {
        let s = TcpStream::connect(server.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = open();
            s.write_all(post.as_bytes()).unwrap();
            read_answers(&mut s, 1);
            s
        })
        .collect();
    server.wait_status(|s| control_worker(s)["connections"] == 4);

    let answer = common::raw_exchange(server.http, post.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(
        answer.ends_with("\r\n\r\nserver at max connections\n"),
        "the answer is cut: {answer:?}"
    );
    server.wait_status(|s| s["refused"]["max_conns"].as_u64() == Some(refused + 1));

    for s in &mut held {
        s.write_all(post.as_bytes()).unwrap();
        read_answers(s, 1);
    }
    let status = server.status();
    assert_eq!(control_worker(&status)["connections"], 4, "{status}");
}
