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
//! one rule every broker uses): a channel that lost all its history keeps a small record of what
//! it lost until the byte bound needs the room; then what it lost is folded into one of
//! [`LOST_BUCKETS`] buckets by a hash of its name, so a channel the hub no longer tracks is told
//! about a gap when its bucket says it may have lost something (never a silent loss; rarely a
//! false gap, and only under memory pressure).
//! A resume is answered in chunks of a byte budget (`ReplayChunk::more`), so no replay makes
//! an ipc frame or a socket queue larger than one chunk.
//!
//! Ids come from one counter that starts at the hub's start time in microseconds (see
//! docs/PROTOCOL.md): monotonic per channel, and never reused across restarts, so a client that
//! resumes against a restarted server is told about a gap instead of being replayed the wrong
//! messages.

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

/// How many buckets remember what forgotten channels lost (8 bytes each).
pub const LOST_BUCKETS: usize = 4096;

/// The bucket of a channel name: FNV-1a, stable across builds so a live upgrade keeps it.
fn lost_bucket(name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % LOST_BUCKETS as u64) as usize
}

struct Stored {
    id: u64,
    at: Instant,
    payload: Rc<[u8]>,
}

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

/// The byte count and the records of channels whose history is empty.
#[derive(Default)]
struct Books {
    bytes: usize,
    stored: usize,
    /// Channels whose history is empty (kept only to report what they lost).
    records: usize,
    /// (channel, its lost-through) as each became a record, oldest first; an entry whose
    /// channel got history again or was dropped is skipped when it reaches the front.
    emptied: VecDeque<(Rc<str>, u64)>,
}

/// The in-process hub used by the master.
pub struct MemoryHub {
    channels: HashMap<Rc<str>, Channel>,
    /// Every stored message in publish order, for eviction by bytes. Entries whose message
    /// already left by count or age are skipped when they reach the front.
    order: VecDeque<(Rc<str>, u64)>,
    books: Books,
    /// What channels no longer tracked lost, by [`lost_bucket`] of their name.
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
    /// expires it when this one would have.
    pub fn export(&self, now: Instant) -> HistoryExport {
        let channels = self
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
    /// from `last_id`, and the bounds of this hub apply from here on.
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
            if history.is_empty() {
                self.books.records += 1;
                emptied.push((ch.forgotten_through, name.clone()));
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
        self.books.emptied = emptied.into_iter().map(|(id, name)| (name, id)).collect();
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
            MemoryHub::trim(name, ch, &self.ns, &mut self.books);
        }
        self.evict_to_budget();
    }

    /// Drops a channel's oldest messages past its namespace's count and byte bounds; the
    /// newest message always stays (checks make every byte bound hold one message).
    fn trim(name: &Rc<str>, ch: &mut Channel, ns: &Namespaces, books: &mut Books) {
        let limits = ns.get(ch.ns);
        let max_count = limits.history_size.max(1);
        while ch.history.len() > max_count
            || (ch.history.len() > 1 && ch.bytes > limits.history_max_bytes)
        {
            MemoryHub::pop_oldest(name, ch, books);
        }
    }

    fn cost(payload: &[u8]) -> usize {
        payload.len() + STORED_OVERHEAD
    }

    /// What a channel costs beside its messages.
    fn channel_cost(name: &str) -> usize {
        name.len() + CHANNEL_OVERHEAD
    }

    /// Drops the oldest message of `ch`, remembering that ids up to it are gone; a channel
    /// left without history becomes a record (its buffer freed).
    fn pop_oldest(name: &Rc<str>, ch: &mut Channel, books: &mut Books) {
        if let Some(old) = ch.history.pop_front() {
            ch.lost_through = old.id;
            ch.bytes -= MemoryHub::cost(&old.payload);
            books.bytes -= MemoryHub::cost(&old.payload);
            books.stored -= 1;
            if ch.history.is_empty() {
                ch.history = VecDeque::new();
                books.records += 1;
                books.emptied.push_back((name.clone(), old.id));
            }
        }
    }

