//! The pub/sub side of the transport, one for both modes: a thread holds one pub/sub
//! connection (reconnecting with backoff, dropping a link gone silent) and turns each push
//! into a [`Push`]. The push kind is the only parameter: one Redis uses plain pub/sub
//! (`SUBSCRIBE`, `message`) on names that carry the database number, a cluster uses sharded
//! pub/sub (`SSUBSCRIBE`, `smessage`) on names that carry the channel's hash tag. What a
//! connection's ups, downs and pushes mean to the master is the [`Owner`]'s: one Redis
//! reports the whole pub/sub side up or down, a cluster node reports its channels lost.
//!
//! Every mode also holds one [`ControlLink`]: a plain pub/sub connection to any Redis of the
//! deployment (one Redis; under Sentinel the master asked for, or a replica it stays on; any
//! node of a Redis Cluster), subscribed to the server API's control name and the presence
//! event name. Plain `PUBLISH` reaches every subscriber of a replication group and of a whole
//! Redis Cluster (where sharded pub/sub would reach only the one shard's), so control messages
//! and join/leave events take this one path in all three modes.

use super::protocol::Incoming;
use super::pubsub_conn::{self, Conn, Next, Writer};
use super::shared::{backoff, log_once, Link, Shared, BACKOFF_MIN, CONNECT_TIMEOUT};
use super::slots::{self, Redirect};
use super::target::Target;
use super::{cluster_script, presence, script};
use anyhow::Context;
use redis::Value;
use std::sync::{Mutex, MutexGuard};

/// Which pub/sub a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One Redis: `SUBSCRIBE`; the database number is part of the name (pub/sub ignores it).
    Plain { db: i64 },
    /// Redis Cluster: `SSUBSCRIBE`, served by the master of the channel's slot.
    Sharded,
}

/// What a push says.
#[derive(Debug, PartialEq, Eq)]
pub enum Push {
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
    },
    /// A join/leave event (`presence`) published by node `from` (control link only).
    Presence {
        channel: String,
        join: bool,
        from: String,
        json: String,
    },
    /// A subscription is confirmed.
    Subscribed(String),
    /// A subscription ended (ours, or Redis ended it: the slot moved).
    Unsubscribed(String),
    /// A subscribe was redirected (`MOVED`/`ASK`): this slot is served elsewhere now.
    Moved(u16),
    /// A subscribe was refused for another reason.
    Refused(String),
    /// A server API control message (control link only).
    Control(Vec<u8>),
    /// A message on one of c1m's own names that this build cannot read (another c1m version
    /// during a rolling upgrade, or another program publishing there): counted and logged.
    Unreadable(&'static str),
    /// Anything else (a PING's answer, another program's channel).
    Other,
}

impl Kind {
    /// The pub/sub name carrying `channel`'s messages.
    pub fn name(self, channel: &str) -> String {
        match self {
            Kind::Plain { db } => script::pubsub_name(db, channel),
            Kind::Sharded => cluster_script::pubsub_name(channel),
        }
    }

    /// The channel of a pub/sub name, if it is one of ours.
    fn channel_of(self, name: &[u8]) -> Option<&str> {
        match self {
            Kind::Plain { db } => script::channel_of(db, name),
            Kind::Sharded => cluster_script::channel_of(name),
        }
    }

    /// `SUBSCRIBE`/`SSUBSCRIBE` (or the unsubscribe) of `channel`.
    pub fn command(self, subscribe: bool, channel: &str) -> redis::Cmd {
        let verb = match (self, subscribe) {
            (Kind::Plain { .. }, true) => "SUBSCRIBE",
            (Kind::Plain { .. }, false) => "UNSUBSCRIBE",
            (Kind::Sharded, true) => "SSUBSCRIBE",
            (Kind::Sharded, false) => "SUNSUBSCRIBE",
        };
        redis::cmd(verb).arg(self.name(channel)).clone()
    }

    /// The names of the three pushes: a message, a confirmation, an ended subscription.
    fn pushes(self) -> [&'static [u8]; 3] {
        match self {
            Kind::Plain { .. } => [b"message", b"subscribe", b"unsubscribe"],
            Kind::Sharded => [b"smessage", b"ssubscribe", b"sunsubscribe"],
        }
    }

