//! `disconnect` with reason `node_lost`: with webhooks and a Redis broker (one Redis, one
//! named by Sentinel, or Redis Cluster), every node mirrors its open connections in Redis, so that when a node
//! dies (kill -9 of its master and workers, a lost host) another node says goodbye for each.
//!
//! Data model (one Redis; see below for Redis Cluster): `c1m:wh:conns:{instance}`, a hash `conn id → {"user","channels"}`
//! per master process (`instance` is `NODE|ID-PREFIX`: the node's name and its master's
//! event-id prefix, so a node restarted on the same address is another instance);
//! `c1m:wh:alive:{instance}`, a key with a TTL ([`ALIVE_TTL_MS`]) refreshed every second;
//! `c1m:wh:nodes`, the instances that have a mirror. The master hands its changes to this
//! thread once a second (a connection opened and closed within that second costs Redis
//! nothing); the thread writes them in one pipeline.
//!
//! Every second the thread also looks for instances whose alive key expired. It takes each
//! one's lock (`SET c1m:wh:lock:{instance} NX PX`, so one node handles it), reads its mirror,
//! writes an `unsubscribe` and a `disconnect` (reason `node_lost`) per connection to the
//! webhook spool (on disk, synchronously), and only then deletes the mirror. A node that dies
//! in between leaves the lock to expire and the mirror to the next node; the events' ids are
//! derived from the dead instance and the connection, so a second report is the same event.
//! A dead node's connections are reported within [`LOST_BOUND`] of its death.
//!
//! Under Redis Cluster every key carries the hash tag `{wh}` (`c1m:{wh}:conns:…`, and so on:
//! [`prefix`]), so all of them live on one shard and the scripts run there atomically; the
//! thread connects to that shard's master (asked of the cluster at every reconnection, so a
//! failover or a moved slot costs one failed round).
//!
//! Cost in Redis: one hash field per open connection (its id, about 15 bytes, and its user
//! and channels as JSON), written once when it opens and deleted when it closes, batched.

use super::spool::Spool;
use super::Stats;
use crate::conn_id::ConnId;
use anyhow::Context;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a node's mirror outlives its last heartbeat.
pub const ALIVE_TTL_MS: u64 = 5000;
/// The stated bound: a dead node's connections are in a live node's spool within this (the
/// heartbeat's TTL, the next one-second round, and a second for Redis and the disk).
#[allow(dead_code)] // the bound documented and tested; the code's parts are the TTL and tick
pub const LOST_BOUND: Duration = Duration::from_secs(8);
/// A node that took a dead node's lock and died before deleting its mirror: another node
/// takes over after this.
const LOCK_TTL_MS: u64 = 30_000;
const TICK: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Fields per HSET / HDEL command.
const CHUNK: usize = 1000;
/// Batches between the master and the thread.
const QUEUE: usize = 256;
/// Spool segment numbers of this thread's writer (the delivery thread's count from 1; both
/// write to the same directory under the same pid).
const SEQ_BASE: u64 = 50_000_000;

/// The dead instances this node now owns (their alive key gone, their lock taken).
const CLAIM: &str = r#"
local out = {}
for _, inst in ipairs(redis.call('SMEMBERS', '@nodes')) do
  if inst ~= ARGV[1] and redis.call('EXISTS', '@alive:' .. inst) == 0 then
    if redis.call('SET', '@lock:' .. inst, ARGV[1], 'NX', 'PX', ARGV[2]) then
      table.insert(out, inst)
    end
  end
end
return out
"#;

/// A dead instance's events are spooled: its mirror goes, unless it came back meanwhile.
const RELEASE: &str = r#"
if redis.call('EXISTS', '@alive:' .. ARGV[1]) == 0 then
  redis.call('DEL', '@conns:' .. ARGV[1])
  redis.call('SREM', '@nodes', ARGV[1])
end
redis.call('DEL', '@lock:' .. ARGV[1])
return 1
"#;

