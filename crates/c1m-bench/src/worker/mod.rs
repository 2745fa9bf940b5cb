//! One bench worker process: a single-threaded mio (edge-triggered epoll) loop over a slab
//! arena of connections. Owns the ramp schedule, connect/subscribe timeouts, reconnect backoff,
//! connection lifecycle (start, end, reconnect) and the worker's counters and histograms.
//!
//! This file holds the [`Worker`] state and its loop (poll, dispatch, tick); the `impl Worker`
//! continues by duty in the child modules: `open` (ramp schedule, socket, connect, subscribe
//! request, online), `close` (timeouts, churn, ending an attempt, backoff), `conn_io`
//! (reading, writing and parsing per connection), `h2` (`--http2`: many SSE streams per
//! connection), `control` (stdin commands, report lines, final settlement); `conn` is the
//! per-connection record.
//!
//! Memory: an idle connection owns no buffer. Reads go into one per-worker scratch buffer; a
//! connection keeps bytes only while a unit (SSE event, frame, line, poll answer) is cut by a
//! read boundary, or while a write could not finish. Tokens are slab index + generation, so an
//! event for a slot that was reused is recognised and dropped.

mod close;
mod conn;
mod conn_io;
mod control;
mod h2;
mod open;

use conn::{Conn, State};

use crate::hist::new_hist;
use crate::payload::now_us;
use crate::publish_log::PublishLog;
use crate::wire::{WorkerConfig, WorkerReport};
use anyhow::Context;
use hdrhistogram::Histogram;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io;
use std::time::{Duration, Instant};

const STDIN: Token = Token(usize::MAX);
const SCRATCH: usize = 64 * 1024;
/// How often the publish logs drop what no window needs any more.
const TRIM_EVERY: Duration = Duration::from_secs(10);

struct Worker {
    cfg: WorkerConfig,
    /// The client configuration for TLS targets, built once.
    tls: Option<crate::tls::Tls>,
    poll: Poll,
    conns: Slab<Conn>,
    epoch: Instant,
    scratch: Vec<u8>,
    gen: u32,
    rng: u64,
    /// Next first-attempt index to start (0..cfg.conns).
    next: u64,
    /// Connections whose first attempt is still unresolved. Reconnects do not count, so a
    /// reconnect storm cannot keep the ramp from ending.
    first_unresolved: u64,
    inflight: usize,
    timeouts: VecDeque<(u64, usize, u32)>,
    backoff: BinaryHeap<Reverse<(u64, usize, u32)>>,
    /// Acknowledged publishes per channel, held for the retention only.
    publishes: Vec<PublishLog>,
    /// When the publish logs are next trimmed.
    next_trim: Instant,
    stdin_buf: Vec<u8>,
    stop: bool,
    r: WorkerReport,
    connect_h: Histogram<u64>,
    subscribe_h: Histogram<u64>,
    delivery_h: Histogram<u64>,
    port_range_warned: bool,
    /// When this worker's ramp finished (churn starts then).
    churn_from: Option<Instant>,
    /// Wall-clock µs at `epoch` (turns a monotonic `due_us` into a send-time comparable one).
    wall_epoch_us: u64,
    /// Reconnect storm: wall-clock µs of the restart (the coordinator's `R`, or this worker's
    /// first drop after the ramp, whichever is earlier).
    storm_ref_us: Option<u64>,
    storm_back_h: Histogram<u64>,
    storm_caught_up_h: Histogram<u64>,
}

/// Entry point of `c1m __bench-worker`.
pub fn run_from_env() -> anyhow::Result<u8> {
    let raw = std::env::var(crate::wire::CONFIG_ENV)
        .context("c1m __bench-worker is started by `c1m bench`, not by hand")?;
    let cfg: WorkerConfig = serde_json::from_str(&raw).context("bad worker config")?;
    c1m_sys::process::die_with_parent(libc::SIGKILL, cfg.parent_pid)
        .context("tie worker to coordinator")?;
    c1m_sys::bench_sys::ignore_sigint().context("ignore SIGINT")?;
    c1m_sys::rlimit::raise_nofile_to_hard().context("raise RLIMIT_NOFILE")?;
    if cfg.nice > 0 {
        c1m_sys::process::lower_priority(cfg.nice).context("lowering priority (--load-nice)")?;
    }
    let mut w = Worker::new(cfg)?;
    w.run()?;
    Ok(0)
}
impl Worker {
    fn new(cfg: WorkerConfig) -> anyhow::Result<Self> {
        let poll = Poll::new().context("epoll_create")?;
        let mut r = WorkerReport {
            index: cfg.index,
            pid: std::process::id(),
            ..Default::default()
        };
        if let Ok(m) = c1m_sys::mem::process_memory(std::process::id()) {
            r.pss_start = m.pss_bytes;
        }
        let channels = cfg.channels.max(1) as usize;
        let tls = match &cfg.tls {
            Some(t) => Some(crate::tls::Tls::new(t.clone()).context("TLS client")?),
            None => None,
        };
        Ok(Worker {
            tls,
            rng: 0x2545_F491_4F6C_DD1D ^ (cfg.index as u64 + 1).wrapping_mul(0x9E37_79B9),
            publishes: vec![PublishLog::default(); channels],
            next_trim: Instant::now() + TRIM_EVERY,
            conns: Slab::with_capacity((cfg.conns as usize).min(1 << 20)),
            cfg,
            poll,
            epoch: Instant::now(),
            scratch: vec![0; SCRATCH],
            gen: 0,
            next: 0,
            first_unresolved: 0,
            inflight: 0,
            timeouts: VecDeque::new(),
            backoff: BinaryHeap::new(),
            stdin_buf: Vec::new(),
            stop: false,
            r,
            connect_h: new_hist(),
            subscribe_h: new_hist(),
            delivery_h: new_hist(),
            port_range_warned: false,
            churn_from: None,
            wall_epoch_us: now_us(),
            storm_ref_us: None,
            storm_back_h: new_hist(),
            storm_caught_up_h: new_hist(),
        })
    }

