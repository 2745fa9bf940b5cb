//! The in-process hub: message ids, per-channel history and resume, for one box. It is a
//! plain store with synchronous methods, not a seam: the one seam is the broker's (`Broker`),
//! which the memory broker implements on top of this store and the Redis broker implements on
//! Redis (see the broker module's doc for why there is no second, hub-level trait).
//!
//! History is bounded per channel by count, age and bytes (each from the channel's namespace,
//! looked up when the channel is made), and over all channels by bytes
//! (the oldest message anywhere goes first), so no publisher can grow the master without bound.
//! The byte bound counts what a channel itself costs too ([`CHANNEL_OVERHEAD`]), so many tiny
//! channels are bounded as well as a few large ones.
//!
//! A gap is reported only for messages the hub had and no longer holds (`gap_through`, the
//! one rule every broker uses). A channel that lost all its history (by age, or to the byte
//! bound) is freed at once, name and all: what it lost stays behind as a 16-byte record keyed
//! by a 64-bit hash of its name ([`RECORD_COST`] charged) until the byte bound needs the
//! room; then what it lost is folded into one of [`LOST_BUCKETS`] buckets by the same hash, so
//! a channel the hub no longer tracks is told about a gap when its bucket says it may have
//! lost something (never a silent loss; rarely a false gap, and only under memory pressure or
//! when two names share a hash).
//! A resume is answered in chunks of a byte budget (`ReplayChunk::more`), so no replay makes
//! an ipc frame or a socket queue larger than one chunk.
//!
//! Ids come from one counter that starts at the hub's start time in microseconds (see
//! docs/PROTOCOL.md): monotonic per channel, and never reused across restarts, so a client that
//! resumes against a restarted server is told about a gap instead of being replayed the wrong
//! messages.
//!
//! # What one channel costs in the master
//!
//! (64-bit build; measured by `tests::measure_channel_cost`, and charged against
//! `--history-max-bytes` by the same constants.)
//! - **With history** of N messages of S bytes: `CHANNEL_OVERHEAD + name + N × (S +
//!   STORED_OVERHEAD)`, i.e. 224 + name + N × (S + 64) bytes (the map entry, the name's `Rc`,
//!   the ring, each message's `Rc` and its place in the eviction queue).
//! - **Without history** (every message expired or evicted): the channel is freed; a record
//!   of what it lost costs [`RECORD_COST`] (64 B: a hash-map slot and an eviction-queue entry),
//!   whatever its name, until the byte bound folds it into its bucket (then 0).
//! - **Never published**: nothing here, whoever subscribes.
//! - **Subscribers** cost the master nothing in this store; the master's routing keeps, per
//!   channel with subscribers on this node, the workers that have them and their counts (two
//!   map entries of about 120 B each with the name), freed when the last subscriber leaves.
//!   Each worker's own cost per channel is in the worker's `channels` module.
//!
//! Maps and queues give memory back: once they hold under a quarter of their capacity (after
//! a mass expiry, say), the expiry pass shrinks them, so a million channels that came and went
//! do not keep a million channels' tables.

use crate::broker::Replay;
use crate::broker::{gap_through, HistoryExport, ReplayChunk};
use crate::config::Namespaces;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bookkeeping bytes charged per stored message beside its payload (the `Stored` entry, its
/// place in the eviction queue and the `Rc` header), so many tiny messages count too.
pub const STORED_OVERHEAD: usize = 64;

/// Bytes charged per channel beside its name: the map entry (key, value, control byte, at the
/// map's load factor), the name's `Rc` allocation and its malloc rounding, the history buffer
/// of one message, its place in the eviction queue. Measured, not computed:
/// `hub::tests::measure_channel_cost` (run with `--ignored --nocapture`) creates 230,000
/// channels of one 1-byte message with 12-byte names, just past a growth of the map, and reads
/// the process's RSS growth: 282 B per channel, of which the message's own charge is 65 B and
/// the name 12 B, so 205 B are the channel's (140 B just before the growth); rounded up.
pub const CHANNEL_OVERHEAD: usize = 224;

/// Bytes charged per record of a freed channel's loss: its slot in the record map (hash and
/// id, 16 B, plus a control byte, at a load factor as low as 7/16 just after a growth) and its
/// entry in the eviction queue (16 B, up to twice that in the queue's slack).
pub const RECORD_COST: usize = 64;

/// How many buckets remember what forgotten channels lost (8 bytes each).
pub const LOST_BUCKETS: usize = 4096;

/// A record's name in a live upgrade's export: the record has no name any more, only its
/// hash, written in hex after this prefix. No channel name can hold a NUL, so it names no
/// channel; an older binary that takes it keeps it as a channel that lost everything, which
/// nothing can publish to or resume.
const RECORD_EXPORT_PREFIX: &str = "\0record:";

/// A 64-bit FNV-1a hash of a channel name, stable across builds so a live upgrade keeps what
/// records and buckets mean.
fn name_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The bucket of a channel name's hash.
fn lost_bucket_of(hash: u64) -> usize {
    (hash % LOST_BUCKETS as u64) as usize
}

/// The bucket of a channel name.
#[cfg(test)]
fn lost_bucket(name: &str) -> usize {
    lost_bucket_of(name_hash(name))
}

/// Gives a map's memory back once it holds under a quarter of its capacity (the floor keeps
/// small maps from being resized back and forth).
fn shrink_map<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 4 * map.len().max(1024) {
        map.shrink_to(2 * map.len());
    }
}

