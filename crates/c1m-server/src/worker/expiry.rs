//! Deadlines: arming a connection's timer, and what its passing means for each kind of
//! connection (a request head not received, a long-poll with nothing to say, an expired token,
//! a status answer not given, a final answer not read).

use super::conn::{self, Kind};
use super::{token_of, Worker};
use std::time::Duration;

impl Worker {
    pub(super) fn arm_timer(&mut self, idx: usize, after: Duration) {
        let deadline = self.wheel.deadline_after(after.as_millis() as u64);
        let mut conn = self.conns.at(idx);
        conn.deadline = deadline;
        self.wheel
            .schedule(token_of(idx, conn.generation), deadline);
    }

    pub(super) fn arm_head_timer(&mut self, idx: usize) {
        self.arm_timer(idx, self.cfg.head_timeout);
    }

    /// A keep-alive connection whose answer went out waits this long for its next request
    /// (its first bytes re-arm the head timer: `Worker::next_request_started`); one that
    /// already holds the start of it (pipelined behind an answer that came later) gets the
    /// head timeout at once.
    pub(super) fn arm_idle_timer(&mut self, idx: usize) {
        let begun = self.conns.get(idx).is_some_and(|c| c.has_inbuf());
        let wait = if begun {
            self.cfg.head_timeout
        } else {
            self.cfg.keepalive_timeout
        };
        self.arm_timer(idx, wait);
    }

    pub(super) fn on_timer(&mut self, token: u64) {
        let now = self.wheel.now();
        let Some((idx, mut conn)) = self.conns.by_token(token) else {
            return;
        };
        if conn.deadline == 0 {
            return;
        }
        if conn.deadline > now {
            let (deadline, token) = (conn.deadline, token);
            self.wheel.schedule(token, deadline);
            return;
        }
        conn.deadline = 0;
        let (kind, edge) = (conn.kind, conn.edge);
        match kind {
            Kind::Http | Kind::TcpCommand => {
                let started = conn.has_inbuf();
                let served = conn.flags & conn::SERVED != 0;
                if self.conns.tls.count_handshake_timeout(idx) {
                    return self.close(idx);
                }
                if !started {
                    // Nothing of a request arrived: close quietly. An unsolicited 408 on an idle
                    // keep-alive connection would be read as the answer to the client's next
                    // request (it did that to bench's publisher). Only a connection that never
                    // sent a request counts as a refusal.
                    if !served {
                        self.counters.refused.head_timeout += 1;
                    }
                    return self.close(idx);
                }
                self.counters.refused.head_timeout += 1;
                let reply = if kind == Kind::Http {
                    c1m_proto::http::error(408, "request head not received in time")
                } else {
                    c1m_proto::line::encode_err("no SUB command received in time")
                };
                self.reply_and_close(idx, reply);
            }
            Kind::PollWaiting if edge & conn::EXPIRES == 0 => self.poll_timeout(idx),
            Kind::Sse
            | Kind::SseJoining
            | Kind::Ws
            | Kind::WsJoining
            | Kind::PollJoining
            | Kind::PollWaiting
            | Kind::TcpStream
            | Kind::TcpJoining
                if edge & conn::EXPIRES != 0 =>
            {
                self.token_expired(idx)
            }
            Kind::Status => self.status_timeout(idx),
            Kind::H2 => self.h2_idle_check(idx),
            // The peer did not read its final answer within the linger time.
            Kind::Closing => self.cut_unread(idx),
            _ => {}
        }
    }
}
