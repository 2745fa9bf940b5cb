//! Periodic passes over every connection (SSE heartbeats, WebSocket pings and the check that
//! they were answered), spread across their period instead of run in one go. One pass over 500K
//! connections takes a worker hundreds of milliseconds, during which it accepts nothing and
//! acknowledges no publish: at 1M the 30 s heartbeat pass stalled the ramp every 30 s. A pass
//! covers the connection slots occupied when it starts, handing out at each loop turn the share
//! of them that the time elapsed in the period has made due, so every connection present through
//! a period is visited once in it, and at the same offset in each period (its spacing stays one
//! period). A connection opened in a slot above the pass's end is visited from the next pass on.
//!
//! This module only schedules (slot ranges); the worker does the visiting.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

/// One pass over slots `0..end`, spread over `period` from `started`.
#[derive(Debug)]
struct Sweep {
    started: Instant,
    period: Duration,
    end: usize,
    next: usize,
}

impl Sweep {
    /// The slots made due by `now` and not handed out yet, never at or past `limit`.
    fn take(&mut self, now: Instant, limit: usize) -> Range<usize> {
        let elapsed = now.saturating_duration_since(self.started);
        let due = if elapsed >= self.period || self.period.is_zero() {
            self.end
        } else {
            (self.end as u128 * elapsed.as_nanos() / self.period.as_nanos()) as usize
        };
        let upto = due.min(limit).max(self.next);
        let slots = self.next..upto;
        self.next = upto;
        slots
    }

    fn done(&self) -> bool {
        self.next >= self.end
    }
}

/// A job run over all connections once every period (the period may change on reload).
#[derive(Debug, Default)]
pub struct Periodic {
    next_pass: Option<Instant>,
    pass: Option<Sweep>,
    passes: u64,
}

impl Periodic {
    /// Starts a pass over `slots()` when one is due; `every` None turns the job off. A shorter
    /// period (a reload) brings the next pass forward to at most one new period from now.
    fn start_if_due(
        &mut self,
        every: Option<Duration>,
        now: Instant,
        slots: impl FnOnce() -> usize,
    ) {
        let Some(every) = every else {
            self.next_pass = None;
            self.pass = None;
            return;
        };
        let at = self.next_pass.map_or(now + every, |t| t.min(now + every));
        self.next_pass = Some(at);
        if self.pass.is_none() && at <= now {
            // From the time it was due, so that a loop turn late does not shift every later
            // pass; from now after a long stop (a freeze for a hand-over), not all at once.
            let started = if now - at < every { at } else { now };
            self.pass = Some(Sweep {
                started,
                period: every,
                end: slots(),
                next: 0,
            });
            self.passes += 1;
            self.next_pass = Some(started + every);
        }
    }

    fn take(&mut self, now: Instant, limit: usize) -> Range<usize> {
        let Some(pass) = &mut self.pass else {
            return 0..0;
        };
        let slots = pass.take(now, limit);
        if pass.done() {
            self.pass = None;
        }
        slots
    }

    /// The slots to visit now (often empty) and which pass (numbered from 1) they belong to.
    /// `slots()` is one past the highest occupied slot, asked only when a pass starts.
    pub fn due_in_pass(
        &mut self,
        every: Option<Duration>,
        now: Instant,
        slots: impl FnOnce() -> usize,
    ) -> (Range<usize>, u64) {
        self.due_below(every, now, slots, |_| usize::MAX)
    }

    /// As [`Periodic::due_in_pass`], never at or past `limit(pass)`.
    fn due_below(
        &mut self,
        every: Option<Duration>,
        now: Instant,
        slots: impl FnOnce() -> usize,
        limit: impl Fn(u64) -> usize,
    ) -> (Range<usize>, u64) {
        if every.is_none() {
            self.start_if_due(None, now, slots);
            return (0..0, self.passes);
        }
        // The pass ending now first, so that the next one can start in the same turn.
        let ending = self.take(now, limit(self.passes));
        let ending_pass = self.passes;
        self.start_if_due(every, now, slots);
        if !ending.is_empty() {
            return (ending, ending_pass);
        }
        (self.take(now, limit(self.passes)), self.passes)
    }
}

/// Slots pinged together, judged `pong timeout` later.
#[derive(Debug)]
struct Pinged {
    at: Instant,
    slots: Range<usize>,
    pass: u64,
}

/// WebSocket keepalive: a ping pass per interval, and each slot judged (closed if its ping is
/// still unanswered) exactly one pong timeout after it was pinged, not before. The next pass
/// never pings a slot the previous pass's judgement has not reached (which could happen when the
/// slots grew a lot between passes): a new ping would hide an old unanswered one, or a judgement
/// would close a peer pinged a moment ago.
#[derive(Debug, Default)]
pub struct PingRounds {
    pings: Periodic,
    pending: VecDeque<Pinged>,
}

impl PingRounds {
    /// The slots to ping now.
    pub fn pings_due(
        &mut self,
        every: Option<Duration>,
        now: Instant,
        slots_end: impl FnOnce() -> usize,
    ) -> Range<usize> {
        // Pings already sent are still judged when pings are turned off.
        let pending = &self.pending;
        let (slots, pass) = self.pings.due_below(every, now, slots_end, |pass| {
            // Where pass `pass` must stop: the lowest slot an earlier pass pinged and is
            // still to judge.
            match pending.front() {
                Some(old) if old.pass < pass => old.slots.start,
                _ => usize::MAX,
            }
        });
        if !slots.is_empty() {
            self.pending.push_back(Pinged {
                at: now,
                slots: slots.clone(),
                pass,
            });
        }
        slots
    }

