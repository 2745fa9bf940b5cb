//! The master process: starts N workers, restarts any that dies (logged and counted), stops
//! them all on SIGTERM/SIGINT (each drains within the grace period), re-reads its
//! configuration on SIGHUP (`reload`), and is the in-node hub: every publish passes through it, gets its
//! id and history slot, and goes to each worker that has subscribers on the channel.
//! It serves no client traffic itself.

mod dashboard;
mod memory;
mod plan_reason;
mod reload;
mod sd_notify;
mod status;
mod upgrade;

use crate::broker::{self, Broker, Event, Req};
use crate::config::{Config, Workers};
use crate::ipc::{ToMaster, ToWorker, WorkerStats};
use crate::link::Link;
use crate::worker;
use anyhow::Context;
use mio::net::UnixStream;
use mio::{Events, Interest, Poll, Token};
pub use plan_reason::{capacity_shortfall, workers_reason};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};
pub use upgrade::{take_over, ENV_UPGRADE_FD};

/// Descriptors each worker keeps back from client connections (listeners, link, epoll, logs):
/// 64, or a sixteenth of a small limit (a worker needs about ten of its own).
pub fn reserved_fds(hard_nofile: u64) -> u64 {
    (hard_nofile / 16).clamp(4, 64)
}
const SIGNALS: Token = Token(usize::MAX);
/// The broker's threads have answers or messages.
const BROKER: Token = Token(usize::MAX - 1);
const RESTART_DELAY: Duration = Duration::from_millis(200);

/// How many workers, and how many connections each may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub workers: usize,
    pub per_worker: u64,
}

/// SO_REUSEPORT spreads connections by hash, so workers fill unevenly (at 1M over 51 workers
/// the spread reached ~2 %, and exact shares refused 3,309 connections): with several workers
/// each may take its share plus this percentage.
pub const SPREAD_SLACK_PCT: u64 = 5;

/// `auto`: enough processes for `max_conns` (plus the spread slack) under the hard fd limit,
/// at least one per CPU.
pub fn plan(workers: Workers, max_conns: u64, hard_nofile: u64, cpus: usize) -> Plan {
    let capacity = hard_nofile.saturating_sub(reserved_fds(hard_nofile)).max(1);
    let with_slack = |n: u64| n + (n * SPREAD_SLACK_PCT).div_ceil(100);
    let workers = match workers {
        Workers::Count(n) => n,
        Workers::Auto => (cpus as u64).max(with_slack(max_conns).div_ceil(capacity)) as usize,
    };
    let share = max_conns.div_ceil(workers as u64);
    let share = if workers > 1 {
        with_slack(share)
    } else {
        share
    };
    Plan {
        workers,
        per_worker: share.min(capacity),
    }
}

/// Payload bytes of history in one join answer; a longer replay continues in further chunks.
/// Small enough for any socket queue and ipc frame, large enough to keep a catch-up fast.
pub const REPLAY_CHUNK: usize = 256 * 1024;
/// What a publisher pushed back because a worker is behind is told to wait.
const RETRY_AFTER_S: u64 = 1;

struct Slot {
    child: Option<Child>,
    link: Option<Link>,
    /// The link to this worker is congested: its requests stay unread until it drains, so
    /// its own joins and publishes cannot add to the backlog.
    reading_paused: bool,
    stats: WorkerStats,
    /// The worker's send path and io_uring counters (`ToMaster::Io`); none until
    /// the worker has reported it.
    io: Option<crate::ipc::IoReport>,
    /// Counters of this slot's dead predecessors, so `_total` figures never go down.
    retired: WorkerStats,
    /// When the worker last reported (or was started): a worker silent for long is stuck or
    /// stopped, and `/healthz` says so.
    reported_at: Instant,
    restarts: u64,
    restart_at: Option<Instant>,
    /// This worker process has reported since it was spawned, so its listeners are bound
    /// (it reports from its loop, which starts after binding): it takes connections.
    listening: bool,
}

