//! Master ↔ worker messages over a Unix stream socket: a 4-byte little-endian length, then a
//! tag byte and the fields. Hand-rolled rather than serde+bincode: the messages are few and
//! flat, and publish payloads pass through without re-encoding.

use crate::histogram::{Histogram, Latencies, WIRE_VALUES};
use std::io;

/// Largest frame either side accepts (a payload is ≤ max_payload; status JSON is small).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Most channels one join names (the subscription limit is validated against it at start).
pub const MAX_CHANNELS: usize = 1024;

/// Per-worker counters pushed to the master every [`crate::worker::STATS_EVERY`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub pid: u32,
    pub conns_sse: u64,
    pub conns_ws: u64,
    pub conns_longpoll: u64,
    pub conns_tcp: u64,
    pub conns_other: u64,
    pub delivered: u64,
    pub dropped: u64,
    /// WebSocket client data messages ignored (client publish off).
    pub client_ignored: u64,
    pub refused: Refused,
    pub tls: TlsStats,
    /// Subscriptions taken (one per channel a connection joins), for the dashboard's rate.
    pub subscribes: u64,
    /// Bytes queued in this worker's connections that their sockets have not taken yet.
    pub unsent_bytes: u64,
    /// This worker's resident memory (/proc/self/statm), for the per-worker gauge.
    pub rss_bytes: u64,
    /// Open `/dashboard/events` streams: the master builds snapshots only while some exist.
    pub dashboard_viewers: u64,
    /// SSE heartbeats written, and skipped because the stream was sent other bytes within the
    /// interval (or has bytes queued). `/status` `heartbeats`.
    pub heartbeats_sent: u64,
    pub heartbeats_skipped: u64,
    pub latency: Latencies,
}

/// TLS handshake counters of one worker (all zero without `--tls-cert`). `/status` key `tls`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlsStats {
    /// Handshakes completed.
    pub handshakes: u64,
    /// Their summed duration (first byte accepted to handshake done), for the mean.
    pub handshake_micros: u64,
    /// Handshakes rustls refused (no common version or cipher, bad message); an alert was sent.
    pub handshake_failed: u64,
    /// Handshakes not done within `--head-timeout`: closed.
    pub handshake_timeout: u64,
    /// Clients that left before their handshake was done (health checks that only connect).
    pub handshake_abandoned: u64,
    /// Plaintext clients on a TLS port: told so (HTTP 400 / `ERR`) and closed.
    pub plaintext_refused: u64,
}

impl TlsStats {
    /// (status key, value) pairs in a fixed order, as sent over the link and shown in /status.
    pub fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("handshakes", self.handshakes),
            ("handshake_micros", self.handshake_micros),
            ("handshake_failed", self.handshake_failed),
            ("handshake_timeout", self.handshake_timeout),
            ("handshake_abandoned", self.handshake_abandoned),
            ("plaintext_refused", self.plaintext_refused),
        ]
    }

    fn from_values(v: [u64; 6]) -> TlsStats {
        let [handshakes, handshake_micros, handshake_failed, handshake_timeout, handshake_abandoned, plaintext_refused] =
            v;
        TlsStats {
            handshakes,
            handshake_micros,
            handshake_failed,
            handshake_timeout,
            handshake_abandoned,
            plaintext_refused,
        }
    }

    pub fn add(&mut self, other: &TlsStats) {
        let mut v = self.fields().map(|(_, v)| v);
        for (slot, (_, x)) in v.iter_mut().zip(other.fields()) {
            *slot += x;
        }
        *self = TlsStats::from_values(v);
    }
}

