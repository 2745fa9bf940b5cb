//! The Redis broker (`--broker redis://HOST:PORT[/DB]`, or `redis+cluster://H1:P1,…` for Redis
//! Cluster): ids, history and cross-node delivery live in Redis (see `script`, and
//! `cluster_script` for the cluster's per-channel data model); this node subscribes once per
//! channel that has local subscribers, not per client. This module is the master-side state
//! machine, one for both modes; `io` holds one Redis' connections and their threads,
//! `cluster_io` a cluster's (routed by `slots`), speaking the same requests and answers.
//!
//! Exactly-once per node rests on one rule: a channel's messages are forwarded to the workers
//! in id order and never at or below `forwarded`, the highest id already forwarded. A channel
//! becomes live in three steps: SUBSCRIBE, its confirmation, then a sync read of the counter
//! (or, after an outage, a catch-up replay from `forwarded`) that sets `forwarded`; pub/sub
//! messages that arrive meanwhile wait, and those the sync already covered are dropped. A join
//! with a replay is answered only once every replayed message has also been forwarded live
//! (pub/sub may lag the history read), so no later live message repeats what it replayed.

mod cluster_io;
mod cluster_script;
mod io;
mod pubsub_conn;
mod script;
mod slots;
mod target;

use super::{Broker, BrokerStats, Event, Limits, Req};
use crate::broker::ReplayChunk;
use crate::ipc::Replay;
use anyhow::Context;
pub use io::Shared;
use io::{Incoming, Request, Which};
use redis::Value;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

/// Requests the master may have outstanding; past it publishes get 503 and joins are refused.
const MAX_IN_FLIGHT: usize = 65_536;
/// Messages the threads may have queued for the master before they wait.
const INCOMING_QUEUE: usize = 65_536;
/// Pub/sub messages held for a channel while it syncs (one Redis round trip).
const EARLY_MAX: usize = 4096;
/// A node's subscriber counts count this long after its last report (it reports every tick,
/// about once a second), so a dead node stops counting within it.
const PRESENCE_TTL_MS: u64 = 5000;
/// Most channel counts sent in one presence report (the rest go in the next ones).
const PRESENCE_BATCH: usize = 10_000;
/// Longest a join may wait for Redis before its subscriber is refused.
const JOIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// A parsed `--broker` URL (and `--broker-ca`): one Redis, or a Redis Cluster's seeds.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    Single(Box<io::Target>),
    Cluster(target::ClusterTarget),
}

impl RedisTarget {
    pub fn parse(url: &str, ca: Option<&std::path::Path>) -> anyhow::Result<RedisTarget> {
        if target::is_cluster(url) {
            return target::parse_cluster(url, ca).map(RedisTarget::Cluster);
        }
        target::parse(url, ca).map(|t| RedisTarget::Single(Box::new(t)))
    }
}

/// The Redis Cluster hash slot of a key (the tests compare it with `CLUSTER KEYSLOT`).
pub use slots::key_slot;

/// True when `--broker` names a Redis Cluster, whose ids are per channel: a subscription to
/// several channels cannot resume from one last id there (see docs/cluster.md).
pub fn is_cluster(url: &str) -> bool {
    target::is_cluster(url)
}

/// A broker URL as it may be printed (password replaced).
pub fn redact(url: &str) -> String {
    target::redact(url)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// SUBSCRIBE sent (or to be sent when pub/sub is back), not confirmed.
    Subscribing,
    /// Confirmed; the sync read is on its way.
    Syncing,
    Live,
}

struct Chan {
    state: State,
    /// Highest id forwarded to the workers (valid once it has been live).
    forwarded: u64,
    was_live: bool,
    /// Pub/sub messages that came while syncing, in order.
    early: Vec<(u64, Rc<[u8]>)>,
    /// Ids of early messages dropped for room: (first, last).
    early_lost: Option<(u64, u64)>,
    /// Changes when the channel is made again or its subscription lost, so a sync answer
    /// meant for an earlier one is not taken for this one.
    generation: u64,
}

