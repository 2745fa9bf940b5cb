//! Input on connections that expect it: HTTP request heads (and publish bodies) and the raw TCP
//! `SUB` line. Routing, limits and the error answers for bad input live here; every refusal is
//! counted under the `/status` key that names it.

use super::conn::Kind;
use super::conn::{CONTINUE_SENT, READ_PAUSED};
use super::conn_events::ReadUntil;
use super::Worker;
use crate::config::Config;
use crate::ipc::ToMaster;
use c1m_proto::chunked::{self, ChunkedError, Decoded};
use c1m_proto::http::{self, HeadError, Request};
use c1m_proto::http_framing::BodyFraming;
use c1m_proto::{channel, line};

/// Most unprocessed input a connection may hold: a full head plus the largest body in its
/// largest coding, plus one byte. So a connection that takes input can always use a full buffer:
/// either a whole request is in it, or it is refused (431, 413).
pub fn input_limit(cfg: &Config) -> usize {
    http::MAX_HEAD + chunked::wire_limit(cfg.max_payload.max(cfg.api_max_body)) + 1
}

/// How far a request body has arrived ([`Worker::read_body`]).
pub enum BodyRead {
    /// Still arriving (a `100 Continue` went out if asked for).
    Partial,
    /// The whole body and the bytes it took after the head.
    Done(Vec<u8>, usize),
    /// Over the limit: what was too large.
    TooLarge(String),
    Malformed(&'static str),
}

/// What a subscribe asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Sse,
    LongPoll,
    Tcp,
    Ws,
}

impl Worker {
    /// Handles complete requests at the start of `data`; returns the bytes consumed.
    pub(super) fn process_input(&mut self, idx: usize, data: &[u8]) -> usize {
        let mut pos = 0;
        while pos < data.len() {
            let Some(conn) = self.conns.get(idx) else {
                return data.len();
            };
            let used = match conn.kind {
                // Answers not yet written hold the next request back (the peer reads slower than
                // it pipelines): the queue stays one answer deep, the rest waits in the socket.
                Kind::Http if conn.has_out() => break,
                Kind::Http => self.http_request(idx, &data[pos..]),
                Kind::TcpCommand => self.tcp_command(idx, &data[pos..]),
                // Pipelined input waits until the current request is answered.
                _ => break,
            };
            match used {
                Some(n) => pos += n,
                None => break,
            }
        }
        if pos > 0 && pos < data.len() {
            // A pipelined request begun behind the one just answered.
            self.next_request_started(idx);
        }
        pos
    }

    /// A served keep-alive connection has begun its next request: from here the head
    /// timeout bounds it, not the idle wait its last answer armed.
    pub(super) fn next_request_started(&mut self, idx: usize) {
        let started = self
            .conns
            .get(idx)
            .is_some_and(|c| c.kind == Kind::Http && c.flags & super::conn::SERVED != 0);
        if started {
            self.arm_head_timer(idx);
        }
    }

    /// Re-runs input that arrived while the connection was busy (pipelining, keep-alive), and
    /// reads on if reading stopped at a full buffer (READ_PAUSED).
    pub(super) fn resume_input(&mut self, idx: usize) {
        if self
            .conns
            .get(idx)
            .is_some_and(|c| c.flags & READ_PAUSED != 0)
        {
            return self.on_readable(idx, ReadUntil::WouldBlock);
        }
        let Some(mut pending) = self.conns.get_mut(idx).and_then(|mut c| c.take_inbuf()) else {
            return;
        };
        let consumed = self.process_input(idx, pending.unused());
        pending.consume(consumed);
        if let Some(mut conn) = self.conns.get_mut(idx) {
            if conn.kind != Kind::Closing {
                conn.keep_inbuf(pending);
            }
        }
    }

    /// Sends a final answer and closes once it is written.
    pub(super) fn reply_and_close(&mut self, idx: usize, bytes: Vec<u8>) {
        self.finish_with(idx, bytes, self.cfg.max_unsent);
    }

    /// A complete response with a Content-Length body, kept alive as the request asked.
    pub(super) fn respond(
        &mut self,
        idx: usize,
        status: u16,
        content_type: &str,
        extra: &str,
        body: &[u8],
    ) {
        let keep_alive = self.conns[idx].keep_alive;
        let answer = match self.take_cors(idx) {
            Some(cors) => http::response(
                status,
                content_type,
                &format!("{cors}{extra}"),
                body,
                keep_alive,
            ),
            None => http::response(status, content_type, extra, body, keep_alive),
        };
        self.reply(idx, answer);
    }