/// Connections refused or closed for cause, by cause. The names are the `/status` keys.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refused {
    pub max_conns: u64,
    pub fd_limit: u64,
    pub head_too_large: u64,
    pub head_timeout: u64,
    pub bad_request: u64,
    pub not_found: u64,
    pub method: u64,
    pub slow_consumer: u64,
    pub forbidden: u64,
    pub payload_too_large: u64,
    /// WebSockets closed for a protocol error (1002, 1007, 1009).
    pub ws_protocol: u64,
    /// WebSockets closed because a ping went unanswered.
    pub ws_pong_timeout: u64,
    /// WebSockets closed (1003) for sending data with client publish off.
    pub ws_client_data: u64,
    /// Publishes or subscribes refused (503 + Retry-After, WebSocket 1013) because an internal
    /// queue is full: a worker that must deliver is behind, or the master is.
    pub busy: u64,
    /// Connections the kernel dropped as dead: keepalive probes or sent data unanswered.
    pub dead_peer: u64,
    /// Publishes refused (503 + Retry-After, WebSocket 1013) because the cluster broker could
    /// not take them: Redis unreachable, or refusing writes (out of memory).
    pub broker_unavailable: u64,
    /// Connections refused (429) because their source address held `--max-conns-per-ip`.
    pub per_ip_conns: u64,
    /// Connections refused (429) because their source address passed
    /// `--max-new-conns-per-ip-per-sec`.
    pub per_ip_rate: u64,
    /// Subscribes or JWT publishes refused (401): no token, or one that does not verify.
    pub unauthorized: u64,
    /// Held streams ended because their token expired (SSE `event: expired`, close 4001).
    pub expired: u64,
}

impl Refused {
    /// (status key, value) pairs in a fixed order: the one list `/status` and `/metrics` use.
    pub fn fields(&self) -> [(&'static str, u64); Refused::COUNT] {
        [
            ("max_conns", self.max_conns),
            ("fd_limit", self.fd_limit),
            ("head_too_large", self.head_too_large),
            ("head_timeout", self.head_timeout),
            ("bad_request", self.bad_request),
            ("not_found", self.not_found),
            ("method", self.method),
            ("slow_consumer", self.slow_consumer),
            ("forbidden", self.forbidden),
            ("payload_too_large", self.payload_too_large),
            ("ws_protocol", self.ws_protocol),
            ("ws_pong_timeout", self.ws_pong_timeout),
            ("ws_client_data", self.ws_client_data),
            ("busy", self.busy),
            ("dead_peer", self.dead_peer),
            ("per_ip_conns", self.per_ip_conns),
            ("per_ip_rate", self.per_ip_rate),
            ("unauthorized", self.unauthorized),
            ("expired", self.expired),
            ("broker_unavailable", self.broker_unavailable),
        ]
    }

    const COUNT: usize = 20;

    fn from_values(v: [u64; Refused::COUNT]) -> Refused {
        let [max_conns, fd_limit, head_too_large, head_timeout, bad_request, not_found, method, slow_consumer, forbidden, payload_too_large, ws_protocol, ws_pong_timeout, ws_client_data, busy, dead_peer, per_ip_conns, per_ip_rate, unauthorized, expired, broker_unavailable] =
            v;
        Refused {
            max_conns,
            fd_limit,
            head_too_large,
            head_timeout,
            bad_request,
            not_found,
            method,
            slow_consumer,
            forbidden,
            payload_too_large,
            ws_protocol,
            ws_pong_timeout,
            ws_client_data,
            busy,
            dead_peer,
            per_ip_conns,
            per_ip_rate,
            unauthorized,
            expired,
            broker_unavailable,
        }
    }

    pub fn add(&mut self, other: &Refused) {
        let mut v = self.fields().map(|(_, v)| v);
        for (slot, (_, x)) in v.iter_mut().zip(other.fields()) {
            *slot += x;
        }
        *self = Refused::from_values(v);
    }
}

/// Which send path one worker uses, and its io_uring counters (issue #16). `/status` key
/// `io`; sent with every stats push as its own message (tag 30) so `Stats` stays as it was.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoReport {
    /// The worker sends fan-outs through io_uring (false: epoll + write()).
    pub uring: bool,
    /// Why io_uring is not used under `--io auto` (the kernel's refusal); empty otherwise.
    pub fallback_reason: String,
    /// `io_uring_enter` calls made for fan-out sends.
    pub uring_submits: u64,
    /// Sends submitted through io_uring.
    pub uring_sends: u64,
    /// io_uring sends the socket did not take whole (short or EAGAIN): the rest was queued.
    pub uring_queued: u64,
}

