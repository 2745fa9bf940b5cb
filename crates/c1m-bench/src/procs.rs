//! Local bench worker processes, for whoever starts them (the `c1m bench` coordinator, or a
//! `c1m bench-agent` on a load box): starting them (the current binary re-executed as
//! `c1m __bench-worker`, its [`WorkerConfig`] in the environment), turning their stdout report
//! lines into [`Msg`]s handed to a sink, writing command lines to their stdin, and making sure
//! none outlives its starter. The line formats themselves are described in [`crate::wire`].

use crate::run::Msg;
use crate::wire::{WorkerConfig, WorkerReport, CONFIG_ENV};
use anyhow::Context;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};

/// One running worker; `stdin` is None once a write to it failed (the worker is gone).
pub struct WorkerProc {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// Starts one worker per config. Each worker's reports (`Msg::Report`) and its end
/// (`Msg::WorkerGone`) go to `sink`, from a reader thread per worker; a sink that returns
/// false stops that reader. A report line longer than [`MAX_REPORT_LINE`] ends the reader
/// with a message (the worker counts as gone), so a confused worker cannot grow its memory
/// without bound.
pub fn spawn<F>(configs: &[WorkerConfig], sink: F) -> anyhow::Result<Vec<WorkerProc>>
where
    F: Fn(Msg) -> bool + Clone + Send + 'static,
{
    let exe = std::env::current_exe().context("find own executable to start workers")?;
    let mut procs = Vec::with_capacity(configs.len());
    for cfg in configs {
        let json = serde_json::to_string(cfg).context("encode worker config")?;
        let spawned = Command::new(&exe)
            .arg("__bench-worker")
            .env(CONFIG_ENV, json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                // An agent lives on after a failed start: the workers already started must
                // not run on until their own deadline.
                reap(&mut procs);
                return Err(e)
                    .with_context(|| format!("start worker {} ({})", cfg.index, exe.display()));
            }
        };
        let stdout = child.stdout.take().context("worker stdout")?;
        let stdin = child.stdin.take();
        let sink = sink.clone();
        let index = cfg.index;
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                // At most one line and a byte more in memory: a longer one is cut and dropped.
                let limit = (MAX_REPORT_LINE + 1) as u64;
                match (&mut reader).take(limit).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                if line.last() != Some(&b'\n') {
                    eprintln!(
                        "c1m bench: worker {index}: report line over {MAX_REPORT_LINE} bytes"
                    );
                    break;
                }
                match serde_json::from_slice::<WorkerReport>(&line) {
                    Ok(r) => {
                        if !sink(Msg::Report(Box::new(r))) {
                            return;
                        }
                    }
                    Err(e) => eprintln!("c1m bench: worker {index}: bad report line: {e}"),
                }
            }
            let _ = sink(Msg::WorkerGone(index));
        });
        procs.push(WorkerProc { child, stdin });
    }
    Ok(procs)
}

/// A report carries five histogram deltas of at most ~45K buckets each; far below this.
pub const MAX_REPORT_LINE: usize = 8 << 20;

/// Writes one command line to every worker still listening; a worker whose stdin fails is
/// not written to again.
pub fn broadcast(procs: &mut [WorkerProc], line: &str) {
    for w in procs.iter_mut() {
        if let Some(stdin) = w.stdin.as_mut() {
            if stdin.write_all(line.as_bytes()).is_err() {
                w.stdin = None;
            }
        }
    }
}

/// Tells every worker to stop (`S`) and closes its stdin, after which it sends its final report.
pub fn stop(procs: &mut [WorkerProc]) {
    for p in procs.iter_mut() {
        if let Some(mut stdin) = p.stdin.take() {
            let _ = stdin.write_all(b"S\n");
        }
    }
}

/// Whatever happened, no worker outlives the run: close stdin, kill what still runs, wait.
pub fn reap(procs: &mut [WorkerProc]) {
    for p in procs.iter_mut() {
        drop(p.stdin.take());
        if p.child.try_wait().ok().flatten().is_none() {
            let _ = p.child.kill();
        }
        let _ = p.child.wait();
    }
}
