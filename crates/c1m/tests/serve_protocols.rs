//! Subscribe / publish / receive on each protocol, multi-channel, and resume with and without
//! a gap, against the real `c1m serve` binary over loopback.

use crate::common;

use common::{Server, Sse};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sse_receives_published_messages_multiline_split_into_data_lines() {
    let server = Server::start(&["--workers", "2"]);
    let mut a = Sse::connect(server.http, "/sub/news", "");
    let mut b = Sse::connect(server.http, "/sub/news", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);
    let id1 = server.publish("news", b"hello");
    let id2 = server.publish("news", b"line one\nline two\r\nline three");
    for sub in [&mut a, &mut b] {
        let e1 = sub.next();
        assert_eq!(
            (e1.id.as_deref(), e1.data.as_str(), e1.event),
            (Some(id1.to_string().as_str()), "hello", None)
        );
        let e2 = sub.next();
        assert_eq!(e2.id, Some(id2.to_string()));
        assert_eq!(e2.data, "line one\nline two\nline three");
    }
    assert!(id2 > id1);
    let s = server.wait_status(|s| s["messages"]["delivered"] == 4);
    assert_eq!(s["messages"]["published"], 2);
}

#[test]
fn curl_as_an_independent_sse_client() {
    let server = Server::start(&["--workers", "1"]);
    let mut curl = Command::new("curl")
        .args([
            "-sN",
            "--max-time",
            "10",
            "-H",
            "Accept: text/event-stream",
            &server.url("/sub/alerts"),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl is installed by scripts/install-test-deps.sh");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    let id = server.publish("alerts", b"disk full");
    let mut lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), format!("id: {id}"));
    assert_eq!(lines.next().unwrap().unwrap(), "data: disk full");
    curl.kill().unwrap();
    curl.wait().unwrap();
}

#[test]
fn multi_channel_sse_names_the_channel_and_orders_by_id() {
    let server = Server::start(&["--workers", "1"]);
    let mut sub = Sse::connect(server.http, "/sub/a,b", "");
    let mut only_b = Sse::connect(server.http, "/sub/b", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);
    let ida = server.publish("a", b"for a");
    let idb = server.publish("b", b"for b");
    server.publish("c", b"nobody");
    let e = sub.next();
    assert_eq!(
        (e.event.as_deref(), e.id, e.data.as_str()),
        (Some("a"), Some(ida.to_string()), "for a")
    );
    let e = sub.next();
    assert_eq!(
        (e.event.as_deref(), e.id, e.data.as_str()),
        (Some("b"), Some(idb.to_string()), "for b")
    );
    let e = only_b.next();
    assert_eq!((e.event, e.data.as_str()), (None, "for b"));
}

#[test]
fn sse_resume_replays_exactly_the_missed_messages() {
    let server = Server::start(&["--workers", "2"]);
    let first = server.publish("r", b"m1");
    let ids: Vec<u64> = (2..=4)
        .map(|i| server.publish("r", format!("m{i}").as_bytes()))
        .collect();
    // Last-Event-ID header, as a browser sends it.
    let mut sub = Sse::connect(
        server.http,
        "/sub/r",
        &format!("Last-Event-ID: {first}\r\n"),
    );
    for (i, id) in ids.iter().enumerate() {
        let e = sub.next();
        assert_eq!(
            (e.id, e.data),
            (Some(id.to_string()), format!("m{}", i + 2))
        );
    }
    // Then live messages follow, with nothing duplicated.
    let live = server.publish("r", b"m5");
    let e = sub.next();
    assert_eq!((e.id, e.data.as_str()), (Some(live.to_string()), "m5"));
    // ?last_id= works the same, and a position at the head replays nothing.
    let mut sub2 = Sse::connect(server.http, &format!("/sub/r?last_id={live}"), "");
    let next = server.publish("r", b"m6");
    assert_eq!(sub2.next().id, Some(next.to_string()));
}

