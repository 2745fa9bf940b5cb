//! Exactly-once delivery per node, the Redis broker's channel state machine (one for both
//! modes). It rests on one rule: a channel's messages are forwarded to the workers in id order
//! and never at or below `forwarded`, the highest id already forwarded. A channel becomes live
//! in three steps: SUBSCRIBE, its confirmation, then a sync read of the counter (or, after an
//! outage, a catch-up replay from `forwarded`) that sets `forwarded`; pub/sub messages that
//! arrive meanwhile wait, and those the sync already covered are dropped. A join with a replay
//! is answered only once every replayed message has also been forwarded live (pub/sub may lag
//! the history read), so no later live message repeats what it replayed.

use super::broker::{Pending, RedisBroker, JOIN_DEADLINE};
use super::protocol::{Incoming, Request};
use super::script;
use crate::broker::Replay;
use crate::broker::{Event, ReplayChunk, Req};
use redis::Value;
use std::rc::Rc;
use std::time::Instant;

/// Pub/sub messages held for a channel while it syncs (one Redis round trip).
const EARLY_MAX: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// SUBSCRIBE sent (or to be sent when pub/sub is back), not confirmed.
    Subscribing,
    /// Confirmed; the sync read is on its way.
    Syncing,
    Live,
}

pub(super) struct Chan {
    pub(super) state: State,
    /// Highest id forwarded to the workers (valid once it has been live).
    pub(super) forwarded: u64,
    pub(super) was_live: bool,
    /// Pub/sub messages that came while syncing, in order.
    pub(super) early: Vec<(u64, Rc<[u8]>)>,
    /// Ids of early messages dropped for room: (first, last).
    pub(super) early_lost: Option<(u64, u64)>,
    /// Changes when the channel is made again or its subscription lost, so a sync answer
    /// meant for an earlier one is not taken for this one.
    pub(super) generation: u64,
}

pub(super) enum Stage {
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

pub(super) struct Join {
    pub(super) req: Req,
    /// A join not answered by then is refused (a safety net: the subscriber comes back with
    /// its last id rather than wait forever).
    pub(super) deadline: Instant,
    pub(super) channels: Vec<String>,
    pub(super) after: Option<u64>,
    pub(super) budget: usize,
    pub(super) stage: Stage,
}

impl RedisBroker {
    /// Asks for `channel`'s subscription; counted until Redis confirms it.
    pub(super) fn subscribe(&mut self, channel: &str) {
        // A full queue: the channel stays Subscribing and is retried on the next tick.
        if self.request(Request::Subscribe(channel.to_string())) {
            *self.unconfirmed.entry(channel.to_string()).or_default() += 1;
        }
    }

    /// Reads `channel`'s counter (and, after it was live once, what it missed since
    /// `forwarded`): the step that makes a confirmed subscription live.
    pub(super) fn send_sync(&mut self, channel: String) {
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
        let (cap, max_age_ms) = self.bounds_of([&channel]);
        self.request(Request::Replay {
            tag,
            channels: vec![channel],
            after,
            cap,
            max_age_ms,
        });
    }

    /// Reads the history a join replays (its channels are live).
    pub(super) fn send_join_query(&mut self, id: u64) {
        let Some(join) = self.joins.get_mut(&id) else {
            return;
        };
        join.stage = Stage::Querying;
        let (channels, after) = (join.channels.clone(), join.after);
        let tag = self.tag(Pending::Join { join: id });
        let (cap, max_age_ms) = self.bounds_of(&channels);
        let cap = cap.clamp(1, 1000);
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

    /// The subscriber is refused (503 / 1013) and comes back with its last id.
    pub(super) fn refuse_join(&mut self, id: u64) {
        if let Some(join) = self.joins.remove(&id) {
            self.stats.join_unavailable += 1;
            self.ready.push(Event::JoinUnavailable { req: join.req });
        }
    }

    /// Whether every one of `channels` is live on this node.
    pub(super) fn all_live(&self, channels: &[String]) -> bool {
        channels
            .iter()
            .all(|c| self.channels.get(c).is_some_and(|c| c.state == State::Live))
    }

    /// Joins whose channels are all live now go to Redis.
    pub(super) fn start_ready_joins(&mut self) {
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
    pub(super) fn finish_forwarded_joins(&mut self) {
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

    /// A pub/sub message: forwarded when live and new, held while its channel syncs.
    pub(super) fn forward(&mut self, channel: &str, id: u64, payload: Rc<[u8]>) {
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

    /// One event from the connection threads.
    pub(super) fn on_incoming(&mut self, msg: Incoming) {
        match msg {
            Incoming::CommandUp => {
                if self.ever_up {
                    self.stats.reconnects += 1;
                }
                self.ever_up = true;
                // Redis may have lost this node's presence (restart, expiry while down).
                self.unreported = self.counts.clone();
                self.members_resync = true;
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
            Incoming::Control(message) => self.ready.push(Event::Control { message }),
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
            Incoming::Presence {
                channel,
                join,
                from,
                json,
            } => {
                // Our own events were delivered here directly.
                if from != self.node_id {
                    self.ready.push(Event::Presence {
                        join,
                        channel,
                        json,
                    });
                }
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
    pub(super) fn unsubscribed(&mut self, channel: &str) -> bool {
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
    pub(super) fn resend_stuck_syncs(&mut self) {
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

    /// A channel's sync read: it goes live at the counter read, after forwarding what it
    /// missed (catch-up after an outage) or telling its subscribers what cannot be replayed.
    pub(super) fn on_synced(&mut self, channel: String, after: Option<u64>, found: script::Found) {
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

    /// Redis answered a join's history read: it is answered once pub/sub has caught up with
    /// what it replays (or refused when the read failed).
    pub(super) fn on_join_found(&mut self, id: u64, value: Option<Value>) {
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
                let cap = self.bounds_of(&join.channels).0.clamp(1, 1000);
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

    /// Redis answered a channel's sync read (ignored when meant for an earlier subscription).
    pub(super) fn on_sync_found(
        &mut self,
        channel: String,
        generation: u64,
        after: Option<u64>,
        value: Option<Value>,
    ) {
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

    /// Makes `channels` live (subscribing those new here) and answers the join once they are.
    pub(super) fn open_join(
        &mut self,
        req: Req,
        channels: Vec<String>,
        after: Option<u64>,
        budget: usize,
    ) {
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

    /// Joins that waited past their deadline are refused.
    pub(super) fn refuse_late_joins(&mut self, now: Instant) {
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
    }

    /// Subscriptions a full queue kept from going out are sent again. Only those: one with a
    /// subscribe outstanding waits for its confirmation or its loss (`Lost`, `PubSubDown`,
    /// which reset the count). Sending it again would count a second confirmation that may
    /// never come (under Redis Cluster the first may sit queued for a dead master while the
    /// second goes to the promoted replica), and the channel would never go live.
    pub(super) fn resubscribe_stuck(&mut self) {
        if self.pubsub_up {
            let stuck: Vec<String> = self
                .channels
                .iter()
                .filter(|(n, c)| {
                    c.state == State::Subscribing && !self.unconfirmed.contains_key(*n)
                })
                .map(|(n, _)| n.clone())
                .collect();
            for ch in stuck {
                self.subscribe(&ch);
            }
        }
    }
}