enum Stage {
    /// Waiting for its channels to be live.
    Subscribing,
    Querying,
    /// Answered by Redis; waits until pub/sub has caught up with what it replays.
    Forwarding {
        current_id: u64,
        chunk: ReplayChunk,
        need: Vec<(String, u64)>,
    },
}

struct Join {
    req: Req,
    /// A join not answered by then is refused (a safety net: the subscriber comes back with
    /// its last id rather than wait forever).
    deadline: Instant,
    channels: Vec<String>,
    after: Option<u64>,
    budget: usize,
    stage: Stage,
}

enum Pending {
    Publish {
        req: Req,
        channel: String,
    },
    Join {
        join: u64,
    },
    Sync {
        channel: String,
        generation: u64,
        after: Option<u64>,
    },
    /// A presence report; on failure everything is sent again.
    Presence,
    Info {
        req: Req,
        channel: String,
        local: u64,
    },
}

pub struct RedisBroker {
    to_redis: SyncSender<Request>,
    incoming: Receiver<Incoming>,
    shared: Arc<Shared>,
    limits: Limits,
    channels: HashMap<String, Chan>,
    joins: HashMap<u64, Join>,
    pending: HashMap<u64, Pending>,
    next_tag: u64,
    ready: Vec<Event>,
    pubsub_up: bool,
    ever_up: bool,
    /// SUBSCRIBEs sent and not yet confirmed, per channel: a channel syncs only once all its
    /// confirmations are in (an older one may belong to a subscription since left).
    unconfirmed: HashMap<String, u32>,
    /// This node in presence reports (pid and start time: unique enough among live nodes).
    node_id: String,
    /// This node's subscriber count per channel, and the ones not yet reported.
    counts: HashMap<String, u64>,
    unreported: HashMap<String, u64>,
    stats: BrokerStats,
}

impl RedisBroker {
    /// Starts the connection threads; the first connection is made in the background (a node
    /// may start before Redis: it refuses publishes until Redis answers).
    pub fn start(
        target: RedisTarget,
        limits: Limits,
        waker: mio::Waker,
    ) -> anyhow::Result<RedisBroker> {
        let (probed, shown) = match &target {
            RedisTarget::Single(t) => (&**t, &t.shown),
            RedisTarget::Cluster(c) => (&c.seeds[0], &c.shown),
        };
        io::probe(probed).with_context(|| {
            format!(
                "--broker {shown}: redis refused this node (check the URL's user and password, \
                 the ACL, --broker-ca)"
            )
        })?;
        let shared = Arc::new(Shared::new(waker));
        let (to_redis, requests) = std::sync::mpsc::sync_channel(MAX_IN_FLIGHT);
        let (tx, incoming) = std::sync::mpsc::sync_channel(INCOMING_QUEUE);
        let (s, x) = (shared.clone(), tx.clone());
        let kind = match target {
            RedisTarget::Single(target) => {
                let target = *target;
                let t = target.clone();
                std::thread::Builder::new()
                    .name("c1m-redis-cmd".into())
                    .spawn(move || io::command_thread(t, requests, x, s))
                    .context("starting the redis command thread")?;
                let s = shared.clone();
                std::thread::Builder::new()
                    .name("c1m-redis-sub".into())
                    .spawn(move || io::pubsub_thread(target, tx, s))
                    .context("starting the redis pub/sub thread")?;
                "redis"
            }
            RedisTarget::Cluster(target) => {
                // Pub/sub threads (one per master with subscribed channels) start as needed.
                std::thread::Builder::new()
                    .name("c1m-redis-cmd".into())
                    .spawn(move || cluster_io::command_thread(target, requests, x, s))
                    .context("starting the redis cluster command thread")?;
                "redis-cluster"
            }
        };
        Ok(RedisBroker {
            to_redis,
            incoming,
            shared,
            limits,
            channels: HashMap::new(),
            joins: HashMap::new(),
            pending: HashMap::new(),
            next_tag: 1,
            ready: Vec::new(),
            pubsub_up: false,
            ever_up: false,
            unconfirmed: HashMap::new(),
            node_id: format!(
                "{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros())
            ),
            counts: HashMap::new(),
            unreported: HashMap::new(),
            stats: BrokerStats {
                kind,
                ..Default::default()
            },
        })
    }

