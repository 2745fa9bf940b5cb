//! Subscribing: a connection joins its channels, going live at once when this worker's
//! interest is known to the master and no replay is asked for, otherwise through the master's
//! join answer, whose replay (in chunks, each asked for once the socket took the last) comes
//! before any later live message.

use super::conn::Kind;
use super::requests::Transport;
use super::{Joined, Worker};
use crate::ipc::{Replay, ToMaster};
use c1m_proto::longpoll::{self, PollGap, PollMessage};
use c1m_proto::{line, sse};

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
        if self.refuse_by_namespace(idx, channels, &transport) {
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
        let token = self.conns.token(idx);
        for name in channels {
            let (chan, pos) = self.channels.join(name, idx as u32);
            self.counters.subscribes += 1;
            self.conns[idx].add_sub(chan, pos);
            if !matches!(transport, Transport::LongPoll) {
                let name = std::rc::Rc::clone(&self.channels.get(chan).expect("joined").name);
                self.presence_join(token, &name, false);
            }
        }
        self.report_open(idx, channels, &transport);
        let mut conn = self.conns.at(idx);
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
        let first = self.conns.replays.remove(&token).is_none();
        let Some((idx, mut conn)) = self.conns.by_token(token) else {
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
                self.ws_resume_input(idx);
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
        self.conns.replays.insert(token, Some(after));
        if !self.conns[idx].has_out() {
            self.continue_replay(idx);
        }
    }

    /// Asks the master for the next chunk of a replay whose last chunk the socket has taken.
    pub(super) fn continue_replay(&mut self, idx: usize) {
        if self.handover.frozen {
            return; // asked after an abort, or by the new worker of a live upgrade
        }
        let token = self.conns.token(idx);
        // `None`: already asked, the answer is on its way.
        let Some(after) = self.conns.replays.get_mut(&token).and_then(Option::take) else {
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
