//! The command side of the transport, one for both modes. A thread takes the master's
//! requests in batches (up to `BATCH`), turns each batch into one pipeline per node, sends
//! every pipeline before reading any answer, and answers each request. `EVALSHA` runs the
//! scripts; a node that answers `NOSCRIPT` (a restarted or flushed Redis) has them loaded
//! again and the command retried. While no connection can be made, requests are answered
//! `None` at once (503) and the thread retries with backoff.
//!
//! What differs between one Redis and a cluster is behind [`Nodes`]: how a request becomes
//! commands (one Redis: arguments only; a cluster: keys, one command per channel's slot), where
//! a command goes, and the cluster's redirections (`MOVED`, `ASK`, `TRYAGAIN`). A request that
//! still fails, or whose connection broke, is answered `None`: it may have been stored, and an
//! idempotency key makes its retry exact.

use super::protocol::{Incoming, Request, Which};
use super::shared::{backoff, Link, Shared, BACKOFF_MIN, BATCH};
use super::{cluster_script, script};
use redis::Value;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Rounds of retries (NOSCRIPT, MOVED, ASK, TRYAGAIN) a command gets before it fails.
const ROUNDS: usize = 5;
/// Wait before retrying after TRYAGAIN (a slot's keys are half-way through a migration).
const TRY_AGAIN_WAIT: Duration = Duration::from_millis(25);
/// How long the thread waits for requests before it looks at its connections again (a
/// cluster's map may have been found stale meanwhile).
const IDLE: Duration = Duration::from_secs(1);

/// The scripts, loaded on every (re)connection so pipelines can use EVALSHA.
pub struct Scripts {
    pub publish: redis::Script,
    pub replay: redis::Script,
    presence: redis::Script,
    info: redis::Script,
    members_apply: redis::Script,
    members_reap: redis::Script,
    members_query: redis::Script,
}

impl Scripts {
    /// One Redis' scripts, or a cluster's (per-channel keys, presence on one shard).
    pub fn new(cluster: bool) -> Scripts {
        let (publish, replay) = if cluster {
            (
                cluster_script::publish_script(),
                cluster_script::replay_script(),
            )
        } else {
            (script::publish_script(), script::replay_script())
        };
        let [members_apply, members_reap, members_query] = super::presence::scripts(cluster);
        Scripts {
            publish: redis::Script::new(&publish),
            replay: redis::Script::new(&replay),
            presence: redis::Script::new(&script::presence_script(cluster)),
            info: redis::Script::new(&script::info_script(cluster)),
            members_apply: redis::Script::new(&members_apply),
            members_reap: redis::Script::new(&members_reap),
            members_query: redis::Script::new(&members_query),
        }
    }

    pub fn load(&self, con: &mut redis::Connection) -> redis::RedisResult<()> {
        for s in [
            &self.publish,
            &self.replay,
            &self.presence,
            &self.info,
            &self.members_apply,
            &self.members_reap,
            &self.members_query,
        ] {
            s.load(con)?;
        }
        Ok(())
    }

    pub fn of(&self, which: Which) -> &redis::Script {
        match which {
            Which::Presence => &self.presence,
            Which::Info => &self.info,
            Which::MembersApply => &self.members_apply,
            Which::MembersReap => &self.members_reap,
            Which::MembersQuery => &self.members_query,
        }
    }
}

/// `EVALSHA` of `script` with `keys` (its arguments follow).
pub fn evalsha(script: &redis::Script, keys: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(keys.len());
    for k in keys {
        cmd.arg(k);
    }
    cmd
}

/// One command of a request, for one slot (0 in one Redis).
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
pub enum Merge {
    /// The one part's answer as it is.
    One,
    /// Replay parts (one per channel) into one replay answer.
    Replay,
    /// Presence part, then the channel's newest id.
    Info,
}

struct Answer {
    tag: u64,
    merge: Merge,
    parts: Vec<Option<Value>>,
    failed: bool,
}

/// A batch's commands, and how their answers make each request's.
#[derive(Default)]
pub struct Plan {
    ops: Vec<Op>,
    answers: Vec<Answer>,
}

impl Plan {
    /// Starts request `tag`'s answer, made of `parts` commands added next with [`Plan::op`].
    pub fn request(&mut self, tag: u64, merge: Merge, parts: usize) {
        self.answers.push(Answer {
            tag,
            merge,
            parts: vec![None; parts],
            failed: parts == 0,
        });
    }

