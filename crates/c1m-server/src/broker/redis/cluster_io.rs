//! Redis Cluster connections (`redis+cluster://`): the same requests and answers as `io` (the
//! master's state machine is shared), routed by hash slot. The command thread keeps the slot
//! map and one command connection per master; each batch of requests becomes one pipeline per
//! master, sent to all before any answer is read. Answers that redirect are retried: `MOVED`
//! patches the map (and a full re-read follows), `ASK` retries once on the named node after
//! `ASKING`, `NOSCRIPT` loads the scripts and retries, `TRYAGAIN` (keys half-migrated) retries
//! shortly. A request that still fails, or whose connection broke, is answered `None` (503), as
//! in one Redis: it may have been stored, and an idempotency key makes its retry exact.
//!
//! Delivery uses sharded pub/sub: one pub/sub connection per master that holds subscribed
//! channels (`Subs`, a thread each, made when first needed). A channel whose subscription ends
//! (`SUNSUBSCRIBE` pushed when its slot moved, `MOVED` to `SSUBSCRIBE`, the connection lost or
//! silent) is reported `Incoming::Lost`: the state machine subscribes it again and catches it
//! up from history after the last id it forwarded, so a resharding costs a catch-up, never a
//! loss or a repeat.

use super::io::{Incoming, Request, Shared, Which};
use super::pubsub_conn::{self, Next, Writer};
use super::script;
use super::slots::{self, Redirect, SlotMap};
use super::target::{ClusterTarget, Target};
use super::{cluster_script, io};
use crate::broker::IDEMPOTENCY_TTL;
use redis::Value;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Rounds of redirection (MOVED, ASK, NOSCRIPT, TRYAGAIN) a request gets before it fails.
const ROUNDS: usize = 5;
/// Wait before retrying after TRYAGAIN (a slot's keys are half-way through a migration).
const TRY_AGAIN_WAIT: Duration = Duration::from_millis(25);
/// How often the command thread looks at the map when idle (re-read when stale).
const IDLE: Duration = Duration::from_secs(1);

/// The scripts every master gets on each new connection (so pipelines can use EVALSHA).
struct Scripts {
    publish: redis::Script,
    replay: redis::Script,
    presence: redis::Script,
    info: redis::Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            publish: redis::Script::new(&cluster_script::publish_script()),
            replay: redis::Script::new(&cluster_script::replay_script()),
            presence: redis::Script::new(&script::presence_script(true)),
            info: redis::Script::new(&script::info_script(true)),
        }
    }

    fn load(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        for s in [&self.publish, &self.replay, &self.presence, &self.info] {
            s.load(con)?;
        }
        Ok(())
    }
}

/// One command for one slot, part of a request.
struct Op {
    /// Index of its request in the batch, and its part of that request.
    req: usize,
    part: usize,
    slot: u16,
    packed: Vec<u8>,
    /// `ASK` named this node: send `ASKING` first, there.
    asking: Option<String>,
}

/// What a request's parts combine to.
enum Merge {
    /// The one part's answer as it is.
    One,
    /// Replay parts (one per channel) into one replay answer.
    Replay,
    /// Presence part, then the channel's newest id.
    Info,
}

struct Pending {
    tag: u64,
    merge: Merge,
    parts: Vec<Option<Value>>,
    failed: bool,
}

/// The command side: the slot map and one connection per master.
struct Router {
    target: ClusterTarget,
    scripts: Scripts,
    map: SlotMap,
    targets: HashMap<String, Target>,
    cons: HashMap<String, redis::Connection>,
    subs: Arc<Subs>,
    /// Subscriptions whose slot has no known master yet (retried after each map read).
    parked: Vec<String>,
}

