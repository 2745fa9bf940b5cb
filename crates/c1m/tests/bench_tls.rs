//! `c1m bench` against `c1m serve --tls-cert` on loopback (the README's production layout):
//! `https://` (SSE) and `wss://` targets, the certificate issued by a throw-away test CA that
//! bench is told about with `--ca`; every subscriber comes online over TLS and every message
//! published (over TLS too) arrives exactly once. Without `--ca` the same certificate is refused
//! (verification is never skipped) and the report says why.

use crate::common;
use crate::tls_support;

use tls_support::{path_str, TestPki, TlsServer};

fn bench_over_tls(scheme: &str, proto: &str, conns: u64) {
    let pki = TestPki::new(&format!("bench-{proto}"));
    let leaf = pki.leaf("c1m-bench");
    let server = TlsServer::start(&leaf, &pki, &["--workers", "2", "--max-conns", "10000"]);
    let url = format!("{scheme}://{}/sub/feed", server.http);
    let n = conns.to_string();
    let (code, r, stdout) = common::run_bench(&[
        &url,
        "--ca",
        path_str(&pki.ca_pem),
        "--proto",
        proto,
        "--conns",
        &n,
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
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(r["result"]["peak_online"], conns, "{stdout}");
    assert_eq!(r["errors_total"], 0, "{}", r["errors"]);
    let d = &r["delivery"]["totals"];
    let published = r["publishing"]["published"].as_u64().unwrap();
    assert!(published >= 8, "published {published}");
    assert_eq!(d["missing"], 0, "{d}");
    assert_eq!(d["duplicates"], 0, "{d}");
    assert_eq!(
        d["expected"].as_u64().unwrap(),
        conns * published / 2,
        "{d}"
    );
    assert_eq!(d["received_in_window"], d["expected"], "{d}");
    assert_eq!(r["delivery"]["delivered_to_all"], true);
    // The server's figures were read over TLS too (its /status is on the TLS port).
    assert!(
        r["memory"]["server"]["peak"]["connections"]
            .as_u64()
            .unwrap()
            >= conns,
        "{}",
        r["memory"]["server"]
    );
    let status = server.status(&pki);
    assert!(
        status["tls"]["handshakes"].as_u64().unwrap() >= conns,
        "every subscriber spoke TLS: {}",
        status["tls"]
    );
}

#[test]
fn bench_sse_over_https_delivers_every_message() {
    bench_over_tls("https", "sse", 300);
}

#[test]
fn bench_websocket_over_wss_delivers_every_message() {
    bench_over_tls("wss", "ws", 300);
}

#[test]
fn bench_refuses_a_certificate_it_cannot_verify() {
    let pki = TestPki::new("bench-untrusted");
    let leaf = pki.leaf("c1m-bench");
    let server = TlsServer::start(&leaf, &pki, &["--workers", "1"]);
    let url = format!("https://{}/sub/feed", server.http);
    // No --ca: the system's roots do not know the test CA.
    let (code, r, stdout) = common::run_bench(&[
        &url,
        "--conns",
        "5",
        "--hold",
        "1s",
        "--duration",
        "15s",
        "--quiet",
    ]);
    assert_ne!(code, 0, "{stdout}");
    assert_eq!(r["result"]["peak_online"], 0, "{stdout}");
    let errors = r["errors"].to_string();
    assert!(
        errors.contains("TLS: invalid peer certificate"),
        "the report says why: {errors}"
    );
    // A CA file that is not one is an error before anything is opened.
    let out = common::c1m()
        .args(["bench", &url, "--ca", path_str(&leaf.key)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--ca"), "{stderr}");
}
