//! The server API's calls (`POST /api/{call}`, docs/PROTOCOL.md "Server API"), carried out by
//! the master because the master is where each one's knowledge is: the hub (publish,
//! broadcast, batch, history), every worker of the box (disconnect, unsubscribe, subscribe
//! ask each worker and add up their answers), the per-worker channel counts (channels) and
//! the box's figures (info). With a cluster broker, acts on users also go to every other node
//! through the broker's control channel, and `channels` / `info` gather the other nodes'
//! answers for a short bounded wait.
//!
//! A request is checked whole before anything is done: a body that is not a JSON object of
//! the call's fields (types, unknown fields) is a 400 and nothing is published or closed. In
//! `broadcast` a bad channel name refuses the whole call; in `batch` each item stands alone
//! (a bad item gets its error in its result, the others are published).

use super::Master;
use crate::api::{error_body, label, CALLS, CALL_TIMEOUT};
use crate::broker::{HistoryPage, Req};
use crate::conn_id::ConnId;
use crate::ipc::{Action, Target, ToWorker, UserAct};
use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// `Req::worker` of the API's own broker requests (publishes, history): their answers come
/// back to `Master::api_*`, not to a worker.
pub const API_WORKER: usize = usize::MAX;
/// A publish's token: the op in the high bits, the item's index in the low ones.
const ITEM_BITS: u32 = 24;
/// Most channels in a `broadcast` and items in a `batch`.
pub const MAX_ITEMS: usize = 10_000;
/// Longest the master waits for the workers' answers to an act on users.
const ACT_WAIT: Duration = Duration::from_millis(1000);
/// Longest `channels` and `info` wait for other nodes' answers in a cluster.
const GATHER_WAIT: Duration = Duration::from_millis(300);
/// `history` and `channels`: the page size without `limit`, and the largest.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// A call's failure: the HTTP status and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError {
        status: 400,
        message: message.into(),
    }
}

/// How a call ended, the `outcome` label of `c1m_api_calls_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Answered 200 in time.
    Ok,
    /// Answered with an error status in time.
    Error,
    /// Answered after the worker had given up and told the client 503 (`refused.api_timeouts`).
    Late,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Ok, Outcome::Error, Outcome::Late];

    fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Late => "late",
        }
    }
}

/// A call waiting for answers.
enum Op {
    /// Publishes in flight: one result per item (None until answered).
    Publishes {
        req: Req,
        call: &'static str,
        channels: Vec<String>,
        results: Vec<Option<Result<u64, String>>>,
        left: usize,
    },
    /// An act on users' connections, waiting for each worker's count. `req` is None for an
    /// act another node asked for (nobody waits for its count here).
    Act {
        req: Option<Req>,
        call: &'static str,
        waiting: Vec<usize>,
        count: u64,
        deadline: Instant,
        cluster: bool,
    },
    History {
        req: Req,
        since: Option<u64>,
    },
    /// `presence` / `presence_stats` with a broker that keeps the cluster's members.
    Presence {
        req: Req,
        call: &'static str,
    },
    /// `channels` or `info` in a cluster: this node's answer and the others' so far.
    Gather {
        req: Req,
        call: &'static str,
        deadline: Instant,
        answers: Vec<Value>,
        limit: usize,
    },
}

/// The server API's state in the master.
pub struct Api {
    next_op: u64,
    ops: HashMap<u64, Op>,
    /// Calls answered, by (call, outcome).
    counted: BTreeMap<(&'static str, Outcome), u64>,
    /// When each call a worker waits for arrived, by (worker, token): an answer past
    /// [`CALL_TIMEOUT`] is counted `late`, since the worker has already answered 503.
    started: HashMap<(usize, u64), Instant>,
    /// This node's name in `info` and in control messages.
    pub node: String,
    /// Control messages from other nodes this build could not read (counted with the
    /// broker's unreadable messages).
    pub unreadable_control: u64,
    unreadable_log: crate::log::Limited,
}

impl Api {
    pub fn new() -> Api {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        Api {
            next_op: 1,
            ops: HashMap::new(),
            counted: BTreeMap::new(),
            started: HashMap::new(),
            unreadable_control: 0,
            unreadable_log: crate::log::Limited::every(crate::log::REFUSAL_SUMMARY_EVERY),
            node: format!("{host}:{}", std::process::id()),
        }
    }

