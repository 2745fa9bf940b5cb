//! CORS for subscribe and publish, one Origin allow-list with the WebSocket check, and the
//! admin listener, against the real binary with curl as the client.

use crate::auth;
use crate::common;

use auth::{curl_answer, curl_status};
use common::{Server, Sse};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const APP: &str = "http://127.0.0.2:8000";

/// Header value from a raw answer, by case-insensitive name.
fn header<'a>(answer: &'a str, name: &str) -> Option<&'a str> {
    answer.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Sends a request and reads only the answer's head (a 101 keeps the connection open).
fn status_of_head(addr: std::net::SocketAddr, request: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap() == 1 {
        head.push(byte[0]);
    }
    common::status_code(&String::from_utf8_lossy(&head))
}

#[test]
fn preflight_and_answers_carry_cors_headers_for_listed_origins_only() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--cors-origins",
        &format!("{APP}, https://app.example"),
    ]);
    let origin = format!("Origin: {APP}");
    // Preflight for publish (a JSON POST with a bearer token is not a simple request).
    let pre = curl_answer(&[
        "-X",
        "OPTIONS",
        "-H",
        &origin,
        "-H",
        "Access-Control-Request-Method: POST",
        "-H",
        "Access-Control-Request-Headers: authorization, content-type",
        &server.url("/pub/news"),
    ]);
    assert!(pre.starts_with("HTTP/1.1 204"), "{pre}");
    assert_eq!(
        header(&pre, "Access-Control-Allow-Origin"),
        Some(APP),
        "{pre}"
    );
    assert_eq!(
        header(&pre, "Access-Control-Allow-Credentials"),
        Some("true")
    );
    assert_eq!(
        header(&pre, "Access-Control-Allow-Methods"),
        Some("POST, OPTIONS")
    );
    let allowed = header(&pre, "Access-Control-Allow-Headers")
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        allowed.contains("authorization") && allowed.contains("content-type"),
        "{pre}"
    );
    // Preflight for subscribe; a stranger's preflight is refused.
    let pre = curl_answer(&[
        "-X",
        "OPTIONS",
        "-H",
        &origin,
        "-H",
        "Access-Control-Request-Method: GET",
        &server.url("/sub/news"),
    ]);
    assert_eq!(
        header(&pre, "Access-Control-Allow-Methods"),
        Some("GET, OPTIONS"),
        "{pre}"
    );
    let evil = "Origin: https://evil.example";
    assert_eq!(
        curl_status(&["-X", "OPTIONS", "-H", evil, &server.url("/sub/news")]),
        403
    );

    // The publish answer and the SSE stream's head carry the headers.
    let publish = curl_answer(&["-H", &origin, "-d", "hello", &server.url("/pub/news")]);
    assert!(publish.starts_with("HTTP/1.1 200"), "{publish}");
    assert_eq!(
        header(&publish, "Access-Control-Allow-Origin"),
        Some(APP),
        "{publish}"
    );
    let mut curl = Command::new("curl")
        .args([
            "-s",
            "-i",
            "-N",
            "--max-time",
            "10",
            "-H",
            "Accept: text/event-stream",
            "-H",
        ])
        .arg(&origin)
        .arg(server.url("/sub/news?last_id=0"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = String::new();
    let mut lines = BufReader::new(curl.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.starts_with("data:") {
            break; // the replayed "hello"
        }
        head.push_str(&line);
        head.push('\n');
    }
    let _ = curl.kill();
    let _ = curl.wait();
    assert!(head.contains("text/event-stream"), "{head}");
    assert_eq!(
        header(&head, "Access-Control-Allow-Origin"),
        Some(APP),
        "{head}"
    );
    // A long-poll answer (per request, not the shared encoded-once one) too.
    let poll = curl_answer(&["-H", &origin, &server.url("/sub/news?last_id=0")]);
    assert_eq!(
        header(&poll, "Access-Control-Allow-Origin"),
        Some(APP),
        "{poll}"
    );

    // A stranger is refused on subscribe, publish and the WebSocket upgrade alike (one list).
    assert_eq!(
        curl_status(&["-H", evil, "-d", "x", &server.url("/pub/news")]),
        403
    );
    assert_eq!(
        curl_status(&[
            "-H",
            evil,
            "-H",
            "Accept: text/event-stream",
            &server.url("/sub/news")
        ]),
        403
    );
    let upgrade = format!("GET /sub/news HTTP/1.1\r\nHost: t\r\n{evil}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
    assert_eq!(
        common::status_code(&common::raw_exchange(server.http, upgrade.as_bytes())),
        403
    );
    let ok = upgrade.replace(evil, &origin);
    assert_eq!(status_of_head(server.http, &ok), 101);
    // No Origin (curl, servers): no CORS headers, nothing refused.
    let plain = curl_answer(&["-d", "x", &server.url("/pub/news")]);
    assert!(
        plain.starts_with("HTTP/1.1 200")
            && header(&plain, "Access-Control-Allow-Origin").is_none(),
        "{plain}"
    );
    server.wait_status(|s| s["refused"]["forbidden"] == 4);
}

#[test]
fn a_wildcard_allows_any_origin_without_credentials() {
    let server = Server::start(&["--workers", "1", "--cors-origins", "*"]);
    let answer = curl_answer(&[
        "-H",
        "Origin: https://anywhere.example",
        "-d",
        "x",
        &server.url("/pub/a"),
    ]);
    assert_eq!(
        header(&answer, "Access-Control-Allow-Origin"),
        Some("*"),
        "{answer}"
    );
    assert_eq!(
        header(&answer, "Access-Control-Allow-Credentials"),
        None,
        "{answer}"
    );
    // Without --cors-origins, OPTIONS is what it was: 405.
    let plain = Server::start(&["--workers", "1"]);
    assert_eq!(
        curl_status(&[
            "-X",
            "OPTIONS",
            "-H",
            "Origin: https://a.example",
            &plain.url("/pub/a")
        ]),
        405
    );
}

/// Starts `c1m serve` with `--admin-listen 127.0.0.1:0`; returns the server (its drop guard
/// kills it) and the admin address read from the banner's last field (`; admin http ADDR`).
/// The harness's own start waits on the public /status, which is 404 here.
pub fn start_with_admin(args: &[&str]) -> (Server, std::net::SocketAddr) {
    let mut cmd = common::c1m();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .args(args);
    let (child, banner) = common::spawn_for_banner(cmd);
    let (http, _) = common::parse_banner(&banner).expect("http address in banner");
    let admin = common::parse_banner_admin(&banner);
    let server = Server {
        child,
        http,
        tcp: None,
    };
    let admin = admin.unwrap_or_else(|| panic!("no admin address in {banner:?}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while curl_status(&[&format!("http://{admin}/healthz")]) != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "admin /healthz never answered 200"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (server, admin)
}

#[test]
fn the_admin_listener_takes_status_metrics_and_health_from_the_public_one() {
    let (server, admin) = start_with_admin(&["--workers", "2"]);
    let on_admin = |path: &str| format!("http://{admin}{path}");
    for path in ["/status", "/metrics", "/healthz"] {
        assert_eq!(curl_status(&[&server.url(path)]), 404, "public {path}");
        assert_eq!(curl_status(&[&on_admin(path)]), 200, "admin {path}");
    }
    // Subscribing stays public only; publishing stays public without --admin-publish.
    assert_eq!(curl_status(&[&on_admin("/sub/a")]), 404);
    assert_eq!(curl_status(&["-d", "x", &server.url("/pub/a")]), 200);
    assert_eq!(curl_status(&["-d", "x", &on_admin("/pub/a")]), 404);
    // Counted: 3 public admin paths, /sub and /pub on the admin listener (figures lag 250 ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let status = curl_answer(&[&on_admin("/status")]);
        if status.contains("\"not_found\":5") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn admin_publish_moves_pub_to_the_admin_listener() {
    let (server, admin) = start_with_admin(&["--workers", "1", "--admin-publish"]);
    assert_eq!(curl_status(&["-d", "x", &server.url("/pub/a")]), 404);
    assert_eq!(
        curl_status(&["-d", "x", &format!("http://{admin}/pub/a")]),
        200
    );
    // --admin-publish without --admin-listen is refused at start.
    let out = common::c1m()
        .args(["serve", "--listen", "127.0.0.1:0", "--admin-publish"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--admin-listen"));
}

#[test]
fn one_control_worker_alone_serves_the_admin_listener() {
    // Two subscriber workers and the control worker: the admin listener is one socket, held by
    // the control worker, and no subscriber lands there, so a publish or /status never waits
    // behind a fan-out.
    let (server, admin) = start_with_admin(&["--workers", "2", "--admin-publish"]);
    assert_eq!(
        common::listening_sockets(admin.port()),
        1,
        "admin listening sockets"
    );
    assert_eq!(
        common::listening_sockets(server.http.port()),
        2,
        "public listening sockets"
    );
    let subscribers: Vec<Sse> = (0..20)
        .map(|_| Sse::connect(server.http, "/sub/ctl", ""))
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        let answer = curl_answer(&[&format!("http://{admin}/status")]);
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        let s: serde_json::Value = serde_json::from_str(body).unwrap();
        let on_subscriber_workers: u64 = s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["role"] == "subscribers")
            .map(|w| w["connections"].as_u64().unwrap())
            .sum();
        if on_subscriber_workers == 20 {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "{s}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let workers = status["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 3, "{status}");
    let control: Vec<_> = workers.iter().filter(|w| w["role"] == "control").collect();
    assert_eq!(control.len(), 1, "{status}");
    assert_eq!(control[0]["index"], 2, "{status}");
    // Published on the admin listener (served by the control worker), delivered by the others.
    assert_eq!(
        curl_status(&["-d", "hello", &format!("http://{admin}/pub/ctl")]),
        200
    );
    for mut sse in subscribers {
        assert_eq!(sse.next().data, "hello");
    }
}

/// The nice value of a process (/proc/PID/stat field 19).
fn nice_of(pid: u64) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace().nth(16).unwrap().parse().unwrap()
}

#[test]
fn worker_nice_lowers_the_subscriber_workers_only() {
    let (server, admin) = start_with_admin(&["--workers", "2", "--worker-nice", "4"]);
    let answer = curl_answer(&[&format!("http://{admin}/status")]);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let status: serde_json::Value = serde_json::from_str(body).unwrap();
    let master = nice_of(u64::from(server.child.id()));
    for w in status["workers"].as_array().unwrap() {
        let want = if w["role"] == "control" {
            master
        } else {
            (master + 4).min(19)
        };
        assert_eq!(nice_of(w["pid"].as_u64().unwrap()), want, "{w}");
    }
    // Out of range is refused at start (exit 2), by the flag's parser.
    let out = common::c1m()
        .args(["serve", "--listen", "127.0.0.1:0", "--worker-nice", "20"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