    /// Slots whose ping is `timeout` old: their peers must have answered. Call until None.
    pub fn judgement_due(&mut self, timeout: Duration, now: Instant) -> Option<Range<usize>> {
        if self.pending.front()?.at + timeout > now {
            return None;
        }
        self.pending.pop_front().map(|p| p.slots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Periodic {
        fn due(
            &mut self,
            every: Option<Duration>,
            now: Instant,
            end: impl FnOnce() -> usize,
        ) -> Range<usize> {
            self.due_in_pass(every, now, end).0
        }
    }

    const SEC: Duration = Duration::from_secs(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Runs `job` every 100 ms for `turns` turns; returns (turn, slot) of every visit.
    fn visits(job: &mut Periodic, every: Duration, end: usize, turns: u64) -> Vec<(u64, usize)> {
        let t0 = Instant::now();
        let mut out = Vec::new();
        for turn in 0..turns {
            for slot in job.due(Some(every), t0 + ms(100 * turn), || end) {
                out.push((turn, slot));
            }
        }
        out
    }

    #[test]
    fn a_pass_is_spread_over_its_period_and_visits_each_slot_once_a_period() {
        let mut job = Periodic::default();
        // First pass at 1 s (turn 10), second at 2 s (turn 20); each spread over 10 turns.
        let seen = visits(&mut job, SEC, 1000, 31);
        for slot in [0, 1, 499, 999] {
            let turns: Vec<u64> = seen.iter().filter(|v| v.1 == slot).map(|v| v.0).collect();
            assert_eq!(turns.len(), 2, "slot {slot}: {turns:?}");
            assert_eq!(turns[1] - turns[0], 10, "slot {slot} spaced one period");
        }
        let busiest = (0..31)
            .map(|t| seen.iter().filter(|v| v.0 == t).count())
            .max();
        assert_eq!(busiest, Some(100), "one tenth of the slots per 100 ms turn");
    }

    #[test]
    fn off_means_nothing_and_a_shorter_period_brings_the_next_pass_forward() {
        let t0 = Instant::now();
        let mut job = Periodic::default();
        assert!(job.due(None, t0, || 10).is_empty());
        assert!(job.due(Some(SEC * 30), t0, || 10).is_empty());
        // Reloaded to 1 s: the pass starts within 1 s, not 30, and covers the slots in 1 s.
        assert!(job.due(Some(SEC), t0 + ms(10), || 10).is_empty());
        assert!(job.due(Some(SEC), t0 + ms(1010), || 10).is_empty());
        assert_eq!(job.due(Some(SEC), t0 + ms(1510), || 10), 0..5);
        assert_eq!(job.due(Some(SEC), t0 + ms(2010), || 10), 5..10);
        assert!(job.due(None, t0 + ms(2500), || 10).is_empty());
        assert!(job.due(None, t0 + ms(9000), || 10).is_empty());
    }

    #[test]
    fn each_slot_is_judged_one_timeout_after_its_ping() {
        let t0 = Instant::now();
        let mut rounds = PingRounds::default();
        let mut pinged_at = vec![None; 100];
        for turn in 0..40u64 {
            let now = t0 + ms(100 * turn);
            while let Some(slots) = rounds.judgement_due(ms(500), now) {
                for s in slots {
                    let at: Instant = pinged_at[s].take().expect("judged a slot never pinged");
                    assert!(now - at >= ms(500), "slot {s} judged early");
                    assert!(now - at < ms(600), "slot {s} judged late");
                }
            }
            for s in rounds.pings_due(Some(SEC), now, || 100) {
                assert!(
                    pinged_at[s].is_none(),
                    "slot {s} pinged before its judgement"
                );
                pinged_at[s] = Some(now);
            }
        }
    }

    #[test]
    fn a_new_pass_waits_for_the_old_judgement_when_the_slots_grew() {
        let t0 = Instant::now();
        let mut rounds = PingRounds::default();
        // Pass 1 over 10 slots from 1 s; pass 2 from 2 s over 1000 slots would reach slot 9
        // at 2.01 s, but slot 9 (pinged at 2.0 s) is judged only at 2.9 s.
        let mut pinged_at: Vec<Option<Instant>> = vec![None; 1000];
        for turn in 0..60u64 {
            let now = t0 + ms(100 * turn);
            while let Some(slots) = rounds.judgement_due(ms(900), now) {
                for s in slots {
                    let at = pinged_at[s].take().expect("judged a slot never pinged");
                    assert!(now - at >= ms(900), "slot {s} judged early");
                }
            }
            let end = if turn < 15 { 10 } else { 1000 };
            for s in rounds.pings_due(Some(SEC), now, || end) {
                assert!(
                    pinged_at[s].is_none(),
                    "slot {s} pinged twice before a judgement"
                );
                pinged_at[s] = Some(now);
            }
        }
        assert!(
            pinged_at.iter().skip(10).any(|p| p.is_some()),
            "pass 2 went on"
        );
    }
}
