//! SSE heartbeats: a comment line to a stream that has sent nothing for an interval, so
//! proxies and clients see it is alive; a stream that sent other bytes is skipped.

use super::conn::{Kind, Sent, QUIET};
use super::Worker;
use c1m_proto::sse;
use std::ops::Range;
use std::rc::Rc;

impl Worker {
    /// A heartbeat to each idle SSE stream in `slots` (a slice of pass `pass` over the
    /// connections, see sweep.rs; a pass every half interval). Any bytes sent to a stream (its
    /// response head, a message, a replay, a gap: [`super::conn::WROTE`]) feed proxies' idle
    /// timers and the client's dead-connection check as well as a heartbeat would, and at 1M
    /// streams each heartbeat is a write and a client-side wake-up; so a stream gets one only
    /// at the second visit in a row that finds it sent nothing since the visit before
    /// ([`super::conn::QUIET`]): one interval of silence, and a silent stream one per interval.
    /// Visits half an interval apart (not one visit an interval that skips a stream written to
    /// since the last) keep a silent stream's gap after its last byte at most 1.5 intervals
    /// while the visits are evenly spaced and 2 when the worker's slot count moves them
    /// (docs/PROTOCOL.md), instead of 2 and 3.
    pub(super) fn send_heartbeats(&mut self, slots: Range<usize>, pass: u64) {
        if slots.is_empty() {
            return;
        }
        let beat: Rc<[u8]> = Rc::from(sse::HEARTBEAT);
        let max = self.cfg.max_unsent;
        let mut failed = Vec::new();
        for idx in slots {
            let Some(mut conn) = self.conns.get_mut(idx) else {
                continue;
            };
            if conn.kind != Kind::Sse {
                continue;
            }
            // Owed bytes: not idle either (and a heartbeat would only queue behind them).
            if conn.take_wrote() || conn.has_out() {
                conn.edge &= !QUIET;
                // Counted in every other pass: one skipped heartbeat per interval a busy
                // stream is visited through, as many as a silent one is sent.
                self.counters.heartbeats_skipped += pass % 2;
                continue;
            }
            if conn.edge & QUIET == 0 {
                conn.edge |= QUIET;
                continue;
            }
            conn.edge &= !QUIET;
            if conn.send_shared(&beat, max) != Sent::Done {
                failed.push(idx);
                continue;
            }
            // The heartbeat itself is not other traffic.
            conn.take_wrote();
            self.counters.heartbeats_sent += 1;
        }
        for idx in failed {
            self.close(idx);
        }
    }
}
