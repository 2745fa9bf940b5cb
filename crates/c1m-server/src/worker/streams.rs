//! Subscriptions: joining channels (through the master when a replay or a first interest is
//! needed), fan-out of published messages to live subscribers, long-poll answers and heartbeats
//! (shutdown goodbyes live in `shutdown`).

use super::conn::{Kind, Sent, QUIET, WS_ENVELOPE};
use super::message::{Message, POLL_HEADERS};
use super::requests::Transport;
use super::Joined;
use super::Worker;
use crate::ipc::{Replay, ToMaster};
use c1m_proto::longpoll::{self, PollGap, PollMessage};
use c1m_proto::{line, sse};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::rc::Rc;

impl Worker {
    /// Attaches the connection to its channels. It goes live at once when this worker's
    /// interest is already known to the master and no replay is asked for; otherwise it waits
    /// for the master's join answer, which orders the replay before any later live message.
    pub(super) fn subscribe(
        &mut self,
        idx: usize,
        channels: &[&str],
        last_id: Option<u64>,
        transport: Transport,
    ) {
        if self.refuse_multi_channel_resume(idx, channels.len(), last_id, &transport) {
            return;
        }
        let all_known = channels.iter().all(|n| {
            self.channels
                .lookup(n)
                .and_then(|c| self.channels.get(c))
                .is_some_and(|c| c.known_to_master)
        });
        if (last_id.is_some() || !all_known) && self.master_congested() {
            // A join would add to a link the master is behind on: refuse now, plainly.
            let why = "server busy; retry later";
            return match transport {
                Transport::Tcp => {
                    self.counters.refused.busy += 1;
                    self.reply_and_close(idx, line::encode_err(why))
                }
                Transport::Ws => {
                    self.counters.refused.busy += 1;
                    self.ws_close(idx, c1m_proto::ws::close::TRY_AGAIN_LATER, why)
                }
                Transport::Sse | Transport::LongPoll => self.refuse_busy(idx, 1),
            };
        }
        for name in channels {
            let (chan, pos) = self.channels.join(name, idx as u32);
            self.counters.subscribes += 1;
            self.conns[idx].add_sub(chan, pos);
        }
        let conn = &mut self.conns[idx];
        conn.deadline = 0;
        if all_known && last_id.is_none() {
            match transport {
                Transport::Sse => {
                    conn.kind = Kind::Sse;
                    let head = self.sse_head(idx);
                    self.send_or_close(idx, head);
                }
                Transport::Tcp => {
                    conn.kind = Kind::TcpStream;
                    // Without a join we do not know the master's current id; 0 means "live from now".
                    self.send_or_close(idx, line::encode_ok(0));
                }
                Transport::LongPoll => {
                    conn.kind = Kind::PollWaiting;
                    self.arm_poll_timeout(idx);
                }
                Transport::Ws => conn.kind = Kind::Ws,
            }
            return;
        }
        conn.kind = match transport {
            Transport::Sse => Kind::SseJoining,
            Transport::Tcp => Kind::TcpJoining,
            Transport::LongPoll => Kind::PollJoining,
            Transport::Ws => Kind::WsJoining,
        };
        let token = super::token_of(idx, conn.generation);
        let channels = channels.iter().map(|c| c.to_string()).collect();
        self.send_to_master(ToMaster::Join {
            req: token,
            channels,
            after: last_id,
        });
    }