pub struct Master {
    cfg: Config,
    /// The key material the workers run with (last read at start or at an accepted SIGHUP):
    /// every worker started gets it from here, never from the files.
    secrets: crate::secrets::Secrets,
    plan: Plan,
    poll: Poll,
    broker: Box<dyn Broker>,
    /// Scratch for draining the broker (kept to reuse its allocation).
    events: Vec<Event>,
    /// Channel → indices of workers with subscribers on it.
    interest: HashMap<String, Vec<usize>>,
    /// Channel → (worker, subscribers there), as the workers last reported.
    counts: HashMap<String, Vec<(usize, u32)>>,
    slots: Vec<Slot>,
    published: u64,
    /// Publishes refused because a worker that must deliver them is behind.
    publish_refused: u64,
    restarts: u64,
    /// One warning per 10 s summing the refusals that rose.
    refusal_log: crate::log::RefusalSummary,
    started: Instant,
    shutdown_deadline: Option<Instant>,
    memory: memory::Sampler,
    reload_source: Option<crate::config::ServeArgs>,
    /// The per-IP limit table shared with the workers (made on first spawn when limits are on).
    ip_table: Option<crate::ip_table::IpTable>,
    /// systemd readiness and watchdog (`Type=notify`), when run by systemd.
    notifier: Option<sd_notify::Notifier>,
    /// READY=1 went out (once: a restarted worker does not make the service "start" again).
    ready_sent: bool,
    // ---- live upgrade ----
    /// The binary's path when this master started: SIGUSR2 starts whatever is there now.
    exe: std::path::PathBuf,
    /// This master's arguments, given to the new binary as they were.
    args: Vec<std::ffi::OsString>,
    upgrades: upgrade::Counters,
    /// A hand-over in progress (old master), fed by the workers' reports; publishing is paused
    /// once it is `frozen`.
    handover: Option<upgrade::Progress>,
    /// The upgrade in progress (old master), stepped by the loop.
    upgrading: Option<upgrade::Run>,
    /// New binaries of failed upgrades, until they are gone.
    leftovers: Vec<upgrade::Leftover>,
    /// SIGTERM, SIGINT and SIGHUP that came during an upgrade: handled once it ends.
    deferred_signals: Vec<i32>,
    /// New master, until committed: the old master and what its workers hand over.
    handover_from: Option<HandoverFrom>,
    /// The port reservations (bound socket and port claim per address), held for the life
    /// of this master and passed on to a new master at a live upgrade.
    reservations: Vec<(crate::listener::Kind, crate::listener::Reservation)>,
}

/// A new master's predecessor during a live upgrade.
#[derive(Debug, Clone, Copy)]
pub struct HandoverFrom {
    pub old_pid: u32,
    pub deadline: Instant,
    /// The old master's worker slots: slot i takes over from old slot i when i is below this
    /// (a control worker the old generation did not have starts fresh).
    pub old_slots: usize,
}

impl Master {
    pub fn new(
        cfg: Config,
        plan: Plan,
        secrets: crate::secrets::Secrets,
    ) -> anyhow::Result<Master> {
        let mut master = Master::build(cfg, plan, secrets)?;
        master.spawn_all()?;
        Ok(master)
    }

    /// A master with no worker started yet (the new master of an upgrade imports the hub
    /// first).
    fn build(cfg: Config, plan: Plan, secrets: crate::secrets::Secrets) -> anyhow::Result<Master> {
        let poll = Poll::new()?;
        check_io_path(&cfg)?;
        let limits = broker::Limits {
            max_count: cfg.history_size,
            max_age: cfg.history_age,
            max_bytes: cfg.history_max_bytes,
        };
        let broker: Box<dyn Broker> = match &cfg.broker {
            None => Box::new(broker::memory::MemoryBroker::new(limits)),
            Some(url) => {
                let target = broker::redis::RedisTarget::parse(url, cfg.broker_ca.as_deref())?;
                let waker = mio::Waker::new(poll.registry(), BROKER)?;
                Box::new(broker::redis::RedisBroker::start(target, limits, waker)?)
            }
        };
        let master = Master {
            cfg,
            secrets,
            plan,
            poll,
            broker,
            events: Vec::new(),
            interest: HashMap::new(),
            counts: HashMap::new(),
            slots: Vec::new(),
            published: 0,
            publish_refused: 0,
            restarts: 0,
            refusal_log: crate::log::RefusalSummary::new(Instant::now()),
            started: Instant::now(),
            shutdown_deadline: None,
            memory: memory::Sampler::start()?,
            reload_source: None,
            ip_table: None,
            notifier: sd_notify::Notifier::from_env()?,
            ready_sent: false,
            exe: std::env::current_exe().context("locating the c1m binary")?,
            args: std::env::args_os().skip(1).collect(),
            upgrades: upgrade::Counters::default(),
            handover: None,
            upgrading: None,
            leftovers: Vec::new(),
            deferred_signals: Vec::new(),
            handover_from: None,
            reservations: Vec::new(),
        };
        Ok(master)
    }

