//! The master process: starts N workers, restarts any that dies (logged and counted), stops
//! them all on SIGTERM/SIGINT (each drains within the grace period), re-reads its
//! configuration on SIGHUP (`reload`), and is the in-node hub: every publish passes through
//! it, gets its id and history slot, and goes to each worker that has subscribers on the
//! channel. It serves no client traffic itself.
//!
//! This file holds the master's state and its construction. The rest, by job:
//! [`event_loop`] (the loop in named phases, signals, shutdown), `workers` (starting,
//! reaping and restarting the worker processes), `routing` (worker frames in, broker events
//! out: the in-node hub's traffic), `plan` and `plan_reason` (how many workers and why),
//! `status`, `dashboard`, `memory`, `reload`, `sd_notify` and `upgrade`.

mod api;
mod dashboard;
mod event_loop;
mod health;
mod memory;
mod plan;
mod plan_reason;
mod presence;
mod reload;
mod routing;
mod sd_notify;
mod status;
mod steer;
mod upgrade;
pub(crate) mod webhooks;
mod workers;

use crate::broker::{self, Broker, Event};
use crate::config::Config;
use crate::ipc::WorkerStats;
use crate::link::Link;
use anyhow::Context;
use mio::Poll;
pub use plan::{plan, reserved_fds, Plan, SPREAD_SLACK_PCT};
pub use plan_reason::{capacity_shortfall, workers_reason};
use std::collections::{BTreeMap, HashMap};
use std::process::Child;
use std::time::Instant;
pub use upgrade::{take_over, ENV_UPGRADE_FD};

/// One worker process's place: its process, its link and what it last reported.
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
    /// Its public listeners' descriptor numbers in its process (`ToMaster::Listeners`).
    listener_fds: Vec<u32>,
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
    /// The broker's `history_freed_bytes` when freed heap was last handed back to the kernel.
    freed_at_trim: u64,
    /// Channel → indices of workers with subscribers on it.
    interest: HashMap<String, Vec<usize>>,
    /// Channel → (worker, subscribers there), as the workers last reported; ordered, so a
    /// `channels` page is a range, not a sort of every channel.
    counts: BTreeMap<String, Vec<(usize, u32)>>,
    /// The node's presence member sets (`--presence`).
    presence: presence::Presence,
    slots: Vec<Slot>,
    published: u64,
    /// Publishes refused because a worker that must deliver them is behind.
    publish_refused: u64,
    restarts: u64,
    /// The server API's calls in progress and counts.
    api: api::Api,
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
    /// Lifecycle webhooks (`--webhook-url`): the open connections per worker and the
    /// delivery thread.
    webhooks: Option<webhooks::Webhooks>,
    /// Which worker takes each CPU's new connections first, when there are more subscriber
    /// workers than CPUs (`crate::steering`).
    steering: Option<crate::steering::Assignments>,
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
        let limits = broker::Limits::new(&cfg);
        let broker: Box<dyn Broker> = match &cfg.broker {
            None => Box::new(broker::memory::MemoryBroker::new(limits)),
            Some(url) => {
                let target = broker::redis::RedisTarget::parse(url, cfg.broker_ca.as_deref())?;
                let waker = mio::Waker::new(poll.registry(), event_loop::BROKER)?;
                Box::new(broker::redis::RedisBroker::start(target, limits, waker)?)
            }
        };
        let webhooks = webhooks::Webhooks::start(&cfg)?;
        let master = Master {
            webhooks,
            steering: crate::steering::Assignments::new(
                crate::steering::online_cpus(),
                (plan.workers, plan.per_worker, plan.slack(cfg.max_conns)),
                crate::steering::accept_queue(cfg.backlog),
            )
            .filter(|_| steer::allowed(&cfg)),
            presence: presence::Presence::new(cfg.presence_max_members, cfg.presence_max_bytes),
            cfg,
            secrets,
            plan,
            poll,
            broker,
            events: Vec::new(),
            freed_at_trim: 0,
            interest: HashMap::new(),
            counts: BTreeMap::new(),
            slots: Vec::new(),
            published: 0,
            publish_refused: 0,
            api: api::Api::new(),
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

    /// The members of `channel` on this node that have a user, by user then connection (the
    /// server API's `presence`).
    pub(crate) fn presence(&self, channel: &str) -> Vec<presence::MemberView> {
        self.presence.presence(channel)
    }

    /// Member connections of `channel` on this node and their distinct users (the server
    /// API's `presence_stats`).
    pub(crate) fn presence_stats(&self, channel: &str) -> presence::Stats {
        self.presence.presence_stats(channel)
    }

    /// The slot of the control worker, one worker more than the plan: it holds no
    /// subscriber, serves the admin listener (`--admin-listen`) and the publishes the
    /// subscriber workers pass it (`worker::publish_move`), so publish acks and /status never
    /// wait for CPU behind a fan-out (on a box where every subscriber worker is busy
    /// delivering, a request to one of them waits its turn among all of them: serve's ack mean
    /// 134 ms at 150K over 53 workers; BENCHMARKS.md "publish acks from a control worker").
    /// Always there; an Option for the code that predates that.
    pub fn control_slot(&self) -> Option<usize> {
        Some(self.plan.workers)
    }

    /// Subscriber workers, and the control worker when there is one.
    fn slot_count(&self) -> usize {
        self.plan.workers + usize::from(self.control_slot().is_some())
    }

    /// The port reservations to pass on to a new master at upgrade.
    pub fn set_reservations(
        &mut self,
        reservations: Vec<(crate::listener::Kind, crate::listener::Reservation)>,
    ) {
        self.reservations = reservations;
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