    fn max_age_ms(&self) -> u64 {
        (self.limits.max_age.as_millis() as u64).max(1)
    }

    fn tag(&mut self, what: Pending) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.pending.insert(tag, what);
        tag
    }

    /// Queues a request for Redis; false (and nothing pending) when the queue is full.
    fn request(&mut self, req: Request) -> bool {
        let tag = match &req {
            Request::Publish { tag, .. }
            | Request::Replay { tag, .. }
            | Request::Script { tag, .. } => Some(*tag),
            _ => None,
        };
        match io::try_request(&self.to_redis, req) {
            Ok(()) => true,
            Err(_) => {
                if let Some(tag) = tag {
                    self.pending.remove(&tag);
                }
                false
            }
        }
    }

    fn subscribe(&mut self, channel: &str) {
        // A full queue: the channel stays Subscribing and is retried on the next tick.
        if self.request(Request::Subscribe(channel.to_string())) {
            *self.unconfirmed.entry(channel.to_string()).or_default() += 1;
        }
    }

    fn send_sync(&mut self, channel: String) {
        let Some(chan) = self.channels.get(&channel) else {
            return;
        };
        let after = chan.was_live.then_some(chan.forwarded);
        let generation = chan.generation;
        let tag = self.tag(Pending::Sync {
            channel: channel.clone(),
            generation,
            after,
        });
        let cap = self.limits.max_count;
        let max_age_ms = self.max_age_ms();
        self.request(Request::Replay {
            tag,
            channels: vec![channel],
            after,
            cap,
            max_age_ms,
        });
    }

    fn send_join_query(&mut self, id: u64) {
        let Some(join) = self.joins.get_mut(&id) else {
            return;
        };
        join.stage = Stage::Querying;
        let (channels, after) = (join.channels.clone(), join.after);
        let tag = self.tag(Pending::Join { join: id });
        let cap = self.limits.max_count.clamp(1, 1000);
        let max_age_ms = self.max_age_ms();
        if !self.request(Request::Replay {
            tag,
            channels,
            after,
            cap,
            max_age_ms,
        }) {
            self.refuse_join(id);
        }
    }

    fn refuse_join(&mut self, id: u64) {
        if let Some(join) = self.joins.remove(&id) {
            self.stats.join_unavailable += 1;
            self.ready.push(Event::JoinUnavailable { req: join.req });
        }
    }

    fn all_live(&self, channels: &[String]) -> bool {
        channels
            .iter()
            .all(|c| self.channels.get(c).is_some_and(|c| c.state == State::Live))
    }

    /// Joins whose channels are all live now go to Redis.
    fn start_ready_joins(&mut self) {
        let ready: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, j)| matches!(j.stage, Stage::Subscribing) && self.all_live(&j.channels))
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            self.send_join_query(id);
        }
    }

    /// Answers joins whose replay pub/sub has caught up with.
    fn finish_forwarded_joins(&mut self) {
        let done: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, j)| match &j.stage {
                Stage::Forwarding { need, .. } => need
                    .iter()
                    .all(|(c, id)| self.channels.get(c).is_some_and(|c| c.forwarded >= *id)),
                _ => false,
            })
            .map(|(&id, _)| id)
            .collect();
        for id in done {
            let Some(join) = self.joins.remove(&id) else {
                continue;
            };
            if let Stage::Forwarding {
                current_id, chunk, ..
            } = join.stage
            {
                self.ready.push(Event::Joined {
                    req: join.req,
                    current_id,
                    channels: join.channels,
                    chunk,
                });
            }
        }
    }

    /// Sends the counts that changed (at most a batch) and refreshes this node's liveness.
    fn report_presence(&mut self) {
        let mut args = vec![self.node_id.clone(), PRESENCE_TTL_MS.to_string()];
        let batch: Vec<String> = self
            .unreported
            .keys()
            .take(PRESENCE_BATCH)
            .cloned()
            .collect();
        for channel in batch {
            if let Some(n) = self.unreported.remove(&channel) {
                args.push(channel);
                args.push(n.to_string());
            }
        }
        let tag = self.tag(Pending::Presence);
        if !self.request(Request::Script {
            tag,
            which: Which::Presence,
            args,
        }) {
            self.unreported = self.counts.clone();
        }
    }

    fn forward(&mut self, channel: &str, id: u64, payload: Rc<[u8]>) {
        let Some(chan) = self.channels.get_mut(channel) else {
            return; // left meanwhile
        };
        match chan.state {
            State::Live => {
                if id <= chan.forwarded {
                    return; // already delivered by a sync or catch-up
                }
                chan.forwarded = id;
                self.ready.push(Event::Message {
                    channel: channel.to_string(),
                    id,
                    payload,
                });
            }
            State::Syncing | State::Subscribing => {
                if chan.early.len() >= EARLY_MAX {
                    let (old, _) = chan.early.remove(0);
                    let first = chan.early_lost.map_or(old, |(f, _)| f);
                    chan.early_lost = Some((first, old));
                }
                chan.early.push((id, payload));
            }
        }
    }

    fn on_incoming(&mut self, msg: Incoming) {
        match msg {
            Incoming::CommandUp => {
                if self.ever_up {
                    self.stats.reconnects += 1;
                }
                self.ever_up = true;
                // Redis may have lost this node's presence (restart, expiry while down).
                self.unreported = self.counts.clone();
                // Syncs that failed while down are sent again.
                self.resend_stuck_syncs();
            }
            Incoming::CommandDown => {}
            Incoming::PubSubUp => {
                self.pubsub_up = true;
                let names: Vec<String> = self.channels.keys().cloned().collect();
                for ch in names {
                    self.subscribe(&ch);
                }
            }
            Incoming::PubSubDown => {
                self.pubsub_up = false;
                self.unconfirmed.clear();
                let names: Vec<String> = self.channels.keys().cloned().collect();
                for ch in names {
                    self.unsubscribed(&ch);
                }
                // A join cannot be answered exactly without live delivery: its subscriber
                // is refused and comes back with its last id.
                let ids: Vec<u64> = self.joins.keys().copied().collect();
                for id in ids {
                    self.refuse_join(id);
                }
            }
            Incoming::Lost(ch) => {
                // Redis Cluster: this channel alone lost its subscription (its slot moved or
                // its master's connection went); subscribed again where the map says, then
                // caught up from `forwarded` like after an outage.
                self.unconfirmed.remove(&ch);
                if self.unsubscribed(&ch) {
                    self.subscribe(&ch);
                }
            }
            Incoming::Subscribed(ch) => {
                let left = match self.unconfirmed.get_mut(&ch) {
                    Some(n) => {
                        *n = n.saturating_sub(1);
                        *n
                    }
                    None => 0,
                };
                if left == 0 {
                    self.unconfirmed.remove(&ch);
                }
                if let Some(chan) = self.channels.get_mut(&ch) {
                    if chan.state == State::Subscribing && left == 0 {
                        chan.state = State::Syncing;
                        self.send_sync(ch);
                    }
                }
            }
            Incoming::Message {
                channel,
                id,
                payload,
            } => {
                self.forward(&channel, id, Rc::from(payload));
                self.finish_forwarded_joins();
            }
            Incoming::Answer { tag, value } => {
                let Some(what) = self.pending.remove(&tag) else {
                    return;
                };
                self.on_answer(what, value);
            }
        }
    }

    /// `channel`'s subscription is gone: it waits for a new one (a new generation, so an
    /// answer meant for the old one is not taken) and then catches up. False when unknown.
    fn unsubscribed(&mut self, channel: &str) -> bool {
        let Some(chan) = self.channels.get_mut(channel) else {
            return false;
        };
        chan.generation = self.next_tag;
        self.next_tag += 1;
        if chan.state == State::Live {
            self.stats.resubscribes += 1;
        }
        chan.was_live |= chan.state == State::Live;
        chan.state = State::Subscribing;
        chan.early.clear();
        chan.early_lost = None;
        true
    }

    /// Channels whose sync read failed (Redis refused or lost it) and has none on its way.
    fn resend_stuck_syncs(&mut self) {
        let stuck: Vec<String> = self
            .channels
            .iter()
            .filter(|(_, c)| c.state == State::Syncing)
            .map(|(n, _)| n.clone())
            .collect();
        for ch in stuck {
            if !self
                .pending
                .values()
                .any(|p| matches!(p, Pending::Sync { channel, .. } if *channel == ch))
            {
                self.send_sync(ch);
            }
        }
    }

    /// Why a request got no answer: Redis' own error when it refused one (e.g. out of
    /// memory), else the lost connection.
    fn failure_cause(&self) -> String {
        let refusal = self.shared.last_refusal();
        if !self.shared.command_up.load(Ordering::SeqCst) || refusal.is_empty() {
            "the connection to redis was lost".to_string()
        } else {
            format!("redis refused the write: {refusal}")
        }
    }

    fn on_answer(&mut self, what: Pending, value: Option<Value>) {
        match what {
            Pending::Publish { req, channel } => {
                match value.as_ref().and_then(script::decode_published) {
                    Some((id, repeated)) => {
                        self.stats.idempotent_replays += u64::from(repeated);
                        self.ready.push(Event::Published { req, channel, id })
                    }
                    None => {
                        self.stats.publish_unavailable += 1;
                        let cause = self.failure_cause();
                        self.ready.push(Event::PublishUnavailable { req, cause });
                    }
                }
            }
            Pending::Join { join: id } => {
                let Some(join) = self.joins.get(&id) else {
                    return;
                };
                let found = value.and_then(|v| script::decode_found(v, join.channels.len()));
                let Some(found) = found else {
                    return self.refuse_join(id);
                };
                let current_id = found.current;
                let chunk = match join.after {
                    Some(after) => {
                        let cap = self.limits.max_count.clamp(1, 1000);
                        script::to_chunk(found, &join.channels, after, join.budget, cap)
                    }
                    None => ReplayChunk::default(),
                };
                let mut need: Vec<(String, u64)> = Vec::new();
                for item in &chunk.items {
                    if let Replay::Message { channel, id, .. } = item {
                        match need.iter_mut().find(|(c, _)| c == channel) {
                            Some(n) => n.1 = n.1.max(*id),
                            None => need.push((channel.clone(), *id)),
                        }
                    }
                }
                if let Some(join) = self.joins.get_mut(&id) {
                    join.stage = Stage::Forwarding {
                        current_id,
                        chunk,
                        need,
                    };
                }
                self.finish_forwarded_joins();
            }
            Pending::Presence => {
                if value.is_none() {
                    self.unreported = self.counts.clone();
                }
            }
            Pending::Info {
                req,
                channel,
                local,
            } => {
                let parts = match value {
                    Some(Value::Array(parts)) if parts.len() == 3 => Some(parts),
                    _ => None,
                };
                let event = match parts {
                    Some(p) => Event::ChannelInfo {
                        req,
                        channel,
                        subscribers: local + script::as_u64(&p[0]).unwrap_or(0),
                        nodes: script::as_u64(&p[1]).unwrap_or(1),
                        last_id: script::as_u64(&p[2]),
                        complete: true,
                    },
                    None => Event::ChannelInfo {
                        req,
                        channel,
                        subscribers: local,
                        nodes: 1,
                        last_id: None,
                        complete: false,
                    },
                };
                self.ready.push(event);
            }
            Pending::Sync {
                channel,
                generation,
                after,
            } => {
                if self
                    .channels
                    .get(&channel)
                    .is_none_or(|c| c.generation != generation)
                {
                    return;
                }
                let found = value.and_then(|v| script::decode_found(v, 1));
                let Some(found) = found else {
                    // Retried when the command connection is back (or on the next tick).
                    return;
                };
                self.on_synced(channel, after, found);
            }
        }
    }

    /// A channel's sync read: it goes live at the counter read, after forwarding what it
    /// missed (catch-up after an outage) or telling its subscribers what cannot be replayed.
    fn on_synced(&mut self, channel: String, after: Option<u64>, found: script::Found) {
        let Some(chan) = self.channels.get_mut(&channel) else {
            return;
        };
        if chan.state != State::Syncing {
            return;
        }
        let current = found.current;
        let mut out = Vec::new();
        let mut forwarded = current;
        if let Some(after) = after {
            let names = [channel.clone()];
            let chunk = script::to_chunk(found, &names, after, usize::MAX, usize::MAX);
            for item in chunk.items {
                match item {
                    Replay::Gap {
                        channel,
                        after,
                        through,
                    } => {
                        self.stats.live_gaps += 1;
                        out.push(Event::Gap {
                            channel,
                            after,
                            through,
                        })
                    }
                    Replay::Message {
                        channel,
                        id,
                        payload,
                    } => out.push(Event::Message {
                        channel,
                        id,
                        payload: Rc::from(payload),
                    }),
                }
            }
            forwarded = forwarded.max(after);
        }
        chan.state = State::Live;
        chan.forwarded = forwarded;
        let early = std::mem::take(&mut chan.early);
        if let Some((first, last)) = chan.early_lost.take() {
            if last > forwarded {
                self.stats.live_gaps += 1;
                out.push(Event::Gap {
                    channel: channel.clone(),
                    after: forwarded.max(first - 1),
                    through: last,
                });
                chan.forwarded = last;
            }
        }
        self.ready.append(&mut out);
        for (id, payload) in early {
            self.forward(&channel, id, payload);
        }
        self.start_ready_joins();
        self.finish_forwarded_joins();
    }
}