    /// Part `part` of the request started last: `packed` goes to the node serving `slot`.
    pub fn op(&mut self, part: usize, slot: u16, packed: Vec<u8>) {
        self.ops.push(Op {
            req: self.answers.len().saturating_sub(1),
            part,
            slot,
            packed,
            asking: None,
        });
    }
}

/// What to do with a command Redis answered with an error.
pub enum Retry {
    /// Send it again (the map was patched).
    Again,
    /// Send it again to this node, after `ASKING`.
    Ask(String),
    /// Send it again after a short wait.
    Later,
    /// It failed: Redis refused it.
    No,
}

/// The part of the command side that depends on the mode.
pub trait Nodes {
    /// Makes sure the connections are up (reconnecting as needed) and tells the master when
    /// that changed. Whether they are up; None when the master is gone.
    fn check(&mut self, link: &Link) -> Option<bool>;
    fn subscribe(&mut self, channel: String);
    fn unsubscribe(&mut self, channel: &str);
    /// Adds a publish, replay or script request to `plan`.
    fn plan(&mut self, req: Request, plan: &mut Plan);
    /// The node serving `slot`, when known.
    fn node_of(&mut self, slot: u16) -> Option<String>;
    /// The command connection to `addr`, made when missing.
    fn con(&mut self, addr: &str) -> redis::RedisResult<&mut redis::Connection>;
    /// The command connection to `addr` if there is one (answers are read only where the
    /// commands went).
    fn connected(&mut self, addr: &str) -> Option<&mut redis::Connection>;
    /// Loads the scripts again on `addr`'s connection (it answered NOSCRIPT).
    fn reload(&mut self, addr: &str) -> redis::RedisResult<()>;
    /// An error answer other than NOSCRIPT: a redirection, or a refusal.
    fn redirect(&mut self, _code: &str, _detail: &str) -> Retry {
        Retry::No
    }
    /// A node asked for is unknown: the cluster's map is out of date.
    fn unknown_slot(&mut self) {}
    /// `addr`'s connection broke (or could not be made): it is remade when next needed.
    fn lost(&mut self, addr: &str, error: Option<&redis::RedisError>);
}

/// Runs the command side until the master goes away.
pub fn command_thread(mut nodes: impl Nodes, requests: Receiver<Request>, link: Link) {
    let mut delay = BACKOFF_MIN;
    loop {
        let Some(up) = nodes.check(&link) else {
            return;
        };
        if !up {
            if !fail_waiting(&mut nodes, &requests, &link, delay) {
                return;
            }
            delay = backoff(delay);
            continue;
        }
        delay = BACKOFF_MIN;
        let first = match requests.recv_timeout(IDLE) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match requests.try_recv() {
                Ok(r) => batch.push(r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return,
            }
        }
        // A pub/sub thread may have found the cluster's map stale while this one waited (a
        // channel lost on a moved slot is about to be subscribed again: it must go where it is
        // now).
        let served = match nodes.check(&link) {
            None => return,
            Some(true) => serve(&mut nodes, batch, &link),
            Some(false) => batch.into_iter().all(|req| fail(&mut nodes, req, &link)),
        };
        if !served {
            return;
        }
    }
}

