//! Coordinator ⇄ worker messages. The coordinator passes a [`WorkerConfig`] as JSON in the
//! `C1M_BENCH_WORKER` environment variable, then writes commands on the worker's stdin
//! (`P ch seq sent_us ack_us` for each acknowledged publish, `R restart_us` when a reconnect
//! storm's restart begins, `S` to stop; EOF also stops).
//! The worker writes one JSON [`WorkerReport`] line to stdout per tick and a final one.

use crate::delivery::DeliveryTotals;
use crate::errors::ErrorCounts;
use crate::proto::Proto;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

pub const CONFIG_ENV: &str = "C1M_BENCH_WORKER";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub index: usize,
    pub parent_pid: u32,
    pub proto: Proto,
    pub dst: SocketAddr,
    /// Host header value.
    pub host: String,
    /// Subscribe path template with `{ch}` and `{i}`, e.g. `/sub/{ch}`.
    pub path_template: String,
    /// Extra subscribe header lines (each ending in CRLF), `{ch}` and `{i}` expanded.
    pub header_template: String,
    /// Channel base name; with `channels > 1` channel i is `{base}-{i}`.
    pub channel_base: String,
    pub channels: u32,
    /// Global index of this worker's first connection, and how many it opens.
    pub first_conn: u64,
    pub conns: u64,
    /// New connections per second for this worker (0 = as fast as in-flight allows).
    pub rate: f64,
    pub max_inflight: usize,
    pub connect_timeout_ms: u64,
    /// (min, max) reconnect backoff in ms; None = no reconnect.
    pub reconnect: Option<(u64, u64)>,
    /// Source addresses; connection g binds `sources[g % len]`. Empty = kernel's choice.
    pub sources: Vec<IpAddr>,
    pub port_range: Option<(u16, u16)>,
    pub tick_ms: u64,
    /// Wall-clock µs when the run was planned: a stamp sent before it is another run's
    /// message replayed by the server (nchan sends its channel history to new subscribers).
    #[serde(default)]
    pub run_start_us: u64,
    /// Online connections this worker closes and reopens per second once its ramp is done
    /// (`--churn-rate` split over workers); 0 = none.
    #[serde(default)]
    pub churn_rate: f64,
    /// Reconnect storm (`--scenario reconnect-storm`): delivery windows stay open across
    /// reconnects and drops after the ramp are timed (see [`crate::storm`]).
    #[serde(default)]
    pub storm: bool,
    /// `--churn-resume`: churned connections resubscribe with their last id and keep their
    /// delivery window open (the storm's accounting, without a restart reference).
    #[serde(default)]
    pub churn_resume: bool,
    /// The worker exits by itself this long after start even if never told to stop.
    pub max_runtime_ms: u64,
    /// How long a publish may wait for its answer (`--publish-timeout`): the publish logs
    /// keep entries past it (see [`crate::publish_log`]).
    #[serde(default = "default_publish_timeout_ms")]
    pub publish_timeout_ms: u64,
    /// Nice steps the worker adds to its own CPU priority at start (`--load-nice`).
    #[serde(default)]
    pub nice: i32,
    /// TLS (an https:// or wss:// target): the name to verify and the CA file.
    #[serde(default)]
    pub tls: Option<crate::tls::TlsTarget>,
    /// HTTP/2 SSE streams per connection (`--http2 --streams-per-conn`); 0: HTTP/1.1.
    #[serde(default)]
    pub h2_streams: u32,
}

/// `--publish-timeout`'s default, for a config written by a bench that did not pass it.
fn default_publish_timeout_ms() -> u64 {
    crate::plan::parse_duration(crate::DEFAULT_PUBLISH_TIMEOUT)
        .expect("the default publish timeout parses")
        .as_millis() as u64
}

impl WorkerConfig {
    /// Delivery windows stay open across reconnects: a message sent while a subscriber was
    /// away must still reach it (see [`crate::storm`]).
    pub fn keeps_windows(&self) -> bool {
        self.storm || self.churn_resume
    }

    pub fn channel_name(&self, ch: u32) -> String {
        channel_name(&self.channel_base, self.channels, ch)
    }
}

pub fn channel_name(base: &str, channels: u32, ch: u32) -> String {
    if channels <= 1 {
        base.to_string()
    } else {
        format!("{base}-{ch}")
    }
}

/// Cumulative counters of one worker plus histogram deltas since its previous report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    pub index: usize,
    pub pid: u32,
    pub last: bool,
    /// Connections started (including reconnects).
    pub attempts: u64,
    /// TCP connects that completed.
    pub connected: u64,
    /// Subscriptions the server confirmed (SSE 200, WS 101, TCP OK; poll/connect: connected).
    pub subscribed: u64,
    /// Connections that ended (error, timeout, server close).
    pub closed: u64,
    pub online: u64,
    pub connecting: u64,
    pub peak_online: u64,
    /// Connections closed on purpose by churn (and reopened at once); not errors.
    #[serde(default)]
    pub churned: u64,
    /// All of this worker's first attempts started and resolved (online or failed).
    pub ramp_done: bool,
    /// Wall-clock µs when `ramp_done` first became true (exact, not tick-rounded).
    #[serde(default)]
    pub ramp_done_us: u64,
    pub errors: ErrorCounts,
    pub delivery: DeliveryTotals,
    pub connect_hist: Vec<(u64, u64)>,
    pub subscribe_hist: Vec<(u64, u64)>,
    pub delivery_hist: Vec<(u64, u64)>,
    /// Reconnect storm counters (zero outside that scenario).
    #[serde(default)]
    pub storm: crate::storm::StormTotals,
    /// µs from the restart to each return online / catch-up (deltas, like the others).
    #[serde(default)]
    pub storm_back_hist: Vec<(u64, u64)>,
    #[serde(default)]
    pub storm_caught_up_hist: Vec<(u64, u64)>,
    pub pss_start: u64,
    pub pss_now: u64,
    pub rss_now: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_config_without_a_publish_timeout_gets_the_flags_default() {
        assert_eq!(super::default_publish_timeout_ms(), 30_000);
    }
}
