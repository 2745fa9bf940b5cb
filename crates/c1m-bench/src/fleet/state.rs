//! What a fleet run knows about its agents, beside the merged run: each agent's share (worker
//! index range, connections, sources), its reported limits and plan warnings, its clock offset
//! at start and end, whether it was lost mid-run, and its own histograms (merged from the same
//! pairs as the totals, bucket by bucket).

use super::clock::ClockSample;
use super::limits::AgentLimits;
use crate::delivery::DeliveryTotals;
use crate::hist::{add_pairs, new_hist};
use crate::wire::WorkerReport;
use hdrhistogram::Histogram;
use std::net::IpAddr;
use std::ops::Range;
use std::time::Instant;

pub struct FleetRun {
    pub agents: Vec<AgentRun>,
    /// When the coordinator told the agents to start (the run's clock zero).
    pub t0: Instant,
}

pub struct AgentRun {
    /// As given in `--agents`.
    pub spec: String,
    /// The agent's host name.
    pub host: String,
    pub limits: AgentLimits,
    pub warnings: Vec<String>,
    /// Global indices of its workers.
    pub workers: Range<usize>,
    pub first_conn: u64,
    pub conns: u64,
    pub sources: Vec<IpAddr>,
    pub clock_start: ClockSample,
    pub clock_end: Option<ClockSample>,
    pub lost: Option<AgentLoss>,
    /// It said `Done` after the stop: every final report it had was relayed.
    pub done: bool,
    pub connect_h: Histogram<u64>,
    pub subscribe_h: Histogram<u64>,
    pub delivery_h: Histogram<u64>,
}

/// An agent whose connection broke before it said `Done`.
pub struct AgentLoss {
    pub at: Instant,
    pub reason: String,
    /// Its connections online at its last report: counted as "agent lost", not as losses.
    pub online: u64,
}

/// One agent's figures summed over its workers' latest reports.
#[derive(Debug, Default, Clone)]
pub struct AgentTotals {
    pub subscribed: u64,
    pub online: u64,
    pub errors: u64,
    pub delivery: DeliveryTotals,
}

impl AgentRun {
    pub fn new(spec: String, host: String, limits: AgentLimits, clock_start: ClockSample) -> Self {
        AgentRun {
            spec,
            host,
            limits,
            warnings: Vec::new(),
            workers: 0..0,
            first_conn: 0,
            conns: 0,
            sources: Vec::new(),
            clock_start,
            clock_end: None,
            lost: None,
            done: false,
            connect_h: new_hist(),
            subscribe_h: new_hist(),
            delivery_h: new_hist(),
        }
    }

    /// Adds one report's histogram deltas (called with every report, before the coordinator
    /// folds the same pairs into the totals).
    pub fn absorb(&mut self, r: &WorkerReport) {
        add_pairs(&mut self.connect_h, &r.connect_hist);
        add_pairs(&mut self.subscribe_h, &r.subscribe_hist);
        add_pairs(&mut self.delivery_h, &r.delivery_hist);
    }

    pub fn totals(&self, latest: &[WorkerReport]) -> AgentTotals {
        let mut t = AgentTotals::default();
        for r in latest.get(self.workers.clone()).unwrap_or_default() {
            t.subscribed += r.subscribed;
            t.online += r.online;
            t.errors += r.errors.values().sum::<u64>();
            t.delivery.add(&r.delivery);
        }
        t
    }

    /// The larger clock bound of the start and end probes (µs).
    pub fn skew_bound_us(&self) -> u64 {
        let end = self.clock_end.map_or(0, |c| c.bound_us());
        self.clock_start.bound_us().max(end)
    }
}

impl FleetRun {
    pub fn agent_of(&self, worker: usize) -> Option<usize> {
        self.agents.iter().position(|a| a.workers.contains(&worker))
    }

    /// Whether worker `i` belongs to an agent that was lost.
    pub fn is_lost_worker(&self, i: usize) -> bool {
        self.agent_of(i)
            .is_some_and(|a| self.agents[a].lost.is_some())
    }

    pub fn lost(&self) -> impl Iterator<Item = &AgentRun> {
        self.agents.iter().filter(|a| a.lost.is_some())
    }

    /// The largest clock bound over all agents: every delivery latency in the report can be
    /// off by at most this much.
    pub fn skew_bound_us(&self) -> u64 {
        self.agents
            .iter()
            .map(|a| a.skew_bound_us())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use crate::delivery::DeliveryTotals;
    use crate::hist::{add_pairs, new_hist, record, to_pairs};
    use crate::wire::WorkerReport;

    /// Two agents' histograms, shipped as the pairs a report carries (through JSON, as on the
    /// wire) and merged, are exactly the histogram of all their values together: the same
    /// count in every bucket. Delivery counts add up field by field.
    #[test]
    fn merging_two_agents_gives_the_histogram_of_the_union() {
        let a_vals: Vec<u64> = (0..5_000).map(|i| 50 + (i * 7919) % 40_000).collect();
        let b_vals: Vec<u64> = (0..3_000)
            .map(|i| 900 + (i * 104_729) % 2_000_000)
            .collect();
        let report = |vals: &[u64], received: u64, missing: u64| {
            let mut h = new_hist();
            vals.iter().for_each(|&v| record(&mut h, v));
            let r = WorkerReport {
                delivery_hist: to_pairs(&h),
                delivery: DeliveryTotals {
                    received,
                    expected: received + missing,
                    missing,
                    duplicates: 1,
                    ..Default::default()
                },
                ..Default::default()
            };
            let text = serde_json::to_string(&r).unwrap();
            serde_json::from_str::<WorkerReport>(&text).unwrap()
        };
        let (ra, rb) = (report(&a_vals, 5_000, 2), report(&b_vals, 3_000, 5));
        let mut merged = new_hist();
        let mut totals = DeliveryTotals::default();
        for r in [&ra, &rb] {
            add_pairs(&mut merged, &r.delivery_hist);
            totals.add(&r.delivery);
        }
        let mut union = new_hist();
        a_vals
            .iter()
            .chain(&b_vals)
            .for_each(|&v| record(&mut union, v));
        assert_eq!(to_pairs(&merged), to_pairs(&union), "bucket by bucket");
        assert_eq!(merged.len(), 8_000);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                merged.value_at_quantile(q),
                union.value_at_quantile(q),
                "q={q}"
            );
        }
        assert_eq!(
            (
                totals.received,
                totals.expected,
                totals.missing,
                totals.duplicates
            ),
            (8_000, 8_007, 7, 2)
        );
    }
}
