//! The in-process hub: message ids, per-channel history and resume, for one box. The master
//! reaches it through the broker seam (`crate::broker::memory`); a cluster uses another broker
//! (`crate::broker::redis`) behind the same seam.
//!
//! History is bounded three ways: per channel by count and age, and over all channels by bytes
//! (the oldest message anywhere goes first), so no publisher can grow the master without bound.
//! A resume is answered in chunks of a byte budget ([`ReplayChunk::more`]), so no replay makes
//! an ipc frame or a socket queue larger than one chunk.
//!
//! Ids come from one counter that starts at the hub's start time in microseconds (see
//! docs/PROTOCOL.md): monotonic per channel, and never reused across restarts, so a client that
//! resumes against a restarted server is told about a gap instead of being replayed the wrong
//! messages.

use crate::ipc::Replay;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One answer to a resume: gaps first, then messages in id order up to a byte budget.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplayChunk {
    pub items: Vec<Replay>,
    /// History holds more after the last message here: ask again from its id.
    pub more: bool,
}

/// What a hub must do for the gateway.
pub trait Hub {
    /// Stores a message and returns its id.
    fn publish(&mut self, channel: &str, payload: Rc<[u8]>, now: Instant) -> u64;
    /// What history still holds on `channels` after id `after`, preceded by a gap for each
    /// channel whose history no longer reaches back to `after`. Messages stop once their
    /// payloads pass `budget` bytes (at least one is always included); `more` says so.
    fn replay(
        &mut self,
        channels: &[String],
        after: u64,
        budget: usize,
        now: Instant,
    ) -> ReplayChunk;
    /// The newest id handed out (or the start point when none yet).
    fn current_id(&self) -> u64;
    /// Drops history older than the age bound; forgets channels that hold nothing.
    fn expire(&mut self, now: Instant);
    /// Channels currently known.
    fn channel_count(&self) -> usize;
    /// Bytes of history held (payloads plus a fixed cost per message).
    fn history_bytes(&self) -> usize;
}

/// Bookkeeping bytes charged per stored message beside its payload (the `Stored` entry, its
/// place in the eviction queue and the `Rc` header), so many tiny messages count too.
pub const STORED_OVERHEAD: usize = 64;

struct Stored {
    id: u64,
    at: Instant,
    payload: Rc<[u8]>,
}

struct Channel {
    history: VecDeque<Stored>,
    /// Highest id on this channel that history no longer holds (a resume from before it has a gap).
    forgotten_through: u64,
}

/// The in-process hub used by the master.
pub struct MemoryHub {
    channels: HashMap<Rc<str>, Channel>,
    /// Every stored message in publish order, for eviction by bytes. Entries whose message
    /// already left by count or age are skipped when they reach the front.
    order: VecDeque<(Rc<str>, u64)>,
    last_id: u64,
    /// Every id up to here may have been published on a channel we no longer track.
    forgotten_through: u64,
    max_count: usize,
    max_age: Duration,
    max_bytes: usize,
    bytes: usize,
    stored: usize,
}

impl MemoryHub {
    pub fn new(max_count: usize, max_age: Duration, max_bytes: usize) -> MemoryHub {
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        MemoryHub::starting_at(start, max_count, max_age, max_bytes)
    }

    /// A hub whose first id is `start` (tests use small numbers).
    pub fn starting_at(
        start: u64,
        max_count: usize,
        max_age: Duration,
        max_bytes: usize,
    ) -> MemoryHub {
        MemoryHub {
            channels: HashMap::new(),
            order: VecDeque::new(),
            last_id: start - 1,
            forgotten_through: start - 1,
            max_count: max_count.max(1),
            max_age,
            max_bytes,
            bytes: 0,
            stored: 0,
        }
    }

