//! `/metrics` as Prometheus reads it: after real load (SSE subscribers on two workers, HTTP
//! publishes), the body passes `promtool check metrics` (Debian package `prometheus`, installed
//! by scripts/install-test-deps.sh) and the latency histograms count exactly what was sent:
//! one publish_to_write sample per delivery, one publish_ack per publish, one fan_out per
//! message per worker with subscribers. Also: c1m_build_info and the per-worker gauges.

use crate::common;

use common::{Server, Sse};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SUBSCRIBERS: usize = 8;
const MESSAGES: u64 = 15;

/// The value of the sample line whose name and labels are exactly `series`.
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Polls /metrics until `pred` holds (workers report every 250 ms), at most 10 s.
fn wait_metrics(server: &Server, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = server.metrics();
        if pred(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "metrics never matched:\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_pass_promtool_and_histograms_count_what_was_sent() {
    let server = Server::start(&["--workers", "2"]);
    let mut subs: Vec<Sse> = (0..SUBSCRIBERS)
        .map(|_| Sse::connect(server.http, "/sub/m", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == SUBSCRIBERS as u64);
    for i in 0..MESSAGES {
        server.publish("m", format!("msg {i}").as_bytes());
    }
    for sub in &mut subs {
        for i in 0..MESSAGES {
            assert_eq!(sub.next().data, format!("msg {i}"));
        }
    }
    let deliveries = SUBSCRIBERS as f64 * MESSAGES as f64;
    let body = wait_metrics(&server, |b| {
        sample(b, "c1m_publish_to_write_seconds_count") == Some(deliveries)
            && sample(b, "c1m_publish_ack_seconds_count") == Some(MESSAGES as f64)
    });

    // Exact counts, and +Inf bucket = count.
    for name in ["publish_to_write", "publish_ack", "fan_out"] {
        let count = sample(&body, &format!("c1m_{name}_seconds_count")).unwrap();
        let inf = sample(&body, &format!("c1m_{name}_seconds_bucket{{le=\"+Inf\"}}")).unwrap();
        assert_eq!(count, inf, "{name}");
        assert!(
            sample(&body, &format!("c1m_{name}_seconds_sum")).unwrap() > 0.0,
            "{name}"
        );
    }
    // One fan-out per message on each worker that holds subscribers (one or both of two).
    let fan_outs = sample(&body, "c1m_fan_out_seconds_count").unwrap();
    assert!(
        fan_outs == MESSAGES as f64 || fan_outs == 2.0 * MESSAGES as f64,
        "fan_out count {fan_outs}"
    );
    // Loopback delivery is far under 10 s: everything is in a finite bucket.
    assert_eq!(
        sample(&body, "c1m_publish_to_write_seconds_bucket{le=\"10\"}"),
        Some(deliveries)
    );
    // No TLS: no TLS histogram.
    assert!(!body.contains("c1m_tls_handshake_seconds_bucket"));

    // Build info with the version and commit `c1m --version` prints.
    let version = common::c1m().arg("--version").output().unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let info = body
        .lines()
        .find(|l| l.starts_with("c1m_build_info{"))
        .expect("c1m_build_info");
    let pkg = env!("CARGO_PKG_VERSION");
    assert!(info.starts_with(&format!("c1m_build_info{{version=\"{pkg}\",commit=\"")));
    assert!(info.ends_with("} 1"), "{info}");
    let commit = info
        .split("commit=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        version.contains(&format!("(commit {commit})")),
        "{version} vs {info}"
    );

    // Per-worker gauges: both workers, connections summing to the SSE subscribers (at least).
    let conns: f64 = (0..2)
        .map(|w| sample(&body, &format!("c1m_worker_connections{{worker=\"{w}\"}}")).unwrap())
        .sum();
    assert!(conns >= SUBSCRIBERS as f64, "{conns}");
    for w in 0..2 {
        let rss = sample(
            &body,
            &format!("c1m_worker_memory_rss_bytes{{worker=\"{w}\"}}"),
        )
        .unwrap();
        assert!(rss > 1e6, "worker {w} rss {rss}");
        assert!(sample(&body, &format!("c1m_worker_unsent_bytes{{worker=\"{w}\"}}")).is_some());
    }

    // /status carries the same counts as summaries.
    let status = server.status();
    assert_eq!(
        status["latency"]["publish_to_write"]["count"],
        deliveries as u64
    );
    assert_eq!(status["latency"]["publish_ack"]["count"], MESSAGES);
    assert!(
        status["latency"]["publish_to_write"]["p99_le_us"]
            .as_u64()
            .unwrap()
            >= 10
    );
    assert_eq!(status["subscribes"], SUBSCRIBERS as u64);

    // Prometheus's own checker (syntax and naming lint) accepts the whole body.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool (Debian package prometheus) is installed by scripts/install-test-deps.sh",
        );
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Kills the server even when an assertion fails.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn start_line_and_log_explain_the_workers_choice() {
    let mut cmd = common::c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--max-conns", "60000"])
        .stderr(Stdio::piped());
    let (child, banner) = common::spawn_for_banner(cmd);
    let mut child = Killed(child);
    // 60000 connections (+5%) over 19936 per process at this machine's 20000 fd limit need 4
    // processes; with fewer cores than that, the fd limit decides.
    let cpus = std::thread::available_parallelism().unwrap().get();
    let expected = if cpus < 4 {
        "workers auto: 4 workers because 60000 connections (+5% spread slack) / 19936 per process (fd limit 20000 - 64 reserved) > ".to_string()
    } else {
        format!("workers auto: {cpus} workers = {cpus} cores (60000 connections need 4 process(es)")
    };
    assert!(
        banner.starts_with("c1m serve: listening on http 127.0.0.1:"),
        "{banner}"
    );
    assert!(banner.contains(&expected), "{banner}");
    // Read on a thread so a missing line fails after 5 s instead of hanging.
    let log = common::collect_stderr(&mut child.0)
        .wait_for("workers auto:", Duration::from_secs(5))
        .expect("a log line explaining --workers auto");
    assert!(log.contains(&expected), "{log}");
}