    fn op(&mut self) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        op
    }

    pub fn count(&mut self, call: &str, outcome: Outcome) {
        *self.counted.entry((label(call), outcome)).or_default() += 1;
    }

    /// `c1m_api_calls_total` for `/metrics`: every call with both outcomes, so a rate over
    /// an outcome that has not happened yet is 0 rather than absent.
    pub fn prometheus(&self) -> String {
        let mut out = String::from(
            "# HELP c1m_api_calls_total Server API calls answered (POST /api/{call}), by call and outcome.\n\
             # TYPE c1m_api_calls_total counter\n",
        );
        for call in CALLS.iter().copied().chain(["unknown"]) {
            for outcome in Outcome::ALL {
                let n = self.counted.get(&(call, outcome)).copied().unwrap_or(0);
                let outcome = outcome.label();
                out.push_str(&format!(
                    "c1m_api_calls_total{{call=\"{call}\",outcome=\"{outcome}\"}} {n}\n"
                ));
            }
        }
        out
    }
}

// ---- the calls' parameters: exactly these fields, of these types ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishParams {
    channel: String,
    data: Option<String>,
    data_b64: Option<String>,
    idempotency_key: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BroadcastParams {
    channels: Vec<String>,
    data: Option<String>,
    data_b64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchItem {
    channel: String,
    data: Option<String>,
    data_b64: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchParams {
    items: Vec<BatchItem>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserParams {
    user: Option<String>,
    conn: Option<String>,
    channel: Option<String>,
    reconnect: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryParams {
    channel: String,
    limit: Option<usize>,
    since: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelsParams {
    prefix: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InfoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresenceParams {
    channel: String,
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    match serde_json::from_slice::<Value>(body) {
        Err(e) => return Err(bad(format!("the body is not JSON: {e}"))),
        Ok(Value::Object(_)) => {}
        Ok(_) => return Err(bad("the body must be a JSON object")),
    }
    serde_json::from_slice(body).map_err(|e| bad(format!("bad parameters: {e}")))
}

/// A batch sent as NDJSON: one item object per non-empty line.
fn parse_ndjson(body: &[u8]) -> Result<Vec<BatchItem>, ApiError> {
    let mut items = Vec::new();
    for (n, line) in body.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if items.len() == MAX_ITEMS {
            return Err(bad(format!("a batch takes at most {MAX_ITEMS} items")));
        }
        let item =
            serde_json::from_slice(line).map_err(|e| bad(format!("NDJSON line {}: {e}", n + 1)))?;
        items.push(item);
    }
    Ok(items)
}

fn check_channel(name: &str) -> Result<(), String> {
    if c1m_proto::channel::is_valid_name(name) {
        Ok(())
    } else {
        Err(c1m_proto::channel::ChannelError::BadName(name.chars().take(300).collect()).to_string())
    }
}

/// The message bytes: `data` (a JSON string, sent as its UTF-8) or `data_b64` (standard
/// base64, any bytes); exactly one.
fn payload(data: Option<String>, data_b64: Option<String>, max: usize) -> Result<Vec<u8>, String> {
    let bytes = match (data, data_b64) {
        (Some(d), None) => d.into_bytes(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|e| format!("data_b64 is not base64: {e}"))?,
        (None, None) => return Err("give the message as data (text) or data_b64 (bytes)".into()),
        (Some(_), Some(_)) => return Err("give data or data_b64, not both".into()),
    };
    if bytes.len() > max {
        return Err(format!(
            "a payload of {} bytes is over the {max} byte payload limit",
            bytes.len()
        ));
    }
    Ok(bytes)
}

fn limit_of(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(bad("limit must be at least 1")),
        n if n > MAX_LIMIT => Err(bad(format!("limit must be at most {MAX_LIMIT}"))),
        n => Ok(n),
    }
}

/// Who an act on users names, from `user` or `conn` (exactly one).
fn target_of(p: &UserParams) -> Result<(Target, Option<u32>), ApiError> {
    match (&p.user, &p.conn) {
        (Some(user), None) => {
            if user.is_empty() || user.len() > 256 || user.chars().any(char::is_control) {
                return Err(bad(
                    "user must be 1 to 256 bytes without control characters",
                ));
            }
            Ok((Target::User(user.clone()), None))
        }
        (None, Some(conn)) => {
            let id: ConnId = conn
                .parse()
                .map_err(|e: crate::conn_id::BadConnId| bad(e.to_string()))?;
            Ok((Target::Conn(id.token), Some(id.worker)))
        }
        _ => Err(bad("name the connections by user or by conn (one of them)")),
    }
}

/// What answers are said under, per act call.
fn noun(call: &str) -> &'static str {
    match call {
        "disconnect" => "disconnected",
        "unsubscribe" => "unsubscribed",
        _ => "subscribed",
    }
}

impl Master {
    /// `POST /api/{call}` from worker `i`.
    pub(super) fn on_api(&mut self, i: usize, token: u64, call: &str, body: &[u8], ndjson: bool) {
        let req = Req { worker: i, token };
        let call = label(call);
        self.api.started.insert((i, token), Instant::now());
        if let Err(e) = self.api_start(req, call, body, ndjson) {
            self.api_answer(req, call, Err(e));
        }
    }

    /// Sends the answer and counts the call.
    fn api_answer(&mut self, req: Req, call: &'static str, result: Result<Value, ApiError>) {
        let (status, body) = match result {
            Ok(v) => (200, json!({ "result": v }).to_string()),
            Err(e) => (e.status, error_body(e.status, &e.message)),
        };
        let started = self.api.started.remove(&(req.worker, req.token));
        let outcome = match started {
            Some(t) if t.elapsed() >= CALL_TIMEOUT => Outcome::Late,
            _ if status == 200 => Outcome::Ok,
            _ => Outcome::Error,
        };
        self.api.count(call, outcome);
        if req.worker < self.slots.len() {
            let answer = ToWorker::ApiAnswer {
                req: req.token,
                status,
                body,
            };
            self.send(req.worker, answer.encode());
        }
    }

    fn api_start(
        &mut self,
        req: Req,
        call: &'static str,
        body: &[u8],
        ndjson: bool,
    ) -> Result<(), ApiError> {
        let max = self.cfg.max_payload;
        match call {
            "publish" => {
                let p: PublishParams = parse(body)?;
                check_channel(&p.channel).map_err(bad)?;
                if let Some(key) = &p.idempotency_key {
                    if !c1m_proto::idempotency::is_valid_key(key) {
                        return Err(bad(c1m_proto::idempotency::KEY_RULE));
                    }
                }
                let data = payload(p.data, p.data_b64, max).map_err(|m| ApiError {
                    status: if m.contains("payload limit") {
                        413
                    } else {
                        400
                    },
                    message: m,
                })?;
                self.api_publish(req, call, vec![(p.channel, Ok(data))], p.idempotency_key);
            }
            "broadcast" => {
                let p: BroadcastParams = parse(body)?;
                if p.channels.is_empty() || p.channels.len() > MAX_ITEMS {
                    return Err(bad(format!("channels must list 1 to {MAX_ITEMS} channels")));
                }
                for c in &p.channels {
                    check_channel(c).map_err(bad)?;
                }
                let data = payload(p.data, p.data_b64, max).map_err(bad)?;
                let items = p
                    .channels
                    .into_iter()
                    .map(|c| (c, Ok(data.clone())))
                    .collect();
                self.api_publish(req, call, items, None);
            }
            "batch" => {
                let items = if ndjson {
                    parse_ndjson(body)?
                } else {
                    parse::<BatchParams>(body)?.items
                };
                if items.is_empty() || items.len() > MAX_ITEMS {
                    return Err(bad(format!("a batch takes 1 to {MAX_ITEMS} items")));
                }
                let items = items
                    .into_iter()
                    .map(|it| {
                        let data = check_channel(&it.channel)
                            .and_then(|()| payload(it.data, it.data_b64, max));
                        (it.channel, data)
                    })
                    .collect();
                self.api_publish(req, call, items, None);
            }
            "disconnect" | "unsubscribe" | "subscribe" => {
                let p: UserParams = parse(body)?;
                let (target, worker) = target_of(&p)?;
                let action = match (call, p.channel, p.reconnect) {
                    ("disconnect", None, reconnect) => Action::Disconnect {
                        reconnect: reconnect.unwrap_or(false),
                    },
                    ("disconnect", Some(_), _) => {
                        return Err(bad("disconnect takes no channel (see unsubscribe)"))
                    }
                    (_, _, Some(_)) => return Err(bad(format!("{call} takes no reconnect"))),
                    (_, None, None) => return Err(bad(format!("{call} needs a channel"))),
                    (_, Some(channel), None) => {
                        check_channel(&channel).map_err(bad)?;
                        if call == "unsubscribe" {
                            Action::Unsubscribe { channel }
                        } else {
                            Action::Subscribe { channel }
                        }
                    }
                };
                let act = UserAct { target, action };
                // A connection id names a connection of this node: no other node has it.
                let cluster = worker.is_none() && self.api_control_act(&act);
                self.api_act(Some(req), call, act, worker, cluster);
            }
            "history" => {
                let p: HistoryParams = parse(body)?;
                check_channel(&p.channel).map_err(bad)?;
                let limit = limit_of(p.limit)?;
                let op = self.api.op();
                self.api.ops.insert(
                    op,
                    Op::History {
                        req,
                        since: p.since,
                    },
                );
                let inner = Req {
                    worker: API_WORKER,
                    token: op << ITEM_BITS,
                };
                self.broker.history(inner, p.channel, p.since, limit);
                self.pump();
            }
            "channels" => {
                let p: ChannelsParams = parse(body)?;
                let limit = limit_of(p.limit)?;
                let prefix = p.prefix.unwrap_or_default();
                let cursor = p.cursor.unwrap_or_default();
                let local = self.api_local_channels(&prefix, &cursor, limit);
                let ask =
                    json!({"q": "channels", "prefix": prefix, "cursor": cursor, "limit": limit});
                self.api_gather(req, call, local, ask, limit);
            }
            "presence" | "presence_stats" => {
                let p: PresenceParams = parse(body)?;
                check_channel(&p.channel).map_err(bad)?;
                if self.broker.shares_presence() {
                    // The union of every node's members, as GET /channels/{ch}/presence.
                    let op = self.api.op();
                    self.api.ops.insert(op, Op::Presence { req, call });
                    let inner = Req {
                        worker: API_WORKER,
                        token: op << ITEM_BITS,
                    };
                    self.broker.presence_query(inner, p.channel);
                    self.pump();
                } else {
                    let answer = self.api_local_presence(&p.channel, call);
                    self.api_answer(req, call, Ok(answer));
                }
            }
            "info" => {
                let _: InfoParams = parse(body)?;
                let local = self.api_local_info();
                self.api_gather(req, call, local, json!({"q": "info"}), 0);
            }
            _ => {
                return Err(ApiError {
                    status: 404,
                    message: format!("unknown call; the calls are {}", CALLS.join(", ")),
                })
            }
        }
        Ok(())
    }

    /// Publishes the items that are good (an item's error stands in its result) and answers
    /// once each is acknowledged or refused.
    fn api_publish(
        &mut self,
        req: Req,
        call: &'static str,
        items: Vec<(String, Result<Vec<u8>, String>)>,
        key: Option<String>,
    ) {
        let op = self.api.op();
        let mut results = Vec::with_capacity(items.len());
        let mut channels = Vec::with_capacity(items.len());
        let mut send = Vec::new();
        let frozen = self.handover.as_ref().is_some_and(|p| p.frozen);
        for (n, (channel, data)) in items.into_iter().enumerate() {
            let slots = &self.slots;
            let behind = self.interest.get(&channel).is_some_and(|targets| {
                targets
                    .iter()
                    .any(|&w| slots[w].link.as_ref().is_some_and(|l| l.is_congested()))
            });
            let result = match data {
                Err(e) => Some(Err(e)),
                Ok(_) if frozen => Some(Err("upgrading: retry shortly".to_string())),
                Ok(_) if behind => {
                    self.publish_refused += 1;
                    Some(Err("server busy: subscribers are behind; retry".to_string()))
                }
                Ok(data) => {
                    send.push((n, channel.clone(), data));
                    None
                }
            };
            results.push(result);
            channels.push(channel);
        }
        let left = send.len();
        self.api.ops.insert(
            op,
            Op::Publishes {
                req,
                call,
                channels,
                results,
                left,
            },
        );
        for (n, channel, data) in send {
            let inner = Req {
                worker: API_WORKER,
                token: (op << ITEM_BITS) | n as u64,
            };
            self.broker
                .publish(inner, channel, Rc::from(data), key.clone());
        }
        if left == 0 {
            self.api_finish(op);
        }
        self.pump();
    }

    /// The broker's answer to one of the API's publishes.
    pub(super) fn api_published(&mut self, token: u64, result: Result<u64, String>) {
        let op = token >> ITEM_BITS;
        let n = (token & ((1 << ITEM_BITS) - 1)) as usize;
        let Some(Op::Publishes { results, left, .. }) = self.api.ops.get_mut(&op) else {
            return;
        };
        if let Some(slot @ None) = results.get_mut(n) {
            *slot = Some(result);
            *left -= 1;
            if *left == 0 {
                self.api_finish(op);
            }
        }
    }

    /// The broker's answer to an API `history`.
    pub(super) fn api_history(&mut self, token: u64, page: Result<HistoryPage, String>) {
        let op = token >> ITEM_BITS;
        let Some(Op::History { req, since }) = self.api.ops.remove(&op) else {
            return;
        };
        let result = page
            .map(|page| {
                let messages: Vec<Value> = page
                    .messages
                    .into_iter()
                    .map(|(id, payload)| match String::from_utf8(payload) {
                        Ok(text) => json!({"id": id, "data": text}),
                        Err(e) => json!({
                            "id": id,
                            "data_b64": base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
                        }),
                    })
                    .collect();
                let mut answer = json!({"messages": messages, "more": page.more});
                if since.is_some() {
                    answer["gap"] = json!(page.gap.is_some());
                }
                if let Some((after, through)) = page.gap {
                    answer["missed"] = json!({"after": after, "through": through});
                }
                answer
            })
            .map_err(|cause| ApiError {
                status: 503,
                message: format!("history is unavailable: {cause}"),
            });
        self.api_answer(req, "history", result);
    }

    /// This node's members of `channel` (all there are without a cluster broker).
    fn api_local_presence(&self, channel: &str, call: &str) -> Value {
        let stats = self.presence_stats(channel);
        let mut answer = json!({
            "channel": channel,
            "clients": stats.clients,
            "users": stats.users,
            "complete": !self.broker.shares_presence(),
        });
        if call == "presence" {
            answer["members"] = self
                .presence(channel)
                .into_iter()
                .map(|m| json!({"user": m.user, "conn": m.conn.to_string(), "info": m.info.and_then(|i| serde_json::from_str::<Value>(&i).ok())}))
                .collect();
        }
        answer
    }

    /// The broker's answer to an API `presence` / `presence_stats`: the cluster's members, or
    /// (`None`: the broker could not be asked) this node's alone, marked incomplete.
    pub(super) fn api_presence(
        &mut self,
        token: u64,
        channel: String,
        members: Option<Vec<(String, String)>>,
    ) {
        let op = token >> ITEM_BITS;
        let Some(Op::Presence { req, call }) = self.api.ops.remove(&op) else {
            return;
        };
        let answer = match members {
            Some(members) => {
                let mut answer = super::presence::cluster_answer(&channel, &members);
                if call != "presence" {
                    if let Some(o) = answer.as_object_mut() {
                        o.remove("members");
                    }
                }
                answer
            }
            None => self.api_local_presence(&channel, call),
        };
        self.api_answer(req, call, Ok(answer));
    }

    /// Sends an act to the workers it concerns (the one a connection id names, or all).
    fn api_act(
        &mut self,
        req: Option<Req>,
        call: &'static str,
        act: UserAct,
        worker: Option<u32>,
        cluster: bool,
    ) {
        let op = self.api.op();
        let frame = ToWorker::ApiAct { op, act }.encode();
        let mut waiting = Vec::new();
        for i in 0..self.slots.len() {
            let named = worker.is_none_or(|w| w as usize == i);
            if named && self.slots[i].link.is_some() {
                waiting.push(i);
                self.send(i, frame.clone());
            }
        }
        self.api.ops.insert(
            op,
            Op::Act {
                req,
                call,
                waiting,
                count: 0,
                deadline: Instant::now() + ACT_WAIT,
                cluster,
            },
        );
        self.api_act_progress(op);
    }

    /// Worker `i` did an act on `count` connections.
    pub(super) fn api_acted(&mut self, i: usize, op: u64, count: u64) {
        if let Some(Op::Act {
            waiting, count: n, ..
        }) = self.api.ops.get_mut(&op)
        {
            waiting.retain(|&w| w != i);
            *n += count;
        }
        self.api_act_progress(op);
    }

    fn api_act_progress(&mut self, op: u64) {
        if let Some(Op::Act { waiting, .. }) = self.api.ops.get(&op) {
            if waiting.is_empty() {
                self.api_finish(op);
            }
        }
    }

    /// Answers the calls whose wait is over (acts whose workers did not all answer in time:
    /// the count so far, marked incomplete; gathers: the nodes that answered).
    pub(super) fn api_expire(&mut self, now: Instant) {
        if self.api.ops.is_empty() {
            return;
        }
        let due: Vec<u64> = self
            .api
            .ops
            .iter()
            .filter(|(_, op)| match op {
                Op::Act { deadline, .. } | Op::Gather { deadline, .. } => *deadline <= now,
                _ => false,
            })
            .map(|(&op, _)| op)
            .collect();
        for op in due {
            self.api_finish(op);
        }
    }

    /// Once a second: a call whose answer never comes (its broker request lost with a dead
    /// link) must not keep its start time for ever; long past the worker's 503 nobody reads it.
    pub(super) fn api_forget_stale(&mut self, now: Instant) {
        let forget = now.checked_sub(CALL_TIMEOUT * 20).unwrap_or(now);
        self.api.started.retain(|_, t| *t > forget);
    }

    /// Answers call `op` with what it has.
    fn api_finish(&mut self, op: u64) {
        let Some(done) = self.api.ops.remove(&op) else {
            return;
        };
        match done {
            Op::Publishes {
                req,
                call,
                channels,
                results,
                ..
            } => {
                let results: Vec<Result<u64, String>> = results
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|| Err("not answered".into())))
                    .collect();
                let answer = if call == "publish" {
                    match results.into_iter().next() {
                        Some(Ok(id)) => Ok(json!({ "id": id })),
                        Some(Err(e)) => Err(ApiError {
                            status: 503,
                            message: e,
                        }),
                        None => Err(bad("nothing to publish")),
                    }
                } else {
                    let list: Vec<Value> = channels
                        .into_iter()
                        .zip(results)
                        .map(|(channel, r)| match r {
                            Ok(id) => json!({"channel": channel, "id": id}),
                            Err(e) => json!({"channel": channel, "error": e}),
                        })
                        .collect();
                    Ok(json!({ "results": list }))
                };
                self.api_answer(req, call, answer);
            }
            Op::Act {
                req,
                call,
                waiting,
                count,
                cluster,
                ..
            } => {
                let Some(req) = req else { return };
                let mut answer = json!({ noun(call): count });
                if !waiting.is_empty() {
                    answer["complete"] = json!(false);
                }
                if cluster {
                    answer["cluster"] = json!("sent");
                }
                self.api_answer(req, call, Ok(answer));
            }
            Op::Presence { req, call } => {
                self.api_answer(
                    req,
                    call,
                    Err(ApiError {
                        status: 503,
                        message: "presence was not answered".into(),
                    }),
                );
            }
            Op::History { req, .. } => {
                self.api_answer(
                    req,
                    "history",
                    Err(ApiError {
                        status: 503,
                        message: "history was not answered".into(),
                    }),
                );
            }
            Op::Gather {
                req,
                call,
                answers,
                limit,
                ..
            } => {
                let answer = if call == "info" {
                    json!({ "nodes": answers })
                } else {
                    merge_channels(answers, limit)
                };
                self.api_answer(req, call, Ok(answer));
            }
        }
    }

    /// This node's channels with local subscribers, by name after `cursor`, at most `limit`
    /// (and whether there are more): a range of the ordered counts, so a page costs its own
    /// length, however many channels the node has.
    fn api_local_channels(&self, prefix: &str, cursor: &str, limit: usize) -> Value {
        use std::ops::Bound;
        let start = if cursor >= prefix {
            Bound::Excluded(cursor)
        } else {
            Bound::Included(prefix)
        };
        let mut names = self
            .counts
            .range::<str, _>((start, Bound::Unbounded))
            .map(|(c, _)| c)
            .take_while(|c| c.starts_with(prefix));
        let channels: Vec<Value> = names
            .by_ref()
            .take(limit)
            .map(|c| json!({"name": c, "subscribers": self.local_count(c)}))
            .collect();
        let more = names.next().is_some();
        json!({"channels": channels, "more": more})
    }

    fn api_local_info(&self) -> Value {
        let (mut connections, mut workers) = (0, 0);
        for slot in self.slots.iter().filter(|s| s.child.is_some()) {
            workers += 1;
            let s = &slot.stats;
            connections += s.conns_sse + s.conns_ws + s.conns_longpoll + s.conns_tcp;
        }
        json!({
            "node": self.api.node,
            "version": crate::build_info().0,
            "pid": std::process::id(),
            "uptime_s": self.started.elapsed().as_secs(),
            "connections": connections,
            "workers": workers,
        })
    }

    /// Answers `channels` / `info` with this node's part now, or, in a cluster, after the
    /// other nodes had [`GATHER_WAIT`] to add theirs.
    fn api_gather(&mut self, req: Req, call: &'static str, local: Value, ask: Value, limit: usize) {
        let op = self.api.op();
        self.api.ops.insert(
            op,
            Op::Gather {
                req,
                call,
                deadline: Instant::now() + GATHER_WAIT,
                answers: vec![local],
                limit,
            },
        );
        let message = json!({"kind": "ask", "from": self.api.node, "op": op, "ask": ask});
        if !self.broker.control(message.to_string()) {
            self.api_finish(op);
        }
    }

    /// Sends an act on users to the other nodes; true when it went.
    fn api_control_act(&mut self, act: &UserAct) -> bool {
        let Target::User(user) = &act.target else {
            return false;
        };
        let (what, channel, reconnect) = match &act.action {
            Action::Disconnect { reconnect } => ("disconnect", None, *reconnect),
            Action::Unsubscribe { channel } => ("unsubscribe", Some(channel), false),
            Action::Subscribe { channel } => ("subscribe", Some(channel), false),
        };
        let message = json!({
            "kind": "act", "from": self.api.node, "call": what, "user": user,
            "channel": channel, "reconnect": reconnect,
        });
        self.broker.control(message.to_string())
    }

    /// A control message from another node: an act to carry out here, a question to answer,
    /// or an answer to one of this node's questions.
    pub(super) fn api_control(&mut self, message: &str) {
        if let Err(why) = self.api_control_read(message) {
            self.api.unreadable_control += 1;
            if let Some(held_back) = self.api.unreadable_log.allow(Instant::now()) {
                tracing::warn!(held_back, "server API control message from another node ignored: {why} (a node of another c1m version?)");
            }
        }
    }

    /// Carries out a control message; Err names what this build could not read.
    fn api_control_read(&mut self, message: &str) -> Result<(), &'static str> {
        let msg = serde_json::from_str::<Value>(message).map_err(|_| "not JSON")?;
        if msg["from"].as_str() == Some(self.api.node.as_str()) {
            return Ok(()); // our own, echoed by the broker
        }
        match msg["kind"].as_str() {
            Some("act") => {
                let user = msg["user"].as_str().ok_or("an act without a user")?;
                let channel = msg["channel"].as_str().map(str::to_string);
                let (call, action) = match (msg["call"].as_str(), channel) {
                    (Some("disconnect"), _) => (
                        "disconnect",
                        Action::Disconnect {
                            reconnect: msg["reconnect"].as_bool().unwrap_or(false),
                        },
                    ),
                    (Some("unsubscribe"), Some(channel)) => {
                        ("unsubscribe", Action::Unsubscribe { channel })
                    }
                    (Some("subscribe"), Some(channel)) => {
                        ("subscribe", Action::Subscribe { channel })
                    }
                    _ => return Err("an act this build does not know"),
                };
                let act = UserAct {
                    target: Target::User(user.to_string()),
                    action,
                };
                self.api_act(None, call, act, None, false);
            }
            Some("ask") => {
                let ask = &msg["ask"];
                let answer = match ask["q"].as_str() {
                    Some("info") => self.api_local_info(),
                    Some("channels") => {
                        let limit = ask["limit"].as_u64().unwrap_or(DEFAULT_LIMIT as u64) as usize;
                        self.api_local_channels(
                            ask["prefix"].as_str().unwrap_or(""),
                            ask["cursor"].as_str().unwrap_or(""),
                            limit.min(MAX_LIMIT),
                        )
                    }
                    _ => return Err("a question this build does not know"),
                };
                let reply = json!({
                    "kind": "answer", "from": self.api.node, "to": msg["from"],
                    "op": msg["op"], "answer": answer,
                });
                self.broker.control(reply.to_string());
            }
            Some("answer") if msg["to"].as_str() == Some(self.api.node.as_str()) => {
                let op = msg["op"].as_u64().ok_or("an answer without an op")?;
                if let Some(Op::Gather { answers, .. }) = self.api.ops.get_mut(&op) {
                    answers.push(msg["answer"].clone());
                }
            }
            Some("answer") => {} // another node's
            _ => return Err("a kind of message this build does not know"),
        }
        Ok(())
    }
}