/// Runs the cluster's command side until the master goes away.
pub fn command_thread(
    target: ClusterTarget,
    requests: Receiver<Request>,
    tx: SyncSender<Incoming>,
    shared: Arc<Shared>,
) {
    let subs = Arc::new(Subs {
        state: Mutex::new(SubsState::default()),
        target: target.clone(),
        tx: tx.clone(),
        shared: shared.clone(),
        stale: AtomicBool::new(true),
    });
    let mut router = Router {
        target,
        scripts: Scripts::new(),
        map: SlotMap::default(),
        targets: HashMap::new(),
        cons: HashMap::new(),
        subs,
        parked: Vec::new(),
    };
    let mut ever_up = false;
    loop {
        if !router.check_map(&tx, &shared, &mut ever_up) {
            return;
        }
        let first = match requests.recv_timeout(IDLE) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut batch = vec![first];
        while batch.len() < io::BATCH {
            match requests.try_recv() {
                Ok(r) => batch.push(r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        // A pub/sub thread may have found the map stale while this one waited (a channel
        // lost on a moved slot is about to be subscribed again: it must go where it is now).
        if !router.check_map(&tx, &shared, &mut ever_up) {
            return;
        }
        if shared.command_up.load(Ordering::SeqCst) {
            router.serve(batch, &tx, &shared);
        } else {
            for req in batch {
                match req {
                    Request::Subscribe(ch) => router.parked.push(ch),
                    Request::Unsubscribe(ch) => router.subs.unsubscribe(&ch),
                    req => {
                        if let Some(tag) = req.tag() {
                            shared.send(&tx, Incoming::Answer { tag, value: None });
                        }
                    }
                }
            }
        }
    }
}

/// A Redis error's code and detail, whether it came as a value or as an error.
fn server_error(answer: &redis::RedisResult<Value>) -> Option<(String, String)> {
    match answer {
        Ok(Value::ServerError(e)) => Some((
            e.code().to_string(),
            e.details().unwrap_or_default().to_string(),
        )),
        Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => Some((
            e.code().unwrap_or_default().to_string(),
            e.detail().unwrap_or_default().to_string(),
        )),
        _ => None,
    }
}

/// `EVALSHA` of `script` with `keys` (its arguments follow).
fn evalsha(script: &redis::Script, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(k);
    }
    cmd
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

    /// The command connection to `addr`, made (and its scripts loaded) when missing.
    fn con(&mut self, addr: &str) -> redis::RedisResult<&mut redis::Connection> {
        if !self.cons.contains_key(addr) {
            let target = self.node_target(addr)?;
            match io::connect_with(&target, |con| self.scripts.load(con)) {
                Ok(con) => {
                    self.cons.insert(addr.to_string(), con);
                }
                Err(e) => {
                    self.subs.shared.failed(pubsub_conn::is_refusal(&e));
                    return Err(e);
                }
            }
        }
        self.cons.get_mut(addr).ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Io, "cluster node connection missing"))
        })
    }

    /// Reads the map again when stale, and tells the master when the cluster became reachable
    /// or unreachable (the first time, also that subscriptions can be routed). False when the
    /// master is gone.
    fn check_map(
        &mut self,
        tx: &SyncSender<Incoming>,
        shared: &Shared,
        ever_up: &mut bool,
    ) -> bool {
        if !self.subs.stale.load(Ordering::SeqCst) {
            return true;
        }
        let up = self.refresh();
        let was_up = shared.command_up.swap(up, Ordering::SeqCst);
        if up && !was_up {
            if !shared.send(tx, Incoming::CommandUp) {
                return false;
            }
            if !*ever_up {
                *ever_up = true;
                if !shared.send(tx, Incoming::PubSubUp) {
                    return false;
                }
            }
        } else if !up && was_up && !shared.send(tx, Incoming::CommandDown) {
            return false;
        }
        if up {
            for ch in std::mem::take(&mut self.parked) {
                self.subscribe(ch);
            }
        } else {
            // Not hammered: the next look is after IDLE or the next request.
            std::thread::sleep(io::BACKOFF_MIN);
        }
        true
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
        io::log_once(&format!(
            "c1m: redis cluster {}: no node answered CLUSTER SLOTS; retrying",
            self.target.shown
        ));
        false
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

    /// Turns a batch into ops, runs them with redirections, and answers each request.
    fn serve(&mut self, batch: Vec<Request>, tx: &SyncSender<Incoming>, shared: &Shared) {
        let mut ops = Vec::new();
        let mut pending: Vec<Pending> = Vec::new();
        let ttl = IDEMPOTENCY_TTL.as_millis() as u64;
        for req in batch {
            let i = pending.len();
            let mut add = |part: usize, key: &str, packed: Vec<u8>| {
                ops.push(Op {
                    req: i,
                    part,
                    slot: slots::key_slot(key.as_bytes()),
                    packed,
                    asking: None,
                })
            };
            let (tag, merge, parts) = match req {
                Request::Subscribe(ch) => {
                    self.subscribe(ch);
                    continue;
                }
                Request::Unsubscribe(ch) => {
                    self.subs.unsubscribe(&ch);
                    continue;
                }
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
                        .arg(ttl);
                    add(0, &keys[0], cmd.get_packed_command());
                    (tag, Merge::One, 1)
                }
                Request::Replay {
                    tag,
                    channels,
                    after,
                    cap,
                    max_age_ms,
                } => {
                    let after = after.map(|a| a.to_string()).unwrap_or_default();
                    for (part, ch) in channels.iter().enumerate() {
                        let keys = [cluster_script::stream_key(ch), cluster_script::meta_key(ch)];
                        let mut cmd = evalsha(&self.scripts.replay, &keys);
                        cmd.arg(&after).arg(cap).arg(max_age_ms);
                        add(part, &keys[0], cmd.get_packed_command());
                    }
                    (tag, Merge::Replay, channels.len())
                }
                Request::Script { tag, which, args } => {
                    let keys = [cluster_script::presence_key()];
                    match which {
                        Which::Presence => {
                            let mut cmd = evalsha(&self.scripts.presence, &keys);
                            cmd.arg(&args);
                            add(0, &keys[0], cmd.get_packed_command());
                            (tag, Merge::One, 1)
                        }
                        Which::Info => {
                            let mut cmd = evalsha(&self.scripts.info, &keys);
                            cmd.arg(&args);
                            add(0, &keys[0], cmd.get_packed_command());
                            let meta =
                                cluster_script::meta_key(args.get(2).map_or("", String::as_str));
                            let hget = redis::cmd("HGET")
                                .arg(&meta)
                                .arg("last")
                                .get_packed_command();
                            add(1, &meta, hget);
                            (tag, Merge::Info, 2)
                        }
                    }
                }
            };
            pending.push(Pending {
                tag,
                merge,
                parts: vec![None; parts],
                failed: parts == 0,
            });
        }
        self.run(ops, &mut pending);
        for p in pending {
            let value = if p.failed {
                None
            } else {
                merge(p.merge, p.parts)
            };
            if !shared.send(tx, Incoming::Answer { tag: p.tag, value }) {
                return;
            }
        }
    }

    /// Runs ops to completion or failure, writing answers into `pending`.
    fn run(&mut self, mut ops: Vec<Op>, pending: &mut [Pending]) {
        for round in 0..ROUNDS {
            if ops.is_empty() {
                return;
            }
            let last_round = round + 1 == ROUNDS;
            let mut by_node: Vec<(String, Vec<Op>)> = Vec::new();
            for op in ops.drain(..) {
                let addr = op
                    .asking
                    .clone()
                    .or_else(|| self.map.owner(op.slot).map(str::to_string));
                let Some(addr) = addr else {
                    self.subs.stale.store(true, Ordering::SeqCst);
                    pending[op.req].failed = true;
                    continue;
                };
                match by_node.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, list)) => list.push(op),
                    None => by_node.push((addr, vec![op])),
                }
            }
            // Every pipeline goes out before any answer is read: the masters work at once.
            let mut sent = Vec::new();
            for (addr, list) in by_node {
                let mut packed = Vec::new();
                for op in &list {
                    if op.asking.is_some() {
                        packed.extend(redis::cmd("ASKING").get_packed_command());
                    }
                    packed.extend_from_slice(&op.packed);
                }
                let ok = match self.con(&addr) {
                    Ok(con) => con.send_packed_command(&packed).is_ok(),
                    Err(_) => false,
                };
                if ok {
                    sent.push((addr, list));
                } else {
                    self.lost_node(&addr);
                    for op in list {
                        pending[op.req].failed = true;
                    }
                }
            }
            let mut wait = false;
            for (addr, list) in sent {
                let mut reload = false;
                let mut broken = false;
                for op in list {
                    if broken {
                        pending[op.req].failed = true;
                        continue;
                    }
                    let Some(con) = self.cons.get_mut(&addr) else {
                        pending[op.req].failed = true;
                        broken = true;
                        continue;
                    };
                    if op.asking.is_some() {
                        let _ = con.recv_response(); // ASKING's OK
                    }
                    let answer = con.recv_response();
                    match (server_error(&answer), answer) {
                        (Some((code, detail)), _) => {
                            let retry = match (code.as_str(), slots::redirect(&code, &detail)) {
                                (_, Some(Redirect::Moved(slot, to))) => {
                                    self.map.moved(slot, &to);
                                    self.subs.stale.store(true, Ordering::SeqCst);
                                    true
                                }
                                (_, Some(Redirect::Ask(_, to))) => {
                                    ops.push(Op {
                                        asking: Some(to),
                                        ..op
                                    });
                                    continue;
                                }
                                ("NOSCRIPT", _) => {
                                    reload = true;
                                    true
                                }
                                ("TRYAGAIN" | "CLUSTERDOWN", _) => {
                                    wait = true;
                                    true
                                }
                                _ => {
                                    self.subs.shared.refused(&format!("{code} {detail}"));
                                    false
                                }
                            };
                            if retry && !last_round {
                                ops.push(Op { asking: None, ..op });
                            } else {
                                pending[op.req].failed = true;
                            }
                        }
                        (None, Ok(value)) => pending[op.req].parts[op.part] = Some(value),
                        (None, Err(e)) => {
                            tracing::warn!(node = %addr, error = %e, "redis cluster connection lost");
                            pending[op.req].failed = true;
                            broken = true;
                        }
                    }
                }
                if broken {
                    self.lost_node(&addr);
                } else if reload {
                    if let Some(con) = self.cons.get_mut(&addr) {
                        if self.scripts.load(con).is_err() {
                            self.lost_node(&addr);
                        }
                    }
                }
            }
            if wait {
                std::thread::sleep(TRY_AGAIN_WAIT);
            }
        }
        for op in ops {
            pending[op.req].failed = true;
        }
    }

    /// A connection broke: it is remade when next needed, and the map is read again (the node
    /// may have failed over).
    fn lost_node(&mut self, addr: &str) {
        self.cons.remove(addr);
        self.subs.stale.store(true, Ordering::SeqCst);
    }
}

