//! A worker process: its own SO_REUSEPORT listeners and one single-threaded, edge-triggered
//! mio loop over a table of connections. This file holds the worker's start-up (from the
//! master's environment, or by taking over a predecessor's connections), the `Worker` state
//! and the way a connection ends; each part of the loop is in its own file.
//!
//! Files: the loop (`event_loop`: one turn in named phases), `accept` (admission at the
//! listeners), `conn_events` (a connection's readiness: flush and read), `expiry` (what a
//! connection's deadline means when it passes), `master_link` (frames to and from the
//! master), `stats` (the figures pushed to the master); the connections (`conn_table`: the
//! slab, side maps and TLS sessions with one `remove`; `conn`: one connection's state and byte
//! paths; `tls_session`: TLS handshake and record layer); input (`requests`: HTTP and line
//! protocol; `h2` and `h2_streams`: HTTP/2 connections and their streams; `websocket`; `edge`: JWT auth, token expiry and refresh, CORS, the admin
//! listener; `publish_rule`; `ip_limits`: per-source-address admission; `health`); output
//! (`joins`: subscribe and the join answer's replay; `delivery`: fan-out to live
//! subscribers; `fan_out_slices`: fan-outs delivered a bounded slice per loop turn; `answers`:
//! the master's answers to waiting requests and long-poll; `heartbeats`; `message`:
//! encode-once messages; `sender`: write() or batched io_uring sends; `shutdown`;
//! `dashboard`); `channels` (local subscriber lists), `cluster`, `timers` (the wheel),
//! `sweep` (periodic passes), `handover` (live upgrade), `reload`, `keepalive`.

mod accept;
mod answers;
mod api;
mod channels;
mod cluster;
mod conn;
mod conn_events;
mod conn_table;
mod dashboard;
mod delivery;
mod edge;
mod event_loop;
mod expiry;
mod fan_out_slices;
mod h2;
mod h2_streams;
mod handover;
mod health;
mod heartbeats;
mod ip_limits;
mod joins;
mod keepalive;
mod lifecycle;
mod master_link;
mod message;
mod namespaces;
mod presence;
mod proxy;
mod publish_move;
mod publish_rule;
mod reload;
mod requests;
mod sender;
mod shutdown;
mod stats;
mod steer;
mod sweep;
mod timers;
mod tls_session;
mod websocket;

use crate::config::Config;
use crate::ipc::{Refused, Replay, ToMaster, ToWorker};
use crate::link::Link;
use anyhow::Context;
use channels::Channels;
use conn_table::{token_of, ConnTable};
use mio::net::{TcpListener, UnixStream};
use mio::{Interest, Poll, Token};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use timers::Wheel;

/// How often a worker pushes its figures to the master.
pub const STATS_EVERY: Duration = Duration::from_millis(250);
const HTTP_LISTENER: Token = Token(usize::MAX - 1);
const TCP_LISTENER: Token = Token(usize::MAX - 2);
const MASTER_LINK: Token = Token(usize::MAX - 3);
const SIGNALS: Token = Token(usize::MAX - 4);
const ADMIN_LISTENER: Token = Token(usize::MAX - 5);
/// The proxy threads' wake-up (`proxy`): answers are waiting.
const PROXY_WAKER: Token = Token(usize::MAX - 6);

/// Environment variables through which the master hands a worker its setup.
pub const ENV_FD: &str = "C1M_WORKER_FD";
pub const ENV_INDEX: &str = "C1M_WORKER_INDEX";
pub const ENV_CONFIG: &str = "C1M_WORKER_CONFIG";
pub const ENV_MASTER_PID: &str = "C1M_MASTER_PID";
pub const ENV_MAX_CONNS: &str = "C1M_WORKER_MAX_CONNS";
/// The node's number of subscriber workers (the control worker not counted).
pub const ENV_SUBSCRIBER_WORKERS: &str = "C1M_WORKER_SUBSCRIBER_WORKERS";
/// Set to [`ROLE_CONTROL`] for the control worker (see `Master::control_slot`).
pub const ENV_ROLE: &str = "C1M_WORKER_ROLE";
pub const ROLE_CONTROL: &str = "control";

/// The connection slab is sized for this worker's share of `--max-conns` up front (at most
/// this many slots, 64 MiB of address space). The allocation is mmapped and untouched, so an
/// unused slot costs no memory, while a slab that grew by doubling left each outgrown copy
/// behind as touched heap (below glibc's mmap threshold) and moved every connection on each
/// step: ~20 B more per subscriber at 100K.
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
    /// interval (heartbeats.rs `send_heartbeats`).
    heartbeats_sent: u64,
    heartbeats_skipped: u64,
    latency: crate::histogram::Latencies,
    /// Publish connections passed to or taken from the control worker (`publish_move`).
    moves: crate::ipc::PublishMoveStats,
}

