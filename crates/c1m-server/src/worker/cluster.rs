//! What a cluster broker adds to a worker: a join the master could not answer (the broker is
//! unreachable), a gap told to live subscribers (messages lost in a broker outage),
//! `GET /channels/{ch}` (subscribers over all nodes and the last id, behind the publish rule),
//! and under Redis Cluster the refusal of a multi-channel resume.

use super::conn::{Kind, Sent};
use super::requests::Transport;
use super::Worker;
use crate::ipc::ToMaster;
use c1m_proto::channel;
use c1m_proto::http::Request;
use c1m_proto::longpoll::{self, PollGap};
use c1m_proto::{http, line, sse};
use std::rc::Rc;

/// Why a multi-channel resume is refused under Redis Cluster: ids are per channel there, so
/// one last id cannot say where the subscriber stopped on each channel (docs/cluster.md).
pub const MULTI_CHANNEL_RESUME_REFUSED: &str =
    "multi-channel resume is not exact under Redis Cluster: subscribe to each channel on its own connection";

impl Worker {
    /// Under Redis Cluster a subscription to several channels carrying a last id is refused
    /// (HTTP 400, WebSocket close 1008, TCP `ERR`; counted as a bad request); true when it was.
    pub(super) fn refuse_multi_channel_resume(
        &mut self,
        idx: usize,
        channels: usize,
        last_id: Option<u64>,
        transport: &Transport,
    ) -> bool {
        let cluster = self
            .cfg
            .broker
            .as_deref()
            .is_some_and(crate::broker::redis::is_cluster);
        if !cluster || channels < 2 || last_id.is_none() {
            return false;
        }
        let why = MULTI_CHANNEL_RESUME_REFUSED;
        match transport {
            Transport::Tcp => {
                self.counters.refused.bad_request += 1;
                self.reply_and_close(idx, line::encode_err(why))
            }
            Transport::Ws => {
                self.counters.refused.bad_request += 1;
                self.ws_close(idx, c1m_proto::ws::close::POLICY_VIOLATION, why)
            }
            Transport::Sse | Transport::LongPoll => self.refuse(idx, 400, why),
        }
        true
    }

    /// `GET /channels/{ch}`: asked of the master (which asks the broker); answered like
    /// `/status` (JSON, or 503 past the status timeout).
    pub(super) fn channel_info_request(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        name: &str,
        len: usize,
        used: usize,
    ) -> Option<usize> {
        if !self.channel_query_allowed(idx, req, name) {
            return Some(len);
        }
        self.ask_master(idx, |token| ToMaster::ChannelInfo {
            req: token,
            channel: name.to_string(),
        });
        Some(used)
    }

    /// `GET /channels/{ch}/presence`: the channel's members, asked of the master; behind the
    /// publish rule like `GET /channels/{ch}` (a member list is for the application's
    /// backend, not for every subscriber). 404 when presence is off for the channel.
    pub(super) fn presence_request(
        &mut self,
        idx: usize,
        req: &Request<'_>,
        name: &str,
        len: usize,
        used: usize,
    ) -> Option<usize> {
        if !self.channel_query_allowed(idx, req, name) {
            return Some(len);
        }
        if !self.namespaces.presence_enabled(name) {
            self.refuse(
                idx,
                404,
                "presence is off for this channel (see --presence and the namespace option presence)",
            );
            return Some(len);
        }
        self.ask_master(idx, |token| ToMaster::PresenceQuery {
            req: token,
            channel: name.to_string(),
        });
        Some(used)
    }

    /// The checks every `GET /channels/{ch}…` query passes: the method, the publish rule (what
    /// a channel holds is for the application's backend) and the channel name. On refusal the
    /// client has its answer and false is returned.
    fn channel_query_allowed(&mut self, idx: usize, req: &Request<'_>, name: &str) -> bool {
        if req.method != "GET" {
            self.refuse_method(idx, "GET");
            return false;
        }
        if !self.publish_allowed(idx, req, name) {
            return false;
        }
        if !channel::is_valid_name(name) {
            let why = channel::ChannelError::BadName(name.to_string()).to_string();
            self.refuse(idx, 400, &why);
            return false;
        }
        true
    }

    /// Parks the connection as a status request (its timer ends it with a 503 if the master
    /// never answers) and sends the master `query`, built with the connection's token.
    fn ask_master(&mut self, idx: usize, query: impl FnOnce(u64) -> ToMaster) {
        let mut conn = self.conns.at(idx);
        conn.kind = Kind::Status;
        let token = super::token_of(idx, conn.generation);
        self.arm_timer(idx, super::health::STATUS_TIMEOUT);
        self.send_to_master(query(token));
    }

    /// The master could not answer a join: the subscriber is told to come back (it resumes
    /// with its last id then, so nothing is lost). A stream already open (a replay in chunks)
    /// has no way to say it but closing.
    pub(super) fn on_join_refused(&mut self, token: u64, retry_after_s: u64) {
        let continuing = self.conns.replays.remove(&token).is_some();
        let Some((idx, conn)) = self.conns.by_token(token) else {
            return;
        };
        let kind = conn.kind;
        if !kind.is_joining() {
            return;
        }
        self.counters.refused.busy += 1;
        for (chan, pos) in self.conns[idx].take_subs() {
            self.leave_channel(chan, pos);
        }
        if continuing {
            return self.close(idx);
        }
        let why = "cluster broker unreachable; retry later";
        match kind {
            Kind::WsJoining => self.ws_close(idx, c1m_proto::ws::close::TRY_AGAIN_LATER, why),
            Kind::TcpJoining => self.reply_and_close(idx, line::encode_err(why)),
            _ => {
                let extra = format!("Retry-After: {retry_after_s}\r\n");
                let body = format!("{why}\n");
                let bytes = http::response(
                    503,
                    "text/plain; charset=utf-8",
                    &extra,
                    body.as_bytes(),
                    false,
                );
                self.reply_and_close(idx, bytes)
            }
        }
    }

    /// Live subscribers of `channel` missed `(after, through]`: each gets a gap event in its
    /// protocol (joining ones get theirs from their replay).
    pub(super) fn fan_out_gap(&mut self, channel: &str, after: u64, through: u64) {
        let Some(chan) = self.channels.lookup(channel) else {
            return;
        };
        let members = self.channels.get(chan).expect("looked up").members.clone();
        let sse_gap: Rc<[u8]> = Rc::from(sse::encode_gap(channel, after, through));
        let tcp_gap: Rc<[u8]> = Rc::from(line::encode_gap(channel, after, through));
        let ws_gap: Rc<[u8]> = Rc::from(super::websocket::gap_frame(channel, after, through));
        let max = self.cfg.max_unsent;
        for member in members {
            let idx = member as usize;
            let Some(mut conn) = self.conns.get_mut(idx) else {
                continue;
            };
            let sent = match conn.kind {
                Kind::Sse => conn.send_shared(&sse_gap, max),
                Kind::TcpStream => conn.send_shared(&tcp_gap, max),
                // Without the envelope a client sees payloads only; the gap is a JSON text
                // frame either way, as in a replay.
                Kind::Ws => conn.send_shared(&ws_gap, max),
                Kind::PollWaiting => {
                    let gap = PollGap {
                        channel,
                        after,
                        through,
                    };
                    let body = longpoll::encode_body(&[], &[gap], through);
                    self.poll_answer(idx, 200, &body);
                    continue;
                }
                _ => continue,
            };
            if sent != Sent::Done {
                self.counters.dropped += 1;
                self.close(idx);
            }
        }
    }
}
