//! One channel's acknowledged publishes as a bench worker keeps them for delivery accounting:
//! how many there were in all, and the recent ones (send and acknowledgement µs) in send order.
//!
//! A connection's expected count is the number of publishes sent inside its window (see
//! [`crate::delivery`]). Keeping every publish of an hour's soak costs 16 B per publish in
//! every worker; instead the worker pins each window's position in the log (how many publishes
//! were sent before it opened) once every publish sent before it has been answered, and then
//! drops entries older than every unpinned window. Memory is bounded by the publish rate times
//! the retention, not by the run's length.

/// A connection's window whose position in the log is not fixed yet.
pub const NOT_PINNED: u64 = u64::MAX;

#[derive(Debug, Default, Clone)]
pub struct PublishLog {
    /// Entries counted but no longer held: every one was sent before `floor_us`.
    dropped: u64,
    /// Entries sent before this were dropped; a window that opens before it must be pinned.
    floor_us: u64,
    /// Held entries (sent µs, ack µs), in send order.
    recent: Vec<(u64, u64)>,
}

impl PublishLog {
    /// Records one acknowledged publish.
    pub fn push(&mut self, sent_us: u64, ack_us: u64) {
        if sent_us < self.floor_us {
            // Answered after its retention: it counts as sent before every unpinned window
            // (true) and inside every pinned one (perhaps not: reported missing, never hidden).
            self.dropped += 1;
            return;
        }
        self.recent.push((sent_us, ack_us));
    }

    /// The held entries, in send order (a storm looks up a replayed message's ack time here).
    pub fn recent(&self) -> &[(u64, u64)] {
        &self.recent
    }

    /// How many publishes were sent before `t_us`; exact for `t_us` at or above the floor.
    pub fn sent_before(&self, t_us: u64) -> u64 {
        debug_assert!(
            t_us >= self.floor_us,
            "window opened below the log's floor unpinned"
        );
        self.dropped + self.recent.partition_point(|&(sent, _)| sent < t_us) as u64
    }

    /// Publishes after the first `before` that a window had to receive: all of them while the
    /// connection is online at the end (`closed_at_us` None), else those acknowledged at least
    /// `grace_us` before it closed. Dropped entries were acknowledged long before any close
    /// that can still settle against them.
    pub fn expected_after(&self, before: u64, closed_at_us: Option<u64>, grace_us: u64) -> u64 {
        let old = self.dropped.saturating_sub(before);
        let start = (before.saturating_sub(self.dropped) as usize).min(self.recent.len());
        let held = self.recent[start..]
            .iter()
            .filter(|&&(_, ack)| closed_at_us.is_none_or(|c| ack + grace_us <= c))
            .count() as u64;
        old + held
    }

    /// Drops the entries sent before `t_us`. Every window that opened before `t_us` must be
    /// pinned first ([`PublishLog::sent_before`] is not exact below the floor).
    pub fn drop_sent_before(&mut self, t_us: u64) {
        let n = self.recent.partition_point(|&(sent, _)| sent < t_us);
        self.recent.drain(..n);
        self.dropped += n as u64;
        self.floor_us = self.floor_us.max(t_us);
        if self.recent.capacity() > 2 * self.recent.len() + 64 {
            self.recent.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count every window expects, from the whole list (what the log replaces).
    fn expected_in_full(all: &[(u64, u64)], ws: u64, closed: Option<u64>, grace: u64) -> u64 {
        all.iter()
            .filter(|&&(s, a)| s >= ws && closed.is_none_or(|c| a + grace <= c))
            .count() as u64
    }

    #[test]
    fn an_hour_of_publishes_is_held_only_for_the_retention_and_counts_stay_exact() {
        // One publish a second on one channel for an hour, each answered 5 ms later; a window
        // opens every 7 s and closes 100 s later (or stays open to the end for every 5th).
        // Every 10 s the windows older than 60 s are pinned and older entries dropped.
        let mut log = PublishLog::default();
        let mut all = Vec::new();
        let mut windows: Vec<(u64, u64, Option<u64>)> = Vec::new(); // (ws, pinned, closed)
        let s = 1_000_000u64;
        let grace = s;
        let mut most_held = 0;
        for sec in 1..=3600u64 {
            let now = sec * s;
            log.push(now - 5_000, now);
            all.push((now - 5_000, now));
            if sec.is_multiple_of(7) {
                windows.push((now - 2_500, NOT_PINNED, None));
            }
            for w in windows.iter_mut().filter(|w| w.2.is_none()) {
                if w.0 + 100 * s <= now && !(w.0 / s).is_multiple_of(5) {
                    let before = if w.1 == NOT_PINNED {
                        log.sent_before(w.0)
                    } else {
                        w.1
                    };
                    let got = log.expected_after(before, Some(now), grace);
                    assert_eq!(got, expected_in_full(&all, w.0, Some(now), grace), "{w:?}");
                    w.2 = Some(now);
                }
            }
            if sec.is_multiple_of(10) {
                let cutoff = now.saturating_sub(60 * s);
                for w in windows
                    .iter_mut()
                    .filter(|w| w.1 == NOT_PINNED && w.0 < cutoff)
                {
                    w.1 = log.sent_before(w.0);
                }
                log.drop_sent_before(cutoff);
            }
            most_held = most_held.max(log.recent().len());
        }
        for w in windows.iter().filter(|w| w.2.is_none()) {
            let before = if w.1 == NOT_PINNED {
                log.sent_before(w.0)
            } else {
                w.1
            };
            assert_eq!(
                log.expected_after(before, None, grace),
                expected_in_full(&all, w.0, None, grace)
            );
        }
        // 60 s of retention plus up to 10 s between trims, at one publish a second.
        assert!(most_held <= 71, "held {most_held} of {}", all.len());
        assert_eq!(log.sent_before(3600 * s + 1), 3600);
    }

    #[test]
    fn a_publish_answered_after_its_retention_counts_inside_pinned_windows() {
        let mut log = PublishLog::default();
        log.push(100, 110);
        log.push(200, 210);
        let pinned = log.sent_before(150); // a window opened at 150: one publish before it
        log.drop_sent_before(300);
        log.push(120, 5_000); // sent before the window, answered long after
        log.push(400, 410);
        assert_eq!(log.sent_before(350), 3, "before an unpinned window at 350");
        // The late one is expected by the pinned window: an over-count, reported as missing.
        assert_eq!(log.expected_after(pinned, None, 0), 3);
    }
}
