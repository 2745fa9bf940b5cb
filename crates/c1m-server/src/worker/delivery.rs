//! Fan-out: a published message to every live subscriber of its channel on this worker,
//! encoded once per protocol and shared; sent with write() or in an io_uring batch; a
//! subscriber that falls behind (`--max-unsent`) or is gone is dropped and counted.

use super::conn::{Kind, Sent, WS_ENVELOPE};
use super::message::Message;
use super::Worker;
use c1m_proto::longpoll::{self, PollMessage};
use std::os::fd::AsRawFd;

impl Worker {
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
        let Some(mut conn) = self.conns.get_mut(idx) else {
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
    pub(super) fn count_sent(&mut self, idx: usize, sent: Sent, published_us: u64) {
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
            let Some(mut conn) = self.conns.get_mut(idx) else {
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

    pub(super) fn send_or_close(&mut self, idx: usize, bytes: Vec<u8>) {
        let max = self.cfg.max_unsent;
        match self.conns.at(idx).send_owned(bytes, max) {
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
        self.note_close_reason(idx, crate::ipc::CloseReason::SlowConsumer);
        self.close(idx);
    }
}