#[test]
fn sse_resume_beyond_history_reports_the_gap_then_replays_what_is_left() {
    let server = Server::start(&["--workers", "1", "--history-size", "2"]);
    let first = server.publish("g", b"m1");
    let lost = server.publish("g", b"m2");
    let kept: Vec<u64> = (3..=4)
        .map(|i| server.publish("g", format!("m{i}").as_bytes()))
        .collect();
    let mut sub = Sse::connect(server.http, &format!("/sub/g?last_id={first}"), "");
    let gap = sub.next();
    assert_eq!(gap.event.as_deref(), Some("gap"));
    let v: serde_json::Value = serde_json::from_str(&gap.data).unwrap();
    assert_eq!(
        (
            v["channel"].as_str(),
            v["after"].as_u64(),
            v["through"].as_u64()
        ),
        (Some("g"), Some(first), Some(lost))
    );
    assert_eq!(sub.next().id, Some(kept[0].to_string()));
    assert_eq!(sub.next().id, Some(kept[1].to_string()));
}

#[test]
fn sse_resume_from_before_a_restart_reports_a_gap() {
    let server = Server::start(&["--workers", "1"]);
    let old = server.publish("x", b"before restart");
    drop(server);
    let server = Server::start(&["--workers", "1"]);
    let mut sub = Sse::connect(server.http, &format!("/sub/x?last_id={old}"), "");
    assert_eq!(sub.next().event.as_deref(), Some("gap"));
}

fn get(stream: &mut TcpStream, path: &str) -> (u16, String) {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    read_response(stream)
}

/// Reads one Content-Length-framed (or bodiless 204) response from a kept-alive connection.
fn read_response(stream: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "connection closed mid-head"
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8(buf).unwrap();
    let status = common::status_code(&head);
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).unwrap();
    (status, String::from_utf8(body).unwrap())
}

#[test]
fn long_poll_waits_answers_and_reuses_the_connection() {
    let server = Server::start(&["--workers", "1", "--poll-timeout", "1s"]);
    let mut conn = TcpStream::connect(server.http).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // No last id: waits for the next message.
    write!(conn, "GET /sub/lp HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    server.wait_status(|s| s["connections"]["longpoll"] == 1);
    let id = server.publish("lp", b"first");
    let (status, body) = read_response(&mut conn);
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["messages"][0]["data"].as_str(), v["last_id"].as_u64()),
        (Some("first"), Some(id))
    );
    // Messages published between polls are answered at once from history, same connection.
    let id2 = server.publish("lp", b"second");
    let id3 = server.publish("lp", b"third");
    let (status, body) = get(&mut conn, &format!("/sub/lp?last_id={id}"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status, 200);
    let got: Vec<u64> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert_eq!(got, vec![id2, id3]);
    assert_eq!(v["last_id"].as_u64(), Some(id3));
    // Nothing new: 204 after the poll timeout, still on the same connection.
    let started = Instant::now();
    let (status, body) = get(&mut conn, &format!("/sub/lp?last_id={id3}"));
    assert_eq!((status, body.as_str()), (204, ""));
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "answered after {:?}",
        started.elapsed()
    );
    // The Last-Event-ID header works as the resume position too.
    write!(
        conn,
        "GET /sub/lp HTTP/1.1\r\nHost: t\r\nLast-Event-ID: {id2}\r\n\r\n"
    )
    .unwrap();
    let (_, body) = read_response(&mut conn);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["messages"][0]["id"].as_u64(), Some(id3));
}

#[test]
fn long_poll_with_ureq_and_a_gap() {
    let server = Server::start(&["--workers", "1", "--history-size", "1"]);
    let first = server.publish("h", b"1");
    server.publish("h", b"2");
    let last = server.publish("h", b"3");
    let body = ureq::get(&server.url(&format!("/sub/h?last_id={first}")))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["gaps"][0]["after"].as_u64(), Some(first));
    assert_eq!(v["gaps"][0]["through"].as_u64(), Some(last - 1));
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);
    assert_eq!(v["last_id"].as_u64(), Some(last));
}

