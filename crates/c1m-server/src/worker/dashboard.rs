//! The worker's half of `/dashboard`: it holds the `/dashboard/events` SSE streams and writes
//! each snapshot the master sends (`ToWorker::Dashboard`, once a second while any worker has
//! a viewer) to them as one `event: snapshot`. The page itself is `../dashboard.html`.

use super::conn::{Kind, Sent};
use super::{token_of, Worker};
use c1m_proto::sse;
use std::rc::Rc;

/// Most dashboard streams one worker holds; more get 503 (counted as refused.busy). A
/// dashboard is an operator's page, not a fan-out channel: the list stays small.
pub const MAX_VIEWERS: usize = 32;

impl Worker {
    /// `GET /dashboard/events`: an SSE stream (no channel) that gets the next snapshots.
    pub(super) fn dashboard_request(&mut self, idx: usize) {
        self.prune_dashboards();
        if self.conns.dashboards.len() >= MAX_VIEWERS {
            return self.refuse_busy(idx, 1);
        }
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Sse;
        conn.deadline = 0;
        let token = token_of(idx, conn.generation);
        let head = self.sse_head(idx);
        self.send_or_close(idx, head);
        if self.conns.get(idx).is_some_and(|c| c.kind == Kind::Sse) {
            self.conns.dashboards.push(token);
        }
    }

    /// Viewers still connected (what this worker reports to the master).
    pub(super) fn dashboard_viewers(&mut self) -> u64 {
        self.prune_dashboards();
        self.conns.dashboards.len() as u64
    }

    /// One snapshot to every viewer; a viewer that cannot take it is closed like any slow
    /// SSE subscriber.
    pub(super) fn push_dashboard(&mut self, json: &str) {
        self.prune_dashboards();
        let event: Rc<[u8]> = sse::encode_event("snapshot", json.as_bytes()).into();
        let max = self.cfg.max_unsent;
        for token in self.conns.dashboards.clone() {
            let Some((idx, mut conn)) = self.conns.by_token(token) else {
                continue;
            };
            match conn.send_shared(&event, max) {
                Sent::Done => {}
                Sent::Overflow => self.drop_slow_consumer(idx),
                Sent::Failed => self.close(idx),
            }
        }
    }

    /// Forgets streams that closed (their slot is gone or reused by a later connection).
    fn prune_dashboards(&mut self) {
        let conns = &self.conns;
        let live: Vec<u64> = conns
            .dashboards
            .iter()
            .copied()
            .filter(|&token| {
                let idx = (token & 0xffff_ffff) as usize;
                conns
                    .get(idx)
                    .is_some_and(|c| token_of(idx, c.generation) == token && c.kind == Kind::Sse)
            })
            .collect();
        self.conns.dashboards = live;
    }
}
