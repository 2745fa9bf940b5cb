//! The Redis broker's face to the master: [`RedisBroker`] implements the broker seam on Redis.
//! It starts the mode's connection threads, tags each request it queues for them, and turns
//! their answers into events: publishes, presence and channel info here; a channel's
//! subscription, sync and joins in `channels`, where exactly-once delivery is kept.

use super::channels::{Chan, Join};
use super::protocol::{try_request, Incoming, Request, Which};
use super::shared::{Link, Shared};
use super::{cluster, script, single, RedisTarget};
use crate::broker::{Broker, BrokerStats, Event, Limits, Req};
use anyhow::Context;
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
/// A node's subscriber counts count this long after its last report (it reports every tick,
/// about once a second), so a dead node stops counting within it.
const PRESENCE_TTL_MS: u64 = 5000;
/// Most channel counts sent in one presence report (the rest go in the next ones).
const PRESENCE_BATCH: usize = 10_000;
/// Longest a join may wait for Redis before its subscriber is refused.
pub(super) const JOIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// What a request sent to Redis was for, until its answer comes.
pub(super) enum Pending {
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
    /// A server API control message (its answer says only that Redis took it).
    Control,
    /// The server API's `history`: the channel's replay after `since` (0 without).
    History {
        req: Req,
        channel: String,
        since: Option<u64>,
        limit: usize,
    },
    /// Member changes (or the refresh); on failure the master resyncs every member.
    MembersApply,
    /// A reap of dead nodes: the leaves this node delivers itself.
    MembersReap,
    MembersQuery {
        req: Req,
        channel: String,
    },
}

