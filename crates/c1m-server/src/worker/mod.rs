//! A worker process: its own SO_REUSEPORT listeners and one single-threaded, edge-triggered
//! mio loop over a slab of connections. Tokens are slab index + generation, so an event for a
//! reused slot is recognised as stale and dropped (nginx's instance bit).
//!
//! Files: `conn` (the per-connection struct and its send queue), `channels` (local subscriber
//! lists), `timers` (the wheel), `message` (encode-once messages), `requests` (HTTP and line
//! protocol input), `streams` (subscribe, join, fan-out, long-poll answers), `fan_out_slices`
//! (fan-outs queued and delivered a bounded slice per loop turn), `ip_limits`
//! (per-source-address admission), `edge` (JWT auth, token expiry and refresh, CORS, the
//! admin listener), `tls_session` (TLS handshake and record layer), `sender` (the fan-out
//! send path: write() or batched io_uring sends).

mod channels;
mod cluster;
mod conn;
mod dashboard;
mod edge;
mod fan_out_slices;
mod handover;
mod health;
mod ip_limits;
mod keepalive;
mod message;
mod publish_rule;
mod reload;
mod requests;
mod sender;
mod shutdown;
mod streams;
mod sweep;
mod timers;
mod tls_session;
mod websocket;

use crate::config::Config;
use crate::ipc::{Refused, Replay, ToMaster, ToWorker, WorkerStats};
use crate::link::Link;
use anyhow::Context;
use channels::Channels;
use conn::{Conn, Kind, Protocol};
use mio::net::{TcpListener, TcpStream, UnixStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use timers::Wheel;

/// How often a worker pushes its figures to the master.
pub const STATS_EVERY: Duration = Duration::from_millis(250);
/// How often an idle worker hands freed heap pages back (`c1m_sys::mem::trim_heap`): a ramp
/// leaves its head-timeout entries and outgrown member-list copies behind as freed but resident
/// heap, ~8 B per subscriber at 15K per worker (issue 16, BENCHMARKS "Issue 16 (branch
/// fixedmem)"). Skipped while a fan-out is queued, so it never runs inside one.
const TRIM_EVERY: Duration = Duration::from_secs(5);
/// How long accept() pauses after EMFILE/ENFILE (no busy spin; existing connections go on).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

const HTTP_LISTENER: Token = Token(usize::MAX - 1);
const TCP_LISTENER: Token = Token(usize::MAX - 2);
const MASTER_LINK: Token = Token(usize::MAX - 3);
const SIGNALS: Token = Token(usize::MAX - 4);
const ADMIN_LISTENER: Token = Token(usize::MAX - 5);

/// Environment variables through which the master hands a worker its setup.
pub const ENV_FD: &str = "C1M_WORKER_FD";
pub const ENV_INDEX: &str = "C1M_WORKER_INDEX";
pub const ENV_CONFIG: &str = "C1M_WORKER_CONFIG";
pub const ENV_MASTER_PID: &str = "C1M_MASTER_PID";
pub const ENV_MAX_CONNS: &str = "C1M_WORKER_MAX_CONNS";
/// Set to [`ROLE_CONTROL`] for the control worker (see `Master::control_slot`).
pub const ENV_ROLE: &str = "C1M_WORKER_ROLE";
pub const ROLE_CONTROL: &str = "control";

/// The connection slab is sized for this worker's share of `--max-conns` up front (at most
/// this many slots, 64 MiB of address space). The allocation is mmapped and untouched, so an
/// unused slot costs no memory, while a slab that grew by doubling left each outgrown copy
/// behind as touched heap (below glibc's mmap threshold) and moved every connection on each
/// step: ~20 B more per subscriber at 100K (issue 16).
const SLAB_PRESIZE_MAX: usize = 1 << 20;
/// Largest socket read (see `growing_read`).
const MAX_READ: usize = 16 * 1024;
pub use handover::{handover_name, ENV_HANDOVER, ENV_HANDOVER_TIMEOUT};
pub use ip_limits::ENV_IP_TABLE;

/// One chunk of a join answer (see `ToWorker::Joined`).
pub struct Joined {
    pub current_id: u64,
    pub channels: Vec<String>,
    pub replay: Vec<Replay>,
    pub more: bool,
}

/// Running counters (connection counts are computed when reported).
#[derive(Default)]
struct Counters {
    delivered: u64,
    dropped: u64,
    client_ignored: u64,
    refused: Refused,
    subscribes: u64,
    /// SSE heartbeats written, and skipped because the stream was sent other bytes within the
    /// interval (streams.rs `send_heartbeats`).
    heartbeats_sent: u64,
    heartbeats_skipped: u64,
    latency: crate::histogram::Latencies,
}

pub struct Worker {
    cfg: Config,
    poll: Poll,
    http_listener: Option<TcpListener>,
    tcp_listener: Option<TcpListener>,
    link: Link,
    conns: Slab<Conn>,
    next_generation: u32,
    channels: Channels,
    wheel: Wheel,
    counters: Counters,
    max_conns: usize,
    /// Per-worker read buffer: every read lands here first, so idle connections own none.
    scratch: Vec<u8>,
    /// Socket reads: one page at first, up to [`MAX_READ`] (a worker that only holds idle
    /// streams never touches more).
    reads: crate::growing_read::GrowingRead,
    accept_paused_until: Option<Instant>,
    /// Log lines that could repeat per connection, each at most once per 10 s.
    accept_errors: crate::log::Limited,
    socket_errors: crate::log::Limited,
    shutdown_deadline: Option<Instant>,
    ws_policy: c1m_proto::ws::handshake::OriginPolicy,
    /// Connections (by token) in the middle of a chunked replay: `Some(id)` = ask for the
    /// chunk after `id` once the socket has taken the last one; `None` = asked, waiting.
    replays: HashMap<u64, Option<u64>>,
    /// Connections (by token) in the middle of a chunked request body: where the decoder
    /// stopped, so the next read resumes there instead of rescanning every chunk.
    chunked_bodies: HashMap<u64, c1m_proto::chunked::Progress>,
    /// Sending to the master failed (the link broke or the master stopped reading): the loop
    /// exits and the master starts a fresh worker; nothing is queued that would never arrive.
    link_failed: Option<io::Error>,
    /// `--max-conns-per-ip` / `--max-new-conns-per-ip-per-sec`, when on.
    ip_limits: Option<ip_limits::IpLimits>,
    /// `--admin-listen`, when set.
    admin_listener: Option<TcpListener>,
    /// JWT verification and CORS (rebuilt on reload).
    auth: crate::auth::Auth,
    /// Connections (by token) whose next answer carries CORS headers (a subscribe or publish
    /// from an allowed Origin, until its response head is written).
    cors_pending: HashMap<u64, std::rc::Rc<str>>,
    /// Publish requests (by token) waiting for the master's answer: when each was parsed
    /// (monotonic µs), for the publish-ack histogram.
    publish_started: HashMap<u64, u64>,
    /// `/dashboard/events` streams (by token), at most [`dashboard::MAX_VIEWERS`].
    dashboards: Vec<u64>,
    /// Published messages on their way to local subscribers, a slice per loop turn.
    fan_outs: fan_out_slices::FanOuts,
    /// The master link was left unread because too many fan-outs are queued; it is read
    /// again once they drain (edge-triggered: no new event comes for frames already waiting).
    link_read_paused: bool,
    /// Live upgrade: frozen, or handed over and waiting for the commit (docs/upgrade.md).
    handover: handover::HandOver,
    /// The key material from the master (`crate::secrets`): TLS and JWT keys are built from
    /// these bytes, at start and on each reconfiguration, never from the files.
    secrets: crate::secrets::Secrets,
    /// Fan-out send path (`--io`): write() per socket or batched io_uring sends.
    sender: sender::Sender,
    /// Why this worker does not use io_uring though `--io` allowed it (empty otherwise).
    io_fallback_reason: String,
}

/// Entry point of `c1m __serve-worker`.
pub fn run_from_env() -> anyhow::Result<u8> {
    let var = |name: &str| {
        std::env::var(name)
            .with_context(|| format!("{name} not set (workers are started by `c1m serve`)"))
    };
    let cfg: Config = serde_json::from_str(&var(ENV_CONFIG)?).context("worker config")?;
    let index: usize = var(ENV_INDEX)?.parse().context("worker index")?;
    // Every line this worker writes carries its index and pid.
    crate::log::init_worker(cfg.log_format, &cfg.log_level, index);
    let json = cfg.log_format == crate::config::LogFormat::Json;
    match run_configured(cfg, index) {
        // In JSON mode every line the process writes is JSON, its last words too.
        Err(e) if json => {
            tracing::error!(error = %format!("{e:#}"), "worker stopped by an error");
            Ok(2)
        }
        result => result,
    }
}

/// The worker's life once its logs are set up.
fn run_configured(cfg: Config, index: usize) -> anyhow::Result<u8> {
    let var = |name: &str| {
        std::env::var(name)
            .with_context(|| format!("{name} not set (workers are started by `c1m serve`)"))
    };
    let fd: i32 = var(ENV_FD)?.parse().context("worker fd")?;
    let master_pid: u32 = var(ENV_MASTER_PID)?.parse().context("master pid")?;
    let max_conns: usize = var(ENV_MAX_CONNS)?.parse().context("worker max conns")?;
    c1m_sys::process::die_with_parent(libc::SIGKILL, master_pid)
        .context("tying worker to master")?;
    c1m_sys::rlimit::raise_nofile_to_hard().context("raising RLIMIT_NOFILE")?;
    let mut link = std::os::unix::net::UnixStream::from(c1m_sys::fd::adopt_inherited(fd)?);
    let secrets = first_frame_secrets(&mut link).context("receiving the key material")?;
    link.set_nonblocking(true)?;
    let link = UnixStream::from_std(link);
    let ip_limits = ip_limits::IpLimits::from_env(&cfg, index)?;
    let control = std::env::var(ENV_ROLE).is_ok_and(|r| r == ROLE_CONTROL);
    if !control && cfg.worker_nice > 0 {
        let nice = c1m_sys::process::lower_priority(cfg.worker_nice)
            .context("lowering the worker's CPU priority (--worker-nice)")?;
        tracing::debug!(nice, "subscriber worker priority lowered");
    }
    let Ok(name) = std::env::var(handover::ENV_HANDOVER) else {
        let mut worker = Worker::new(cfg, secrets, link, max_conns, control, &mut Vec::new())?;
        worker.ip_limits = ip_limits;
        worker.run()?;
        return Ok(0);
    };
    // Started by a new master during a live upgrade: take over the predecessor's listeners
    // and connections instead of binding.
    let timeout = Duration::from_millis(var(handover::ENV_HANDOVER_TIMEOUT)?.parse()?);
    let started = Instant::now();
    let mut taken = handover::receive(&name, timeout).context("upgrade: taking over")?;
    let conns = taken.conns.len();
    tracing::info!(
        conns,
        took_ms = started.elapsed().as_millis() as u64,
        "upgrade: connections received; waiting for commit"
    );
    let mut worker = Worker::new(cfg, secrets, link, max_conns, control, &mut taken.listeners)?;
    worker.ip_limits = ip_limits;
    worker.restore(std::mem::take(&mut taken.conns))?;
    if !handover::await_commit(&taken.pair, timeout)? {
        tracing::warn!("upgrade: aborted by the old worker; exiting without touching a connection");
        return Ok(0);
    }
    drop(taken.pair);
    tracing::info!(conns, "upgrade: committed; serving");
    worker.after_takeover();
    worker.run()?;
    Ok(0)
}

/// How long a new worker waits for its first frame (the master sends it right after the
/// spawn).
const FIRST_FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// The master's first frame on the link: the key material this worker serves with.
fn first_frame_secrets(
    link: &mut std::os::unix::net::UnixStream,
) -> anyhow::Result<crate::secrets::Secrets> {
    use std::io::Read;
    link.set_read_timeout(Some(FIRST_FRAME_TIMEOUT))?;
    let mut len = [0u8; 4];
    link.read_exact(&mut len)
        .context("reading the master's first frame")?;
    let len = u32::from_le_bytes(len) as usize;
    if len > crate::ipc::MAX_FRAME {
        anyhow::bail!("first frame of {len} bytes refused");
    }
    let mut body = vec![0u8; len];
    link.read_exact(&mut body)
        .context("reading the master's first frame")?;
    link.set_read_timeout(None)?;
    match ToWorker::decode(&body)? {
        ToWorker::Secrets(secrets) => Ok(secrets),
        other => anyhow::bail!("expected the key material first, got {other:?}"),
    }
}

/// The listener handed over by the predecessor (live upgrade), else a fresh SO_REUSEPORT one
/// with the keepalive options accepted sockets inherit.
fn listen(
    cfg: &Config,
    addr: SocketAddr,
    taken: &mut Vec<(u8, std::os::fd::OwnedFd)>,
    kind: u8,
) -> anyhow::Result<TcpListener> {
    if let Some(l) = handover::take_listener(taken, kind) {
        return Ok(l);
    }
    let listener = crate::listener::bind_reuseport(addr, Some(cfg.backlog))?;
    keepalive::apply_to_listener(&listener, cfg)
        .with_context(|| format!("keepalive options on the listener {addr}"))?;
    Ok(TcpListener::from_std(listener))
}

impl Worker {
    /// A subscriber worker listens on the public addresses; the `control` worker (one, with
    /// `--admin-listen`) on the admin address alone.
    fn new(
        cfg: Config,
        secrets: crate::secrets::Secrets,
        link: UnixStream,
        max_conns: usize,
        control: bool,
        taken: &mut Vec<(u8, std::os::fd::OwnedFd)>,
    ) -> anyhow::Result<Worker> {
        use c1m_proto::handover::{LISTENER_ADMIN, LISTENER_HTTP, LISTENER_TCP};
        let poll = Poll::new()?;
        let http = if control {
            None
        } else {
            let mut l = listen(&cfg, cfg.listen, taken, LISTENER_HTTP)?;
            poll.registry()
                .register(&mut l, HTTP_LISTENER, Interest::READABLE)?;
            Some(l)
        };
        let tcp = match cfg.tcp_listen.filter(|_| !control) {
            Some(addr) => {
                let mut l = listen(&cfg, addr, taken, LISTENER_TCP)?;
                poll.registry()
                    .register(&mut l, TCP_LISTENER, Interest::READABLE)?;
                Some(l)
            }
            None => None,
        };
        let mut link = Link::new(link);
        poll.registry().register(
            &mut link.stream,
            MASTER_LINK,
            Interest::READABLE | Interest::WRITABLE,
        )?;
        // A subscriber worker keeps an admin listener handed over by a predecessor from before
        // the control worker (closing it would reset the connections in its queue).
        let admin = match cfg.admin_listen {
            Some(addr) if control => Some(listen(&cfg, addr, taken, LISTENER_ADMIN)?),
            Some(_) => handover::take_listener(taken, LISTENER_ADMIN),
            None => None,
        };
        let admin = admin
            .map(|mut l| {
                poll.registry()
                    .register(&mut l, ADMIN_LISTENER, Interest::READABLE)
                    .map(|()| l)
            })
            .transpose()?;
        let ws_policy = reload::origin_policy(&cfg);
        let auth = crate::auth::Auth::new(&cfg, &secrets)?;
        if let Some(configs) = secrets.tls_configs(&cfg)? {
            tls_session::set_configs(Some(configs));
        }
        let (sender, io_fallback_reason) = sender::Sender::from_config(&cfg)?;
        Ok(Worker {
            secrets,
            sender,
            io_fallback_reason,
            admin_listener: admin,
            auth,
            cors_pending: HashMap::new(),
            publish_started: HashMap::new(),
            dashboards: Vec::new(),
            fan_outs: fan_out_slices::FanOuts::default(),
            link_read_paused: false,
            ws_policy,
            cfg,
            poll,
            http_listener: http,
            tcp_listener: tcp,
            link,
            conns: Slab::with_capacity(max_conns.min(SLAB_PRESIZE_MAX)),
            next_generation: 1,
            channels: Channels::default(),
            wheel: Wheel::default(),
            counters: Counters::default(),
            max_conns,
            scratch: Vec::with_capacity(64 * 1024),
            reads: crate::growing_read::GrowingRead::new(MAX_READ),
            accept_paused_until: None,
            accept_errors: crate::log::Limited::every(Duration::from_secs(10)),
            socket_errors: crate::log::Limited::every(Duration::from_secs(10)),
            shutdown_deadline: None,
            replays: HashMap::new(),
            chunked_bodies: HashMap::new(),
            link_failed: None,
            ip_limits: None,
            handover: handover::HandOver::default(),
        })
    }

    /// One past the highest occupied connection slot: where a periodic pass ends (sweep.rs).
    fn slots_end(&self) -> usize {
        self.conns.iter().next_back().map_or(0, |(idx, _)| idx + 1)
    }

    fn run(&mut self) -> anyhow::Result<()> {
        // Start-up's heap and deep stack are not needed again: hand them back (issue 16, the
        // fixed cost of ~50 processes).
        let released = c1m_sys::mem::release_idle_memory();
        tracing::debug!(
            stack_bytes = released.stack_bytes,
            heap_trimmed = released.heap_trimmed,
            "idle start-up memory released"
        );
        // SIGHUP is the master's (reload); a terminal hangup reaching the whole process group
        // must not kill the workers, so it is caught here and ignored.
        let mut signals =
            signal_hook_mio::v1_0::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let mut events = Events::with_capacity(1024);
        let tick = Duration::from_millis(timers::TICK_MS);
        let mut next_tick = Instant::now() + tick;
        let mut next_stats = Instant::now();
        let mut next_trim = Instant::now() + TRIM_EVERY;
        let mut heartbeats = sweep::Periodic::default();
        let mut pings = sweep::PingRounds::default();
        loop {
            let now = Instant::now();
            let timeout = if self.handover.frozen {
                STATS_EVERY // timers do not advance while frozen: no zero-timeout spin
            } else if !self.fan_outs.is_empty() {
                // A fan-out in progress: only look for events that are ready, then go on with it.
                Duration::ZERO
            } else {
                next_tick.saturating_duration_since(now)
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            for event in events.iter() {
                match event.token() {
                    // Frozen for a hand-over: client events wait (the resume, or the new
                    // worker's registration, picks up what is pending).
                    HTTP_LISTENER | TCP_LISTENER | ADMIN_LISTENER if self.handover.frozen => {}
                    HTTP_LISTENER | TCP_LISTENER | ADMIN_LISTENER => self.accept_all(event.token()),
                    MASTER_LINK => {
                        if !self.serve_master_link(event.is_writable()) {
                            return Ok(());
                        }
                    }
                    SIGNALS => {
                        let got: Vec<i32> = signals.pending().collect();
                        if got.iter().any(|&s| s == libc::SIGTERM || s == libc::SIGINT) {
                            self.begin_shutdown();
                        }
                    }
                    _ if self.handover.frozen => {}
                    token => {
                        self.on_conn_event(token.0 as u64, event.is_readable(), event.is_writable())
                    }
                }
            }
            // One slice of the oldest fan-out per turn, after the events that were ready.
            self.fan_out_slice();
            if self.link_read_paused && !self.fan_outs_full() {
                self.link_read_paused = false;
                if !self.serve_master_link(false) {
                    return Ok(());
                }
            }
            if let Some(e) = self.link_failed.take() {
                tracing::error!(error = %e, "master link failed; exiting");
                return Ok(());
            }
            let now = Instant::now();
            if self.handover.frozen {
                // No timer, heartbeat or ping touches a client while frozen; they run late
                // after an abort, or in the new worker (which got each timer's remaining time).
                if next_stats <= now {
                    self.push_stats()?;
                    next_stats = now + STATS_EVERY;
                }
                continue;
            }
            while next_tick <= now {
                next_tick += tick;
                for token in self.wheel.advance() {
                    self.on_timer(token);
                }
            }
            if self.accept_paused_until.is_some_and(|t| t <= now) {
                self.accept_paused_until = None;
                self.accept_all(HTTP_LISTENER);
                self.accept_all(TCP_LISTENER);
                self.accept_all(ADMIN_LISTENER);
            }
            // Heartbeats and pings go out a slice per turn, spread over their period (sweep.rs);
            // a reload may turn them on, off, or shorten them. Unanswered pings are judged
            // before new ones are sent, so a new ping never hides an unanswered one.
            // The heartbeat pass runs every half interval: a stream gets a heartbeat at the
            // second visit in a row that finds it sent nothing (streams.rs `send_heartbeats`).
            let half = self.cfg.sse_heartbeat.map(|i| i / 2);
            let (beats, pass) = heartbeats.due_in_pass(half, now, || self.slots_end());
            self.send_heartbeats(beats, pass);
            while let Some(slots) = pings.judgement_due(self.cfg.ws_pong_timeout, now) {
                self.ws_close_unanswered(slots);
            }
            let due = pings.pings_due(self.cfg.ws_ping_interval, now, || self.slots_end());
            self.ws_ping(due);
            if next_stats <= now {
                self.push_stats()?;
                next_stats = now + STATS_EVERY;
            }
            if next_trim <= now && self.fan_outs.is_empty() {
                next_trim = now + TRIM_EVERY;
                c1m_sys::mem::trim_heap();
            }
            if let Some(deadline) = self.shutdown_deadline {
                if self.conns.is_empty() || deadline <= now {
                    self.end_of_grace();
                    self.push_stats()?;
                    let _ = self.link.flush();
                    return Ok(());
                }
            }
        }
    }

    // ---- accepting ------------------------------------------------------------------------

    fn accept_all(&mut self, which: Token) {
        if self.accept_paused_until.is_some()
            || self.shutdown_deadline.is_some()
            || self.handover.frozen
        {
            return;
        }
        loop {
            let listener = match which {
                HTTP_LISTENER => self.http_listener.as_ref(),
                ADMIN_LISTENER => self.admin_listener.as_ref(),
                _ => self.tcp_listener.as_ref(),
            };
            let Some(listener) = listener else { return };
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.admit(stream, peer, which == TCP_LISTENER, which == ADMIN_LISTENER)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if is_fd_exhaustion(&e) => {
                    // The backlog keeps the waiting connections; retry after a pause instead of
                    // spinning on an edge that will not fire again.
                    self.counters.refused.fd_limit += 1;
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        || e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    if let Some(held_back) = self.accept_errors.allow(Instant::now()) {
                        tracing::warn!(error = %e, held_back, "accept failed; pausing accepts");
                    }
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
            }
        }
    }

    fn admit(&mut self, mut stream: TcpStream, peer: SocketAddr, raw_tcp: bool, admin: bool) {
        // The admin listener stays plain HTTP unless --admin-tls: scrapers and health checks
        // on a private address speak http://.
        let tls = tls_session::enabled() && (!admin || self.cfg.admin_tls);
        if self.conns.len() >= self.max_conns {
            self.counters.refused.max_conns += 1;
            let msg: &[u8] = if raw_tcp {
                b"ERR server at max connections\n"
            } else {
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 26\r\nConnection: close\r\n\r\nserver at max connections\n"
            };
            // A TLS client would take plaintext for a broken record: it is only closed.
            if !tls {
                let _ = io::Write::write(&mut stream, msg);
            }
            return;
        }
        // The admin listener is for monitoring and the application's publishers, not the
        // public: a scraper polling /metrics must never get the per-IP 429.
        let ip_limits = self.ip_limits.as_ref().filter(|_| !admin);
        let ip_slot = match ip_limits.map(|l| l.admit(peer.ip())) {
            None => 0,
            Some(Ok(slot)) => slot,
            Some(Err(refusal)) => {
                let r = &mut self.counters.refused;
                match refusal {
                    ip_limits::Refusal::Conns => r.per_ip_conns += 1,
                    ip_limits::Refusal::Rate { .. } => r.per_ip_rate += 1,
                }
                if tls {
                    return; // closed: a plaintext answer means nothing to a TLS client
                }
                return refuse_at_accept(stream, &refusal.response(raw_tcp));
            }
        };
        let generation = self.next_generation;
        self.next_generation = if generation >= 0x7fff_fff0 {
            1
        } else {
            generation + 1
        };
        let kind = if raw_tcp {
            Kind::TcpCommand
        } else {
            Kind::Http
        };
        let entry = self.conns.vacant_entry();
        let token = token_of(entry.key(), generation);
        // Keepalive and TCP_USER_TIMEOUT come from the listener (see `keepalive`).
        let mut conn = Conn::new(stream, generation, kind);
        if admin {
            conn.edge |= conn::ADMIN;
        }
        if let Err(e) = self.poll.registry().register(
            &mut conn.stream,
            Token(token as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            if let Some(held_back) = self.socket_errors.allow(Instant::now()) {
                tracing::warn!(error = %e, held_back, "registering a connection failed");
            }
            if let Some(limits) = &self.ip_limits {
                limits.release(ip_slot);
            }
            return;
        }
        if let Err(e) = tls
            .then(|| tls_session::begin(&conn.stream, raw_tcp))
            .transpose()
        {
            if let Some(held_back) = self.socket_errors.allow(Instant::now()) {
                tracing::warn!(error = %e, held_back, "starting a TLS session failed");
            }
            let _ = self.poll.registry().deregister(&mut conn.stream);
            if let Some(limits) = &self.ip_limits {
                limits.release(ip_slot);
            }
            return;
        }
        let idx = entry.key();
        entry.insert(conn);
        if let Some(limits) = &mut self.ip_limits {
            limits.hold(idx, ip_slot);
        }
        // On a TLS port this also bounds the handshake.
        self.arm_head_timer(idx);
    }

    // ---- connection events ------------------------------------------------------------------

    fn conn_mut(&mut self, token: u64) -> Option<(usize, &mut Conn)> {
        let idx = (token & 0xffff_ffff) as usize;
        let generation = (token >> 32) as u32;
        match self.conns.get_mut(idx) {
            Some(c) if c.generation == generation => Some((idx, c)),
            _ => None,
        }
    }

    fn on_conn_event(&mut self, token: u64, readable: bool, writable: bool) {
        let Some((idx, conn)) = self.conn_mut(token) else {
            return;
        };
        if writable && !conn.has_out() {
            // TLS handshake bytes the socket refused earlier.
            if let Some(Err(e)) = tls_session::flush(&mut conn.stream) {
                self.count_lost_peer(&e);
                return self.close(idx);
            }
        }
        if writable && conn.has_out() {
            match conn.flush() {
                Ok(true) if conn.kind == Kind::Closing => return self.close(idx),
                Ok(true) if conn.kind.is_joining() => self.continue_replay(idx),
                // Pipelined requests wait while answers are unwritten (requests::process_input).
                Ok(true) if conn.kind == Kind::Http => self.resume_input(idx),
                Ok(_) => {}
                Err(e) => {
                    self.count_lost_peer(&e);
                    return self.close(idx);
                }
            }
        }
        if readable {
            self.on_readable(idx);
        }
    }

    /// Reads until WouldBlock: with edge-triggered epoll, bytes left unread get no new event.
    /// Kinds that expect input accumulate it; streams discard it. Input is used as it arrives
    /// (pipelined requests are answered while the rest is read), so the buffer stays within
    /// `input_limit`. The one exception to reading to WouldBlock: a full buffer that the
    /// connection cannot use yet (its request waits for the master, or its answers wait for the
    /// peer to read). Then reading stops, TCP flow control holds the rest in the peer, and the
    /// connection is marked READ_PAUSED so `resume_input` reads on when it can go on.
    fn on_readable(&mut self, idx: usize) {
        if self.handover.frozen {
            return; // read after an abort, or by the new worker
        }
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.flags &= !conn::READ_PAUSED;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        if let Some(pending) = conn.take_inbuf() {
            buf.extend_from_slice(&pending);
        }
        let limit = requests::input_limit(&self.cfg);
        let mut eof = false;
        let mut error = None;
        while let Some(kind) = self.conns.get(idx).map(|c| c.kind) {
            if buf.len() >= limit && keeps_input(kind) && kind != Kind::Ws {
                let used = self.process_input(idx, &buf);
                buf.drain(..used);
                match self.conns.get_mut(idx) {
                    None => break,
                    Some(c) if c.kind == Kind::Closing => break,
                    Some(c) if buf.len() >= limit && keeps_input(c.kind) => {
                        c.flags |= conn::READ_PAUSED;
                        break;
                    }
                    Some(_) => continue,
                }
            }
            let Some(conn) = self.conns.get_mut(idx) else {
                break;
            };
            let old = buf.len();
            match self.reads.append(&mut buf, |dst| conn.read(dst)) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(_) if kind == Kind::Ws => {
                    // Frames are decoded as they arrive, so a large message never piles up and
                    // the socket is always read to WouldBlock (edge-triggered).
                    let used = self.ws_input(idx, &mut buf);
                    buf.drain(..used);
                    if self.conns.get(idx).is_none_or(|c| c.kind != Kind::Ws) {
                        break;
                    }
                }
                Ok(_) if keeps_input(kind) => {}
                Ok(_) => buf.truncate(old), // a stream's input is discarded
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    eof = true;
                    error = Some(e);
                    break;
                }
            }
        }
        let kind = self.conns.get(idx).map(|c| c.kind);
        if kind.is_some_and(keeps_input) && !buf.is_empty() {
            // WebSocket input was decoded while reading; what is left is an unfinished tail.
            let consumed = if kind == Some(Kind::Ws) {
                0
            } else {
                self.process_input(idx, &buf)
            };
            if let Some(conn) = self.conns.get_mut(idx) {
                if consumed < buf.len() && conn.kind != Kind::Closing {
                    conn.set_inbuf(&buf[consumed..]);
                }
            }
        }
        if buf.capacity() > 256 * 1024 {
            buf = Vec::with_capacity(64 * 1024);
        }
        self.scratch = buf;
        if eof {
            self.on_peer_end(idx, error.as_ref());
        }
    }

    /// Removes a connection: leaves its channels (telling the master about channels this
    /// worker no longer needs) and closes the socket.
    fn close(&mut self, idx: usize) {
        let Some(mut conn) = self.conns.try_remove(idx) else {
            return;
        };
        if !self.replays.is_empty() {
            self.replays.remove(&token_of(idx, conn.generation));
        }
        if !self.chunked_bodies.is_empty() {
            self.chunked_bodies.remove(&token_of(idx, conn.generation));
        }
        if !self.cors_pending.is_empty() {
            self.cors_pending.remove(&token_of(idx, conn.generation));
        }
        if !self.publish_started.is_empty() {
            self.publish_started.remove(&token_of(idx, conn.generation));
        }
        for (chan, pos) in conn.take_subs() {
            self.leave_channel(chan, pos);
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        tls_session::end(&mut conn.stream);
        if let Some(limits) = &mut self.ip_limits {
            limits.release_held(idx);
        }
    }

    /// Sets the keepalive options again on every listener (after a reload).
    fn apply_keepalive_to_listeners(&mut self) {
        for l in [
            &self.http_listener,
            &self.tcp_listener,
            &self.admin_listener,
        ]
        .into_iter()
        .flatten()
        {
            if let Err(e) = keepalive::apply_to_listener(l, &self.cfg) {
                tracing::error!(error = %e, "keepalive options on a listener; later connections keep the old ones");
            }
        }
    }

    fn leave_channel(&mut self, chan: u32, pos: u32) {
        let (moved, emptied) = self.channels.leave(chan, pos);
        if let Some(moved) = moved {
            if let Some(c) = self.conns.get_mut(moved as usize) {
                c.set_sub_pos(chan, pos);
            }
        }
        if let Some(name) = emptied {
            self.send_to_master(ToMaster::Leave {
                channel: name.to_string(),
            });
        }
    }

    // ---- timers -----------------------------------------------------------------------------

    fn arm_timer(&mut self, idx: usize, after: Duration) {
        let deadline = self.wheel.deadline_after(after.as_millis() as u64);
        let conn = &mut self.conns[idx];
        conn.deadline = deadline;
        self.wheel
            .schedule(token_of(idx, conn.generation), deadline);
    }

    fn arm_head_timer(&mut self, idx: usize) {
        self.arm_timer(idx, self.cfg.head_timeout);
    }

    fn on_timer(&mut self, token: u64) {
        let now = self.wheel.now();
        let Some((idx, conn)) = self.conn_mut(token) else {
            return;
        };
        if conn.deadline == 0 {
            return;
        }
        if conn.deadline > now {
            let (deadline, token) = (conn.deadline, token);
            self.wheel.schedule(token, deadline);
            return;
        }
        conn.deadline = 0;
        let (kind, edge) = (conn.kind, conn.edge);
        match kind {
            Kind::Http | Kind::TcpCommand => {
                let started = conn.has_inbuf();
                if tls_session::count_handshake_timeout(&conn.stream) {
                    return self.close(idx);
                }
                if !started {
                    // Nothing of a request arrived: close quietly. An unsolicited 408 on an idle
                    // keep-alive connection would be read as the answer to the client's next
                    // request (it did that to bench's publisher). Only a connection that never
                    // sent a request counts as a refusal.
                    if conn.flags & conn::SERVED == 0 {
                        self.counters.refused.head_timeout += 1;
                    }
                    return self.close(idx);
                }
                self.counters.refused.head_timeout += 1;
                let reply = if kind == Kind::Http {
                    c1m_proto::http::error(408, "request head not received in time")
                } else {
                    c1m_proto::line::encode_err("no SUB command received in time")
                };
                self.reply_and_close(idx, reply);
            }
            Kind::PollWaiting if edge & conn::EXPIRES == 0 => self.poll_timeout(idx),
            Kind::Sse
            | Kind::SseJoining
            | Kind::Ws
            | Kind::WsJoining
            | Kind::PollJoining
            | Kind::PollWaiting
                if edge & conn::EXPIRES != 0 =>
            {
                self.token_expired(idx)
            }
            Kind::Status => self.status_timeout(idx),
            // The peer did not read its final answer within the linger time.
            Kind::Closing => self.cut_unread(idx),
            _ => {}
        }
    }

    // ---- master link ------------------------------------------------------------------------

    fn send_to_master(&mut self, msg: ToMaster) {
        if let Err(e) = self.link.send(msg.encode()) {
            self.link_failed.get_or_insert(e);
        }
    }

    /// The master is behind on this worker's requests: new publishes and joins are refused
    /// (503 with Retry-After) instead of queueing without bound.
    fn master_congested(&self) -> bool {
        self.link.is_congested()
    }

    /// Reads and handles the master's frames; false when the worker must exit (the master is
    /// gone: it also kills us via PR_SET_PDEATHSIG).
    fn serve_master_link(&mut self, writable: bool) -> bool {
        match self.on_master_event(writable) {
            Ok(open) => open,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "master link lost; exiting");
                false
            }
        }
    }

    /// Returns Ok(false) when the master closed the link.
    fn on_master_event(&mut self, writable: bool) -> anyhow::Result<bool> {
        if writable {
            self.link.flush()?;
        }
        if self.fan_outs_full() {
            self.link_read_paused = true;
            return Ok(true);
        }
        let mut frames = Vec::new();
        let open = self
            .link
            .read_frames(|f| frames.push(ToWorker::decode(f)))?;
        let frames = frames
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .context("bad frame from master")?;
        // Replies to a waiting publisher or status client go first: they need no ordering, and
        // behind a fan-out to thousands of sockets they would wait for nothing. Messages and
        // join answers keep their order (a replay must come before later live messages).
        let (replies, ordered): (Vec<_>, Vec<_>) = frames.into_iter().partition(|f| {
            matches!(
                f,
                ToWorker::Published { .. }
                    | ToWorker::PublishRefused { .. }
                    | ToWorker::Status { .. }
            )
        });
        for frame in replies.into_iter().chain(ordered) {
            self.on_frame(frame);
        }
        // Frames read while a hand-over waited for its new worker, in their order.
        while !self.handover.stashed.is_empty() {
            for frame in std::mem::take(&mut self.handover.stashed) {
                self.on_frame(frame);
            }
        }
        Ok(open)
    }

    fn on_frame(&mut self, frame: ToWorker) {
        if self.handover.sent.is_some()
            && !matches!(frame, ToWorker::HandOverCommit | ToWorker::HandOverAbort)
        {
            // Handed over: the connections are the new worker's; not a byte more from here.
            tracing::warn!("upgrade: frame for handed-over connections ignored");
            return;
        }
        match frame {
            ToWorker::Message {
                channel,
                id,
                payload,
                published_us,
            } => self.fan_out(&channel, id, payload, published_us),
            ToWorker::Published { req, channel, id } => self.on_published(req, &channel, id),
            ToWorker::Joined {
                req,
                current_id,
                channels,
                replay,
                more,
            } => {
                // Ordered after the messages sent before it: those go out first.
                self.finish_fan_outs();
                self.on_joined(
                    req,
                    Joined {
                        current_id,
                        channels,
                        replay,
                        more,
                    },
                )
            }
            ToWorker::PublishRefused {
                req,
                retry_after_s,
                broker,
            } => self.on_publish_refused(req, retry_after_s, &broker),
            ToWorker::Status { req, body, metrics } => self.on_status(req, body, metrics),
            ToWorker::Shutdown => self.begin_shutdown(),
            ToWorker::Reconfigure { json } => self.reconfigure(&json),
            ToWorker::Secrets(secrets) => self.secrets = secrets,
            ToWorker::JoinRefused { req, retry_after_s } => {
                self.on_join_refused(req, retry_after_s)
            }
            ToWorker::Gap {
                channel,
                after,
                through,
            } => {
                self.finish_fan_outs();
                self.fan_out_gap(&channel, after, through)
            }
            ToWorker::Dashboard { json } => self.push_dashboard(&json),
            ToWorker::HandOverPrepare => self.handover_prepare(),
            ToWorker::HandOverGo {
                name,
                new_master_pid,
                timeout_ms,
            } => self.handover_go(&name, new_master_pid, Duration::from_millis(timeout_ms)),
            ToWorker::HandOverCommit => self.handover_commit(),
            ToWorker::HandOverAbort => self.handover_abort(),
        }
    }

    fn push_stats(&mut self) -> anyhow::Result<()> {
        if self.master_congested() {
            return Ok(()); // figures are totals: the next push carries these too
        }
        let mut s = WorkerStats {
            pid: std::process::id(),
            ..Default::default()
        };
        for (_, conn) in self.conns.iter() {
            s.unsent_bytes += conn.unsent_bytes() as u64;
            match conn.kind.protocol() {
                Protocol::Sse => s.conns_sse += 1,
                Protocol::WebSocket => s.conns_ws += 1,
                Protocol::LongPoll => s.conns_longpoll += 1,
                Protocol::Tcp => s.conns_tcp += 1,
                Protocol::Other => s.conns_other += 1,
            }
        }
        s.delivered = self.counters.delivered;
        s.dropped = self.counters.dropped;
        s.client_ignored = self.counters.client_ignored;
        s.refused = self.counters.refused;
        s.tls = tls_session::stats();
        s.subscribes = self.counters.subscribes;
        s.heartbeats_sent = self.counters.heartbeats_sent;
        s.heartbeats_skipped = self.counters.heartbeats_skipped;
        s.latency = self.counters.latency;
        s.latency.tls_handshake = tls_session::handshake_histogram();
        s.rss_bytes = c1m_sys::mem::own_rss_bytes().unwrap_or(0);
        s.dashboard_viewers = self.dashboard_viewers();
        self.send_to_master(ToMaster::Stats(Box::new(s)));
        let io = self.sender.report(&self.io_fallback_reason);
        self.send_to_master(ToMaster::Io(io));
        let counts = self.channels.take_changed_counts();
        if !counts.is_empty() {
            self.send_to_master(ToMaster::Counts { counts });
        }
        Ok(())
    }

    // ---- shutdown ---------------------------------------------------------------------------

    /// Stops accepting and ends every stream cleanly; the loop exits once all connections are
    /// gone or the grace period ends.
    fn begin_shutdown(&mut self) {
        if self.shutdown_deadline.is_some() {
            return;
        }
        self.shutdown_deadline = Some(Instant::now() + self.cfg.grace);
        // Messages already published reach their subscribers before the goodbyes.
        self.finish_fan_outs();
        for mut l in [
            self.http_listener.take(),
            self.tcp_listener.take(),
            self.admin_listener.take(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let idxs: Vec<usize> = self.conns.iter().map(|(i, _)| i).collect();
        for idx in idxs {
            self.goodbye(idx);
        }
    }
}

/// Kinds whose input is kept (requests, WebSocket frames); streams discard what they are sent.
fn keeps_input(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::Sse | Kind::SseJoining | Kind::TcpStream | Kind::TcpJoining | Kind::Closing
    )
}

/// Answers a connection refused before it got a slot, then closes it. What the client already
/// sent is read first (once, without waiting): closing with unread input makes the kernel send
/// a reset, which can destroy the answer before the client reads it.
fn refuse_at_accept(mut stream: TcpStream, answer: &[u8]) {
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = io::Write::write(&mut stream, answer);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn token_of(idx: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | idx as u64
}

fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
