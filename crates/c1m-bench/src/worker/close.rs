//! Ending attempts: connect and subscribe timeouts, churn (closing random online connections
//! on schedule), closing a connection with its accounting settled, and what comes next for
//! it: a reconnect after backoff with jitter, an immediate reopen, or a freed slot.

use super::conn::State;
use super::Worker;
use crate::delivery::ConnDelivery;
use crate::errors::bump;
use crate::payload::now_us;
use crate::proto::Phase;
use crate::storm;
use std::cmp::Reverse;

impl Worker {
    pub(super) fn expire_timeouts(&mut self) {
        let now = self.mono_us();
        while let Some(&(deadline, key, gen)) = self.timeouts.front() {
            if deadline > now {
                break;
            }
            self.timeouts.pop_front();
            let state = match self.conns.get(key) {
                Some(c) if c.gen == gen && c.stream.is_some() => c.state,
                _ => continue,
            };
            match state {
                State::Connecting => self.end(key, Some("ETIMEDOUT (connect timeout)".into())),
                State::Subscribing => self.end(key, Some("subscribe timeout".into())),
                _ => {}
            }
        }
    }

    /// Ends the current attempt of `key`: closes the socket, settles delivery accounting,
    /// counts the error, and schedules a reconnect or frees the slot.
    pub(super) fn end(&mut self, key: usize, kind: Option<String>) {
        self.end_and_reopen(key, kind, false);
    }

    /// [`Self::end`], or with `reopen_now` (churn) a reconnect due at once whatever
    /// `--reconnect` says.
    pub(super) fn end_and_reopen(&mut self, key: usize, kind: Option<String>, reopen_now: bool) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        if let Some(mut s) = c.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        c.tls = None;
        let was_online = c.state == State::Online;
        match c.state {
            State::Online => self.r.online = self.r.online.saturating_sub(1),
            State::Connecting | State::Subscribing => {
                self.inflight = self.inflight.saturating_sub(1);
                self.r.connecting = self.r.connecting.saturating_sub(1);
            }
            State::Backoff => return,
        }
        self.r.closed += 1;
        if c.first {
            c.first = false;
            self.first_unresolved = self.first_unresolved.saturating_sub(1);
        }
        let resumes = reopen_now && self.cfg.churn_resume;
        if self.cfg.keeps_windows() {
            // The window stays open until the run ends: what is sent while this connection is
            // away must still reach it (settled in finish). A storm's drops are the server's
            // doing; a resuming churn's are bench's own.
            if was_online && self.churn_from.is_some() && (!reopen_now || resumes) {
                if self.cfg.storm {
                    self.storm_ref_us.get_or_insert(now_us());
                }
                c.storm = storm::DROPPED;
                self.r.storm.dropped += 1;
            }
        } else {
            let channels = self.cfg.channels;
            c.settle(
                &self.publishes,
                channels,
                Some(now_us()),
                &mut self.r.delivery,
            );
        }
        c.h2_ended(reopen_now && !resumes);
        c.pending.clear();
        c.out.clear();
        c.phase = Phase::Head;
        if let Some(kind) = kind {
            bump(&mut self.r.errors, &kind);
        }
        if reopen_now && !self.stop {
            // A new client, not a resume: no last id, and sequence tracking starts over, so a
            // server that replays its history to new subscribers (nchan) is not counted as
            // duplicating (the replay was sent before the new window: received, not expected).
            // A resuming client keeps both: it asks for what followed its last id.
            if !resumes {
                c.delivery = ConnDelivery::default();
                c.last_id = 0;
            }
            c.state = State::Backoff;
            let (due, gen) = (self.epoch.elapsed().as_micros() as u64, c.gen);
            self.backoff.push(Reverse((due, key, gen)));
            return;
        }
        match self.cfg.reconnect {
            Some((min_ms, max_ms)) if !self.stop => {
                c.state = State::Backoff;
                c.attempts = c.attempts.saturating_add(1);
                let exp = min_ms.saturating_mul(1u64 << u32::from(c.attempts.min(20) - 1));
                let cap = exp.min(max_ms).max(1);
                // Equal jitter: half fixed, half random, so a storm spreads but never stalls.
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let delay_ms = cap / 2 + self.rng % (cap / 2 + 1);
                let due = self.epoch.elapsed().as_micros() as u64 + delay_ms * 1000;
                let gen = c.gen;
                self.backoff.push(Reverse((due, key, gen)));
            }
            _ => {
                self.conns.remove(key);
            }
        }
    }

    /// Churn: closes online connections, picked at random, at `churn_rate` per second since the
    /// ramp ended, each reopened at once as a new client (no resume, a new delivery window).
    pub(super) fn churn_due(&mut self) {
        let Some(from) = self.churn_from else {
            return;
        };
        if self.cfg.churn_rate <= 0.0 || self.stop {
            return;
        }
        let due = (from.elapsed().as_secs_f64() * self.cfg.churn_rate) as u64;
        while self.r.churned < due {
            let Some(key) = self.random_online() else {
                return;
            };
            self.r.churned += 1;
            self.end_and_reopen(key, None, true);
        }
    }

    /// An online connection picked at random (bounded probing; None when none is found). With
    /// `--churn-resume`, one that holds a resume position: a client that has received no
    /// message has no id to resume from, and what is published while it is away could not
    /// reach it (SSE and WebSocket tell a new subscriber no id).
    pub(super) fn random_online(&mut self) -> Option<usize> {
        let needs_id = self.cfg.churn_resume;
        let cap = self.conns.capacity().max(1);
        for _ in 0..64 {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let key = (self.rng % cap as u64) as usize;
            if matches!(self.conns.get(key),
                Some(c) if c.state == State::Online && (!needs_id || c.last_id != 0))
            {
                return Some(key);
            }
        }
        None
    }
}
