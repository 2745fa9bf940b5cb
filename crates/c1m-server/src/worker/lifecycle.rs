//! Connection lifecycle reports for the master's webhooks (only while `webhook_url` is set):
//! a held subscriber (SSE, WebSocket, raw TCP) that joined its channels is reported open with
//! its user and channels, and closed with the reason it ended. Long-poll requests are not
//! reported: each poll is a request, not a held connection. The reports of one loop turn go
//! to the master in one frame ([`Worker::flush_lifecycle`]).
//!
//! Why a connection ends is noted where that is decided (a slow consumer, an expired token,
//! a shutdown); [`Worker::close`] reads the note, and a close without one was the client's
//! doing (it closed, or its socket failed).

use super::requests::Transport;
use super::Worker;
use crate::ipc::{CloseReason, ConnReport, ToMaster, MAX_REPORTS};
use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct Lifecycle {
    /// Reports made this loop turn, not yet sent.
    pending: Vec<ConnReport>,
    /// Connections reported open (by token) whose close is still owed.
    open: HashSet<u64>,
    /// Why a connection that is on its way out ends (set where that was decided).
    reasons: HashMap<u64, CloseReason>,
}

impl Worker {
    /// A connection joined `channels`: reported open (its user follows in `note_user`, which
    /// comes in the same turn).
    pub(super) fn report_open(&mut self, idx: usize, channels: &[&str], transport: &Transport) {
        let Some(lc) = &mut self.lifecycle else {
            return;
        };
        if matches!(transport, Transport::LongPoll) || !self.conns.contains(idx) {
            return;
        }
        let token = self.conns.token(idx);
        if !lc.open.insert(token) {
            return;
        }
        lc.pending.push(ConnReport::Opened {
            token,
            user: self.conns.user_of(token).map(str::to_string),
            channels: channels.iter().map(|c| c.to_string()).collect(),
            resumed: false,
        });
    }

    /// The connection's token named `user`: filled into its open report, still pending.
    pub(super) fn note_user(&mut self, token: u64, user: &str) {
        let Some(lc) = &mut self.lifecycle else {
            return;
        };
        for r in lc.pending.iter_mut().rev() {
            if let ConnReport::Opened {
                token: t, user: u, ..
            } = r
            {
                if *t == token {
                    *u = Some(user.to_string());
                    return;
                }
            }
        }
    }

    /// Why the connection in `idx` is ending (the first reason noted wins: a shutdown's
    /// goodbye that then times out is still a shutdown).
    pub(super) fn note_close_reason(&mut self, idx: usize, reason: CloseReason) {
        let Some(lc) = &mut self.lifecycle else {
            return;
        };
        let Some(conn) = self.conns.get(idx) else {
            return;
        };
        let token = super::token_of(idx, conn.generation);
        if lc.open.contains(&token) {
            lc.reasons.entry(token).or_insert(reason);
        }
    }

    /// The connection `token` is gone: its close is reported if its open was.
    pub(super) fn report_closed(&mut self, token: u64) {
        let Some(lc) = &mut self.lifecycle else {
            return;
        };
        if !lc.open.remove(&token) {
            return;
        }
        let reason = lc
            .reasons
            .remove(&token)
            .unwrap_or(CloseReason::ClientClosed);
        lc.pending.push(ConnReport::Closed { token, reason });
    }

    /// Every held subscriber this worker has, reported as already open: after a live
    /// upgrade's take-over (the new master knows none of them) or an aborted hand-over.
    pub(super) fn report_all_resumed(&mut self) {
        let Some(lc) = &mut self.lifecycle else {
            return;
        };
        for (idx, conn) in self.conns.iter() {
            use super::conn::Kind;
            if !matches!(
                conn.kind,
                Kind::Sse
                    | Kind::SseJoining
                    | Kind::Ws
                    | Kind::WsJoining
                    | Kind::TcpStream
                    | Kind::TcpJoining
                    | Kind::Closing
            ) {
                continue;
            }
            let channels: Vec<String> = conn
                .channel_indices()
                .into_iter()
                .filter_map(|c| self.channels.get(c).map(|ch| ch.name.to_string()))
                .collect();
            if channels.is_empty() {
                continue;
            }
            let token = super::token_of(idx, conn.generation);
            lc.open.insert(token);
            lc.pending.push(ConnReport::Opened {
                token,
                user: self.conns.user_of(token).map(str::to_string),
                channels,
                resumed: true,
            });
        }
    }

    /// Sends this turn's reports to the master (in frames of at most `MAX_REPORTS`).
    pub(super) fn flush_lifecycle(&mut self) {
        let Some(lc) = &mut self.lifecycle else {
            return;
        };
        if lc.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut lc.pending);
        while !pending.is_empty() {
            let rest = pending.split_off(pending.len().min(MAX_REPORTS));
            self.send_to_master(ToMaster::Lifecycle { reports: pending });
            pending = rest;
        }
    }
}
