//! `c1m bench` against the real `c1m serve`, over loopback: for SSE, long-poll and the raw TCP
//! line protocol, every subscriber comes online, every message published while it was online
//! arrives exactly once, and the report records the server's memory per connection from
//! `/status`. Both processes are bounded: bench by `--hold`/`--duration`, serve by a kill at the
//! end of each test (its workers die with it).

use crate::common;

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Serve {
    child: Child,
    http: String,
    tcp: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_serve() -> Serve {
    let http = format!("127.0.0.1:{}", free_port());
    let tcp = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .args(["serve", "--listen", &http, "--tcp-listen", &tcp])
        .args(["--workers", "2", "--max-conns", "10000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let serve = Serve { child, http, tcp };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(&serve.http) {
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            if answer.starts_with("HTTP/1.1 200") {
                return serve;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("c1m serve did not come up on {}", serve.http);
}

fn bench(args: &[&str]) -> (i32, Value, String) {
    common::run_bench(args)
}

fn run_and_check(proto: &str, conns: u64) {
    let serve = start_serve();
    let url = format!("http://{}/sub/feed", serve.http);
    let n = conns.to_string();
    let (code, r, stdout) = bench(&[
        &url,
        "--proto",
        proto,
        "--tcp",
        &serve.tcp,
        "--conns",
        &n,
        "--channels",
        "4",
        "--rate",
        "2000",
        "--hold",
        "3s",
        "--publish-every",
        "200ms",
        "--drain",
        "1s",
        "--duration",
        "30s",
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(r["result"]["peak_online"], conns);
    assert_eq!(r["result"]["online_at_end"], conns);
    assert_eq!(r["errors_total"], 0);
    let d = &r["delivery"]["totals"];
    let published = r["publishing"]["published"].as_u64().unwrap();
    assert!(published >= 8, "published {published}");
    // Publishing starts after every subscriber is online, so each one is due every message
    // of its channel (long-poll: all but what came before its first answer).
    assert_eq!(d["received_in_window"], d["expected"], "{d}");
    assert_eq!(d["missing"], 0);
    assert_eq!(d["duplicates"], 0);
    assert_eq!(d["reordered"], 0);
    assert_eq!(d["id_regressions"], 0);
    if proto != "poll" {
        assert_eq!(
            d["expected"].as_u64().unwrap(),
            conns * published / 4,
            "{d}"
        );
    }
    assert_eq!(r["delivery"]["delivered_to_all"], true);
    let server = &r["memory"]["server"];
    assert!(
        server["peak"]["connections"].as_u64().unwrap() >= conns,
        "{server}"
    );
    assert!(server["pss_bytes_per_connection"].as_f64().unwrap() > 0.0);
}

#[test]
fn sse_against_serve() {
    run_and_check("sse", 400);
}

#[test]
fn poll_against_serve() {
    run_and_check("poll", 200);
}

#[test]
fn tcp_against_serve() {
    run_and_check("tcp", 400);
}

#[test]
fn status_url_reads_the_server_figures_where_serve_answers_them() {
    // With --admin-listen serve answers /status only on the admin address. Bench asked the
    // target's public port: a 404 that serve counts as refused.not_found, and a report without
    // the server's figures. --status-url names where to ask.
    let (server, admin) = crate::serve_cors_admin::start_with_admin(&["--workers", "1"]);
    let status_url = format!("http://{admin}/status");
    let run = |extra: &[&str]| {
        let url = server.url("/sub/st");
        let mut args = vec![
            url.as_str(),
            "--proto",
            "sse",
            "--conns",
            "50",
            "--rate",
            "1000",
            "--hold",
            "1s",
        ];
        args.extend_from_slice(extra);
        let (code, report, out) = common::run_bench(&args);
        assert_eq!(code, 0, "{out}");
        report
    };
    let not_found = || {
        let answer = common::raw_exchange(
            admin,
            b"GET /status HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        );
        let body = answer.split_once("\r\n\r\n").expect("a head").1;
        let v: Value = serde_json::from_str(body).expect("JSON status");
        v["refused"]["not_found"].as_u64().unwrap()
    };
    let with = run(&["--status-url", &status_url]);
    let server_figures = &with["memory"]["server"];
    assert!(
        server_figures["peak"]["connections"].as_u64().unwrap() >= 50,
        "{server_figures}"
    );
    assert!(server_figures["pss_bytes_per_connection"].as_f64().unwrap() > 0.0);
    assert_eq!(not_found(), 0, "bench asked a path serve does not answer");
    // Without it: no figures, one 404 per fetch (the behaviour --status-url exists for).
    let without = run(&[]);
    assert!(
        without["memory"]["server"].is_null(),
        "{}",
        without["memory"]
    );
    assert!(not_found() >= 1);
}

#[test]
fn batch_publishes_are_acknowledged_item_by_item_and_all_delivered() {
    // --publish-batch sends 25 messages per request to serve's /api/batch (NDJSON); each item's
    // result in the answer acknowledges it, so the delivery arithmetic is the same as for one
    // message per request: every subscriber gets every message of its channel once, in order.
    let serve = start_serve();
    let url = format!("http://{}/sub/room", serve.http);
    let (code, r, stdout) = bench(&[
        &url,
        "--scenario",
        "channels",
        "--channels",
        "50",
        "--conns",
        "200",
        "--rate",
        "2000",
        "--hold",
        "3s",
        "--publish-rate",
        "2000",
        "--publish-batch",
        "25",
        "--drain",
        "1s",
        "--duration",
        "30s",
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(r["errors_total"], 0, "{stdout}");
    let published = r["publishing"]["published"].as_u64().unwrap();
    assert!(published >= 100, "published {published}");
    assert_eq!(
        r["publishing"]["errors"],
        serde_json::json!({}),
        "{}",
        r["publishing"]
    );
    let d = &r["delivery"]["totals"];
    assert_eq!(d["missing"], 0, "{d}");
    assert_eq!(d["duplicates"], 0, "{d}");
    assert_eq!(d["reordered"], 0, "{d}");
    // 4 subscribers per channel, each due every message of its channel.
    assert_eq!(d["expected"].as_u64().unwrap(), published * 4, "{d}");
    assert_eq!(r["delivery"]["delivered_to_all"], true);
}

#[test]
fn batch_publishing_refuses_a_per_message_body_template() {
    let out = common::c1m()
        .args(["bench", "http://127.0.0.1:9/sub/room", "--conns", "1"])
        .args(["--publish-batch", "10", "--publish-body", "x{payload}"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--publish-batch"), "{stderr}");
}