/// One entry of a resume answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// Messages with ids in `(after, through]` on `channel` are gone from history.
    Gap {
        channel: String,
        after: u64,
        through: u64,
    },
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
    },
}

/// Worker → master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToMaster {
    Publish {
        req: u64,
        channel: String,
        payload: Vec<u8>,
    },
    /// Register this worker's interest in `channels` and answer with what followed `after`.
    Join {
        req: u64,
        channels: Vec<String>,
        after: Option<u64>,
    },
    /// This worker has no subscribers left on `channel`.
    Leave {
        channel: String,
    },
    /// Boxed: the figures are several times larger than any other message.
    Stats(Box<WorkerStats>),
    StatusQuery {
        req: u64,
        metrics: bool,
    },
    /// This worker's subscriber count on each channel whose count changed since its last
    /// report (0: none left). Sent with the stats; feeds `GET /channels/{ch}`.
    Counts {
        counts: Vec<(String, u32)>,
    },
    /// `GET /channels/{ch}`: answered with a `Status` frame carrying the JSON body.
    ChannelInfo {
        req: u64,
        channel: String,
    },
    /// A publish with an `Idempotency-Key` (tag 60, redis5): a retry with the same key on the
    /// same channel is answered with the first one's id and stored and delivered once.
    PublishKeyed {
        req: u64,
        channel: String,
        payload: Vec<u8>,
        key: String,
    },
    // ---- live upgrade (tags 20–29; docs/upgrade.md) ----
    /// Input and accepts are stopped and every request this worker made is on the link before
    /// this frame: the master's answers to them come before `HandOverGo`.
    HandOverPrepared,
    /// Every connection (`conns`) and listener went to the new worker, which has them all; this
    /// worker touches none of them any more and waits for commit or abort.
    HandOverSent {
        conns: u64,
    },
    /// The hand-over from this worker failed (the new worker died, refused, or timed out); it
    /// serves on as before.
    HandOverFailed {
        reason: String,
    },
    /// The worker's send path and io_uring counters (tag 30), sent with each stats push.
    Io(IoReport),
}

/// Master → worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToWorker {
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
        /// When the master received the publish (`c1m_sys::shm::monotonic_micros`, one clock
        /// for all processes): the start of the publish-to-write latency.
        published_us: u64,
    },
    Published {
        req: u64,
        channel: String,
        id: u64,
    },
    /// The answer to a join: one chunk of the replay. With `more`, history holds more after
    /// the chunk's last message; the worker asks again from there once the socket has taken
    /// this chunk (so a replay never needs a frame, or a socket queue, larger than a chunk).
    Joined {
        req: u64,
        current_id: u64,
        channels: Vec<String>,
        replay: Vec<Replay>,
        more: bool,
    },
    Status {
        req: u64,
        body: String,
        metrics: bool,
    },
    Shutdown,
    /// A publish was not taken: the publisher is told to retry (503 with Retry-After). Either a
    /// worker that must deliver it is behind (the master does not queue without bound), or,
    /// when `broker` is not empty, the cluster broker could not take it (`broker` says why).
    PublishRefused {
        req: u64,
        retry_after_s: u64,
        broker: String,
    },
    /// The master re-read its configuration (SIGHUP): the whole new `Config` as JSON.
    Reconfigure {
        json: String,
    },
    /// A join could not be answered (the cluster broker is unreachable): the subscriber is
    /// refused (503 + Retry-After, WebSocket 1013, TCP ERR) and comes back with its last id.
    JoinRefused {
        req: u64,
        retry_after_s: u64,
    },
    /// Live subscribers of `channel` missed `(after, through]` (the cluster broker lost it, or
    /// it left history while the broker was unreachable): they get a gap event.
    Gap {
        channel: String,
        after: u64,
        through: u64,
    },
    /// The dashboard's JSON snapshot (once a second while a worker reports viewers): the
    /// worker pushes it as one SSE event to its `/dashboard/events` streams.
    Dashboard {
        json: String,
    },
    /// The running key material (`crate::secrets`): the first frame a worker gets, and again
    /// before a `Reconfigure` that comes with new files.
    Secrets(crate::secrets::Secrets),
    // ---- live upgrade (tags 20–29; docs/upgrade.md) ----
    /// Stop accepting and reading clients, answer `HandOverPrepared`.
    HandOverPrepare,
    /// Hand every connection to the new worker that connects to the abstract socket `name`
    /// (a child of `new_master_pid`, checked), within `timeout_ms`.
    HandOverGo {
        name: String,
        new_master_pid: u32,
        timeout_ms: u64,
    },
    /// The upgrade is done: tell the new worker to serve, then exit.
    HandOverCommit,
    /// The upgrade is off: tell the new worker to drop its copies, and serve on.
    HandOverAbort,
}

