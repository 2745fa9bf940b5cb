//! `/healthz`, and the wait of `/status` and `/metrics` for the master. `/healthz`: 200 only
//! when the whole server works. The worker asks the master for its verdict
//! (`master::health`) and answers 503 with the reason when the master does not answer
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
        self.send_to_master(ToMaster::HealthQuery { req: token });
    }

    /// The master's verdict for a waiting health check. (One that timed out meanwhile, or a
    /// connection since reused, is not waiting and ignores it.)
    pub(super) fn on_health(&mut self, token: u64, problem: Option<String>) {
        let Some((idx, conn)) = self.conns.by_token(token) else {
            return;
        };
        if conn.kind != Kind::Status || conn.flags & HEALTH_CHECK == 0 {
            return;
        }
        let mut conn = self.conns.at(idx);
        conn.flags &= !HEALTH_CHECK;
        conn.deadline = 0;
        match problem {
            None => self.respond(idx, 200, "text/plain", "", b"ok\n"),
            Some(p) => {
                let reason = format!("unhealthy: {p}\n");
                self.respond(idx, 503, "text/plain", "", reason.as_bytes());
            }
        }
        self.resume_input(idx);
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
