//! The `c1m bench` process. It plans the run, starts worker processes (re-executing the
//! current binary as `c1m __bench-worker`, config in the environment, commands on stdin,
//! reports on stdout), runs the publisher, merges worker reports into totals, histograms and a
//! timeline, prints progress, and at the end writes the summary, JSON report and plot.
//!
//! Phases: ramp (until every worker has started all its connections and none is in flight),
//! hold (`--hold`; publishing runs from its start until `--drain` before its end), stop. The
//! run also stops at `--duration`, on SIGINT/SIGTERM, when every connection failed and nothing
//! reconnects, or when all workers are gone. Workers die with the coordinator (PDEATHSIG).
//!
//! With --agents the workers run on load boxes behind `c1m bench-agent`s instead: `fleet`
//! connects to them, splits the run and starts them; their workers' reports arrive and merge
//! exactly like local ones (global worker indices), and an agent whose link breaks is
//! reported as lost.
//!
//! This file is the loop that drives those phases and merges what arrives; [`setup`] turns the
//! arguments into a [`Run`] and worker configs, `workers` commands and reaps the workers
//! (local processes via [`crate::procs`], or agents), `restart` runs the reconnect storm's
//! restart. The run's data lives in [`crate::run`], so the report and its sections never
//! import this module.

mod fleet;
mod restart;
mod setup;
mod workers;

use crate::hist::{add_pairs, new_hist, percentiles, record};
use crate::http::fetch_status;
use crate::publish::{self, PublishPlan};
use crate::report;
use crate::run::{Msg, Run, Sample};
use crate::BenchArgs;
use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use workers::Workers;

pub fn run(args: BenchArgs) -> anyhow::Result<u8> {
    c1m_sys::bench_sys::install_sigint_flag().context("install SIGINT handler")?;
    let nofile = c1m_sys::rlimit::raise_nofile_to_hard().context("raise RLIMIT_NOFILE")?;
    let on_agents = args.agents.is_some();
    let (mut run, configs) = setup::plan_run(args, nofile.hard, on_agents)?;
    let (tx, rx) = mpsc::channel();
    let mut workers = Workers {
        local: Vec::new(),
        agents: Vec::new(),
    };
    let mut agents = Vec::new();
    if on_agents {
        (workers.agents, agents) = fleet::prepare(&mut run, &configs[0])?;
    }
    if let Some(src) = &run.status_source {
        run.server_before = fetch_status(src);
    }
    run.coordinator_pss.0 = own_pss();
    // The clock starts before the workers do: their start-up is part of the ramp.
    let t0 = (Instant::now(), crate::payload::now_us());
    let started = if on_agents {
        fleet::start(&mut run, &mut workers.agents, agents, &tx, t0.0)
    } else {
        let tx = tx.clone();
        crate::procs::spawn(&configs, move |m| tx.send(m).is_ok()).map(|p| workers.local = p)
    };
    let sampling = Arc::new(AtomicBool::new(false));
    let sampler = match (&run.status_source, run.args.server_every) {
        (Some(src), Some(every)) => Some(crate::server_samples::spawn(
            src.clone(),
            every,
            sampling.clone(),
        )),
        _ => None,
    };
    let result = started.and_then(|()| drive(&mut run, &mut workers, &tx, &rx, t0));
    sampling.store(true, Ordering::SeqCst);
    if let Some((samples, unanswered)) = sampler.and_then(|s| s.join().ok()) {
        (run.server_timeline, run.server_unanswered) = (samples, unanswered);
    }
    workers.reap();
    result?;
    report::finish(&run)
}

/// Per-interval state for the timeline and progress line.
struct Interval {
    connect_h: Histogram<u64>,
    delivery_h: Histogram<u64>,
    last_subscribed: u64,
    last_at: Instant,
}