    /// Ids and history for a live upgrade: each message with its age, so the new process
    /// expires it when this one would have.
    pub fn export(&self, now: Instant) -> (u64, u64, Vec<c1m_proto::handover::ChannelHistory>) {
        let channels = self
            .channels
            .iter()
            .map(|(name, ch)| c1m_proto::handover::ChannelHistory {
                name: name.to_string(),
                forgotten_through: ch.forgotten_through,
                messages: ch
                    .history
                    .iter()
                    .map(|s| {
                        let age = now.saturating_duration_since(s.at).as_millis() as u64;
                        (s.id, age, s.payload.to_vec())
                    })
                    .collect(),
            })
            .collect();
        (self.last_id, self.forgotten_through, channels)
    }

    /// Rebuilds what [`MemoryHub::export`] gave (the new process of a live upgrade); ids go on
    /// from `last_id`, and the bounds of this hub apply from here on.
    pub fn import(
        &mut self,
        last_id: u64,
        forgotten_through: u64,
        channels: Vec<c1m_proto::handover::ChannelHistory>,
        now: Instant,
    ) {
        self.channels.clear();
        self.order.clear();
        self.bytes = 0;
        self.stored = 0;
        self.last_id = last_id;
        self.forgotten_through = forgotten_through;
        let mut order = Vec::new();
        for ch in channels {
            let name: Rc<str> = Rc::from(ch.name.as_str());
            let mut history = VecDeque::with_capacity(ch.messages.len());
            for (id, age_ms, payload) in ch.messages {
                self.bytes += MemoryHub::cost(&payload);
                self.stored += 1;
                order.push((id, name.clone()));
                let at = now
                    .checked_sub(Duration::from_millis(age_ms))
                    .unwrap_or(now);
                history.push_back(Stored {
                    id,
                    at,
                    payload: Rc::from(payload),
                });
            }
            self.channels.insert(
                name,
                Channel {
                    history,
                    forgotten_through: ch.forgotten_through,
                },
            );
        }
        order.sort_unstable_by_key(|(id, _)| *id);
        self.order = order.into_iter().map(|(id, name)| (name, id)).collect();
        self.evict_to_budget();
    }

    /// The newest id history holds on `channel`.
    pub fn last_id_of(&self, channel: &str) -> Option<u64> {
        self.channels.get(channel)?.history.back().map(|s| s.id)
    }

    /// New history bounds (SIGHUP); history over the new count or bytes is dropped now, the
    /// age bound applies at the next expiry pass.
    pub fn set_limits(&mut self, max_count: usize, max_age: Duration, max_bytes: usize) {
        self.max_count = max_count.max(1);
        self.max_age = max_age;
        self.max_bytes = max_bytes;
        for ch in self.channels.values_mut() {
            while ch.history.len() > self.max_count {
                MemoryHub::pop_oldest(ch, &mut self.bytes, &mut self.stored);
            }
        }
        self.evict_to_budget();
    }

    fn cost(payload: &[u8]) -> usize {
        payload.len() + STORED_OVERHEAD
    }

    /// Drops the oldest message of `ch`, remembering that ids up to it are gone.
    fn pop_oldest(ch: &mut Channel, bytes: &mut usize, stored: &mut usize) {
        if let Some(old) = ch.history.pop_front() {
            ch.forgotten_through = old.id;
            *bytes -= MemoryHub::cost(&old.payload);
            *stored -= 1;
        }
    }

    fn expire_channel(
        ch: &mut Channel,
        now: Instant,
        max_age: Duration,
        bytes: &mut usize,
        stored: &mut usize,
    ) {
        while let Some(front) = ch.history.front() {
            if now.duration_since(front.at) < max_age {
                break;
            }
            MemoryHub::pop_oldest(ch, bytes, stored);
        }
    }