    /// Reads one push.
    pub fn parse(self, value: Value) -> Push {
        let [message, subscribe, unsubscribe] = self.pushes();
        let parts = match value {
            Value::Array(parts) => parts,
            Value::ServerError(e) => {
                return match slots::redirect(e.code(), e.details().unwrap_or_default()) {
                    Some(Redirect::Moved(slot, _) | Redirect::Ask(slot, _)) => Push::Moved(slot),
                    None => {
                        Push::Refused(format!("{} {}", e.code(), e.details().unwrap_or_default()))
                    }
                };
            }
            _ => return Push::Other,
        };
        let [Value::BulkString(kind), Value::BulkString(name), data] = parts.as_slice() else {
            return Push::Other;
        };
        if let (Kind::Plain { db }, Value::BulkString(data)) = (self, data) {
            if kind.as_slice() == message {
                if name.as_slice() == script::control_name(db).as_bytes() {
                    return Push::Control(data.clone());
                }
                if name.as_slice() == presence::event_name(db).as_bytes() {
                    return match presence::split_event(data) {
                        Some((join, from, channel, json)) => Push::Presence {
                            channel: channel.to_string(),
                            join,
                            from: from.to_string(),
                            json: json.to_string(),
                        },
                        None => Push::Unreadable("join/leave event"),
                    };
                }
            }
        }
        let Some(channel) = self.channel_of(name) else {
            return Push::Other;
        };
        let channel = channel.to_string();
        match (kind.as_slice(), data) {
            (k, Value::BulkString(data)) if k == message => match script::split_message(data) {
                Some((id, payload)) => Push::Message {
                    channel,
                    id,
                    payload: payload.to_vec(),
                },
                None => Push::Unreadable("channel message"),
            },
            (k, _) if k == subscribe => Push::Subscribed(channel),
            (k, _) if k == unsubscribe => Push::Unsubscribed(channel),
            _ => Push::Other,
        }
    }
}

/// What one pub/sub connection's events mean, and where its write half is kept.
pub trait Owner {
    fn shared(&self) -> &Shared;
    /// The node, for logs (a URL as it may be shown, or `host:port`).
    fn shown(&self) -> &str;
    /// How to reach it.
    fn target(&self) -> anyhow::Result<Target>;
    fn kind(&self) -> Kind;
    /// Connected: keeps the write half. False when the master is gone.
    fn up(&self, writer: Writer) -> bool;
    /// A push came. False when the master is gone.
    fn push(&self, push: Push) -> bool;
    /// Sends a PING (the link was silent); false when it could not.
    fn ping(&self) -> bool;
    /// The connection ended, or (`connected` false) could not be made. False when the master
    /// is gone.
    fn down(&self, connected: bool) -> bool;
    /// Whether to keep the connection after a loss (a cluster node without channels is left).
    fn stay(&self) -> bool {
        true
    }
    /// How a failed connection attempt is named in the log.
    fn label(&self) -> String;
}

/// Holds one pub/sub connection until the owner lets it go or the master goes away.
pub fn link_thread(owner: &impl Owner) {
    let mut delay = BACKOFF_MIN;
    loop {
        let connected = owner
            .target()
            .and_then(|t| pubsub_conn::connect(&t, CONNECT_TIMEOUT));
        match connected {
            Ok((mut conn, writer)) => {
                delay = BACKOFF_MIN;
                if !owner.up(writer) || !read(&mut conn, owner) || !owner.down(true) {
                    return;
                }
            }
            Err(e) => {
                owner.shared().failed(pubsub_conn::is_refused(&e));
                log_once(&format!(
                    "c1m: {} (pub/sub): {e:#}; retrying",
                    owner.label()
                ));
                if !owner.down(false) {
                    return;
                }
            }
        }
        std::thread::sleep(delay);
        delay = backoff(delay);
        if !owner.stay() {
            return;
        }
    }
}

/// Reads pushes until the connection ends or goes silent. False when the master is gone.
fn read(conn: &mut Conn, owner: &impl Owner) -> bool {
    let kind = owner.kind();
    let mut ping = || owner.ping();
    loop {
        let value = match conn.next_watched(&mut ping) {
            Next::Value(v) => v,
            Next::Dead => {
                owner.shared().dead_link(owner.shown());
                return true;
            }
            Next::Closed => return true,
        };
        let push = match kind.parse(value) {
            Push::Unreadable(what) => {
                owner.shared().unreadable(owner.shown(), what);
                continue;
            }
            push => push,
        };
        if !owner.push(push) {
            return false;
        }
    }
}

/// Where a control link connects, asked again on every (re)connection.
pub type Locate = Box<dyn Fn() -> anyhow::Result<Target> + Send + Sync>;

/// The control link (see the module doc): control messages and join/leave events from every
/// node, in every mode. It holds no channel subscription, so its losses cost nothing to
/// catch up: what was published while it was down is missed (a control act or question goes
/// unanswered there; an event's member is still listed by the presence query).
pub struct ControlLink {
    db: i64,
    shown: String,
    locate: Locate,
    link: Link,
    writer: Mutex<Option<Writer>>,
}

