//! The `reconnect-storm` scenario: the server is restarted under N subscribers (by
//! `--restart-cmd`, or by hand while bench waits); bench reports how many connections dropped,
//! how long until each was back online and caught up, how many resumed with a replay, how many
//! got gap notices, and loss / duplicates across the restart.
//!
//! Owns: the per-connection storm flags and counters the workers keep ([`StormTotals`]), the
//! coordinator's restart state ([`StormRun`]), the scenario's report section and its verdict.
//!
//! How it measures:
//! - Every worker takes as its *restart reference* the earliest of: the `R <µs>` line the
//!   coordinator sends when it starts `--restart-cmd`, and the first online connection it sees
//!   drop after its ramp. Back-online and caught-up times count from there.
//! - A subscriber's delivery window does not close when it drops: it stays open from its first
//!   subscription to the end of the run, so every message acknowledged while it was away must
//!   still reach it (by a resume replay) or counts as lost. A server without resume (no ids)
//!   therefore shows its outage as loss; nothing unverified counts as delivered.
//! - Back: the subscription is confirmed again. Caught up: after coming back, the first message
//!   stamped after the resubscription request was sent arrived (a resuming server replays what
//!   it holds first, so that message means the replay is done). Replayed: a fresh message the
//!   server acknowledged before the resubscription request was sent, received after it (it
//!   cannot have come live; one acknowledged during the handshake may have, and is not
//!   counted).

use crate::hist::{percentiles, Percentiles};
use crate::human::{fmt_us, thousands};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connection flag: dropped while online after the ramp; not back yet.
pub const DROPPED: u8 = 1;
/// Connection flag: back online after a drop, not caught up yet.
pub const BACK: u8 = 2;
/// Connection flag: this drop's replay was counted.
pub const REPLAY_COUNTED: u8 = 4;
/// Connection flag: this drop's gap was counted.
pub const GAP_COUNTED: u8 = 8;
/// Connection flag: the last reconnection carried no id (the server sent none), so nothing it
/// receives is a replay: a message acknowledged before its resubscription but fanned out after
/// it arrives live.
pub const NO_ID: u8 = 16;

/// Worker-wide storm counters (summed over workers by the coordinator).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StormTotals {
    /// Online connections that dropped after the ramp.
    pub dropped: u64,
    /// Of those drops, how many were followed by a confirmed subscription again.
    pub back: u64,
    /// Back connections that received a message sent after their reconnection.
    pub caught_up: u64,
    /// Back connections that received at least one message sent while they were away.
    pub resumed_with_replay: u64,
    /// Messages received that way (replayed by the server from its history).
    pub replayed: u64,
    /// Back connections that received a gap notice.
    pub gapped: u64,
    /// Reconnections sent without a resume position because the server had sent no message id:
    /// their resume cannot be verified, and what they missed counts as lost.
    pub reconnects_without_id: u64,
    /// At the end of the run: connections dropped and not back online (final report only).
    #[serde(default)]
    pub still_away: u64,
    /// At the end of the run: back online but never caught up (final report only).
    #[serde(default)]
    pub not_caught_up: u64,
}

impl StormTotals {
    pub fn add(&mut self, o: &StormTotals) {
        self.dropped += o.dropped;
        self.back += o.back;
        self.caught_up += o.caught_up;
        self.resumed_with_replay += o.resumed_with_replay;
        self.replayed += o.replayed;
        self.gapped += o.gapped;
        self.reconnects_without_id += o.reconnects_without_id;
        self.still_away += o.still_away;
        self.not_caught_up += o.not_caught_up;
    }
}

/// What the coordinator knows about the restart.
pub struct StormRun {
    /// From the start of the hold until the restart (`--restart-after`).
    pub after: Duration,
    /// When `--restart-cmd` started (or when bench began waiting for a restart by hand).
    pub started: Option<Instant>,
    /// `--restart-cmd`'s result: exit code (None = killed by a signal, or could not start,
    /// with the reason) and how long it ran.
    pub cmd_result: Option<(Result<Option<i32>, String>, f64)>,
    /// Pid of the running `--restart-cmd` shell (0 = none yet), to end it with the run.
    pub cmd_pid: Arc<AtomicU32>,
    /// Publish errors counted before the restart (the outage's are the rest).
    pub publish_errors_before: u64,
    /// µs from the restart to each connection's return / catch-up.
    pub back_h: Histogram<u64>,
    pub caught_up_h: Histogram<u64>,
}

impl StormRun {
    pub fn new(after: Duration) -> Self {
        StormRun {
            after,
            started: None,
            cmd_result: None,
            cmd_pid: Arc::default(),
            publish_errors_before: 0,
            back_h: crate::hist::new_hist(),
            caught_up_h: crate::hist::new_hist(),
        }
    }
}

/// The figures of the storm section, shared by the JSON and text reports and the verdict.
pub struct StormFigures<'a> {
    pub storm: &'a StormRun,
    pub totals: &'a StormTotals,
    pub delivery: &'a crate::delivery::DeliveryTotals,
    pub publish_errors_total: u64,
    pub has_cmd: bool,
}