fn handle(run: &mut Run, workers: &mut Workers, iv: &mut Interval, msg: Msg, gone: &mut [bool]) {
    match msg {
        Msg::Report(mut r) => {
            let i = r.index;
            if i >= run.latest.len() {
                return;
            }
            if let Some(f) = run.fleet.as_mut() {
                if let Some(a) = f.agent_of(i) {
                    f.agents[a].absorb(&r);
                }
            }
            add_pairs(&mut run.connect_h, &r.connect_hist);
            add_pairs(&mut iv.connect_h, &r.connect_hist);
            add_pairs(&mut run.subscribe_h, &r.subscribe_hist);
            add_pairs(&mut run.delivery_h, &r.delivery_hist);
            add_pairs(&mut iv.delivery_h, &r.delivery_hist);
            r.connect_hist = Vec::new();
            r.subscribe_hist = Vec::new();
            r.delivery_hist = Vec::new();
            if let Some(st) = run.storm.as_mut() {
                add_pairs(&mut st.back_h, &r.storm_back_hist);
                add_pairs(&mut st.caught_up_h, &r.storm_caught_up_hist);
            } else {
                add_pairs(&mut run.resume_caught_up_h, &r.storm_caught_up_hist);
            }
            r.storm_back_hist = Vec::new();
            r.storm_caught_up_hist = Vec::new();
            if r.last {
                run.finals[i] = true;
            }
            run.latest[i] = *r;
        }
        Msg::WorkerGone(i) => {
            if let Some(g) = gone.get_mut(i) {
                *g = true;
            }
        }
        Msg::Published(p) => match &p.error {
            None => {
                run.published += 1;
                record(&mut run.publish_h, p.ack_us.saturating_sub(p.sent_us));
                let line = format!("P {} {} {} {}\n", p.channel, p.seq, p.sent_us, p.ack_us);
                workers.broadcast(&line);
            }
            Some(kind) => crate::errors::bump(&mut run.publish_errors, kind),
        },
        Msg::RestartDone(result, secs) => {
            if let Some(st) = run.storm.as_mut() {
                st.cmd_result = Some((result, secs));
            }
        }
        Msg::AgentLost(a, reason) => fleet::agent_lost(run, a, reason),
        Msg::AgentDone(a) => {
            if let Some(a) = run.fleet.as_mut().and_then(|f| f.agents.get_mut(a)) {
                a.done = true;
            }
        }
        Msg::AgentClock(a, sample) => {
            if let Some(a) = run.fleet.as_mut().and_then(|f| f.agents.get_mut(a)) {
                a.clock_end = Some(sample);
            }
        }
    }
}