    /// The slot of the control worker: with `--admin-listen`, one worker more than the plan
    /// serves the admin listener and nothing else, so publish acks and /status never wait for
    /// CPU behind a fan-out (on a box where every subscriber worker is busy delivering, a
    /// request to one of them waits its turn among all of them: serve's ack mean 134 ms at
    /// 150K over 53 workers; BENCHMARKS.md "publish acks from a control worker").
    pub fn control_slot(&self) -> Option<usize> {
        self.cfg.admin_listen.map(|_| self.plan.workers)
    }

    /// Subscriber workers, and the control worker when there is one.
    fn slot_count(&self) -> usize {
        self.plan.workers + usize::from(self.control_slot().is_some())
    }

    fn spawn_all(&mut self) -> anyhow::Result<()> {
        let master = self;
        for i in 0..master.slot_count() {
            master.slots.push(Slot {
                child: None,
                link: None,
                reading_paused: false,
                stats: WorkerStats::default(),
                io: None,
                retired: WorkerStats::default(),
                reported_at: Instant::now(),
                restarts: 0,
                restart_at: None,
                listening: false,
            });
            master
                .spawn(i)
                .with_context(|| format!("starting worker {i}"))?;
        }
        Ok(())
    }

    /// The port reservations to pass on to a new master at upgrade.
    pub fn set_reservations(
        &mut self,
        reservations: Vec<(crate::listener::Kind, crate::listener::Reservation)>,
    ) {
        self.reservations = reservations;
    }

