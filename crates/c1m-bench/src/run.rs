//! The state of one `c1m bench` run, as the coordinator builds it and the report, plot and
//! scenario sections read it: the plan it ran with ([`Run`]), worker figures merged into
//! [`Totals`], the per-second [`Sample`]s, and the [`Msg`]s that reach the coordinator's loop.
//! It lives apart from the coordinator so that the readers depend on the data, not on the
//! process that drives the run.

use crate::delivery::DeliveryTotals;
use crate::errors::{merge, ErrorCounts};
use crate::fleet::clock::ClockSample;
use crate::fleet::state::FleetRun;
use crate::http::{ServerStatus, StatusSource};
use crate::plan::Target;
use crate::publish::{PublishTarget, Published};
use crate::storm::{StormRun, StormTotals};
use crate::wire::WorkerReport;
use crate::BenchArgs;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// What reaches the coordinator's loop.
pub enum Msg {
    Report(Box<WorkerReport>),
    WorkerGone(usize),
    Published(Published),
    /// `--restart-cmd` finished: its exit code (or why it did not run) and its run time.
    RestartDone(Result<Option<i32>, String>, f64),
    /// An agent's connection broke before it said it was done (agent index, why).
    AgentLost(usize, String),
    /// An agent relayed every final report after the stop.
    AgentDone(usize),
    /// An agent answered a clock probe.
    AgentClock(usize, ClockSample),
}

/// The publisher speaks in [`Published`] outcomes; this lets it send them into the
/// coordinator's channel without knowing the coordinator's message type.
impl From<Published> for Msg {
    fn from(p: Published) -> Self {
        Msg::Published(p)
    }
}

/// Everything the report needs, merged over workers.
pub struct Totals {
    pub attempts: u64,
    pub connected: u64,
    pub subscribed: u64,
    pub closed: u64,
    pub online: u64,
    pub connecting: u64,
    /// Connections closed and reopened on purpose (`--churn-rate`).
    pub churned: u64,
    pub errors: ErrorCounts,
    pub delivery: DeliveryTotals,
    pub storm: StormTotals,
}

/// One point of the timeline (one per second).
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub online: u64,
    pub connecting: u64,
    /// Subscriptions confirmed per second in this interval.
    pub open_rate: f64,
    /// Errors so far.
    pub errors: u64,
    pub connect_p99_us: u64,
    pub delivery_p99_us: u64,
    /// Messages received in this interval.
    pub delivered: u64,
    /// Online connections per agent (a run with --agents), in --agents order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agents_online: Vec<u64>,
}

/// One run: its plan, the latest report of each worker, and what the coordinator measured.
pub struct Run {
    pub args: BenchArgs,
    pub target: Target,
    pub dst: SocketAddr,
    pub workers: usize,
    pub sources: Vec<IpAddr>,
    pub per_source: u64,
    /// IP_LOCAL_PORT_RANGE applied to every socket, if any.
    pub port_range: Option<(u16, u16)>,
    pub started_utc: String,
    pub command: String,
    pub latest: Vec<WorkerReport>,
    pub finals: Vec<bool>,
    pub connect_h: Histogram<u64>,
    pub subscribe_h: Histogram<u64>,
    /// `--churn-resume`: µs from each returning client's resubscription until a message sent
    /// after it arrived (its replay done).
    pub resume_caught_up_h: Histogram<u64>,
    pub delivery_h: Histogram<u64>,
    pub publish_h: Histogram<u64>,
    pub published: u64,
    pub publish_errors: ErrorCounts,
    pub timeline: Vec<Sample>,
    pub peak_online: u64,
    /// Fewest connections online during the hold (churn: how many were away at worst).
    pub hold_online_min: Option<u64>,
    pub ramp_secs: Option<f64>,
    pub elapsed_secs: f64,
    pub stop_reason: String,
    /// Where the server's figures are read (None: not an http target and no --status-url).
    pub status_source: Option<StatusSource>,
    /// `--server-every`: the server's `/status` over the run, and readings it did not answer.
    pub server_timeline: Vec<crate::server_samples::ServerSample>,
    pub server_unanswered: u64,
    pub server_before: Option<ServerStatus>,
    pub server_peak: Option<ServerStatus>,
    pub publishing: bool,
    pub publish_target: PublishTarget,
    /// When publishing started and was told to stop (for the publish rate).
    pub publish_window: (Option<Instant>, Option<Instant>),
    /// The coordinator's own PSS at start and at the end of the hold (bytes).
    pub coordinator_pss: (u64, u64),
    /// Things the reader of a report must know (e.g. a worker that never reported at the end).
    pub notes: Vec<String>,
    /// The restart of `--scenario reconnect-storm`.
    pub storm: Option<StormRun>,
    /// The agents of a run with --agents (None: local workers).
    pub fleet: Option<FleetRun>,
}

impl Run {
    pub fn totals(&self) -> Totals {
        let mut t = Totals {
            attempts: 0,
            connected: 0,
            subscribed: 0,
            closed: 0,
            online: 0,
            connecting: 0,
            churned: 0,
            errors: ErrorCounts::new(),
            delivery: DeliveryTotals::default(),
            storm: Default::default(),
        };
        for (i, r) in self.latest.iter().enumerate() {
            // A lost agent's windows were never settled: its deliveries show in its own line,
            // not in the totals that judge loss.
            let lost = self.fleet.as_ref().is_some_and(|f| f.is_lost_worker(i));
            t.attempts += r.attempts;
            t.connected += r.connected;
            t.subscribed += r.subscribed;
            t.closed += r.closed;
            t.online += r.online;
            t.connecting += r.connecting;
            t.churned += r.churned;
            merge(&mut t.errors, &r.errors);
            if !lost {
                t.delivery.add(&r.delivery);
            }
            t.storm.add(&r.storm);
        }
        t
    }
}
