//! The worker's part of the server API (`POST /api/{call}`, carried out by `master::api`):
//! framing the request (method, the publish rule, the body limit `--api-max-body`), handing
//! it to the master and writing its JSON answer; and acting on this worker's connections when
//! the master asks (`ToWorker::ApiAct`): disconnect, unsubscribe, subscribe, each answered
//! with how many connections it touched.
//!
//! A disconnect ends each connection in its protocol's own way, with the advice whether to
//! come back: SSE `event: disconnect` then close, WebSocket close 4010 / 4011, TCP an `ERR`
//! line, long-poll a 403 JSON answer.

use super::conn::{Kind, API_CALL};
use super::requests::BodyRead;
use super::Worker;
use crate::api::{error_body, label, WS_KICKED, WS_KICKED_RECONNECT};
use crate::ipc::{Action, Target, ToMaster, UserAct};
use c1m_proto::http::{self, Request};
use c1m_proto::http_framing::BodyFraming;
use c1m_proto::line;
use c1m_proto::ws::{encode, frame::DataKind};

/// The SSE event a kicked stream ends with.
fn sse_disconnect(reconnect: bool) -> Vec<u8> {
    let data = serde_json::json!({"reason": "kicked", "reconnect": reconnect});
    format!("event: disconnect\ndata: {data}\n\n").into_bytes()
}

fn kicked_reason(reconnect: bool) -> &'static str {
    if reconnect {
        "kicked, reconnect"
    } else {
        "kicked, do not reconnect"
    }
}

impl Worker {
    /// `POST /api/{call}`. Returns the bytes used, or None while the body is still arriving.
    pub(super) fn api_request(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        framing: BodyFraming,
        call: &str,
        data: &[u8],
    ) -> Option<usize> {
        let call = label(call);
        if req.method != "POST" {
            self.api_refuse(
                idx,
                call,
                405,
                "the server API takes POST",
                "Allow: POST\r\n",
            );
            return Some(data.len());
        }
        // Never more open than /pub: the key, or loopback without one. A subscriber's JWT
        // with a publish claim grants channels, not the API.
        let peer = self.conns.peer_ip(idx);
        let key = self.cfg.publish_key.as_deref();
        if let Err(denied) = super::publish_rule::check(key, req, peer) {
            self.api_refuse(idx, call, denied.http_status(), denied.message(), "");
            return Some(data.len());
        }
        let max = self.cfg.api_max_body;
        let (body, used) = match self.read_body(idx, req, framing, data, max) {
            BodyRead::Partial => return None,
            BodyRead::Done(body, used) => (body, used),
            BodyRead::TooLarge(what) => {
                let why = format!("{what} is over the {max} byte limit of --api-max-body");
                self.api_refuse(idx, call, 413, &why, "");
                return Some(data.len());
            }
            BodyRead::Malformed(why) => {
                self.api_refuse(idx, call, 400, why, "");
                return Some(data.len());
            }
        };
        let end = req.head_len + used;
        self.conns[idx].flags &= !super::conn::CONTINUE_SENT;
        if self.master_congested() {
            self.counters.refused.busy += 1;
            self.send_to_master(ToMaster::ApiRefused { call: call.into() });
            self.api_retry_later(idx, "server busy; retry later");
            return Some(end);
        }
        let ndjson = req
            .header_str("Content-Type")
            .is_some_and(|t| t.trim_start().starts_with("application/x-ndjson"));
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Status;
        conn.edge |= API_CALL;
        let token = super::token_of(idx, conn.generation);
        self.arm_timer(idx, crate::api::CALL_TIMEOUT);
        self.send_to_master(ToMaster::Api {
            req: token,
            call: call.into(),
            body,
            ndjson,
        });
        Some(end)
    }

    /// A refusal before the master saw the call: counted (as `/pub`'s are, and as an error of
    /// the call), answered with a JSON error, and the connection closed (its body may be
    /// unread).
    fn api_refuse(&mut self, idx: usize, call: &str, status: u16, message: &str, extra: &str) {
        let r = &mut self.counters.refused;
        match status {
            400 => r.bad_request += 1,
            401 => r.unauthorized += 1,
            403 => r.forbidden += 1,
            405 => r.method += 1,
            413 => r.payload_too_large += 1,
            _ => {}
        }
        self.send_to_master(ToMaster::ApiRefused { call: call.into() });
        let body = error_body(status, message);
        let answer = http::response(status, "application/json", extra, body.as_bytes(), false);
        self.reply_and_close(idx, answer);
    }

    /// A JSON 503 with `Retry-After: 1` on a connection that stays open: the call may be
    /// retried (the master was too busy to take it, or did not answer it in time).
    pub(super) fn api_retry_later(&mut self, idx: usize, message: &str) {
        let body = error_body(503, message);
        self.respond(
            idx,
            503,
            "application/json",
            "Retry-After: 1\r\n",
            body.as_bytes(),
        );
    }