/// The broker seam on Redis: one node's view of the shared ids, history and delivery.
pub struct RedisBroker {
    pub(super) to_redis: SyncSender<Request>,
    pub(super) incoming: Receiver<Incoming>,
    pub(super) shared: Arc<Shared>,
    pub(super) limits: Limits,
    pub(super) channels: HashMap<String, Chan>,
    pub(super) joins: HashMap<u64, Join>,
    pub(super) pending: HashMap<u64, Pending>,
    pub(super) next_tag: u64,
    pub(super) ready: Vec<Event>,
    pub(super) pubsub_up: bool,
    pub(super) ever_up: bool,
    /// SUBSCRIBEs sent and not yet confirmed, per channel: a channel syncs only once all its
    /// confirmations are in (an older one may belong to a subscription since left).
    pub(super) unconfirmed: HashMap<String, u32>,
    /// This node in presence reports (pid and start time: unique enough among live nodes).
    pub(super) node_id: String,
    /// This node's subscriber count per channel, and the ones not yet reported.
    pub(super) counts: HashMap<String, u64>,
    pub(super) unreported: HashMap<String, u64>,
    pub(super) stats: BrokerStats,
    /// The database number (pub/sub names carry it).
    db: i64,
    /// Redis may have lost this node's members: the master sends them again.
    pub(super) members_resync: bool,
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
            RedisTarget::Single(t) => (Some((**t).clone()), &t.shown),
            RedisTarget::Cluster(c) => (Some(c.seeds[0].clone()), &c.shown),
            RedisTarget::Sentinel(s) => match s.resolve() {
                Ok(t) => (Some(t), &s.shown),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "broker master not known yet; asking the Sentinels in the background");
                    (None, &s.shown)
                }
            },
        };
        // Pub/sub names carry the database (pub/sub ignores it); a Sentinel or cluster URL
        // names none.
        let db = match &target {
            RedisTarget::Single(t) => t.db,
            RedisTarget::Cluster(_) | RedisTarget::Sentinel(_) => 0,
        };
        if let Some(probed) = probed {
            single::probe(&probed).with_context(|| {
                format!(
                    "--broker {shown}: redis refused this node (check the URL's user and password, \
                     the ACL, --broker-ca)"
                )
            })?;
        }
        let shared = Arc::new(Shared::new(waker));
        let (to_redis, requests) = std::sync::mpsc::sync_channel(MAX_IN_FLIGHT);
        let (tx, incoming) = std::sync::mpsc::sync_channel(INCOMING_QUEUE);
        let link = Link {
            tx,
            shared: shared.clone(),
        };
        let kind = match target {
            RedisTarget::Single(target) => {
                single::start(single::Source::Fixed(target), requests, link)?;
                "redis"
            }
            RedisTarget::Sentinel(target) => {
                single::start(single::Source::Sentinel(target), requests, link)?;
                "redis-sentinel"
            }
            RedisTarget::Cluster(target) => {
                cluster::start(target, requests, link)?;
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
            db,
            members_resync: false,
        })
    }

    /// The widest count and age bounds (ms, at least 1, as the scripts take it) over
    /// `channels`' namespaces: one read serves them all, and each channel's own bounds were
    /// applied when its messages were stored.
    pub(super) fn bounds_of<'a>(
        &self,
        channels: impl IntoIterator<Item = &'a String>,
    ) -> (usize, u64) {
        let (count, age) = self.limits.widest(channels);
        (count, (age.as_millis() as u64).max(1))
    }

    /// A new request tag, remembering what it is for.
    pub(super) fn tag(&mut self, what: Pending) -> u64 {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.pending.insert(tag, what);
        tag
    }

    /// Queues a request for Redis; false (and nothing pending) when the queue is full.
    pub(super) fn request(&mut self, req: Request) -> bool {
        let tag = req.tag();
        match try_request(&self.to_redis, req) {
            Ok(()) => true,
            Err(_) => {
                if let Some(tag) = tag {
                    self.pending.remove(&tag);
                }
                false
            }
        }
    }

    /// Sends the counts that changed (at most a batch) and refreshes this node's liveness.
    pub(super) fn report_presence(&mut self) {
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

    /// Why a request got no answer: Redis' own error when it refused one (e.g. out of
    /// memory), else the lost connection.
    pub(super) fn failure_cause(&self) -> String {
        let refusal = self.shared.last_refusal();
        if !self.shared.command_up.load(Ordering::SeqCst) || refusal.is_empty() {
            "the connection to redis was lost".to_string()
        } else {
            format!("redis refused the write: {refusal}")
        }
    }

    /// Redis answered (or, `None`, failed) the request that was for `what`.
    pub(super) fn on_answer(&mut self, what: Pending, value: Option<Value>) {
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
            Pending::Join { join } => self.on_join_found(join, value),
            Pending::Presence => {
                if value.is_none() {
                    self.unreported = self.counts.clone();
                }
            }
            Pending::MembersApply => {
                if value.is_none() {
                    self.members_resync = true;
                }
            }
            Pending::MembersReap => {
                let Some(Value::Array(items)) = value else {
                    return;
                };
                let text = |v: &Value| match v {
                    Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                    _ => None,
                };
                for pair in items.chunks(2) {
                    if let [ch, json] = pair {
                        if let (Some(channel), Some(json)) = (text(ch), text(json)) {
                            self.ready.push(Event::Presence {
                                join: false,
                                channel,
                                json,
                            });
                        }
                    }
                }
            }
            Pending::MembersQuery { req, channel } => {
                let members = match value {
                    Some(Value::Array(items)) => Some(
                        items
                            .chunks(2)
                            .filter_map(|pair| match pair {
                                [Value::BulkString(f), Value::BulkString(v)] => Some((
                                    String::from_utf8_lossy(f).into_owned(),
                                    String::from_utf8_lossy(v).into_owned(),
                                )),
                                _ => None,
                            })
                            .collect(),
                    ),
                    _ => None,
                };
                self.ready.push(Event::PresenceMembers {
                    req,
                    channel,
                    members,
                });
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
            } => self.on_sync_found(channel, generation, after, value),
            Pending::Control => {}
            Pending::History {
                req,
                channel,
                since,
                limit,
            } => {
                let (count, _) = self.bounds_of([&channel]);
                let cap = count.clamp(1, 1000);
                let channels = [channel];
                let after = since.unwrap_or(0);
                let page = value
                    .and_then(|v| script::decode_found(v, 1))
                    .map(|found| script::to_chunk(found, &channels, after, usize::MAX, cap))
                    .map(|chunk| crate::broker::HistoryPage::from_replay(chunk.items, since, limit))
                    .ok_or_else(|| self.failure_cause());
                self.ready.push(Event::History { req, page });
            }
        }
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
        let (max_count, max_age_ms) = self.bounds_of([&channel]);
        if !self.request(Request::Publish {
            tag,
            channel,
            payload: payload.to_vec(),
            max_count,
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
        self.open_join(req, channels, after, budget);
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
            // Refresh this node's liveness, then reap nodes whose liveness expired.
            self.presence_ops(Vec::new());
            let tag = self.tag(Pending::MembersReap);
            let args = vec![self.node_id.clone(), super::presence::event_name(self.db)];
            let _ = self.request(Request::Script {
                tag,
                which: Which::MembersReap,
                args,
            });
        }
        self.refuse_late_joins(now);
        self.resubscribe_stuck();
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

    /// Every mode: a plain PUBLISH that each node's control link hears.
    fn control(&mut self, message: String) -> bool {
        if !self.shared.command_up.load(Ordering::SeqCst) {
            return false;
        }
        let tag = self.tag(Pending::Control);
        self.request(Request::Control { tag, message })
    }

    fn history(&mut self, req: Req, channel: String, since: Option<u64>, limit: usize) {
        if !self.shared.command_up.load(Ordering::SeqCst) || self.pending.len() >= MAX_IN_FLIGHT {
            let page = Err(self.failure_cause());
            return self.ready.push(Event::History { req, page });
        }
        let tag = self.tag(Pending::History {
            req,
            channel: channel.clone(),
            since,
            limit,
        });
        let (count, max_age_ms) = self.bounds_of([&channel]);
        let request = Request::Replay {
            tag,
            channels: vec![channel],
            after: Some(since.unwrap_or(0)),
            cap: count.clamp(1, 1000),
            max_age_ms,
        };
        if !self.request(request) {
            let page = Err("the redis request queue is full".to_string());
            self.ready.push(Event::History { req, page });
        }
    }

    fn shares_presence(&self) -> bool {
        true
    }

    fn presence_ops(&mut self, ops: Vec<crate::broker::PresenceOp>) {
        let mut ops = ops.into_iter().peekable();
        loop {
            let mut args = vec![
                self.node_id.clone(),
                super::presence::ALIVE_TTL_MS.to_string(),
                super::presence::event_name(self.db),
            ];
            for op in ops.by_ref().take(super::presence::OPS_PER_CALL) {
                let code = match (op.join, op.announce) {
                    (true, true) => "J",
                    (true, false) => "Q",
                    (false, true) => "L",
                    (false, false) => "D",
                };
                args.extend([code.to_string(), op.channel, op.conn, op.json]);
            }
            let tag = self.tag(Pending::MembersApply);
            if !self.request(Request::Script {
                tag,
                which: Which::MembersApply,
                args,
            }) {
                self.members_resync = true;
            }
            if ops.peek().is_none() {
                return;
            }
        }
    }

    fn presence_query(&mut self, req: Req, channel: String) {
        let tag = self.tag(Pending::MembersQuery {
            req,
            channel: channel.clone(),
        });
        if !self.request(Request::Script {
            tag,
            which: Which::MembersQuery,
            args: vec![channel.clone()],
        }) {
            self.ready.push(Event::PresenceMembers {
                req,
                channel,
                members: None,
            });
        }
    }

    fn take_presence_resync(&mut self) -> bool {
        std::mem::take(&mut self.members_resync)
    }

    fn stats(&self) -> BrokerStats {
        BrokerStats {
            channels: self.channels.len(),
            connected: self.shared.command_up.load(Ordering::SeqCst) && self.pubsub_up,
            in_flight: self.pending.len() as u64,
            connect_failures: self.shared.connect_failures.load(Ordering::Relaxed),
            auth_failures: self.shared.auth_failures.load(Ordering::Relaxed),
            pubsub_dead_links: self.shared.dead_links.load(Ordering::Relaxed),
            unreadable_messages: self.shared.unreadable.load(Ordering::Relaxed),
            ..self.stats.clone()
        }
    }
}
