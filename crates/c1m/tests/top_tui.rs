//! `c1m top` on a real terminal: tmux gives it a pty (as ssh would), the test reads the drawn
//! screen with capture-pane, presses `q`, and checks that it quit with status 0.

use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_c1m");

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("running tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls the pane (bounded) until `pred` holds; returns the last capture.
fn wait_for(session: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let screen = tmux(&["capture-pane", "-p", "-t", session]);
        if pred(&screen) {
            return screen;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{screen}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills the tmux session (and the `c1m top` in it) even when an assertion fails: a failed run
/// used to leave top running for good.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

#[test]
fn top_draws_and_quits_on_q() {
    let session = format!("c1m-top-test-{}", std::process::id());
    let done = std::env::temp_dir().join(format!("{session}.exit"));
    let _ = std::fs::remove_file(&done);
    // The shell records top's exit status, then waits so the pane stays readable.
    let cmd = format!(
        "{BIN} top --interval 300ms --doctor-every 300ms; echo $? > {}; sleep 30",
        done.display()
    );
    let st = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "120",
            "-y",
            "40",
            &cmd,
        ])
        .status()
        .expect("starting tmux");
    assert!(st.success());
    let _kill = Session(session.clone());
    let screen = wait_for(&session, "the first frame", |s| {
        s.contains("c1m top") && s.contains("STATE") && s.contains("TCP counters")
    });
    assert!(screen.contains("(q quits)"), "{screen}");
    assert!(screen.contains("file handles"), "{screen}");
    // The doctor's first run lands on a later tick and titles its panel.
    wait_for(&session, "the doctor panel", |s| {
        s.contains("doctor: all checks pass") || s.contains("doctor findings")
    });
    tmux(&["send-keys", "-t", &session, "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = std::fs::read_to_string(&done).expect("top did not quit on q");
    let _ = std::fs::remove_file(&done);
    assert_eq!(status.trim(), "0");
}
