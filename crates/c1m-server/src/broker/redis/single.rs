//! One Redis (`redis://`, `rediss://`, or `redis+sentinel://`: the master the Sentinels name,
//! asked again on every reconnection): the mode's part of the transport. One command
//! connection (scripts take plain arguments: every key is in the one database) and one
//! pub/sub connection whose write half the command thread uses for (UN)SUBSCRIBE. Losing the
//! pub/sub connection is reported as the whole pub/sub side down (`PubSubDown`); the state
//! machine subscribes everything again when it is back. Behind Sentinel, a Redis that answers
//! `READONLY` (demoted to replica) drops the command connection, and a pub/sub connection
//! left on another Redis than the command connection's is remade, so both follow a failover.
//! The control link (`pubsub::ControlLink`) asks for the Redis the same way; a replica it is
//! left on still hears every control message and event (replicas get the master's PUBLISHes).

use super::commands::{self, evalsha, Merge, Nodes, Plan, Retry, Scripts};
use super::protocol::{Incoming, Request};
use super::pubsub::{self, ControlLink, Kind, Owner, Push};
use super::pubsub_conn::{self, Writer};
use super::shared::{connect_with, log_once, Link, Shared, CONNECT_TIMEOUT};
use super::target::{SentinelTarget, Target};
use crate::broker::IDEMPOTENCY_TTL;
use anyhow::Context;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};