/// Combines a request's part answers into the answer `io` would give for it.
fn merge(how: Merge, parts: Vec<Option<Value>>) -> Option<Value> {
    let mut parts = parts.into_iter().collect::<Option<Vec<Value>>>()?;
    match how {
        Merge::One => parts.pop(),
        Merge::Replay => {
            // Each part: {newest, forgotten-through, start, entries}; together {max newest,
            // then per channel forgotten-through, start, entries}.
            let mut current = 0;
            let mut out = vec![Value::Int(0)];
            for part in parts {
                let Value::Array(items) = part else {
                    return None;
                };
                let [newest, forgot, start, entries]: [Value; 4] = items.try_into().ok()?;
                current = current.max(script::as_u64(&newest)?);
                out.push(forgot);
                out.push(start);
                out.push(entries);
            }
            out[0] = Value::Int(i64::try_from(current).ok()?);
            Some(Value::Array(out))
        }
        Merge::Info => {
            let last = parts.pop()?;
            let Value::Array(mut info) = parts.pop()? else {
                return None;
            };
            if info.len() != 3 {
                return None;
            }
            info[2] = match last {
                Value::Nil => Value::BulkString(Vec::new()),
                v => v,
            };
            Some(Value::Array(info))
        }
    }
}

/// The pub/sub side: which master each subscribed channel is on, and those masters'
/// connections (write halves; each read half has its thread).
pub struct Subs {
    state: Mutex<SubsState>,
    target: ClusterTarget,
    tx: SyncSender<Incoming>,
    shared: Arc<Shared>,
    /// The slot map is out of date (a MOVED, a lost node): the command thread reads it again.
    stale: AtomicBool,
}

