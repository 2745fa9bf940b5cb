//! The node's presence: each presence-enabled channel's member set, fed by the workers'
//! reports (`ToMaster::Presence`), bounded per channel (`presence_max_members`) and in total
//! bytes (`presence_max_bytes`). A join past either bound is left out of presence and counted;
//! the subscription itself is not touched (presence is a view of the subscribers, not a gate).
//!
//! The master holds the sets because it outlives a worker: when one dies (even `kill -9`),
//! its members are dropped here and their leaves go out to the other workers' subscribers.
//! Join/leave events are built here too, so their JSON is made once per change, not once per
//! worker. Anonymous members (no `sub`) are counted (`clients`) but not listed, and make no
//! events: there is no one to name.

use super::Master;
use crate::broker::{PresenceOp, Req};
use crate::conn_id::ConnId;
use crate::ipc::{PresenceChange, PresenceEvent, ToWorker};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// Bytes counted per member besides its user and info text: the hash-table entry (id, two
/// boxed strings, control byte, load slack) and the two allocations' headers.
const MEMBER_COST: usize = 96;
/// Bytes counted per channel besides its name: its table and the outer table's entry.
const CHANNEL_COST: usize = 128;

struct Member {
    user: Option<Box<str>>,
    info: Option<Box<str>>,
}

impl Member {
    fn cost(&self) -> usize {
        MEMBER_COST
            + self.user.as_ref().map_or(0, |u| u.len())
            + self.info.as_ref().map_or(0, |i| i.len())
    }
}

/// One listed member (`presence(channel)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub user: String,
    pub conn: ConnId,
    pub info: Option<String>,
}

/// `presence_stats(channel)`: member connections (anonymous ones too) and distinct users.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub clients: u64,
    pub users: u64,
}

/// What a join did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Joined {
    Added,
    /// Already a member (a repeated report): nothing changed.
    Already,
    /// Left out: the channel holds `presence_max_members`.
    FullChannel,
    /// Left out: the sets hold `presence_max_bytes`.
    FullBytes,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    pub joins: u64,
    pub leaves: u64,
    pub refused_channel_full: u64,
    pub refused_bytes_full: u64,
    pub events: u64,
}

pub struct Presence {
    channels: HashMap<Rc<str>, HashMap<ConnId, Member>>,
    bytes: usize,
    members: usize,
    max_members: usize,
    max_bytes: usize,
    pub counters: Counters,
}

impl Presence {
    pub fn new(max_members: u32, max_bytes: usize) -> Presence {
        Presence {
            channels: HashMap::new(),
            bytes: 0,
            members: 0,
            max_members: max_members as usize,
            max_bytes,
            counters: Counters::default(),
        }
    }

    pub fn join(
        &mut self,
        conn: ConnId,
        channel: &str,
        user: Option<String>,
        info: Option<String>,
    ) -> Joined {
        let member = Member {
            user: user.map(String::into_boxed_str),
            info: info.map(String::into_boxed_str),
        };
        let cost = member.cost();
        let new_channel = !self.channels.contains_key(channel);
        let extra = if new_channel {
            CHANNEL_COST + channel.len()
        } else {
            0
        };
        if let Some(set) = self.channels.get(channel) {
            if set.contains_key(&conn) {
                return Joined::Already;
            }
            if set.len() >= self.max_members {
                self.counters.refused_channel_full += 1;
                return Joined::FullChannel;
            }
        }
        if self.bytes + cost + extra > self.max_bytes {
            self.counters.refused_bytes_full += 1;
            return Joined::FullBytes;
        }
        self.bytes += cost + extra;
        self.members += 1;
        self.counters.joins += 1;
        self.channels
            .entry(Rc::from(channel))
            .or_default()
            .insert(conn, member);
        Joined::Added
    }

    /// Removes a member; its user and info when it was one (a join left out by a cap was not).
    fn leave(&mut self, conn: ConnId, channel: &str) -> Option<Member> {
        let set = self.channels.get_mut(channel)?;
        let member = set.remove(&conn)?;
        self.bytes -= member.cost();
        self.members -= 1;
        self.counters.leaves += 1;
        if set.is_empty() {
            self.channels.remove(channel);
            self.bytes -= CHANNEL_COST + channel.len();
        }
        Some(member)
    }

