//! The short soak: bench/soak.sh for 30 s at a small scale, as CI can afford. Real clients
//! (two `c1m bench` processes) churn with resume, publish to many channels and fan out to
//! one, against a real `c1m serve`; the script's verdict must hold: every due message
//! delivered exactly once, no connection left once the clients are gone, and the server's
//! process tree back to the file descriptors it had before the run (a leaked socket or pipe
//! shows here). Memory flatness is judged only by the long run (bench/soak.sh, 60 minutes).
//! A 5 s publish timeout makes bench's workers pin their delivery windows and drop old
//! publishes from their logs during the run (after the timeout + 10 s), so the verdict also
//! checks the accounting across that trim.

use std::net::TcpListener;
use std::process::Command;

#[test]
fn a_short_soak_loses_nothing_and_leaks_no_descriptor() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::temp_dir().join(format!("c1m-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // A free port for the script's server (it takes a fixed one).
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let run = Command::new("timeout")
        .args(["180", "bash"])
        .arg(root.join("bench/soak.sh"))
        .arg("30s")
        .env("C1M", env!("CARGO_BIN_EXE_c1m"))
        .env("OUT_DIR", &out)
        .env("PORT", port.to_string())
        .env("SUBS", "2000")
        .env("CHANNELS", "50")
        .env("CHURN", "100")
        .env("PUBS", "200")
        .env("FANOUT_SUBS", "300")
        .env("EVERY", "2s")
        .env("BENCH_ARGS", "--publish-timeout 5s")
        .output()
        .unwrap();
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap_or_default();
    assert!(
        run.status.success(),
        "soak.sh: {}\n{}\n{summary}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let s: serde_json::Value = serde_json::from_str(&summary).unwrap();
    for check in [
        "churn_delivered_exactly_once",
        "fanout_delivered_exactly_once",
        "no_connection_left",
        "fds_back_to_before",
    ] {
        assert_eq!(s["checks"][check], true, "{check}: {s}");
    }
    // The churn really happened, with resumes, and deliveries were counted.
    let resume = &s["churn"]["scenario"]["resume"];
    assert!(resume["left"].as_u64() >= Some(1000), "{s}");
    assert_eq!(resume["reconnects_without_id"], 0, "{s}");
    assert!(
        s["churn"]["delivery"]["expected"].as_u64() >= Some(100_000),
        "{s}"
    );
    assert!(s["server_timeline_samples"].as_u64() >= Some(5), "{s}");
    let _ = std::fs::remove_dir_all(&out);
}
