//! The worker's edge checks (the decisions are `crate::auth`'s): which routes a listener
//! serves (`--admin-listen`), CORS preflights and headers, subscriber tokens, and the end of a
//! held stream when its token expires or its WebSocket refreshes it.
//!
//! A token's expiry costs a held connection nothing new: it is the connection's timer-wheel
//! `deadline` (a u32 tick count, idle streams have no other timer) plus the [`EXPIRES`] bit.
//! The wheel entry fires at the expiry (re-armed every wheel span for long tokens); nothing
//! polls the connections.

use super::conn::{Kind, ADMIN, EXPIRES, WS_ENVELOPE};
use super::Worker;
use crate::auth::{Grant, Refusal};
use c1m_proto::http::{self, Request};
use c1m_proto::sse;
use c1m_proto::ws::{close, encode, frame::DataKind};
use std::time::Duration;

/// Longest expiry a held connection is armed for (a u32 tick count of 100 ms holds 13 years).
const MAX_EXPIRY: Duration = Duration::from_secs(5 * 365 * 24 * 3600);
/// A stream whose token expires while its replay is still being written waits this long, and
/// is looked at again (the expiry signal goes after the replay, in the stream's own framing).
const JOINING_RETRY: Duration = Duration::from_millis(100);

/// Milliseconds until `exp` (Unix milliseconds), capped at [`MAX_EXPIRY`].
fn expiry_millis(exp: u64) -> u64 {
    crate::auth::millis_until(exp).min(MAX_EXPIRY.as_millis() as u64)
}

/// The routes only the admin listener serves once `--admin-listen` is set.
fn is_admin_route(route: &str) -> bool {
    matches!(
        route,
        "/status" | "/metrics" | "/healthz" | "/dashboard" | "/dashboard/events"
    )
}

impl Worker {
    /// False (and a 404 sent) when this listener does not serve `route`: with `--admin-listen`
    /// the admin listener serves /status, /metrics, /healthz (and /pub with
    /// `--admin-publish`), and the public listener no longer does.
    pub(super) fn route_served(&mut self, idx: usize, route: &str) -> bool {
        if self.cfg.admin_listen.is_none() {
            return true;
        }
        let admin = self.conns[idx].edge & ADMIN != 0;
        // The server API: always on the admin listener, and on the public one only while /pub
        // is (it is never more open than publishing).
        if route.starts_with("/api/") && (admin || !self.cfg.admin_publish) {
            return true;
        }
        let publish = route.starts_with("/pub/") || route.starts_with("/api/");
        // The routes that moved to the admin listener: served there and only there.
        let moved = is_admin_route(route) || (publish && self.cfg.admin_publish);
        let served = moved == admin;
        if !served {
            let why = if admin {
                "the admin listener serves /status, /metrics, /healthz, /dashboard, /api (and /pub with --admin-publish)"
            } else {
                "not served here: this path is on the admin listener"
            };
            self.counters.refused.not_found += 1;
            self.reply_and_close(idx, http::error(404, why));
        }
        served
    }

    /// `OPTIONS` on /sub or /pub with CORS on: the preflight answer (403 for an origin not on
    /// the list, counted as refused.forbidden).
    pub(super) fn preflight(&mut self, idx: usize, req: &Request<'_>, method: &str) {
        let keep_alive = self.conns[idx].keep_alive;
        match self.auth.cors.preflight(req, method, keep_alive) {
            Ok(answer) => self.reply(idx, answer),
            Err(refusal) => {
                self.counters.refused.forbidden += 1;
                self.reply_and_close(idx, refusal);
            }
        }
    }

    /// CORS for a /sub or /pub request: refuses (403) an Origin the list leaves out, and
    /// remembers the headers an allowed one's answer carries. WebSocket upgrades are judged by
    /// the handshake's Origin check (same list) and need no headers. False when refused.
    pub(super) fn cors_admit(&mut self, idx: usize, req: &Request<'_>) -> bool {
        if !self.auth.cors.is_on() {
            return true;
        }
        if self.auth.cors.refuses(req) {
            self.counters.refused.forbidden += 1;
            self.reply_and_close(
                idx,
                http::error(403, "origin not allowed (see --cors-origins)"),
            );
            return false;
        }
        let upgrade = c1m_proto::ws::handshake::is_upgrade(req.headers.iter().copied());
        if let Some(lines) = self
            .auth
            .cors
            .headers(req.header_str("Origin"))
            .filter(|_| !upgrade)
        {
            let token = self.conns.token(idx);
            self.conns.cors_pending.insert(token, lines);
        }
        true
    }