impl Broker for RedisBroker {
    fn publish(&mut self, req: Req, channel: String, payload: Rc<[u8]>, key: Option<String>) {
        let refused = if !self.shared.command_up.load(Ordering::SeqCst) {
            Some("redis is not reachable")
        } else if self.pending.len() >= MAX_IN_FLIGHT {
            Some("too many requests waiting for redis")
        } else {
            None
        };
        if let Some(cause) = refused {
            self.stats.publish_unavailable += 1;
            let cause = cause.to_string();
            return self.ready.push(Event::PublishUnavailable { req, cause });
        }
        let tag = self.tag(Pending::Publish {
            req,
            channel: channel.clone(),
        });
        let max_age_ms = self.max_age_ms();
        if !self.request(Request::Publish {
            tag,
            channel,
            payload: payload.to_vec(),
            max_count: self.limits.max_count,
            max_age_ms,
            key: key.unwrap_or_default(),
        }) {
            self.stats.publish_unavailable += 1;
            let cause = "the redis command thread is gone".to_string();
            self.ready.push(Event::PublishUnavailable { req, cause });
        }
    }

    fn join(&mut self, req: Req, channels: Vec<String>, after: Option<u64>, budget: usize) {
        if !self.shared.command_up.load(Ordering::SeqCst)
            || !self.pubsub_up
            || self.pending.len() >= MAX_IN_FLIGHT
        {
            self.stats.join_unavailable += 1;
            return self.ready.push(Event::JoinUnavailable { req });
        }
        for ch in &channels {
            if !self.channels.contains_key(ch) {
                self.next_tag += 1;
                self.channels.insert(
                    ch.clone(),
                    Chan {
                        state: State::Subscribing,
                        forwarded: 0,
                        was_live: false,
                        early: Vec::new(),
                        early_lost: None,
                        generation: self.next_tag,
                    },
                );
                self.subscribe(ch);
            }
        }
        let id = self.next_tag;
        self.next_tag += 1;
        let live = self.all_live(&channels);
        self.joins.insert(
            id,
            Join {
                req,
                deadline: Instant::now() + JOIN_DEADLINE,
                channels,
                after,
                budget,
                stage: Stage::Subscribing,
            },
        );
        if live {
            self.send_join_query(id);
        }
    }