// ---- encoding ------------------------------------------------------------------------------

struct Writer(Vec<u8>);

impl Writer {
    fn new(tag: u8) -> Writer {
        Writer(vec![0, 0, 0, 0, tag])
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&(v.len() as u32).to_le_bytes());
        self.0.extend_from_slice(v);
        self
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    fn finish(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

struct Reader<'a>(&'a [u8]);

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("ipc: truncated or bad {what}"),
    )
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(bad(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1, "u8")?[0])
    }
    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, "u64")?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let len = u32::from_le_bytes(self.take(4, "length")?.try_into().expect("4 bytes")) as usize;
        Ok(self.take(len, "bytes")?.to_vec())
    }
    fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| bad("string"))
    }
    fn count(&mut self, max: usize, what: &str) -> io::Result<usize> {
        let n = self.u64()?;
        if n > max as u64 {
            return Err(bad(what));
        }
        Ok(n as usize)
    }
    fn opt_u64(&mut self) -> io::Result<Option<u64>> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.u64()?),
        })
    }
}

impl ToMaster {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToMaster::Publish {
                req,
                channel,
                payload,
            } => {
                let mut w = Writer::new(1);
                w.u64(*req).str(channel).bytes(payload);
                w.finish()
            }
            ToMaster::Join {
                req,
                channels,
                after,
            } => {
                let mut w = Writer::new(2);
                w.u64(*req).u64(channels.len() as u64);
                for c in channels {
                    w.str(c);
                }
                match after {
                    Some(a) => w.u8(1).u64(*a),
                    None => w.u8(0),
                };
                w.finish()
            }
            ToMaster::Leave { channel } => {
                let mut w = Writer::new(3);
                w.str(channel);
                w.finish()
            }
            ToMaster::Stats(s) => {
                let mut w = Writer::new(4);
                w.u64(s.pid.into())
                    .u64(s.conns_sse)
                    .u64(s.conns_ws)
                    .u64(s.conns_longpoll);
                w.u64(s.conns_tcp)
                    .u64(s.conns_other)
                    .u64(s.delivered)
                    .u64(s.dropped)
                    .u64(s.client_ignored);
                for (_, v) in s.refused.fields() {
                    w.u64(v);
                }
                for (_, v) in s.tls.fields() {
                    w.u64(v);
                }
                w.u64(s.subscribes)
                    .u64(s.unsent_bytes)
                    .u64(s.rss_bytes)
                    .u64(s.dashboard_viewers)
                    .u64(s.heartbeats_sent)
                    .u64(s.heartbeats_skipped);
                for (_, _, h) in s.latency.fields() {
                    for v in h.to_values() {
                        w.u64(v);
                    }
                }
                w.finish()
            }
            ToMaster::StatusQuery { req, metrics } => {
                let mut w = Writer::new(5);
                w.u64(*req).u8(u8::from(*metrics));
                w.finish()
            }
            ToMaster::Counts { counts } => {
                let mut w = Writer::new(6);
                w.u64(counts.len() as u64);
                for (channel, n) in counts {
                    w.str(channel).u64(u64::from(*n));
                }
                w.finish()
            }
            ToMaster::ChannelInfo { req, channel } => {
                let mut w = Writer::new(7);
                w.u64(*req).str(channel);
                w.finish()
            }
            ToMaster::PublishKeyed {
                req,
                channel,
                payload,
                key,
            } => {
                let mut w = Writer::new(60);
                w.u64(*req).str(channel).bytes(payload).str(key);
                w.finish()
            }
            ToMaster::HandOverPrepared => Writer::new(24).finish(),
            ToMaster::HandOverSent { conns } => {
                let mut w = Writer::new(25);
                w.u64(*conns);
                w.finish()
            }
            ToMaster::HandOverFailed { reason } => {
                let mut w = Writer::new(26);
                w.str(reason);
                w.finish()
            }
            ToMaster::Io(io) => {
                let mut w = Writer::new(30);
                w.u8(u8::from(io.uring))
                    .str(&io.fallback_reason)
                    .u64(io.uring_submits)
                    .u64(io.uring_sends)
                    .u64(io.uring_queued);
                w.finish()
            }
        }
    }

    pub fn decode(frame: &[u8]) -> io::Result<ToMaster> {
        let mut r = Reader(frame);
        Ok(match r.u8()? {
            1 => ToMaster::Publish {
                req: r.u64()?,
                channel: r.string()?,
                payload: r.bytes()?,
            },
            2 => {
                let req = r.u64()?;
                let n = r.count(MAX_CHANNELS, "channel count")?;
                let channels = (0..n).map(|_| r.string()).collect::<io::Result<_>>()?;
                ToMaster::Join {
                    req,
                    channels,
                    after: r.opt_u64()?,
                }
            }
            3 => ToMaster::Leave {
                channel: r.string()?,
            },
            60 => ToMaster::PublishKeyed {
                req: r.u64()?,
                channel: r.string()?,
                payload: r.bytes()?,
                key: r.string()?,
            },
            4 => {
                let pid = r.u64()? as u32;
                let mut v = [0u64; 8];
                for slot in &mut v {
                    *slot = r.u64()?;
                }
                let mut refused = [0u64; Refused::COUNT];
                for slot in &mut refused {
                    *slot = r.u64()?;
                }
                let mut tls = [0u64; 6];
                for slot in &mut tls {
                    *slot = r.u64()?;
                }
                let mut more = [0u64; 6];
                for slot in &mut more {
                    *slot = r.u64()?;
                }
                let mut latency = Latencies::default();
                for h in latency.fields_mut() {
                    let mut v = [0u64; WIRE_VALUES];
                    for slot in &mut v {
                        *slot = r.u64()?;
                    }
                    *h = Histogram::from_values(v);
                }
                ToMaster::Stats(Box::new(WorkerStats {
                    pid,
                    conns_sse: v[0],
                    conns_ws: v[1],
                    conns_longpoll: v[2],
                    conns_tcp: v[3],
                    conns_other: v[4],
                    delivered: v[5],
                    dropped: v[6],
                    client_ignored: v[7],
                    refused: Refused::from_values(refused),
                    tls: TlsStats::from_values(tls),
                    subscribes: more[0],
                    unsent_bytes: more[1],
                    rss_bytes: more[2],
                    dashboard_viewers: more[3],
                    heartbeats_sent: more[4],
                    heartbeats_skipped: more[5],
                    latency,
                }))
            }
            5 => ToMaster::StatusQuery {
                req: r.u64()?,
                metrics: r.u8()? != 0,
            },
            6 => {
                // Each entry takes at least 12 bytes, so a count the frame cannot hold is bad.
                let n = r.count(frame.len() / 12, "count entries")?;
                let mut counts = Vec::with_capacity(n);
                for _ in 0..n {
                    let channel = r.string()?;
                    let count = u32::try_from(r.u64()?).map_err(|_| bad("count"))?;
                    counts.push((channel, count));
                }
                ToMaster::Counts { counts }
            }
            7 => ToMaster::ChannelInfo {
                req: r.u64()?,
                channel: r.string()?,
            },
            24 => ToMaster::HandOverPrepared,
            25 => ToMaster::HandOverSent { conns: r.u64()? },
            26 => ToMaster::HandOverFailed {
                reason: r.string()?,
            },
            30 => ToMaster::Io(IoReport {
                uring: r.u8()? != 0,
                fallback_reason: r.string()?,
                uring_submits: r.u64()?,
                uring_sends: r.u64()?,
                uring_queued: r.u64()?,
            }),
            _ => return Err(bad("tag")),
        })
    }
}