    /// The master's answer to a join: one chunk of what was missed. The stream goes live after
    /// the last chunk; before that it stays joining (live messages skip it: the next chunk comes
    /// from history and covers them, or says plainly what history lost).
    pub(super) fn on_joined(&mut self, token: u64, joined: Joined) {
        let Joined {
            current_id,
            channels,
            replay,
            more,
        } = joined;
        for name in &channels {
            self.channels.mark_known(name);
        }
        // A continuation has already sent the stream's opening (response head, OK line).
        let first = self.replays.remove(&token).is_none();
        let Some((idx, conn)) = self.conn_mut(token) else {
            return;
        };
        let multi = conn.is_multi();
        let kind = conn.kind;
        let resume_at = more.then(|| last_message_id(&replay)).flatten();
        match kind {
            Kind::SseJoining => {
                let head = if first {
                    self.sse_head(idx)
                } else {
                    Vec::new()
                };
                let out = encode_replay(head, &replay, sse::encode_gap, |ch, id, p| {
                    sse::encode_message(multi.then_some(ch), id, p)
                });
                self.send_replay_chunk(idx, token, out, resume_at, Kind::Sse);
            }
            Kind::TcpJoining => {
                let head = if first {
                    line::encode_ok(current_id)
                } else {
                    Vec::new()
                };
                let out = encode_replay(head, &replay, line::encode_gap, line::encode_msg);
                self.send_replay_chunk(idx, token, out, resume_at, Kind::TcpStream);
            }
            Kind::WsJoining => {
                let frames = self.ws_replay_frames(idx, &replay);
                self.send_replay_chunk(idx, token, frames, resume_at, Kind::Ws);
                if resume_at.is_some() || self.conns.get(idx).is_none_or(|c| c.kind != Kind::Ws) {
                    return;
                }
                // Frames the client sent while the join was pending.
                if let Some(mut pending) = self.conns.get_mut(idx).and_then(|c| c.take_inbuf()) {
                    let used = self.ws_input(idx, &mut pending);
                    if let Some(conn) = self.conns.get_mut(idx) {
                        if used < pending.len() && conn.kind != Kind::Closing {
                            conn.set_inbuf(&pending[used..]);
                        }
                    }
                }
                // Reading stopped at a full buffer while joining (edge-triggered: no new event
                // comes for the bytes still in the socket): read on now.
                if self
                    .conns
                    .get(idx)
                    .is_some_and(|c| c.kind == Kind::Ws && c.flags & super::conn::READ_PAUSED != 0)
                {
                    self.on_readable(idx);
                }
            }
            Kind::PollJoining => {
                if replay.is_empty() {
                    conn.kind = Kind::PollWaiting;
                    self.arm_poll_timeout(idx);
                    return;
                }
                let mut messages = Vec::new();
                let mut gaps = Vec::new();
                for item in &replay {
                    match item {
                        Replay::Gap {
                            channel,
                            after,
                            through,
                        } => gaps.push(PollGap {
                            channel,
                            after: *after,
                            through: *through,
                        }),
                        Replay::Message {
                            channel,
                            id,
                            payload,
                        } => messages.push(PollMessage {
                            channel,
                            id: *id,
                            payload,
                        }),
                    }
                }
                // One chunk per answer: with more to come, `last_id` points at this chunk's
                // end and the client's next poll gets the rest at once.
                let last = match resume_at {
                    Some(id) => id,
                    None => messages.iter().map(|m| m.id).max().unwrap_or(current_id),
                };
                let body = longpoll::encode_body(&messages, &gaps, last);
                self.poll_answer(idx, 200, &body);
            }
            _ => {}
        }
    }

    /// Writes one replay chunk. The last one makes the stream live; otherwise the next chunk
    /// is asked for as soon as the socket has taken this one (now, or when it drains).
    fn send_replay_chunk(
        &mut self,
        idx: usize,
        token: u64,
        bytes: Vec<u8>,
        resume_at: Option<u64>,
        live: Kind,
    ) {
        if resume_at.is_none() {
            self.conns[idx].kind = live;
        }
        if !bytes.is_empty() {
            self.send_or_close(idx, bytes);
        }
        let Some(after) = resume_at else {
            return;
        };
        if !self.conns.contains(idx) {
            return;
        }
        self.replays.insert(token, Some(after));
        if !self.conns[idx].has_out() {
            self.continue_replay(idx);
        }
    }

    /// Asks the master for the next chunk of a replay whose last chunk the socket has taken.
    pub(super) fn continue_replay(&mut self, idx: usize) {
        if self.handover.frozen {
            return; // asked after an abort, or by the new worker of a live upgrade
        }
        let token = super::token_of(idx, self.conns[idx].generation);
        // `None`: already asked, the answer is on its way.
        let Some(after) = self.replays.get_mut(&token).and_then(Option::take) else {
            return;
        };
        let channels = self.conns[idx]
            .channel_indices()
            .into_iter()
            .filter_map(|c| self.channels.get(c).map(|ch| ch.name.to_string()))
            .collect();
        // Not refused when the link is congested: one request per replaying connection at most.
        self.send_to_master(ToMaster::Join {
            req: token,
            channels,
            after: Some(after),
        });
    }

