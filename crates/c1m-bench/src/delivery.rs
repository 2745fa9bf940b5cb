//! Delivery accounting: per-connection sequence tracking (loss, duplicates, reordering) and the
//! "delivered to all?" arithmetic.
//!
//! Each publish carries a per-channel sequence and its send time. A connection's *window* opens
//! when the server confirmed its subscription (SSE head, WS 101, TCP `OK`, first long-poll
//! answer): every message whose send time is at or after that moment must reach it. When the
//! connection ends (or the run ends) its expected count is the number of acknowledged publishes
//! on its channel sent inside the window — for a connection that closed early, only those
//! acknowledged at least [`CLOSE_GRACE_US`] before it closed — and missing = expected minus the
//! distinct in-window messages it received. State per connection is 32 bytes: the highest
//! sequence, a 64-bit bitmap of the sequences below it, the window start, its position in the
//! channel's [`PublishLog`] once pinned, and a counter.

use crate::publish_log::{PublishLog, NOT_PINNED};
use serde::{Deserialize, Serialize};

/// A message acknowledged this long before a connection closed must have reached it.
pub const CLOSE_GRACE_US: u64 = 1_000_000;

/// Per-connection tracking state.
#[derive(Debug, Clone, Copy)]
pub struct ConnDelivery {
    /// Highest sequence seen (0 = none yet; sequences start at 1).
    pub last_seq: u32,
    /// Distinct in-window messages received in the current session.
    pub in_window: u32,
    /// Bit i set = sequence `last_seq - 1 - i` seen.
    pub seen: u64,
    /// Wall-clock µs when the current session's window opened (0 = not yet).
    pub window_start_us: u64,
    /// Publishes on the channel sent before the window opened, once pinned
    /// ([`NOT_PINNED`] until then): the log may drop entries older than a pinned window.
    pub before_window: u64,
}

impl Default for ConnDelivery {
    fn default() -> Self {
        ConnDelivery {
            last_seq: 0,
            in_window: 0,
            seen: 0,
            window_start_us: 0,
            before_window: NOT_PINNED,
        }
    }
}

/// Worker-wide delivery counters (summed over workers by the coordinator).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeliveryTotals {
    /// Messages received (all, including duplicates).
    pub received: u64,
    /// Distinct messages received inside their connection's window.
    pub received_in_window: u64,
    /// Deliveries that had to happen (see module doc).
    pub expected: u64,
    /// Expected deliveries that never came.
    pub missing: u64,
    /// The same sequence received twice on one connection.
    pub duplicates: u64,
    /// A sequence older than the newest one already received (late, not a duplicate).
    pub reordered: u64,
    /// Sequence jumps seen on arrival (later arrivals may fill them; `missing` is the verdict).
    pub seq_jumps: u64,
    /// Gap notices from the server (it says messages were lost to this client).
    pub server_gaps: u64,
    /// Server message ids that did not grow on a connection.
    pub id_regressions: u64,
    /// Messages that were not bench payloads.
    pub foreign: u64,
    /// Bench payloads stamped before this run started: an earlier run's messages that the
    /// server replayed from its history. Left out of loss, duplicate and order accounting.
    #[serde(default)]
    pub stale: u64,
    /// Bench payloads for another channel than the connection's.
    pub wrong_channel: u64,
}

impl DeliveryTotals {
    pub fn add(&mut self, o: &DeliveryTotals) {
        self.received += o.received;
        self.received_in_window += o.received_in_window;
        self.expected += o.expected;
        self.missing += o.missing;
        self.duplicates += o.duplicates;
        self.reordered += o.reordered;
        self.seq_jumps += o.seq_jumps;
        self.server_gaps += o.server_gaps;
        self.id_regressions += o.id_regressions;
        self.foreign += o.foreign;
        self.stale += o.stale;
        self.wrong_channel += o.wrong_channel;
    }

    /// Every expected message arrived exactly once and in order.
    pub fn delivered_to_all(&self) -> bool {
        self.missing == 0
            && self.duplicates == 0
            && self.reordered == 0
            && self.wrong_channel == 0
            && self.server_gaps == 0
    }
}

/// What became of one received sequence.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    Fresh,
    Duplicate,
    Late,
}

impl ConnDelivery {
    /// Records sequence `seq` sent at `sent_us`; returns how it arrived.
    pub fn on_message(&mut self, seq: u32, sent_us: u64, t: &mut DeliveryTotals) -> Arrival {
        t.received += 1;
        let arrival = if seq > self.last_seq {
            if self.last_seq != 0 && seq > self.last_seq.saturating_add(1) {
                t.seq_jumps += 1;
            }
            let shift = seq - self.last_seq;
            self.seen = if self.last_seq == 0 || shift > 64 {
                0
            } else if shift == 64 {
                1u64 << 63
            } else {
                // The old last_seq becomes bit shift-1.
                (self.seen << shift) | (1u64 << (shift - 1))
            };
            self.last_seq = seq;
            Arrival::Fresh
        } else if seq == self.last_seq {
            Arrival::Duplicate
        } else {
            let back = self.last_seq - seq; // ≥ 1
            if back <= 64 {
                let bit = 1u64 << (back - 1);
                if self.seen & bit != 0 {
                    Arrival::Duplicate
                } else {
                    self.seen |= bit;
                    Arrival::Late
                }
            } else {
                // Too old to tell apart; counted as late (see module doc).
                Arrival::Late
            }
        };
        match arrival {
            Arrival::Duplicate => t.duplicates += 1,
            Arrival::Late => t.reordered += 1,
            Arrival::Fresh => {}
        }
        if arrival != Arrival::Duplicate
            && self.window_start_us != 0
            && sent_us >= self.window_start_us
        {
            self.in_window = self.in_window.saturating_add(1);
            t.received_in_window += 1;
        }
        arrival
    }