/// The mirror's key prefix (`@` in the scripts): with the hash tag under Redis Cluster.
pub fn prefix(cluster: bool) -> &'static str {
    if cluster {
        "c1m:{wh}:"
    } else {
        "c1m:wh:"
    }
}

enum Msg {
    /// Connection id → its mirror value (None: closed).
    Batch(Vec<(String, Option<String>)>),
    Stop,
}

/// The master's side: changes collected between ticks.
pub struct Mirror {
    tx: Option<SyncSender<Msg>>,
    thread: Option<JoinHandle<()>>,
    pending: HashMap<String, Option<String>>,
    full: crate::log::Limited,
}

/// How the thread reaches Redis (asked again at every reconnection: Sentinel may name
/// another master).
type Connect = Box<dyn Fn() -> anyhow::Result<redis::Client> + Send>;

impl Mirror {
    /// Starts the mirror thread when webhooks run beside a Redis broker it supports.
    pub fn start(
        cfg: &crate::config::Config,
        node: &str,
        id_prefix: &str,
        spool_dir: PathBuf,
        stats: Arc<Stats>,
    ) -> anyhow::Result<Option<Mirror>> {
        use crate::broker::redis::RedisTarget;
        let Some(url) = &cfg.broker else {
            return Ok(None);
        };
        let (connect, keys): (Connect, _) = match RedisTarget::parse(url, cfg.broker_ca.as_deref())?
        {
            RedisTarget::Single(t) => {
                let client = t.client.clone();
                (Box::new(move || Ok(client.clone())), prefix(false))
            }
            RedisTarget::Sentinel(s) => (Box::new(move || Ok(s.resolve()?.client)), prefix(false)),
            RedisTarget::Cluster(c) => {
                let shard = format!("{}nodes", prefix(true));
                (
                    Box::new(move || Ok(c.owner_of(shard.as_bytes())?.client)),
                    prefix(true),
                )
            }
        };
        let instance = format!("{node}|{id_prefix}");
        let spool = Spool::open_as(&spool_dir, SEQ_BASE)?;
        let (tx, rx) = sync_channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("c1m-webhook-mirror".into())
            .spawn(move || run(rx, connect, keys, instance, spool, stats))
            .context("starting the webhook mirror thread")?;
        Ok(Some(Mirror {
            tx: Some(tx),
            thread: Some(thread),
            pending: HashMap::new(),
            full: crate::log::Limited::every(Duration::from_secs(10)),
        }))
    }

    pub fn opened(&mut self, id: ConnId, user: Option<&str>, channels: &[String]) {
        let value = serde_json::json!({ "user": user, "channels": channels }).to_string();
        self.pending.insert(id.to_string(), Some(value));
    }

    pub fn closed(&mut self, id: ConnId) {
        let key = id.to_string();
        // Opened since the last flush: Redis never heard of it.
        if let Some(Some(_)) = self.pending.get(&key) {
            self.pending.remove(&key);
        } else {
            self.pending.insert(key, None);
        }
    }

    /// Hands this second's changes to the thread (kept for the next tick if it is behind).
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let Some(tx) = &self.tx else {
            return;
        };
        let batch: Vec<_> = self.pending.drain().collect();
        match tx.try_send(Msg::Batch(batch)) {
            Ok(()) => {}
            Err(TrySendError::Full(Msg::Batch(batch))) => {
                if let Some(held_back) = self.full.allow(Instant::now()) {
                    tracing::warn!(
                        held_back,
                        "webhooks: the mirror thread is behind (Redis slow?); changes wait"
                    );
                }
                self.pending.extend(batch);
            }
            Err(_) => {}
        }
    }

    /// At the master's exit (after every connection was reported closed): the last changes
    /// go, then this instance's mirror and heartbeat are deleted.
    pub fn finish(&mut self) {
        self.flush();
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Msg::Stop);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread's state: what Redis should hold for this node, and what changed since the
/// last write.
struct Thread {
    connect: Connect,
    /// [`prefix`].
    keys: &'static str,
    instance: String,
    spool: Spool,
    stats: Arc<Stats>,
    mirror: HashMap<String, String>,
    added: HashSet<String>,
    removed: HashSet<String>,
    con: Option<redis::Connection>,
    /// Write the whole mirror next (after a reconnection or a lapsed heartbeat).
    resync: bool,
    claim: redis::Script,
    release: redis::Script,
}

