//! `/healthz`, and the wait of `/status` and `/metrics` for the master. `/healthz`: 200 only
//! when the whole server works. The worker asks the master (the same
//! status query `/status` uses) and answers 503 with the reason when the master does not answer
//! within [`MASTER_TIMEOUT`] (stopped, stuck), a worker slot has no running process (dead,
//! restarting), or a worker has stopped reporting to the master (stopped, stuck). A worker
//! answering alone proved only that this one process is alive.

use super::conn::{Kind, API_CALL, HEALTH_CHECK};
use super::Worker;
use crate::ipc::ToMaster;
use std::time::Duration;

/// How long a health check waits for the master.
pub const MASTER_TIMEOUT: Duration = Duration::from_secs(1);
/// How long `/status` and `/metrics` wait for the master before a 503: a monitor polling a
/// stopped master gets an answer, not a connection that hangs until its own timeout.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(3);

impl Worker {
    pub(super) fn health_request(&mut self, idx: usize) {
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Status;
        conn.flags |= HEALTH_CHECK;
        let token = super::token_of(idx, conn.generation);
        self.arm_timer(idx, MASTER_TIMEOUT);
        self.send_to_master(ToMaster::StatusQuery {
            req: token,
            metrics: false,
        });
    }

    /// The master's status answer for a waiting health check. Returns false when the waiting
    /// request is a plain `/status` (the caller answers it).
    pub(super) fn health_answer(&mut self, idx: usize, status_json: &str) -> bool {
        let mut conn = self.conns.at(idx);
        if conn.flags & HEALTH_CHECK == 0 {
            return false;
        }
        conn.flags &= !HEALTH_CHECK;
        conn.deadline = 0;
        match judge(status_json) {
            Ok(()) => self.respond(idx, 200, "text/plain", "", b"ok\n"),
            Err(reason) => self.respond(idx, 503, "text/plain", "", reason.as_bytes()),
        }
        self.resume_input(idx);
        true
    }

    /// A `/status` or `/metrics` request, answered by the master or, past [`STATUS_TIMEOUT`],
    /// with a 503.
    pub(super) fn status_request(&mut self, idx: usize, metrics: bool) {
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Status;
        let token = super::token_of(idx, conn.generation);
        self.arm_timer(idx, STATUS_TIMEOUT);
        self.send_to_master(ToMaster::StatusQuery {
            req: token,
            metrics,
        });
    }

    /// The master did not answer a health check or a status request in time. (A late answer
    /// finds the connection no longer waiting and is ignored.)
    pub(super) fn status_timeout(&mut self, idx: usize) {
        let mut conn = self.conns.at(idx);
        let health = conn.flags & HEALTH_CHECK != 0;
        conn.flags &= !HEALTH_CHECK;
        let api = conn.edge & API_CALL != 0;
        conn.edge &= !API_CALL;
        if api {
            // The same shape as every other API error; the master counts the call as `late`
            // when its answer comes (that answer finds no one waiting).
            self.counters.refused.api_timeouts += 1;
            let why = format!(
                "the call was not answered within {:?}; retry later",
                crate::api::CALL_TIMEOUT
            );
            self.api_retry_later(idx, &why);
            return self.resume_input(idx);
        }
        let reason = if health {
            format!("unhealthy: master did not answer within {MASTER_TIMEOUT:?}\n")
        } else {
            format!("master did not answer within {STATUS_TIMEOUT:?}\n")
        };
        self.respond(idx, 503, "text/plain", "", reason.as_bytes());
        self.resume_input(idx);
    }
}

/// Healthy when every worker slot in the master's report has a running process that reports.
fn judge(status_json: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(status_json)
        .map_err(|e| format!("unhealthy: unreadable master status: {e}\n"))?;
    let workers = v["workers"]
        .as_array()
        .ok_or("unhealthy: master status lists no workers\n")?;
    for w in workers {
        if w["pid"].as_u64().unwrap_or(0) == 0 {
            return Err(format!(
                "unhealthy: worker {} is not running (restarting)\n",
                w["index"]
            ));
        }
        if w["answering"] == false {
            return Err(format!(
                "unhealthy: worker {} has not reported to the master for 2s (stopped or stuck)\n",
                w["index"]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::judge;

    #[test]
    fn a_missing_worker_is_unhealthy() {
        assert!(judge(r#"{"workers":[{"index":0,"pid":5},{"index":1,"pid":6}]}"#).is_ok());
        let err = judge(r#"{"workers":[{"index":0,"pid":5},{"index":1,"pid":0}]}"#).unwrap_err();
        assert!(err.contains("worker 1"), "{err}");
        let err = judge(r#"{"workers":[{"index":0,"pid":5,"answering":false}]}"#).unwrap_err();
        assert!(err.contains("worker 0 has not reported"), "{err}");
        assert!(judge("not json").is_err());
    }
}