impl ToWorker {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToWorker::Message {
                channel,
                id,
                payload,
                published_us,
            } => {
                let mut w = Writer::new(1);
                w.str(channel).u64(*id).bytes(payload).u64(*published_us);
                w.finish()
            }
            ToWorker::Published { req, channel, id } => {
                let mut w = Writer::new(2);
                w.u64(*req).str(channel).u64(*id);
                w.finish()
            }
            ToWorker::Joined {
                req,
                current_id,
                channels,
                replay,
                more,
            } => {
                let mut w = Writer::new(3);
                w.u64(*req).u64(*current_id).u64(channels.len() as u64);
                for c in channels {
                    w.str(c);
                }
                w.u64(replay.len() as u64);
                for item in replay {
                    match item {
                        Replay::Gap {
                            channel,
                            after,
                            through,
                        } => w.u8(0).str(channel).u64(*after).u64(*through),
                        Replay::Message {
                            channel,
                            id,
                            payload,
                        } => w.u8(1).str(channel).u64(*id).bytes(payload),
                    };
                }
                w.u8(u8::from(*more));
                w.finish()
            }
            ToWorker::Status { req, body, metrics } => {
                let mut w = Writer::new(4);
                w.u64(*req).str(body).u8(u8::from(*metrics));
                w.finish()
            }
            ToWorker::Shutdown => Writer::new(5).finish(),
            ToWorker::Dashboard { json } => {
                let mut w = Writer::new(10);
                w.str(json);
                w.finish()
            }
            ToWorker::PublishRefused {
                req,
                retry_after_s,
                broker,
            } => {
                let mut w = Writer::new(7);
                w.u64(*req).u64(*retry_after_s).str(broker);
                w.finish()
            }
            ToWorker::Reconfigure { json } => {
                let mut w = Writer::new(6);
                w.str(json);
                w.finish()
            }
            ToWorker::JoinRefused { req, retry_after_s } => {
                let mut w = Writer::new(8);
                w.u64(*req).u64(*retry_after_s);
                w.finish()
            }
            ToWorker::Gap {
                channel,
                after,
                through,
            } => {
                let mut w = Writer::new(9);
                w.str(channel).u64(*after).u64(*through);
                w.finish()
            }
            ToWorker::Secrets(secrets) => {
                let mut w = Writer::new(11);
                for part in [&secrets.tls_cert, &secrets.tls_key, &secrets.jwt_key] {
                    match part {
                        Some(bytes) => w.u8(1).bytes(bytes),
                        None => w.u8(0),
                    };
                }
                w.finish()
            }
            ToWorker::HandOverPrepare => Writer::new(20).finish(),
            ToWorker::HandOverGo {
                name,
                new_master_pid,
                timeout_ms,
            } => {
                let mut w = Writer::new(21);
                w.str(name).u64(u64::from(*new_master_pid)).u64(*timeout_ms);
                w.finish()
            }
            ToWorker::HandOverCommit => Writer::new(22).finish(),
            ToWorker::HandOverAbort => Writer::new(23).finish(),
        }
    }

    pub fn decode(frame: &[u8]) -> io::Result<ToWorker> {
        let mut r = Reader(frame);
        Ok(match r.u8()? {
            1 => ToWorker::Message {
                channel: r.string()?,
                id: r.u64()?,
                payload: r.bytes()?,
                published_us: r.u64()?,
            },
            2 => ToWorker::Published {
                req: r.u64()?,
                channel: r.string()?,
                id: r.u64()?,
            },
            3 => {
                let req = r.u64()?;
                let current_id = r.u64()?;
                let n = r.count(MAX_CHANNELS, "channel count")?;
                let channels = (0..n).map(|_| r.string()).collect::<io::Result<_>>()?;
                // Each entry takes at least 17 bytes, so a count the frame cannot hold is bad.
                let n = r.count(frame.len() / 17, "replay count")?;
                let mut replay = Vec::with_capacity(n);
                for _ in 0..n {
                    replay.push(match r.u8()? {
                        0 => Replay::Gap {
                            channel: r.string()?,
                            after: r.u64()?,
                            through: r.u64()?,
                        },
                        _ => Replay::Message {
                            channel: r.string()?,
                            id: r.u64()?,
                            payload: r.bytes()?,
                        },
                    });
                }
                ToWorker::Joined {
                    req,
                    current_id,
                    channels,
                    replay,
                    more: r.u8()? != 0,
                }
            }
            4 => ToWorker::Status {
                req: r.u64()?,
                body: r.string()?,
                metrics: r.u8()? != 0,
            },
            5 => ToWorker::Shutdown,
            7 => ToWorker::PublishRefused {
                req: r.u64()?,
                retry_after_s: r.u64()?,
                broker: r.string()?,
            },
            6 => ToWorker::Reconfigure { json: r.string()? },
            11 => {
                let mut part = || -> io::Result<Option<Vec<u8>>> {
                    match r.u8()? {
                        0 => Ok(None),
                        _ => r.bytes().map(Some),
                    }
                };
                ToWorker::Secrets(crate::secrets::Secrets {
                    tls_cert: part()?,
                    tls_key: part()?,
                    jwt_key: part()?,
                })
            }
            8 => ToWorker::JoinRefused {
                req: r.u64()?,
                retry_after_s: r.u64()?,
            },
            9 => ToWorker::Gap {
                channel: r.string()?,
                after: r.u64()?,
                through: r.u64()?,
            },
            10 => ToWorker::Dashboard { json: r.string()? },
            20 => ToWorker::HandOverPrepare,
            21 => ToWorker::HandOverGo {
                name: r.string()?,
                new_master_pid: u32::try_from(r.u64()?).map_err(|_| bad("pid"))?,
                timeout_ms: r.u64()?,
            },
            22 => ToWorker::HandOverCommit,
            23 => ToWorker::HandOverAbort,
            _ => return Err(bad("tag")),
        })
    }
}

