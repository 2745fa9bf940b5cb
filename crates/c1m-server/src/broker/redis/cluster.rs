//! Redis Cluster (`redis+cluster://`): the mode's part of the transport, which adds only
//! routing to the shared command side. It keeps the slot map (read with `CLUSTER SLOTS`,
//! patched by `MOVED`, read again when stale) and one command connection per master; a request
//! becomes one command per channel, each sent to the master of its channel's slot. `MOVED`
//! patches the map (and a full re-read follows), `ASK` retries once on the named node after
//! `ASKING`, `TRYAGAIN` and `CLUSTERDOWN` retry shortly.
//!
//! Delivery uses sharded pub/sub, one connection per master with subscribed channels (see
//! `cluster_subs`); control messages and presence events use the control link, plain pub/sub
//! on any one node (`pubsub::ControlLink`).

use super::cluster_script;
use super::cluster_subs::Subs;
use super::commands::{self, evalsha, Merge, Nodes, Plan, Retry, Scripts};
use super::protocol::{Incoming, Request, Which};
use super::pubsub::{self, ControlLink};
use super::pubsub_conn;
use super::shared::{connect_with, log_once, Link};
use super::slots::{self, Redirect, SlotMap};
use super::target::{ClusterTarget, Target};
use crate::broker::IDEMPOTENCY_TTL;
use anyhow::Context;
use redis::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

/// Starts the command thread (pub/sub threads, one per master with subscribed channels, start
/// as needed).
pub fn start(target: ClusterTarget, requests: Receiver<Request>, link: Link) -> anyhow::Result<()> {
    let known: Arc<Mutex<Vec<String>>> = Arc::default();
    ControlLink::start(
        0,
        &target.shown,
        locate(&target, known.clone()),
        link.clone(),
    )?;
    let router = Router {
        known,
        subs: Subs::new(target.clone(), link.clone()),
        target,
        scripts: Scripts::new(true),
        map: SlotMap::default(),
        targets: HashMap::new(),
        cons: HashMap::new(),
        parked: Vec::new(),
        ever_up: false,
    };
    std::thread::Builder::new()
        .name("c1m-redis-cmd".into())
        .spawn(move || commands::command_thread(router, requests, link))
        .context("starting the redis cluster command thread")?;
    Ok(())
}

/// Where the control link connects: the next of the masters last read from the slot map and
/// the seeds, in turn (any node hears every plain PUBLISH of the cluster, so a node that
/// failed is simply passed for the next).
fn locate(target: &ClusterTarget, known: Arc<Mutex<Vec<String>>>) -> pubsub::Locate {
    let target = target.clone();
    let turn = AtomicUsize::new(0);
    Box::new(move || {
        let mut addrs = known.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for seed in &target.seeds {
            if !addrs.contains(&seed.addr) {
                addrs.push(seed.addr.clone());
            }
        }
        let i = turn.fetch_add(1, Ordering::Relaxed) % addrs.len().max(1);
        match addrs.get(i) {
            Some(addr) => target.node(addr),
            None => anyhow::bail!("redis cluster {}: no node known", target.shown),
        }
    })
}

/// The command side: the slot map and one connection per master.
struct Router {
    /// The masters of the last slot map read (the control link's choices).
    known: Arc<Mutex<Vec<String>>>,
    target: ClusterTarget,
    scripts: Scripts,
    map: SlotMap,
    targets: HashMap<String, Target>,
    cons: HashMap<String, redis::Connection>,
    subs: Arc<Subs>,
    /// Subscriptions whose slot has no known master yet (retried after each map read).
    parked: Vec<String>,
    /// The cluster was reachable once (the master was then told pub/sub can be routed).
    ever_up: bool,
}

