//! Logs as an operator ships them: `--log-format json` gives one JSON object per
//! line with an RFC 3339 timestamp, a level, the message and its fields, and the worker's index
//! and pid on worker lines; lifecycle events are logged once each, messages never, and a flood
//! of bad requests becomes one summary warning instead of a line per request.

use crate::common;
use common::*;
use std::time::Duration;

fn parse(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// `2026-11-23T13:40:00.123456Z`: RFC 3339 in UTC.
fn is_rfc3339_utc(ts: &str) -> bool {
    let b = ts.as_bytes();
    ts.len() >= 20
        && ts.ends_with('Z')
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && ts[..4].parse::<u32>().is_ok_and(|y| y >= 2024)
}

#[test]
fn json_logs_carry_fields_and_stay_quiet_per_message() {
    let mut cmd = c1m();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--log-format",
        "json",
    ]);
    let (mut server, logs) = Server::spawn_capturing_stderr(cmd);
    let listening = logs
        .wait_for("\"listening\"", Duration::from_secs(5))
        .expect("a start-up line");
    let v = parse(&listening);
    assert_eq!(v["level"], "INFO", "{v}");
    assert!(is_rfc3339_utc(v["timestamp"].as_str().unwrap()), "{v}");
    assert_eq!(v["fields"]["workers"], 2, "{v}");
    assert_eq!(v["span"]["name"], "master", "{v}");

    // 300 messages to a subscriber: not one log line for them.
    let before = logs.snapshot().len();
    let mut sub = Sse::connect(server.http, "/sub/logs", "");
    for i in 0..300 {
        server.publish("logs", format!("m{i}").as_bytes());
    }
    for _ in 0..300 {
        sub.next();
    }
    assert_eq!(logs.snapshot().len(), before, "{:#?}", logs.snapshot());

    // 60 bad requests: counted, and summed into one warning (written within 10 s + a tick).
    for _ in 0..60 {
        let answer = raw_exchange(server.http, b"NONSENSE\r\n\r\n");
        assert_eq!(status_code(&answer), 400, "{answer}");
    }
    let summary = logs
        .wait_for("connections or requests refused", Duration::from_secs(13))
        .expect("a refusal summary");
    let v = parse(&summary);
    assert_eq!(v["level"], "WARN", "{v}");
    assert!(
        v["fields"]["refused"]
            .as_str()
            .unwrap()
            .contains("bad_request +60"),
        "{v}"
    );
    let summaries = logs
        .snapshot()
        .iter()
        .filter(|l| l.contains("connections or requests refused"))
        .count();
    assert_eq!(summaries, 1);

    // A worker killed: one line naming it, with its pid and how it ended.
    let victim = server.worker_pids()[0];
    c1m_sys::process::kill(victim, libc::SIGKILL).unwrap();
    let exited = logs
        .wait_for("worker exited; restarting", Duration::from_secs(5))
        .expect("a worker-exit line");
    let v = parse(&exited);
    assert_eq!(v["fields"]["pid"], victim, "{v}");
    assert!(
        v["fields"]["status"].as_str().unwrap().contains("SIGKILL")
            || v["fields"]["status"].as_str().unwrap().contains("9"),
        "{v}"
    );

    server.signal(libc::SIGTERM);
    server.wait_exit(Duration::from_secs(15));
    let all = logs.snapshot();
    assert!(all.iter().any(|l| l.contains("shutting down")), "{all:#?}");
    assert!(all.iter().any(|l| l.contains("\"stopped\"")), "{all:#?}");
    for line in &all {
        let v = parse(line);
        assert!(is_rfc3339_utc(v["timestamp"].as_str().unwrap()), "{line}");
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
        // Worker lines say which worker wrote them.
        if v["span"]["name"] == "worker" {
            assert!(
                v["span"]["n"].is_u64() && v["span"]["pid"].is_u64(),
                "{line}"
            );
        }
    }
    // Lifecycle only: start, summary, exit, shutdown, stop, and the workers' drain lines.
    assert!(all.len() < 20, "{all:#?}");
}

#[test]
fn text_logs_start_with_a_timestamp_and_a_level() {
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"]);
    let (_server, logs) = Server::spawn_capturing_stderr(cmd);
    let line = logs
        .wait_for("listening", Duration::from_secs(5))
        .expect("a start-up line");
    let (ts, rest) = line.split_once(' ').unwrap();
    assert!(is_rfc3339_utc(ts), "{line}");
    assert!(rest.trim_start().starts_with("INFO"), "{line}");
    assert!(rest.contains("workers=1"), "{line}");
}