    /// Evicts the oldest messages of any channel until history fits its byte bound.
    fn evict_to_budget(&mut self) {
        while self.bytes > self.max_bytes {
            let Some((name, id)) = self.order.pop_front() else {
                break;
            };
            if let Some(ch) = self.channels.get_mut(&name) {
                if ch.history.front().is_some_and(|s| s.id == id) {
                    MemoryHub::pop_oldest(ch, &mut self.bytes, &mut self.stored);
                }
            }
        }
        // Entries of messages that left by count or age would otherwise pile up in `order`.
        if self.order.len() > 2 * self.stored + 1024 {
            let channels = &self.channels;
            self.order.retain(|(name, id)| {
                channels
                    .get(name)
                    .is_some_and(|ch| ch.history.front().is_some_and(|s| s.id <= *id))
            });
        }
    }
}

impl Hub for MemoryHub {
    fn publish(&mut self, channel: &str, payload: Rc<[u8]>, now: Instant) -> u64 {
        self.last_id += 1;
        let id = self.last_id;
        let forgotten = self.forgotten_through;
        let name: Rc<str> = match self.channels.get_key_value(channel) {
            Some((name, _)) => name.clone(),
            None => Rc::from(channel),
        };
        let ch = self
            .channels
            .entry(name.clone())
            .or_insert_with(|| Channel {
                history: VecDeque::new(),
                forgotten_through: forgotten,
            });
        if ch.history.len() == self.max_count {
            MemoryHub::pop_oldest(ch, &mut self.bytes, &mut self.stored);
        }
        self.bytes += MemoryHub::cost(&payload);
        self.stored += 1;
        ch.history.push_back(Stored {
            id,
            at: now,
            payload,
        });
        self.order.push_back((name, id));
        self.evict_to_budget();
        id
    }

    fn replay(
        &mut self,
        channels: &[String],
        after: u64,
        budget: usize,
        now: Instant,
    ) -> ReplayChunk {
        let mut out = Vec::new();
        let mut messages: Vec<(u64, &str, &Rc<[u8]>)> = Vec::new();
        for name in channels {
            let forgotten = match self.channels.get_mut(name.as_str()) {
                Some(ch) => {
                    MemoryHub::expire_channel(
                        ch,
                        now,
                        self.max_age,
                        &mut self.bytes,
                        &mut self.stored,
                    );
                    ch.forgotten_through
                }
                None => self.forgotten_through,
            };
            if after < forgotten {
                out.push(Replay::Gap {
                    channel: name.clone(),
                    after,
                    through: forgotten,
                });
            } else if after > self.last_id {
                // An id this hub never issued (clock stepped back, or another server's id):
                // we cannot know what was missed, so say so rather than replay nothing silently.
                out.push(Replay::Gap {
                    channel: name.clone(),
                    after,
                    through: self.last_id,
                });
            }
        }
        for name in channels {
            if let Some(ch) = self.channels.get(name.as_str()) {
                let start = ch.history.partition_point(|s| s.id <= after);
                messages.extend(
                    ch.history
                        .range(start..)
                        .map(|s| (s.id, name.as_str(), &s.payload)),
                );
            }
        }
        // Several channels interleave by id, the order they were published in.
        messages.sort_unstable_by_key(|m| m.0);
        let total = messages.len();
        let mut spent = 0;
        let mut taken = 0;
        for (id, channel, payload) in messages {
            if taken > 0 && spent + payload.len() > budget {
                break;
            }
            spent += payload.len();
            taken += 1;
            out.push(Replay::Message {
                channel: channel.to_string(),
                id,
                payload: payload.to_vec(),
            });
        }
        ReplayChunk {
            items: out,
            more: taken < total,
        }
    }

    fn current_id(&self) -> u64 {
        self.last_id
    }

    fn expire(&mut self, now: Instant) {
        let max_age = self.max_age;
        let mut forgotten = self.forgotten_through;
        let (bytes, stored) = (&mut self.bytes, &mut self.stored);
        self.channels.retain(|_, ch| {
            MemoryHub::expire_channel(ch, now, max_age, bytes, stored);
            if ch.history.is_empty() {
                forgotten = forgotten.max(ch.forgotten_through);
                return false;
            }
            true
        });
        self.forgotten_through = forgotten;
    }

