//! Scale: 30,000 SSE subscribers across 2 workers, every one receives every message.
//!
//! One test process may hold at most 20,000 descriptors here, so the subscribers live in two
//! child processes: this same test binary re-run with `--ignored --exact serve_scale::scale_subscriber_child`
//! (the child "test" only acts when its environment says so). Each child opens its share of
//! connections, reports `C1M:ready`, waits for the expected ids on stdin, then reads every
//! stream and reports `C1M:ok` or what went wrong.

use crate::common;

use common::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SUBSCRIBERS: usize = 30_000;
const CHILDREN: usize = 2;
const MESSAGES: usize = 5;

#[test]
fn thirty_thousand_subscribers_across_two_workers_all_receive_every_message() {
    let server = Server::start(&["--workers", "2", "--max-conns", "40000"]);
    let per_child = SUBSCRIBERS / CHILDREN;
    // Each child connects from its own loopback address: one source address has only ~28K
    // ephemeral ports towards one destination.
    let mut children: Vec<_> = (0..CHILDREN)
        .enumerate()
        .map(|(i, _)| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "serve_scale::scale_subscriber_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("C1M_SCALE_ADDR", server.http.to_string())
                .env("C1M_SCALE_COUNT", per_child.to_string())
                .env("C1M_SCALE_SOURCE", format!("127.0.9.{}", i + 1))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outputs: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()).lines())
        .collect();
    let wait_for = |lines: &mut std::io::Lines<BufReader<std::process::ChildStdout>>,
                    prefix: &str|
     -> String {
        for line in lines.by_ref() {
            let line = line.unwrap();
            // libtest may print "test name ... " on the same line first.
            if let Some(at) = line.find("C1M:") {
                let rest = &line[at + 4..];
                assert!(
                    rest.starts_with(prefix),
                    "child said {rest:?}, wanted {prefix}"
                );
                return rest.to_string();
            }
        }
        panic!("child exited before saying {prefix}");
    };
    let started = Instant::now();
    for out in &mut outputs {
        wait_for(out, "ready");
    }
    let subscribe_time = started.elapsed();
    let s = server.wait_status(|s| s["connections"]["sse"] == SUBSCRIBERS as u64);
    let per_worker: Vec<u64> = s["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["role"] == "subscribers")
        .map(|w| w["connections"].as_u64().unwrap())
        .collect();
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "one worker holds everything: {per_worker:?}"
    );
    let ids: Vec<u64> = (0..MESSAGES)
        .map(|i| server.publish("scale", format!("message {i}\nsecond line").as_bytes()))
        .collect();
    let id_line = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    for child in &mut children {
        writeln!(child.stdin.as_mut().unwrap(), "{id_line}").unwrap();
    }
    for out in &mut outputs {
        let verdict = wait_for(out, "ok");
        assert_eq!(verdict, format!("ok {}", per_child * MESSAGES));
    }
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let s = server.wait_status(|s| s["messages"]["delivered"] == (SUBSCRIBERS * MESSAGES) as u64);
    assert_eq!(s["messages"]["dropped"], 0);
    eprintln!("{SUBSCRIBERS} subscribers ready in {subscribe_time:?}; per worker {per_worker:?}");
}

/// The subscriber side of the scale test; does nothing unless started by it.
#[test]
#[ignore = "child process of thirty_thousand_subscribers_across_two_workers_all_receive_every_message"]
fn scale_subscriber_child() {
    let (Ok(addr), Ok(count), Ok(source)) = (
        std::env::var("C1M_SCALE_ADDR"),
        std::env::var("C1M_SCALE_COUNT"),
        std::env::var("C1M_SCALE_SOURCE"),
    ) else {
        return;
    };
    let source: SocketAddr = format!("{source}:0").parse().unwrap();
    c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    let addr: SocketAddr = addr.parse().unwrap();
    let count: usize = count.parse().unwrap();
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        let socket =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        c1m_sys::sockopt::set_bind_address_no_port(&socket).unwrap();
        socket.bind(&source.into()).unwrap();
        socket.connect(&addr.into()).unwrap();
        let mut s: TcpStream = socket.into();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"GET /sub/scale HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n")
            .unwrap();
        let mut pending = Vec::new();
        let head = read_block(&mut s, &mut pending, b"\r\n\r\n");
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        streams.push((s, pending));
    }
    println!("C1M:ready");
    let mut ids = String::new();
    std::io::stdin().read_line(&mut ids).unwrap();
    let want: Vec<String> = ids.trim().split(',').map(String::from).collect();
    let mut received = 0;
    for (n, (s, pending)) in streams.iter_mut().enumerate() {
        for (i, id) in want.iter().enumerate() {
            let event = String::from_utf8(read_block(s, pending, b"\n\n")).unwrap();
            let expected = format!("id: {id}\ndata: message {i}\ndata: second line\n\n");
            if event != expected {
                println!("C1M:fail stream {n} message {i}: got {event:?}, want {expected:?}");
                return;
            }
            received += 1;
        }
    }
    println!("C1M:ok {received}");
}

/// Returns the bytes up to and including `end`, reading more as needed; the rest stays in
/// `pending` for the next call.
fn read_block(s: &mut TcpStream, pending: &mut Vec<u8>, end: &[u8]) -> Vec<u8> {
    loop {
        if let Some(p) = pending.windows(end.len()).position(|w| w == end) {
            return pending.drain(..p + end.len()).collect();
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "stream closed after {:?}",
            String::from_utf8_lossy(pending)
        );
        pending.extend_from_slice(&chunk[..n]);
    }
}