fn drive(
    run: &mut Run,
    workers: &mut Workers,
    tx: &Sender<Msg>,
    rx: &Receiver<Msg>,
    (t0, t0_us): (Instant, u64),
) -> anyhow::Result<()> {
    let duration = run.args.duration.unwrap_or(Duration::from_secs(60));
    let deadline = t0 + duration;
    let tty = std::io::stderr().is_terminal();
    let show = !run.args.quiet;
    let progress_every = if tty {
        Duration::from_millis(250).min(run.args.interval)
    } else {
        run.args.interval
    };
    let mut next_progress = t0 + progress_every;
    let mut next_sample = t0 + Duration::from_secs(1);
    let mut iv = Interval {
        connect_h: new_hist(),
        delivery_h: new_hist(),
        last_subscribed: 0,
        last_at: t0,
    };
    let mut rate_last = (t0, 0u64);
    let mut rate_now = 0.0;
    let mut gone = vec![false; run.latest.len()];
    let mut hold_end: Option<Instant> = None;
    let pub_stop = Arc::new(AtomicBool::new(false));
    let mut publisher: Option<std::thread::JoinHandle<()>> = None;
    let mut publish_until: Option<Instant> = None;
    let reason;
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(m) => handle(run, workers, &mut iv, m, &mut gone),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => bail!("worker channel closed"),
        }
        while let Ok(m) = rx.try_recv() {
            handle(run, workers, &mut iv, m, &mut gone);
        }
        let now = Instant::now();
        let t = run.totals();
        run.peak_online = run.peak_online.max(t.online);
        if hold_end.is_some() {
            run.hold_online_min = Some(run.hold_online_min.map_or(t.online, |m| m.min(t.online)));
        }
        let ramp_done = run.latest.iter().zip(&gone).all(|(r, g)| r.ramp_done || *g);
        if publisher.is_none()
            && hold_end.is_none()
            && run.publishing
            && run.args.publish_from_start
        {
            run.publish_window.0 = Some(Instant::now());
            publisher = Some(publish::spawn(
                publish_plan(run),
                pub_stop.clone(),
                tx.clone(),
            ));
        }
        if hold_end.is_none() && ramp_done {
            // Exact: from the coordinator's start to the last worker's ramp end (wall clock),
            // not rounded up to the 250 ms report tick.
            let last_us = run.latest.iter().map(|r| r.ramp_done_us).max().unwrap_or(0);
            let exact = (last_us > t0_us).then(|| (last_us - t0_us) as f64 / 1e6);
            run.ramp_secs = Some(exact.unwrap_or((now - t0).as_secs_f64()));
            hold_end = Some(now + run.args.hold);
            if run.publishing && publisher.is_some() {
                // Already publishing since the ramp began (--publish-from-start).
                let drain = run
                    .args
                    .drain
                    .unwrap_or_else(|| Duration::from_secs(2).min(run.args.hold / 4));
                publish_until = Some(now + run.args.hold.saturating_sub(drain));
            } else if run.publishing && t.online > 0 {
                let drain = run
                    .args
                    .drain
                    .unwrap_or_else(|| Duration::from_secs(2).min(run.args.hold / 4));
                publish_until = Some(now + run.args.hold.saturating_sub(drain));
                run.publish_window.0 = Some(Instant::now());
                publisher = Some(publish::spawn(
                    publish_plan(run),
                    pub_stop.clone(),
                    tx.clone(),
                ));
            }
        }
        let restart_due = match (&run.storm, hold_end) {
            (Some(st), Some(h)) => st.started.is_none() && now + run.args.hold >= h + st.after,
            _ => false,
        };
        if restart_due {
            restart::start(run, workers, tx);
        }
        if publish_until.is_some_and(|u| now >= u) && run.publish_window.1.is_none() {
            pub_stop.store(true, Ordering::SeqCst);
            run.publish_window.1 = Some(now);
        }
        if now >= next_sample {
            next_sample += Duration::from_secs(1);
            let dt = (now - iv.last_at).as_secs_f64().max(1e-3);
            let errors: u64 = t.errors.values().sum();
            run.timeline.push(Sample {
                t_s: (now - t0).as_secs_f64(),
                online: t.online,
                connecting: t.connecting,
                open_rate: (t.subscribed.saturating_sub(iv.last_subscribed)) as f64 / dt,
                errors,
                connect_p99_us: percentiles(&iv.connect_h).p99_us,
                delivery_p99_us: percentiles(&iv.delivery_h).p99_us,
                delivered: iv.delivery_h.len(),
                agents_online: run.fleet.as_ref().map_or_else(Vec::new, |f| {
                    f.agents
                        .iter()
                        .map(|a| a.totals(&run.latest).online)
                        .collect()
                }),
            });
            iv.connect_h.reset();
            iv.delivery_h.reset();
            iv.last_subscribed = t.subscribed;
            iv.last_at = now;
        }
        if show && now >= next_progress {
            next_progress = now + progress_every;
            let dt = (now - rate_last.0).as_secs_f64();
            if dt >= 0.2 {
                rate_now = t.subscribed.saturating_sub(rate_last.1) as f64 / dt;
                rate_last = (now, t.subscribed);
            }
            let line = report::progress_line(run, &t, rate_now, (now - t0).as_secs_f64());
            if tty {
                eprint!("\r\x1b[K{line}");
            } else {
                eprintln!("{line}");
            }
        }
        if c1m_sys::bench_sys::sigint_seen() {
            reason = "interrupted (SIGINT/SIGTERM)";
            break;
        }
        if now >= deadline {
            reason = "--duration reached";
            break;
        }
        if hold_end.is_some_and(|h| now >= h) {
            reason = "hold complete";
            break;
        }
        if gone.iter().all(|g| *g) {
            reason = "all workers exited";
            break;
        }
        if ramp_done && t.online == 0 && run.args.reconnect_is_off() {
            reason = "no connection online and nothing reconnects";
            break;
        }
    }
    if tty && show {
        eprintln!();
    }
    run.stop_reason = reason.to_string();
    run.elapsed_secs = t0.elapsed().as_secs_f64();
    run.coordinator_pss.1 = own_pss();
    if let Some(src) = run
        .status_source
        .as_ref()
        .filter(|_| run.totals().online > 0)
    {
        run.server_peak = fetch_status(src);
    }
    pub_stop.store(true, Ordering::SeqCst);
    restart::stop_cmd(run);
    if run.publish_window.0.is_some() && run.publish_window.1.is_none() {
        run.publish_window.1 = Some(Instant::now());
    }
    if let Some(p) = publisher {
        let _ = p.join();
    }
    // Forward the last acknowledgements before the stop command (stdin is ordered).
    while let Ok(m) = rx.try_recv() {
        handle(run, workers, &mut iv, m, &mut gone);
    }
    workers.probe_clocks();
    workers.stop();
    let wait_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < wait_until && !run.finals.iter().zip(&gone).all(|(f, g)| *f || *g) {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(m) => handle(run, workers, &mut iv, m, &mut gone),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let missing_finals = run.finals.iter().filter(|f| !**f).count();
    if missing_finals > 0 {
        run.notes.push(format!(
            "{missing_finals} worker(s) sent no final report; their last tick counts"
        ));
    }
    // Wait briefly for the agents' Done frame, so an agent closing on time is not lost.
    let done_by = Instant::now() + Duration::from_secs(2);
    while Instant::now() < done_by
        && run
            .fleet
            .as_ref()
            .is_some_and(|f| f.agents.iter().any(|a| !a.done && a.lost.is_none()))
    {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(m) => handle(run, workers, &mut iv, m, &mut gone),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    Ok(())
}

fn own_pss() -> u64 {
    c1m_sys::mem::process_memory(std::process::id())
        .map(|m| m.pss_bytes)
        .unwrap_or(0)
}

fn publish_plan(run: &Run) -> PublishPlan {
    let (interval, all_channels) = match (run.args.publish_every, run.args.publish_rate) {
        (Some(d), _) => (d, true),
        (None, Some(r)) => (Duration::from_secs_f64(1.0 / r), false),
        (None, None) => (Duration::from_secs(1), true),
    };
    PublishPlan {
        target: run.publish_target.clone(),
        channel_base: run.target.channel_base.clone(),
        channels: run.args.channels,
        interval,
        all_channels,
        payload_size: run.args.payload_size,
        publishers: run.args.publishers,
        batch: run.args.publish_batch,
        timeout: run.args.publish_timeout,
    }
}

impl BenchArgs {
    fn reconnect_is_off(&self) -> bool {
        !self.reconnect
    }
}