/// The nodes' `channels` pages as one: subscribers added up by name, the first `limit`
/// names, and a cursor when any node had more or the union is longer. (Each node lists its
/// first `limit` names after the cursor, so the union's first `limit` are all among them.)
fn merge_channels(answers: Vec<Value>, limit: usize) -> Value {
    let mut all: BTreeMap<String, u64> = BTreeMap::new();
    let mut more = false;
    let nodes = answers.len();
    for a in answers {
        more |= a["more"].as_bool().unwrap_or(false);
        for c in a["channels"].as_array().into_iter().flatten() {
            if let (Some(name), Some(n)) = (c["name"].as_str(), c["subscribers"].as_u64()) {
                *all.entry(name.to_string()).or_default() += n;
            }
        }
    }
    more |= all.len() > limit;
    let channels: Vec<Value> = all
        .into_iter()
        .take(limit)
        .map(|(name, n)| json!({"name": name, "subscribers": n}))
        .collect();
    let next = if more {
        channels
            .last()
            .map(|c| c["name"].clone())
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    json!({"channels": channels, "next_cursor": next, "nodes": nodes})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_from_several_nodes_merge_by_name() {
        let a = json!({"channels": [{"name": "a", "subscribers": 1}, {"name": "c", "subscribers": 2}], "more": false});
        let b = json!({"channels": [{"name": "b", "subscribers": 5}, {"name": "c", "subscribers": 1}], "more": false});
        let merged = merge_channels(vec![a, b], 2);
        assert_eq!(
            merged["channels"],
            json!([{"name": "a", "subscribers": 1}, {"name": "b", "subscribers": 5}])
        );
        assert_eq!(merged["next_cursor"], json!("b"));
        let last = merge_channels(
            vec![json!({"channels": [{"name": "c", "subscribers": 3}], "more": false})],
            2,
        );
        assert_eq!(last["next_cursor"], Value::Null);
    }

    #[test]
    fn parameters_are_exactly_the_calls_fields() {
        assert!(parse::<PublishParams>(br#"{"channel":"a","data":"x"}"#).is_ok());
        for body in [
            &br#"{"channel":"a","data":"x","extra":1}"#[..],
            br#"{"channel":7,"data":"x"}"#,
            br#"["channel"]"#,
            b"{not json",
        ] {
            assert_eq!(
                parse::<PublishParams>(body).err().map(|e| e.status),
                Some(400)
            );
        }
        assert!(parse::<InfoParams>(b"").is_ok());
        assert_eq!(payload(None, Some("aGk=".into()), 10), Ok(b"hi".to_vec()));
        assert!(payload(Some("x".into()), Some("eA==".into()), 10).is_err());
        assert!(payload(Some("too long".into()), None, 3).is_err());
        assert_eq!(
            parse_ndjson(
                b"{\"channel\":\"a\",\"data\":\"1\"}\n\n{\"channel\":\"b\",\"data\":\"2\"}\n"
            )
            .unwrap()
            .len(),
            2
        );
    }
}
