//! The worker processes seen from the coordinator: starting them (the current binary
//! re-executed as `c1m __bench-worker`, its [`WorkerConfig`] in the environment), turning their
//! stdout report lines into [`Msg`]s, writing command lines to their stdin, and making sure
//! none outlives the run. The line formats themselves are described in [`crate::wire`].

use crate::run::Msg;
use crate::wire::{WorkerConfig, WorkerReport, CONFIG_ENV};
use anyhow::Context;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Sender;

/// One running worker; `stdin` is None once a write to it failed (the worker is gone).
pub(super) struct WorkerProc {
    child: Child,
    pub(super) stdin: Option<ChildStdin>,
}

pub(super) fn spawn(configs: &[WorkerConfig], tx: &Sender<Msg>) -> anyhow::Result<Vec<WorkerProc>> {
    let exe = std::env::current_exe().context("find own executable to start workers")?;
    let mut procs = Vec::with_capacity(configs.len());
    for cfg in configs {
        let json = serde_json::to_string(cfg).context("encode worker config")?;
        let mut child = Command::new(&exe)
            .arg("__bench-worker")
            .env(CONFIG_ENV, json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("start worker {} ({})", cfg.index, exe.display()))?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let stdin = child.stdin.take();
        let tx = tx.clone();
        let index = cfg.index;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<WorkerReport>(&line) {
                    Ok(r) => {
                        if tx.send(Msg::Report(Box::new(r))).is_err() {
                            return;
                        }
                    }
                    Err(e) => eprintln!("c1m bench: worker {index}: bad report line: {e}"),
                }
            }
            let _ = tx.send(Msg::WorkerGone(index));
        });
        procs.push(WorkerProc { child, stdin });
    }
    Ok(procs)
}

/// Writes one command line to every worker still listening; a worker whose stdin fails is
/// not written to again.
pub(super) fn broadcast(procs: &mut [WorkerProc], line: &str) {
    for w in procs.iter_mut() {
        if let Some(stdin) = w.stdin.as_mut() {
            if stdin.write_all(line.as_bytes()).is_err() {
                w.stdin = None;
            }
        }
    }
}

/// Tells every worker to stop (`S`) and closes its stdin, after which it sends its final report.
pub(super) fn stop(procs: &mut [WorkerProc]) {
    for p in procs.iter_mut() {
        if let Some(mut stdin) = p.stdin.take() {
            let _ = stdin.write_all(b"S\n");
        }
    }
}

/// Whatever happened, no worker outlives the run: close stdin, kill what still runs, wait.
pub(super) fn reap(procs: &mut [WorkerProc]) {
    for p in procs.iter_mut() {
        drop(p.stdin.take());
        if p.child.try_wait().ok().flatten().is_none() {
            let _ = p.child.kill();
        }
        let _ = p.child.wait();
    }
}
