//! `c1m bench` against a server that is not c1m: nginx + nchan (Debian's nginx-light and
//! libnginx-mod-nchan), started by each test from its own temp prefix on a loopback port.
//! Subscribers use URL templates, publishes go to nchan's publisher location (`--publish-url`,
//! or `--publish-cmd` running curl), and the delivery verdict must be right both ways: zero
//! loss reported as zero, and a channel whose publishes the server drops reported as loss.

use crate::common;

use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NCHAN_MODULE: &str = "/usr/lib/nginx/modules/ngx_nchan_module.so";

/// nginx in its own process group; dropping it stops master and workers (workers do not die
/// with their master on their own).
struct Nginx {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let pgid = self.child.id() as i32;
        // The group is nginx's own (process_group(0) at spawn), so this reaches only it.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{pgid}")])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts nginx with nchan: `/pub/{ch}` publishes, `/sub/{ch}` subscribes (SSE and
/// WebSocket), `/auth/sub/{ch}` subscribes only with `X-Bench: k-{ch}`, and publishes to a
/// channel `drop-…-2` go to a channel nobody subscribes to (the server "drops" them).
fn start_nchan() -> Nginx {
    use std::os::unix::process::CommandExt;
    assert!(
        std::path::Path::new(NCHAN_MODULE).exists() && std::path::Path::new("/usr/sbin/nginx").exists(),
        "nginx + nchan missing: scripts/install-test-deps.sh installs nginx-light and libnginx-mod-nchan"
    );
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("c1m-nchan-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let conf = format!(
        r#"load_module {NCHAN_MODULE};
daemon off;
master_process on;
worker_processes 1;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location ~ ^/pub/drop-(.+)-2$ {{ nchan_publisher; nchan_channel_id blackhole; }}
    location ~ ^/pub/(.+)$ {{ nchan_publisher; nchan_channel_id $1; }}
    location ~ ^/sub/(.+)$ {{ nchan_subscriber; nchan_channel_id $1; }}
    location ~ ^/auth/sub/(.+)$ {{
      if ($http_x_bench != "k-$1") {{ return 403; }}
      nchan_subscriber; nchan_channel_id $1;
    }}
    location = /healthz {{ return 200 "ok\n"; }}
  }}
}}
"#
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = Command::new("/usr/sbin/nginx")
        .arg("-p")
        .arg(&dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx { child, port, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return nginx;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default();
    panic!("nginx did not listen on {port}: {log}");
}

/// Runs `c1m bench ARGS`, publishing every 200 ms; returns exit code, report and stdout.
fn bench(args: &[&str]) -> (i32, Value, String) {
    let mut all = args.to_vec();
    all.extend(["--publish-every", "200ms"]);
    bench_raw(&all)
}

/// Runs `c1m bench ARGS --report FILE` (3 s hold); returns exit code, report and stdout.
fn bench_raw(args: &[&str]) -> (i32, Value, String) {
    let mut all = args.to_vec();
    all.extend(["--rate", "3000", "--hold", "3s", "--drain", "1s"]);
    all.extend(["--duration", "30s", "-q"]);
    common::run_bench(&all)
}

/// Every subscriber online, every message published while it was online delivered once.
fn assert_zero_loss(code: i32, r: &Value, stdout: &str, conns: u64, channels: u64) {
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(r["result"]["online_at_end"], conns, "{stdout}");
    assert_eq!(r["errors_total"], 0, "{stdout}");
    let published = r["publishing"]["published"].as_u64().unwrap();
    assert!(published >= 8, "published {published}");
    let d = &r["delivery"]["totals"];
    // publish-every sends each round to every channel: each subscriber is due 1/channels.
    assert_eq!(
        d["expected"].as_u64().unwrap(),
        conns * published / channels,
        "{d}"
    );
    assert_eq!(d["received_in_window"], d["expected"], "{d}");
    assert_eq!(d["missing"], 0, "{d}");
    assert_eq!(d["duplicates"], 0, "{d}");
    assert_eq!(d["reordered"], 0, "{d}");
    assert_eq!(r["delivery"]["delivered_to_all"], true);
}

#[test]
fn nchan_sse_and_websocket_zero_loss() {
    let n = start_nchan();
    let publish = format!("http://127.0.0.1:{}/pub/{{ch}}", n.port);
    for scheme in ["http", "ws"] {
        let url = format!("{scheme}://127.0.0.1:{}/sub/{scheme}-{{ch}}", n.port);
        let publish = publish.replace("{ch}", &format!("{scheme}-{{ch}}"));
        let (code, r, out) = bench(&[
            &url,
            "--conns",
            "300",
            "--channels",
            "3",
            "--publish-url",
            &publish,
        ]);
        assert_eq!(
            r["target"]["proto"],
            if scheme == "ws" { "ws" } else { "sse" }
        );
        assert_zero_loss(code, &r, &out, 300, 3);
        // Fresh channels: nothing from before the run.
        assert_eq!(r["delivery"]["totals"]["stale"], 0);
    }
}

/// Publishes to channel drop-bench-2 land in nginx's `blackhole` channel: its subscribers (a third)
/// get nothing, and bench must say so: exit 1, exactly their share missing.
#[test]
fn nchan_dropped_channel_is_reported_as_loss() {
    let n = start_nchan();
    let (code, r, out) = bench(&[
        &format!("http://127.0.0.1:{}/sub/drop-{{ch}}", n.port),
        "--conns",
        "300",
        "--channels",
        "3",
        "--publish-url",
        &format!("http://127.0.0.1:{}/pub/drop-{{ch}}", n.port),
    ]);
    assert_eq!(code, 1, "{out}");
    let d = &r["delivery"]["totals"];
    let expected = d["expected"].as_u64().unwrap();
    assert!(expected > 0, "{d}");
    assert_eq!(d["missing"].as_u64().unwrap(), expected / 3, "{d}");
    assert_eq!(r["delivery"]["delivered_to_all"], false);
    assert!(out.contains("delivered to all: NO"), "{out}");
}

/// Subscribe headers and publishing by command: `-H` with a per-channel template opens
/// nchan's guarded location, `--publish-cmd` publishes with curl. Without the header every
/// subscription is refused (HTTP 403), and that is counted, not hidden.
#[test]
fn nchan_headers_and_publish_cmd() {
    let n = start_nchan();
    let url = format!("http://127.0.0.1:{}/auth/sub/{{ch}}", n.port);
    let cmd = format!(
        "curl -fsS -o /dev/null --data-binary \"$2\" http://127.0.0.1:{}/pub/$1",
        n.port
    );
    let (code, r, out) = bench(&[
        &url,
        "--conns",
        "100",
        "--channels",
        "2",
        "-H",
        "X-Bench: k-{ch}",
        "--publish-cmd",
        &cmd,
    ]);
    assert_zero_loss(code, &r, &out, 100, 2);

    let (code, r, out) = bench(&[&url, "--conns", "50", "--publish-cmd", &cmd]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(r["errors"]["HTTP 403"], 50, "{out}");
}

/// nchan replays a channel's stored messages to a new subscriber. Messages stamped before the
/// run (an earlier run's) are counted as stale and must not disturb the accounting: before,
/// they advanced the sequence and this run's messages counted as duplicates and missing.
#[test]
fn nchan_replayed_history_is_stale() {
    let n = start_nchan();
    let mut s = TcpStream::connect(("127.0.0.1", n.port)).unwrap();
    for seq in 1..=5 {
        use std::io::{Read, Write};
        let body = format!("c1mb 0 {seq} 1000");
        write!(
            s,
            "POST /pub/old HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut buf = [0u8; 4096];
        let k = s.read(&mut buf).unwrap();
        assert!(
            buf[..k].starts_with(b"HTTP/1.1 20"),
            "{}",
            String::from_utf8_lossy(&buf[..k])
        );
    }
    let (code, r, out) = bench(&[
        &format!("http://127.0.0.1:{}/sub/old", n.port),
        "--conns",
        "40",
        "--publish-url",
        &format!("http://127.0.0.1:{}/pub/old", n.port),
    ]);
    assert_zero_loss(code, &r, &out, 40, 1);
    assert_eq!(r["delivery"]["totals"]["stale"], 40 * 5, "{out}");
}

/// `--scenario channels`: round-robin publishing as fast as nchan acknowledges, with the
/// scenario's own report section (publish rate over the publishing window, ack percentiles).
#[test]
fn nchan_channels_scenario_reports_publish_rate() {
    let n = start_nchan();
    let (code, r, out) = bench_raw(&[
        &format!("http://127.0.0.1:{}/sub/c{{ch}}", n.port),
        "--scenario",
        "channels",
        "--conns",
        "200",
        "--channels",
        "50",
        "--publish-url",
        &format!("http://127.0.0.1:{}/pub/c{{ch}}", n.port),
    ]);
    assert_eq!(code, 0, "{out}");
    let sc = &r["scenario"];
    assert_eq!(sc["name"], "channels");
    let published = r["publishing"]["published"].as_u64().unwrap();
    let rate = sc["publish_rate_per_s"].as_f64().unwrap();
    // Publishing ran for hold - drain = 2 s: the rate is what was acked in that window.
    assert!(published > 200, "{out}");
    assert!(
        (rate - published as f64 / 2.0).abs() < published as f64 * 0.1,
        "{rate} {published}"
    );
    assert!(sc["ack_p99_us"].as_u64().unwrap() > 0);
    assert_eq!(sc["missing"], 0);
    assert!(out.contains("channels   50 channels"), "{out}");
    // A scenario refuses options that would make it another shape.
    let bad = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .args([
            "bench",
            "http://127.0.0.1:1/sub/a",
            "--scenario",
            "fanout",
            "--channels",
            "4",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("one channel"));
}

/// `--scenario churn`: 200 held, 100/s closed and reopened during a 3 s hold while publishing
/// every 200 ms. Every reopen is a new subscription with its own window: nothing may go
/// missing, churn closes are not errors, and the count matches the rate.
#[test]
fn nchan_churn_scenario_loses_nothing() {
    let n = start_nchan();
    let (code, r, out) = bench(&[
        &format!("http://127.0.0.1:{}/sub/ch{{ch}}", n.port),
        "--scenario",
        "churn",
        "--churn-rate",
        "100",
        "--conns",
        "200",
        "--channels",
        "2",
        "--publish-url",
        &format!("http://127.0.0.1:{}/pub/ch{{ch}}", n.port),
    ]);
    assert_eq!(code, 0, "{out}");
    let sc = &r["scenario"];
    assert_eq!(sc["name"], "churn");
    let churned = sc["churned"].as_u64().unwrap();
    // 100/s over the ~3 s hold (workers start churning when their own ramp ends).
    assert!((200..=400).contains(&churned), "churned {churned}: {out}");
    assert_eq!(r["result"]["churned"], churned);
    assert!(
        r["result"]["subscribed"].as_u64().unwrap() >= 200 + churned - 5,
        "{out}"
    );
    assert_eq!(r["errors_total"], 0, "{out}");
    assert_eq!(r["delivery"]["totals"]["missing"], 0, "{out}");
    assert_eq!(r["delivery"]["totals"]["duplicates"], 0, "{out}");
    assert!(
        r["delivery"]["totals"]["expected"].as_u64().unwrap() > 1000,
        "{out}"
    );
    // Sampled every 250 ms: reopens take milliseconds, so a tick may or may not catch one.
    assert!(
        sc["online_min_during_hold"].as_u64().unwrap() <= 200,
        "{out}"
    );
    // Latency is that of due messages: nchan's history replay to a reopened connection (sent
    // before its window) must not show up as seconds of delivery latency.
    assert!(
        r["latency_us"]["delivery"]["p99_us"].as_u64().unwrap() < 1_000_000,
        "{out}"
    );
    assert!(out.contains("churn      200 held"), "{out}");
}
