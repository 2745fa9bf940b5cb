//! One bench worker process: a single-threaded mio (edge-triggered epoll) loop over a slab
//! arena of connections. Owns the ramp schedule, connect/subscribe timeouts, reconnect backoff,
//! connection lifecycle (start, end, reconnect) and the worker's counters and histograms;
//! reading, writing and parsing per connection live in [`conn_io`].
//!
//! Memory: an idle connection owns no buffer. Reads go into one per-worker scratch buffer; a
//! connection keeps bytes only while a unit (SSE event, frame, line, poll answer) is cut by a
//! read boundary, or while a write could not finish. Tokens are slab index + generation, so an
//! event for a slot that was reused is recognised and dropped.

mod conn_io;

use crate::delivery::ConnDelivery;
use crate::errors::{bump, io_kind};
use crate::hist::{new_hist, record, take_pairs};
use crate::payload::now_us;
use crate::proto::{self, Phase, Proto};
use crate::storm;
use crate::template::expand;
use crate::wire::{WorkerConfig, WorkerReport};
use anyhow::Context;
use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use socket2::{Domain, Socket, Type};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const STDIN: Token = Token(usize::MAX);
const SCRATCH: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// TCP connect in progress.
    Connecting,
    /// Request sent, waiting for the server's confirmation.
    Subscribing,
    Online,
    /// Waiting to reconnect.
    Backoff,
}

struct Conn {
    stream: Option<TcpStream>,
    /// The TLS session of an https:// / wss:// target (boxed: one pointer for plain runs).
    tls: Option<Box<rustls::ClientConnection>>,
    gen: u32,
    global: u32,
    state: State,
    phase: Phase,
    attempts: u8,
    /// The first attempt has not resolved yet (online or failed): the ramp is not done.
    first: bool,
    /// Monotonic µs when this attempt was due (open model: latency counts from here).
    due_us: u64,
    /// Highest server message id seen (0 = none); also the resume position.
    last_id: u64,
    delivery: ConnDelivery,
    /// Reconnect storm flags ([`crate::storm`]: DROPPED, BACK, …); 0 outside that scenario.
    storm: u8,
    /// Reconnect storm: ms after `epoch` when the last resubscription request was sent
    /// (49 days of range; a run is bounded by --duration long before).
    resub_ms: u32,
    /// Unparsed tail of input; empty (no allocation) while idle.
    pending: Spill,
    /// Unwritten output; empty (no allocation) unless a write blocked.
    out: Spill,
}

/// Bytes a connection must keep for a while. 8 bytes and no allocation while empty — the
/// common case for a held connection — instead of a 24-byte Vec header on every connection.
#[derive(Default)]
// A Box<Vec> is the point here: one pointer while empty, a growable buffer while in use.
#[allow(clippy::box_collection)]
struct Spill(Option<Box<Vec<u8>>>);

impl Spill {
    fn is_empty(&self) -> bool {
        !matches!(&self.0, Some(v) if !v.is_empty())
    }

    /// Takes the bytes out (an empty Vec when there are none).
    fn take(&mut self) -> Vec<u8> {
        self.0.take().map(|b| *b).unwrap_or_default()
    }

    /// Stores `v`, or frees everything when it is empty.
    fn put(&mut self, v: Vec<u8>) {
        self.0 = (!v.is_empty()).then(|| Box::new(v));
    }

    fn extend(&mut self, bytes: &[u8]) {
        self.0
            .get_or_insert_with(Box::default)
            .extend_from_slice(bytes);
    }

