//! The in-node hub's traffic: frames from the workers (publishes, joins, leaves, counts,
//! stats, queries) in, and the broker's events (acks, join answers, messages, gaps, channel
//! info) out to the workers that asked or that have subscribers on the channel. A worker
//! that is behind is not read until it drains, and publishes it would have to deliver are
//! refused before they get an id.

use super::{api, status, Master};
use crate::broker::{Event, Req};
use crate::ipc::{ToMaster, ToWorker};
use mio::Token;
use std::rc::Rc;
use std::time::Instant;

/// Payload bytes of history in one join answer; a longer replay continues in further chunks.
/// Small enough for any socket queue and ipc frame, large enough to keep a catch-up fast.
pub const REPLAY_CHUNK: usize = 256 * 1024;
/// What a publisher pushed back because a worker is behind is told to wait.
const RETRY_AFTER_S: u64 = 1;

impl Master {
    /// Worker `i`'s link is ready: `writable` flushes what is queued; `readable` reads its
    /// frames (a writable-only edge, raised each time the worker drained some of ours, reads
    /// nothing: it would only find WouldBlock).
    pub(super) fn on_worker_event(&mut self, i: usize, readable: bool, writable: bool) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        let Some(link) = slot.link.as_mut() else {
            return;
        };
        if writable && link.flush().is_err() {
            return self.worker_gone(i);
        }
        if !readable {
            return;
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
    pub(super) fn resume_paused_reads(&mut self) {
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.reading_paused && slot.link.as_ref().is_some_and(|l| !l.is_congested()) {
                self.on_worker_event(i, true, false);
            }
        }
    }

    /// The loop's flush phase: every frame queued this turn goes out, one write per link, and
    /// each link watches writable edges only while some of its bytes wait.
    pub(super) fn flush_links(&mut self) {
        for i in 0..self.slots.len() {
            let Some(link) = self.slots[i].link.as_mut() else {
                continue;
            };
            if let Err(e) = link.flush_and_watch(self.poll.registry(), Token(i)) {
                self.link_failed(i, &e);
            }
        }
    }

    /// Worker `i`'s link broke (or its worker stopped reading): the worker is restarted.
    fn link_failed(&mut self, i: usize, e: &std::io::Error) {
        tracing::error!(worker = i, error = %e, "worker link failed; restarting the worker");
        self.worker_gone(i);
    }

    pub(super) fn send(&mut self, i: usize, frame: Vec<u8>) {
        let Some(link) = self.slots[i].link.as_mut() else {
            return;
        };
        if let Err(e) = link.send(frame) {
            self.link_failed(i, &e);
        }
    }

    /// Queues `frame` on the link of every worker with subscribers on `channel`: one encoded
    /// frame copied into each queue. A link that fails restarts its worker after the loop
    /// (the interest map cannot change under it).
    pub(super) fn send_to_interested(&mut self, channel: &str, frame: &[u8]) {
        let Some(targets) = self.interest.get(channel) else {
            return;
        };
        let mut failed = Vec::new();
        for &w in targets {
            let Some(link) = self.slots[w].link.as_mut() else {
                continue;
            };
            if let Err(e) = link.send_slice(frame) {
                failed.push((w, e));
            }
        }
        for (w, e) in failed {
            self.link_failed(w, &e);
        }
    }