    /// Every first attempt started and resolved.
    fn ramp_done(&self) -> bool {
        self.next >= self.cfg.conns && self.first_unresolved == 0
    }

    fn mono_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    fn run(&mut self) -> anyhow::Result<()> {
        let stdin_fd = std::os::fd::AsFd::as_fd(&io::stdin())
            .try_clone_to_owned()
            .context("dup stdin")?;
        let mut stdin = mio::unix::pipe::Receiver::from(stdin_fd);
        stdin.set_nonblocking(true).context("stdin non-blocking")?;
        self.poll
            .registry()
            .register(&mut stdin, STDIN, Interest::READABLE)
            .context("register stdin")?;
        let mut events = Events::with_capacity(1024);
        let tick = Duration::from_millis(self.cfg.tick_ms.max(10));
        let mut next_tick = Instant::now() + tick;
        let hard_end = Instant::now() + Duration::from_millis(self.cfg.max_runtime_ms);
        while !self.stop && Instant::now() < hard_end {
            self.start_due();
            self.churn_due();
            let timeout = self.sleep_for(next_tick);
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("epoll_wait"),
            }
            for ev in events.iter() {
                if ev.token() == STDIN {
                    self.read_stdin(&mut stdin);
                } else {
                    self.on_event(ev.token().0, ev.is_writable());
                }
            }
            self.expire_timeouts();
            if self.r.ramp_done_us == 0 && self.ramp_done() {
                self.r.ramp_done_us = now_us();
                self.churn_from = Some(Instant::now());
            }
            if Instant::now() >= next_tick {
                next_tick += tick;
                self.report(false)?;
            }
            if Instant::now() >= self.next_trim {
                self.next_trim += TRIM_EVERY;
                self.trim_publish_logs();
            }
        }
        self.finish()
    }

    /// How long the loop may sleep: until the first thing the clock makes due (a scheduled
    /// first attempt, a reconnect, a connect or subscribe timeout, the report tick). A ramp at
    /// its in-flight cap waits for a completion instead: a fixed 1 ms poll there woke each of
    /// the 51 workers of a 1M ramp a thousand times a second for nothing. Churn keeps its 1 ms
    /// step (its closes are spread by elapsed time).
    fn sleep_for(&self, next_tick: Instant) -> Duration {
        let now = self.mono_us();
        let room = self.inflight < self.cfg.max_inflight;
        let mut due_us = u64::MAX;
        if room && self.next < self.cfg.conns {
            due_us = if self.cfg.rate > 0.0 {
                (self.next as f64 * 1e6 / self.cfg.rate) as u64
            } else {
                now
            };
        }
        if let (true, Some(Reverse((due, _, _)))) = (room, self.backoff.peek()) {
            due_us = due_us.min(*due);
        }
        if let Some(&(deadline, _, _)) = self.timeouts.front() {
            due_us = due_us.min(deadline);
        }
        let mut wait = next_tick.saturating_duration_since(Instant::now());
        if due_us != u64::MAX {
            wait = wait.min(Duration::from_micros(due_us.saturating_sub(now)));
        }
        if self.churn_from.is_some() && self.cfg.churn_rate > 0.0 {
            wait = wait.min(Duration::from_millis(1));
        }
        wait
    }

    fn on_event(&mut self, raw: usize, writable: bool) {
        let key = raw & 0xffff_ffff;
        let gen = (raw >> 32) as u32;
        let state = match self.conns.get(key) {
            Some(c) if c.gen == gen && c.stream.is_some() => c.state,
            _ => return, // stale event for a reused or closed slot
        };
        if state == State::Connecting && !self.finish_connect(key, writable) {
            return;
        }
        if writable && !self.flush(key) {
            return;
        }
        self.read(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arena entry is the per-connection cost the ≤ 512 B budget is mostly made of; keep
    /// it from growing unnoticed (slab adds its own tag on top). 104: the delivery window's
    /// pinned position (8 B) is what lets a worker drop publishes no window needs (kept, an
    /// hour at 1,000 publishes/s is 3.6 M × 16 B = 57 MB in every worker).
    #[test]
    fn connection_state_stays_small() {
        let size = std::mem::size_of::<Conn>();
        assert!(size <= 104, "Conn is {size} bytes");
        assert!(std::mem::size_of::<slab::Slab<Conn>>() < 64);
    }
}
