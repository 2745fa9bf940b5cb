//! Clock offset between the coordinator and an agent, NTP style: the coordinator stamps a
//! ping (t0), the agent stamps its receipt (t1) and its answer (t2), the coordinator stamps
//! the answer's arrival (t3). offset = ((t1 − t0) + (t2 − t3)) / 2 is the agent's clock minus
//! the coordinator's; the true offset lies within ± rtt / 2 of it, rtt = (t3 − t0) − (t2 − t1).
//!
//! Delivery latency on an agent is its clock at arrival minus the coordinator's publish stamp,
//! so each agent's latencies are off by its true offset: at most [`ClockSample::bound_us`].

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClockSample {
    /// Agent clock minus coordinator clock, µs (estimate).
    pub offset_us: i64,
    /// Round trip of the probe, without the agent's own handling time, µs.
    pub rtt_us: u64,
}

impl ClockSample {
    pub fn from_stamps(t0: u64, t1: u64, t2: u64, t3: u64) -> ClockSample {
        let (t0, t1, t2, t3) = (t0 as i128, t1 as i128, t2 as i128, t3 as i128);
        let offset = ((t1 - t0) + (t2 - t3)) / 2;
        let rtt = ((t3 - t0) - (t2 - t1)).max(0);
        ClockSample {
            offset_us: offset.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
            rtt_us: rtt.min(u64::MAX as i128) as u64,
        }
    }

    /// How far the agent's latency figures can be off because of its clock: |offset| + rtt/2.
    pub fn bound_us(&self) -> u64 {
        self.offset_us.unsigned_abs() + self.rtt_us / 2
    }
}

/// Of several probes the one with the shortest round trip: the tightest bound.
pub fn best(samples: &[ClockSample]) -> Option<ClockSample> {
    samples.iter().copied().min_by_key(|s| s.rtt_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_round_trip_from_four_stamps() {
        // Agent 5 ms ahead; 1 ms each way; the agent holds the probe 200 µs.
        let s = ClockSample::from_stamps(1_000_000, 1_006_000, 1_006_200, 1_002_200);
        assert_eq!(s.offset_us, 5_000);
        assert_eq!(s.rtt_us, 2_000);
        assert_eq!(s.bound_us(), 6_000);
        let behind = ClockSample::from_stamps(1_000_000, 997_000, 997_000, 1_002_000);
        assert_eq!(behind.offset_us, -4_000);
        let picks = best(&[s, behind]).unwrap();
        assert_eq!(picks, s, "equal round trips: the first");
    }
}