pub struct Worker {
    cfg: Config,
    poll: Poll,
    http_listener: Option<TcpListener>,
    tcp_listener: Option<TcpListener>,
    link: Link,
    /// Every connection and what is kept about it (side maps, TLS sessions).
    conns: ConnTable,
    channels: Channels,
    wheel: Wheel,
    counters: Counters,
    max_conns: usize,
    /// The CPU whose new connections this worker's listeners take first, and the count at
    /// which it hands the CPU back (`steer`).
    steered: Option<(u32, usize)>,
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
    /// Per-namespace options (client publish, auth required, max subscribers), rebuilt on
    /// reload; looked up per subscribe and per client publish, never kept per connection.
    namespaces: std::sync::Arc<crate::config::Namespaces>,
    /// Sending to the master failed (the link broke or the master stopped reading): the loop
    /// exits and the master starts a fresh worker; nothing is queued that would never arrive.
    link_failed: Option<io::Error>,
    /// `--max-conns-per-ip` / `--max-new-conns-per-ip-per-sec`, when on.
    ip_limits: Option<ip_limits::IpLimits>,
    /// `--admin-listen`, when set.
    admin_listener: Option<TcpListener>,
    /// JWT verification and CORS (rebuilt on reload).
    auth: crate::auth::Auth,
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
    /// Connection lifecycle reports for the master's webhooks (only when they are on).
    lifecycle: Option<lifecycle::Lifecycle>,
    /// This worker's index among the master's workers: the first part of its connections'
    /// ids (`crate::conn_id`).
    index: u32,
    /// How many subscriber workers the node has: a namespace's `max_subscribers` is split
    /// among them (`namespaces::share`).
    subscriber_workers: u32,
    /// Members of presence-enabled channels and the changes owed to the master.
    presence: presence::Presence,
    /// Backend proxy calls and the connections waiting on them.
    proxies: proxy::Proxies,
    /// Publishes on the public listener go to the control worker (`publish_move`).
    publish_moves: publish_move::PublishMoves,
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
    let subscriber_workers: u32 = var(ENV_SUBSCRIBER_WORKERS)?
        .parse()
        .context("subscriber worker count")?;
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
    // One constructor for both starts, fresh or taking over from a predecessor.
    let build = |listeners: &mut Vec<(u8, std::os::fd::OwnedFd)>| -> anyhow::Result<Worker> {
        let mut worker = Worker::new(
            cfg,
            secrets,
            link,
            max_conns,
            (master_pid, control),
            listeners,
        )?;
        worker.ip_limits = ip_limits;
        worker.index = index as u32;
        worker.subscriber_workers = subscriber_workers;
        worker.announce_listeners();
        Ok(worker)
    };
    let Ok(name) = std::env::var(handover::ENV_HANDOVER) else {
        build(&mut Vec::new())?.run()?;
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
    let mut worker = build(&mut taken.listeners)?;
    worker.restore(std::mem::take(&mut taken.conns), taken.next_generation)?;
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
        steer::clear_inherited(&l);
        return Ok(to_top(l));
    }
    let listener = crate::listener::bind_reuseport(addr, Some(cfg.backlog))?;
    keepalive::apply_to_listener(&listener, cfg)
        .with_context(|| format!("keepalive options on the listener {addr}"))?;
    Ok(to_top(TcpListener::from_std(listener)))
}

/// Renumbers a listener above every descriptor a connection can get (those take the lowest
/// free numbers, and a worker's connections stay below its fd limit by
/// `plan::reserved_fds`, 64 at any limit of 1,024 or more). The
/// kernel releases the sockets of a process killed with SIGKILL in the reverse order of their
/// numbers: a listener numbered low stays in the SO_REUSEPORT group, completing handshakes
/// nobody will accept, until all of the worker's connections are released (15 s for 12,759
/// at 1M on a loaded box), and a client that reconnects from the same address and port lands
/// on it again. Numbered highest, it leaves the group first. A failure keeps the listener
/// where it is (logged): it still works.
fn to_top(listener: TcpListener) -> TcpListener {
    let fd = std::os::fd::OwnedFd::from(listener);
    let top = c1m_sys::rlimit::nofile().map(|l| {
        l.soft
            .saturating_sub(LISTENER_FD_SLOTS)
            .clamp(3, i32::MAX as u64) as i32
    });
    match top.and_then(|min| c1m_sys::fd::dup_at_least(&fd, min)) {
        // `fd`, the low number, closes when this returns; the socket stays open in the copy.
        Ok(high) => TcpListener::from(high),
        Err(e) => {
            tracing::warn!(error = %e, "could not renumber the listener above the connections");
            TcpListener::from(fd)
        }
    }
}

