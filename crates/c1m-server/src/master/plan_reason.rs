//! Why `--workers` came out as it did, in words for the start-up line and the log: with
//! `auto`, the larger of the usable cores and the workers the fd limit forces
//! (connections with spread slack / connections one process can hold).

use super::{reserved_fds, Plan, SPREAD_SLACK_PCT};
use crate::config::Workers;

/// E.g. "auto: 6 workers because 1000000 connections (+5% spread slack) / 19936 per process
/// (fd limit 20000 − 64 reserved) > 2 cores", or "auto: 2 workers = 2 cores (2000 connections
/// fit 1 process at fd limit 20000)", or "set: 3" (where it was set is the caller's to say:
/// a flag, the environment or the file).
pub fn workers_reason(
    workers: Workers,
    max_conns: u64,
    hard_nofile: u64,
    cpus: usize,
    plan: &Plan,
) -> String {
    if let Workers::Count(n) = workers {
        return format!("set: {n}");
    }
    let reserved = reserved_fds(hard_nofile);
    let capacity = hard_nofile.saturating_sub(reserved).max(1);
    let with_slack = max_conns + (max_conns * SPREAD_SLACK_PCT).div_ceil(100);
    let by_fds = with_slack.div_ceil(capacity);
    if by_fds > cpus as u64 {
        format!(
            "auto: {} workers because {max_conns} connections (+{SPREAD_SLACK_PCT}% spread slack) \
             / {capacity} per process (fd limit {hard_nofile} - {reserved} reserved) > {cpus} cores",
            plan.workers
        )
    } else {
        format!(
            "auto: {} workers = {cpus} cores ({max_conns} connections need {by_fds} process(es) \
             of {capacity} at fd limit {hard_nofile})",
            plan.workers
        )
    }
}

/// When the workers cannot hold `max_conns` under the fd limit (a fixed `--workers` too
/// small for it), what they can hold, in words; None when they can.
pub fn capacity_shortfall(plan: &Plan, max_conns: u64, hard_nofile: u64) -> Option<String> {
    let holds = plan.workers as u64 * plan.per_worker;
    (holds < max_conns).then(|| {
        format!(
            "{} worker process(es) hold at most {holds} connections ({} each at fd limit {hard_nofile}), \
             under --max-conns {max_conns}",
            plan.workers, plan.per_worker
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::master::plan;

    #[test]
    fn auto_names_the_fd_limit_when_it_wins_and_the_cores_when_they_do() {
        let p = plan(Workers::Auto, 1_000_000, 20_000, 2);
        let why = workers_reason(Workers::Auto, 1_000_000, 20_000, 2, &p);
        assert_eq!(p.workers, 53);
        assert!(
            why.starts_with("auto: 53 workers because 1000000 connections"),
            "{why}"
        );
        assert!(why.contains("/ 19936 per process (fd limit 20000 - 64 reserved) > 2 cores"));
        let p = plan(Workers::Auto, 2_000, 20_000, 4);
        let why = workers_reason(Workers::Auto, 2_000, 20_000, 4, &p);
        assert_eq!(why, "auto: 4 workers = 4 cores (2000 connections need 1 process(es) of 19936 at fd limit 20000)");
        let p = plan(Workers::Count(3), 2_000, 20_000, 4);
        assert_eq!(
            workers_reason(Workers::Count(3), 2_000, 20_000, 4, &p),
            "set: 3"
        );
    }

    #[test]
    fn too_few_workers_for_max_conns_is_named() {
        let p = plan(Workers::Count(2), 1_000_000, 20_000, 4);
        let why = capacity_shortfall(&p, 1_000_000, 20_000).unwrap();
        assert_eq!(
            why,
            "2 worker process(es) hold at most 39872 connections (19936 each at fd limit 20000), \
             under --max-conns 1000000"
        );
        let p = plan(Workers::Auto, 1_000_000, 20_000, 4);
        assert_eq!(capacity_shortfall(&p, 1_000_000, 20_000), None);
        let p = plan(Workers::Count(1), 10_000, 20_000, 4);
        assert_eq!(capacity_shortfall(&p, 10_000, 20_000), None);
    }
}