/// Reads one line-protocol frame: (kind, fields, payload).
fn read_frame(r: &mut BufReader<TcpStream>) -> (String, Vec<String>, Vec<u8>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let mut parts: Vec<String> = line
        .trim_end_matches('\n')
        .split(' ')
        .map(String::from)
        .collect();
    let kind = parts.remove(0);
    let mut payload = Vec::new();
    if kind == "MSG" {
        let len: usize = parts[2].parse().unwrap();
        payload = vec![0u8; len + 1];
        r.read_exact(&mut payload).unwrap();
        assert_eq!(payload.pop(), Some(b'\n'));
    }
    (kind, parts, payload)
}

#[test]
fn raw_tcp_line_protocol_carries_newlines_and_resumes() {
    let server = Server::start(&[
        "--workers",
        "2",
        "--tcp-listen",
        "127.0.0.1:0",
        "--history-size",
        "2",
    ]);
    let tcp = server.tcp.unwrap();
    let mut s = TcpStream::connect(tcp).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"SUB t1,t2\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let (kind, fields, _) = read_frame(&mut r);
    assert_eq!(kind, "OK", "{fields:?}");
    let payload = b"evil\nMSG t1 1 1\nx\n\x00\xff";
    let id = server.publish("t1", payload);
    let (kind, fields, got) = read_frame(&mut r);
    assert_eq!(
        (kind.as_str(), fields[0].as_str(), fields[1].clone()),
        ("MSG", "t1", id.to_string())
    );
    assert_eq!(got, payload);
    let id2 = server.publish("t2", b"two");
    let (_, fields, got) = read_frame(&mut r);
    assert_eq!(
        (fields[0].as_str(), fields[1].clone(), got.as_slice()),
        ("t2", id2.to_string(), &b"two"[..])
    );
    // Resume with a gap: history holds 2, three more are published.
    let kept: Vec<u64> = (0..3)
        .map(|i| server.publish("t1", format!("r{i}").as_bytes()))
        .collect();
    let mut s2 = TcpStream::connect(tcp).unwrap();
    s2.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    writeln!(s2, "SUB t1 {id}").unwrap();
    let mut r2 = BufReader::new(s2);
    assert_eq!(read_frame(&mut r2).0, "OK");
    let (kind, fields, _) = read_frame(&mut r2);
    assert_eq!(
        (kind.as_str(), fields[1].clone(), fields[2].clone()),
        ("GAP", id.to_string(), kept[0].to_string())
    );
    assert_eq!(read_frame(&mut r2).1[1], kept[1].to_string());
    assert_eq!(read_frame(&mut r2).1[1], kept[2].to_string());
    // A bad command gets ERR and a close.
    let answer = common::raw_exchange(tcp, b"PUB x\n");
    assert!(answer.starts_with("ERR "), "{answer}");
}

#[test]
fn status_metrics_and_healthz_agree() {
    let server = Server::start(&["--workers", "2"]);
    let _sub = Sse::connect(server.http, "/sub/m", "");
    // Wait on the SSE count: `total` also counts the client's own kept-alive status connection.
    let s = server.wait_status(|s| s["connections"]["sse"] == 1);
    // Two subscriber workers and the control worker.
    assert_eq!(s["workers"].as_array().unwrap().len(), 3);
    assert!(s["memory"]["rss_bytes"].as_u64().unwrap() > 0);
    assert_eq!(s["memory"]["processes"], 4);
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_connections{proto=\"sse\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("c1m_refused_total{reason=\"head_timeout\"} 0"));
    assert_eq!(
        ureq::get(&server.url("/healthz"))
            .call()
            .unwrap()
            .into_string()
            .unwrap(),
        "ok\n"
    );
}
