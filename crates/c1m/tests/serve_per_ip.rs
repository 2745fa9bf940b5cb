//! Per-source-address limits against the real binary: `--max-conns-per-ip` and
//! `--max-new-conns-per-ip-per-sec` hold over all workers, answer 429 with Retry-After (ERR on
//! the raw TCP port), are counted, and give a connection's place back on every close,
//! including a worker's crash. Clients bind to distinct 127.0.0.N addresses (all of 127/8 is
//! loopback on Linux), with `--per-ip-limit-loopback` so loopback is not exempt.

use crate::common;

use common::{status_code, Server};
use socket2::{Domain, Socket, Type};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant};

/// Connects from `from` (port chosen by the kernel).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::V4(SocketAddrV4::new(from, 0)).into())
        .unwrap();
    socket.connect(&to.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Sends `request` from `from` and reads the answer's head: up to the blank line of an HTTP
/// answer, the first line of a raw TCP one, or EOF.
fn open_from(from: Ipv4Addr, to: SocketAddr, request: &str) -> (TcpStream, String) {
    let mut stream = connect_from(from, to);
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let http = head.starts_with(b"HTTP/");
        if (http && head.ends_with(b"\r\n\r\n")) || (!http && head.ends_with(b"\n")) {
            break;
        }
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    (stream, String::from_utf8_lossy(&head).to_string())
}

const SSE: &str = "GET /sub/ip HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";

fn subscribe_from(from: Ipv4Addr, server: &Server) -> (TcpStream, String) {
    open_from(from, server.http, SSE)
}

fn ip(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

fn refused(server: &Server, key: &str) -> u64 {
    server.status()["refused"][key].as_u64().unwrap()
}

#[test]
fn per_ip_conn_limit_refuses_with_429() {
    // Two workers: SO_REUSEPORT spreads each address's connections over both, so a count kept
    // per worker would let up to 6 in; the shared table lets exactly 3 in.
    let server = Server::start(&[
        "--workers",
        "2",
        "--max-conns-per-ip",
        "3",
        "--per-ip-limit-loopback",
    ]);
    let mut held = Vec::new();
    let mut refusals = 0;
    for n in 2..=9 {
        let mut admitted = 0;
        for _ in 0..5 {
            let (stream, head) = subscribe_from(ip(n), &server);
            match status_code(&head) {
                200 => {
                    admitted += 1;
                    held.push((n, stream));
                }
                429 => {
                    refusals += 1;
                    assert!(head.contains("Retry-After: 1\r\n"), "{head}");
                }
                other => panic!("127.0.0.{n}: unexpected {other}: {head:?}"),
            }
        }
        assert_eq!(admitted, 3, "127.0.0.{n}");
    }
    assert_eq!(refusals, 8 * 2);
    let status = server.wait_status(|s| s["connections"]["sse"] == 24);
    assert_eq!(status["refused"]["per_ip_conns"], 16, "{status}");
    let per_worker: Vec<u64> = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["connections"].as_u64().unwrap())
        .collect();
    eprintln!("connections per worker: {per_worker:?}");

    // A closed connection gives its place back.
    let pos = held.iter().position(|(n, _)| *n == 5).unwrap();
    drop(held.remove(pos));
    server.wait_status(|s| s["connections"]["sse"] == 23);
    let (_again, head) = subscribe_from(ip(5), &server);
    assert_eq!(status_code(&head), 200, "{head}");
    let (_over, head) = subscribe_from(ip(5), &server);
    assert_eq!(status_code(&head), 429, "{head}");
    server.wait_status(|s| s["refused"]["per_ip_conns"] == 17);
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_refused_total{reason=\"per_ip_conns\"} 17"),
        "{metrics}"
    );
}

#[test]
fn per_ip_limits_spare_loopback_unless_asked() {
    let server = Server::start(&["--workers", "1", "--max-conns-per-ip", "1"]);
    let held: Vec<_> = (0..3).map(|_| subscribe_from(ip(1), &server)).collect();
    for (_, head) in &held {
        assert_eq!(status_code(head), 200, "{head}");
    }
    assert_eq!(refused(&server, "per_ip_conns"), 0);
}

#[test]
fn per_ip_conn_limit_on_the_raw_tcp_port() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--tcp-listen",
        "127.0.0.1:0",
        "--max-conns-per-ip",
        "1",
        "--per-ip-limit-loopback",
    ]);
    let tcp = server.tcp.unwrap();
    let (_first, line) = open_from(ip(20), tcp, "SUB ip\n");
    assert!(line.starts_with("OK "), "{line:?}");
    let (_second, line) = open_from(ip(20), tcp, "SUB ip\n");
    assert_eq!(line, "ERR too many connections from your address\n");
    server.wait_status(|s| s["refused"]["per_ip_conns"] == 1);
}