/// Descriptor numbers at the top of the fd limit kept for the listeners (HTTP, TCP, admin).
const LISTENER_FD_SLOTS: u64 = 8;

impl Worker {
    /// A subscriber worker listens on the public addresses; the `control` worker (one, with
    /// `--admin-listen`) on the admin address alone.
    fn new(
        cfg: Config,
        secrets: crate::secrets::Secrets,
        link: UnixStream,
        max_conns: usize,
        (master_pid, control): (u32, bool),
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
        link.register(poll.registry(), MASTER_LINK)?;
        // A subscriber worker keeps an admin listener handed over by a predecessor from before
        // the control worker (closing it would reset the connections in its queue).
        let admin = match cfg.admin_listen {
            Some(addr) if control => Some(listen(&cfg, addr, taken, LISTENER_ADMIN)?),
            Some(_) => handover::take_listener(taken, LISTENER_ADMIN).map(to_top),
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
        let namespaces = std::sync::Arc::new(crate::config::Namespaces::new(&cfg));
        let auth = crate::auth::Auth::new(&cfg, &secrets)?;
        let mut conns = ConnTable::with_capacity(max_conns.min(SLAB_PRESIZE_MAX));
        if let Some(configs) = secrets.tls_configs(&cfg)? {
            conns.tls.set_configs(Some(configs));
        }
        let (sender, io_fallback_reason) = sender::Sender::from_config(&cfg)?;
        let proxies = proxy::Proxies::new(
            mio::Waker::new(poll.registry(), PROXY_WAKER).context("the proxy threads' waker")?,
        );
        let publish_moves = publish_move::PublishMoves::new(master_pid, control, &poll)?;
        let lifecycle = cfg
            .webhook_url
            .is_some()
            .then(lifecycle::Lifecycle::default);
        Ok(Worker {
            publish_moves,
            lifecycle,
            secrets,
            sender,
            io_fallback_reason,
            admin_listener: admin,
            auth,
            fan_outs: fan_out_slices::FanOuts::default(),
            link_read_paused: false,
            ws_policy,
            namespaces,
            cfg,
            poll,
            http_listener: http,
            tcp_listener: tcp,
            link,
            conns,
            channels: Channels::default(),
            wheel: Wheel::default(),
            counters: Counters::default(),
            max_conns,
            steered: None,
            scratch: Vec::with_capacity(64 * 1024),
            reads: crate::growing_read::GrowingRead::new(MAX_READ),
            accept_paused_until: None,
            accept_errors: crate::log::Limited::every(Duration::from_secs(10)),
            socket_errors: crate::log::Limited::every(Duration::from_secs(10)),
            shutdown_deadline: None,
            link_failed: None,
            ip_limits: None,
            handover: handover::HandOver::default(),
            index: 0,
            subscriber_workers: 1,
            presence: presence::Presence::default(),
            proxies,
        })
    }

    /// Removes a connection: drops everything kept about it (`ConnTable::remove`), leaves its
    /// channels (telling the master about channels this worker no longer needs) and closes
    /// the socket.
    fn close(&mut self, idx: usize) {
        if self
            .conns
            .get(idx)
            .is_some_and(|c| c.kind == conn::Kind::H2)
        {
            self.close_h2_streams(idx);
        }
        if let Some(conn) = self.conns.get(idx) {
            self.presence_leave(token_of(idx, conn.generation));
        }
        let Some(mut conn) = self.conns.remove(idx) else {
            return;
        };
        self.proxies.forget(token_of(idx, conn.generation));
        self.report_closed(token_of(idx, conn.generation));
        for (chan, pos) in conn.take_subs() {
            self.leave_channel(chan, pos);
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if let Some(limits) = &mut self.ip_limits {
            limits.release_held(idx);
        }
    }

    /// The id of the connection in `idx` (`crate::conn_id`).
    fn conn_id(&self, idx: usize) -> crate::conn_id::ConnId {
        crate::conn_id::ConnId {
            worker: self.index,
            token: self.conns.token(idx),
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
            if let Some(mut c) = self.conns.get_mut(moved as usize) {
                c.set_sub_pos(chan, pos);
            }
        }
        if let Some(name) = emptied {
            self.send_to_master(ToMaster::Leave {
                channel: name.to_string(),
            });
        }
    }
}