    /// Kills every worker (a new master whose upgrade was not committed).
    fn kill_workers(&mut self) {
        for slot in &mut self.slots {
            if let Some(child) = &mut slot.child {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let (parent, child_end) = std::os::unix::net::UnixStream::pair()?;
        c1m_sys::fd::set_inheritable(&child_end)?;
        // /proc/self/exe is this very binary even after an upgrade replaced the file on disk
        // (the path then names the new one, which must not become an old-generation worker).
        let mut command = Command::new("/proc/self/exe");
        // ps and journals show the name the master was started by, not "/proc/self/exe".
        std::os::unix::process::CommandExt::arg0(
            &mut command,
            std::env::args_os().next().unwrap_or_else(|| "c1m".into()),
        );
        if self.control_slot() == Some(i) {
            command.env(worker::ENV_ROLE, worker::ROLE_CONTROL);
        }
        if let Some(from) = self.handover_from.filter(|f| i < f.old_slots) {
            let left = from.deadline.saturating_duration_since(Instant::now());
            command
                .env(worker::ENV_HANDOVER, worker::handover_name(from.old_pid, i))
                .env(
                    worker::ENV_HANDOVER_TIMEOUT,
                    left.as_millis().max(1).to_string(),
                );
        }
        if let Some(table) = self.ip_table()? {
            // Worker i is spawned only once the previous worker i has exited (reap), so what it
            // held is gone: its column is cleared before the replacement can count again.
            table.clear_worker(i);
            command.env(worker::ENV_IP_TABLE, table.env_value());
        }
        for var in sd_notify::ENV_VARS {
            command.env_remove(var);
        }
        // A new master's own start-up variables name descriptors its workers do not have.
        command
            .env_remove(upgrade::ENV_UPGRADE_FD)
            .env_remove(upgrade::ENV_UPGRADE_RESERVED);
        let tunables = worker_malloc_tunables(std::env::var("GLIBC_TUNABLES").ok().as_deref());
        command.env("GLIBC_TUNABLES", tunables);
        let child = command
            .arg("__serve-worker")
            .env(worker::ENV_FD, child_end.as_raw_fd().to_string())
            .env(worker::ENV_INDEX, i.to_string())
            .env(worker::ENV_CONFIG, serde_json::to_string(&self.cfg)?)
            .env(worker::ENV_MASTER_PID, std::process::id().to_string())
            .env(worker::ENV_MAX_CONNS, self.plan.per_worker.to_string())
            .stdin(Stdio::null())
            .spawn()
            .context("spawning worker")?;
        drop(child_end);
        parent.set_nonblocking(true)?;
        let mut link = Link::new(UnixStream::from_std(parent));
        // The first frame: the worker waits for its key material before it serves.
        link.send(ToWorker::Secrets(self.secrets.clone()).encode())
            .context("sending the worker its key material")?;
        self.poll.registry().register(
            &mut link.stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        tracing::debug!(worker = i, pid = child.id(), "worker started");
        let slot = &mut self.slots[i];
        slot.stats = WorkerStats {
            pid: child.id(),
            ..Default::default()
        };
        slot.child = Some(child);
        slot.reported_at = Instant::now();
        slot.link = Some(link);
        slot.reading_paused = false;
        slot.restart_at = None;
        slot.listening = false;
        Ok(())
    }

    /// The per-IP limit table, created (and made inheritable) on first use; None when no
    /// per-IP limit is on.
    fn ip_table(&mut self) -> anyhow::Result<Option<&crate::ip_table::IpTable>> {
        if self.ip_table.is_none() && self.cfg.per_ip_limits() {
            let table = crate::ip_table::IpTable::create(self.slot_count())?;
            c1m_sys::fd::set_inheritable(table.fd()).context("passing the per-IP table on")?;
            self.ip_table = Some(table);
        }
        Ok(self.ip_table.as_ref())
    }

    pub fn run(&mut self) -> anyhow::Result<()> {
        // As each worker does before serving: start-up's heap and deep stack go back.
        let released = c1m_sys::mem::release_idle_memory();
        tracing::debug!(
            stack_bytes = released.stack_bytes,
            heap_trimmed = released.heap_trimmed,
            "idle start-up memory released"
        );
        let mut signals = signal_hook_mio::v1_0::Signals::new([
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGCHLD,
            libc::SIGHUP,
            libc::SIGUSR2,
        ])?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let mut events = Events::with_capacity(256);
        let mut next_expire = Instant::now();
        loop {
            if let Err(e) = self
                .poll
                .poll(&mut events, Some(Duration::from_millis(100)))
            {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            for event in events.iter() {
                match event.token() {
                    SIGNALS => {
                        let got: Vec<i32> = signals.pending().collect();
                        self.on_signals(got);
                    }
                    BROKER => self.pump(),
                    // The control socket of an upgrade: stepped below.
                    upgrade::CONTROL => {}
                    Token(i) => self.on_worker_event(i, event.is_writable()),
                }
            }
            self.resume_paused_reads();
            self.advance_upgrade();
            self.end_leftovers(false);
            if self.upgrading.is_none() && !self.deferred_signals.is_empty() {
                let got = std::mem::take(&mut self.deferred_signals);
                if self.shutdown_deadline.is_some() {
                    tracing::info!(
                        ?got,
                        "signals from during the upgrade: the new master serves now; not acted on"
                    );
                } else {
                    self.on_signals(got);
                }
            }
            let now = Instant::now();
            self.notify_systemd(now);
            if now >= next_expire {
                self.broker.tick(now);
                self.pump();
                next_expire = now + Duration::from_secs(1);
                let refused = status::refused_totals(self);
                self.refusal_log.tick(now, &refused.fields());
                self.push_dashboard();
            }
            self.reap();
            if let Some(deadline) = self.shutdown_deadline {
                let alive = self.slots.iter().any(|s| s.child.is_some());
                if !alive {
                    self.end_leftovers(true);
                    return Ok(());
                }
                if now >= deadline {
                    for slot in &mut self.slots {
                        if let Some(child) = &mut slot.child {
                            let _ = child.kill();
                            let _ = child.wait();
                        }
                    }
                    self.end_leftovers(true);
                    return Ok(());
                }
                continue;
            }
            for i in 0..self.slots.len() {
                if self.slots[i].restart_at.is_some_and(|t| t <= now) {
                    if let Err(e) = self.spawn(i) {
                        tracing::error!(worker = i, error = %format!("{e:#}"), "restarting worker failed; retrying in 1 s");
                        self.slots[i].restart_at = Some(now + Duration::from_secs(1));
                    }
                }
            }
        }
    }

    /// SIGUSR2 starts an upgrade (unless a stop came with it); SIGTERM/SIGINT stop and SIGHUP
    /// reloads, but not in the middle of an upgrade: they wait until it has ended.
    fn on_signals(&mut self, got: Vec<i32>) {
        let stop = got.iter().any(|&s| s == libc::SIGTERM || s == libc::SIGINT);
        if got.contains(&libc::SIGUSR2) && !stop {
            self.upgrade();
        }
        if self.upgrading.is_some() {
            for s in got {
                if [libc::SIGTERM, libc::SIGINT, libc::SIGHUP].contains(&s)
                    && !self.deferred_signals.contains(&s)
                {
                    tracing::info!(
                        signal = s,
                        "upgrade in progress: signal handled once it ends"
                    );
                    self.deferred_signals.push(s);
                }
            }
        } else if stop {
            self.begin_shutdown();
        } else if got.contains(&libc::SIGHUP) {
            self.reload();
        }
        self.reap();
    }

    fn on_worker_event(&mut self, i: usize, writable: bool) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let Some(link) = slot.link.as_mut() else {
            return;
        };
        if writable && link.flush().is_err() {
            return self.worker_gone(i);
        }
        // Backpressure on a worker that is behind: leave its requests unread (its own link
        // fills and it refuses new work) until it has taken what it owes.
        slot.reading_paused = link.is_congested();
        if slot.reading_paused {
            return;
        }
        let mut frames = Vec::new();
        match link.read_frames(|f| frames.push(ToMaster::decode(f))) {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                for frame in frames.into_iter().flatten() {
                    self.on_frame(i, frame);
                }
                return self.worker_gone(i);
            }
        }
        for frame in frames {
            match frame {
                Ok(frame) => self.on_frame(i, frame),
                Err(e) => {
                    tracing::error!(worker = i, error = %e, "bad frame from worker");
                    return self.worker_gone(i);
                }
            }
        }
    }

    /// Reads the requests of workers whose link drained since reading paused (edge-triggered:
    /// no new readable event would come for data that is already waiting).
    fn resume_paused_reads(&mut self) {
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.reading_paused && slot.link.as_ref().is_some_and(|l| !l.is_congested()) {
                self.on_worker_event(i, false);
            }
        }
    }

    fn send(&mut self, i: usize, frame: Vec<u8>) {
        let Some(link) = self.slots[i].link.as_mut() else {
            return;
        };
        if let Err(e) = link.send(frame) {
            tracing::error!(worker = i, error = %e, "worker link failed; restarting the worker");
            self.worker_gone(i);
        }
    }

    /// A publish from worker `i` (with its `Idempotency-Key`, if any).
    fn on_publish(
        &mut self,
        i: usize,
        req: u64,
        channel: String,
        payload: Vec<u8>,
        key: Option<String>,
    ) {
        let slots = &self.slots;
        let behind = self.interest.get(&channel).is_some_and(|targets| {
            targets
                .iter()
                .any(|&w| slots[w].link.as_ref().is_some_and(|l| l.is_congested()))
        });
        if behind {
            // Refused before it gets an id: nothing is half-published, and the
            // publisher (not the master's memory) absorbs the overload.
            self.publish_refused += 1;
            let refusal = ToWorker::PublishRefused {
                req,
                retry_after_s: RETRY_AFTER_S,
                broker: String::new(),
            };
            return self.send(i, refusal.encode());
        }
        let payload: Rc<[u8]> = Rc::from(payload);
        let req = Req {
            worker: i,
            token: req,
        };
        self.broker.publish(req, channel, payload, key);
        self.pump();
    }

    fn on_frame(&mut self, i: usize, frame: ToMaster) {
        match frame {
            ToMaster::Publish { req, .. } if self.handover.as_ref().is_some_and(|p| p.frozen) => {
                // Upgrading: the hub is frozen until the new master has it. Refused before
                // it gets an id, so nothing is half-published; the publisher retries.
                self.publish_refused += 1;
                let refusal = ToWorker::PublishRefused {
                    req,
                    retry_after_s: RETRY_AFTER_S,
                    broker: String::new(),
                };
                self.send(i, refusal.encode());
            }
            ToMaster::Publish {
                req,
                channel,
                payload,
            } => self.on_publish(i, req, channel, payload, None),
            ToMaster::PublishKeyed {
                req,
                channel,
                payload,
                key,
            } => self.on_publish(i, req, channel, payload, Some(key)),
            ToMaster::Join {
                req,
                channels,
                after,
            } => {
                for c in &channels {
                    let workers = self.interest.entry(c.clone()).or_default();
                    if !workers.contains(&i) {
                        workers.push(i);
                    }
                }
                let req = Req {
                    worker: i,
                    token: req,
                };
                self.broker.join(req, channels, after, REPLAY_CHUNK);
                self.pump();
            }
            ToMaster::Leave { channel } => self.drop_interest(i, Some(&channel)),
            ToMaster::Stats(stats) => {
                self.slots[i].stats = *stats;
                self.slots[i].reported_at = Instant::now();
                self.slots[i].listening = true;
            }
            ToMaster::Io(io) => self.slots[i].io = Some(io),
            ToMaster::Counts { counts } => {
                for (channel, n) in counts {
                    self.set_worker_count(i, channel, n);
                }
            }
            ToMaster::ChannelInfo { req, channel } => {
                let local = self.local_count(&channel);
                let req = Req {
                    worker: i,
                    token: req,
                };
                self.broker.channel_info(req, channel, local);
                self.pump();
            }
            frame @ (ToMaster::HandOverPrepared
            | ToMaster::HandOverSent { .. }
            | ToMaster::HandOverFailed { .. }) => self.on_handover_frame(i, frame),
            ToMaster::StatusQuery { req, metrics } => {
                let report = status::Report::gather(self);
                let body = if metrics {
                    report.prometheus()
                } else {
                    report.json()
                };
                self.send(i, ToWorker::Status { req, body, metrics }.encode());
            }
        }
    }

    fn drop_interest(&mut self, worker: usize, channel: Option<&str>) {
        match channel {
            Some(c) => {
                if let Some(ws) = self.interest.get_mut(c) {
                    ws.retain(|&w| w != worker);
                    if ws.is_empty() {
                        self.interest.remove(c);
                        self.broker.leave(c);
                    }
                }
            }
            None => {
                let mut emptied = Vec::new();
                self.interest.retain(|c, ws| {
                    ws.retain(|&w| w != worker);
                    if ws.is_empty() {
                        emptied.push(c.clone());
                    }
                    !ws.is_empty()
                });
                for c in emptied {
                    self.broker.leave(&c);
                }
            }
        }
    }

    /// READY=1 once every worker listens (first time only), and the watchdog ping when due.
    fn notify_systemd(&mut self, now: Instant) {
        let Some(notifier) = &mut self.notifier else {
            return;
        };
        notifier.tick(now);
        if !self.ready_sent
            && self.shutdown_deadline.is_none()
            && self.slots.iter().all(|s| s.listening)
        {
            let status = format!(
                "listening on {}, {} workers",
                self.cfg.listen, self.plan.workers
            );
            notifier.ready(&status, now);
            self.ready_sent = true;
        }
    }

    /// Hands the broker's ready events to the workers: answers to the worker that asked,
    /// messages and gaps to every worker with subscribers on the channel.
    fn pump(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.broker.drain(&mut events);
        for event in events.drain(..) {
            match event {
                // The publisher's answer comes before the message: if its worker also has
                // subscribers, the ack would otherwise wait behind that worker's whole local
                // fan-out. (Only join answers must stay ordered after earlier messages.)
                Event::Published { req, channel, id } => {
                    self.published += 1;
                    let ack = ToWorker::Published {
                        req: req.token,
                        channel,
                        id,
                    };
                    self.send(req.worker, ack.encode());
                }
                Event::PublishUnavailable { req, cause } => {
                    self.publish_refused += 1;
                    let refusal = ToWorker::PublishRefused {
                        req: req.token,
                        retry_after_s: RETRY_AFTER_S,
                        broker: cause,
                    };
                    self.send(req.worker, refusal.encode());
                }
                Event::Joined {
                    req,
                    current_id,
                    channels,
                    chunk,
                } => {
                    let joined = ToWorker::Joined {
                        req: req.token,
                        current_id,
                        channels,
                        replay: chunk.items,
                        more: chunk.more,
                    };
                    self.send(req.worker, joined.encode());
                }
                Event::JoinUnavailable { req } => {
                    let refusal = ToWorker::JoinRefused {
                        req: req.token,
                        retry_after_s: RETRY_AFTER_S,
                    };
                    self.send(req.worker, refusal.encode());
                }
                Event::Message {
                    channel,
                    id,
                    payload,
                } => {
                    let Some(targets) = self.interest.get(&channel).cloned() else {
                        continue;
                    };
                    // Publish-to-write latency starts here: when this node's master hands the
                    // message out (for the in-process hub, right after the publish arrived).
                    let frame = ToWorker::Message {
                        channel,
                        id,
                        payload: payload.to_vec(),
                        published_us: c1m_sys::shm::monotonic_micros(),
                    }
                    .encode();
                    for w in targets {
                        self.send(w, frame.clone());
                    }
                }
                Event::ChannelInfo {
                    req,
                    channel,
                    subscribers,
                    last_id,
                    nodes,
                    complete,
                } => {
                    let body = serde_json::json!({
                        "channel": channel, "subscribers": subscribers, "last_id": last_id,
                        "nodes": nodes, "complete": complete,
                    })
                    .to_string();
                    let answer = ToWorker::Status {
                        req: req.token,
                        body,
                        metrics: false,
                    };
                    self.send(req.worker, answer.encode());
                }
                Event::Gap {
                    channel,
                    after,
                    through,
                } => {
                    let Some(targets) = self.interest.get(&channel).cloned() else {
                        continue;
                    };
                    let frame = ToWorker::Gap {
                        channel,
                        after,
                        through,
                    }
                    .encode();
                    for w in targets {
                        self.send(w, frame.clone());
                    }
                }
            }
        }
        self.events = events;
    }

    fn local_count(&self, channel: &str) -> u64 {
        self.counts
            .get(channel)
            .map_or(0, |ws| ws.iter().map(|&(_, n)| u64::from(n)).sum())
    }

    /// Records worker `i`'s subscriber count on `channel` and tells the broker this node's.
    fn set_worker_count(&mut self, i: usize, channel: String, n: u32) {
        let entry = self.counts.entry(channel.clone()).or_default();
        entry.retain(|&(w, _)| w != i);
        if n > 0 {
            entry.push((i, n));
        }
        if entry.is_empty() {
            self.counts.remove(&channel);
        }
        let total = self.local_count(&channel);
        self.broker.set_count(&channel, total);
    }

    /// A worker's link broke: make sure the process is gone; `reap` restarts it.
    fn worker_gone(&mut self, i: usize) {
        self.handover_lost_worker(i);
        if let Some(mut link) = self.slots[i].link.take() {
            let _ = self.poll.registry().deregister(&mut link.stream);
        }
        if let Some(child) = &mut self.slots[i].child {
            let _ = child.kill();
        }
        self.drop_interest(i, None);
        let held: Vec<String> = self
            .counts
            .iter()
            .filter(|(_, ws)| ws.iter().any(|&(w, _)| w == i))
            .map(|(c, _)| c.clone())
            .collect();
        for channel in held {
            self.set_worker_count(i, channel, 0);
        }
    }

    /// Collects exited workers and schedules their restart.
    fn reap(&mut self) {
        for i in 0..self.slots.len() {
            let Some(child) = &mut self.slots[i].child else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            let pid = child.id();
            self.slots[i].child = None;
            self.worker_gone(i);
            let slot = &mut self.slots[i];
            status::retire(&mut slot.retired, &slot.stats);
            slot.stats = WorkerStats::default();
            if self.shutdown_deadline.is_none() {
                self.restarts += 1;
                self.slots[i].restarts += 1;
                self.slots[i].restart_at = Some(Instant::now() + RESTART_DELAY);
                tracing::warn!(worker = i, pid, status = %status, "worker exited; restarting");
            }
        }
    }

    fn begin_shutdown(&mut self) {
        if self.shutdown_deadline.is_some() {
            return;
        }
        tracing::info!(grace = ?self.cfg.grace, "shutting down");
        if let Some(n) = &self.notifier {
            n.send("STOPPING=1\nSTATUS=draining");
        }
        self.shutdown_deadline = Some(Instant::now() + self.cfg.grace + Duration::from_secs(1));
        for i in 0..self.slots.len() {
            self.send(i, ToWorker::Shutdown.encode());
        }
    }
}

/// `--io`: probe io_uring once before any worker starts, so an explicit `uring` the kernel
/// refuses stops the server with the reason, and `auto` says once why it falls back (each
/// worker still makes its own ring and reports its own path).
fn check_io_path(cfg: &Config) -> anyhow::Result<()> {
    use crate::config::IoMode;
    if cfg.io == IoMode::Epoll {
        return Ok(());
    }
    match c1m_sys::uring::probe(cfg.uring_setup.ring(cfg.uring_entries)) {
        Ok(()) => Ok(()),
        Err(e) if cfg.io == IoMode::Auto => {
            tracing::warn!(reason = %format!("io_uring_setup: {e}"), "--io auto: io_uring refused by the kernel, fan-out uses epoll + write()");
            Ok(())
        }
        Err(e) => anyhow::bail!(
            "--io uring: the kernel refused io_uring (io_uring_setup: {e}; see kernel.io_uring_disabled, seccomp); use --io auto or --io epoll"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_covers_max_conns_under_the_fd_limit() {
        // 1M connections at a hard limit of 20000: 1_050_000 / 19_936 → 53 workers, each
        // taking its share (18,868) plus 5 % for the uneven spread.
        let p = plan(Workers::Auto, 1_000_000, 20_000, 2);
        assert_eq!(
            p,
            Plan {
                workers: 53,
                per_worker: 19_812
            }
        );
        assert!(p.per_worker * p.workers as u64 >= 1_050_000);
        assert!(p.per_worker <= 20_000 - reserved_fds(20_000));
        assert_eq!(reserved_fds(20_000), 64);
        assert_eq!(plan(Workers::Count(1), 100, 48, 2).per_worker, 44);
        // Small targets still get one worker per CPU.
        assert_eq!(
            plan(Workers::Auto, 1000, 20_000, 2),
            Plan {
                workers: 2,
                per_worker: 525
            }
        );
        // One worker has no spread to allow for.
        assert_eq!(plan(Workers::Count(1), 3, 20_000, 2).per_worker, 3);
        // An explicit count too small for the target is capped by the fd limit.
        assert_eq!(
            plan(Workers::Count(1), 1_000_000, 20_000, 2).per_worker,
            19_936
        );
    }
}

/// glibc malloc settings for a worker, added to any `GLIBC_TUNABLES` the operator set (theirs
/// come last, so they win). A worker holds one big table per kind (connection slab, channel
/// member lists) that grows as subscribers arrive. glibc's default mmap threshold is dynamic:
/// freeing one mmapped block raises it to that block's size (up to 32 MiB), after which the
/// next tables grow on the brk heap and every outgrown copy stays behind as touched, unusable
/// memory. A fixed threshold keeps blocks of 64 KiB and more in mmap, where growing is an
/// mremap and freeing gives the pages back; a fixed trim threshold returns freed heap tops.
/// One arena: the worker is single-threaded. No per-thread cache (tcache): the chunks it keeps
/// count as in use, so `malloc_trim` cannot give back the pages they sit on (measured at serve's
/// 1M plan, 54 idle workers: heap 120 → 68 KiB each, Σ PSS −2.8 MiB, i.e. −3 B per connection
/// at 1M); what it saves is a few ns per malloc, and a worker mallocs per publish and per
/// connection, not per delivered message.
pub fn worker_malloc_tunables(existing: Option<&str>) -> String {
    const OURS: &str = "glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=131072:glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0";
    match existing {
        Some(theirs) if !theirs.trim().is_empty() => format!("{OURS}:{theirs}"),
        _ => OURS.to_string(),
    }
}

#[cfg(test)]
mod malloc_tests {
    use super::worker_malloc_tunables;

    #[test]
    fn operator_tunables_are_kept_and_win() {
        let ours = worker_malloc_tunables(None);
        assert!(ours.contains("glibc.malloc.mmap_threshold=65536"));
        assert!(ours.contains("glibc.malloc.tcache_count=0"));
        assert_eq!(worker_malloc_tunables(Some("  ")), ours);
        let both = worker_malloc_tunables(Some("glibc.malloc.mmap_threshold=1048576"));
        // glibc applies the tunables in order: the operator's (last) setting wins.
        assert!(both.ends_with(":glibc.malloc.mmap_threshold=1048576"));
        assert!(both.starts_with(&ours));
    }
}