impl ControlLink {
    /// Starts the control link's thread.
    pub fn start(db: i64, shown: &str, locate: Locate, link: Link) -> anyhow::Result<()> {
        let ctl = ControlLink {
            db,
            shown: shown.to_string(),
            locate,
            link,
            writer: Mutex::new(None),
        };
        std::thread::Builder::new()
            .name("c1m-redis-ctl".into())
            .spawn(move || link_thread(&ctl))
            .context("starting the redis control link thread")?;
        Ok(())
    }

    fn writer(&self) -> MutexGuard<'_, Option<Writer>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Owner for ControlLink {
    fn shared(&self) -> &Shared {
        &self.link.shared
    }

    fn shown(&self) -> &str {
        &self.shown
    }

    fn target(&self) -> anyhow::Result<Target> {
        (self.locate)()
    }

    fn kind(&self) -> Kind {
        Kind::Plain { db: self.db }
    }

    fn up(&self, writer: Writer) -> bool {
        let mut w = self.writer();
        *w = Some(writer);
        let subscribe = redis::cmd("SUBSCRIBE")
            .arg(script::control_name(self.db))
            .arg(presence::event_name(self.db))
            .clone();
        pubsub_conn::write_or_shut(&mut w, &subscribe);
        true
    }

    fn push(&self, push: Push) -> bool {
        match push {
            Push::Control(message) => self.link.send(Incoming::Control(
                String::from_utf8_lossy(&message).into_owned(),
            )),
            Push::Presence {
                channel,
                join,
                from,
                json,
            } => self.link.send(Incoming::Presence {
                channel,
                join,
                from,
                json,
            }),
            _ => true,
        }
    }

    fn ping(&self) -> bool {
        pubsub_conn::write_or_shut(&mut self.writer(), &redis::cmd("PING"))
    }

    fn down(&self, _connected: bool) -> bool {
        if let Some(writer) = self.writer().take() {
            writer.shutdown();
        }
        true
    }

    fn label(&self) -> String {
        format!("redis {} (control link)", self.shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(parts: &[&[u8]]) -> Value {
        Value::Array(
            parts
                .iter()
                .map(|p| Value::BulkString(p.to_vec()))
                .collect(),
        )
    }

    #[test]
    fn the_push_kind_is_the_only_difference() {
        let plain = Kind::Plain { db: 3 };
        let name = plain.name("news");
        assert_eq!(
            plain.parse(push(&[b"message", name.as_bytes(), b"7\nhi"])),
            Push::Message {
                channel: "news".into(),
                id: 7,
                payload: b"hi".to_vec()
            }
        );
        assert_eq!(
            plain.parse(push(&[b"subscribe", name.as_bytes(), b"1"])),
            Push::Subscribed("news".into())
        );
        // A sharded push on a plain connection is not a message, nor another database's.
        assert_eq!(
            plain.parse(push(&[b"smessage", name.as_bytes(), b"7\nhi"])),
            Push::Other
        );
        let other_db = Kind::Plain { db: 4 }.name("news");
        assert_eq!(
            plain.parse(push(&[b"message", other_db.as_bytes(), b"7\nhi"])),
            Push::Other
        );
        let control = script::control_name(3);
        assert_eq!(
            plain.parse(push(&[b"message", control.as_bytes(), b"{}"])),
            Push::Control(b"{}".to_vec())
        );
        let events = presence::event_name(3);
        assert_eq!(
            plain.parse(push(&[b"message", events.as_bytes(), b"L\nn1\nroom\n{}"])),
            Push::Presence {
                channel: "room".into(),
                join: false,
                from: "n1".into(),
                json: "{}".into()
            }
        );
        // An event on a channel's own name is not one (events have their own name): it is an
        // unreadable channel message, and so is an unreadable event.
        assert_eq!(
            plain.parse(push(&[b"message", name.as_bytes(), b"L\nn1\nroom\n{}"])),
            Push::Unreadable("channel message")
        );
        assert_eq!(
            plain.parse(push(&[b"message", events.as_bytes(), b"X\nn1"])),
            Push::Unreadable("join/leave event")
        );
        let sharded = Kind::Sharded;
        let name = sharded.name("news");
        assert_eq!(
            sharded.parse(push(&[b"smessage", name.as_bytes(), b"8\nyo"])),
            Push::Message {
                channel: "news".into(),
                id: 8,
                payload: b"yo".to_vec()
            }
        );
        assert_eq!(
            sharded.parse(push(&[b"sunsubscribe", name.as_bytes(), b"0"])),
            Push::Unsubscribed("news".into())
        );
        assert_eq!(
            sharded.command(true, "news").get_packed_command(),
            redis::cmd("SSUBSCRIBE").arg(&name).get_packed_command()
        );
    }
}
