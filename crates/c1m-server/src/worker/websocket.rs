//! WebSocket subscribers (RFC 6455, server side): the upgrade, client frames (ping → pong,
//! close handshake, protocol errors closed with their code, client data ignored, refused or
//! published), keepalive pings with a pong deadline, and the frames replayed on resume.
//! Frame parsing and encoding live in `c1m_proto::ws`; this file only wires them to sockets.

use super::conn::{
    Kind, Sent, WsMessage, COUNTED_SLOW, PROXY_PENDING, WS_AWAITING_PONG, WS_ENVELOPE,
    WS_MAY_PUBLISH,
};
use super::joins::encode_replay;
use super::publish_rule;
use super::requests::Transport;
use super::Worker;
use crate::ipc::{Replay, ToMaster};
use c1m_proto::http::Request;
use c1m_proto::ws::frame::{DataKind, Event, Limits, Masking};
use c1m_proto::ws::{close, encode, handshake};

/// How long a WebSocket closed as a slow consumer may take to read what it owes and the close
/// frame behind it before its socket is closed regardless.
const SLOW_CLOSE_LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// The frame format a WebSocket asked for: Ok(true) = JSON envelope (the default), Ok(false) =
/// `?format=plain`. `needs_ids`: it resumes or names several channels, which plain cannot serve.
fn ws_format(req: &Request<'_>, needs_ids: bool) -> Result<bool, &'static str> {
    match req.query_param("format") {
        None | Some("json") => Ok(true),
        Some("plain") if needs_ids => Err(
            "format=plain carries no ids or channel names: it cannot resume (last_id) or take several channels",
        ),
        Some("plain") => Ok(false),
        Some(_) => Err("format must be json (the default) or plain"),
    }
}

/// A gap notice as a WebSocket text frame (docs/PROTOCOL.md).
pub(super) fn gap_frame(channel: &str, after: u64, through: u64) -> Vec<u8> {
    let json =
        serde_json::json!({"type": "gap", "channel": channel, "after": after, "through": through});
    encode::data_frame(DataKind::Text, json.to_string().as_bytes())
}

impl Worker {
    /// Validates the upgrade (400/403/426 with a reason otherwise), answers 101 and subscribes.
    /// Frames are JSON envelopes carrying each message's id (what a reconnecting client resumes
    /// from) unless the client asks for `?format=plain`: bare payloads, so no resume and no gap
    /// notices, and therefore refused (400) with a resume position or several channels.
    pub(super) fn ws_upgrade(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        channels: &[&str],
        last_id: Option<u64>,
        grant: crate::auth::Grant,
    ) {
        let mut accept = match handshake::validate_request(req, &self.ws_policy) {
            Ok(accept) => accept,
            Err(reject) => {
                if reject.status == 403 {
                    self.counters.refused.forbidden += 1;
                } else {
                    self.counters.refused.bad_request += 1;
                }
                return self.reply_and_close(idx, reject.response);
            }
        };
        let envelope = match ws_format(req, channels.len() > 1 || last_id.is_some()) {
            Ok(envelope) => envelope,
            Err(why) => {
                self.counters.refused.bad_request += 1;
                return self.reply_and_close(idx, c1m_proto::http::error(400, why));
            }
        };
        let mut flags = if envelope { WS_ENVELOPE } else { 0 };
        // The right to publish is judged once, on the upgrade's headers and peer, by the same
        // rule as POST /pub (a WebSocket must not be a way around the publish key).
        if channels.iter().any(|c| self.client_publish_on(c)) {
            let peer = self.conns[idx].stream.peer_addr().ok().map(|a| a.ip());
            let key = self.cfg.publish_key.as_deref();
            if publish_rule::check_with_token(key, &self.auth, req, peer, channels).is_ok() {
                flags |= WS_MAY_PUBLISH;
            }
        }
        // A browser that sent its key as a subprotocol entry must get one of its entries back.
        if handshake::offered_protocols(req).any(|p| p == handshake::PROTOCOL) {
            accept.select_protocol(handshake::PROTOCOL);
        } else if let Some(entry) = crate::auth::token::offered_token_protocol(req) {
            // Only the token entry was offered: answering none would fail the browser's
            // handshake, so it is echoed (the client's own token, over the same connection).
            accept.select_protocol(entry);
        }
        self.conns[idx].flags = flags;
        // The connection's id, which the server API's calls by connection take.
        let mut response = accept.response;
        response.truncate(response.len() - 2);
        let id = self.conn_id(idx);
        response.extend_from_slice(format!("C1m-Conn-Id: {id}\r\n\r\n").as_bytes());
        self.send_or_close(idx, response);
        if self.conns.contains(idx) {
            self.subscribe_gated(idx, Some(req), channels, last_id, Transport::Ws, grant);
        }
    }

    /// The frames a resuming WebSocket is owed.
    pub(super) fn ws_replay_frames(&self, idx: usize, replay: &[Replay]) -> Vec<u8> {
        let envelope = self.conns[idx].flags & WS_ENVELOPE != 0;
        encode_replay(Vec::new(), replay, gap_frame, |channel, id, payload| {
            if envelope {
                encode::envelope_frame(channel, id, payload)
            } else {
                encode::message_frame(payload)
            }
        })
    }

    /// Decodes client frames in `buf` (unmasked in place); returns the bytes used. The rest is
    /// an incomplete header or control frame (≤ 131 bytes) the caller keeps.
    pub(super) fn ws_input(&mut self, idx: usize, buf: &mut [u8]) -> usize {
        let limits = Limits {
            max_message: self.cfg.ws_max_message as u64,
            masking: Masking::Required,
        };
        if self.conns[idx].edge & PROXY_PENDING != 0 {
            return 0; // frames wait for the publish proxy's answer (proxy.rs)
        }
        let mut state = self.conns[idx].take_ws();
        let mut pos = 0;
        loop {
            let decoded = match state.decoder.decode(&mut buf[pos..], &limits) {
                Ok(d) => d,
                Err(e) => {
                    self.counters.refused.ws_protocol += 1;
                    self.ws_close(idx, e.close_code(), e.reason());
                    return buf.len();
                }
            };
            let frame = &buf[pos..];
            match decoded.event {
                Some(Event::Ping(r)) => {
                    let pong = encode::pong(&frame[r]);
                    self.send_or_close(idx, pong.as_bytes().to_vec());
                }
                Some(Event::Pong(_)) => {
                    if let Some(mut c) = self.conns.get_mut(idx) {
                        c.flags &= !WS_AWAITING_PONG;
                    }
                }
                Some(Event::Close { code, .. }) => {
                    // Echo the code and close once it is written (RFC 6455 5.5.1).
                    let reply = encode::close_reply(code);
                    self.reply_and_close(idx, reply.as_bytes().to_vec());
                    return buf.len();
                }
                Some(Event::Data { payload, fin, .. }) => {
                    self.ws_client_data(idx, &mut state, &frame[payload], fin)
                }
                None => {}
            }
            // Closed, or closing after a refusal whose close frame is still queued: later frames
            // in this read must not be judged (and counted, and answered) again.
            if self.conns.get(idx).is_none_or(|c| c.kind == Kind::Closing) {
                return buf.len();
            }
            if decoded.consumed == 0 {
                break;
            }
            pos += decoded.consumed;
            // A publish went to the proxy: later frames wait for its answer.
            if self.conns[idx].edge & PROXY_PENDING != 0 {
                break;
            }
        }
        if let Some(mut conn) = self.conns.get_mut(idx) {
            conn.set_ws(state);
        }
        pos
    }

    /// A piece of a client data message: ignored (counted), refused with 1003, refused with 1008
    /// when the upgrade did not pass the publish rule, or published.
    fn ws_client_data(&mut self, idx: usize, state: &mut WsMessage, piece: &[u8], fin: bool) {
        if self.tokens_read() {
            // A message may be a token refresh: judged whole (bounded by --ws-max-message).
            state.data.extend_from_slice(piece);
            if !fin {
                return;
            }
            let message = std::mem::take(&mut state.data);
            if self.ws_refresh(idx, &message) {
                return;
            }
            return self.ws_client_piece(idx, state, &message, true);
        }
        self.ws_client_piece(idx, state, piece, fin);
    }

    /// Client data that is not a refresh: ignored, refused or published.
    fn ws_client_piece(&mut self, idx: usize, state: &mut WsMessage, piece: &[u8], fin: bool) {
        if !self.may_client_publish_somewhere(idx) {
            if self.cfg.ws_close_on_client_data {
                self.counters.refused.ws_client_data += 1;
                self.ws_close(
                    idx,
                    close::UNSUPPORTED_DATA,
                    "client messages are not accepted",
                );
                return;
            }
            if fin {
                self.counters.client_ignored += 1;
            }
            return;
        }
        if self.conns[idx].flags & WS_MAY_PUBLISH == 0 {
            self.counters.refused.forbidden += 1;
            let reason = if self.cfg.publish_key.is_some() {
                publish_rule::WS_NEEDS_KEY
            } else {
                publish_rule::Denied::LoopbackOnly.message()
            };
            self.ws_close(idx, close::POLICY_VIOLATION, reason);
            return;
        }
        state.data.extend_from_slice(piece);
        if !fin {
            return;
        }
        let data = std::mem::take(&mut state.data);
        let channels: Vec<String> = self.conns[idx]
            .channel_indices()
            .into_iter()
            .filter_map(|c| self.channels.get(c).map(|ch| ch.name.to_string()))
            .collect();
        // One channel: the message is the payload. Several: {"channel": …, "data": …}.
        let target = if channels.len() == 1 {
            Some((channels[0].clone(), data))
        } else {
            serde_json::from_slice::<serde_json::Value>(&data)
                .ok()
                .and_then(|v| {
                    let channel = v["channel"]
                        .as_str()
                        .filter(|c| channels.iter().any(|s| s == c))?
                        .to_string();
                    let payload = v["data"].as_str()?.as_bytes().to_vec();
                    Some((channel, payload))
                })
        };
        match target {
            Some((channel, _)) if !self.client_publish_on(&channel) => {
                self.counters.refused.forbidden += 1;
                self.ws_close(
                    idx,
                    close::POLICY_VIOLATION,
                    "client publish is off for this channel's namespace",
                );
            }
            Some((channel, payload)) if payload.len() <= self.cfg.max_payload => {
                if !self.publish_by_proxy(idx, &channel, &payload) {
                    self.ws_publish(idx, channel, payload);
                }
            }
            _ => {
                self.counters.refused.bad_request += 1;
                self.ws_close(
                    idx,
                    close::POLICY_VIOLATION,
                    "publish needs {\"channel\",\"data\"} naming a subscribed channel",
                );
            }
        }
    }

    /// A client message that passed every check goes to the master (1013 while it is behind).
    pub(super) fn ws_publish(&mut self, idx: usize, channel: String, payload: Vec<u8>) {
        if self.master_congested() {
            self.counters.refused.busy += 1;
            return self.ws_close(
                idx,
                close::TRY_AGAIN_LATER,
                "publish refused: server busy; retry later",
            );
        }
        // The token comes back only if the master refuses it (then: close 1013).
        let token = self.conns.token(idx);
        self.send_to_master(ToMaster::Publish {
            req: token,
            channel,
            payload,
        });
    }

    /// Sends a close frame and closes the TCP connection once it is written.
    pub(super) fn ws_close(&mut self, idx: usize, code: u16, reason: &str) {
        let frame = encode::close(Some(code), reason);
        self.reply_and_close(idx, frame.as_bytes().to_vec());
    }

    /// A WebSocket that owes more than `--max-unsent`: counted, and closed with
    /// [`close::SLOW_CONSUMER`] queued behind what it owes (whole frames, so it ends cleanly and
    /// the client learns why, then resumes from the last id it read). The close frame is the
    /// only thing let past the cap; the socket is closed regardless after [`SLOW_CLOSE_LINGER`].
    pub(super) fn ws_close_slow(&mut self, idx: usize) {
        self.counters.refused.slow_consumer += 1;
        self.note_close_reason(idx, crate::ipc::CloseReason::SlowConsumer);
        let frame = encode::close(
            Some(close::SLOW_CONSUMER),
            "slow consumer: fell too far behind; reconnect with last_id",
        );
        let Some(mut conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.kind = Kind::Closing;
        conn.flags |= COUNTED_SLOW;
        conn.discard_input();
        // No shutdown(Read) as reply_and_close does: it makes the socket readable at EOF, and
        // reading EOF closes the connection, dropping what it still owes. Input is discarded
        // while closing; a real EOF from the client still ends it.
        if conn.send_owned(frame.as_bytes().to_vec(), usize::MAX) != Sent::Done || !conn.has_out() {
            return self.close(idx);
        }
        self.arm_timer(idx, SLOW_CLOSE_LINGER);
    }

    /// A keepalive ping to each WebSocket in `slots` (a slice of a pass, see sweep.rs).
    pub(super) fn ws_ping(&mut self, slots: std::ops::Range<usize>) {
        if slots.is_empty() {
            return;
        }
        let ping = std::rc::Rc::<[u8]>::from(encode::ping(b"c1m").as_bytes());
        let max = self.cfg.max_unsent;
        let mut failed = Vec::new();
        for idx in slots {
            let Some(mut conn) = self.conns.get_mut(idx) else {
                continue;
            };
            if conn.kind == Kind::Ws {
                conn.flags |= WS_AWAITING_PONG;
                match conn.send_shared(&ping, max) {
                    Sent::Done => {}
                    sent => failed.push((idx, sent)),
                }
            }
        }
        for (idx, sent) in failed {
            if sent == Sent::Overflow {
                self.ws_close_slow(idx);
            } else {
                self.close(idx);
            }
        }
    }

    /// Closes the WebSockets in `slots` that did not answer their ping in time.
    pub(super) fn ws_close_unanswered(&mut self, slots: std::ops::Range<usize>) {
        let dead: Vec<usize> = slots
            .filter(|&i| {
                self.conns
                    .get(i)
                    .is_some_and(|c| c.kind == Kind::Ws && c.flags & WS_AWAITING_PONG != 0)
            })
            .collect();
        for idx in dead {
            self.counters.refused.ws_pong_timeout += 1;
            self.note_close_reason(idx, crate::ipc::CloseReason::Timeout);
            self.ws_close(idx, close::GOING_AWAY, "ping not answered");
        }
    }
}