impl Router {
    /// How to reach `addr` (parsed once per node).
    fn node_target(&mut self, addr: &str) -> redis::RedisResult<Target> {
        if let Some(t) = self.targets.get(addr) {
            return Ok(t.clone());
        }
        let t = self.target.node(addr).map_err(|e| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "cluster node",
                format!("{e:#}"),
            ))
        })?;
        self.targets.insert(addr.to_string(), t.clone());
        Ok(t)
    }

    /// Reads the slot map from any master it knows, else from the seeds. True when read.
    fn refresh(&mut self) -> bool {
        let mut candidates: Vec<String> = self.map.masters.clone();
        candidates.extend(self.target.seeds.iter().map(|s| s.addr.clone()));
        let mut seen = HashSet::new();
        for addr in candidates {
            if !seen.insert(addr.clone()) {
                continue;
            }
            let answer = match self.con(&addr) {
                Ok(con) => redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(con),
                Err(_) => continue,
            };
            match answer {
                Ok(v) => {
                    if let Some(map) = SlotMap::from_cluster_slots(&v, &addr) {
                        // Connections to nodes no longer masters are dropped.
                        self.cons.retain(|a, _| map.masters.contains(a));
                        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = map.masters.clone();
                        self.map = map;
                        self.subs.stale.store(false, Ordering::SeqCst);
                        return true;
                    }
                }
                Err(e) => {
                    tracing::warn!(node = %addr, error = %e, "CLUSTER SLOTS failed");
                    self.cons.remove(&addr);
                }
            }
        }
        log_once(&format!(
            "c1m: redis cluster {}: no node answered CLUSTER SLOTS; retrying",
            self.target.shown
        ));
        false
    }
}

impl Nodes for Router {
    /// Reads the map again when stale, and tells the master when the cluster became reachable
    /// or unreachable (the first time, also that subscriptions can be routed).
    fn check(&mut self, link: &Link) -> Option<bool> {
        let shared = &link.shared;
        if !self.subs.stale.load(Ordering::SeqCst) {
            return Some(shared.command_up.load(Ordering::SeqCst));
        }
        let up = self.refresh();
        let was_up = shared.command_up.swap(up, Ordering::SeqCst);
        if up && !was_up {
            if !link.send(Incoming::CommandUp) {
                return None;
            }
            if !self.ever_up {
                self.ever_up = true;
                if !link.send(Incoming::PubSubUp) {
                    return None;
                }
            }
        } else if !up && was_up && !link.send(Incoming::CommandDown) {
            return None;
        }
        if up {
            for ch in std::mem::take(&mut self.parked) {
                self.subscribe(ch);
            }
        }
        Some(up)
    }

    fn subscribe(&mut self, channel: String) {
        let slot = slots::key_slot(cluster_script::pubsub_name(&channel).as_bytes());
        match self.map.owner(slot) {
            Some(addr) => {
                let addr = addr.to_string();
                self.subs.subscribe(channel, addr)
            }
            None => self.parked.push(channel),
        }
    }

    fn unsubscribe(&mut self, channel: &str) {
        self.subs.unsubscribe(channel);
    }