#[test]
fn per_ip_rate_limit_refuses_with_429() {
    // 30 per second: above the harness's own /status polling from 127.0.0.1 (20 per second),
    // far below what one client opening connections back to back manages.
    let server = Server::start(&[
        "--workers",
        "2",
        "--max-new-conns-per-ip-per-sec",
        "30",
        "--per-ip-limit-loopback",
    ]);
    let healthz = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let start = Instant::now();
    let mut answers = Vec::new();
    for _ in 0..100 {
        let (_, head) = open_from(ip(30), server.http, healthz);
        if status_code(&head) == 429 {
            assert!(head.contains("Retry-After: 1\r\n"), "{head}");
        }
        answers.push(status_code(&head));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let admitted = answers.iter().filter(|&&c| c == 200).count();
    let too_fast = answers.iter().filter(|&&c| c == 429).count();
    assert_eq!(admitted + too_fast, 100, "{answers:?}");
    assert!(
        answers[..30].iter().all(|&c| c == 200),
        "the burst is allowed"
    );
    // A burst of 30, then one per 1/30 s: at most this many could pass in `elapsed`.
    assert!(
        admitted as f64 <= 31.0 + elapsed * 30.0,
        "{admitted} admitted in {elapsed:.3}s"
    );
    assert!(too_fast >= 1, "{admitted} admitted in {elapsed:.3}s");
    eprintln!("{admitted} admitted, {too_fast} refused in {elapsed:.3}s");
    // Another address has its own budget; every refusal is counted.
    assert_eq!(status_code(&open_from(ip(31), server.http, healthz).1), 200);
    server.wait_status(|s| s["refused"]["per_ip_rate"] == too_fast as u64);
    // After a quiet second the address is let in again.
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(status_code(&open_from(ip(30), server.http, healthz).1), 200);
}

#[test]
fn per_ip_limit_released_after_worker_crash() {
    let server = Server::start(&[
        "--workers",
        "1",
        "--max-conns-per-ip",
        "2",
        "--per-ip-limit-loopback",
    ]);
    let first: Vec<_> = (0..2).map(|_| subscribe_from(ip(40), &server)).collect();
    for (_, head) in &first {
        assert_eq!(status_code(head), 200, "{head}");
    }
    assert_eq!(status_code(&subscribe_from(ip(40), &server).1), 429);
    let old = server.worker_pids()[0];
    c1m_sys::process::kill(old, libc::SIGKILL).unwrap();
    server.wait_status(|s| {
        let pid = s["workers"][0]["pid"].as_u64().unwrap_or(0);
        pid != 0 && pid != u64::from(old)
    });
    drop(first);
    // The dead worker's connections died with it; their places must not stay taken.
    let again: Vec<_> = (0..2).map(|_| subscribe_from(ip(40), &server)).collect();
    for (_, head) in &again {
        assert_eq!(status_code(head), 200, "{head}");
    }
    assert_eq!(status_code(&subscribe_from(ip(40), &server).1), 429);
}

#[test]
fn per_ip_limit_counts_ipv4_through_a_dual_stack_listener_as_ipv4() {
    // On `[::]` IPv4 peers arrive as ::ffff:a.b.c.d. Hashed as IPv6 per /64 they would all share
    // one bucket (the /64 of every mapped address is ::ffff:0:0); counted as IPv4, each address
    // has its own limit.
    let mut cmd = common::c1m();
    cmd.args([
        "serve",
        "--listen",
        "[::]:0",
        "--workers",
        "1",
        "--max-conns-per-ip",
        "1",
        "--per-ip-limit-loopback",
    ]);
    let server = Server::spawn(cmd);
    let port = server.http.port();
    let v4 = SocketAddr::from(([127, 0, 0, 1], port));
    let (_a, head) = open_from(ip(60), v4, SSE);
    assert_eq!(status_code(&head), 200, "{head}");
    let (_b, head) = open_from(ip(61), v4, SSE);
    assert_eq!(status_code(&head), 200, "{head}");
    let (_c, head) = open_from(ip(60), v4, SSE);
    assert_eq!(status_code(&head), 429, "{head}");
}

/// `c1m serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 ARGS` with its stderr collected;
/// returns the server, its log lines and the admin address once the admin /healthz answers.
fn start_with_admin_logged(args: &[&str]) -> (Server, common::LogLines, SocketAddr) {
    let mut cmd = common::c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0"])
        .args(args)
        .stderr(std::process::Stdio::piped());
    let (mut child, banner) = common::spawn_for_banner(cmd);
    let logs = common::collect_stderr(&mut child);
    let (http, _) = common::parse_banner(&banner).expect("a banner");
    let admin = common::parse_banner_admin(&banner).expect("an admin address");
    let server = Server {
        child,
        http,
        tcp: None,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !scrape(admin, "/healthz").starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < deadline, "admin /healthz never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    (server, logs, admin)
}

/// One request on its own connection from 127.0.0.1; the whole answer (or "" when refused
/// before a word).
fn scrape(admin: SocketAddr, path: &str) -> String {
    let Ok(mut s) = TcpStream::connect(admin) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let _ = s.write_all(request.as_bytes());
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

#[test]
fn the_admin_listener_is_exempt_from_per_ip_limits() {
    // One connection and one new connection per second per address, loopback included: a
    // scraper on the admin listener would be refused from its second request on.
    let (server, logs, admin) = start_with_admin_logged(&[
        "--workers",
        "1",
        "--max-conns-per-ip",
        "1",
        "--max-new-conns-per-ip-per-sec",
        "1",
        "--per-ip-limit-loopback",
    ]);
    // A held public subscriber uses 127.0.0.7's one place; a second one is refused.
    let (_held, head) = subscribe_from(ip(7), &server);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_, head) = subscribe_from(ip(7), &server);
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    // The admin listener: a held connection and 20 scrapes in quick succession, all answered.
    let _open = connect_from(ip(7), admin);
    for i in 0..20 {
        let answer = scrape(admin, "/metrics");
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "scrape {i}: {answer:.200}"
        );
    }
    // Publishing stays open to loopback without a key on a loopback-only listener (the shape of
    // a local reverse proxy): the start-up log says so.
    let warning = logs
        .wait_for("behind a proxy on this host", Duration::from_secs(5))
        .expect("a warning about open publishing");
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("--publish-key"), "{warning}");
}

