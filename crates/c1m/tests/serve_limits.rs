//! Bad input and limits: each gets the right status (or close), is counted in /status, and
//! other connections never notice.

use crate::common;

use common::{raw_exchange, status_code, Server, Sse};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn bad_requests_get_their_status_and_are_counted_while_a_subscriber_carries_on() {
    let server = Server::start(&["--workers", "1", "--max-payload", "1024"]);
    let mut bystander = Sse::connect(server.http, "/sub/calm", "");
    let http = server.http;

    let mut huge = b"GET /sub/x HTTP/1.1\r\nX-Filler: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 9000));
    huge.extend_from_slice(b"\r\n\r\n");
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("head over 8 KiB", huge, 431),
        ("garbage", b"\x16\x03\x01 not http\r\n\r\n".to_vec(), 400),
        (
            "unknown path",
            b"GET /nowhere HTTP/1.1\r\n\r\n".to_vec(),
            404,
        ),
        (
            "wrong method on /sub",
            b"POST /sub/a HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_vec(),
            405,
        ),
        (
            "wrong method on /pub",
            b"GET /pub/a HTTP/1.1\r\n\r\n".to_vec(),
            405,
        ),
        (
            "payload too large",
            b"POST /pub/a HTTP/1.1\r\nContent-Length: 1025\r\n\r\n".to_vec(),
            413,
        ),
        (
            "malformed chunked publish",
            b"POST /pub/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
            400,
        ),
        (
            "bad channel",
            b"GET /sub/a%20b HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n".to_vec(),
            400,
        ),
        (
            "bad last id",
            b"GET /sub/a?last_id=x HTTP/1.1\r\n\r\n".to_vec(),
            400,
        ),
        (
            "too many channels",
            format!(
                "GET /sub/{} HTTP/1.1\r\n\r\n",
                (0..17)
                    .map(|i| format!("c{i}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
            .into_bytes(),
            400,
        ),
    ];
    for (what, request, want) in &cases {
        let answer = raw_exchange(http, request);
        assert_eq!(status_code(&answer), *want, "{what}: {answer}");
    }
    // The publishes' refusals are the control worker's (publishes move there), reported on
    // its own 250 ms beat: wait for every worker's figures.
    let s = server.wait_status(|s| {
        let r = &s["refused"];
        r["method"] == 2 && r["payload_too_large"] == 1 && r["bad_request"] == 5
    });
    let r = &s["refused"];
    assert_eq!(
        (
            r["head_too_large"].as_u64(),
            r["not_found"].as_u64(),
            r["payload_too_large"].as_u64()
        ),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(r["bad_request"].as_u64(), Some(5), "{r}");
    // The subscriber never noticed.
    let id = server.publish("calm", b"still here");
    assert_eq!(bystander.next().id, Some(id.to_string()));
    // The server still answers a largest-allowed payload.
    server.publish("a", &[b'x'; 1024]);
}

#[test]
fn slowloris_head_is_closed_after_the_head_timeout_and_counted() {
    let server = Server::start(&["--workers", "1", "--head-timeout", "500ms"]);
    let mut slow = TcpStream::connect(server.http).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /sub/a HTTP/1.1\r\nX-Slow: ").unwrap();
    let mut answer = String::new();
    // Trickle bytes: the deadline is for the whole head, not per byte.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(100));
        if slow.write_all(b"a").is_err() {
            break;
        }
    }
    let _ = slow.read_to_string(&mut answer);
    let waited = started.elapsed();
    assert_eq!(status_code(&answer), 408, "{answer}");
    // Not before the head timeout; the upper bound only catches "never" (a loaded CI box is slow).
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(10),
        "closed after {waited:?}"
    );
    server.wait_status(|s| s["refused"]["head_timeout"] == 1);
}

#[test]
fn publish_key_is_required_when_configured() {
    let mut cmd = common::c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .env("C1M_PUBLISH_KEY", "s3cret");
    let server = Server::spawn(cmd);
    let url = server.url("/pub/k");
    match ureq::post(&url).send_bytes(b"x") {
        Err(ureq::Error::Status(401, _)) => {}
        other => panic!("expected 401, got {other:?}"),
    }
    match ureq::post(&url)
        .set("Authorization", "Bearer wrong")
        .send_bytes(b"x")
    {
        Err(ureq::Error::Status(401, _)) => {}
        other => panic!("expected 401, got {other:?}"),
    }
    let ok = ureq::post(&url)
        .set("Authorization", "Bearer s3cret")
        .send_bytes(b"x")
        .unwrap();
    assert_eq!(ok.status(), 200);
    // Both 401s count as unauthorized (a missing or wrong key), none as forbidden.
    server.wait_status(|s| s["refused"]["unauthorized"] == 2 && s["refused"]["forbidden"] == 0);
}

#[test]
fn max_conns_refuses_new_connections_cleanly_and_counts_them() {
    let server = Server::start(&["--workers", "1", "--max-conns", "3"]);
    let held: Vec<Sse> = (0..3)
        .map(|i| Sse::connect(server.http, &format!("/sub/m{i}"), ""))
        .collect();
    let answer = raw_exchange(server.http, b"GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(status_code(&answer), 503, "{answer}");
    drop(held);
    // Room again once they leave, and the refusal was counted.
    server.wait_status(|s| s["refused"]["max_conns"].as_u64().unwrap() >= 1);
}

#[test]
fn a_slow_reader_is_disconnected_at_the_unsent_cap_and_others_get_everything() {
    let server = Server::start(&["--workers", "1", "--max-unsent", "65536"]);
    // The slow reader shrinks its receive buffer and never reads.
    let slow = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    slow.set_recv_buffer_size(4096).unwrap();
    slow.connect(&server.http.into()).unwrap();
    let mut slow: TcpStream = slow.into();
    slow.write_all(b"GET /sub/flood HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n")
        .unwrap();
    let mut fast = Sse::connect(server.http, "/sub/flood", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);
    let payload = vec![b'p'; 16 * 1024];
    let reader = std::thread::spawn(move || {
        let received = (0..200).map(|_| fast.next().data.len()).sum::<usize>();
        (received, fast)
    });
    for _ in 0..200 {
        server.publish("flood", &payload);
    }
    let (received, _fast) = reader.join().unwrap();
    assert_eq!(received, 200 * payload.len());
    // The fast reader is still held open, so exactly one stream remains: the slow one was cut.
    // (Waiting on both figures: the refusal and the close can reach /status in different ticks.)
    let s =
        server.wait_status(|s| s["refused"]["slow_consumer"] == 1 && s["connections"]["sse"] == 1);
    assert!(s["messages"]["dropped"].as_u64().unwrap() >= 1);
}

/// CPU time (user+system, in clock ticks) of a process, from /proc/PID/stat.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn accept_backs_off_on_emfile_without_spinning_and_keeps_serving() {
    // A hard fd limit of 48 for the server (and its workers), set before exec.
    let mut cmd = std::process::Command::new("sh");
    let exe = env!("CARGO_BIN_EXE_c1m");
    cmd.args(["-c", &format!("ulimit -n 48 && exec {exe} serve --listen 127.0.0.1:0 --workers 1 --sse-heartbeat 200ms")]);
    let server = Server::spawn(cmd);
    let worker = server.worker_pids()[0];
    let mut subscriber = Sse::connect(server.http, "/sub/e", "");
    // Fill the worker's descriptor table; the extra connections wait in the backlog.
    let mut extra = Vec::new();
    for _ in 0..60 {
        extra.push(TcpStream::connect(server.http).unwrap());
    }
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(worker);
    // While the worker cannot accept, the existing stream is still served (heartbeats flow).
    let mut seen = Vec::new();
    let until = Instant::now() + Duration::from_secs(2);
    subscriber
        .stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    while Instant::now() < until {
        let mut chunk = [0u8; 256];
        if let Ok(n) = subscriber.stream.read(&mut chunk) {
            seen.extend_from_slice(&chunk[..n]);
        }
    }
    let used = cpu_ticks(worker) - before;
    // A busy spin would burn ~200 ticks in 2 s; backing off every 100 ms costs almost nothing.
    assert!(
        used < 40,
        "worker used {used} ticks in 2 s while at its fd limit"
    );
    let beats = seen.windows(3).filter(|w| w == b":\n\n").count();
    assert!(beats >= 5, "only {beats} heartbeats while at the fd limit");
    // Once descriptors free up, new connections are accepted again and counted refusals show.
    drop(extra);
    subscriber
        .stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    server.wait_status(|s| s["refused"]["fd_limit"].as_u64().unwrap() >= 1);
    let id = server.publish("e", b"through");
    assert_eq!(subscriber.next().id, Some(id.to_string()));
}

#[test]
fn idle_keep_alive_connections_close_quietly_and_silent_ones_are_counted() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--head-timeout",
        "500ms",
        "--keepalive-timeout",
        "500ms",
    ]);
    // A served keep-alive connection that goes idle: closed without an unsolicited answer
    // (a 408 there would be read as the answer to the client's next request).
    let mut idle = TcpStream::connect(server.http).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
    let mut first = [0u8; 512];
    let n = idle.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "idle keep-alive got {:?}",
        String::from_utf8_lossy(&rest)
    );
    // A connection that never sends a byte is closed too, and counted.
    let mut silent = TcpStream::connect(server.http).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    silent.read_to_end(&mut got).unwrap();
    assert!(got.is_empty());
    server.wait_status(|s| s["refused"]["head_timeout"] == 1);
}

