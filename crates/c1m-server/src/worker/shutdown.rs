//! How connections end: a final answer followed by a close once it is written (bounded by a
//! linger timer, so a client that stopped reading cannot hold the slot or the shutdown), each
//! protocol's shutdown goodbye queued behind whatever the subscriber still has to read, and what
//! an end-of-file or socket error from the peer means.

use super::conn::{Kind, Sent, COUNTED_SLOW};
use super::Worker;
use crate::ipc::CloseReason;
use c1m_proto::{http, line, sse};
use std::io;
use std::time::{Duration, Instant};

impl Worker {
    /// Queues `bytes` as the connection's last words and closes once they are written, or when
    /// the linger time (the grace period) ends. `limit` caps the unsent bytes.
    pub(super) fn finish_with(&mut self, idx: usize, bytes: Vec<u8>, limit: usize) {
        self.finish_within(idx, bytes, limit, self.cfg.grace);
    }

    fn finish_within(&mut self, idx: usize, bytes: Vec<u8>, limit: usize, linger: Duration) {
        let Some(mut conn) = self.conns.get_mut(idx) else {
            return;
        };
        conn.kind = Kind::Closing;
        conn.deadline = 0;
        conn.set_inbuf(&[]);
        // No shutdown(SHUT_RD) here: it makes the next read return 0, which looked like the
        // peer leaving and closed the socket with the answer still queued.
        if conn.send_owned(bytes, limit) != Sent::Done || !conn.has_out() {
            return self.close(idx);
        }
        self.arm_timer(idx, linger);
    }

    /// Shutdown: the goodbye each protocol understands, after the data already queued. The
    /// goodbye may pass `max_unsent` (it is small and the last thing the connection sends).
    pub(super) fn goodbye(&mut self, idx: usize) {
        let kind = self.conns[idx].kind;
        let bytes = match kind {
            Kind::Sse => sse::SHUTDOWN.to_vec(),
            Kind::TcpStream => line::BYE.to_vec(),
            Kind::Ws | Kind::WsJoining => c1m_proto::ws::encode::close(
                Some(c1m_proto::ws::close::GOING_AWAY),
                "server shutting down",
            )
            .as_bytes()
            .to_vec(),
            Kind::WsProxying => c1m_proto::ws::encode::close(
                Some(c1m_proto::ws::close::GOING_AWAY),
                "server shutting down",
            )
            .as_bytes()
            .to_vec(),
            Kind::TcpProxying => line::BYE.to_vec(),
            Kind::PollWaiting | Kind::PollJoining | Kind::PollProxying | Kind::SseProxying => {
                self.conns[idx].keep_alive = false;
                http::error(503, "server shutting down")
            }
            Kind::Closing => return,
            Kind::H2 => return self.h2_goodbye(idx),
            Kind::Publishing | Kind::Status => return, // answered when the master replies
            _ => return self.close(idx),
        };
        let limit = self.cfg.max_unsent.saturating_add(bytes.len());
        // The shutdown deadline (the same grace) ends these, all at once and logged, so their
        // own timer is only a backstop (the timer wheel may fire up to a tick early).
        let backstop = self.cfg.grace + Duration::from_secs(1);
        self.finish_within(idx, bytes, limit, backstop);
    }

    /// The peer's side ended: `error` is the socket error, if the read failed. A peer that only
    /// half-closed can still read, so a final answer still queued is written first (the linger
    /// timer bounds the wait).
    pub(super) fn on_peer_end(&mut self, idx: usize, error: Option<&io::Error>) {
        let Some(conn) = self.conns.get(idx) else {
            return;
        };
        if let Some(e) = error {
            if e.raw_os_error() == Some(libc::ETIMEDOUT) {
                self.note_close_reason(idx, CloseReason::Timeout);
            }
            self.count_lost_peer(e);
            return self.close(idx);
        }
        if conn.kind == Kind::Closing && conn.has_out() {
            return;
        }
        if matches!(conn.kind, Kind::Publishing | Kind::Status) {
            // The master's answer is on its way (a publish's id, the figures): a peer that
            // half-closed after its request gets it, with `Connection: close`, then the close.
            // A peer that is gone makes that write fail, which closes the connection too.
            self.conns[idx].keep_alive = false;
            return;
        }
        self.close(idx);
    }

    /// The linger time of a final answer ended before the peer read it: the rest is cut off,
    /// counted as a slow consumer (the client stopped reading).
    pub(super) fn cut_unread(&mut self, idx: usize) {
        if self
            .conns
            .get(idx)
            .is_some_and(|c| c.has_out() && c.flags & COUNTED_SLOW == 0)
        {
            self.counters.refused.slow_consumer += 1;
            self.note_close_reason(idx, CloseReason::SlowConsumer);
        }
        self.close(idx);
    }

    /// Shutdown's grace period is over (or nothing is left): whoever has not read everything
    /// is cut off, counted and logged, so no data is dropped silently.
    pub(super) fn end_of_grace(&mut self) {
        let idxs = self.conns.slots();
        let unread = idxs.iter().filter(|&&i| self.conns[i].has_out()).count();
        for idx in idxs {
            self.note_close_reason(idx, CloseReason::ServerShutdown);
            self.cut_unread(idx);
        }
        if unread > 0 {
            tracing::warn!(
                connections = unread,
                "grace period over; closed connections that had not read all their data"
            );
        }
    }

    /// A socket that failed with ETIMEDOUT was dropped by the kernel: keepalive probes or
    /// written data went unanswered (TCP_USER_TIMEOUT), i.e. the peer vanished.
    pub(super) fn count_lost_peer(&mut self, e: &io::Error) {
        if e.raw_os_error() == Some(libc::ETIMEDOUT) {
            self.counters.refused.dead_peer += 1;
        }
    }

    /// Stops accepting and ends every stream cleanly; the loop exits once all connections are
    /// gone or the grace period ends.
    pub(super) fn begin_shutdown(&mut self) {
        if self.shutdown_deadline.is_some() {
            return;
        }
        self.shutdown_deadline = Some(Instant::now() + self.cfg.grace);
        // Messages already published reach their subscribers before the goodbyes.
        self.finish_fan_outs();
        for mut l in [
            self.http_listener.take(),
            self.tcp_listener.take(),
            self.admin_listener.take(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let idxs = self.conns.slots();
        for &idx in &idxs {
            self.note_close_reason(idx, CloseReason::ServerShutdown);
        }
        // An HTTP/2 connection says goodbye for its streams (before its GOAWAY), which may
        // remove their slots before the loop reaches them.
        for idx in idxs {
            if self.conns.contains(idx) {
                self.goodbye(idx);
            }
        }
    }
}