    fn leave(&mut self, channel: &str) {
        if self.channels.remove(channel).is_some() {
            let _ = self.request(Request::Unsubscribe(channel.to_string()));
        }
    }

    fn drain(&mut self, out: &mut Vec<Event>) {
        self.shared.woken();
        loop {
            // Hand over in slices so one burst does not pile up here; the master comes back
            // for the rest at once.
            if self.ready.len() >= 1024 {
                self.shared.rewake();
                break;
            }
            match self.incoming.try_recv() {
                Ok(msg) => self.on_incoming(msg),
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => break,
            }
        }
        out.append(&mut self.ready);
    }

    fn tick(&mut self, now: Instant) {
        if self.shared.command_up.load(Ordering::SeqCst) {
            self.report_presence();
        }
        let late: Vec<u64> = self
            .joins
            .iter()
            .filter(|(_, j)| j.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in late {
            tracing::warn!(deadline = ?JOIN_DEADLINE, "a join waited too long for redis; refusing it");
            self.refuse_join(id);
        }
        // Subscriptions a full queue kept from going out.
        if self.pubsub_up {
            let stuck: Vec<String> = self
                .channels
                .iter()
                .filter(|(_, c)| c.state == State::Subscribing)
                .map(|(n, _)| n.clone())
                .collect();
            for ch in stuck {
                self.subscribe(&ch);
            }
        }
        // Syncs that failed while the connection stayed up (under Redis Cluster one master
        // can refuse while the others answer).
        if self.shared.command_up.load(Ordering::SeqCst) {
            self.resend_stuck_syncs();
        }
    }

    fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    fn set_count(&mut self, channel: &str, n: u64) {
        if n == 0 {
            self.counts.remove(channel);
        } else {
            self.counts.insert(channel.to_string(), n);
        }
        self.unreported.insert(channel.to_string(), n);
    }

    fn channel_info(&mut self, req: Req, channel: String, local: u64) {
        if !self.shared.command_up.load(Ordering::SeqCst) {
            return self.ready.push(Event::ChannelInfo {
                req,
                channel,
                subscribers: local,
                nodes: 1,
                last_id: None,
                complete: false,
            });
        }
        let args = vec![
            self.node_id.clone(),
            PRESENCE_TTL_MS.to_string(),
            channel.clone(),
        ];
        let tag = self.tag(Pending::Info {
            req,
            channel: channel.clone(),
            local,
        });
        if !self.request(Request::Script {
            tag,
            which: Which::Info,
            args,
        }) {
            self.ready.push(Event::ChannelInfo {
                req,
                channel,
                subscribers: local,
                nodes: 1,
                last_id: None,
                complete: false,
            });
        }
    }

    fn stats(&self) -> BrokerStats {
        BrokerStats {
            channels: self.channels.len(),
            connected: self.shared.command_up.load(Ordering::SeqCst) && self.pubsub_up,
            in_flight: self.pending.len() as u64,
            connect_failures: self.shared.connect_failures.load(Ordering::Relaxed),
            auth_failures: self.shared.auth_failures.load(Ordering::Relaxed),
            pubsub_dead_links: self.shared.dead_links.load(Ordering::Relaxed),
            ..self.stats.clone()
        }
    }
}
