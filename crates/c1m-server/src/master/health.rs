//! `/healthz`'s verdict: the node works when every worker slot has a running process that
//! reports. The master answers a health check with that verdict alone, so a client that
//! checks often (or pipelines checks) costs it a walk over the slots, not a `/status` render
//! and the worker a JSON parse.

use super::{Master, Slot};
use std::time::Duration;

/// A worker that has not reported for this long (it reports every 250 ms) is taken as not
/// answering: stopped or stuck.
pub(super) const WORKER_SILENT: Duration = Duration::from_secs(2);

/// A slot's process id (0: none running) and whether it reports.
pub(super) fn liveness(slot: &Slot) -> (u32, bool) {
    let pid = slot.child.as_ref().map_or(0, |c| c.id());
    (pid, slot.reported_at.elapsed() < WORKER_SILENT)
}

impl Master {
    /// What is wrong with the node, or None when every worker runs and reports.
    pub(super) fn health_problem(&self) -> Option<String> {
        first_problem(self.slots.iter().map(liveness))
    }
}

/// The first slot, by index, without a running process or that stopped reporting.
fn first_problem(slots: impl Iterator<Item = (u32, bool)>) -> Option<String> {
    slots
        .enumerate()
        .find_map(|(index, (pid, answering))| match (pid, answering) {
            (0, _) => Some(format!("worker {index} is not running (restarting)")),
            (_, false) => Some(format!(
                "worker {index} has not reported to the master for {WORKER_SILENT:?} (stopped or stuck)"
            )),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::first_problem;

    #[test]
    fn a_missing_or_silent_worker_is_the_problem_named() {
        assert_eq!(first_problem([(5, true), (6, true)].into_iter()), None);
        assert_eq!(
            first_problem([(5, true), (0, false)].into_iter()).as_deref(),
            Some("worker 1 is not running (restarting)")
        );
        assert_eq!(
            first_problem([(5, false)].into_iter()).as_deref(),
            Some("worker 0 has not reported to the master for 2s (stopped or stuck)")
        );
    }
}
