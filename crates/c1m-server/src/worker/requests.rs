//! Input on connections that expect it: HTTP request heads (and publish bodies) and the raw TCP
//! `SUB` line. Routing, limits and the error answers for bad input live here; every refusal is
//! counted under the `/status` key that names it.

use super::conn::Kind;
use super::Worker;
use crate::config::Config;
use crate::ipc::ToMaster;
use c1m_proto::http::{self, HeadError, Request};
use c1m_proto::{channel, line};

/// Most unprocessed input a connection may hold: a full head plus the largest body.
pub fn input_limit(cfg: &Config) -> usize {
    http::MAX_HEAD + cfg.max_payload + 1
}

/// What a subscribe asks for.
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
                Kind::Http => self.http_request(idx, &data[pos..]),
                Kind::TcpCommand => self.tcp_command(idx, &data[pos..]),
                // Pipelined input waits until the current request is answered.
                _ => return pos,
            };
            match used {
                Some(n) => pos += n,
                None => break,
            }
        }
        pos
    }

    /// Re-runs input that arrived while the connection was busy (pipelining, keep-alive).
    pub(super) fn resume_input(&mut self, idx: usize) {
        let Some(pending) = self.conns.get_mut(idx).and_then(|c| c.inbuf.take()) else {
            return;
        };
        let consumed = self.process_input(idx, &pending);
        if let Some(conn) = self.conns.get_mut(idx) {
            if consumed < pending.len() && conn.kind != Kind::Closing {
                conn.inbuf = Some(Box::new(pending[consumed..].to_vec()));
            }
        }
    }

    /// Sends a final answer and closes once it is written.
    pub(super) fn reply_and_close(&mut self, idx: usize, bytes: Vec<u8>) {
        let max = self.cfg.max_unsent;
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.kind = Kind::Closing;
        conn.deadline = 0;
        conn.inbuf = None;
        let _ = conn.stream.shutdown(std::net::Shutdown::Read);
        if conn.send_owned(bytes, max) != super::conn::Sent::Done || conn.out.is_none() {
            self.close(idx);
        }
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
        self.reply(
            idx,
            http::response(status, content_type, extra, body, keep_alive),
        );
    }

    /// Answers a request and keeps the connection for the next one, unless the request asked
    /// to close (HTTP/1.0, `Connection: close`).
    pub(super) fn reply(&mut self, idx: usize, bytes: Vec<u8>) {
        if !self.conns[idx].keep_alive {
            return self.reply_and_close(idx, bytes);
        }
        let max = self.cfg.max_unsent;
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.kind = Kind::Http;
        if conn.send_owned(bytes, max) != super::conn::Sent::Done {
            return self.close(idx);
        }
        self.arm_head_timer(idx);
    }

    fn refuse(&mut self, idx: usize, status: u16, message: &str) {
        let r = &mut self.counters.refused;
        match status {
            400 | 411 => r.bad_request += 1,
            401 | 403 => r.forbidden += 1,
            404 => r.not_found += 1,
            405 => r.method += 1,
            413 => r.payload_too_large += 1,
            431 => r.head_too_large += 1,
            _ => {}
        }
        self.reply_and_close(idx, http::error(status, message));
    }

    /// One HTTP request. Returns the bytes it used, or None when it needs more input.
    fn http_request(&mut self, idx: usize, data: &[u8]) -> Option<usize> {
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
        if let Some(channels) = route.strip_prefix("/sub/") {
            if req.method != "GET" {
                self.refuse_method(idx, "GET");
                return Some(data.len());
            }
            self.subscribe_request(idx, &req, channels);
            return Some(used);
        }
        if let Some(channel) = route.strip_prefix("/pub/") {
            if req.method != "POST" {
                self.refuse_method(idx, "POST");
                return Some(data.len());
            }
            return self.publish_request(idx, &req, channel, data);
        }
        match route {
            "/status" | "/metrics" | "/healthz" | "" | "/demo" if req.method != "GET" => {
                self.refuse_method(idx, "GET");
                Some(data.len())
            }
            "" | "/demo" => {
                let page = include_bytes!("../demo.html");
                self.respond(idx, 200, "text/html; charset=utf-8", "", page);
                Some(used)
            }
            "/healthz" => {
                self.respond(idx, 200, "text/plain", "", b"ok\n");
                Some(used)
            }
            "/status" | "/metrics" => {
                self.conns[idx].kind = Kind::Status;
                self.conns[idx].deadline = 0;
                let token = super::token_of(idx, self.conns[idx].generation);
                self.send_to_master(ToMaster::StatusQuery {
                    req: token,
                    metrics: route == "/metrics",
                });
                Some(used)
            }
            _ => {
                self.refuse(
                    idx,
                    404,
                    "unknown path; see /sub/{channel}, /pub/{channel}, /status, /metrics, /healthz",
                );
                Some(data.len())
            }
        }
    }

    fn refuse_method(&mut self, idx: usize, allow: &str) {
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
        if req.header("Upgrade").is_some() {
            return self.ws_upgrade(idx, req, &channels, last_id);
        }
        let sse = req
            .header_str("Accept")
            .is_some_and(|a| a.contains("text/event-stream"));
        let transport = if sse {
            Transport::Sse
        } else {
            Transport::LongPoll
        };
        self.subscribe(idx, &channels, last_id, transport);
    }

    fn publish_request(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        channel: &str,
        data: &[u8],
    ) -> Option<usize> {
        if !self.publish_allowed(idx, req) {
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
        let len = match req.content_length() {
            Ok(len) => len,
            Err(why) => {
                self.refuse(idx, 411, why);
                return Some(data.len());
            }
        };
        if len > self.cfg.max_payload {
            let msg = format!(
                "payload of {len} bytes is over the {} byte limit",
                self.cfg.max_payload
            );
            self.refuse(idx, 413, &msg);
            return Some(data.len());
        }
        let end = req.head_len + len;
        if data.len() < end {
            return None; // body still arriving
        }
        if self.master_congested() {
            self.refuse_busy(idx, 1);
            return Some(end);
        }
        let conn = &mut self.conns[idx];
        conn.kind = Kind::Publishing;
        conn.deadline = 0;
        let token = super::token_of(idx, conn.generation);
        self.send_to_master(ToMaster::Publish {
            req: token,
            channel: channel.to_string(),
            payload: data[req.head_len..end].to_vec(),
        });
        Some(end)
    }

    /// The publish rule (`publish_rule`), shared with WebSocket client publish.
    fn publish_allowed(&mut self, idx: usize, req: &Request<'_>) -> bool {
        let peer = self.conns[idx].stream.peer_addr().ok().map(|a| a.ip());
        match super::publish_rule::check(self.cfg.publish_key.as_deref(), req, peer) {
            Ok(()) => true,
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
            Ok(channels) => self.subscribe(idx, &channels, sub.last_id, Transport::Tcp),
            Err(e) => {
                self.counters.refused.bad_request += 1;
                self.reply_and_close(idx, line::encode_err(&e.to_string()));
            }
        }
        Some(end + 1)
    }
}
