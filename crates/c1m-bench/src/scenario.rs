//! Named run shapes (`--scenario`) with their own report section: each sets the defaults its
//! shape needs, checks the options that would make it something else, and reads the figures
//! that answer its question out of the merged run.
//!
//! - `fanout`: one channel, N subscribers, one message at a time (`--publish-every`, default
//!   1 s): how long until every subscriber has each message (fan-out p50/p99/max), loss.
//! - `channels`: K channels × k subscribers, publishing round-robin as fast as the server
//!   acknowledges (`--publish-rate` unbounded unless given): publish rate, ack and delivery
//!   percentiles, loss.
//! - `churn`: N held while `--churn-rate` of them per second (default 1 % of N) are closed and
//!   reopened at once, publishing every second: how many were away at worst, reopen latency
//!   (subscribe percentiles), loss across reopens.
//! - `reconnect-storm`: N held while the server is restarted (`--restart-cmd`, or by hand):
//!   drops, time until all are back and caught up, resumes, gaps, loss and duplicates across
//!   the restart ([`crate::storm`]).

use crate::hist::percentiles;
use crate::human::{fmt_us, thousands};
use crate::run::{Run, Totals};
use crate::BenchOptions;
use anyhow::bail;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// One channel, N subscribers; fan-out latency of each message.
    Fanout,
    /// K channels × k subscribers, round-robin publishing as fast as acks come.
    Channels,
    /// N held while a rate of them is closed and reopened.
    Churn,
    /// N held while the server is restarted under them; time until all are back and caught up.
    ReconnectStorm,
}

/// Publish rate meaning "as fast as acknowledgements come" (the publisher never sleeps).
pub const AS_FAST_AS_ACKS: f64 = 1e6;

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Fanout => "fanout",
            Scenario::Channels => "channels",
            Scenario::Churn => "churn",
            Scenario::ReconnectStorm => "reconnect-storm",
        }
    }

    /// Fills in this scenario's defaults and refuses options that contradict it.
    pub fn apply(self, o: &mut BenchOptions) -> anyhow::Result<()> {
        match self {
            Scenario::Fanout => {
                if o.channels != 1 {
                    bail!("--scenario fanout is one channel (drop --channels)");
                }
                if o.publish_rate.is_some() {
                    bail!(
                        "--scenario fanout publishes with --publish-every (one message at a time)"
                    );
                }
                o.publish_every.get_or_insert(Duration::from_secs(1));
            }
            Scenario::Channels => {
                if o.channels < 2 {
                    bail!("--scenario channels needs --channels K (K ≥ 2)");
                }
                if o.publish_every.is_some() {
                    bail!("--scenario channels publishes round-robin (--publish-rate), not --publish-every");
                }
                o.publish_rate.get_or_insert(AS_FAST_AS_ACKS);
            }
            Scenario::Churn => {
                if o.churn_rate == 0.0 {
                    o.churn_rate = (o.conns as f64 / 100.0).max(1.0);
                }
                if o.publish_every.is_none() && o.publish_rate.is_none() {
                    o.publish_every = Some(Duration::from_secs(1));
                }
            }
            Scenario::ReconnectStorm => {
                if o.churn_rate != 0.0 {
                    bail!("--scenario reconnect-storm drops connections by restarting the server, not by --churn-rate");
                }
                if o.proto() == crate::proto::Proto::Connect {
                    bail!("--scenario reconnect-storm needs a subscribing protocol (not connect)");
                }
                o.reconnect = true;
                if o.publish_every.is_none() && o.publish_rate.is_none() {
                    o.publish_every = Some(Duration::from_millis(200));
                }
                let after = *o.restart_after.get_or_insert(o.hold / 3);
                if after >= o.hold {
                    bail!("--restart-after must come before the end of --hold");
                }
            }
        }
        Ok(())
    }

    /// The scenario's figures for the JSON report.
    pub fn json(self, run: &Run, t: &Totals) -> Value {
        let d = &t.delivery;
        let delivery = percentiles(&run.delivery_h);
        let ack = percentiles(&run.publish_h);
        let loss = (d.expected > 0).then(|| d.missing as f64 / d.expected as f64);
        match self {
            Scenario::Fanout => json!({
                "name": "fanout",
                "subscribers": run.peak_online,
                "messages": run.published,
                "fanout_p50_us": delivery.p50_us,
                "fanout_p99_us": delivery.p99_us,
                "fanout_max_us": delivery.max_us,
                "expected": d.expected,
                "missing": d.missing,
                "loss": loss,
            }),
            Scenario::Channels => json!({
                "name": "channels",
                "channels": run.args.channels,
                "subscribers_per_channel": run.args.conns as f64 / f64::from(run.args.channels),
                "published": run.published,
                "publish_rate_per_s": publish_rate(run),
                "ack_p50_us": ack.p50_us,
                "ack_p99_us": ack.p99_us,
                "delivery_p50_us": delivery.p50_us,
                "delivery_p99_us": delivery.p99_us,
                "expected": d.expected,
                "missing": d.missing,
                "loss": loss,
            }),
            Scenario::Churn => {
                let sub = percentiles(&run.subscribe_h);
                json!({
                    "name": "churn",
                    "held": run.args.conns,
                    "churn_rate_per_s": run.args.churn_rate,
                    "churned": t.churned,
                    "online_min_during_hold": run.hold_online_min,
                    "subscribe_p50_us": sub.p50_us,
                    "subscribe_p99_us": sub.p99_us,
                    "expected": d.expected,
                    "missing": d.missing,
                    "duplicates": d.duplicates,
                    "reordered": d.reordered,
                    "loss": loss,
                    "resume": run.args.churn_resume.then(|| resume_json(run, &t.storm)),
                })
            }
            Scenario::ReconnectStorm => storm_figures(run, t).map_or(Value::Null, |f| f.json()),
        }
    }

    /// The scenario's lines in the text summary.
    pub fn text(self, run: &Run, t: &Totals) -> String {
        let d = &t.delivery;
        let loss = if d.expected > 0 {
            format!("{:.4} %", 100.0 * d.missing as f64 / d.expected as f64)
        } else {
            "n/a (nothing expected)".into()
        };
        match self {
            Scenario::Fanout => {
                let p = percentiles(&run.delivery_h);
                format!(
                    "fanout     {} subscribers · {} messages · fan-out p50 {} · p99 {} · max {} · loss {loss}\n",
                    thousands(run.peak_online),
                    thousands(run.published),
                    fmt_us(p.p50_us),
                    fmt_us(p.p99_us),
                    fmt_us(p.max_us),
                )
            }
            Scenario::Channels => {
                let (ack, del) = (percentiles(&run.publish_h), percentiles(&run.delivery_h));
                format!(
                    "channels   {} channels × {:.1} subscribers · publish {}/s acked · ack p50 {} p99 {} · delivery p50 {} p99 {} · loss {loss}\n",
                    thousands(u64::from(run.args.channels)),
                    run.args.conns as f64 / f64::from(run.args.channels),
                    thousands(publish_rate(run).unwrap_or(0.0).round() as u64),
                    fmt_us(ack.p50_us),
                    fmt_us(ack.p99_us),
                    fmt_us(del.p50_us),
                    fmt_us(del.p99_us),
                )
            }
            Scenario::Churn => {
                let sub = percentiles(&run.subscribe_h);
                format!(
                    "churn      {} held · {}/s closed and reopened · churned {} · online at worst {} · subscribe p50 {} p99 {} (ramp and reopens) · loss {loss}\n",
                    thousands(run.args.conns),
                    run.args.churn_rate,
                    thousands(t.churned),
                    run.hold_online_min.map_or("n/a".into(), thousands),
                    fmt_us(sub.p50_us),
                    fmt_us(sub.p99_us),
                ) + &if run.args.churn_resume {
                    resume_text(run, &t.storm, d)
                } else {
                    String::new()
                }
            }
            Scenario::ReconnectStorm => storm_figures(run, t).map_or(String::new(), |f| f.text()),
        }
    }
}

