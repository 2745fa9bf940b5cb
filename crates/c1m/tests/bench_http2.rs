//! `c1m bench --http2` against the real `c1m serve`: one TCP connection carries
//! `--streams-per-conn` SSE streams, over h2c (prior knowledge) and over TLS with ALPN h2; every
//! stream is a subscriber whose messages are accounted as an HTTP/1.1 subscriber's are, and
//! the server's own counters confirm it saw HTTP/2 connections, not HTTP/1.1 ones.

use crate::common::{self, Server};
use crate::tls_support::{path_str, TestPki, TlsServer};

/// Bench arguments for `conns` connections of 5 streams on 2 channels, publishing.
fn args(url: &str, conns: &str) -> Vec<String> {
    [
        url,
        "--http2",
        "--streams-per-conn",
        "5",
        "--conns",
        conns,
        "--channels",
        "2",
        "--rate",
        "1000",
        "--hold",
        "3s",
        "--publish-every",
        "200ms",
        "--drain",
        "1s",
        "--duration",
        "40s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Every stream of every connection got every message published on its channel, once.
fn check_delivery(code: i32, r: &serde_json::Value, stdout: &str, conns: u64) {
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(r["result"]["peak_online"], conns, "{stdout}");
    assert_eq!(r["errors_total"], 0, "{}", r["errors"]);
    let d = &r["delivery"]["totals"];
    let published = r["publishing"]["published"].as_u64().unwrap();
    assert!(published >= 8, "published {published}");
    assert_eq!(d["missing"], 0, "{d}");
    assert_eq!(d["duplicates"], 0, "{d}");
    assert_eq!(d["wrong_channel"], 0, "{d}");
    // 5 streams per connection, half of the subscribers on each channel.
    assert_eq!(
        d["expected"].as_u64().unwrap(),
        conns * 5 * published / 2,
        "{d}"
    );
    assert_eq!(d["received_in_window"], d["expected"], "{d}");
    assert_eq!(r["delivery"]["delivered_to_all"], true);
}

#[test]
fn bench_http2_carries_many_sse_streams_per_h2c_connection() {
    let srv = Server::start(&["--workers", "2", "--max-conns", "10000"]);
    let url = format!("http://{}/sub/feed", srv.http);
    let a = args(&url, "20");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, r, stdout) = common::run_bench(&a);
    check_delivery(code, &r, &stdout, 20);
    // Workers report to the master on their own schedule: wait for the figures.
    let s = srv.wait_status(|s| s["http2"]["connections"].as_u64() >= Some(20));
    assert_eq!(s["http2"]["connections"], 20, "{}", s["http2"]);
    assert_eq!(s["http2"]["streams"], 100, "{}", s["http2"]);
}

#[test]
fn bench_http2_over_tls_negotiates_h2_by_alpn() {
    let pki = TestPki::new("bench-h2");
    let leaf = pki.leaf("c1m-bench-h2");
    let server = TlsServer::start(&leaf, &pki, &["--workers", "2", "--max-conns", "10000"]);
    let url = format!("https://{}/sub/feed", server.http);
    let mut a = args(&url, "10");
    a.extend(["--ca".to_string(), path_str(&pki.ca_pem).to_string()]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (code, r, stdout) = common::run_bench(&a);
    check_delivery(code, &r, &stdout, 10);
    let s = server.wait_status(&pki, |s| s["http2"]["connections"].as_u64() >= Some(10));
    assert_eq!(s["http2"]["connections"], 10, "{}", s["http2"]);
    assert_eq!(s["http2"]["streams"], 50, "{}", s["http2"]);
}

#[test]
fn bench_http2_refuses_what_it_cannot_carry() {
    for (extra, want) in [
        (&["--proto", "ws"][..], "--http2 carries SSE streams only"),
        (
            &["--streams-per-conn", "101"][..],
            "--streams-per-conn must be between 1 and 100",
        ),
        (
            &["--churn-resume"][..],
            "--http2 does not support resuming clients",
        ),
    ] {
        let out = common::c1m()
            .args(["bench", "http://127.0.0.1:9/sub/a", "--http2"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
}