    fn plan(&mut self, req: Request, plan: &mut Plan) {
        let add = |plan: &mut Plan, part: usize, key: &str, cmd: &redis::Cmd| {
            plan.op(
                part,
                slots::key_slot(key.as_bytes()),
                cmd.get_packed_command(),
            )
        };
        match req {
            Request::Publish {
                tag,
                channel,
                payload,
                max_count,
                max_age_ms,
                key,
            } => {
                let mut keys = vec![
                    cluster_script::stream_key(&channel),
                    cluster_script::meta_key(&channel),
                ];
                if !key.is_empty() {
                    keys.push(cluster_script::idempotency_key(&channel, &key));
                }
                let mut cmd = evalsha(&self.scripts.publish, &keys);
                cmd.arg(cluster_script::pubsub_name(&channel))
                    .arg(payload)
                    .arg(max_count)
                    .arg(max_age_ms)
                    .arg(IDEMPOTENCY_TTL.as_millis() as u64);
                plan.request(tag, Merge::One, 1);
                add(plan, 0, &keys[0], &cmd);
            }
            Request::Replay {
                tag,
                channels,
                after,
                cap,
                max_age_ms,
            } => {
                let after = after.map(|a| a.to_string()).unwrap_or_default();
                plan.request(tag, Merge::Replay, channels.len());
                for (part, ch) in channels.iter().enumerate() {
                    let keys = [cluster_script::stream_key(ch), cluster_script::meta_key(ch)];
                    let mut cmd = evalsha(&self.scripts.replay, &keys);
                    cmd.arg(&after).arg(cap).arg(max_age_ms);
                    add(plan, part, &keys[0], &cmd);
                }
            }
            Request::Script { tag, which, args } => {
                let keys = [cluster_script::presence_key()];
                let mut cmd = evalsha(self.scripts.of(which), &keys);
                cmd.arg(&args);
                match which {
                    // Every presence key carries the presence key's hash tag: one shard.
                    Which::Presence
                    | Which::MembersApply
                    | Which::MembersReap
                    | Which::MembersQuery => {
                        plan.request(tag, Merge::One, 1);
                        add(plan, 0, &keys[0], &cmd);
                    }
                    Which::Info => {
                        // The newest id is on the channel's own shard: a second command.
                        plan.request(tag, Merge::Info, 2);
                        add(plan, 0, &keys[0], &cmd);
                        let meta = cluster_script::meta_key(args.get(2).map_or("", String::as_str));
                        add(plan, 1, &meta, redis::cmd("HGET").arg(&meta).arg("last"));
                    }
                }
            }
            Request::Subscribe(ch) => self.subscribe(ch),
            Request::Unsubscribe(ch) => self.unsubscribe(&ch),
            // Plain PUBLISH on any node reaches every node's control link: sent where slot 0
            // is served.
            Request::Control { tag, message } => {
                let mut cmd = redis::cmd("PUBLISH");
                cmd.arg(super::script::control_name(0)).arg(message);
                plan.request(tag, Merge::One, 1);
                plan.op(0, 0, cmd.get_packed_command());
            }
        }
    }

    fn node_of(&mut self, slot: u16) -> Option<String> {
        self.map.owner(slot).map(str::to_string)
    }

    fn con(&mut self, addr: &str) -> redis::RedisResult<&mut redis::Connection> {
        if !self.cons.contains_key(addr) {
            let target = self.node_target(addr)?;
            match connect_with(&target, |con| self.scripts.load(con)) {
                Ok(con) => {
                    self.cons.insert(addr.to_string(), con);
                }
                Err(e) => {
                    self.subs.link.shared.failed(pubsub_conn::is_refusal(&e));
                    return Err(e);
                }
            }
        }
        self.connected(addr).ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Io, "cluster node connection missing"))
        })
    }

    fn connected(&mut self, addr: &str) -> Option<&mut redis::Connection> {
        self.cons.get_mut(addr)
    }

    fn reload(&mut self, addr: &str) -> redis::RedisResult<()> {
        match self.cons.get_mut(addr) {
            Some(con) => self.scripts.load(con),
            None => Ok(()),
        }
    }

    fn redirect(&mut self, code: &str, detail: &str) -> Retry {
        match (code, slots::redirect(code, detail)) {
            (_, Some(Redirect::Moved(slot, to))) => {
                self.map.moved(slot, &to);
                self.subs.stale.store(true, Ordering::SeqCst);
                Retry::Again
            }
            (_, Some(Redirect::Ask(_, to))) => Retry::Ask(to),
            ("TRYAGAIN" | "CLUSTERDOWN", _) => Retry::Later,
            _ => Retry::No,
        }
    }

    fn unknown_slot(&mut self) {
        self.subs.stale.store(true, Ordering::SeqCst);
    }

    /// The node may have failed over: its connection is remade when next needed, and the map
    /// is read again.
    fn lost(&mut self, addr: &str, error: Option<&redis::RedisError>) {
        if let Some(e) = error {
            tracing::warn!(node = %addr, error = %e, "redis cluster connection lost");
        }
        self.cons.remove(addr);
        self.subs.stale.store(true, Ordering::SeqCst);
    }
}