    fn expire_channel(
        name: &Rc<str>,
        ch: &mut Channel,
        now: Instant,
        ns: &Namespaces,
        books: &mut Books,
    ) {
        let max_age = ns.get(ch.ns).history_age;
        while let Some(front) = ch.history.front() {
            if now.duration_since(front.at) < max_age {
                break;
            }
            MemoryHub::pop_oldest(name, ch, books);
        }
    }

    /// What a channel the hub does not track may have lost.
    fn lost_of_unknown(&self, name: &str) -> u64 {
        self.lost[lost_bucket(name)]
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
                    if let Some((key, ch)) = self.channels.get_key_value(&name) {
                        let key = key.clone();
                        if ch.history.front().is_some_and(|s| s.id == id) {
                            let ch = self.channels.get_mut(&name).expect("just found");
                            MemoryHub::pop_oldest(&key, ch, &mut self.books);
                        }
                    }
                }
                _ => {
                    let Some((name, lost)) = self.books.emptied.pop_front() else {
                        break;
                    };
                    let is_record = self
                        .channels
                        .get(&name)
                        .is_some_and(|ch| ch.history.is_empty() && ch.lost_through == lost);
                    if is_record {
                        self.channels.remove(&name);
                        self.books.records -= 1;
                        self.books.bytes -= MemoryHub::channel_cost(&name);
                        let bucket = &mut self.lost[lost_bucket(&name)];
                        *bucket = (*bucket).max(lost);
                    }
                }
            }
        }
        // Entries of messages that left by count or age would otherwise pile up in `order`,
        // and entries of records that got history again in `emptied`.
        if self.order.len() > 2 * self.books.stored + 1024 {
            let channels = &self.channels;
            self.order.retain(|(name, id)| {
                channels
                    .get(name)
                    .is_some_and(|ch| ch.history.front().is_some_and(|s| s.id <= *id))
            });
        }
        if self.books.emptied.len() > 2 * self.books.records + 1024 {
            let channels = &self.channels;
            self.books.emptied.retain(|(name, lost)| {
                channels
                    .get(name)
                    .is_some_and(|ch| ch.history.is_empty() && ch.lost_through == *lost)
            });
        }
    }

    /// Stores a message and returns its id.
    pub fn publish(&mut self, channel: &str, payload: Rc<[u8]>, now: Instant) -> u64 {
        self.last_id += 1;
        let id = self.last_id;
        let name: Rc<str> = match self.channels.get_key_value(channel) {
            Some((name, ch)) => {
                if ch.history.is_empty() {
                    // A record gets history again.
                    self.books.records -= 1;
                }
                name.clone()
            }
            None => {
                // A channel met for the first time (or again after its record was dropped):
                // it may have lost what its bucket says.
                let lost_through = self.lost_of_unknown(channel);
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
        // After the push, so the count and byte bounds never empty the channel into a record.
        MemoryHub::trim(&name, ch, &self.ns, &mut self.books);
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
            let lost = match self.channels.get_key_value(name.as_str()) {
                Some((key, _)) => {
                    let key = key.clone();
                    let ch = self.channels.get_mut(&key).expect("just found");
                    MemoryHub::expire_channel(&key, ch, now, &self.ns, &mut self.books);
                    ch.lost_through
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

    /// Drops history older than the age bound.
    pub fn expire(&mut self, now: Instant) {
        for (name, ch) in self.channels.iter_mut() {
            MemoryHub::expire_channel(name, ch, now, &self.ns, &mut self.books);
        }
        self.evict_to_budget();
    }

    /// Channels with history held.
    pub fn channel_count(&self) -> usize {
        self.channels.len() - self.books.records
    }

    /// Bytes of history held: payloads, a fixed cost per message and a cost per channel.
    pub fn history_bytes(&self) -> usize {
        self.books.bytes
    }
}

#[cfg(test)]
mod tests;