#[test]
fn no_open_publishing_warning_with_a_publish_key_or_admin_publish() {
    for extra in [["--publish-key", "k"], ["--admin-publish", "true"]] {
        let args = [&["--workers", "1"][..], &extra[..]].concat();
        let (_server, logs, _admin) = start_with_admin_logged(&args);
        // The start-up lines are all written before the workers answer /healthz; give the
        // reading thread a moment to take them from the pipe.
        assert!(logs.wait_for("listening", Duration::from_secs(5)).is_some());
        std::thread::sleep(Duration::from_millis(300));
        let all = logs.snapshot();
        assert!(all.iter().any(|l| l.contains("listening")), "{all:#?}");
        assert!(
            !all.iter().any(|l| l.contains("behind a proxy")),
            "{extra:?}: {all:#?}"
        );
    }
}

#[test]
fn a_publish_forwarded_by_a_local_proxy_is_not_a_loopback_publish() {
    let server = Server::start(&["--workers", "1"]);
    let publish = |extra: &str| {
        let mut s = std::net::TcpStream::connect(server.http).expect("connect");
        let request = format!(
            "POST /pub/news HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: 2\r\nConnection: close\r\n\r\nhi"
        );
        s.write_all(request.as_bytes()).expect("write");
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        answer
    };
    let answer = publish("X-Forwarded-For: 203.0.113.9\r\n");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("forwarded by a proxy"), "{answer}");
    let answer = publish("Forwarded: for=203.0.113.9\r\n");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    // The same loopback peer without a forwarding header is still a publisher.
    let answer = publish("");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Workers report counters periodically: wait (bounded) for both refusals to show.
    let s = server.wait_status(|s| s["refused"]["forbidden"] == 2);
    assert_eq!(s["refused"]["forbidden"], 2, "{s}");
}

#[test]
fn publish_connections_passed_to_the_control_worker_still_count_against_their_address() {
    // A publish connection on the public listener moves to the control worker; its place in
    // the per-address count moves with it, so publishers cannot hold more than the limit.
    let server = Server::start(&[
        "--workers",
        "2",
        "--max-conns-per-ip",
        "2",
        "--per-ip-limit-loopback",
    ]);
    let post = "POST /pub/ip HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx";
    // Publishes move once every worker has connected to the control worker (its first beats).
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.status()["publish_moves"]["received"] == 0 {
        assert!(Instant::now() < deadline, "no publish ever moved");
        drop(open_from(ip(61), server.http, post));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every worker's figures include the warm-up (each reports every 250 ms).
    std::thread::sleep(Duration::from_millis(600));
    let received = server.status()["publish_moves"]["received"]
        .as_u64()
        .unwrap();
    let publishers: Vec<TcpStream> = (0..2)
        .map(|_| {
            let (stream, head) = open_from(ip(60), server.http, post);
            assert_eq!(status_code(&head), 200, "{head}");
            stream
        })
        .collect();
    server.wait_status(|s| s["publish_moves"]["received"] == received + 2);
    let (_over, head) = open_from(ip(60), server.http, post);
    assert_eq!(status_code(&head), 429, "{head}");
    let (_over, head) = subscribe_from(ip(60), &server);
    assert_eq!(status_code(&head), 429, "{head}");
    // A closed publisher gives its place back, in the control worker's count.
    drop(publishers);
    let mut head = String::new();
    for _ in 0..50 {
        head = subscribe_from(ip(60), &server).1;
        if status_code(&head) == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(status_code(&head), 200, "{head}");
}