    /// One published message to every live subscriber of its channel on this worker: queued
    /// with the members it goes to, and delivered in slices by the loop (`fan_out_slices`).
    pub(super) fn fan_out(&mut self, channel: &str, id: u64, payload: Vec<u8>, published_us: u64) {
        let Some(chan) = self.channels.lookup(channel) else {
            return;
        };
        let local = self.channels.get(chan).expect("looked up");
        // Tokens, not slots: a member that closes before its slice comes must not hand its
        // message to a new connection in the same slot.
        let members = local
            .members
            .iter()
            .filter_map(|&m| {
                let c = self.conns.get(m as usize)?;
                Some(super::token_of(m as usize, c.generation))
            })
            .collect();
        let msg = Message::new(local.name.clone(), id, payload);
        self.fan_outs.push(super::fan_out_slices::FanOutJob {
            msg,
            members,
            next: 0,
            published_us,
            started_us: 0,
        });
    }

    /// One message to one member (a live stream or a waiting long-poll; a joining one is
    /// skipped: its replay is on the way and covers this message).
    ///
    /// Latency: every delivery records (now − `published_us`) in publish_to_write. The clock is
    /// read per delivery: a vDSO clock_gettime (~20 ns) next to the write() syscall it follows
    /// (~1 µs+), so no sampling is needed and the histogram's count equals deliveries.
    pub(super) fn deliver(&mut self, msg: &Message, idx: usize, published_us: u64) {
        let latency = |h: &mut crate::histogram::Histogram| {
            h.record(c1m_sys::shm::monotonic_micros().saturating_sub(published_us));
        };
        let max = self.cfg.max_unsent;
        let Some(conn) = self.conns.get_mut(idx) else {
            return;
        };
        let data = match conn.kind {
            Kind::Sse => Some(msg.sse(conn.is_multi())),
            Kind::TcpStream => Some(msg.tcp()),
            Kind::Ws => Some(msg.ws(conn.flags & WS_ENVELOPE != 0)),
            _ => None,
        };
        // io_uring: into the batch the slice sends (`send_batch`) before the loop goes on.
        if let (Some(data), Some(batch)) = (data, self.sender.uring()) {
            if conn.can_batch_send() {
                if batch.push(idx, conn.stream.as_raw_fd(), data) {
                    self.send_batch(published_us);
                }
                return;
            }
        }
        let sent = match conn.kind {
            Kind::Sse => conn.send_shared(msg.sse(conn.is_multi()), max),
            Kind::TcpStream => conn.send_shared(msg.tcp(), max),
            Kind::Ws => conn.send_shared(msg.ws(conn.flags & WS_ENVELOPE != 0), max),
            Kind::PollWaiting => {
                self.counters.delivered += 1;
                latency(&mut self.counters.latency.publish_to_write);
                // The shared answer carries no per-request CORS headers.
                if conn.keep_alive && !self.owes_cors(idx) {
                    let answer = msg.poll_answer().clone();
                    self.reply_shared(idx, &answer);
                } else {
                    let m = PollMessage {
                        channel: &msg.channel,
                        id: msg.id,
                        payload: &msg.payload,
                    };
                    let body = longpoll::encode_body(&[m], &[], msg.id);
                    self.poll_answer(idx, 200, &body);
                }
                return;
            }
            _ => return, // joining: its replay is on the way and covers this message
        };
        self.count_sent(idx, sent, published_us);
    }

    /// Counts one fan-out send's outcome; a slow or gone subscriber is dropped.
    fn count_sent(&mut self, idx: usize, sent: Sent, published_us: u64) {
        match sent {
            Sent::Done => {
                self.counters.delivered += 1;
                let now = c1m_sys::shm::monotonic_micros();
                let h = &mut self.counters.latency.publish_to_write;
                h.record(now.saturating_sub(published_us));
            }
            Sent::Overflow => {
                self.counters.dropped += 1;
                self.drop_slow_consumer(idx);
            }
            Sent::Failed => {
                self.counters.dropped += 1;
                self.close(idx);
            }
        }
    }