fn run(
    rx: Receiver<Msg>,
    connect: Connect,
    keys: &'static str,
    instance: String,
    spool: Spool,
    stats: Arc<Stats>,
) {
    let mut t = Thread {
        connect,
        keys,
        instance,
        spool,
        stats,
        mirror: HashMap::new(),
        added: HashSet::new(),
        removed: HashSet::new(),
        con: None,
        resync: true,
        claim: redis::Script::new(&CLAIM.replace('@', keys)),
        release: redis::Script::new(&RELEASE.replace('@', keys)),
    };
    let mut stopping = false;
    let mut next_tick = Instant::now();
    let mut errors = crate::log::Limited::every(Duration::from_secs(10));
    loop {
        if !stopping {
            match rx.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
                Ok(Msg::Batch(batch)) => {
                    t.take(batch);
                    continue;
                }
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => stopping = true,
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        next_tick = Instant::now() + TICK;
        if let Err(e) = t.round(stopping) {
            t.con = None;
            if let Some(held_back) = errors.allow(Instant::now()) {
                tracing::warn!(error = %format!("{e:#}"), held_back, "webhooks: the connection mirror in Redis failed; retrying every second");
            }
        }
        if stopping {
            return;
        }
    }
}

impl Thread {
    fn take(&mut self, batch: Vec<(String, Option<String>)>) {
        for (conn, value) in batch {
            match value {
                Some(v) => {
                    self.removed.remove(&conn);
                    self.added.insert(conn.clone());
                    self.mirror.insert(conn, v);
                }
                None => {
                    self.added.remove(&conn);
                    self.mirror.remove(&conn);
                    self.removed.insert(conn);
                }
            }
        }
    }

    /// One second's work: the heartbeat and the changes, then the dead nodes (or, when
    /// `stopping`, this node's mirror deleted).
    fn round(&mut self, stopping: bool) -> anyhow::Result<()> {
        if self.con.is_none() {
            let client = (self.connect)()?;
            let c = client
                .get_connection_with_timeout(IO_TIMEOUT)
                .context("connecting to Redis")?;
            c.set_read_timeout(Some(IO_TIMEOUT))?;
            c.set_write_timeout(Some(IO_TIMEOUT))?;
            self.con = Some(c);
            self.resync = true;
        }
        let instance = &self.instance;
        let keys = self.keys;
        let c = self.con.as_mut().expect("connected above");
        if stopping {
            redis::pipe()
                .del(format!("{keys}conns:{instance}"))
                .del(format!("{keys}alive:{instance}"))
                .srem(format!("{keys}nodes"), instance)
                .query::<()>(c)
                .context("deleting this node's mirror")?;
            return Ok(());
        }
        // The heartbeat, and whether it had lapsed (another node may have reported and
        // deleted this mirror: it is written whole again).
        let before: Option<String> = redis::cmd("SET")
            .arg(format!("{keys}alive:{instance}"))
            .arg("1")
            .arg("PX")
            .arg(ALIVE_TTL_MS)
            .arg("GET")
            .query(c)
            .context("refreshing the heartbeat")?;
        if before.is_none() {
            self.resync = true;
        }
        write(
            c,
            keys,
            instance,
            &self.mirror,
            &self.added,
            &self.removed,
            self.resync,
        )?;
        self.resync = false;
        self.added.clear();
        self.removed.clear();
        let dead: Vec<String> = self
            .claim
            .arg(instance)
            .arg(LOCK_TTL_MS)
            .invoke(c)
            .context("looking for dead nodes")?;
        for inst in dead {
            let conns: HashMap<String, String> = redis::cmd("HGETALL")
                .arg(format!("{keys}conns:{inst}"))
                .query(c)
                .context("reading a dead node's mirror")?;
            report_lost(&inst, instance, conns, &mut self.spool, &self.stats)?;
            self.release
                .arg(&inst)
                .invoke::<()>(c)
                .context("releasing a dead node")?;
        }
        Ok(())
    }
}

/// This node's changes (or, after a lapse or a reconnection, its whole mirror).
fn write(
    c: &mut redis::Connection,
    keys: &str,
    instance: &str,
    mirror: &HashMap<String, String>,
    added: &HashSet<String>,
    removed: &HashSet<String>,
    whole: bool,
) -> anyhow::Result<()> {
    let key = format!("{keys}conns:{instance}");
    let mut pipe = redis::pipe();
    pipe.sadd(format!("{keys}nodes"), instance).ignore();
    if whole {
        pipe.del(&key).ignore();
        let all: Vec<(&String, &String)> = mirror.iter().collect();
        for chunk in all.chunks(CHUNK) {
            pipe.hset_multiple(&key, chunk).ignore();
        }
    } else {
        let adds: Vec<(&String, &String)> = added
            .iter()
            .filter_map(|k| mirror.get(k).map(|v| (k, v)))
            .collect();
        for chunk in adds.chunks(CHUNK) {
            pipe.hset_multiple(&key, chunk).ignore();
        }
        let dels: Vec<&String> = removed.iter().collect();
        for chunk in dels.chunks(CHUNK) {
            pipe.hdel(&key, chunk).ignore();
        }
    }
    pipe.query::<()>(c).context("writing the connection mirror")
}

/// A dead instance's connections, as `unsubscribe` and `disconnect` (reason `node_lost`)
/// events written to the spool before its mirror may go.
fn report_lost(
    dead: &str,
    reporter: &str,
    conns: HashMap<String, String>,
    spool: &mut Spool,
    stats: &Stats,
) -> anyhow::Result<()> {
    let (node, prefix) = dead.rsplit_once('|').unwrap_or((dead, dead));
    let reporter = reporter.rsplit_once('|').map_or(reporter, |(n, _)| n);
    tracing::warn!(
        node,
        connections = conns.len(),
        "webhooks: a node is gone; disconnect (node_lost) for each of its connections"
    );
    let time_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut conns: Vec<(String, String)> = conns.into_iter().collect();
    conns.sort_unstable();
    let mut events = Vec::with_capacity(2 * conns.len());
    for (conn, value) in conns {
        let held: serde_json::Value = serde_json::from_str(&value).unwrap_or_default();
        for kind in ["unsubscribe", "disconnect"] {
            let mut e = serde_json::json!({
                "id": format!("{prefix}-lost-{conn}-{}", &kind[..1]),
                "type": kind,
                "time_ms": time_ms,
                "node": node,
                "reported_by": reporter,
                "conn": conn,
                "user": held["user"],
                "channels": held["channels"],
            });
            if kind == "disconnect" {
                e["reason"] = "node_lost".into();
            }
            events.push(e.to_string());
        }
    }
    for chunk in events.chunks(super::BATCH_EVENTS) {
        spool
            .append(chunk)
            .context("writing node_lost events to the spool")?;
        stats
            .events
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::redis::slots::key_slot;

    #[test]
    fn under_redis_cluster_every_mirror_key_is_on_one_slot() {
        let p = prefix(true);
        let slot = key_slot(format!("{p}nodes").as_bytes());
        for key in ["conns:host:1|ab", "alive:host:1|ab", "lock:other:2|cd"] {
            assert_eq!(key_slot(format!("{p}{key}").as_bytes()), slot, "{key}");
        }
        for script in [CLAIM, RELEASE] {
            let s = script.replace('@', p);
            assert!(!s.contains('@') && s.contains("'c1m:{wh}:"), "{s}");
        }
    }
}
