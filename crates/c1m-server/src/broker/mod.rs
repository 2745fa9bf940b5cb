//! The broker seam: what the master asks of whatever holds ids, history and cross-node
//! delivery. Requests return at once; their answers (and messages published anywhere in the
//! cluster) come back as [`Event`]s that the master drains after each request and whenever the
//! broker's [`mio::Waker`] fires. The in-process [`memory::MemoryBroker`] answers synchronously
//! (its events are ready before the call returns); [`redis::RedisBroker`] answers from its own
//! threads. A further backend (NATS JetStream, see docs/cluster.md) is one more module here.
//!
//! The [`Broker`] trait is the only seam between the master and what holds history. There is no second,
//! hub-level trait under it: a hub that answers a publish with its id before returning (the
//! in-process store, the `hub` module) cannot describe Redis, whose answers arrive later from
//! another thread, so such a trait could only ever have the one implementation it would wrap.
//! The memory broker therefore owns the concrete hub and turns its answers into events; what
//! every backend must agree on (the gap rule and the shape of a replay) lives in `replay`.

mod idempotency;
pub mod memory;
pub mod redis;
mod replay;

use crate::config::{Namespaces, Resolved};
pub use replay::{gap_through, Replay, ReplayChunk};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a publish's `Idempotency-Key` is remembered (per channel): a retry within it gets
/// the first id back instead of storing the message again.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(600);
/// Most idempotency keys the in-process hub remembers (the oldest go first); Redis holds its
/// own (bounded by the TTL and its `maxmemory`).
pub const IDEMPOTENCY_MAX_KEYS: usize = 100_000;

/// Who asked: the worker slot and the worker's own request token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    pub worker: usize,
    pub token: u64,
}

/// An answer, or a message to deliver.
#[derive(Debug)]
pub enum Event {
    /// A publish was stored under `id`.
    Published { req: Req, channel: String, id: u64 },
    /// A publish was not taken (the broker is unreachable, or refused the write): the
    /// publisher retries. `cause` says why, for the publisher and the log.
    PublishUnavailable { req: Req, cause: String },
    /// The answer to a join: one chunk of the replay, then the channels are live on this node.
    Joined {
        req: Req,
        current_id: u64,
        channels: Vec<String>,
        chunk: ReplayChunk,
    },
    /// A join could not be answered exactly (the broker is unreachable): the subscriber is
    /// refused and retries.
    JoinUnavailable { req: Req },
    /// A message for the channel's subscribers on this node, in the channel's order, once.
    Message {
        channel: String,
        id: u64,
        payload: Rc<[u8]>,
    },
    /// The answer to `channel_info`. `complete` is false when only this node's figures could be
    /// had (the broker is unreachable).
    ChannelInfo {
        req: Req,
        channel: String,
        subscribers: u64,
        last_id: Option<u64>,
        nodes: u64,
        complete: bool,
    },
    /// The answer to `history`.
    History {
        req: Req,
        page: Result<HistoryPage, String>,
    },
    /// A server API control message from another node (`control`), as that node sent it.
    Control { message: String },
    /// A join or leave from another node (or the leave of a dead node's member) for this
    /// node's subscribers of `channel`.
    Presence {
        join: bool,
        channel: String,
        json: String,
    },
    /// The answer to `presence_query`: the cluster's members of `channel` as (field
    /// `node/conn`, member JSON or '' for an anonymous one); `None` when Redis could not be
    /// asked.
    PresenceMembers {
        req: Req,
        channel: String,
        members: Option<Vec<(String, String)>>,
    },
    /// Messages `(after, through]` on `channel` cannot be delivered (lost while the broker was
    /// unreachable, or gone from its history): live subscribers are told so.
    Gap {
        channel: String,
        after: u64,
        through: u64,
    },
}

