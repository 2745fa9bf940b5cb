//! `c1m_tls_handshake_seconds`: with `--tls-cert`, every completed handshake is one sample, so
//! within one /metrics body the histogram's count equals `c1m_tls_handshakes_total{result="done"}`
//! (each /status and /metrics request below is itself a fresh TLS connection).

use crate::tls_support;

use tls_support::{https, TestPki, TlsServer};

fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn tls_handshake_histogram_counts_every_handshake() {
    let pki = TestPki::new("metrics");
    let leaf = pki.leaf("server");
    let srv = TlsServer::start(&leaf, &pki, &["--workers", "1"]);
    // Several handshakes, reported (every 250 ms) before /metrics is read.
    srv.wait_status(&pki, |s| s["tls"]["handshakes"].as_u64() >= Some(3));
    let answer = https(&pki, srv.http, "GET", "/metrics", b"");
    let (_, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    let done = sample(body, "c1m_tls_handshakes_total{result=\"done\"}").unwrap();
    let count = sample(body, "c1m_tls_handshake_seconds_count").unwrap();
    assert!(done >= 3.0, "{body}");
    assert_eq!(count, done, "{body}");
    assert_eq!(
        sample(body, "c1m_tls_handshake_seconds_bucket{le=\"+Inf\"}"),
        Some(count)
    );
    assert!(sample(body, "c1m_tls_handshake_seconds_sum").unwrap() > 0.0);
}