#[test]
fn a_bad_log_level_is_a_config_problem() {
    let out = c1m()
        .args(["serve", "--check-config", "--log-level", "c1m=loudest"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--log-level"));
}

/// Every line of a stream, read by a thread (so the server never blocks on a full pipe).
fn collect_lines(
    from: impl std::io::Read + Send + 'static,
) -> std::thread::JoinHandle<Vec<String>> {
    use std::io::BufRead;
    std::thread::spawn(move || {
        std::io::BufReader::new(from)
            .lines()
            .map_while(Result::ok)
            .collect()
    })
}

#[test]
fn json_mode_writes_only_json_on_stdout_and_stderr_banner_included() {
    use std::io::BufRead;
    let mut child = c1m()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tcp-listen",
            "127.0.0.1:0",
        ])
        .args(["--admin-listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--log-format", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = collect_lines(child.stderr.take().unwrap());
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let stdout = collect_lines(stdout);
    let (http, tcp) = common::parse_banner(&first)
        .unwrap_or_else(|| panic!("no banner the harness can read: {first:?}"));
    let admin = common::parse_banner_admin(&first).expect("the admin address");
    let mut server = Server { child, http, tcp };

    // The banner is one JSON log event with the addresses as fields.
    let banner = parse(&first);
    assert_eq!(banner["level"], "INFO", "{banner}");
    assert!(
        is_rfc3339_utc(banner["timestamp"].as_str().unwrap()),
        "{banner}"
    );
    let fields = &banner["fields"];
    assert_eq!(fields["http"], http.to_string(), "{banner}");
    assert_eq!(fields["tcp"], tcp.unwrap().to_string(), "{banner}");
    assert_eq!(fields["admin"], admin.to_string(), "{banner}");
    assert_eq!(fields["workers"], 1, "{banner}");
    let why = fields["workers_reason"].as_str().unwrap();
    assert_eq!(why, "set: 1 (from flag --workers)", "{banner}");

    // Served: a refusal and a publish, then a clean stop.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while ureq::get(&format!("http://{admin}/healthz"))
        .call()
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "admin /healthz never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(status_code(&raw_exchange(http, b"NONSENSE\r\n\r\n")), 400);
    server.publish("logs", b"one");
    server.signal(libc::SIGTERM);
    server.wait_exit(Duration::from_secs(15));

    let out = stdout.join().unwrap();
    let err = stderr.join().unwrap();
    assert!(out.is_empty(), "stdout holds the banner alone: {out:#?}");
    assert!(err.iter().any(|l| l.contains("\"stopped\"")), "{err:#?}");
    for line in &err {
        let v = parse(line);
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
}

#[test]
fn the_banner_says_where_workers_came_from_and_warns_when_they_cannot_hold_max_conns() {
    let dir = std::env::temp_dir().join(format!("c1m-workers-from-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("serve.toml");
    std::fs::write(&file, "workers = 1\nmax_conns = 5000\n").unwrap();
    // A hard fd limit of 1024 (dash's `ulimit -n` sets both) cannot hold 5000 connections in
    // one worker.
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -n 1024 && exec \"$0\" serve --listen 127.0.0.1:0 --config \"$1\"")
        .arg(env!("CARGO_BIN_EXE_c1m"))
        .arg(&file);
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = collect_lines(child.stderr.take().unwrap());
    let mut banner = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut banner,
    )
    .unwrap();
    let (http, _) = common::parse_banner(&banner).expect("a banner");
    let mut server = Server {
        child,
        http,
        tcp: None,
    };
    assert!(
        banner.contains("(fd limit 1024); workers set: 1 (from the --config file)"),
        "{banner}"
    );
    assert!(!banner.contains("--workers"), "{banner}");
    assert!(!banner.contains("TLS"), "{banner}");
    // Serving (signal handlers in place) before it is stopped.
    server.wait_status(|_| true);
    server.signal(libc::SIGTERM);
    server.wait_exit(Duration::from_secs(15));
    let err = stderr.join().unwrap();
    let warning = err
        .iter()
        .find(|l| l.contains("hold at most"))
        .unwrap_or_else(|| panic!("no capacity warning: {err:#?}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("under --max-conns 5000"), "{warning}");
    std::fs::remove_dir_all(dir).unwrap();
}