/// Figures for `/status` and `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStats {
    /// "memory", "redis", "redis-sentinel" or "redis-cluster".
    pub kind: &'static str,
    /// Channels with history held in this process (memory) or subscribed on this node (redis).
    pub channels: usize,
    /// Bytes of history held in this process (0 for an external broker).
    pub history_bytes: usize,
    /// Bytes of history this process has freed since it started (expired, evicted, channels
    /// freed), as charged: the master hands freed heap back to the kernel after a large drop.
    pub history_freed_bytes: u64,
    /// The broker can be reached now (always true for memory).
    pub connected: bool,
    /// Times the connection to the broker was (re)established after the first.
    pub reconnects: u64,
    /// Publishes refused (503) because the broker was unreachable.
    pub publish_unavailable: u64,
    /// Subscribes refused (503 / 1013) because the broker was unreachable.
    pub join_unavailable: u64,
    /// Gap events sent to live subscribers after an outage lost messages.
    pub live_gaps: u64,
    /// Requests sent to the broker and not yet answered.
    pub in_flight: u64,
    /// Failed attempts to (re)connect to the broker, any cause.
    pub connect_failures: u64,
    /// Of those, refusals only an operator can fix: wrong password or user, no permission
    /// (ACL), a TLS certificate the trusted CA did not sign. Each is also logged.
    pub auth_failures: u64,
    /// Publishes answered with an earlier publish's id because they repeated its
    /// `Idempotency-Key` (a retry): stored and delivered once.
    pub idempotent_replays: u64,
    /// Pub/sub connections dropped because they went silent (a PING unanswered for 5 s after
    /// 2 s of silence): a Redis that vanished without closing the socket.
    pub pubsub_dead_links: u64,
    /// Messages from other nodes this build could not read (channel messages, join/leave
    /// events, control messages): a node of another c1m version, or another program
    /// publishing on c1m's names. Each is logged (rate-limited) and ignored.
    pub unreadable_messages: u64,
    /// Channels subscribed again after their live subscription was lost (pub/sub connection
    /// lost or dead, or under Redis Cluster their slot moved), each caught up from history.
    pub resubscribes: u64,
}

/// One member change for a broker that keeps the cluster's presence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceOp {
    /// Added (true) or removed.
    pub join: bool,
    /// Other nodes' subscribers are told (false: a live upgrade's or a resync's quiet add, or
    /// an anonymous member).
    pub announce: bool,
    pub channel: String,
    /// The member's id on this node (`crate::conn_id::ConnId` as written).
    pub conn: String,
    /// The member's event JSON, '' for an anonymous member.
    pub json: String,
}

/// One page of a channel's history for the server API's `history` call.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HistoryPage {
    /// (id, payload), oldest first.
    pub messages: Vec<(u64, Vec<u8>)>,
    /// What a resume from the asked id missed (`gap_through`): `(after, through]`.
    pub gap: Option<(u64, u64)>,
    /// History holds more after the last message here.
    pub more: bool,
}

impl HistoryPage {
    /// The page from a whole replay of one channel: with `since`, the first `limit` messages
    /// after it (a resume's answer, gap included); without, the newest `limit` (no gap).
    pub fn from_replay(items: Vec<Replay>, since: Option<u64>, limit: usize) -> HistoryPage {
        let mut page = HistoryPage::default();
        for item in items {
            match item {
                Replay::Gap { after, through, .. } if since.is_some() => {
                    page.gap = Some((after, through))
                }
                Replay::Gap { .. } => {}
                Replay::Message { id, payload, .. } => page.messages.push((id, payload)),
            }
        }
        if page.messages.len() > limit {
            if since.is_some() {
                page.messages.truncate(limit);
                page.more = true;
            } else {
                page.messages.drain(..page.messages.len() - limit);
            }
        }
        page
    }
}

/// History bounds (from the configuration, changed by SIGHUP): per channel, its namespace's
/// count, age and bytes; over all channels, `max_bytes` (the in-process hub; Redis is bounded by
/// its own `maxmemory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub namespaces: Arc<Namespaces>,
    pub max_bytes: usize,
}

impl Limits {
    pub fn new(cfg: &crate::config::Config) -> Limits {
        Limits {
            namespaces: Arc::new(Namespaces::new(cfg)),
            max_bytes: cfg.history_max_bytes,
        }
    }

    /// The bounds of `channel`: its namespace's, else the global ones.
    pub fn of(&self, channel: &str) -> &Resolved {
        self.namespaces.namespace_of(channel)
    }

