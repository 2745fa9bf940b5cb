//! This worker's channels: for each, the connections subscribed here. Membership is a dense
//! member list per channel (a connection stores its position, so leaving is a swap_remove), and
//! channels are slab indices, so a subscription costs 8 bytes, not a string per connection.

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

    /// The member counts that changed since the last call (0 for a channel left by all).
    pub fn take_changed_counts(&mut self) -> Vec<(String, u32)> {
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
            return (moved, Some(ch.name));
        }
        (moved, None)
    }
}