    /// The master's answer to a call.
    pub(super) fn on_api_answer(&mut self, token: u64, status: u16, body: String) {
        let Some((idx, mut conn)) = self.conns.by_token(token) else {
            return;
        };
        if conn.kind != Kind::Status {
            return;
        }
        conn.deadline = 0; // answered: the timeout is void
        conn.edge &= !API_CALL;
        self.respond(idx, status, "application/json", "", body.as_bytes());
        self.resume_input(idx);
    }

    /// An act on this worker's connections; the master is told how many it touched.
    pub(super) fn on_api_act(&mut self, op: u64, act: UserAct) {
        let tokens = match &act.target {
            Target::User(user) => self.conns.tokens_of_user(user),
            Target::Conn(token) => vec![*token],
        };
        let mut count = 0;
        for token in tokens {
            let Some((idx, conn)) = self.conns.by_token(token) else {
                continue;
            };
            let kind = conn.kind;
            let done = match &act.action {
                Action::Disconnect { reconnect } => self.kick(idx, kind, *reconnect),
                Action::Unsubscribe { channel } => self.api_unsubscribe(idx, kind, channel),
                Action::Subscribe { channel } => self.api_subscribe(idx, kind, channel),
            };
            count += u64::from(done);
        }
        self.send_to_master(ToMaster::ApiActed { op, count });
    }

    /// Ends a connection for a `disconnect`; false for one that is not a client's (an API or
    /// status request in flight, one already closing).
    fn kick(&mut self, idx: usize, kind: Kind, reconnect: bool) -> bool {
        self.note_close_reason(idx, crate::ipc::CloseReason::Kicked);
        let reason = kicked_reason(reconnect);
        match kind {
            Kind::Sse => {
                let event = sse_disconnect(reconnect);
                let limit = self.cfg.max_unsent.saturating_add(event.len());
                self.finish_with(idx, event, limit);
            }
            Kind::Ws | Kind::WsJoining => {
                let code = if reconnect {
                    WS_KICKED_RECONNECT
                } else {
                    WS_KICKED
                };
                self.ws_close(idx, code, reason);
            }
            Kind::TcpStream | Kind::TcpJoining => {
                self.reply_and_close(idx, line::encode_err(reason));
            }
            Kind::PollWaiting | Kind::PollJoining => {
                let body = serde_json::json!({"error": "kicked", "reconnect": reconnect});
                let answer = http::response(
                    403,
                    "application/json",
                    "",
                    body.to_string().as_bytes(),
                    false,
                );
                self.reply_and_close(idx, answer);
            }
            // An SSE stream whose head may not be out yet, or a keep-alive connection between
            // requests: closed without a word.
            Kind::SseJoining | Kind::Http => self.close(idx),
            _ => return false,
        }
        true
    }

    /// Takes a live connection out of `channel` and tells it (SSE `event: unsubscribed`,
    /// WebSocket `{"type":"unsubscribed"}`; the TCP line protocol has no such line).
    fn api_unsubscribe(&mut self, idx: usize, kind: Kind, channel: &str) -> bool {
        if !matches!(
            kind,
            Kind::Sse | Kind::Ws | Kind::TcpStream | Kind::PollWaiting
        ) {
            return false;
        }
        let Some(chan) = self.channels.lookup(channel) else {
            return false;
        };
        let Some(pos) = self.conns[idx].remove_sub(chan) else {
            return false;
        };
        self.leave_channel(chan, pos);
        let note = serde_json::json!({"type": "unsubscribed", "channel": channel}).to_string();
        match kind {
            Kind::Sse => {
                let data = serde_json::json!({"channel": channel});
                let event = format!("event: unsubscribed\ndata: {data}\n\n").into_bytes();
                self.send_or_close(idx, event);
            }
            Kind::Ws => {
                let frame = encode::data_frame(DataKind::Text, note.as_bytes());
                self.send_or_close(idx, frame);
            }
            _ => {}
        }
        true
    }

    /// Adds a live SSE, WebSocket or TCP stream to `channel`, as if it had asked (live from
    /// now, no replay); false when it is not one or is already in it.
    fn api_subscribe(&mut self, idx: usize, kind: Kind, channel: &str) -> bool {
        if !matches!(kind, Kind::Sse | Kind::Ws | Kind::TcpStream) {
            return false;
        }
        let existing = self.channels.lookup(channel);
        if existing.is_some_and(|chan| self.conns[idx].channel_indices().contains(&chan)) {
            return false;
        }
        let (chan, pos) = self.channels.join(channel, idx as u32);
        self.counters.subscribes += 1;
        self.conns[idx].add_sub(chan, pos);
        if existing.is_none() {
            // The master learns this worker's interest; its join answer (token 0, no
            // connection's) only marks the channel known.
            self.send_to_master(ToMaster::Join {
                req: 0,
                channels: vec![channel.to_string()],
                after: None,
            });
        }
        true
    }
}