    /// The widest count and age bounds over `channels` (one read that serves them all).
    pub fn widest<'a>(&self, channels: impl IntoIterator<Item = &'a String>) -> (usize, Duration) {
        channels
            .into_iter()
            .fold((1, Duration::ZERO), |(n, age), c| {
                let r = self.of(c);
                (n.max(r.history_size), age.max(r.history_age))
            })
    }
}

/// What a broker must do for the master.
pub trait Broker {
    /// Stores and delivers a message; answered by `Published` or `PublishUnavailable`, and the
    /// message itself comes back as a `Message` event for this node's subscribers. With an
    /// idempotency `key` already used on `channel` within [`IDEMPOTENCY_TTL`], nothing is stored
    /// or delivered: the answer is `Published` with the first publish's id.
    fn publish(&mut self, req: Req, channel: String, payload: Rc<[u8]>, key: Option<String>);
    /// Makes `channels` live on this node and answers with what history holds after `after`
    /// (one chunk of `budget` payload bytes): `Joined`, or `JoinUnavailable`. No `Message` on
    /// these channels that the replay covers is delivered after the `Joined` event.
    fn join(&mut self, req: Req, channels: Vec<String>, after: Option<u64>, budget: usize);
    /// No worker on this node has subscribers on `channel` any more.
    fn leave(&mut self, channel: &str);
    /// Moves every ready event to `out`, in order.
    fn drain(&mut self, out: &mut Vec<Event>);
    /// Periodic work (expiry, reconnection); called about once a second.
    fn tick(&mut self, now: Instant);
    fn set_limits(&mut self, limits: Limits);
    /// This node's subscriber count on `channel` changed (0: none left).
    fn set_count(&mut self, channel: &str, n: u64);
    /// Subscribers on `channel` over all nodes (`local` is this node's) and its newest id:
    /// answered by `ChannelInfo`.
    fn channel_info(&mut self, req: Req, channel: String, local: u64);
    fn stats(&self) -> BrokerStats;
    /// A channel's history for the server API: answered by `History` (see
    /// [`HistoryPage::from_replay`] for what `since` and `limit` select).
    fn history(&mut self, req: Req, channel: String, since: Option<u64>, limit: usize);
    /// Sends a server API control message to every other node (`Control` events there);
    /// false when this broker has no other nodes to reach (one box) or could not queue it.
    fn control(&mut self, _message: String) -> bool {
        false
    }
    /// Whether the cluster's presence lives in this broker (then member changes go to it,
    /// `presence_query` answers for the cluster, and other nodes' events come back as
    /// `Presence` events). The in-process hub: no, the master's sets are the whole story.
    fn shares_presence(&self) -> bool {
        false
    }
    /// This node's member changes, in order.
    fn presence_ops(&mut self, _ops: Vec<PresenceOp>) {}
    /// The cluster's members of `channel`: answered by `PresenceMembers`.
    fn presence_query(&mut self, _req: Req, _channel: String) {}
    /// True once after the broker may have lost this node's members (it reconnected): the
    /// master sends them all again, quietly.
    fn take_presence_resync(&mut self) -> bool {
        false
    }
    /// Live upgrade: the ids and history to hand to the new master, or None when this broker
    /// cannot hand over (the upgrade is then refused).
    fn export_history(&self, _now: Instant) -> Option<HistoryExport> {
        None
    }
    /// Live upgrade, new master: takes what the old master's broker exported.
    fn import_history(&mut self, _history: HistoryExport, _now: Instant) -> bool {
        false
    }
}

/// What an in-memory hub hands to the next master of a live upgrade.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryExport {
    /// The newest id handed out.
    pub last_id: u64,
    /// The hub's first id minus one: ids up to here come from an earlier run.
    pub forgotten_through: u64,
    /// Every channel the hub tracks, with its history, and the records of channels freed when
    /// they lost all (no messages; see the hub's doc for how a record is named).
    pub channels: Vec<c1m_proto::handover::ChannelHistory>,
    /// (bucket, highest id) of the buckets of forgotten channels that are not 0.
    pub lost_buckets: Vec<(u32, u64)>,
}
