//! Answers to requests that waited: a long-poll's answer or timeout, a publish's ack or
//! refusal from the master, a status or health query's figures, and the busy refusal.

use super::conn::{Kind, Sent};
use super::message::POLL_HEADERS;
use super::Worker;
use std::rc::Rc;

impl Worker {
    /// Answers a long-poll and leaves its channels; the connection goes back to reading requests.
    pub(super) fn poll_answer(&mut self, idx: usize, status: u16, body: &[u8]) {
        self.poll_leave(idx);
        self.respond(idx, status, "application/json", POLL_HEADERS, body);
        self.resume_input(idx);
    }

    /// A waiting keep-alive long-poll gets the message's shared, encoded-once answer.
    pub(super) fn reply_shared(&mut self, idx: usize, answer: &Rc<[u8]>) {
        self.poll_leave(idx);
        let max = self.cfg.max_unsent;
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Http;
        if conn.send_shared(answer, max) != Sent::Done {
            return self.close(idx);
        }
        self.arm_idle_timer(idx);
        self.resume_input(idx);
    }

    pub(super) fn poll_leave(&mut self, idx: usize) {
        for (chan, pos) in self.conns[idx].take_subs() {
            self.leave_channel(chan, pos);
        }
        let mut conn = self.conns.at(idx);
        conn.deadline = 0;
        // The next request on this keep-alive connection shows its own token.
        conn.edge &= !super::conn::EXPIRES;
    }

    /// A long-poll starts waiting: it ends at the poll timeout, or earlier where its token's
    /// expiry was armed (`adopt_grant`) before the wait began.
    pub(super) fn arm_poll_timeout(&mut self, idx: usize) {
        let ends = self
            .wheel
            .deadline_after(self.cfg.poll_timeout.as_millis() as u64);
        let mut conn = self.conns.at(idx);
        if conn.edge & super::conn::EXPIRES != 0 && conn.deadline != 0 && conn.deadline <= ends {
            return; // the expiry's wheel entry is in place
        }
        conn.edge &= !super::conn::EXPIRES;
        self.arm_timer(idx, self.cfg.poll_timeout);
    }

    /// Long-poll timeout: 204, and the client polls again with the same last id.
    pub(super) fn poll_timeout(&mut self, idx: usize) {
        let keep_alive = self.conns[idx].keep_alive;
        self.poll_leave(idx);
        let conn = if keep_alive { "keep-alive" } else { "close" };
        let cors = self.take_cors(idx);
        let cors = cors.as_deref().unwrap_or("");
        let bytes = format!(
            "HTTP/1.1 204 No Content\r\nConnection: {conn}\r\nCache-Control: no-cache\r\n{cors}\r\n"
        )
        .into_bytes();
        self.reply(idx, bytes);
        self.resume_input(idx);
    }

    pub(super) fn on_published(&mut self, token: u64, channel: &str, id: u64) {
        let Some((idx, conn)) = self.conns.by_token(token) else {
            return;
        };
        if conn.kind != Kind::Publishing {
            return;
        }
        let body = serde_json::json!({"channel": channel, "id": id}).to_string();
        self.respond(idx, 200, "application/json", "", body.as_bytes());
        self.record_publish_ack(token);
        self.resume_input(idx);
    }

    /// Publish ack time: request parsed → 200 handed to the socket.
    pub(super) fn record_publish_ack(&mut self, token: u64) {
        if let Some(started) = self.conns.publish_started.remove(&token) {
            let took = c1m_sys::shm::monotonic_micros().saturating_sub(started);
            self.counters.latency.publish_ack.record(took);
        }
    }

    /// The master refused a publish: a worker that must deliver it is behind, or (`broker` not
    /// empty) the cluster broker could not take it.
    pub(super) fn on_publish_refused(&mut self, token: u64, retry_after_s: u64, broker: &str) {
        let Some((idx, conn)) = self.conns.by_token(token) else {
            return;
        };
        let kind = conn.kind;
        if !broker.is_empty() {
            if matches!(kind, Kind::Publishing | Kind::Ws) {
                self.counters.refused.broker_unavailable += 1;
            }
            match kind {
                Kind::Publishing => {
                    self.conns.publish_started.remove(&token);
                    let body =
                        format!("broker unavailable: {broker}; retry after the given seconds\n");
                    self.respond(
                        idx,
                        503,
                        "text/plain; charset=utf-8",
                        &format!("Retry-After: {retry_after_s}\r\n"),
                        body.as_bytes(),
                    );
                    self.resume_input(idx);
                }
                Kind::Ws => self.ws_close(
                    idx,
                    c1m_proto::ws::close::TRY_AGAIN_LATER,
                    "publish refused: broker unavailable; retry later",
                ),
                _ => {}
            }
            return;
        }
        match kind {
            Kind::Publishing => {
                self.conns.publish_started.remove(&token);
                self.refuse_busy(idx, retry_after_s);
                self.resume_input(idx);
            }
            Kind::Ws => {
                self.counters.refused.busy += 1;
                self.ws_close(
                    idx,
                    c1m_proto::ws::close::TRY_AGAIN_LATER,
                    "publish refused: subscribers are behind; retry later",
                );
            }
            _ => {}
        }
    }

    /// 503 with Retry-After: an internal queue is full. The connection stays usable.
    pub(super) fn refuse_busy(&mut self, idx: usize, retry_after_s: u64) {
        self.counters.refused.busy += 1;
        let body = "server busy: subscribers are behind; retry after the given seconds\n";
        self.respond(
            idx,
            503,
            "text/plain; charset=utf-8",
            &format!("Retry-After: {retry_after_s}\r\n"),
            body.as_bytes(),
        );
    }

    pub(super) fn on_status(&mut self, token: u64, body: String, metrics: bool) {
        let Some((idx, conn)) = self.conns.by_token(token) else {
            return;
        };
        if conn.kind != Kind::Status || conn.flags & super::conn::HEALTH_CHECK != 0 {
            return;
        }
        self.conns[idx].deadline = 0; // answered: the status timeout is void
        let ctype = if metrics {
            "text/plain; version=0.0.4"
        } else {
            "application/json"
        };
        self.respond(idx, 200, ctype, "", body.as_bytes());
        self.resume_input(idx);
    }
}