    fn channel_count(&self) -> usize {
        self.channels.len()
    }

    fn history_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: usize = usize::MAX;

    #[test]
    fn export_and_import_keep_ids_history_and_gaps() {
        let now = Instant::now();
        let mut old = hub(2);
        for p in ["a1", "a2", "a3"] {
            old.publish("a", Rc::from(p.as_bytes()), now);
        }
        old.publish("b", Rc::from(&b"b1"[..]), now);
        let (last, forgotten, channels) = old.export(now);
        let mut new = hub(2);
        new.import(last, forgotten, channels, now);
        assert_eq!(new.current_id(), old.current_id());
        let names = vec!["a".to_string(), "b".to_string()];
        assert_eq!(
            new.replay(&names, 99, ALL, now),
            old.replay(&names, 99, ALL, now)
        );
        assert_eq!(new.history_bytes(), old.history_bytes());
        // Ids continue where the old hub stopped.
        assert_eq!(new.publish("a", Rc::from(&b"a4"[..]), now), last + 1);
    }

    fn hub(count: usize) -> MemoryHub {
        MemoryHub::starting_at(100, count, Duration::from_secs(60), usize::MAX)
    }

    fn ids(r: &[Replay]) -> Vec<u64> {
        r.iter()
            .filter_map(|x| {
                if let Replay::Message { id, .. } = x {
                    Some(*id)
                } else {
                    None
                }
            })
            .collect()
    }

    #[test]
    fn exact_replay_without_gap() {
        let mut h = hub(10);
        let now = Instant::now();
        let a1 = h.publish("a", b"1".to_vec().into(), now);
        let b1 = h.publish("b", b"x".to_vec().into(), now);
        let a2 = h.publish("a", b"2".to_vec().into(), now);
        assert_eq!((a1, b1, a2), (100, 101, 102));
        let r = h.replay(&["a".into()], a1, ALL, now).items;
        assert_eq!(
            r,
            vec![Replay::Message {
                channel: "a".into(),
                id: 102,
                payload: b"2".to_vec()
            }]
        );
        // Several channels interleave by id.
        assert_eq!(
            ids(&h.replay(&["a".into(), "b".into()], 99, ALL, now).items),
            vec![100, 101, 102]
        );
        assert!(h.replay(&["a".into()], a2, ALL, now).items.is_empty());
    }

    #[test]
    fn set_limits_evicts_now_and_keeps_the_byte_count_right() {
        let mut h = hub(10);
        let now = Instant::now();
        for i in 0..6u8 {
            h.publish("a", vec![i; 100].into(), now);
        }
        h.set_limits(2, Duration::from_secs(60), usize::MAX);
        assert_eq!(
            ids(&h.replay(&["a".into()], 99, ALL, now).items),
            vec![104, 105]
        );
        assert_eq!(h.history_bytes(), 2 * MemoryHub::cost(&[0; 100]));
        // A byte budget of one message keeps the newest only.
        h.set_limits(2, Duration::from_secs(60), MemoryHub::cost(&[0; 100]));
        assert_eq!(ids(&h.replay(&["a".into()], 99, ALL, now).items), vec![105]);
        assert_eq!(h.history_bytes(), MemoryHub::cost(&[0; 100]));
    }

    #[test]
    fn gap_when_history_evicted_by_count() {
        let mut h = hub(2);
        let now = Instant::now();
        for i in 0..5 {
            h.publish("a", vec![i].into(), now);
        }
        let r = h.replay(&["a".into()], 100, ALL, now).items;
        assert_eq!(
            r[0],
            Replay::Gap {
                channel: "a".into(),
                after: 100,
                through: 102
            }
        );
        assert_eq!(ids(&r), vec![103, 104]);
    }

