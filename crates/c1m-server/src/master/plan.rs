//! How many worker processes serve `max_conns` under the fd limit, and how many connections
//! each may hold. (`plan_reason` says why, in words.)

use crate::config::Workers;

/// Descriptors each worker keeps back from client connections (listeners, link, epoll, logs):
/// 64, or a sixteenth of a small limit (a worker needs about ten of its own).
pub fn reserved_fds(hard_nofile: u64) -> u64 {
    (hard_nofile / 16).clamp(4, 64)
}

/// How many workers, and how many connections each may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub workers: usize,
    pub per_worker: u64,
}

impl Plan {
    /// The room each share leaves above an even spread of `max_conns` over the workers.
    pub fn slack(&self, max_conns: u64) -> u64 {
        let even = max_conns.div_ceil(self.workers.max(1) as u64);
        self.per_worker.saturating_sub(even)
    }
}

/// SO_REUSEPORT spreads connections by hash, so workers fill unevenly (at 1M over 51 workers
/// the spread reached ~2 %, and exact shares refused 3,309 connections): with several workers
/// each may take its share plus this percentage.
pub const SPREAD_SLACK_PCT: u64 = 5;

/// `auto`: enough processes for `max_conns` (plus the spread slack) under the hard fd limit,
/// at least one per CPU.
pub fn plan(workers: Workers, max_conns: u64, hard_nofile: u64, cpus: usize) -> Plan {
    let capacity = hard_nofile.saturating_sub(reserved_fds(hard_nofile)).max(1);
    let with_slack = |n: u64| n + (n * SPREAD_SLACK_PCT).div_ceil(100);
    let workers = match workers {
        Workers::Count(n) => n,
        Workers::Auto => (cpus as u64).max(with_slack(max_conns).div_ceil(capacity)) as usize,
    };
    let share = max_conns.div_ceil(workers as u64);
    let share = if workers > 1 {
        with_slack(share)
    } else {
        share
    };
    Plan {
        workers,
        per_worker: share.min(capacity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_covers_max_conns_under_the_fd_limit() {
        // 1M connections at a hard limit of 20000: 1_050_000 / 19_936 → 53 workers, each
        // taking its share (18,868) plus 5 % for the uneven spread.
        let p = plan(Workers::Auto, 1_000_000, 20_000, 2);
        assert_eq!(
            p,
            Plan {
                workers: 53,
                per_worker: 19_812
            }
        );
        assert!(p.per_worker * p.workers as u64 >= 1_050_000);
        assert_eq!(p.slack(1_000_000), 19_812 - 18_868);
        assert!(p.per_worker <= 20_000 - reserved_fds(20_000));
        assert_eq!(reserved_fds(20_000), 64);
        assert_eq!(plan(Workers::Count(1), 100, 48, 2).per_worker, 44);
        // Small targets still get one worker per CPU.
        assert_eq!(
            plan(Workers::Auto, 1000, 20_000, 2),
            Plan {
                workers: 2,
                per_worker: 525
            }
        );
        // One worker has no spread to allow for.
        assert_eq!(plan(Workers::Count(1), 3, 20_000, 2).per_worker, 3);
        // An explicit count too small for the target is capped by the fd limit.
        assert_eq!(
            plan(Workers::Count(1), 1_000_000, 20_000, 2).per_worker,
            19_936
        );
    }
}