impl StormFigures<'_> {
    fn publish_errors_during(&self) -> u64 {
        self.publish_errors_total
            .saturating_sub(self.storm.publish_errors_before)
    }

    fn cmd_ok(&self) -> bool {
        !self.has_cmd || matches!(self.storm.cmd_result, Some((Ok(Some(0)), _)))
    }

    /// The restart happened, its command succeeded, every reconnection could resume (the
    /// server gave ids), and at the end every dropped subscriber was back and caught up. (Loss,
    /// duplicates and gaps are judged by the delivery verdict.)
    pub fn all_back(&self) -> bool {
        let t = self.totals;
        self.cmd_ok()
            && t.dropped > 0
            && t.reconnects_without_id == 0
            && t.still_away == 0
            && t.not_caught_up == 0
    }

    pub fn json(&self) -> Value {
        let t = self.totals;
        let (back, up) = (
            percentiles(&self.storm.back_h),
            percentiles(&self.storm.caught_up_h),
        );
        let cmd = self.storm.cmd_result.as_ref().map(|(r, secs)| match r {
            Ok(code) => json!({"exit_code": code, "secs": secs}),
            Err(e) => json!({"error": e, "secs": secs}),
        });
        json!({
            "name": "reconnect-storm",
            "restart_after_s": self.storm.after.as_secs_f64(),
            "restart_cmd": cmd,
            "dropped": t.dropped,
            "back_online": t.back,
            "back_p50_us": back.p50_us,
            "back_p99_us": back.p99_us,
            "back_max_us": back.max_us,
            "still_away": t.still_away,
            "caught_up": t.caught_up,
            "not_caught_up": t.not_caught_up,
            "caught_up_p50_us": up.p50_us,
            "caught_up_p99_us": up.p99_us,
            "caught_up_max_us": up.max_us,
            "resumed_with_replay": t.resumed_with_replay,
            "replayed_messages": t.replayed,
            "gapped": t.gapped,
            "gap_notices": self.delivery.server_gaps,
            "reconnects_without_id": t.reconnects_without_id,
            "expected": self.delivery.expected,
            "lost": self.delivery.missing,
            "duplicates": self.delivery.duplicates,
            "publish_errors_during_outage": self.publish_errors_during(),
            "all_back_and_caught_up": self.all_back(),
        })
    }

    pub fn text(&self) -> String {
        let t = self.totals;
        let p = |h: &Percentiles| {
            format!(
                "p50 {} · p99 {} · max {}",
                fmt_us(h.p50_us),
                fmt_us(h.p99_us),
                fmt_us(h.max_us)
            )
        };
        let cmd = match &self.storm.cmd_result {
            None if self.has_cmd => "--restart-cmd did not finish".to_string(),
            None => "restarted by hand".to_string(),
            Some((Ok(Some(c)), secs)) => format!("--restart-cmd exit {c} after {secs:.2}s"),
            Some((Ok(None), secs)) => format!("--restart-cmd killed by a signal after {secs:.2}s"),
            Some((Err(e), _)) => format!("--restart-cmd failed: {e}"),
        };
        let mut s = format!(
            "storm      {cmd} · dropped {} · back {} ({} from the restart; {} still away) · caught up {} ({}; {} not)\n",
            thousands(t.dropped),
            thousands(t.back),
            p(&percentiles(&self.storm.back_h)),
            thousands(t.still_away),
            thousands(t.caught_up),
            p(&percentiles(&self.storm.caught_up_h)),
            thousands(t.not_caught_up),
        );
        s.push_str(&format!(
            "storm      resumed with replay {} ({} messages) · gapped {} ({} gap notices) · lost {} of {} · duplicates {} · publish errors during the outage {}\n",
            thousands(t.resumed_with_replay),
            thousands(t.replayed),
            thousands(t.gapped),
            thousands(self.delivery.server_gaps),
            thousands(self.delivery.missing),
            thousands(self.delivery.expected),
            thousands(self.delivery.duplicates),
            thousands(self.publish_errors_during()),
        ));
        if t.dropped == 0 {
            s.push_str(
                "storm      NOT VERIFIED: no connection dropped (was the server restarted?)\n",
            );
        }
        if t.reconnects_without_id > 0 {
            s.push_str(&format!(
                "storm      resume NOT VERIFIABLE for {} reconnects: the server sent no message ids; what they missed counts as lost\n",
                thousands(t.reconnects_without_id)
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures<'a>(
        storm: &'a StormRun,
        t: &'a StormTotals,
        d: &'a crate::delivery::DeliveryTotals,
        has_cmd: bool,
    ) -> StormFigures<'a> {
        StormFigures {
            storm,
            totals: t,
            delivery: d,
            publish_errors_total: 0,
            has_cmd,
        }
    }

    #[test]
    fn verdict_needs_a_drop_every_return_and_a_good_command() {
        let d = crate::delivery::DeliveryTotals::default();
        let mut storm = StormRun::new(Duration::from_secs(1));
        let none = StormTotals::default();
        assert!(!figures(&storm, &none, &d, false).all_back(), "no drop");
        let t = StormTotals {
            dropped: 10,
            back: 10,
            caught_up: 10,
            ..Default::default()
        };
        assert!(figures(&storm, &t, &d, false).all_back());
        assert!(!figures(&storm, &t, &d, true).all_back(), "cmd never ran");
        storm.cmd_result = Some((Ok(Some(0)), 0.1));
        assert!(figures(&storm, &t, &d, true).all_back());
        storm.cmd_result = Some((Ok(Some(1)), 0.1));
        assert!(!figures(&storm, &t, &d, true).all_back());
        let behind = StormTotals {
            not_caught_up: 1,
            ..t.clone()
        };
        assert!(!figures(&storm, &behind, &d, false).all_back());
        let away = StormTotals {
            still_away: 1,
            ..t.clone()
        };
        assert!(!figures(&storm, &away, &d, false).all_back());
        let no_ids = StormTotals {
            reconnects_without_id: 3,
            ..t.clone()
        };
        assert!(
            !figures(&storm, &no_ids, &d, false).all_back(),
            "resume unverifiable"
        );
    }
}
