//! A worker's side of presence: which of its connections are members of presence-enabled
//! channels, their joins and leaves reported to the master in one frame per loop turn, and
//! the master's join/leave events delivered to this worker's subscribers.
//!
//! Only held streams are members (SSE, WebSocket, TCP): a long-poll is a request per message,
//! and making it a member would send a leave and a join around every poll. A connection that
//! is in no presence channel has no entry here: subscribers of other channels pay nothing.
//! The join is recorded when the stream subscribes and resolved (user, `info`) when the turn
//! ends, after the token's grant was adopted; a connection gone by then never joined.

use super::conn::{Kind, Sent, WS_ENVELOPE};
use super::Worker;
use crate::ipc::{PresenceChange, PresenceEvent, ToMaster};
use std::collections::HashMap;
use std::rc::Rc;

/// One member connection: its token's `info` and the presence channels it is in.
struct Member {
    info: Option<Rc<str>>,
    channels: Vec<Rc<str>>,
}

#[derive(Default)]
pub struct Presence {
    /// Member connections by token.
    members: HashMap<u64, Member>,
    /// Joins of this turn: (token, channel, quiet), resolved when the turn ends.
    joining: Vec<(u64, Rc<str>, bool)>,
    /// `info` claims of this turn's joiners (or a received connection's), by token.
    infos: HashMap<u64, Rc<str>>,
    /// Changes resolved but not yet sent.
    changes: Vec<PresenceChange>,
}

impl Presence {
    /// The `info` a member connection carries (the live-upgrade record needs it).
    pub fn info_of(&self, token: u64) -> Option<&str> {
        self.members.get(&token).and_then(|m| m.info.as_deref())
    }
}

impl Worker {
    /// A held stream subscribed to `channel`: a member from the end of this turn when the
    /// channel keeps presence. `quiet`: received in a live upgrade (no join event).
    pub(super) fn presence_join(&mut self, token: u64, channel: &Rc<str>, quiet: bool) {
        if self.namespaces.presence_enabled(channel) {
            self.presence
                .joining
                .push((token, Rc::clone(channel), quiet));
        }
    }

    /// The `info` claim of a connection that may be joining this turn.
    pub(super) fn presence_info(&mut self, token: u64, info: &str) {
        if self.presence.joining.iter().any(|(t, _, _)| *t == token) {
            self.presence.infos.insert(token, Rc::from(info));
        }
    }

    /// The connection `token` is closing: it leaves every presence channel it is in.
    pub(super) fn presence_leave(&mut self, token: u64) {
        if self.presence.members.is_empty() {
            return;
        }
        if let Some(member) = self.presence.members.remove(&token) {
            for channel in member.channels {
                self.presence.changes.push(PresenceChange::Leave {
                    channel: channel.to_string(),
                    token,
                });
            }
        }
    }

    /// End of a loop turn: resolves this turn's joins and sends every change in as few
    /// frames as fit (one, unless a turn brought more than a frame's budget).
    pub(super) fn flush_presence(&mut self) {
        if self.handover.sent.is_some() {
            return; // the connections are the new worker's: it reports them
        }
        let joining = std::mem::take(&mut self.presence.joining);
        for (token, channel, quiet) in joining {
            let Some((_, conn)) = self.conns.by_token(token) else {
                continue; // closed within the turn: never a member
            };
            if !matches!(
                conn.kind,
                Kind::Sse
                    | Kind::SseJoining
                    | Kind::Ws
                    | Kind::WsJoining
                    | Kind::TcpStream
                    | Kind::TcpJoining
            ) {
                continue;
            }
            let user = self.conns.user_of(token).map(str::to_string);
            let info = self.presence.infos.get(&token).cloned();
            let member = self.presence.members.entry(token).or_insert(Member {
                info: info.clone(),
                channels: Vec::new(),
            });
            if member.channels.contains(&channel) {
                continue;
            }
            member.channels.push(Rc::clone(&channel));
            self.presence.changes.push(PresenceChange::Join {
                channel: channel.to_string(),
                token,
                user,
                info: info.map(|i| i.to_string()),
                quiet,
            });
        }
        self.presence.infos.clear();
        if self.presence.changes.is_empty() {
            return;
        }
        let changes = std::mem::take(&mut self.presence.changes);
        for batch in crate::ipc::batches(changes, PresenceChange::size) {
            self.send_to_master(ToMaster::Presence { changes: batch });
        }
    }

    /// Join/leave events from the master, each to this worker's live subscribers of its
    /// channel: SSE `event: join`/`leave`, a WebSocket JSON text frame `{"type":"join",…}`
    /// (envelope framing only: plain framing carries bare payloads, where an event would pass
    /// for a message), a TCP `JOIN`/`LEAVE` line. Long-poll and joining streams get none.
    pub(super) fn deliver_presence_events(&mut self, events: Vec<PresenceEvent>) {
        let max = self.cfg.max_unsent;
        for event in events {
            let Some(chan) = self.channels.lookup(&event.channel) else {
                continue;
            };
            let members = self.channels.get(chan).expect("looked up").members.clone();
            let name = if event.join { "join" } else { "leave" };
            let sse: Rc<[u8]> = Rc::from(c1m_proto::sse::encode_event(name, event.json.as_bytes()));
            let tcp: Rc<[u8]> = Rc::from(c1m_proto::line::encode_presence(
                event.join,
                &event.channel,
                event.json.as_bytes(),
            ));
            let ws: Rc<[u8]> = Rc::from(c1m_proto::ws::encode::data_frame(
                c1m_proto::ws::DataKind::Text,
                crate::presence::ws_envelope(event.join, &event.json).as_bytes(),
            ));
            for member in members {
                let idx = member as usize;
                let Some(mut conn) = self.conns.get_mut(idx) else {
                    continue;
                };
                let sent = match conn.kind {
                    Kind::Sse => conn.send_shared(&sse, max),
                    Kind::TcpStream => conn.send_shared(&tcp, max),
                    Kind::Ws if conn.flags & WS_ENVELOPE != 0 => conn.send_shared(&ws, max),
                    _ => continue,
                };
                match sent {
                    Sent::Done => {}
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
        }
    }
}