/// One message of every kind in each direction: the codec's round-trip test and the seeds of
/// the fuzz harness (crates/c1m-server/fuzz) share them.
#[doc(hidden)]
pub fn examples() -> (Vec<ToMaster>, Vec<ToWorker>) {
    let to_master = vec![
        ToMaster::Publish {
            req: 9,
            channel: "a".into(),
            payload: b"x\ny".to_vec(),
        },
        ToMaster::PublishKeyed {
            req: 9,
            channel: "a".into(),
            payload: b"x".to_vec(),
            key: "order-17".into(),
        },
        ToMaster::Join {
            req: 1,
            channels: vec!["a".into(), "b".into()],
            after: Some(5),
        },
        ToMaster::Join {
            req: 2,
            channels: vec!["a".into()],
            after: None,
        },
        ToMaster::Leave {
            channel: "a".into(),
        },
        ToMaster::Stats(Box::new(WorkerStats {
            pid: 4,
            conns_sse: 3,
            delivered: 8,
            refused: Refused {
                forbidden: 2,
                ..Default::default()
            },
            tls: TlsStats {
                handshakes: 5,
                plaintext_refused: 1,
                ..Default::default()
            },
            subscribes: 6,
            unsent_bytes: 7,
            rss_bytes: 4096,
            dashboard_viewers: 1,
            heartbeats_sent: 11,
            heartbeats_skipped: 12,
            latency: {
                let mut l = Latencies::default();
                l.publish_to_write.record(120);
                l.fan_out.record(3);
                l.publish_ack.record(900);
                l.tls_handshake.record(20_000_000);
                l
            },
            ..Default::default()
        })),
        ToMaster::StatusQuery {
            req: 3,
            metrics: true,
        },
        ToMaster::Io(IoReport {
            uring: false,
            fallback_reason: "io_uring_setup: Operation not permitted".into(),
            uring_submits: 2,
            uring_sends: 9000,
            uring_queued: 3,
        }),
        ToMaster::Counts {
            counts: vec![("a".into(), 3), ("b".into(), 0)],
        },
        ToMaster::ChannelInfo {
            req: 6,
            channel: "a".into(),
        },
        ToMaster::HandOverPrepared,
        ToMaster::HandOverSent { conns: 12 },
        ToMaster::HandOverFailed {
            reason: "new worker gone".into(),
        },
    ];
    let to_worker = vec![
        ToWorker::Message {
            channel: "a".into(),
            id: 7,
            payload: vec![0, 1, 255],
            published_us: 123_456,
        },
        ToWorker::Published {
            req: 1,
            channel: "a".into(),
            id: 2,
        },
        ToWorker::Joined {
            req: 1,
            current_id: 10,
            channels: vec!["a".into()],
            replay: vec![
                Replay::Gap {
                    channel: "a".into(),
                    after: 1,
                    through: 3,
                },
                Replay::Message {
                    channel: "a".into(),
                    id: 4,
                    payload: b"p".to_vec(),
                },
            ],
            more: true,
        },
        ToWorker::Status {
            req: 5,
            body: "{}".into(),
            metrics: false,
        },
        ToWorker::Shutdown,
        ToWorker::PublishRefused {
            req: 3,
            retry_after_s: 1,
            broker: "redis is not reachable".into(),
        },
        ToWorker::Reconfigure {
            json: "{\"max_payload\":5}".into(),
        },
        ToWorker::Secrets(crate::secrets::Secrets {
            tls_cert: Some(b"cert".to_vec()),
            tls_key: None,
            jwt_key: Some(Vec::new()),
        }),
        ToWorker::JoinRefused {
            req: 4,
            retry_after_s: 1,
        },
        ToWorker::Gap {
            channel: "a".into(),
            after: 5,
            through: 9,
        },
        ToWorker::Dashboard {
            json: "{\"connections\":1}".into(),
        },
        ToWorker::HandOverPrepare,
        ToWorker::HandOverGo {
            name: "c1m-handover-1-0".into(),
            new_master_pid: 77,
            timeout_ms: 5000,
        },
        ToWorker::HandOverCommit,
        ToWorker::HandOverAbort,
    ];
    (to_master, to_worker)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4);
        &frame[4..]
    }

    #[test]
    fn round_trips() {
        let (to_master, to_worker) = examples();
        for m in to_master {
            assert_eq!(ToMaster::decode(body(&m.encode())).unwrap(), m);
        }
        for m in to_worker {
            assert_eq!(ToWorker::decode(body(&m.encode())).unwrap(), m);
        }
    }

    #[test]
    fn truncated_frames_are_errors_not_panics() {
        let frame = ToWorker::Message {
            channel: "abc".into(),
            id: 7,
            payload: vec![1; 10],
            published_us: 1,
        }
        .encode();
        for cut in 4..frame.len() - 1 {
            assert!(ToWorker::decode(&frame[4..cut]).is_err());
        }
    }
}
