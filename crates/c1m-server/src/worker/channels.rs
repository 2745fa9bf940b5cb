//! This worker's channels: for each, the connections subscribed here. Membership is a dense
//! member list per channel (a connection stores its position, so leaving is a swap_remove), and
//! channels are slab indices, so a subscription costs 8 bytes, not a string per connection.
//!
//! # What one channel costs in a worker
//!
//! (64-bit build.) A channel exists here only while it has a subscriber on this worker: one
//! that is only published to, or whose history the master holds, costs a worker nothing. With
//! subscribers: its slab entry (56 B), its name map entry (24 B at the map's load factor, so
//! up to 55 B), the name's `Rc` (16 B + the name, in a 32 or 48 B block) and the member list
//! (4 B per member, a 32 B block for up to 4), so about 170 B for a channel of one subscriber,
//! plus 4 B per further one, beside what each connection costs itself. History never lives in
//! a worker: a message is held only while its fan-out is queued. The last subscriber's leave
//! frees the channel; after a mass of channels left, the name map gives its table back, and
//! the slab gives its own back once no channel is left.

use slab::Slab;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

pub struct LocalChannel {
    pub name: Rc<str>,
    /// Slab indices of member connections.
    pub members: Vec<u32>,
    /// Set once the master has acknowledged this worker's interest (a join answer arrived);
    /// until then new subscribers join through the master so no publish slips past them.
    pub known_to_master: bool,
}

#[derive(Default)]
pub struct Channels {
    slots: Slab<LocalChannel>,
    by_name: HashMap<Rc<str>, u32>,
    /// Channels whose member count changed since the last report to the master.
    changed: HashSet<Rc<str>>,
}

impl Channels {
    pub fn get(&self, idx: u32) -> Option<&LocalChannel> {
        self.slots.get(idx as usize)
    }

    pub fn lookup(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub fn mark_known(&mut self, name: &str) {
        if let Some(&idx) = self.by_name.get(name) {
            self.slots[idx as usize].known_to_master = true;
        }
    }

    /// Adds `conn` to `name`; returns (channel index, position).
    pub fn join(&mut self, name: &str, conn: u32) -> (u32, u32) {
        let idx = match self.by_name.get(name) {
            Some(&idx) => idx,
            None => {
                let name: Rc<str> = Rc::from(name);
                let idx = self.slots.insert(LocalChannel {
                    name: name.clone(),
                    members: Vec::new(),
                    known_to_master: false,
                }) as u32;
                self.by_name.insert(name, idx);
                idx
            }
        };
        let ch = &mut self.slots[idx as usize];
        ch.members.push(conn);
        if !self.changed.contains(&ch.name) {
            self.changed.insert(ch.name.clone());
        }
        (idx, (ch.members.len() - 1) as u32)
    }

    /// Hands back the tables' room once they hold under a quarter of it (the floor keeps a
    /// small worker from resizing back and forth).
    fn give_back(&mut self) {
        let floor = 4 * self.by_name.len().max(1024);
        if self.by_name.capacity() > floor {
            self.by_name.shrink_to(2 * self.by_name.len());
        }
        // Live channels keep their indices, so the slab can only start over once it is empty
        // (shrinking around a live entry near its end would walk the whole slab each time).
        if self.slots.is_empty() && self.slots.capacity() > 1024 {
            self.slots = Slab::new();
        }
    }

    /// The member counts that changed since the last call (0 for a channel left by all).
    pub fn take_changed_counts(&mut self) -> Vec<(String, u32)> {
        // Taken whole, so a burst of changes leaves no large set behind.
        let changed = std::mem::take(&mut self.changed);
        changed
            .into_iter()
            .map(|name| {
                let n = self
                    .by_name
                    .get(&name)
                    .and_then(|&i| self.slots.get(i as usize))
                    .map_or(0, |c| c.members.len() as u32);
                (name.to_string(), n)
            })
            .collect()
    }

    /// Removes the member at `pos` of channel `idx`. Returns the connection that moved into
    /// `pos` (its stored position must be updated) and, when the channel became empty, its
    /// name (the master is told this worker left it).
    pub fn leave(&mut self, idx: u32, pos: u32) -> (Option<u32>, Option<Rc<str>>) {
        let Some(ch) = self.slots.get_mut(idx as usize) else {
            return (None, None);
        };
        let pos = pos as usize;
        if pos >= ch.members.len() {
            return (None, None);
        }
        ch.members.swap_remove(pos);
        if !self.changed.contains(&ch.name) {
            self.changed.insert(ch.name.clone());
        }
        let moved = ch.members.get(pos).copied();
        if ch.members.is_empty() {
            let ch = self.slots.remove(idx as usize);
            self.by_name.remove(&ch.name);
            self.give_back();
            return (moved, Some(ch.name));
        }
        (moved, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mass of channels that came and went leaves no table of their size behind.
    #[test]
    fn channels_left_by_all_give_their_tables_back() {
        let mut chans = Channels::default();
        let n = 20_000;
        let joined: Vec<(u32, u32)> = (0..n).map(|i| chans.join(&format!("c{i}"), i)).collect();
        assert!(chans.by_name.capacity() >= n as usize);
        for &(idx, pos) in &joined {
            let (_, emptied) = chans.leave(idx, pos);
            assert!(emptied.is_some());
        }
        assert!(chans.by_name.is_empty());
        assert!(
            chans.by_name.capacity() <= 4096,
            "{}",
            chans.by_name.capacity()
        );
        assert_eq!(chans.slots.capacity(), 0);
        assert_eq!(chans.take_changed_counts().len(), n as usize);
        // And it is as usable as before.
        let (idx, _) = chans.join("again", 1);
        assert_eq!(chans.lookup("again"), Some(idx));
    }
}
