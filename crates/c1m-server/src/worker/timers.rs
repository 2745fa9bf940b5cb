//! A hashed timer wheel: one slot per tick, entries only for connections that are waiting for
//! something (a request head, a long-poll). Idle streams have no entry. An entry is just a
//! token; when it fires the connection's own `deadline` decides (stale entries are ignored).
//!
//! Only slots holding a token exist (a map by slot number): an array of 4096 empty `Vec`s
//! was 96 KiB written at start in each of up to 54 workers, ~5 MB of fixed cost.

use std::collections::HashMap;

/// Tick length.
pub const TICK_MS: u64 = 100;
const SLOTS: usize = 4096;

pub struct Wheel {
    /// Slot number → tokens due at that slot's tick.
    slots: HashMap<usize, Vec<u64>>,
    /// Ticks processed so far.
    now: u32,
}

impl Default for Wheel {
    fn default() -> Self {
        Wheel {
            slots: HashMap::new(),
            now: 1,
        }
    }
}

impl Wheel {
    pub fn now(&self) -> u32 {
        self.now
    }

    /// The first tick that is surely `ms` or more from now. "Now" may be late in the current
    /// tick (the wheel advances on tick boundaries), hence one tick more than `ms` rounds up
    /// to: a timer fires between `ms` and `ms` + one tick, never early.
    pub fn deadline_after(&self, ms: u64) -> u32 {
        self.now + ms.div_ceil(TICK_MS) as u32 + 1
    }

    /// Schedules `token` at `deadline` (later than the wheel's span fires early and the owner
    /// re-arms, since the connection's deadline is what counts).
    pub fn schedule(&mut self, token: u64, deadline: u32) {
        let delta = deadline.saturating_sub(self.now).clamp(1, SLOTS as u32 - 1);
        let slot = ((self.now + delta) as usize) % SLOTS;
        self.slots.entry(slot).or_default().push(token);
    }

    /// No token is scheduled: the wheel needs no tick until one is.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Counts `ticks` that passed while the wheel was empty (the loop slept through them), so
    /// that a deadline taken next is counted from the real now, not from before the sleep.
    pub fn skip_idle(&mut self, ticks: u32) {
        debug_assert!(self.is_empty(), "skipping ticks would lose due tokens");
        self.now += ticks;
    }

    /// Advances one tick and returns the tokens that fell due.
    pub fn advance(&mut self) -> Vec<u64> {
        self.now += 1;
        self.slots
            .remove(&((self.now as usize) % SLOTS))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_slept_through_while_empty_count_toward_a_later_deadline() {
        let mut w = Wheel::default();
        assert!(w.is_empty());
        w.skip_idle(25); // 2.5 s slept with nothing armed
        let d = w.deadline_after(250);
        assert_eq!(d, 1 + 25 + 3 + 1, "counted from the real now");
        w.schedule(9, d);
        assert!(!w.is_empty());
        let fired: Vec<u32> = (0..10)
            .filter_map(|_| w.advance().contains(&9).then_some(w.now()))
            .collect();
        assert_eq!(fired, [d]);
    }

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

    #[test]
    fn never_fires_before_the_delay_even_when_armed_late_in_a_tick() {
        let w = Wheel::default();
        for ms in [1, 99, 100, 101, 250, 450, 500, 30_000] {
            // Armed just before the next advance: only (deadline - now - 1) whole ticks pass.
            let whole_ticks = u64::from(w.deadline_after(ms) - w.now() - 1);
            assert!(
                whole_ticks * TICK_MS >= ms,
                "{ms} ms could fire after {whole_ticks} ticks"
            );
        }
    }
}