#[derive(Default)]
struct SubsState {
    nodes: HashMap<String, NodeSubs>,
    /// Channel → the master its SSUBSCRIBE went to.
    at: HashMap<String, String>,
}

#[derive(Default)]
struct NodeSubs {
    writer: Option<Writer>,
    /// Channels subscribed (or being subscribed) on this master.
    channels: HashSet<String>,
    /// SSUBSCRIBEs to send once the connection is up (one per request: each is confirmed).
    queued: Vec<String>,
    /// A thread owns this master's connection.
    running: bool,
}

impl Subs {
    fn lock(&self) -> MutexGuard<'_, SubsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn subscribe(self: &Arc<Self>, channel: String, addr: String) {
        let mut st = self.lock();
        if let Some(old) = st.at.insert(channel.clone(), addr.clone()) {
            if old != addr {
                if let Some(node) = st.nodes.get_mut(&old) {
                    node.channels.remove(&channel);
                }
            }
        }
        let node = st.nodes.entry(addr.clone()).or_default();
        node.channels.insert(channel.clone());
        let cmd = redis::cmd("SSUBSCRIBE")
            .arg(cluster_script::pubsub_name(&channel))
            .clone();
        if !pubsub_conn::write_or_shut(&mut node.writer, &cmd) {
            node.queued.push(channel);
        }
        if !node.running {
            node.running = true;
            let (me, node_addr) = (self.clone(), addr.clone());
            let spawned = std::thread::Builder::new()
                .name("c1m-redis-ssub".into())
                .spawn(move || me.node_thread(node_addr));
            if spawned.is_err() {
                // The node's channels are reported lost: subscribed again (and this retried).
                if let Some(node) = st.nodes.get_mut(&addr) {
                    node.running = false;
                }
                let all: Vec<String> = st
                    .nodes
                    .get(&addr)
                    .map(|n| n.channels.iter().cloned().collect())
                    .unwrap_or_default();
                let lost = self.take(&mut st, &addr, all);
                drop(st);
                self.report_lost(lost);
            }
        }
    }

    fn unsubscribe(&self, channel: &str) {
        let mut st = self.lock();
        let Some(addr) = st.at.remove(channel) else {
            return;
        };
        if let Some(node) = st.nodes.get_mut(&addr) {
            node.channels.remove(channel);
            node.queued.retain(|c| c != channel);
            let cmd = redis::cmd("SUNSUBSCRIBE")
                .arg(cluster_script::pubsub_name(channel))
                .clone();
            pubsub_conn::write_or_shut(&mut node.writer, &cmd);
        }
    }

    /// Takes `channels` off master `addr` (where they still are) and returns them.
    fn take(&self, st: &mut SubsState, addr: &str, channels: Vec<String>) -> Vec<String> {
        let mut out = Vec::new();
        for ch in channels {
            if st.at.get(&ch).is_some_and(|a| a == addr) {
                st.at.remove(&ch);
                if let Some(node) = st.nodes.get_mut(addr) {
                    node.channels.remove(&ch);
                    node.queued.retain(|c| *c != ch);
                }
                out.push(ch);
            }
        }
        out
    }

    fn report_lost(&self, channels: impl IntoIterator<Item = String>) -> bool {
        for ch in channels {
            if !self.shared.send(&self.tx, Incoming::Lost(ch)) {
                return false;
            }
        }
        true
    }

    /// Every channel on master `addr` lost its subscription (connection down or dead).
    fn lose_all(&self, addr: &str) -> bool {
        let lost = {
            let mut st = self.lock();
            let all: Vec<String> = st
                .nodes
                .get(addr)
                .map(|n| n.channels.iter().chain(&n.queued).cloned().collect())
                .unwrap_or_default();
            if let Some(node) = st.nodes.get_mut(addr) {
                if let Some(w) = node.writer.take() {
                    w.shutdown();
                }
            }
            self.take(&mut st, addr, all)
        };
        self.stale.store(true, Ordering::SeqCst);
        self.report_lost(lost)
    }

    /// Holds master `addr`'s pub/sub connection while it has channels; reconnects with
    /// backoff.
    fn node_thread(self: Arc<Subs>, addr: String) {
        let mut delay = io::BACKOFF_MIN;
        let target = self.target.node(&addr);
        loop {
            let connected = target
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{e:#}"))
                .and_then(|t| pubsub_conn::connect(t, io::CONNECT_TIMEOUT));
            match connected {
                Ok((mut conn, writer)) => {
                    delay = io::BACKOFF_MIN;
                    {
                        let mut st = self.lock();
                        let node = st.nodes.entry(addr.clone()).or_default();
                        node.writer = Some(writer);
                        for ch in std::mem::take(&mut node.queued) {
                            let cmd = redis::cmd("SSUBSCRIBE")
                                .arg(cluster_script::pubsub_name(&ch))
                                .clone();
                            pubsub_conn::write_or_shut(&mut node.writer, &cmd);
                        }
                    }
                    let gone = self.read(&mut conn, &addr);
                    if gone || !self.lose_all(&addr) {
                        return;
                    }
                }
                Err(e) => {
                    self.shared.failed(pubsub_conn::is_refused(&e));
                    io::log_once(&format!(
                        "c1m: redis cluster node {addr} (pub/sub): {e:#}; retrying"
                    ));
                    if !self.lose_all(&addr) {
                        return;
                    }
                }
            }
            std::thread::sleep(delay);
            delay = io::backoff(delay);
            let mut st = self.lock();
            let node = st.nodes.entry(addr.clone()).or_default();
            if node.channels.is_empty() && node.queued.is_empty() {
                node.running = false;
                return;
            }
        }
    }

    /// Reads one master's pushes until the connection ends or goes silent. True when the
    /// broker's master is gone.
    fn read(&self, conn: &mut pubsub_conn::Conn, addr: &str) -> bool {
        let mut ping = || {
            let mut st = self.lock();
            let Some(node) = st.nodes.get_mut(addr) else {
                return false;
            };
            pubsub_conn::write_or_shut(&mut node.writer, &redis::cmd("PING"))
        };
        loop {
            let value = match conn.next_watched(&mut ping) {
                Next::Value(v) => v,
                Next::Dead => {
                    self.shared.dead_link(addr);
                    return false;
                }
                Next::Closed => return false,
            };
            let msg = match value {
                Value::Array(parts) => match parts.as_slice() {
                    [Value::BulkString(kind), Value::BulkString(name), Value::BulkString(data)]
                        if kind == b"smessage" =>
                    {
                        let (Some(channel), Some((id, payload))) = (
                            cluster_script::channel_of(name),
                            script::split_message(data),
                        ) else {
                            continue;
                        };
                        Incoming::Message {
                            channel: channel.to_string(),
                            id,
                            payload: payload.to_vec(),
                        }
                    }
                    [Value::BulkString(kind), Value::BulkString(name), _]
                        if kind == b"ssubscribe" =>
                    {
                        let Some(channel) = cluster_script::channel_of(name) else {
                            continue;
                        };
                        Incoming::Subscribed(channel.to_string())
                    }
                    [Value::BulkString(kind), Value::BulkString(name), _]
                        if kind == b"sunsubscribe" =>
                    {
                        // Ours (a leave) when the channel is no longer recorded here; else
                        // Redis ended it: its slot moved.
                        let Some(channel) = cluster_script::channel_of(name) else {
                            continue;
                        };
                        let lost = {
                            let mut st = self.lock();
                            self.take(&mut st, addr, vec![channel.to_string()])
                        };
                        if !lost.is_empty() {
                            self.stale.store(true, Ordering::SeqCst);
                        }
                        if !self.report_lost(lost) {
                            return true;
                        }
                        continue;
                    }
                    _ => continue,
                },
                Value::ServerError(e) => {
                    // MOVED to an SSUBSCRIBE: the map was stale; every channel of that slot
                    // waiting here is subscribed again where the slot is now.
                    let Some(Redirect::Moved(slot, _) | Redirect::Ask(slot, _)) =
                        slots::redirect(e.code(), e.details().unwrap_or_default())
                    else {
                        tracing::warn!(node = %addr, error = ?e, "redis cluster refused a subscription");
                        continue;
                    };
                    self.stale.store(true, Ordering::SeqCst);
                    let lost = {
                        let mut st = self.lock();
                        let in_slot: Vec<String> = st
                            .nodes
                            .get(addr)
                            .map(|n| {
                                n.channels
                                    .iter()
                                    .filter(|c| {
                                        slots::key_slot(cluster_script::pubsub_name(c).as_bytes())
                                            == slot
                                    })
                                    .cloned()
                                    .collect()
                            })
                            .unwrap_or_default();
                        self.take(&mut st, addr, in_slot)
                    };
                    if !self.report_lost(lost) {
                        return true;
                    }
                    continue;
                }
                _ => continue,
            };
            if !self.shared.send(&self.tx, msg) {
                return true;
            }
        }
    }
}