    /// Drops every member held by `worker` (it died); (channel, id, user, info) of each.
    fn drop_worker(&mut self, worker: u32) -> Vec<(Rc<str>, ConnId, Member)> {
        let mut gone = Vec::new();
        for (channel, set) in &mut self.channels {
            let ids: Vec<ConnId> = set.keys().filter(|c| c.worker == worker).copied().collect();
            for id in ids {
                if let Some(m) = set.remove(&id) {
                    gone.push((Rc::clone(channel), id, m));
                }
            }
        }
        for (_, _, m) in &gone {
            self.bytes -= m.cost();
        }
        self.members -= gone.len();
        self.counters.leaves += gone.len() as u64;
        let empty: Vec<Rc<str>> = self
            .channels
            .iter()
            .filter(|(_, s)| s.is_empty())
            .map(|(c, _)| Rc::clone(c))
            .collect();
        for c in empty {
            self.channels.remove(&c);
            self.bytes -= CHANNEL_COST + c.len();
        }
        gone
    }

    /// The members of `channel` that have a user, by user then connection.
    pub fn presence(&self, channel: &str) -> Vec<MemberView> {
        let mut out: Vec<MemberView> = self
            .channels
            .get(channel)
            .into_iter()
            .flatten()
            .filter_map(|(id, m)| {
                Some(MemberView {
                    user: m.user.as_deref()?.to_string(),
                    conn: *id,
                    info: m.info.as_deref().map(str::to_string),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.user, a.conn).cmp(&(&b.user, b.conn)));
        out
    }

    pub fn presence_stats(&self, channel: &str) -> Stats {
        let Some(set) = self.channels.get(channel) else {
            return Stats::default();
        };
        let users: HashSet<&str> = set.values().filter_map(|m| m.user.as_deref()).collect();
        Stats {
            clients: set.len() as u64,
            users: users.len() as u64,
        }
    }

    /// Every member: (channel, id, user, info).
    fn all(&self) -> impl Iterator<Item = (&str, ConnId, Option<&str>, Option<&str>)> {
        self.channels.iter().flat_map(|(ch, set)| {
            set.iter()
                .map(move |(id, m)| (&**ch, *id, m.user.as_deref(), m.info.as_deref()))
        })
    }

    /// (channels, members, bytes counted against `presence_max_bytes`).
    pub fn totals(&self) -> (usize, usize, usize) {
        (self.channels.len(), self.members, self.bytes)
    }
}

/// The answer of `GET /channels/{ch}/presence` (and the server API's `presence`) from the
/// cluster's members (field `node/conn`, member JSON or '' for an anonymous member).
pub(super) fn cluster_answer(channel: &str, members: &[(String, String)]) -> serde_json::Value {
    let mut listed: Vec<serde_json::Value> = Vec::new();
    let mut users = HashSet::new();
    for (field, value) in members {
        let Ok(mut m) = serde_json::from_str::<serde_json::Value>(value) else {
            continue; // anonymous: counted in clients only
        };
        if let Some(user) = m["user"].as_str() {
            users.insert(user.to_string());
        }
        let node = field.split_once('/').map_or("", |(n, _)| n);
        if let Some(o) = m.as_object_mut() {
            o.remove("channel");
            o.insert("node".into(), node.into());
        }
        listed.push(m);
    }
    listed.sort_by(|a, b| {
        let key = |v: &serde_json::Value| {
            (
                v["user"].as_str().unwrap_or_default().to_string(),
                v["node"].as_str().unwrap_or_default().to_string(),
                v["conn"].as_str().unwrap_or_default().to_string(),
            )
        };
        key(a).cmp(&key(b))
    });
    serde_json::json!({
        "channel": channel, "clients": members.len(), "users": users.len(),
        "members": listed, "complete": true,
    })
}

/// The JSON answer of `GET /channels/{ch}/presence`.
pub fn answer_json(channel: &str, stats: Stats, members: &[MemberView]) -> String {
    let members: Vec<serde_json::Value> = members
        .iter()
        .map(|m| {
            let mut o = serde_json::json!({"user": m.user, "conn": m.conn.to_string()});
            if let Some(info) = &m.info {
                o["info"] = serde_json::from_str(info).unwrap_or(serde_json::Value::Null);
            }
            o
        })
        .collect();
    serde_json::json!({
        "channel": channel, "clients": stats.clients, "users": stats.users, "members": members,
    })
    .to_string()
}

impl Master {
    /// `GET /channels/{ch}/presence` from worker `worker`: this node's sets, or with a broker
    /// that shares presence, the cluster's (asked of it; answered in
    /// [`Master::answer_cluster_presence`]).
    pub(super) fn on_presence_query(&mut self, worker: usize, req: u64, channel: String) {
        if self.broker.shares_presence() {
            self.broker
                .presence_query(Req { worker, token: req }, channel);
            return self.pump();
        }
        let stats = self.presence.presence_stats(&channel);
        let members = self.presence.presence(&channel);
        let body = answer_json(&channel, stats, &members);
        self.send(
            worker,
            ToWorker::Status {
                req,
                body,
                metrics: false,
            }
            .encode(),
        );
    }

    /// The broker's answer to a presence query; when it could not be asked, this node's
    /// members alone, marked `"complete": false`.
    pub(super) fn answer_cluster_presence(
        &mut self,
        req: Req,
        channel: String,
        members: Option<Vec<(String, String)>>,
    ) {
        let body = match members {
            Some(members) => cluster_answer(&channel, &members).to_string(),
            None => {
                let stats = self.presence.presence_stats(&channel);
                let local = self.presence.presence(&channel);
                let mut v: serde_json::Value =
                    serde_json::from_str(&answer_json(&channel, stats, &local)).unwrap_or_default();
                v["complete"] = false.into();
                v.to_string()
            }
        };
        let answer = ToWorker::Status {
            req: req.token,
            body,
            metrics: false,
        };
        self.send(req.worker, answer.encode());
    }

    /// The broker may have lost this node's members: all of them again, quietly.
    pub(super) fn resync_presence(&mut self) {
        let ops = self
            .presence
            .all()
            .map(|(channel, conn, user, info)| PresenceOp {
                join: true,
                announce: false,
                channel: channel.to_string(),
                conn: conn.to_string(),
                json: user.map_or_else(String::new, |u| {
                    crate::presence::event_json(channel, Some(u), conn, info)
                }),
            })
            .collect();
        self.broker.presence_ops(ops);
    }

    /// A worker's member changes: applied to the sets; the joins and leaves of named users on
    /// join/leave channels go out as events, one frame per worker.
    pub(super) fn on_presence_changes(&mut self, worker: usize, changes: Vec<PresenceChange>) {
        let shared = self.broker.shares_presence();
        let mut events = Vec::new();
        let mut ops = Vec::new();
        for change in changes {
            let (join, channel, conn, json, announce) = match change {
                PresenceChange::Join {
                    channel,
                    token,
                    user,
                    info,
                    quiet,
                } => {
                    let conn = ConnId {
                        worker: worker as u32,
                        token,
                    };
                    let json = user.as_deref().map(|u| {
                        crate::presence::event_json(&channel, Some(u), conn, info.as_deref())
                    });
                    if self.presence.join(conn, &channel, user, info) != Joined::Added {
                        continue;
                    }
                    (true, channel, conn, json, !quiet)
                }
                PresenceChange::Leave { channel, token } => {
                    let conn = ConnId {
                        worker: worker as u32,
                        token,
                    };
                    let Some(m) = self.presence.leave(conn, &channel) else {
                        continue; // never a member (a cap left it out)
                    };
                    let json = m.user.as_deref().map(|user| {
                        crate::presence::event_json(&channel, Some(user), conn, m.info.as_deref())
                    });
                    (false, channel, conn, json, true)
                }
            };
            if shared {
                ops.push(PresenceOp {
                    join,
                    announce: announce && json.is_some(),
                    channel: channel.clone(),
                    conn: conn.to_string(),
                    json: json.clone().unwrap_or_default(),
                });
            }
            if let Some(json) = json.filter(|_| announce) {
                events.push(PresenceEvent {
                    join,
                    channel,
                    json,
                });
            }
        }
        if !ops.is_empty() {
            self.broker.presence_ops(ops);
        }
        self.send_presence_events(events);
    }

    /// Worker `worker` is gone: its members leave. During a live upgrade the old workers'
    /// connections live on in the new ones, so nobody is told they left.
    pub(super) fn drop_worker_presence(&mut self, worker: usize) {
        let gone = self.presence.drop_worker(worker as u32);
        let quiet = self.handover.is_some();
        let mut ops = Vec::new();
        let mut events = Vec::new();
        for (channel, conn, m) in gone {
            let json = m.user.as_deref().map(|user| {
                crate::presence::event_json(&channel, Some(user), conn, m.info.as_deref())
            });
            ops.push(PresenceOp {
                join: false,
                announce: !quiet && json.is_some(),
                channel: channel.to_string(),
                conn: conn.to_string(),
                json: json.clone().unwrap_or_default(),
            });
            if let Some(json) = json.filter(|_| !quiet) {
                events.push(PresenceEvent {
                    join: false,
                    channel: channel.to_string(),
                    json,
                });
            }
        }
        if self.broker.shares_presence() && !ops.is_empty() {
            self.broker.presence_ops(ops);
        }
        self.send_presence_events(events);
    }

    /// Events to the workers with subscribers on each event's channel (join/leave channels
    /// only), each worker's in as few frames as fit.
    pub(super) fn send_presence_events(&mut self, events: Vec<PresenceEvent>) {
        let mut per_worker: Vec<Vec<PresenceEvent>> = vec![Vec::new(); self.slots.len()];
        let namespaces = crate::config::Namespaces::new(&self.cfg);
        for event in events {
            if !namespaces.join_leave_enabled(&event.channel) {
                continue;
            }
            let Some(targets) = self.interest.get(&event.channel) else {
                continue;
            };
            self.presence.counters.events += 1;
            for &w in targets {
                if let Some(list) = per_worker.get_mut(w) {
                    list.push(event.clone());
                }
            }
        }
        for (w, list) in per_worker.into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            for batch in crate::ipc::batches(list, PresenceEvent::size) {
                self.send(w, ToWorker::PresenceEvents { events: batch }.encode());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(worker: u32, token: u64) -> ConnId {
        ConnId { worker, token }
    }

    #[test]
    fn members_are_capped_per_channel_and_in_bytes_and_counted_back_to_zero() {
        let mut p = Presence::new(2, 10_000);
        let ann = || Some("ann".to_string());
        assert_eq!(p.join(id(0, 1), "r", ann(), None), Joined::Added);
        assert_eq!(p.join(id(0, 1), "r", ann(), None), Joined::Already);
        assert_eq!(p.join(id(1, 1), "r", None, None), Joined::Added);
        assert_eq!(p.join(id(1, 2), "r", ann(), None), Joined::FullChannel);
        assert_eq!(
            p.presence_stats("r"),
            Stats {
                clients: 2,
                users: 1
            }
        );
        assert_eq!(p.presence("r").len(), 1, "anonymous members are not listed");
        let big = Some("x".repeat(9_900));
        assert_eq!(p.join(id(0, 3), "s", ann(), big), Joined::FullBytes);
        assert_eq!(p.counters.refused_channel_full, 1);
        assert_eq!(p.counters.refused_bytes_full, 1);
        assert!(
            p.leave(id(1, 2), "r").is_none(),
            "a refused join was never a member"
        );
        assert!(p.leave(id(0, 1), "r").is_some());
        assert_eq!(p.drop_worker(1).len(), 1);
        assert_eq!(p.totals(), (0, 0, 0));
    }

    #[test]
    fn a_dead_workers_members_go_and_the_others_stay() {
        let mut p = Presence::new(10, 1 << 20);
        for (w, t, c) in [(0, 1, "a"), (1, 1, "a"), (1, 2, "b")] {
            p.join(id(w, t), c, Some(format!("u{w}{t}")), None);
        }
        let gone = p.drop_worker(1);
        assert_eq!(gone.len(), 2);
        assert_eq!(p.presence("a")[0].user, "u01");
        assert_eq!(p.presence_stats("b"), Stats::default());
        let (channels, members, bytes) = p.totals();
        assert_eq!((channels, members), (1, 1));
        assert_eq!(bytes, CHANNEL_COST + 1 + MEMBER_COST + 3);
    }
}