    /// Answers a request and keeps the connection for the next one, unless the request asked
    /// to close (HTTP/1.0, `Connection: close`).
    pub(super) fn reply(&mut self, idx: usize, bytes: Vec<u8>) {
        if !self.conns[idx].keep_alive {
            return self.reply_and_close(idx, bytes);
        }
        let max = self.cfg.max_unsent;
        let Some(mut conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.kind = Kind::Http;
        if conn.send_owned(bytes, max) != super::conn::Sent::Done {
            return self.close(idx);
        }
        self.arm_idle_timer(idx);
    }

    pub(super) fn refuse(&mut self, idx: usize, status: u16, message: &str) {
        let r = &mut self.counters.refused;
        match status {
            400 | 411 | 501 => r.bad_request += 1,
            401 => r.unauthorized += 1,
            403 => r.forbidden += 1,
            404 => r.not_found += 1,
            405 => r.method += 1,
            413 => r.payload_too_large += 1,
            431 => r.head_too_large += 1,
            _ => {}
        }
        let answer = self.error_answer(idx, status, message, "");
        self.reply_and_close(idx, answer);
    }

    /// One HTTP request. Returns the bytes it used, or None when it needs more input.
    fn http_request(&mut self, idx: usize, data: &[u8]) -> Option<usize> {
        match self.h2_start(idx, data) {
            super::h2::Start::No => {}
            super::h2::Start::NeedMore => return None,
            super::h2::Start::Started(used) => return Some(used),
        }
        let req = match http::parse_request(data) {
            Ok(req) => req,
            Err(HeadError::Partial) => return None,
            Err(HeadError::TooLarge) => {
                self.refuse(idx, 431, "request head larger than 8 KiB");
                return Some(data.len());
            }
            Err(HeadError::Malformed(why)) => {
                self.refuse(idx, 400, why);
                return Some(data.len());
            }
        };
        self.conns[idx].keep_alive = req.keep_alive();
        self.conns[idx].flags |= super::conn::SERVED;
        let route = req.path.trim_end_matches('/');
        let used = req.head_len;
        // Framing first, on every request: a body left unread would be parsed as the next
        // request (a GET carrying a POST past a proxy's rules). The connection closes after.
        let framing = match req.body_framing() {
            Ok(f) => f,
            Err(e) => {
                self.refuse(idx, e.status, e.reason);
                return Some(data.len());
            }
        };
        let takes_body =
            req.method == "POST" && (route.starts_with("/pub/") || route.starts_with("/api/"));
        if !takes_body && !matches!(framing, BodyFraming::None | BodyFraming::Length(0)) {
            self.refuse(
                idx,
                400,
                "only POST /pub/{channel} and POST /api/{call} take a request body",
            );
            return Some(data.len());
        }
        if !self.route_served(idx, route) {
            return Some(data.len());
        }
        // Read and acknowledged by the control worker, which no fan-out keeps busy.
        if takes_body && self.move_publish(idx, data) {
            return Some(data.len());
        }
        let sub_or_pub = route.starts_with("/sub/") || route.starts_with("/pub/");
        if sub_or_pub && req.method == "OPTIONS" && self.auth.cors.is_on() {
            let method = if route.starts_with("/sub/") {
                "GET"
            } else {
                "POST"
            };
            self.preflight(idx, &req, method);
            return Some(used);
        }
        if sub_or_pub && !self.cors_admit(idx, &req) {
            return Some(data.len());
        }
        if let Some(channels) = route.strip_prefix("/sub/") {
            if req.method != "GET" {
                self.refuse_method(idx, "GET");
                return Some(data.len());
            }
            self.subscribe_request(idx, &req, channels);
            return Some(used);
        }
        if let Some(call) = route.strip_prefix("/api/") {
            return self.api_request(idx, &req, framing, call, data);
        }
        if let Some(channel) = route.strip_prefix("/channels/") {
            if let Some(channel) = channel.strip_suffix("/presence") {
                return self.presence_request(idx, &req, channel, data.len(), used);
            }
            return self.channel_info_request(idx, &req, channel, data.len(), used);
        }
        if let Some(channel) = route.strip_prefix("/pub/") {
            if req.method != "POST" {
                self.refuse_method(idx, "POST");
                return Some(data.len());
            }
            return self.publish_request(idx, &req, framing, channel, data);
        }
        match route {
            "/status" | "/metrics" | "/healthz" | "" | "/demo" | "/dashboard"
            | "/dashboard/events"
                if req.method != "GET" =>
            {
                self.refuse_method(idx, "GET");
                Some(data.len())
            }
            "" | "/demo" => {
                let page = include_bytes!("../demo.html");
                self.respond(idx, 200, "text/html; charset=utf-8", "", page);
                Some(used)
            }
            "/healthz" => {
                self.health_request(idx);
                Some(used)
            }
            "/status" | "/metrics" => {
                self.status_request(idx, route == "/metrics");
                Some(used)
            }
            "/dashboard" => {
                let page = include_bytes!("../dashboard.html");
                self.respond(idx, 200, "text/html; charset=utf-8", "", page);
                Some(used)
            }
            "/dashboard/events" => {
                self.dashboard_request(idx);
                Some(used)
            }
            _ => {
                self.refuse(
                    idx,
                    404,
                    "unknown path; see /sub/{channel}, /pub/{channel}, /channels/{channel}, \
                     /api/{call}, /status, /metrics, /healthz, /dashboard, /demo",
                );
                Some(data.len())
            }
        }
    }

    pub(super) fn refuse_method(&mut self, idx: usize, allow: &str) {
        self.counters.refused.method += 1;
        let body = format!("method not allowed; use {allow}\n");
        let bytes = http::response(
            405,
            "text/plain; charset=utf-8",
            &format!("Allow: {allow}\r\n"),
            body.as_bytes(),
            false,
        );
        self.reply_and_close(idx, bytes);
    }

    fn subscribe_request(&mut self, idx: usize, req: &Request<'_>, list: &str) {
        let channels = match channel::parse_list(list, self.cfg.max_channels_per_sub) {
            Ok(c) => c,
            Err(e) => return self.refuse(idx, 400, &e.to_string()),
        };
        let last_id = match req
            .query_param("last_id")
            .or_else(|| req.header_str("Last-Event-ID"))
        {
            None | Some("") => None,
            Some(v) => match v.parse::<u64>() {
                Ok(id) => Some(id),
                Err(_) => {
                    return self.refuse(
                        idx,
                        400,
                        "last_id / Last-Event-ID must be an unsigned integer",
                    )
                }
            },
        };
        let Some(grant) = self.auth_subscribe(idx, req, &channels) else {
            return;
        };
        if req.header("Upgrade").is_some() {
            return self.ws_upgrade(idx, req, &channels, last_id, grant);
        }
        let sse = req
            .header_str("Accept")
            .is_some_and(|a| a.contains("text/event-stream"));
        let transport = if sse {
            Transport::Sse
        } else {
            Transport::LongPoll
        };
        self.subscribe_gated(idx, Some(req), &channels, last_id, transport, grant);
    }

    fn publish_request(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        framing: BodyFraming,
        channel: &str,
        data: &[u8],
    ) -> Option<usize> {
        if !self.publish_allowed(idx, req, channel) {
            return Some(data.len());
        }
        if channel.contains(',') {
            self.refuse(
                idx,
                400,
                "publish takes one channel: POST /pub/{channel} (a comma-separated list is for \
                 /sub/ only); publish to each channel in its own request",
            );
            return Some(data.len());
        }
        if !channel::is_valid_name(channel) {
            self.refuse(
                idx,
                400,
                &channel::ChannelError::BadName(channel.to_string()).to_string(),
            );
            return Some(data.len());
        }
        // Read as bytes: a key that is not UTF-8 is refused, not taken for no key.
        let idempotency_key = match req.header("Idempotency-Key").map(std::str::from_utf8) {
            None => None,
            Some(Ok(key)) if c1m_proto::idempotency::is_valid_key(key.trim()) => {
                Some(key.trim().to_string())
            }
            Some(_) => {
                self.refuse(idx, 400, c1m_proto::idempotency::KEY_RULE);
                return Some(data.len());
            }
        };
        let max = self.cfg.max_payload;
        let too_large = |what: String| format!("{what} is over the {max} byte payload limit");
        let (payload, used) = match self.read_body(idx, req, framing, data, max) {
            BodyRead::Partial => return None,
            BodyRead::Done(payload, used) => (payload, used),
            BodyRead::TooLarge(what) => {
                self.refuse(idx, 413, &too_large(what));
                return Some(data.len());
            }
            BodyRead::Malformed(why) => {
                self.refuse(idx, 400, why);
                return Some(data.len());
            }
        };
        let token = self.conns.token(idx);
        let end = req.head_len + used;
        // The body is whole: the next request on this connection gets its own 100 Continue.
        self.conns[idx].flags &= !CONTINUE_SENT;
        if self.master_congested() {
            self.refuse_busy(idx, 1);
            return Some(end);
        }
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Publishing;
        conn.deadline = 0;
        self.conns
            .publish_started
            .insert(token, c1m_sys::shm::monotonic_micros());
        let frame = match idempotency_key {
            Some(key) => ToMaster::PublishKeyed {
                req: token,
                channel: channel.to_string(),
                payload,
                key,
            },
            None => ToMaster::Publish {
                req: token,
                channel: channel.to_string(),
                payload,
            },
        };
        self.send_to_master(frame);
        Some(end)
    }

    /// The request's body, up to `max` bytes (after chunked decoding). A chunked body that is
    /// still arriving resumes where the last read's scan stopped.
    pub(super) fn read_body(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        framing: BodyFraming,
        data: &[u8],
        max: usize,
    ) -> BodyRead {
        let body = &data[req.head_len..];
        let token = self.conns.token(idx);
        let mut progress = self.conns.chunked_bodies.remove(&token).unwrap_or_default();
        match framing {
            BodyFraming::None => BodyRead::Done(Vec::new(), 0),
            BodyFraming::Length(len) if len > max as u64 => {
                BodyRead::TooLarge(format!("a body of {len} bytes"))
            }
            BodyFraming::Length(len) => {
                let len = len as usize; // ≤ max
                if body.len() < len {
                    self.send_continue(idx, req);
                    return BodyRead::Partial;
                }
                BodyRead::Done(body[..len].to_vec(), len)
            }
            BodyFraming::Chunked => match chunked::decode_resume(body, max, &mut progress) {
                Ok(Decoded::Complete { body, used }) => BodyRead::Done(body, used),
                Ok(Decoded::Partial) => {
                    self.conns.chunked_bodies.insert(token, progress);
                    self.send_continue(idx, req);
                    BodyRead::Partial
                }
                Err(ChunkedError::TooLarge) => {
                    BodyRead::TooLarge("the chunked body (or its framing overhead)".to_string())
                }
                Err(ChunkedError::Malformed(why)) => BodyRead::Malformed(why),
            },
        }
    }

    /// `Expect: 100-continue` (curl sends it before larger and chunked bodies): tell the client
    /// to send the body now instead of after its own timeout. Once per request.
    fn send_continue(&mut self, idx: usize, req: &Request<'_>) {
        let mut conn = self.conns.at(idx);
        if conn.flags & CONTINUE_SENT != 0 || !req.header_has_token("Expect", "100-continue") {
            return;
        }
        conn.flags |= CONTINUE_SENT;
        let max = self.cfg.max_unsent;
        if conn.send_owned(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec(), max)
            != super::conn::Sent::Done
        {
            self.close(idx);
        }
    }

    /// The publish rule (`publish_rule`), shared with WebSocket client publish.
    pub(super) fn publish_allowed(&mut self, idx: usize, req: &Request<'_>, channel: &str) -> bool {
        let peer = self.conns.peer_ip(idx);
        let key = self.cfg.publish_key.as_deref();
        match super::publish_rule::check_with_token(key, &self.auth, req, peer, &[channel]) {
            Ok(()) => true,
            Err(super::publish_rule::Denied::Token(refusal)) => {
                self.refuse_auth(idx, &refusal);
                false
            }
            Err(denied) => {
                self.refuse(idx, denied.http_status(), denied.message());
                false
            }
        }
    }

    /// The raw TCP `SUB` line.
    fn tcp_command(&mut self, idx: usize, data: &[u8]) -> Option<usize> {
        let Some(end) = data.iter().position(|&b| b == b'\n') else {
            if data.len() > line::MAX_LINE {
                self.counters.refused.head_too_large += 1;
                self.reply_and_close(idx, line::encode_err("command line longer than 8 KiB"));
                return Some(data.len());
            }
            return None;
        };
        let sub = match line::parse_command(&data[..end]) {
            Ok(sub) => sub,
            Err(why) => {
                self.counters.refused.bad_request += 1;
                self.reply_and_close(idx, line::encode_err(why));
                return Some(data.len());
            }
        };
        match channel::parse_list(sub.channels, self.cfg.max_channels_per_sub) {
            Ok(channels) => self.subscribe_gated(
                idx,
                None,
                &channels,
                sub.last_id,
                Transport::Tcp,
                crate::auth::Grant::Anonymous,
            ),
            Err(e) => {
                self.counters.refused.bad_request += 1;
                self.reply_and_close(idx, line::encode_err(&e.to_string()));
            }
        }
        Some(end + 1)
    }
}