    /// Sends the pending io_uring batch (one `io_uring_enter` per ring-full) and applies each
    /// result as `send_shared` would: done, rest queued for EPOLLOUT, or the peer gone. If the
    /// ring itself fails, the sends it did not complete are not retried (the bytes may or may
    /// not have gone): those subscribers are closed, and resume with their last id; the worker
    /// goes on with write().
    pub(super) fn send_batch(&mut self, published_us: u64) {
        let Some(batch) = self.sender.uring() else {
            return;
        };
        if batch.is_empty() {
            return;
        }
        if let Err(e) = batch.send() {
            tracing::error!(error = %e, "io_uring send ring failed; this worker uses write() from now on");
            self.io_fallback_reason = format!("io_uring failed while running: {e}");
        }
        let Some(batch) = self.sender.uring() else {
            return;
        };
        // Taken out while the results are applied (closing a connection needs `&mut self`),
        // then given back emptied so their allocations are reused.
        let mut items = std::mem::take(&mut batch.batch);
        let mut idxs = std::mem::take(&mut batch.idxs);
        let results = std::mem::take(&mut batch.results);
        let mut queued = 0;
        for ((&idx, (_, data)), &result) in idxs.iter().zip(&items).zip(&results) {
            let idx = idx as usize;
            let Some(conn) = self.conns.get_mut(idx) else {
                continue;
            };
            let sent = conn.batch_sent(data, result);
            queued += u64::from(conn.has_out());
            self.count_sent(idx, sent, published_us);
        }
        items.clear();
        idxs.clear();
        if let Some(batch) = self.sender.uring() {
            batch.queued += queued;
            (batch.batch, batch.idxs, batch.results) = (items, idxs, results);
        }
        if !self.io_fallback_reason.is_empty() {
            self.sender = super::sender::Sender::Direct;
        }
    }

    /// Answers a long-poll and leaves its channels; the connection goes back to reading requests.
    pub(super) fn poll_answer(&mut self, idx: usize, status: u16, body: &[u8]) {
        self.poll_leave(idx);
        self.respond(idx, status, "application/json", POLL_HEADERS, body);
        self.resume_input(idx);
    }

    /// A waiting keep-alive long-poll gets the message's shared, encoded-once answer.
    fn reply_shared(&mut self, idx: usize, answer: &Rc<[u8]>) {
        self.poll_leave(idx);
        let max = self.cfg.max_unsent;
        let conn = &mut self.conns[idx];
        conn.kind = Kind::Http;
        if conn.send_shared(answer, max) != Sent::Done {
            return self.close(idx);
        }
        self.arm_head_timer(idx);
        self.resume_input(idx);
    }

    fn poll_leave(&mut self, idx: usize) {
        for (chan, pos) in self.conns[idx].take_subs() {
            self.leave_channel(chan, pos);
        }
        let conn = &mut self.conns[idx];
        conn.deadline = 0;
        // The next request on this keep-alive connection shows its own token.
        conn.edge &= !super::conn::EXPIRES;
    }

