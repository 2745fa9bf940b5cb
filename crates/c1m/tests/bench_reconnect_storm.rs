//! `c1m bench --scenario reconnect-storm` against the real `c1m serve` on loopback, restarted
//! under its subscribers by bench's `--restart-cmd` hook:
//! - the workers are killed (the master restarts them; its history survives): every subscriber
//!   comes back, resumes by Last-Event-ID with a replay, nothing lost or duplicated, exit 0;
//! - the whole server is killed and started anew on the same port (its in-memory history is
//!   gone, ids start again at its start time): gaps are reported, exit 1;
//! - a WebSocket `?format=plain` subscription (no ids, so no resume): what was missed while away
//!   counts as lost, the resume is reported as not verifiable, exit 1.
//!
//! Every process is bounded: bench by `--hold`/`--duration`, the servers by drop guards (the
//! one the hook starts writes its pid to a file the guard reads).

use crate::common;

use common::Server;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Kills the server a restart hook started (pid in a file), also when the test panics.
struct PidFileGuard(PathBuf);

impl Drop for PidFileGuard {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(&self.0) {
            if let Ok(pid) = text.trim().parse::<u32>() {
                // Its workers die with it (PR_SET_PDEATHSIG).
                let _ = c1m_sys::process::kill(pid, libc::SIGKILL);
            }
        }
        let _ = std::fs::remove_file(&self.0);
    }
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("c1m-storm-{}-{name}", std::process::id()))
}

/// Runs the storm against `url` with `restart_cmd`; returns exit code, report, summary.
fn storm(url: &str, restart_cmd: &str, extra: &[&str]) -> (i32, Value, String) {
    let report = scratch(&format!("report-{}.json", extra.len()));
    let out = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .arg("bench")
        .arg(url)
        .args([
            "--scenario",
            "reconnect-storm",
            "--conns",
            "200",
            "--rate",
            "0",
        ])
        .args([
            "--hold",
            "5s",
            "--restart-after",
            "1500ms",
            "--duration",
            "30s",
        ])
        .args(["--publish-every", "50ms"])
        // Subscribers stay away 0.5–1 s, longer than the restarted workers take to listen, so
        // messages are acknowledged while they are away: a resume must replay them.
        .args(["--reconnect-min", "1s", "--reconnect-max", "2s", "-q"])
        .args(["--restart-cmd", restart_cmd])
        .args(extra)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report ({e}):\n{stdout}\n{stderr}"));
    let _ = std::fs::remove_file(&report);
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(&text).unwrap(),
        stdout,
    )
}

fn kill_workers_cmd(serve: &Server) -> String {
    let pids: Vec<String> = serve.worker_pids().iter().map(u32::to_string).collect();
    format!("kill -9 {}", pids.join(" "))
}

#[test]
fn workers_restarted_with_history_kept_every_subscriber_resumes_exactly() {
    let serve = Server::start(&["--workers", "2"]);
    let url = serve.url("/sub/storm");
    let (code, r, stdout) = storm(&url, &kill_workers_cmd(&serve), &[]);
    let s = &r["scenario"];
    assert_eq!(s["name"], "reconnect-storm");
    assert_eq!(s["restart_cmd"]["exit_code"], 0, "{stdout}");
    assert_eq!(s["dropped"], 200, "every subscriber was cut: {s}");
    assert_eq!(s["back_online"], 200, "{s}");
    assert_eq!(s["still_away"], 0, "{s}");
    assert_eq!(s["caught_up"], 200, "{s}");
    assert!(s["back_max_us"].as_u64().unwrap() > 0, "{s}");
    assert!(
        s["caught_up_max_us"].as_u64().unwrap() >= s["back_p50_us"].as_u64().unwrap(),
        "{s}"
    );
    // Exact resume: what was acknowledged while they were away came back by replay, once.
    assert!(s["resumed_with_replay"].as_u64().unwrap() > 0, "{s}");
    assert!(s["replayed_messages"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["gapped"], 0, "{s}");
    assert_eq!(s["gap_notices"], 0, "{s}");
    // Windows stay open across the restart: every acknowledged message (all were sent after
    // the ramp) was due on every subscriber, including those sent while it was away.
    let published = r["publishing"]["published"].as_u64().unwrap();
    assert!(published > 20, "{r}");
    assert_eq!(s["expected"].as_u64().unwrap(), 200 * published, "{s}");
    assert_eq!(s["lost"], 0, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    assert_eq!(s["reconnects_without_id"], 0, "{s}");
    assert_eq!(s["all_back_and_caught_up"], true, "{s}");
    assert!(
        stdout.contains("storm      --restart-cmd exit 0"),
        "{stdout}"
    );
    assert_eq!(code, 0, "{stdout}");
}

#[test]
fn server_restarted_without_its_history_reports_gaps_and_exit_1() {
    let serve = Server::start(&["--workers", "1"]);
    let port = serve.http.port();
    let pid_file = scratch("restarted.pid");
    let _guard = PidFileGuard(pid_file.clone());
    // Kill the whole server, start a new one on the same port (its output to a file, so that
    // nothing holds bench's pipes open), and leave its pid for the guard.
    let log = scratch("restarted.log");
    let cmd = format!(
        "kill -9 {old}; sleep 0.2; {bin} serve --listen 127.0.0.1:{port} --workers 1 >{log} 2>&1 & echo $! >{pid}",
        old = serve.child.id(),
        bin = env!("CARGO_BIN_EXE_c1m"),
        log = log.display(),
        pid = pid_file.display(),
    );
    let url = serve.url("/sub/storm");
    let (code, r, stdout) = storm(&url, &cmd, &[]);
    let _ = std::fs::remove_file(&log);
    let s = &r["scenario"];
    assert_eq!(s["restart_cmd"]["exit_code"], 0, "{stdout}");
    assert_eq!(s["dropped"], 200, "{s}");
    assert_eq!(s["still_away"], 0, "everyone reached the new server: {s}");
    assert_eq!(s["caught_up"], 200, "{s}");
    // The new server holds nothing before its start: every resume gets a gap.
    assert_eq!(s["gapped"], 200, "{s}");
    assert!(s["gap_notices"].as_u64().unwrap() >= 200, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    assert_eq!(r["delivery"]["delivered_to_all"], false);
    assert!(stdout.contains("delivered to all: NO"), "{stdout}");
    assert_eq!(code, 1, "gaps mean not everything was delivered: {stdout}");
    assert!(
        Path::new(&pid_file).exists(),
        "the hook started a new server"
    );
}

#[test]
fn server_without_ids_cannot_resume_and_its_outage_counts_as_lost() {
    let serve = Server::start(&["--workers", "2"]);
    // format=plain: bare payload frames, no ids, so no resume and no gap notices. (A template:
    // bench keeps the query of a URL with {ch}; the channel is then `bench`.)
    let url = serve.url("/sub/{ch}?format=plain");
    let (code, r, stdout) = storm(&url, &kill_workers_cmd(&serve), &["--proto", "ws"]);
    let s = &r["scenario"];
    assert_eq!(s["dropped"], 200, "{s}");
    assert_eq!(s["back_online"], 200, "{s}");
    assert_eq!(s["reconnects_without_id"], 200, "{s}");
    assert_eq!(s["resumed_with_replay"], 0, "{s}");
    // Messages acknowledged while they were away never reached them: lost, not delivered.
    assert!(s["lost"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["all_back_and_caught_up"], false, "{s}");
    assert!(
        stdout.contains("resume NOT VERIFIABLE for 200 reconnects"),
        "{stdout}"
    );
    assert_eq!(code, 1, "{stdout}");
}