    fn clear(&mut self) {
        self.0 = None;
    }
}

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
    /// Acknowledged publishes per channel: (sent µs, ack µs), in send order.
    publishes: Vec<Vec<(u64, u64)>>,
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
            publishes: vec![Vec::new(); channels],
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
            let churning = self.churn_from.is_some() && self.cfg.churn_rate > 0.0;
            let timeout = if self.next < self.cfg.conns || !self.backoff.is_empty() || churning {
                Duration::from_millis(1)
            } else {
                next_tick.saturating_duration_since(Instant::now())
            };
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
        }
        self.finish()
    }

    /// Starts first attempts that are due by the open-model schedule, and reconnects.
    fn start_due(&mut self) {
        let now = self.mono_us();
        while self.next < self.cfg.conns && self.inflight < self.cfg.max_inflight {
            let due = if self.cfg.rate > 0.0 {
                (self.next as f64 * 1e6 / self.cfg.rate) as u64
            } else {
                now
            };
            if due > now {
                break;
            }
            let global = (self.cfg.first_conn + self.next) as u32;
            self.next += 1;
            self.first_unresolved += 1;
            let key = self.conns.insert(Conn {
                stream: None,
                tls: None,
                gen: 0,
                global,
                state: State::Backoff,
                phase: Phase::Head,
                attempts: 0,
                first: true,
                due_us: due,
                last_id: 0,
                delivery: ConnDelivery::default(),
                storm: 0,
                resub_ms: 0,
                pending: Spill::default(),
                out: Spill::default(),
            });
            self.start(key, due);
        }
        while self.inflight < self.cfg.max_inflight {
            match self.backoff.peek() {
                Some(Reverse((due, _, _))) if *due <= now => {}
                _ => break,
            }
            let Some(Reverse((due, key, gen))) = self.backoff.pop() else {
                break;
            };
            if matches!(self.conns.get(key), Some(c) if c.gen == gen && c.state == State::Backoff) {
                self.start(key, due);
            }
        }
    }

    /// Churn: closes online connections, picked at random, at `churn_rate` per second since the
    /// ramp ended, each reopened at once as a new client (no resume, a new delivery window).
    fn churn_due(&mut self) {
        let Some(from) = self.churn_from else {
            return;
        };
        if self.cfg.churn_rate <= 0.0 || self.stop {
            return;
        }
        let due = (from.elapsed().as_secs_f64() * self.cfg.churn_rate) as u64;
        while self.r.churned < due {
            let Some(key) = self.random_online() else {
                return;
            };
            self.r.churned += 1;
            self.end_and_reopen(key, None, true);
        }
    }

    /// An online connection picked at random (bounded probing; None when none is found).
    fn random_online(&mut self) -> Option<usize> {
        let cap = self.conns.capacity().max(1);
        for _ in 0..64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let key = (self.rng % cap as u64) as usize;
            if matches!(self.conns.get(key), Some(c) if c.state == State::Online) {
                return Some(key);
            }
        }
        None
    }

    fn open_socket(&mut self, global: u32) -> io::Result<TcpStream> {
        let dst = self.cfg.dst;
        let sock = Socket::new(
            Domain::for_address(dst),
            Type::STREAM.nonblocking().cloexec(),
            None,
        )?;
        // Per-socket port range (IPv4; the coordinator enables it only where the kernel has
        // it, so a failure here is unexpected and counted once).
        if let (Some((lo, hi)), true) = (self.cfg.port_range, dst.is_ipv4()) {
            if let Err(e) = c1m_sys::sockopt::set_local_port_range(&sock, lo, hi) {
                if !self.port_range_warned {
                    self.port_range_warned = true;
                    bump(
                        &mut self.r.errors,
                        &format!("IP_LOCAL_PORT_RANGE failed ({})", io_kind(&e)),
                    );
                }
            }
        }
        if !self.cfg.sources.is_empty() {
            let src = self.cfg.sources[global as usize % self.cfg.sources.len()];
            // The option lives at the IP level but also applies to IPv6 binds; an IPv6
            // socket that refuses it still works, just with a port picked at bind time.
            let no_port = c1m_sys::sockopt::set_bind_address_no_port(&sock);
            if src.is_ipv4() {
                no_port?;
            }
            sock.bind(&SocketAddr::new(src, 0).into())?;
        }
        match sock.connect(&dst.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(TcpStream::from_std(sock.into()))
    }

    fn start(&mut self, key: usize, due: u64) {
        self.gen = self.gen.wrapping_add(1);
        let gen = self.gen;
        self.r.attempts += 1;
        let global = match self.conns.get(key) {
            Some(c) => c.global,
            None => return,
        };
        let opened = self.open_socket(global).and_then(|mut s| {
            let token = Token(key | ((gen as usize) << 32));
            self.poll
                .registry()
                .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                .map(|()| s)
        });
        // The session's first flight (ClientHello) goes out with the request once connected.
        let opened = opened.and_then(|s| match &self.tls {
            Some(t) => t.connect().map(|session| (s, Some(Box::new(session)))),
            None => Ok((s, None)),
        });
        match opened {
            Ok((s, tls)) => {
                let Some(c) = self.conns.get_mut(key) else {
                    return;
                };
                c.stream = Some(s);
                c.tls = tls;
                c.gen = gen;
                c.state = State::Connecting;
                c.phase = Phase::Head;
                c.due_us = due;
                c.pending.clear();
                c.out.clear();
                self.inflight += 1;
                self.r.connecting += 1;
                let deadline = self.mono_us() + self.cfg.connect_timeout_ms * 1000;
                self.timeouts.push_back((deadline, key, gen));
            }
            Err(e) => {
                if let Some(c) = self.conns.get_mut(key) {
                    c.gen = gen;
                    c.state = State::Connecting;
                }
                self.inflight += 1;
                self.r.connecting += 1;
                self.end(key, Some(io_kind(&e)));
            }
        }
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

    /// Completes a non-blocking connect; false when the connection is gone or still connecting.
    /// A connecting TCP socket turns writable only once the handshake finished or failed, and
    /// SO_ERROR tells which; so a writable event needs no getpeername() (one syscall less per
    /// connection). Any other event (e.g. a bare readable) is checked with getpeername().
    fn finish_connect(&mut self, key: usize, writable: bool) -> bool {
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        let Some(s) = c.stream.as_ref() else {
            return false;
        };
        match s.take_error() {
            Ok(Some(e)) | Err(e) => {
                self.end(key, Some(io_kind(&e)));
                return false;
            }
            Ok(None) => {}
        }
        if !writable {
            match s.peer_addr() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return false,
                Err(e) => {
                    self.end(key, Some(io_kind(&e)));
                    return false;
                }
            }
        }
        let now = self.epoch.elapsed().as_micros() as u64;
        record(&mut self.connect_h, now.saturating_sub(c.due_us));
        self.r.connected += 1;
        let proto = self.cfg.proto;
        match proto {
            Proto::Connect => {
                c.state = State::Online;
                self.went_online(key, now);
            }
            _ => {
                let ch = c.global % self.cfg.channels.max(1);
                let last_id = (c.last_id != 0).then_some(c.last_id);
                if c.storm & storm::DROPPED != 0 {
                    c.resub_ms = (now / 1000).min(u64::from(u32::MAX)) as u32;
                    if last_id.is_none() {
                        // Nothing to resume from: counted, so the report can say so.
                        self.r.storm.reconnects_without_id += 1;
                        c.storm |= storm::NO_ID;
                    } else {
                        c.storm &= !storm::NO_ID;
                    }
                }
                let (gen, global) = (c.gen, c.global);
                let req = self.request(global, ch, last_id, gen);
                let Some(c) = self.conns.get_mut(key) else {
                    return false;
                };
                c.out.put(req);
                if proto == Proto::Poll {
                    c.state = State::Online;
                    self.went_online(key, now);
                } else {
                    c.state = State::Subscribing;
                }
                return self.flush(key);
            }
        }
        true
    }

    /// The subscribe request of connection `global` (channel `ch`), templates expanded.
    fn request(&self, global: u32, ch: u32, last_id: Option<u64>, gen: u32) -> Vec<u8> {
        let name = self.cfg.channel_name(ch);
        let index = global.to_string();
        let vars = [("ch", name.as_str()), ("i", index.as_str())];
        let path = expand(&self.cfg.path_template, &vars);
        let extra = expand(&self.cfg.header_template, &vars);
        let key = proto::ws_key(u64::from(gen) ^ ((self.cfg.index as u64) << 40));
        proto::subscribe_request(&proto::SubscribeRequest {
            wire: self.cfg.proto.wire(),
            host: &self.cfg.host,
            path: &path,
            channel: &name,
            last_id,
            ws_key: &key,
            extra_headers: &extra,
        })
    }

    fn went_online(&mut self, key: usize, now_mono: u64) {
        self.inflight = self.inflight.saturating_sub(1);
        self.r.connecting = self.r.connecting.saturating_sub(1);
        self.r.online += 1;
        self.r.subscribed += 1;
        self.r.peak_online = self.r.peak_online.max(self.r.online);
        if let Some(c) = self.conns.get_mut(key) {
            if c.first {
                c.first = false;
                self.first_unresolved = self.first_unresolved.saturating_sub(1);
            }
            c.attempts = 0;
            record(&mut self.subscribe_h, now_mono.saturating_sub(c.due_us));
            // A storm keeps the first window open across reconnects (see crate::storm).
            let keep_window = self.cfg.storm && c.delivery.window_start_us != 0;
            if self.cfg.proto != Proto::Poll && !keep_window {
                c.delivery.window_start_us = now_us();
            }
            if c.storm & storm::DROPPED != 0 {
                c.storm = storm::BACK | (c.storm & storm::NO_ID);
                self.r.storm.back += 1;
                let since = now_us().saturating_sub(self.storm_ref_us.unwrap_or(0));
                record(&mut self.storm_back_h, since);
            }
        }
    }

    fn read_stdin(&mut self, stdin: &mut mio::unix::pipe::Receiver) {
        let mut buf = [0u8; 8192];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => {
                    self.stop = true;
                    break;
                }
                Ok(n) => self.stdin_buf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.stop = true;
                    break;
                }
            }
        }
        let mut start = 0;
        while let Some(off) = self.stdin_buf[start..].iter().position(|&b| b == b'\n') {
            let line = &self.stdin_buf[start..start + off];
            start += off + 1;
            let mut w = line.split(|&b| b == b' ');
            match w.next() {
                Some(b"S") => self.stop = true,
                Some(b"R") => {
                    if let Some(at) = w.next().and_then(proto::parse_u64) {
                        self.storm_ref_us = Some(self.storm_ref_us.map_or(at, |r| r.min(at)));
                    }
                }
                Some(b"P") => {
                    let nums: Vec<u64> = w.filter_map(proto::parse_u64).collect();
                    if let [ch, _seq, sent, ack] = nums[..] {
                        if let Some(list) = self.publishes.get_mut(ch as usize) {
                            list.push((sent, ack));
                        }
                    }
                }
                _ => {}
            }
        }
        self.stdin_buf.drain(..start);
    }

    fn expire_timeouts(&mut self) {
        let now = self.mono_us();
        while let Some(&(deadline, key, gen)) = self.timeouts.front() {
            if deadline > now {
                break;
            }
            self.timeouts.pop_front();
            let state = match self.conns.get(key) {
                Some(c) if c.gen == gen && c.stream.is_some() => c.state,
                _ => continue,
            };
            match state {
                State::Connecting => self.end(key, Some("ETIMEDOUT (connect timeout)".into())),
                State::Subscribing => self.end(key, Some("subscribe timeout".into())),
                _ => {}
            }
        }
    }

    /// Ends the current attempt of `key`: closes the socket, settles delivery accounting,
    /// counts the error, and schedules a reconnect or frees the slot.
    fn end(&mut self, key: usize, kind: Option<String>) {
        self.end_and_reopen(key, kind, false);
    }

    /// [`Self::end`], or with `reopen_now` (churn) a reconnect due at once whatever
    /// `--reconnect` says.
    fn end_and_reopen(&mut self, key: usize, kind: Option<String>, reopen_now: bool) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.tls = None;
        let was_online = c.state == State::Online;
        match c.state {
            State::Online => self.r.online = self.r.online.saturating_sub(1),
            State::Connecting | State::Subscribing => {
                self.inflight = self.inflight.saturating_sub(1);
                self.r.connecting = self.r.connecting.saturating_sub(1);
            }
            State::Backoff => return,
        }
        self.r.closed += 1;
        if c.first {
            c.first = false;
            self.first_unresolved = self.first_unresolved.saturating_sub(1);
        }
        let ch = (c.global % self.cfg.channels.max(1)) as usize;
        if self.cfg.storm {
            // The window stays open until the run ends: what is sent while this connection is
            // away must still reach it (settled in finish).
            if was_online && self.churn_from.is_some() && !reopen_now {
                let now = now_us();
                self.storm_ref_us.get_or_insert(now);
                c.storm = storm::DROPPED;
                self.r.storm.dropped += 1;
            }
        } else if let Some(pubs) = self.publishes.get(ch) {
            c.delivery
                .close_session(pubs, Some(now_us()), &mut self.r.delivery);
        }
        c.pending.clear();
        c.out.clear();
        c.phase = Phase::Head;
        if let Some(kind) = kind {
            bump(&mut self.r.errors, &kind);
        }
        if reopen_now && !self.stop {
            // A new client, not a resume: no last id, and sequence tracking starts over, so a
            // server that replays its history to new subscribers (nchan) is not counted as
            // duplicating (the replay was sent before the new window: received, not expected).
            c.delivery = ConnDelivery::default();
            c.last_id = 0;
            c.state = State::Backoff;
            let (due, gen) = (self.epoch.elapsed().as_micros() as u64, c.gen);
            self.backoff.push(Reverse((due, key, gen)));
            return;
        }
        match self.cfg.reconnect {
            Some((min_ms, max_ms)) if !self.stop => {
                c.state = State::Backoff;
                c.attempts = c.attempts.saturating_add(1);
                let exp = min_ms.saturating_mul(1u64 << u32::from(c.attempts.min(20) - 1));
                let cap = exp.min(max_ms).max(1);
                // Equal jitter: half fixed, half random, so a storm spreads but never stalls.
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let delay_ms = cap / 2 + self.rng % (cap / 2 + 1);
                let due = self.epoch.elapsed().as_micros() as u64 + delay_ms * 1000;
                let gen = c.gen;
                self.backoff.push(Reverse((due, key, gen)));
            }
            _ => {
                self.conns.remove(key);
            }
        }
    }

    fn report(&mut self, last: bool) -> anyhow::Result<()> {
        self.r.last = last;
        self.r.ramp_done = self.ramp_done();
        self.r.connect_hist = take_pairs(&mut self.connect_h);
        self.r.subscribe_hist = take_pairs(&mut self.subscribe_h);
        self.r.delivery_hist = take_pairs(&mut self.delivery_h);
        self.r.storm_back_hist = take_pairs(&mut self.storm_back_h);
        self.r.storm_caught_up_hist = take_pairs(&mut self.storm_caught_up_h);
        if last {
            if let Ok(m) = c1m_sys::mem::process_memory(std::process::id()) {
                self.r.pss_now = m.pss_bytes;
                self.r.rss_now = m.rss_bytes;
            }
        }
        let mut line = serde_json::to_vec(&self.r).context("encode report")?;
        line.push(b'\n');
        let mut out = io::stdout().lock();
        out.write_all(&line)
            .and_then(|()| out.flush())
            .context("write report to coordinator")?;
        Ok(())
    }

    /// Settles every online connection's window and sends the final report. The memory figure
    /// is taken before anything is closed, so it is the footprint while holding.
    fn finish(&mut self) -> anyhow::Result<()> {
        self.stop = true;
        let channels = self.cfg.channels.max(1);
        let settle_all = self.cfg.storm;
        for (_, c) in self.conns.iter_mut() {
            if c.storm & storm::DROPPED != 0 {
                self.r.storm.still_away += 1;
            } else if c.storm & storm::BACK != 0 {
                self.r.storm.not_caught_up += 1;
            }
            // A storm settles every window, also of connections that never came back.
            if c.state == State::Online || settle_all {
                let ch = (c.global % channels) as usize;
                if let Some(pubs) = self.publishes.get(ch) {
                    c.delivery.close_session(pubs, None, &mut self.r.delivery);
                }
            }
        }
        self.report(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arena entry is the per-connection cost the ≤ 512 B budget is mostly made of; keep
    /// it from growing unnoticed (slab adds its own tag on top).
    #[test]
    fn connection_state_stays_small() {
        let size = std::mem::size_of::<Conn>();
        assert!(size <= 96, "Conn is {size} bytes");
        assert!(std::mem::size_of::<slab::Slab<Conn>>() < 64);
    }
}