#[test]
fn a_served_connection_waits_the_keepalive_timeout_idle_but_the_head_timeout_once_it_speaks() {
    // A publisher that publishes every 20 s keeps its connection: closing it after the
    // head timeout sent every publish through a new connection and a busy subscriber worker.
    let server = Server::start(&[
        "--workers",
        "1",
        "--head-timeout",
        "1s",
        "--keepalive-timeout",
        "6s",
    ]);
    let mut conn = TcpStream::connect(server.http).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = [0u8; 512];
    for _ in 0..2 {
        conn.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
        let n = conn.read(&mut answer).unwrap();
        assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
        // Idle past the head timeout, within the keep-alive one.
        std::thread::sleep(Duration::from_millis(2000));
    }
    // A request begun and not finished gets the head timeout's 408, not the idle wait.
    let started = std::time::Instant::now();
    conn.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    let mut rest = Vec::new();
    conn.read_to_end(&mut rest).unwrap();
    assert!(
        String::from_utf8_lossy(&rest).starts_with("HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
    // Within the head timeout and the timer's tick; the idle wait would have taken 4 s more.
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    // So does one begun behind an answered request in the same write (pipelined).
    let mut piped = TcpStream::connect(server.http).unwrap();
    piped
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = std::time::Instant::now();
    piped
        .write_all(b"GET /healthz HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\n")
        .unwrap();
    let mut all = Vec::new();
    piped.read_to_end(&mut all).unwrap();
    let all = String::from_utf8_lossy(&all);
    assert!(all.starts_with("HTTP/1.1 200"), "{all:?}");
    assert!(all.contains("HTTP/1.1 408"), "{all:?}");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    // And an idle one is closed quietly once the keep-alive timeout passes.
    let mut idle = TcpStream::connect(server.http).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
    let n = idle.read(&mut answer).unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 200"));
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
}

#[test]
fn refusals_say_what_would_have_worked() {
    let server = Server::start(&["--workers", "1"]);
    // A 404 lists every path the server has.
    let answer = raw_exchange(server.http, b"GET /nowhere HTTP/1.1\r\n\r\n");
    assert_eq!(status_code(&answer), 404, "{answer}");
    for path in [
        "/sub/",
        "/pub/",
        "/channels/",
        "/status",
        "/metrics",
        "/healthz",
        "/dashboard",
        "/demo",
    ] {
        assert!(answer.contains(path), "404 body lacks {path}: {answer}");
    }
    // Publish takes one channel: a list is a 400 that says so, and nothing is published.
    let answer = raw_exchange(
        server.http,
        b"POST /pub/a,b HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
    );
    assert_eq!(status_code(&answer), 400, "{answer}");
    assert!(answer.contains("publish takes one channel"), "{answer}");
    let s = server.wait_status(|s| s["refused"]["bad_request"] == 1);
    assert_eq!(s["refused"]["not_found"], 1, "{s}");
    assert_eq!(s["messages"]["published"], 0, "{s}");
}
