//! The default broker: the in-process [`MemoryHub`], answering every request before the call
//! returns. One box needs nothing else; its events are exactly what the master did inline
//! before the broker seam existed (ack first, then the message), so its figures stay the same.

use super::idempotency::Keys;
use super::{Broker, BrokerStats, Event, Limits, Req, IDEMPOTENCY_MAX_KEYS, IDEMPOTENCY_TTL};
use crate::hub::MemoryHub;
use std::rc::Rc;
use std::time::Instant;

pub struct MemoryBroker {
    hub: MemoryHub,
    ready: Vec<Event>,
    keys: Keys,
    idempotent_replays: u64,
}

impl MemoryBroker {
    pub fn new(limits: Limits) -> MemoryBroker {
        let global = limits.namespaces.global();
        let mut hub = MemoryHub::new(global.history_size, global.history_age, limits.max_bytes);
        hub.set_namespaces(limits.namespaces, limits.max_bytes);
        MemoryBroker {
            hub,
            ready: Vec::new(),
            keys: Keys::new(IDEMPOTENCY_MAX_KEYS, IDEMPOTENCY_TTL),
            idempotent_replays: 0,
        }
    }
}

impl Broker for MemoryBroker {
    fn publish(&mut self, req: Req, channel: String, payload: Rc<[u8]>, key: Option<String>) {
        let now = Instant::now();
        if let Some(key) = &key {
            if let Some(id) = self.keys.get(&channel, key, now) {
                // A retry: the first publish's id, and nothing stored or delivered again.
                self.idempotent_replays += 1;
                return self.ready.push(Event::Published { req, channel, id });
            }
        }
        let id = self.hub.publish(&channel, payload.clone(), now);
        if let Some(key) = &key {
            self.keys.insert(&channel, key, id, now);
        }
        self.ready.push(Event::Published {
            req,
            channel: channel.clone(),
            id,
        });
        self.ready.push(Event::Message {
            channel,
            id,
            payload,
        });
    }

    fn join(&mut self, req: Req, channels: Vec<String>, after: Option<u64>, budget: usize) {
        let chunk = match after {
            Some(after) => self.hub.replay(&channels, after, budget, Instant::now()),
            None => Default::default(),
        };
        self.ready.push(Event::Joined {
            req,
            current_id: self.hub.current_id(),
            channels,
            chunk,
        });
    }

    fn leave(&mut self, _channel: &str) {}

    fn drain(&mut self, out: &mut Vec<Event>) {
        out.append(&mut self.ready);
    }

    fn tick(&mut self, now: Instant) {
        self.hub.expire(now);
        self.keys.expire(now);
    }

    fn set_limits(&mut self, limits: Limits) {
        self.hub.set_namespaces(limits.namespaces, limits.max_bytes);
    }

    fn set_count(&mut self, _channel: &str, _n: u64) {}

    fn channel_info(&mut self, req: Req, channel: String, local: u64) {
        let last_id = self.hub.last_id_of(&channel);
        self.ready.push(Event::ChannelInfo {
            req,
            channel,
            subscribers: local,
            last_id,
            nodes: 1,
            complete: true,
        });
    }

    fn history(&mut self, req: Req, channel: String, since: Option<u64>, limit: usize) {
        let chunk = self
            .hub
            .replay(&[channel], since.unwrap_or(0), usize::MAX, Instant::now());
        let page = super::HistoryPage::from_replay(chunk.items, since, limit);
        self.ready.push(Event::History {
            req,
            page: Ok(page),
        });
    }

    fn export_history(&self, now: Instant) -> Option<super::HistoryExport> {
        Some(self.hub.export(now))
    }

    fn import_history(&mut self, history: super::HistoryExport, now: Instant) -> bool {
        self.hub.import(history, now);
        true
    }

    fn stats(&self) -> BrokerStats {
        BrokerStats {
            kind: "memory",
            channels: self.hub.channel_count(),
            history_bytes: self.hub.history_bytes(),
            history_freed_bytes: self.hub.freed_bytes(),
            connected: true,
            idempotent_replays: self.idempotent_replays,
            ..Default::default()
        }
    }
}