    /// The CORS header lines owed to this connection's next answer (taken: once per request).
    pub(super) fn take_cors(&mut self, idx: usize) -> Option<std::rc::Rc<str>> {
        if self.conns.cors_pending.is_empty() {
            return None;
        }
        let token = self.conns.token(idx);
        self.conns.cors_pending.remove(&token)
    }

    /// Whether an answer to this connection still owes CORS headers.
    pub(super) fn owes_cors(&self, idx: usize) -> bool {
        !self.conns.cors_pending.is_empty()
            && self.conns.cors_pending.contains_key(&self.conns.token(idx))
    }

    /// The SSE response head, with CORS headers when the request came from an allowed Origin.
    /// Carries the connection's id (`C1m-Conn-Id`), which the server API's calls by
    /// connection take.
    pub(super) fn sse_head(&mut self, idx: usize) -> Vec<u8> {
        let id = self.conn_id(idx);
        let mut head = sse::RESPONSE_HEAD[..sse::RESPONSE_HEAD.len() - 2].to_vec();
        head.extend_from_slice(format!("C1m-Conn-Id: {id}\r\n").as_bytes());
        if let Some(lines) = self.take_cors(idx) {
            head.extend_from_slice(lines.as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        head
    }

    /// An error answer that closes the connection, with CORS headers when owed (so a page
    /// can read why it was refused).
    pub(super) fn error_answer(
        &mut self,
        idx: usize,
        status: u16,
        message: &str,
        extra: &str,
    ) -> Vec<u8> {
        let cors = self.take_cors(idx);
        let extra = format!("{}{extra}", cors.as_deref().unwrap_or(""));
        http::response(
            status,
            "text/plain; charset=utf-8",
            &extra,
            format!("{message}\n").as_bytes(),
            false,
        )
    }

    /// Judges a subscriber's token; on refusal answers 401 / 403 (counted) and returns None.
    pub(super) fn auth_subscribe(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        channels: &[&str],
    ) -> Option<Grant> {
        let token_required = self.token_required(channels);
        match self.auth.subscribe(req, channels, token_required) {
            Ok(grant) => Some(grant),
            Err(refusal) => {
                self.refuse_auth(idx, &refusal);
                None
            }
        }
    }

    /// 401 (with `WWW-Authenticate: Bearer`, RFC 6750 3) or 403 for a token refusal.
    pub(super) fn refuse_auth(&mut self, idx: usize, refusal: &Refusal) {
        let extra = match refusal {
            Refusal::Unauthorized(_) => {
                self.counters.refused.unauthorized += 1;
                "WWW-Authenticate: Bearer realm=\"c1m\"\r\n"
            }
            Refusal::Forbidden(_) => {
                self.counters.refused.forbidden += 1;
                ""
            }
        };
        let answer = self.error_answer(idx, refusal.status(), refusal.message(), extra);
        self.reply_and_close(idx, answer);
    }

    /// After a subscribe: the connection belongs to the token's user (when it names one), and
    /// a held stream (SSE, WebSocket) with a token ends at its expiry. A long-poll shows its
    /// token again at every poll, so only a wait that would outlast the token ends early (no
    /// message may reach it after its `exp`).
    pub(super) fn adopt_grant(&mut self, idx: usize, grant: Grant) {
        let Grant::Until {
            exp_ms: exp,
            user,
            info,
        } = grant
        else {
            return;
        };
        self.adopt_identity(idx, Some(exp), user, info);
    }

    /// The identity a subscriber proved (a token, or the connect proxy's answer): its user,
    /// its presence info, and its expiry when it has one.
    pub(super) fn adopt_identity(
        &mut self,
        idx: usize,
        exp: Option<u64>,
        user: Option<Box<str>>,
        info: Option<Box<str>>,
    ) {
        if !self.conns.contains(idx) {
            return;
        }
        if let Some(info) = info {
            self.presence_info(self.conns.token(idx), &info);
        }
        if let Some(user) = user {
            let token = self.conns.token(idx);
            self.conns.set_user(token, &user);
            self.note_user(token, &user);
        }
        let Some(exp) = exp else {
            return;
        };
        let conn = &self.conns[idx];
        match conn.kind {
            Kind::Sse
            | Kind::SseJoining
            | Kind::Ws
            | Kind::WsJoining
            | Kind::TcpStream
            | Kind::TcpJoining => self.set_expiry(idx, exp),
            Kind::PollJoining | Kind::PollWaiting => {
                let ends = self.wheel.deadline_after(expiry_millis(exp));
                if conn.deadline == 0 || ends < conn.deadline {
                    self.set_expiry(idx, exp);
                }
            }
            _ => {}
        }
    }

    pub(super) fn set_expiry(&mut self, idx: usize, exp: u64) {
        let deadline = self.wheel.deadline_after(expiry_millis(exp));
        let mut conn = self.conns.at(idx);
        let had = conn.deadline;
        conn.deadline = deadline;
        conn.edge |= EXPIRES;
        // An entry already in the wheel for an earlier tick re-arms itself at the new deadline
        // when it fires (`on_timer`), so a later expiry adds no entry: refreshes never pile up.
        if had == 0 || deadline < had {
            let token = super::token_of(idx, conn.generation);
            self.wheel.schedule(token, deadline);
        }
    }

    /// The token of a held stream expired: SSE gets `event: expired`, a WebSocket close 4001,
    /// then the connection closes; a waiting long-poll is answered 401 and its connection stays
    /// (all counted as refused.expired). The client subscribes again with a new token and its
    /// last id; history replays what it missed meanwhile.
    pub(super) fn token_expired(&mut self, idx: usize) {
        if self.refresh_by_proxy(idx) {
            return;
        }
        self.end_expired(idx);
    }

    /// The held stream's expiry is final (no refresh proxy, or it said so): it ends.
    pub(super) fn end_expired(&mut self, idx: usize) {
        self.note_close_reason(idx, crate::ipc::CloseReason::Expired);
        let kind = self.conns[idx].kind;
        match kind {
            Kind::SseJoining | Kind::PollJoining | Kind::TcpJoining => {
                self.arm_timer(idx, JOINING_RETRY)
            }
            Kind::TcpStream => {
                self.counters.refused.expired += 1;
                let bye = c1m_proto::line::encode_err("expired; subscribe again with your last id");
                let limit = self.cfg.max_unsent.saturating_add(bye.len());
                self.finish_with(idx, bye, limit);
            }
            Kind::PollWaiting => {
                self.counters.refused.expired += 1;
                let why = "token expired; poll again with a new token and last_id";
                let body = serde_json::json!({ "error": why }).to_string();
                self.poll_answer(idx, 401, body.as_bytes());
            }
            Kind::Sse => {
                self.counters.refused.expired += 1;
                let limit = self.cfg.max_unsent.saturating_add(sse::EXPIRED.len());
                self.finish_with(idx, sse::EXPIRED.to_vec(), limit);
            }
            Kind::Ws | Kind::WsJoining => {
                self.counters.refused.expired += 1;
                self.ws_close(
                    idx,
                    close::UNAUTHORIZED,
                    "token expired; reconnect with a new token and last_id",
                );
            }
            _ => {}
        }
    }

    /// A client text message `{"type":"refresh","token":"JWT"}` on a WebSocket, when auth is
    /// on: the new token must grant the connection's channels; its expiry replaces the old
    /// one and the client gets `{"type":"refreshed","exp":N}` (JSON framing only). A bad token
    /// closes with 4001, one not granting the channels with 4003. Returns false when the
    /// message is not a refresh (it is then client data as usual).
    pub(super) fn ws_refresh(&mut self, idx: usize, message: &[u8]) -> bool {
        if !self.tokens_read() || !message.starts_with(b"{") {
            return false;
        }
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(message) else {
            return false;
        };
        if v["type"] != "refresh" {
            return false;
        }
        let Some(token) = v["token"].as_str() else {
            self.counters.refused.unauthorized += 1;
            self.ws_close(idx, close::UNAUTHORIZED, "refresh needs a token");
            return true;
        };
        let names: Vec<String> = self.conns[idx]
            .channel_indices()
            .into_iter()
            .filter_map(|c| self.channels.get(c).map(|ch| ch.name.to_string()))
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let user = self
            .conns
            .user_of(self.conns.token(idx))
            .map(|u| u.to_string());
        match self.auth.refresh(token, &names, user.as_deref()) {
            Ok(exp) => {
                self.set_expiry(idx, exp);
                if self.conns[idx].flags & WS_ENVELOPE != 0 {
                    // `exp` as the token states it: Unix seconds (a fraction only if it has one).
                    let secs = if exp % 1000 == 0 {
                        serde_json::json!(exp / 1000)
                    } else {
                        serde_json::json!(exp as f64 / 1000.0)
                    };
                    let ack = serde_json::json!({"type": "refreshed", "exp": secs}).to_string();
                    let frame = encode::data_frame(DataKind::Text, ack.as_bytes());
                    self.send_or_close(idx, frame);
                }
            }
            Err(Refusal::Unauthorized(why)) => {
                self.counters.refused.unauthorized += 1;
                self.ws_close(idx, close::UNAUTHORIZED, &why);
            }
            Err(Refusal::Forbidden(why)) => {
                self.counters.refused.forbidden += 1;
                let why: String = why.chars().take(100).collect();
                self.ws_close(idx, close::FORBIDDEN, &why);
            }
        }
        true
    }
}