    /// A publish from worker `i` (with its `Idempotency-Key`, if any).
    pub(super) fn on_publish(
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

    pub(super) fn on_frame(&mut self, i: usize, frame: ToMaster) {
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
                self.steer_reported(i);
            }
            ToMaster::SteerFull { cpu, conns } => self.on_steer_full(i, cpu, conns),
            ToMaster::Listeners { fds } => self.slots[i].listener_fds = fds,
            ToMaster::Io(io) => self.slots[i].io = Some(io),
            ToMaster::Lifecycle { reports } => {
                if let Some(w) = &mut self.webhooks {
                    w.on_reports(i, reports);
                }
            }
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
            ToMaster::Presence { changes } => self.on_presence_changes(i, changes),
            ToMaster::PresenceQuery { req, channel } => self.on_presence_query(i, req, channel),
            frame @ (ToMaster::HandOverPrepared
            | ToMaster::HandOverSent { .. }
            | ToMaster::HandOverFailed { .. }) => self.on_handover_frame(i, frame),
            ToMaster::Api {
                req,
                call,
                body,
                ndjson,
            } => self.on_api(i, req, &call, &body, ndjson),
            ToMaster::ApiRefused { call } => self.api.count(&call, super::api::Outcome::Error),
            ToMaster::ApiActed { op, count } => self.api_acted(i, op, count),
            ToMaster::StatusQuery { req, metrics } => {
                let report = status::Report::gather(self);
                let body = if metrics {
                    report.prometheus() + &self.api.prometheus()
                } else {
                    report.json()
                };
                self.send(i, ToWorker::Status { req, body, metrics }.encode());
            }
            ToMaster::HealthQuery { req } => {
                let problem = self.health_problem();
                self.send(i, ToWorker::Health { req, problem }.encode());
            }
        }
    }

    pub(super) fn drop_interest(&mut self, worker: usize, channel: Option<&str>) {
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

    /// Hands the broker's ready events to the workers: answers to the worker that asked,
    /// messages and gaps to every worker with subscribers on the channel.
    pub(super) fn pump(&mut self) {
        let mut events = std::mem::take(&mut self.events);
        self.broker.drain(&mut events);
        for event in events.drain(..) {
            match event {
                // The publisher's answer comes before the message: if its worker also has
                // subscribers, the ack would otherwise wait behind that worker's whole local
                // fan-out. (Only join answers must stay ordered after earlier messages.)
                Event::Published { req, id, .. } if req.worker == api::API_WORKER => {
                    self.published += 1;
                    self.api_published(req.token, Ok(id));
                }
                Event::PublishUnavailable { req, cause } if req.worker == api::API_WORKER => {
                    self.publish_refused += 1;
                    self.api_published(req.token, Err(format!("not published: {cause}")));
                }
                Event::History { req, page } => self.api_history(req.token, page),
                Event::PresenceMembers {
                    req,
                    channel,
                    members,
                } if req.worker == api::API_WORKER => {
                    self.api_presence(req.token, channel, members)
                }
                Event::Control { message } => self.api_control(&message),
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
                    // Publish-to-write latency starts here: when this node's master hands the
                    // message out (for the in-process hub, right after the publish arrived).
                    let now_us = c1m_sys::shm::monotonic_micros();
                    let frame = ToWorker::message_frame(&channel, id, &payload, now_us);
                    self.send_to_interested(&channel, &frame);
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
                Event::Presence {
                    join,
                    channel,
                    json,
                } => self.send_presence_events(vec![crate::ipc::PresenceEvent {
                    join,
                    channel,
                    json,
                }]),
                Event::PresenceMembers {
                    req,
                    channel,
                    members,
                } => self.answer_cluster_presence(req, channel, members),
                Event::Gap {
                    channel,
                    after,
                    through,
                } => {
                    if !self.interest.contains_key(&channel) {
                        continue;
                    }
                    let frame = ToWorker::Gap {
                        channel: channel.clone(),
                        after,
                        through,
                    }
                    .encode();
                    self.send_to_interested(&channel, &frame);
                }
            }
        }
        self.events = events;
    }

    pub(super) fn local_count(&self, channel: &str) -> u64 {
        self.counts
            .get(channel)
            .map_or(0, |ws| ws.iter().map(|&(_, n)| u64::from(n)).sum())
    }

    /// Records worker `i`'s subscriber count on `channel` and tells the broker this node's.
    pub(super) fn set_worker_count(&mut self, i: usize, channel: String, n: u32) {
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
}
