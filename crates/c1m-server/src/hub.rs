//! The hub: message ids, per-channel history and resume. It lives in the master today; a cluster
//! broker (Redis, NATS) would implement the same [`Hub`] trait, so that swap stays local.
//!
//! Ids come from one counter that starts at the hub's start time in microseconds (see
//! docs/PROTOCOL.md): monotonic per channel, and never reused across restarts, so a client that
//! resumes against a restarted server is told about a gap instead of being replayed the wrong
//! messages.

use crate::ipc::Replay;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a hub must do for the gateway.
pub trait Hub {
    /// Stores a message and returns its id.
    fn publish(&mut self, channel: &str, payload: Rc<[u8]>, now: Instant) -> u64;
    /// Everything on `channels` after id `after` that history still holds, preceded by a gap
    /// for each channel whose history no longer reaches back to `after`.
    fn replay(&mut self, channels: &[String], after: u64, now: Instant) -> Vec<Replay>;
    /// The newest id handed out (or the start point when none yet).
    fn current_id(&self) -> u64;
    /// Drops history older than the age bound; forgets channels that hold nothing.
    fn expire(&mut self, now: Instant);
    /// Channels currently known.
    fn channel_count(&self) -> usize;
}

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
    channels: HashMap<String, Channel>,
    last_id: u64,
    /// Every id up to here may have been published on a channel we no longer track.
    forgotten_through: u64,
    max_count: usize,
    max_age: Duration,
}

impl MemoryHub {
    pub fn new(max_count: usize, max_age: Duration) -> MemoryHub {
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1);
        MemoryHub::starting_at(start, max_count, max_age)
    }

    /// A hub whose first id is `start` (tests use small numbers).
    pub fn starting_at(start: u64, max_count: usize, max_age: Duration) -> MemoryHub {
        MemoryHub {
            channels: HashMap::new(),
            last_id: start - 1,
            forgotten_through: start - 1,
            max_count: max_count.max(1),
            max_age,
        }
    }

    fn expire_channel(ch: &mut Channel, now: Instant, max_age: Duration) {
        while let Some(front) = ch.history.front() {
            if now.duration_since(front.at) < max_age {
                break;
            }
            ch.forgotten_through = front.id;
            ch.history.pop_front();
        }
    }
}

impl Hub for MemoryHub {
    fn publish(&mut self, channel: &str, payload: Rc<[u8]>, now: Instant) -> u64 {
        self.last_id += 1;
        let id = self.last_id;
        let forgotten = self.forgotten_through;
        let ch = self
            .channels
            .entry(channel.to_string())
            .or_insert_with(|| Channel {
                history: VecDeque::new(),
                forgotten_through: forgotten,
            });
        if ch.history.len() == self.max_count {
            if let Some(old) = ch.history.pop_front() {
                ch.forgotten_through = old.id;
            }
        }
        ch.history.push_back(Stored {
            id,
            at: now,
            payload,
        });
        id
    }

    fn replay(&mut self, channels: &[String], after: u64, now: Instant) -> Vec<Replay> {
        let mut out = Vec::new();
        let mut messages: Vec<(u64, &str, &Rc<[u8]>)> = Vec::new();
        for name in channels {
            let forgotten = match self.channels.get_mut(name.as_str()) {
                Some(ch) => {
                    MemoryHub::expire_channel(ch, now, self.max_age);
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
        out.extend(
            messages
                .into_iter()
                .map(|(id, channel, payload)| Replay::Message {
                    channel: channel.to_string(),
                    id,
                    payload: payload.to_vec(),
                }),
        );
        out
    }

    fn current_id(&self) -> u64 {
        self.last_id
    }

    fn expire(&mut self, now: Instant) {
        let max_age = self.max_age;
        let mut forgotten = self.forgotten_through;
        self.channels.retain(|_, ch| {
            MemoryHub::expire_channel(ch, now, max_age);
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(count: usize) -> MemoryHub {
        MemoryHub::starting_at(100, count, Duration::from_secs(60))
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
        let r = h.replay(&["a".into()], a1, now);
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
            ids(&h.replay(&["a".into(), "b".into()], 99, now)),
            vec![100, 101, 102]
        );
        assert!(h.replay(&["a".into()], a2, now).is_empty());
    }

    #[test]
    fn gap_when_history_evicted_by_count() {
        let mut h = hub(2);
        let now = Instant::now();
        for i in 0..5 {
            h.publish("a", vec![i].into(), now);
        }
        let r = h.replay(&["a".into()], 100, now);
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
        let mut h = MemoryHub::starting_at(100, 10, Duration::from_secs(1));
        let t0 = Instant::now();
        h.publish("a", b"1".to_vec().into(), t0);
        let later = t0 + Duration::from_secs(2);
        let r = h.replay(&["a".into()], 99, later);
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
            h.replay(&["a".into()], 99, later)[0],
            Replay::Gap {
                channel: "a".into(),
                after: 99,
                through: 100
            }
        );
        // A fresh hub (a restart) reports a gap for any id from before its start.
        let mut fresh = MemoryHub::starting_at(500, 10, Duration::from_secs(1));
        assert_eq!(
            fresh.replay(&["a".into()], 120, later)[0],
            Replay::Gap {
                channel: "a".into(),
                after: 120,
                through: 499
            }
        );
        // And for an id it never issued.
        assert!(matches!(
            fresh.replay(&["a".into()], 900, later)[0],
            Replay::Gap { .. }
        ));
    }
}
