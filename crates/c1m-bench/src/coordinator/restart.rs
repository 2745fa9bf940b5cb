//! The coordinator's half of `--scenario reconnect-storm`: at the restart time it tells the
//! workers when the restart began and runs `--restart-cmd` on its own thread, and at the end it
//! kills a command still running. What the storm measures lives in [`crate::storm`].

use super::Workers;
use crate::run::{Msg, Run};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::time::Instant;

/// Reconnect storm: at `--restart-after` into the hold, tells the workers the restart time and
/// runs `--restart-cmd` on its own thread (or says that bench waits for a restart by hand).
pub(super) fn start(run: &mut Run, workers: &mut Workers, tx: &Sender<Msg>) {
    let before: u64 = run.publish_errors.values().sum();
    let Some(st) = run.storm.as_mut() else {
        return;
    };
    st.started = Some(Instant::now());
    st.publish_errors_before = before;
    let Some(cmd) = run.args.restart_cmd.clone() else {
        // The restart time is unknown: each worker takes its first drop as the reference.
        if !run.args.quiet {
            eprintln!("c1m bench: reconnect storm: waiting for the server to be restarted by hand");
        }
        return;
    };
    let line = format!("R {}\n", crate::payload::now_us());
    workers.broadcast(&line);
    if !run.args.quiet {
        eprintln!("c1m bench: reconnect storm: running --restart-cmd");
    }
    let tx = tx.clone();
    let pid = st.cmd_pid.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        // The command's output goes to bench's stderr: the summary on stdout stays clean.
        let result = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .stdin(Stdio::null())
            .stdout(std::io::stderr())
            .spawn()
            .and_then(|mut child| {
                pid.store(child.id(), Ordering::SeqCst);
                child.wait()
            })
            .map(|s| s.code())
            .map_err(|e| format!("could not run sh -c: {e}"));
        let _ = tx.send(Msg::RestartDone(result, t.elapsed().as_secs_f64()));
    });
}

/// A `--restart-cmd` still running when the run ends is killed (reported as not finished), so
/// bench leaves no process of its own behind.
pub(super) fn stop_cmd(run: &Run) {
    if let Some(st) = run.storm.as_ref().filter(|st| st.cmd_result.is_none()) {
        let pid = st.cmd_pid.load(Ordering::SeqCst);
        if pid != 0 {
            let _ = c1m_sys::process::kill(pid, libc::SIGKILL);
        }
    }
}