    /// Fixes the open window's position in `log` if it opened before `cutoff_us`, by when
    /// every publish sent before it has been answered; the log may then drop older entries.
    pub fn pin_window(&mut self, log: &PublishLog, cutoff_us: u64) {
        if self.window_start_us != 0
            && self.window_start_us < cutoff_us
            && self.before_window == NOT_PINNED
        {
            self.before_window = log.sent_before(self.window_start_us);
        }
    }

    /// Ends the current session: adds expected and missing to `t`. `log` holds the channel's
    /// acknowledged publishes. `closed_at_us` is None when the run ended with the connection
    /// online.
    pub fn close_session(
        &mut self,
        log: &PublishLog,
        closed_at_us: Option<u64>,
        t: &mut DeliveryTotals,
    ) {
        if self.window_start_us != 0 {
            let before = match self.before_window {
                NOT_PINNED => log.sent_before(self.window_start_us),
                pinned => pinned,
            };
            let expected = log.expected_after(before, closed_at_us, CLOSE_GRACE_US);
            t.expected += expected;
            t.missing += expected.saturating_sub(u64::from(self.in_window));
        }
        self.window_start_us = 0;
        self.before_window = NOT_PINNED;
        self.in_window = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_then_dup_late_and_jump() {
        let mut c = ConnDelivery {
            window_start_us: 100,
            ..Default::default()
        };
        let mut t = DeliveryTotals::default();
        assert_eq!(c.on_message(1, 100, &mut t), Arrival::Fresh);
        assert_eq!(c.on_message(2, 110, &mut t), Arrival::Fresh);
        assert_eq!(c.on_message(2, 110, &mut t), Arrival::Duplicate);
        assert_eq!(c.on_message(5, 140, &mut t), Arrival::Fresh);
        assert_eq!(c.on_message(4, 130, &mut t), Arrival::Late);
        assert_eq!(c.on_message(4, 130, &mut t), Arrival::Duplicate);
        assert_eq!(c.on_message(1, 100, &mut t), Arrival::Duplicate);
        assert_eq!(c.on_message(200, 200, &mut t), Arrival::Fresh);
        assert_eq!(c.on_message(136, 199, &mut t), Arrival::Late);
        assert_eq!(t.duplicates, 3);
        assert_eq!(t.reordered, 2);
        assert_eq!(t.seq_jumps, 2);
        assert_eq!(t.received, 9);
        assert_eq!(t.received_in_window, 6);
    }

    #[test]
    fn extreme_sequences_do_not_overflow() {
        let mut c = ConnDelivery::default();
        let mut t = DeliveryTotals::default();
        assert_eq!(c.on_message(u32::MAX, 1, &mut t), Arrival::Fresh);
        assert_eq!(c.on_message(u32::MAX, 1, &mut t), Arrival::Duplicate);
        assert_eq!(c.on_message(1, 1, &mut t), Arrival::Late);
        assert_eq!(c.on_message(u32::MAX - 64, 1, &mut t), Arrival::Late);
    }

    #[test]
    fn window_and_expected() {
        let mut pubs = PublishLog::default();
        for (sent, ack) in [(50, 60), (100, 110), (200, 210), (300, 2_000_000)] {
            pubs.push(sent, ack);
        }
        let mut t = DeliveryTotals::default();
        let mut c = ConnDelivery {
            window_start_us: 90,
            ..Default::default()
        };
        c.on_message(1, 50, &mut t); // before the window: not counted
        c.on_message(2, 100, &mut t);
        c.on_message(4, 300, &mut t);
        c.close_session(&pubs, None, &mut t);
        assert_eq!((t.expected, t.missing), (3, 1)); // seq 3 (sent 200) missing
        assert!(!t.delivered_to_all());

        // Closed at 1.5 s: the publish acked at 2 s is not expected, the two before are.
        let mut t = DeliveryTotals::default();
        let mut c = ConnDelivery {
            window_start_us: 90,
            ..Default::default()
        };
        c.on_message(2, 100, &mut t);
        c.on_message(3, 200, &mut t);
        c.close_session(&pubs, Some(1_500_000), &mut t);
        assert_eq!((t.expected, t.missing), (2, 0));
        // A closed session's window is spent: closing again adds nothing.
        c.close_session(&pubs, Some(1_300_000), &mut t);
        assert_eq!(t.expected, 2);
        assert!(t.delivered_to_all());
    }
}
