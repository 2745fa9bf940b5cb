//! A hashed timer wheel: one slot per tick, entries only for connections that are waiting for
//! something (a request head, a long-poll). Idle streams have no entry. An entry is just a
//! token; when it fires the connection's own `deadline` decides (stale entries are ignored).

/// Tick length.
pub const TICK_MS: u64 = 100;
const SLOTS: usize = 4096;

pub struct Wheel {
    slots: Vec<Vec<u64>>,
    /// Ticks processed so far.
    now: u32,
}

impl Default for Wheel {
    fn default() -> Self {
        Wheel {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            now: 1,
        }
    }
}

impl Wheel {
    pub fn now(&self) -> u32 {
        self.now
    }

    /// The tick `ms` from now (at least the next tick).
    pub fn deadline_after(&self, ms: u64) -> u32 {
        self.now + ms.div_ceil(TICK_MS).max(1) as u32
    }

    /// Schedules `token` at `deadline` (later than the wheel's span fires early and the owner
    /// re-arms, since the connection's deadline is what counts).
    pub fn schedule(&mut self, token: u64, deadline: u32) {
        let delta = deadline.saturating_sub(self.now).clamp(1, SLOTS as u32 - 1);
        self.slots[((self.now + delta) as usize) % SLOTS].push(token);
    }

    /// Advances one tick and returns the tokens that fell due.
    pub fn advance(&mut self) -> Vec<u64> {
        self.now += 1;
        std::mem::take(&mut self.slots[(self.now as usize) % SLOTS])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_at_deadline() {
        let mut w = Wheel::default();
        let d = w.deadline_after(250);
        w.schedule(7, d);
        let mut fired_at = None;
        for _ in 0..10 {
            if w.advance().contains(&7) {
                fired_at = Some(w.now());
                break;
            }
        }
        assert_eq!(fired_at, Some(d));
    }
}