/// `--churn-resume`: how the clients that left came back (see [`crate::storm`] for what
/// each count means; its back and caught-up times count from each client's resubscription).
fn resume_json(run: &Run, s: &crate::storm::StormTotals) -> Value {
    let caught_up = percentiles(&run.resume_caught_up_h);
    json!({
        "left": s.dropped,
        "back": s.back,
        "caught_up": s.caught_up,
        "resumed_with_replay": s.resumed_with_replay,
        "replayed": s.replayed,
        "gapped": s.gapped,
        "reconnects_without_id": s.reconnects_without_id,
        "still_away_at_end": s.still_away,
        "not_caught_up_at_end": s.not_caught_up,
        "caught_up_p50_us": caught_up.p50_us,
        "caught_up_p99_us": caught_up.p99_us,
    })
}

fn resume_text(
    run: &Run,
    s: &crate::storm::StormTotals,
    d: &crate::delivery::DeliveryTotals,
) -> String {
    let caught_up = percentiles(&run.resume_caught_up_h);
    format!(
        "resume     {} left and came back with their last id · {} back · {} caught up (p99 {}) · {} resumed with a replay ({} messages) · {} gap notices · at the end {} away, {} not caught up · duplicates {} · reordered {}\n",
        thousands(s.dropped),
        thousands(s.back),
        thousands(s.caught_up),
        fmt_us(caught_up.p99_us),
        thousands(s.resumed_with_replay),
        thousands(s.replayed),
        thousands(s.gapped),
        thousands(s.still_away),
        thousands(s.not_caught_up),
        thousands(d.duplicates),
        thousands(d.reordered),
    )
}

/// The reconnect storm's figures, when this run is one.
pub fn storm_figures<'a>(run: &'a Run, t: &'a Totals) -> Option<crate::storm::StormFigures<'a>> {
    Some(crate::storm::StormFigures {
        storm: run.storm.as_ref()?,
        totals: &t.storm,
        delivery: &t.delivery,
        publish_errors_total: run.publish_errors.values().sum(),
        has_cmd: run.args.restart_cmd.is_some(),
    })
}

/// Acknowledged publishes per second over the publishing window.
pub fn publish_rate(run: &Run) -> Option<f64> {
    let (Some(a), Some(b)) = run.publish_window else {
        return None;
    };
    let secs = b.saturating_duration_since(a).as_secs_f64();
    (secs > 0.0).then(|| run.published as f64 / secs)
}