    /// A long-poll starts waiting: it ends at the poll timeout, or earlier where its token's
    /// expiry was armed (`arm_expiry`) before the wait began.
    fn arm_poll_timeout(&mut self, idx: usize) {
        let ends = self
            .wheel
            .deadline_after(self.cfg.poll_timeout.as_millis() as u64);
        let conn = &mut self.conns[idx];
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
        let Some((idx, conn)) = self.conn_mut(token) else {
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
    fn record_publish_ack(&mut self, token: u64) {
        if let Some(started) = self.publish_started.remove(&token) {
            let took = c1m_sys::shm::monotonic_micros().saturating_sub(started);
            self.counters.latency.publish_ack.record(took);
        }
    }

    /// The master refused a publish: a worker that must deliver it is behind, or (`broker` not
    /// empty) the cluster broker could not take it.
    pub(super) fn on_publish_refused(&mut self, token: u64, retry_after_s: u64, broker: &str) {
        let Some((idx, conn)) = self.conn_mut(token) else {
            return;
        };
        let kind = conn.kind;
        if !broker.is_empty() {
            if matches!(kind, Kind::Publishing | Kind::Ws) {
                self.counters.refused.broker_unavailable += 1;
            }
            match kind {
                Kind::Publishing => {
                    self.publish_started.remove(&token);
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
                self.publish_started.remove(&token);
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
        let Some((idx, conn)) = self.conn_mut(token) else {
            return;
        };
        if conn.kind != Kind::Status || self.health_answer(idx, &body) {
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

    /// A heartbeat to each idle SSE stream in `slots` (a slice of pass `pass` over the
    /// connections, see sweep.rs; a pass every half interval). Any bytes sent to a stream (its
    /// response head, a message, a replay, a gap: [`super::conn::WROTE`]) feed proxies' idle
    /// timers and the client's dead-connection check as well as a heartbeat would, and at 1M
    /// streams each heartbeat is a write and a client-side wake-up; so a stream gets one only
    /// at the second visit in a row that finds it sent nothing since the visit before
    /// ([`super::conn::QUIET`]): one interval of silence, and a silent stream one per interval.
    /// Visits half an interval apart (not one visit an interval that skips a stream written to
    /// since the last) keep a silent stream's gap after its last byte at most 1.5 intervals
    /// while the visits are evenly spaced and 2 when the worker's slot count moves them
    /// (docs/PROTOCOL.md), instead of 2 and 3.
    pub(super) fn send_heartbeats(&mut self, slots: Range<usize>, pass: u64) {
        if slots.is_empty() {
            return;
        }
        let beat: Rc<[u8]> = Rc::from(sse::HEARTBEAT);
        let max = self.cfg.max_unsent;
        let mut failed = Vec::new();
        for idx in slots {
            let Some(conn) = self.conns.get_mut(idx) else {
                continue;
            };
            if conn.kind != Kind::Sse {
                continue;
            }
            // Owed bytes: not idle either (and a heartbeat would only queue behind them).
            if conn.take_wrote() || conn.has_out() {
                conn.edge &= !QUIET;
                // Counted in every other pass: one skipped heartbeat per interval a busy
                // stream is visited through, as many as a silent one is sent.
                self.counters.heartbeats_skipped += pass % 2;
                continue;
            }
            if conn.edge & QUIET == 0 {
                conn.edge |= QUIET;
                continue;
            }
            conn.edge &= !QUIET;
            if conn.send_shared(&beat, max) != Sent::Done {
                failed.push(idx);
                continue;
            }
            // The heartbeat itself is not other traffic.
            conn.take_wrote();
            self.counters.heartbeats_sent += 1;
        }
        for idx in failed {
            self.close(idx);
        }
    }

    pub(super) fn send_or_close(&mut self, idx: usize, bytes: Vec<u8>) {
        let max = self.cfg.max_unsent;
        match self.conns[idx].send_owned(bytes, max) {
            Sent::Done => {}
            Sent::Overflow => self.drop_slow_consumer(idx),
            Sent::Failed => {
                self.counters.refused.slow_consumer += 1;
                self.close(idx);
            }
        }
    }

    /// A subscriber owing more than `--max-unsent` (counted as refused.slow_consumer). A
    /// WebSocket is told why (close 4008); other streams have no way to say it and are closed.
    pub(super) fn drop_slow_consumer(&mut self, idx: usize) {
        if matches!(self.conns[idx].kind, Kind::Ws | Kind::WsJoining) {
            return self.ws_close_slow(idx);
        }
        self.counters.refused.slow_consumer += 1;
        self.close(idx);
    }
}

/// The id of the last message in a replay chunk (where the next chunk starts after).
fn last_message_id(replay: &[Replay]) -> Option<u64> {
    replay.iter().rev().find_map(|r| match r {
        Replay::Message { id, .. } => Some(*id),
        Replay::Gap { .. } => None,
    })
}

/// Appends a resume answer to `out` with one protocol's encoders for gaps and messages.
pub(super) fn encode_replay(
    mut out: Vec<u8>,
    replay: &[Replay],
    gap: impl Fn(&str, u64, u64) -> Vec<u8>,
    message: impl Fn(&str, u64, &[u8]) -> Vec<u8>,
) -> Vec<u8> {
    for item in replay {
        match item {
            Replay::Gap {
                channel,
                after,
                through,
            } => out.extend(gap(channel, *after, *through)),
            Replay::Message {
                channel,
                id,
                payload,
            } => out.extend(message(channel, *id, payload)),
        }
    }
    out
}
