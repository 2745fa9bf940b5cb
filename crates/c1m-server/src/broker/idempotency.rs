//! The in-process hub's memory of `Idempotency-Key`s: which id each (channel, key) got, so a
//! retried publish is answered with it instead of being stored twice.
//! Bounded by count (the oldest key goes first) and by age (`IDEMPOTENCY_TTL`), the same
//! contract the Redis broker keeps with `SET NX PX`.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

pub struct Keys {
    ids: HashMap<(String, String), u64>,
    /// Insertion order, for expiry and eviction (keys are never refreshed).
    order: VecDeque<(Instant, (String, String))>,
    max: usize,
    ttl: Duration,
}

impl Keys {
    pub fn new(max: usize, ttl: Duration) -> Keys {
        Keys {
            ids: HashMap::new(),
            order: VecDeque::new(),
            max: max.max(1),
            ttl,
        }
    }

    /// The id a publish with this key already got, if still remembered.
    pub fn get(&mut self, channel: &str, key: &str, now: Instant) -> Option<u64> {
        self.expire(now);
        self.ids
            .get(&(channel.to_string(), key.to_string()))
            .copied()
    }

    pub fn insert(&mut self, channel: &str, key: &str, id: u64, now: Instant) {
        self.expire(now);
        while self.ids.len() >= self.max {
            let Some((_, old)) = self.order.pop_front() else {
                break;
            };
            self.ids.remove(&old);
        }
        let k = (channel.to_string(), key.to_string());
        self.ids.insert(k.clone(), id);
        self.order.push_back((now, k));
    }

    pub fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < self.ttl {
                break;
            }
            if let Some((_, k)) = self.order.pop_front() {
                self.ids.remove(&k);
            }
        }
    }

    #[cfg(test)]
    fn count(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_by_count_and_age() {
        let t0 = Instant::now();
        let mut keys = Keys::new(2, Duration::from_secs(10));
        keys.insert("a", "k1", 1, t0);
        keys.insert("b", "k1", 2, t0);
        // Per channel: the same key on another channel is another publish.
        assert_eq!(keys.get("a", "k1", t0), Some(1));
        assert_eq!(keys.get("b", "k1", t0), Some(2));
        // Count: a third key pushes out the oldest.
        keys.insert("a", "k2", 3, t0);
        assert_eq!(keys.count(), 2);
        assert_eq!(keys.get("a", "k1", t0), None);
        assert_eq!(keys.get("a", "k2", t0), Some(3));
        // Age: gone after the TTL.
        let later = t0 + Duration::from_secs(11);
        assert_eq!(keys.get("a", "k2", later), None);
        assert_eq!(keys.count(), 0);
    }
}