/// While down: answers `None` to each request that comes within `delay`. (Un)subscribes
/// still go to the pub/sub side, which may be up: dropping one would leave its channel waiting
/// for a confirmation that never comes. False when the master is gone.
fn fail_waiting(
    nodes: &mut impl Nodes,
    requests: &Receiver<Request>,
    link: &Link,
    delay: Duration,
) -> bool {
    let deadline = Instant::now() + delay;
    loop {
        match requests.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(req) => {
                if !fail(nodes, req, link) {
                    return false;
                }
            }
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}

/// One request while the connections are down. False when the master is gone.
fn fail(nodes: &mut impl Nodes, req: Request, link: &Link) -> bool {
    match req {
        Request::Subscribe(ch) => nodes.subscribe(ch),
        Request::Unsubscribe(ch) => nodes.unsubscribe(&ch),
        req => {
            if let Some(tag) = req.tag() {
                return link.send(Incoming::Answer { tag, value: None });
            }
        }
    }
    true
}

/// Runs one batch and answers each of its requests. False when the master is gone.
fn serve(nodes: &mut impl Nodes, batch: Vec<Request>, link: &Link) -> bool {
    let mut plan = Plan::default();
    for req in batch {
        match req {
            Request::Subscribe(ch) => nodes.subscribe(ch),
            Request::Unsubscribe(ch) => nodes.unsubscribe(&ch),
            req => nodes.plan(req, &mut plan),
        }
    }
    run(nodes, &link.shared, plan.ops, &mut plan.answers);
    for a in plan.answers {
        let value = if a.failed {
            None
        } else {
            merge(a.merge, a.parts)
        };
        if !link.send(Incoming::Answer { tag: a.tag, value }) {
            return false;
        }
    }
    true
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

/// Runs ops to completion or failure, writing answers into `answers`.
fn run(nodes: &mut impl Nodes, shared: &Shared, mut ops: Vec<Op>, answers: &mut [Answer]) {
    for round in 0..ROUNDS {
        if ops.is_empty() {
            return;
        }
        let last_round = round + 1 == ROUNDS;
        let mut by_node: Vec<(String, Vec<Op>)> = Vec::new();
        for op in ops.drain(..) {
            let addr = match op.asking.clone() {
                Some(addr) => Some(addr),
                None => nodes.node_of(op.slot),
            };
            let Some(addr) = addr else {
                nodes.unknown_slot();
                answers[op.req].failed = true;
                continue;
            };
            match by_node.iter_mut().find(|(a, _)| *a == addr) {
                Some((_, list)) => list.push(op),
                None => by_node.push((addr, vec![op])),
            }
        }
        // Every pipeline goes out before any answer is read: the nodes work at once.
        let mut sent = Vec::new();
        for (addr, list) in by_node {
            let mut packed = Vec::new();
            for op in &list {
                if op.asking.is_some() {
                    packed.extend(redis::cmd("ASKING").get_packed_command());
                }
                packed.extend_from_slice(&op.packed);
            }
            let written = nodes
                .con(&addr)
                .and_then(|con| con.send_packed_command(&packed));
            match written {
                Ok(()) => sent.push((addr, list)),
                Err(e) => {
                    nodes.lost(&addr, Some(&e));
                    for op in list {
                        answers[op.req].failed = true;
                    }
                }
            }
        }
        let mut wait = false;
        for (addr, list) in sent {
            let mut reload = false;
            let mut broken = None;
            for op in list {
                if broken.is_some() {
                    answers[op.req].failed = true;
                    continue;
                }
                let Some(con) = nodes.connected(&addr) else {
                    answers[op.req].failed = true;
                    broken = Some(redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "connection gone before its answers were read",
                    )));
                    continue;
                };
                if op.asking.is_some() {
                    let _ = con.recv_response(); // ASKING's OK
                }
                let answer = con.recv_response();
                match (server_error(&answer), answer) {
                    (Some((code, detail)), _) => {
                        let retry = if code == "NOSCRIPT" {
                            reload = true;
                            Retry::Again
                        } else {
                            nodes.redirect(&code, &detail)
                        };
                        let retry = match retry {
                            Retry::Ask(to) => {
                                ops.push(Op {
                                    asking: Some(to),
                                    ..op
                                });
                                continue;
                            }
                            Retry::Again => true,
                            Retry::Later => {
                                wait = true;
                                true
                            }
                            Retry::No => {
                                shared.refused(&format!("{code} {detail}"));
                                false
                            }
                        };
                        if retry && !last_round {
                            ops.push(Op { asking: None, ..op });
                        } else {
                            answers[op.req].failed = true;
                        }
                    }
                    (None, Ok(value)) => answers[op.req].parts[op.part] = Some(value),
                    (None, Err(e)) => {
                        answers[op.req].failed = true;
                        broken = Some(e);
                    }
                }
            }
            if let Some(e) = broken {
                nodes.lost(&addr, Some(&e));
            } else if reload {
                if let Err(e) = nodes.reload(&addr) {
                    nodes.lost(&addr, Some(&e));
                }
            }
        }
        if wait {
            std::thread::sleep(TRY_AGAIN_WAIT);
        }
    }
    for op in ops {
        answers[op.req].failed = true;
    }
}

/// Combines a request's part answers into the one answer the state machine reads.
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