/// One connection of each kind, made and dropped at start: a refusal (wrong password, no
/// permission, untrusted certificate) is returned so the node does not start misconfigured;
/// Redis simply being down is not an error (the threads keep trying).
pub fn probe(target: &Target) -> anyhow::Result<()> {
    let scripts = Scripts::new(false);
    match connect_with(target, |con| scripts.load(con)) {
        Err(e) if pubsub_conn::is_refusal(&e) => {
            return Err(pubsub_conn::Refused(format!("{e}")).into())
        }
        Err(e) => {
            tracing::warn!(redis = %target.shown, error = %e, "broker not reachable yet; connecting in the background");
            return Ok(());
        }
        Ok(_) => {}
    }
    match pubsub_conn::connect(target, CONNECT_TIMEOUT) {
        Err(e) if pubsub_conn::is_refused(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Where the one Redis is: fixed by the URL, or named by the Sentinels at each connection.
#[derive(Clone)]
pub enum Source {
    Fixed(Box<Target>),
    Sentinel(SentinelTarget),
}

impl Source {
    /// The Redis to connect to now.
    fn current(&self) -> anyhow::Result<Target> {
        match self {
            Source::Fixed(t) => Ok((**t).clone()),
            Source::Sentinel(s) => s.resolve(),
        }
    }

    fn shown(&self) -> &str {
        match self {
            Source::Fixed(t) => &t.shown,
            Source::Sentinel(s) => &s.shown,
        }
    }

    /// The database (a Sentinel URL names none: 0).
    fn db(&self) -> i64 {
        match self {
            Source::Fixed(t) => t.db,
            Source::Sentinel(_) => 0,
        }
    }
}

/// Starts the command thread and the pub/sub thread.
pub fn start(source: Source, requests: Receiver<Request>, link: Link) -> anyhow::Result<()> {
    let subs = Arc::new(PubSub {
        kind: Kind::Plain { db: source.db() },
        source: source.clone(),
        at: Mutex::new(String::new()),
        link: link.clone(),
        writer: Mutex::new(None),
    });
    let located = source.clone();
    let locate: pubsub::Locate = Box::new(move || located.current());
    ControlLink::start(source.db(), source.shown(), locate, link.clone())?;
    let node = Single {
        source,
        addr: String::new(),
        scripts: Scripts::new(false),
        con: None,
        lost: None,
        subs: subs.clone(),
    };
    let l = link.clone();
    std::thread::Builder::new()
        .name("c1m-redis-cmd".into())
        .spawn(move || commands::command_thread(node, requests, l))
        .context("starting the redis command thread")?;
    std::thread::Builder::new()
        .name("c1m-redis-sub".into())
        .spawn(move || pubsub::link_thread(&*subs))
        .context("starting the redis pub/sub thread")?;
    Ok(())
}

/// The command side of one Redis.
struct Single {
    source: Source,
    /// The Redis connected to (`host:port`), or "" before the first connection.
    addr: String,
    scripts: Scripts,
    con: Option<redis::Connection>,
    /// Why the connection broke during the last batch (reported once its answers are out).
    lost: Option<String>,
    subs: Arc<PubSub>,
}

fn start_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
}

impl Nodes for Single {
    fn check(&mut self, link: &Link) -> Option<bool> {
        if let Some(error) = self.lost.take() {
            link.shared.command_up.store(false, Ordering::SeqCst);
            tracing::warn!(redis = %self.source.shown(), addr = %self.addr, error = %error, "broker connection lost; reconnecting");
            if !link.send(Incoming::CommandDown) {
                return None;
            }
        }
        if self.con.is_some() {
            return Some(true);
        }
        let target = match self.source.current() {
            Ok(t) => t,
            Err(e) => {
                link.shared.failed(false);
                log_once(&format!("c1m: {e:#}; retrying"));
                return Some(false);
            }
        };
        match connect_with(&target, |con| self.scripts.load(con)) {
            Ok(con) => {
                self.con = Some(con);
                self.addr = target.addr.clone();
                // The pub/sub side must listen where the writes go now.
                self.subs.follow(&target.addr);
                link.shared.command_up.store(true, Ordering::SeqCst);
                if !link.send(Incoming::CommandUp) {
                    return None;
                }
                tracing::info!(redis = %self.source.shown(), addr = %target.addr, "broker connected");
                Some(true)
            }
            Err(e) => {
                let refused = pubsub_conn::is_refusal(&e);
                link.shared.failed(refused);
                let why = if refused {
                    " (refused: check the URL's user and password, the ACL, --broker-ca)"
                } else {
                    ""
                };
                log_once(&format!(
                    "c1m: redis {} ({}): {e}{why}; retrying",
                    self.source.shown(),
                    target.addr
                ));
                Some(false)
            }
        }
    }

    fn subscribe(&mut self, channel: String) {
        self.subs.write(true, &channel);
    }

    fn unsubscribe(&mut self, channel: &str) {
        self.subs.write(false, channel);
    }

    fn plan(&mut self, req: Request, plan: &mut Plan) {
        let (tag, cmd) = match req {
            Request::Publish {
                tag,
                channel,
                payload,
                max_count,
                max_age_ms,
                key,
            } => {
                let mut cmd = evalsha(&self.scripts.publish, &[]);
                cmd.arg(channel)
                    .arg(payload)
                    .arg(max_count)
                    .arg(max_age_ms)
                    .arg(start_us())
                    .arg(self.source.db())
                    .arg(key)
                    .arg(IDEMPOTENCY_TTL.as_millis() as u64);
                (tag, cmd)
            }
            Request::Replay {
                tag,
                channels,
                after,
                cap,
                max_age_ms,
            } => {
                let mut cmd = evalsha(&self.scripts.replay, &[]);
                cmd.arg(after.map(|a| a.to_string()).unwrap_or_default())
                    .arg(cap)
                    .arg(max_age_ms)
                    .arg(start_us())
                    .arg(channels);
                (tag, cmd)
            }
            Request::Script { tag, which, args } => {
                let mut cmd = evalsha(self.scripts.of(which), &[]);
                cmd.arg(args);
                (tag, cmd)
            }
            Request::Control { tag, message } => {
                let mut cmd = redis::cmd("PUBLISH");
                cmd.arg(super::script::control_name(self.source.db()))
                    .arg(message);
                (tag, cmd)
            }
            Request::Subscribe(ch) => return self.subscribe(ch),
            Request::Unsubscribe(ch) => return self.unsubscribe(&ch),
        };
        plan.request(tag, Merge::One, 1);
        plan.op(0, 0, cmd.get_packed_command());
    }

    fn node_of(&mut self, _slot: u16) -> Option<String> {
        Some(self.addr.clone())
    }

    fn con(&mut self, _addr: &str) -> redis::RedisResult<&mut redis::Connection> {
        self.connected("")
            .ok_or_else(|| redis::RedisError::from((redis::ErrorKind::Io, "redis connection lost")))
    }

    fn connected(&mut self, _addr: &str) -> Option<&mut redis::Connection> {
        self.con.as_mut()
    }

    fn reload(&mut self, _addr: &str) -> redis::RedisResult<()> {
        match self.con.as_mut() {
            Some(con) => self.scripts.load(con),
            None => Ok(()),
        }
    }

    /// `READONLY`: the Redis connected to was made a replica (a Sentinel failover, or an
    /// operator's `REPLICAOF`). The connection is dropped, so the next one asks the Sentinels
    /// again; the request fails (503: the publisher retries).
    fn redirect(&mut self, code: &str, detail: &str) -> Retry {
        if code == "READONLY" {
            self.con = None;
            self.lost = Some(format!("{code} {detail} (the master changed)"));
        }
        Retry::No
    }

    fn lost(&mut self, _addr: &str, error: Option<&redis::RedisError>) {
        if self.con.take().is_some() || self.lost.is_none() {
            self.lost = Some(error.map_or_else(|| "lost".to_string(), |e| e.to_string()));
        }
    }
}

/// The pub/sub connection of one Redis, shared by its thread (reads) and the command thread
/// (writes SUBSCRIBE and UNSUBSCRIBE).
struct PubSub {
    kind: Kind,
    source: Source,
    /// The Redis this connection was last made to (`host:port`).
    at: Mutex<String>,
    link: Link,
    writer: Mutex<Option<Writer>>,
}

impl PubSub {
    fn writer(&self) -> MutexGuard<'_, Option<Writer>> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The command connection now goes to `addr`: a pub/sub connection elsewhere (the old
    /// master, if it still accepts connections) is shut, and the reconnect asks again.
    fn follow(&self, addr: &str) {
        let at = self.at.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if !at.is_empty() && at != addr {
            if let Some(writer) = self.writer().take() {
                tracing::warn!(from = %at, to = %addr, "broker master changed; moving the pub/sub connection");
                writer.shutdown();
            }
        }
    }

    /// Writes a (UN)SUBSCRIBE; a failure shuts the connection down, and the reconnect
    /// subscribes everything again.
    fn write(&self, subscribe: bool, channel: &str) {
        pubsub_conn::write_or_shut(&mut self.writer(), &self.kind.command(subscribe, channel));
    }
}

impl Owner for PubSub {
    fn shared(&self) -> &Shared {
        &self.link.shared
    }

    fn shown(&self) -> &str {
        self.source.shown()
    }

    fn target(&self) -> anyhow::Result<Target> {
        let target = self.source.current()?;
        *self.at.lock().unwrap_or_else(|p| p.into_inner()) = target.addr.clone();
        Ok(target)
    }

    fn kind(&self) -> Kind {
        self.kind
    }

    fn up(&self, writer: Writer) -> bool {
        *self.writer() = Some(writer);
        self.link.send(Incoming::PubSubUp)
    }

    fn push(&self, push: Push) -> bool {
        match push {
            Push::Message {
                channel,
                id,
                payload,
            } => self.link.send(Incoming::Message {
                channel,
                id,
                payload,
            }),
            Push::Subscribed(channel) => self.link.send(Incoming::Subscribed(channel)),
            // Control messages and presence events come by the control link.
            _ => true,
        }
    }

    fn ping(&self) -> bool {
        pubsub_conn::write_or_shut(&mut self.writer(), &redis::cmd("PING"))
    }

    fn down(&self, connected: bool) -> bool {
        if !connected {
            return true;
        }
        if let Some(writer) = self.writer().take() {
            writer.shutdown();
        }
        self.link.send(Incoming::PubSubDown)
    }

    fn label(&self) -> String {
        format!("redis {}", self.source.shown())
    }
}