fn shrink_queue<T>(queue: &mut VecDeque<T>) {
    if queue.capacity() > 4 * queue.len().max(1024) {
        queue.shrink_to(2 * queue.len());
    }
}

struct Stored {
    id: u64,
    at: Instant,
    payload: Rc<[u8]>,
}

/// A channel with history (one whose history empties is freed and leaves a record).
struct Channel {
    history: VecDeque<Stored>,
    /// Highest id of this channel that history no longer holds (0: none lost).
    lost_through: u64,
    /// Bytes of this channel's messages (each [`MemoryHub::cost`]), for its namespace's
    /// per-channel byte bound.
    bytes: usize,
    /// The channel's namespace ([`Namespaces::index_of`]), looked up once when the channel is
    /// made (and again when the namespaces change), not per message.
    ns: u16,
}

/// The byte count and the records of freed channels.
#[derive(Default)]
struct Books {
    bytes: usize,
    /// Bytes freed so far (as charged), for the master's trim of the heap.
    freed: u64,
    stored: usize,
    /// Name hash → highest id lost, for channels freed when their history emptied.
    records: HashMap<u64, u64>,
    /// (name hash, its lost-through) as each record was made, oldest first; an entry whose
    /// record was taken back by a publish, or replaced, is skipped when it reaches the front.
    emptied: VecDeque<(u64, u64)>,
}

impl Books {
    /// Frees-side bookkeeping of a channel whose history emptied: its cost goes, a record of
    /// what it lost comes.
    fn forget(&mut self, name: &str, lost: u64) {
        self.bytes -= MemoryHub::channel_cost(name);
        self.freed += MemoryHub::channel_cost(name) as u64;
        let hash = name_hash(name);
        let slot = self.records.entry(hash).or_insert_with(|| {
            self.bytes += RECORD_COST;
            0
        });
        *slot = (*slot).max(lost);
        self.emptied.push_back((hash, *slot));
    }