    #[test]
    fn gap_when_history_expired_by_age_and_after_restart() {
        let mut h = MemoryHub::starting_at(100, 10, Duration::from_secs(1), usize::MAX);
        let t0 = Instant::now();
        h.publish("a", b"1".to_vec().into(), t0);
        let later = t0 + Duration::from_secs(2);
        let r = h.replay(&["a".into()], 99, ALL, later).items;
        assert_eq!(
            r,
            vec![Replay::Gap {
                channel: "a".into(),
                after: 99,
                through: 100
            }]
        );
        h.expire(later);
        assert_eq!(h.channel_count(), 0);
        // A forgotten channel still reports the gap.
        assert_eq!(
            h.replay(&["a".into()], 99, ALL, later).items[0],
            Replay::Gap {
                channel: "a".into(),
                after: 99,
                through: 100
            }
        );
        // A fresh hub (a restart) reports a gap for any id from before its start.
        let mut fresh = MemoryHub::starting_at(500, 10, Duration::from_secs(1), usize::MAX);
        assert_eq!(
            fresh.replay(&["a".into()], 120, ALL, later).items[0],
            Replay::Gap {
                channel: "a".into(),
                after: 120,
                through: 499
            }
        );
        // And for an id it never issued.
        assert!(matches!(
            fresh.replay(&["a".into()], 900, ALL, later).items[0],
            Replay::Gap { .. }
        ));
    }

    #[test]
    fn replay_comes_in_chunks_of_the_budget() {
        let mut h = hub(100);
        let now = Instant::now();
        for i in 0..10u8 {
            h.publish("a", vec![i; 100].into(), now);
        }
        // 250 bytes of budget: two 100-byte messages, then more.
        let first = h.replay(&["a".into()], 99, 250, now);
        assert_eq!(ids(&first.items), vec![100, 101]);
        assert!(first.more);
        // Continuing from the last id sent walks the rest without gaps or repeats.
        let mut after = 101;
        let mut seen = ids(&first.items);
        loop {
            let chunk = h.replay(&["a".into()], after, 250, now);
            assert!(chunk
                .items
                .iter()
                .all(|r| matches!(r, Replay::Message { .. })));
            seen.extend(ids(&chunk.items));
            after = *seen.last().unwrap();
            if !chunk.more {
                break;
            }
        }
        assert_eq!(seen, (100..110).collect::<Vec<_>>());
        // A budget smaller than one message still makes progress.
        let tiny = h.replay(&["a".into()], 99, 1, now);
        assert_eq!(ids(&tiny.items), vec![100]);
        assert!(tiny.more);
    }

    #[test]
    fn history_is_bounded_in_bytes_across_channels() {
        let per = 1000 + STORED_OVERHEAD;
        let mut h = MemoryHub::starting_at(100, 1000, Duration::from_secs(60), 5 * per);
        let now = Instant::now();
        h.publish("old", vec![0; 1000].into(), now); // id 100
        for _ in 0..6 {
            h.publish("busy", vec![1; 1000].into(), now); // ids 101..=106
        }
        assert!(h.history_bytes() <= 5 * per, "{}", h.history_bytes());
        // The oldest message anywhere went first ("old"), then the oldest of "busy".
        assert_eq!(
            h.replay(&["old".into()], 99, ALL, now).items[0],
            Replay::Gap {
                channel: "old".into(),
                after: 99,
                through: 100
            }
        );
        let busy = h.replay(&["busy".into()], 100, ALL, now).items;
        assert_eq!(
            busy[0],
            Replay::Gap {
                channel: "busy".into(),
                after: 100,
                through: 101
            }
        );
        assert_eq!(ids(&busy), vec![102, 103, 104, 105, 106]);
        // Churn through count eviction does not let the eviction queue grow without bound.
        let mut small = MemoryHub::starting_at(1, 2, Duration::from_secs(60), usize::MAX);
        for _ in 0..100_000 {
            small.publish("c", vec![0; 1].into(), now);
        }
        assert!(
            small.order.len() <= 2 * 2 + 1024 + 1,
            "{}",
            small.order.len()
        );
    }
}