    /// Takes back the record of a channel that is made again: what it had lost.
    fn take_record(&mut self, name: &str) -> Option<u64> {
        let lost = self.records.remove(&name_hash(name))?;
        self.bytes -= RECORD_COST;
        Some(lost)
    }
}
/// The in-process hub used by the master.
pub struct MemoryHub {
    /// Channels with history; a channel whose history empties is removed (a record stays).
    channels: HashMap<Rc<str>, Channel>,
    /// Every stored message in publish order, for eviction by bytes. Entries whose message
    /// already left by count or age are skipped when they reach the front.
    order: VecDeque<(Rc<str>, u64)>,
    books: Books,
    /// What channels no longer tracked lost, by [`lost_bucket_of`] of their name's hash.
    lost: Box<[u64]>,
    last_id: u64,
    /// The first id of this hub (kept across live upgrades).
    origin: u64,
    /// Per-channel count, age and byte bounds, by namespace.
    ns: Arc<Namespaces>,
    /// The byte bound over all channels.
    max_bytes: usize,
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
        let start = start.max(1);
        MemoryHub {
            channels: HashMap::new(),
            order: VecDeque::new(),
            books: Books::default(),
            lost: vec![0; LOST_BUCKETS].into_boxed_slice(),
            last_id: start - 1,
            origin: start,
            ns: Arc::new(Namespaces::uniform(max_count, max_age, max_bytes)),
            max_bytes,
        }
    }

    /// Ids and history for a live upgrade: each message with its age, so the new process
    /// expires it when this one would have. Records go as channels without messages, named
    /// by [`RECORD_EXPORT_PREFIX`] and their hash.
    pub fn export(&self, now: Instant) -> HistoryExport {
        let mut channels: Vec<_> = self
            .channels
            .iter()
            .map(|(name, ch)| c1m_proto::handover::ChannelHistory {
                name: name.to_string(),
                forgotten_through: ch.lost_through,
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
        channels.extend(self.books.records.iter().map(|(hash, &lost)| {
            c1m_proto::handover::ChannelHistory {
                name: format!("{RECORD_EXPORT_PREFIX}{hash:016x}"),
                forgotten_through: lost,
                messages: Vec::new(),
            }
        }));
        let lost_buckets = self
            .lost
            .iter()
            .enumerate()
            .filter(|(_, &id)| id > 0)
            .map(|(i, &id)| (i as u32, id))
            .collect();
        HistoryExport {
            last_id: self.last_id,
            forgotten_through: self.origin - 1,
            channels,
            lost_buckets,
        }
    }

    /// Rebuilds what [`MemoryHub::export`] gave (the new process of a live upgrade); ids go on
    /// from `last_id`, and the bounds of this hub apply from here on. A channel without
    /// messages (a record, or an older binary's channel that lost everything) becomes a record.
    pub fn import(&mut self, history: HistoryExport, now: Instant) {
        self.channels.clear();
        self.order.clear();
        self.books = Books::default();
        self.last_id = history.last_id;
        self.origin = history.forgotten_through.saturating_add(1);
        self.lost.fill(0);
        for (bucket, id) in history.lost_buckets {
            if let Some(slot) = self.lost.get_mut(bucket as usize) {
                *slot = id;
            }
        }
        let mut order = Vec::new();
        let mut emptied = Vec::new();
        for ch in history.channels {
            if ch.messages.is_empty() {
                let hash = ch
                    .name
                    .strip_prefix(RECORD_EXPORT_PREFIX)
                    .and_then(|hex| u64::from_str_radix(hex, 16).ok())
                    .unwrap_or_else(|| name_hash(&ch.name));
                let slot = self.books.records.entry(hash).or_insert_with(|| {
                    self.books.bytes += RECORD_COST;
                    0
                });
                *slot = (*slot).max(ch.forgotten_through);
                emptied.push((*slot, hash));
                continue;
            }
            let name: Rc<str> = Rc::from(ch.name.as_str());
            self.books.bytes += MemoryHub::channel_cost(&name);
            let mut history = VecDeque::with_capacity(ch.messages.len());
            let mut bytes = 0;
            for (id, age_ms, payload) in ch.messages {
                bytes += MemoryHub::cost(&payload);
                self.books.bytes += MemoryHub::cost(&payload);
                self.books.stored += 1;
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
            let ns = self.ns.index_of(&name);
            self.channels.insert(
                name,
                Channel {
                    history,
                    lost_through: ch.forgotten_through,
                    bytes,
                    ns,
                },
            );
        }
        order.sort_unstable_by_key(|(id, _)| *id);
        self.order = order.into_iter().map(|(id, name)| (name, id)).collect();
        emptied.sort_unstable_by_key(|(id, _)| *id);
        self.books.emptied = emptied.into_iter().map(|(id, hash)| (hash, id)).collect();
        self.evict_to_budget();
    }

    /// The newest id history holds on `channel`.
    pub fn last_id_of(&self, channel: &str) -> Option<u64> {
        self.channels.get(channel)?.history.back().map(|s| s.id)
    }

    /// New history bounds, the same for every channel (tests).
    #[cfg(test)]
    pub fn set_limits(&mut self, max_count: usize, max_age: Duration, max_bytes: usize) {
        let ns = Namespaces::uniform(max_count, max_age, max_bytes);
        self.set_namespaces(Arc::new(ns), max_bytes);
    }

    /// New history bounds (SIGHUP): each channel's namespace is looked up again; history over
    /// a channel's new count or bytes, or over the new total, is dropped now, and the age bound
    /// applies at the next expiry pass.
    pub fn set_namespaces(&mut self, ns: Arc<Namespaces>, max_bytes: usize) {
        self.ns = ns;
        self.max_bytes = max_bytes;
        for (name, ch) in self.channels.iter_mut() {
            ch.ns = self.ns.index_of(name);
            MemoryHub::trim(ch, &self.ns, &mut self.books);
        }
        self.evict_to_budget();
    }

    /// Drops a channel's oldest messages past its namespace's count and byte bounds; the
    /// newest message always stays (checks make every byte bound hold one message), so the
    /// channel keeps history.
    fn trim(ch: &mut Channel, ns: &Namespaces, books: &mut Books) {
        let limits = ns.get(ch.ns);
        let max_count = limits.history_size.max(1);
        while ch.history.len() > max_count
            || (ch.history.len() > 1 && ch.bytes > limits.history_max_bytes)
        {
            MemoryHub::pop_oldest(ch, books);
        }
    }

    fn cost(payload: &[u8]) -> usize {
        payload.len() + STORED_OVERHEAD
    }

    /// What a channel costs beside its messages.
    fn channel_cost(name: &str) -> usize {
        name.len() + CHANNEL_OVERHEAD
    }

    /// Drops the oldest message of `ch`, remembering that ids up to it are gone. A channel
    /// left without history must then be freed by the caller ([`Books::forget`]).
    fn pop_oldest(ch: &mut Channel, books: &mut Books) {
        if let Some(old) = ch.history.pop_front() {
            ch.lost_through = old.id;
            ch.bytes -= MemoryHub::cost(&old.payload);
            books.bytes -= MemoryHub::cost(&old.payload);
            books.freed += MemoryHub::cost(&old.payload) as u64;
            books.stored -= 1;
        }
    }

    /// Drops the channel's messages older than its namespace's age bound; true when none is
    /// left (the caller frees the channel).
    fn expire_channel(ch: &mut Channel, now: Instant, ns: &Namespaces, books: &mut Books) -> bool {
        let max_age = ns.get(ch.ns).history_age;
        while let Some(front) = ch.history.front() {
            if now.duration_since(front.at) < max_age {
                break;
            }
            MemoryHub::pop_oldest(ch, books);
        }
        ch.history.is_empty()
    }

    /// What a channel the hub does not track may have lost: its record, else its bucket.
    fn lost_of_unknown(&self, name: &str) -> u64 {
        let hash = name_hash(name);
        match self.books.records.get(&hash) {
            Some(&lost) => lost,
            None => self.lost[lost_bucket_of(hash)],
        }
    }

    /// Drops the oldest information until history fits its byte bound: the oldest message
    /// anywhere, or the record of a channel whose newest message is older still (what it lost
    /// goes into its bucket).
    fn evict_to_budget(&mut self) {
        while self.books.bytes > self.max_bytes {
            let message = self.order.front().map(|e| e.1);
            let record = self.books.emptied.front().map(|e| e.1);
            match (message, record) {
                (None, None) => break,
                (Some(m), r) if r.is_none_or(|r| m < r) => {
                    let Some((name, id)) = self.order.pop_front() else {
                        break;
                    };
                    let Some(ch) = self.channels.get_mut(&name) else {
                        continue;
                    };
                    if ch.history.front().is_some_and(|s| s.id == id) {
                        MemoryHub::pop_oldest(ch, &mut self.books);
                        if ch.history.is_empty() {
                            let lost = ch.lost_through;
                            self.channels.remove(&name);
                            self.books.forget(&name, lost);
                        }
                    }
                }
                _ => {
                    let Some((hash, lost)) = self.books.emptied.pop_front() else {
                        break;
                    };
                    if self.books.records.get(&hash) == Some(&lost) {
                        self.books.records.remove(&hash);
                        self.books.bytes -= RECORD_COST;
                        self.books.freed += RECORD_COST as u64;
                        let bucket = &mut self.lost[lost_bucket_of(hash)];
                        *bucket = (*bucket).max(lost);
                    }
                }
            }
        }
        // Entries of messages that left by count or age would otherwise pile up in `order`,
        // and entries of records taken back or replaced in `emptied`.
        if self.order.len() > 2 * self.books.stored + 1024 {
            let channels = &self.channels;
            self.order.retain(|(name, id)| {
                channels
                    .get(name)
                    .is_some_and(|ch| ch.history.front().is_some_and(|s| s.id <= *id))
            });
        }
        if self.books.emptied.len() > 2 * self.books.records.len() + 1024 {
            let records = &self.books.records;
            self.books
                .emptied
                .retain(|(hash, lost)| records.get(hash) == Some(lost));
        }
    }

    /// Stores a message and returns its id.
    pub fn publish(&mut self, channel: &str, payload: Rc<[u8]>, now: Instant) -> u64 {
        self.last_id += 1;
        let id = self.last_id;
        let name: Rc<str> = match self.channels.get_key_value(channel) {
            Some((name, _)) => name.clone(),
            None => {
                // A channel met for the first time (or again after it was freed): it may have
                // lost what its record, or else its bucket, says.
                let lost_through = self
                    .books
                    .take_record(channel)
                    .unwrap_or_else(|| self.lost[lost_bucket_of(name_hash(channel))]);
                let name: Rc<str> = Rc::from(channel);
                self.books.bytes += MemoryHub::channel_cost(&name);
                self.channels.insert(
                    name.clone(),
                    Channel {
                        // Most channels hold few messages: grow from one, not from four.
                        history: VecDeque::with_capacity(1),
                        lost_through,
                        bytes: 0,
                        ns: self.ns.index_of(channel),
                    },
                );
                name
            }
        };
        let ch = self.channels.get_mut(&name).expect("just found or made");
        self.books.bytes += MemoryHub::cost(&payload);
        self.books.stored += 1;
        ch.bytes += MemoryHub::cost(&payload);
        ch.history.push_back(Stored {
            id,
            at: now,
            payload,
        });
        // After the push, so the count and byte bounds never empty the channel.
        MemoryHub::trim(ch, &self.ns, &mut self.books);
        self.order.push_back((name, id));
        self.evict_to_budget();
        id
    }

    /// What history still holds on `channels` after id `after`, preceded by a gap for each
    /// channel that lost messages after `after` (`gap_through`). Messages stop once their
    /// payloads pass `budget` bytes (at least one is always included); `more` says so.
    pub fn replay(
        &mut self,
        channels: &[String],
        after: u64,
        budget: usize,
        now: Instant,
    ) -> ReplayChunk {
        let mut out = Vec::new();
        let mut messages: Vec<(u64, &str, &Rc<[u8]>)> = Vec::new();
        for name in channels {
            let lost = match self.channels.get_mut(name.as_str()) {
                Some(ch) => {
                    let emptied = MemoryHub::expire_channel(ch, now, &self.ns, &mut self.books);
                    let lost = ch.lost_through;
                    if emptied {
                        self.channels.remove(name.as_str());
                        self.books.forget(name, lost);
                    }
                    lost
                }
                None => self.lost_of_unknown(name),
            };
            if let Some(through) = gap_through(after, lost, self.origin, self.last_id) {
                out.push(Replay::Gap {
                    channel: name.clone(),
                    after,
                    through,
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

    /// The newest id handed out (or the start point when none yet).
    pub fn current_id(&self) -> u64 {
        self.last_id
    }

    /// Drops history older than the age bound, frees the channels it emptied, and gives
    /// memory back from tables that emptied out.
    pub fn expire(&mut self, now: Instant) {
        let (ns, books) = (&self.ns, &mut self.books);
        self.channels.retain(|name, ch| {
            if MemoryHub::expire_channel(ch, now, ns, books) {
                books.forget(name, ch.lost_through);
                return false;
            }
            true
        });
        self.evict_to_budget();
        shrink_map(&mut self.channels);
        shrink_map(&mut self.books.records);
        shrink_queue(&mut self.order);
        shrink_queue(&mut self.books.emptied);
    }

    /// Channels with history held.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Records of freed channels' losses held (not yet folded into buckets).
    #[cfg(test)]
    pub fn record_count(&self) -> usize {
        self.books.records.len()
    }

    /// Bytes of history freed since the hub started, as charged.
    pub fn freed_bytes(&self) -> u64 {
        self.books.freed
    }

    /// Bytes of history held: payloads, a fixed cost per message and per channel, and the
    /// records of freed channels.
    pub fn history_bytes(&self) -> usize {
        self.books.bytes
    }
}

#[cfg(test)]
mod tests;
