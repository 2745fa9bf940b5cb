//! Backend proxies in the worker: which requests ask the backend, what a connection waiting
//! for the answer holds, and what each answer does (the calls themselves are made by
//! `crate::proxy::pool`, off the loop).
//!
//! - **connect** and **subscribe** gate a subscribe. The connection is parked in a
//!   `*Proxying` kind (its slot, plus one 32-byte [`Parked`] record: the channels inline, and
//!   only when there are any, a box with the resume position, the identity so far and the
//!   forwarded headers), with no timer: the call's own deadline bounds the wait, and its
//!   answer always comes back (allow, deny, timeout or failure). The
//!   connect call goes first; then one subscribe call per channel the client asked for whose
//!   namespace has `proxy_subscribe` on, in order (channels the connect proxy added were
//!   chosen by the backend and are not asked about). Then the subscribe goes on as if nothing
//!   had waited, with the identity (user, info, expiry) the answers gave.
//! - **publish** gates a WebSocket client message: the connection stays live (messages still
//!   reach it) but its later frames wait unread, so publishes keep their order.
//! - **refresh** takes the place of a held stream's expiry: the stream goes on while asked;
//!   the answer extends it or ends it; a failed call is retried after [`REFRESH_RETRY`], and
//!   the stream ends after [`REFRESH_TRIES`] failures in a row.
//!
//! A call no proxy thread is free for waits in the worker as a 48-byte [`Waiting`] entry
//! (token, kind, when asked, and a subscribe's parked record, moved there from the map); its
//! URL and JSON body are built from the connection's state only when a thread is free
//! ([`Worker::proxy_dispatch`]), so ten thousand connections waiting on a slow backend hold
//! ten thousand queue entries, not ten thousand map entries and request bodies. An entry
//! whose deadline passes before a thread is free is answered as a timeout.
//!
//! Every refusal answers in the transport's own way, is counted in `refused` and in the
//! per-kind proxy counters, and is the same whatever the reason: 403 / close 4403 / `ERR`
//! (denied), 504 / 1013 (timeout), 502 / 1011 (failed), 503 / 1013 (the worker's in-flight
//! bound).

use super::conn::{Kind, EXPIRES, PROXY_PENDING, READ_PAUSED, WS_ENVELOPE};
use super::conn_events::ReadUntil;
use super::requests::Transport;
use super::Worker;
use crate::auth::Grant;
use crate::ipc::ProxyStats;
use crate::proxy::pool::Pool;
use crate::proxy::{Allow, Answer, Call, Done, Kind as Ask};
use c1m_proto::http::Request;
use c1m_proto::line;
use c1m_proto::ws::close;
use compact_str::CompactString;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// WebSocket close code for a connection or publish the backend refused (4000 + HTTP 403,
/// like 4001 / 4003 for tokens).
pub const CLOSE_REFUSED: u16 = 4403;
/// The backend failed: 1011, "internal error" (1014, "bad gateway", is in the IANA registry
/// but WebSocket libraries such as tungstenite refuse it as a protocol error).
pub const CLOSE_BAD_GATEWAY: u16 = close::INTERNAL_ERROR;
/// A failed refresh call is tried again after this long (the stream goes on meanwhile).
pub const REFRESH_RETRY: Duration = Duration::from_secs(5);
/// Failed refresh calls in a row after which the stream ends as expired.
pub const REFRESH_TRIES: u8 = 3;
/// Longest close reason a close frame can carry (a control frame holds 125 bytes).
const MAX_CLOSE_REASON: usize = 123;

/// The worker's proxy state.
pub struct Proxies {
    pool: Pool,
    /// Subscribes whose connect or subscribe call a proxy thread is making, by connection
    /// token (one waiting for a thread keeps its record in its `waiting` entry).
    parked: HashMap<u64, Parked>,
    /// Calls asked for that no proxy thread has room for yet, oldest first.
    waiting: VecDeque<Waiting>,
    /// The message of each WebSocket publish in `waiting` (it goes with the call once made).
    publishes: HashMap<u64, Box<(String, Vec<u8>)>>,
    /// Calls that could not be made (a reload took their URL away), answered next turn: not
    /// at once, so one answer's follow-up call cannot recurse through the whole queue.
    unmade: Vec<Done>,
    /// `Waiting::asked_ms` counts from here.
    epoch: Instant,
    /// Expiring streams whose refresh call failed, with how many times in a row.
    refresh_failures: HashMap<u64, u8>,
    pub stats: ProxyStats,
    errors: crate::log::Limited,
}

impl Proxies {
    pub fn new(waker: mio::Waker) -> Proxies {
        Proxies {
            pool: Pool::new(waker),
            parked: HashMap::new(),
            waiting: VecDeque::new(),
            publishes: HashMap::new(),
            unmade: Vec::new(),
            epoch: Instant::now(),
            refresh_failures: HashMap::new(),
            stats: ProxyStats::default(),
            errors: crate::log::Limited::every(Duration::from_secs(10)),
        }
    }

    /// Calls asked for and not answered yet: made, or waiting for a thread.
    pub fn in_flight(&self) -> usize {
        self.pool.in_flight() + self.waiting.len() + self.unmade.len()
    }

    /// Milliseconds since `epoch`, wrapping (only differences are used, each far below 49 days).
    fn now_ms(&self) -> u32 {
        self.epoch.elapsed().as_millis() as u32
    }

    /// Drops what is kept about a connection that closed.
    pub fn forget(&mut self, token: u64) {
        if !self.parked.is_empty() {
            self.parked.remove(&token);
        }
        if !self.refresh_failures.is_empty() {
            self.refresh_failures.remove(&token);
        }
        if !self.publishes.is_empty() {
            self.publishes.remove(&token);
        }
    }

    /// The waiting calls whose deadline passed before a thread was free: answered `Timeout`.
    fn expired_waits(&mut self, timeout: Duration) -> Vec<Done> {
        let now = self.now_ms();
        let mut out = Vec::new();
        while let Some(asked_ms) = self.waiting.front().map(|w| w.asked_ms) {
            let waited = Duration::from_millis(u64::from(now.wrapping_sub(asked_ms)));
            if waited < timeout {
                break;
            }
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            // Where the answer looks for it (and drops it, when the connection is gone).
            if let Some(p) = w.parked {
                self.parked.insert(w.token, p);
            }
            let publish = match w.kind {
                Ask::Publish => self.publishes.remove(&w.token),
                _ => None,
            };
            out.push(Done {
                kind: w.kind,
                token: w.token,
                answer: Answer::Timeout,
                micros: waited.as_micros() as u64,
                publish,
            });
        }
        out
    }

    fn count(&mut self, ask: Ask, outcome: &str) {
        let s = &mut self.stats;
        let c = match (ask, outcome) {
            (Ask::Connect, "allow") => &mut s.connect_allow,
            (Ask::Connect, "deny") => &mut s.connect_deny,
            (Ask::Connect, "timeout") => &mut s.connect_timeout,
            (Ask::Connect, "error") => &mut s.connect_error,
            (Ask::Connect, _) => &mut s.connect_busy,
            (Ask::Subscribe, "allow") => &mut s.subscribe_allow,
            (Ask::Subscribe, "deny") => &mut s.subscribe_deny,
            (Ask::Subscribe, "timeout") => &mut s.subscribe_timeout,
            (Ask::Subscribe, "error") => &mut s.subscribe_error,
            (Ask::Subscribe, _) => &mut s.subscribe_busy,
            (Ask::Publish, "allow") => &mut s.publish_allow,
            (Ask::Publish, "deny") => &mut s.publish_deny,
            (Ask::Publish, "timeout") => &mut s.publish_timeout,
            (Ask::Publish, "error") => &mut s.publish_error,
            (Ask::Publish, _) => &mut s.publish_busy,
            (Ask::Refresh, "allow") => &mut s.refresh_allow,
            (Ask::Refresh, "deny") => &mut s.refresh_deny,
            (Ask::Refresh, "timeout") => &mut s.refresh_timeout,
            (Ask::Refresh, "error") => &mut s.refresh_error,
            (Ask::Refresh, _) => &mut s.refresh_busy,
        };
        *c += 1;
    }
}

/// A call asked for and not handed to a proxy thread yet; what it sends is built from the
/// connection's state when a thread is free. A connect or subscribe call carries its parked
/// record here (not in the parked map) until then: a connection waiting for a thread is its
/// slot and this entry, nothing else.
struct Waiting {
    token: u64,
    /// When it was asked for ([`Proxies::now_ms`]): its deadline and latency count from here.
    asked_ms: u32,
    kind: Ask,
    parked: Option<Parked>,
}

// A connection waiting for a thread costs this much in the queue (BENCHMARKS.md "Backend
// proxies" counts on it).
const _: () = assert!(std::mem::size_of::<Waiting>() == 48);

/// A subscribe waiting for the backend. The usual case (a connect call out for channels named
/// in 24 bytes or less, no resume position, no identity yet, no forwarded header) is these
/// 32 bytes and no heap block.
struct Parked {
    /// The channels, comma separated (a channel name has no comma): the client's, then the
    /// ones the connect answer added. Inline up to 24 bytes.
    channels: CompactString,
    /// Everything else, only when there is any.
    more: Option<Box<More>>,
}

const _: () = assert!(std::mem::size_of::<Parked>() == 32);

/// What a parked subscribe holds besides its channels (absent: none of it, the connect call
/// not answered yet, and every channel the client's).
#[derive(Default)]
struct More {
    /// The connect answer came (or no connect proxy is set).
    connected: bool,
    /// The next of the asked channels the subscribe proxy may be asked about.
    next: usize,
    /// The first `asked` channels are the client's; the rest came from the connect answer.
    asked: usize,
    last_id: Option<u64>,
    user: Option<Box<str>>,
    info: Option<Box<str>>,
    exp_ms: Option<u64>,
    /// The `--proxy-headers` the request carried, as the JSON object the calls send.
    headers: Option<Box<str>>,
}

impl Parked {
    fn new(channels: &[&str]) -> Parked {
        let mut list = CompactString::default();
        for (i, c) in channels.iter().enumerate() {
            if i > 0 {
                list.push(',');
            }
            list.push_str(c);
        }
        Parked {
            channels: list,
            more: None,
        }
    }

    fn channels(&self) -> impl Iterator<Item = &str> {
        self.channels.split(',').filter(|c| !c.is_empty())
    }

    fn channel(&self, i: usize) -> Option<&str> {
        self.channels().nth(i)
    }

    fn count(&self) -> usize {
        self.channels().count()
    }

    fn connected(&self) -> bool {
        self.more.as_ref().is_some_and(|m| m.connected)
    }

    fn next(&self) -> usize {
        self.more.as_ref().map_or(0, |m| m.next)
    }

    fn asked(&self) -> usize {
        self.more.as_ref().map_or_else(|| self.count(), |m| m.asked)
    }

    fn user(&self) -> Option<&str> {
        self.more.as_ref().and_then(|m| m.user.as_deref())
    }

    /// The side box, made on first need (every channel so far counts as asked).
    fn more(&mut self) -> &mut More {
        if self.more.is_none() {
            let asked = self.count();
            self.more = Some(Box::new(More {
                asked,
                ..More::default()
            }));
        }
        self.more.as_mut().expect("just made")
    }

    /// Adds a channel the connect answer named, unless it is there already.
    fn add_channel(&mut self, name: &str) {
        if self.channels().any(|c| c == name) {
            return;
        }
        self.more();
        if !self.channels.is_empty() {
            self.channels.push(',');
        }
        self.channels.push_str(name);
    }

    /// The headers as the calls send them (an empty object when none were kept).
    fn headers(&self) -> serde_json::Value {
        self.more
            .as_ref()
            .and_then(|m| m.headers.as_deref())
            .and_then(|h| serde_json::from_str(h).ok())
            .unwrap_or_else(|| serde_json::Value::Object(serde_json::Map::new()))
    }
}

/// Why a proxied request is turned away.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Denied,
    Timeout,
    Failed,
    Busy,
}

fn transport_name(t: Transport) -> &'static str {
    match t {
        Transport::Sse => "sse",
        Transport::LongPoll => "longpoll",
        Transport::Tcp => "tcp",
        Transport::Ws => "websocket",
    }
}

/// The transport of a parked connection.
fn transport_of(kind: Kind) -> Option<Transport> {
    match kind {
        Kind::SseProxying => Some(Transport::Sse),
        Kind::PollProxying => Some(Transport::LongPoll),
        Kind::TcpProxying => Some(Transport::Tcp),
        Kind::WsProxying => Some(Transport::Ws),
        _ => None,
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Worker {
    /// A subscribe, asked of the connect and subscribe proxies first when they apply;
    /// otherwise (no proxy set) exactly `subscribe` then `adopt_grant`.
    pub(super) fn subscribe_gated(
        &mut self,
        idx: usize,
        req: Option<&Request<'_>>,
        channels: &[&str],
        last_id: Option<u64>,
        transport: Transport,
        grant: Grant,
    ) {
        let connect = self.cfg.proxy_connect_url.is_some();
        let subscribe = self.cfg.proxy_subscribe_url.is_some()
            && self.namespaces.any_proxy_subscribe()
            && channels
                .iter()
                .any(|c| self.namespaces.namespace_of(c).proxy_subscribe);
        if !connect && !subscribe {
            self.subscribe(idx, channels, last_id, transport);
            return self.adopt_grant(idx, grant);
        }
        // What would be refused anyway is refused before the backend is asked.
        if self.refuse_multi_channel_resume(idx, channels.len(), last_id, &transport)
            || self.refuse_by_namespace(idx, channels, &transport)
        {
            return;
        }
        let mut parked = Parked::new(channels);
        if !connect {
            parked.more().connected = true;
        }
        if last_id.is_some() {
            parked.more().last_id = last_id;
        }
        if let Grant::Until { exp_ms, user, info } = grant {
            let more = parked.more();
            more.exp_ms = Some(exp_ms);
            more.user = user;
            more.info = info;
        }
        if let (Some(req), Some(list)) = (req, self.cfg.proxy_headers.as_deref()) {
            let headers: serde_json::Map<_, _> = crate::proxy::parse_header_list(list)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|name| {
                    let value = req.header_str(&name)?;
                    Some((name, serde_json::Value::from(value)))
                })
                .collect();
            if !headers.is_empty() {
                let json = serde_json::Value::Object(headers).to_string();
                parked.more().headers = Some(json.into_boxed_str());
            }
        }
        let mut conn = self.conns.at(idx);
        conn.deadline = 0;
        conn.kind = match transport {
            Transport::Sse => Kind::SseProxying,
            Transport::LongPoll => Kind::PollProxying,
            Transport::Tcp => Kind::TcpProxying,
            Transport::Ws => Kind::WsProxying,
        };
        let token = self.conns.token(idx);
        self.proxies.parked.insert(token, parked);
        self.proxy_next(idx, token);
    }

    /// The parked subscribe's next call, or, with none left, the subscribe itself.
    fn proxy_next(&mut self, idx: usize, token: u64) {
        let Some(transport) = transport_of(self.conns[idx].kind) else {
            return;
        };
        let Some(mut p) = self.proxies.parked.remove(&token) else {
            return;
        };
        let ask = if !p.connected() {
            self.cfg.proxy_connect_url.as_ref().map(|_| Ask::Connect)
        } else {
            let namespaces = &self.namespaces;
            let next = (p.next()..p.asked()).find(|&i| {
                p.channel(i)
                    .is_some_and(|c| namespaces.namespace_of(c).proxy_subscribe)
            });
            match (&self.cfg.proxy_subscribe_url, next) {
                (Some(_), Some(i)) => {
                    p.more().next = i + 1;
                    Some(Ask::Subscribe)
                }
                _ => None,
            }
        };
        let Some(ask) = ask else {
            return self.proxied_subscribe(idx, transport, p);
        };
        if !self.proxy_call(ask, token, Some(p)) {
            self.proxy_refuse(idx, transport, Refusal::Busy, "");
        }
    }

    /// Every answer said yes: the subscribe goes on, then the identity the answers gave.
    fn proxied_subscribe(&mut self, idx: usize, transport: Transport, p: Parked) {
        let Parked { channels, more } = p;
        let more = more.map(|m| *m).unwrap_or_default();
        let names: Vec<&str> = channels.split(',').filter(|c| !c.is_empty()).collect();
        self.subscribe(idx, &names, more.last_id, transport);
        if !self.conns.contains(idx) {
            return;
        }
        self.adopt_identity(idx, more.exp_ms, more.user, more.info);
        // A WebSocket that went live at once: frames it sent while it waited.
        if self.conns[idx].kind == Kind::Ws {
            self.ws_resume_input(idx);
        }
    }

    /// The fields every call carries: the connection, its transport, its peer, its user.
    fn proxy_fields(
        &self,
        idx: usize,
        transport: Transport,
        user: Option<&str>,
    ) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        m.insert("conn".into(), self.conn_id(idx).to_string().into());
        m.insert("transport".into(), transport_name(transport).into());
        if let Ok(peer) = self.conns[idx].stream.peer_addr() {
            m.insert("remote".into(), peer.to_string().into());
        }
        if let Some(user) = user {
            m.insert("user".into(), user.into());
        }
        m
    }

    /// Asks for a call (made as soon as a proxy thread is free, built then from the
    /// connection's state); false (counted as busy) when this worker already has
    /// `proxy_max_in_flight` calls unanswered.
    fn proxy_call(&mut self, ask: Ask, token: u64, parked: Option<Parked>) -> bool {
        if self.proxies.in_flight() >= self.cfg.proxy_max_in_flight as usize {
            self.proxies.count(ask, "busy");
            return false;
        }
        let asked_ms = self.proxies.now_ms();
        self.proxies.waiting.push_back(Waiting {
            token,
            asked_ms,
            kind: ask,
            parked,
        });
        self.proxy_dispatch();
        true
    }

    /// Hands waiting calls to the pool, oldest first, while a thread is free for them; each
    /// one's URL and body are built now. A call whose connection is gone is dropped unmade.
    fn proxy_dispatch(&mut self) {
        while self.proxies.pool.has_room() {
            let Some(mut w) = self.proxies.waiting.pop_front() else {
                break;
            };
            if let Some(p) = w.parked.take() {
                // Back where the answer looks for it, unless its connection is gone.
                let (idx, generation) = super::conn_table::slot_of(w.token);
                if self
                    .conns
                    .get(idx)
                    .is_none_or(|c| c.generation != generation)
                {
                    continue;
                }
                self.proxies.parked.insert(w.token, p);
            }
            let waited = self.proxies.now_ms().wrapping_sub(w.asked_ms);
            let now = Instant::now();
            let asked = now
                .checked_sub(Duration::from_millis(u64::from(waited)))
                .unwrap_or(now);
            let publish = match w.kind {
                Ask::Publish => match self.proxies.publishes.remove(&w.token) {
                    Some(p) => Some(p),
                    None => continue,
                },
                _ => None,
            };
            let Some(body) = self.proxy_body(w.kind, w.token, publish.as_deref()) else {
                if matches!(w.kind, Ask::Connect | Ask::Subscribe) {
                    self.proxies.parked.remove(&w.token);
                }
                continue;
            };
            let url = match w.kind {
                Ask::Connect => &self.cfg.proxy_connect_url,
                Ask::Subscribe => &self.cfg.proxy_subscribe_url,
                Ask::Publish => &self.cfg.proxy_publish_url,
                Ask::Refresh => &self.cfg.proxy_refresh_url,
            };
            let Some(url) = url.clone() else {
                // A reload took the URL away while the call waited.
                self.proxies.unmade.push(Done {
                    kind: w.kind,
                    token: w.token,
                    answer: Answer::Failed(format!(
                        "the {} proxy URL was removed by a reload",
                        w.kind.name()
                    )),
                    micros: u64::from(waited) * 1000,
                    publish,
                });
                continue;
            };
            self.proxies.pool.submit(Call {
                kind: w.kind,
                token: w.token,
                url,
                body: serde_json::Value::Object(body).to_string().into_bytes(),
                deadline: asked + self.cfg.proxy_timeout,
                submitted: asked,
                publish,
            });
        }
    }

    /// The JSON a call sends, from the connection's state now; None when the connection it
    /// was for is gone or no longer waits for it (nothing is owed to anyone).
    fn proxy_body(
        &self,
        ask: Ask,
        token: u64,
        publish: Option<&(String, Vec<u8>)>,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        let (idx, generation) = super::conn_table::slot_of(token);
        let conn = self.conns.get(idx).filter(|c| c.generation == generation)?;
        let kind = conn.kind;
        match ask {
            Ask::Connect | Ask::Subscribe => {
                let transport = transport_of(kind)?;
                let p = self.proxies.parked.get(&token)?;
                let mut body = self.proxy_fields(idx, transport, p.user());
                if ask == Ask::Connect {
                    let channels: Vec<&str> = p.channels().collect();
                    body.insert("channels".into(), channels.into());
                } else {
                    let channel = p.channel(p.next().checked_sub(1)?)?;
                    body.insert("channel".into(), channel.into());
                }
                body.insert("headers".into(), p.headers());
                Some(body)
            }
            Ask::Publish => {
                let (channel, payload) = publish?;
                if kind != Kind::Ws {
                    return None;
                }
                let mut body = self.proxy_fields(idx, Transport::Ws, self.conns.user_of(token));
                body.insert("channel".into(), channel.as_str().into());
                crate::proxy::put_data(&mut body, payload);
                Some(body)
            }
            Ask::Refresh => {
                let transport = match kind {
                    Kind::Sse => Transport::Sse,
                    Kind::Ws => Transport::Ws,
                    Kind::TcpStream => Transport::Tcp,
                    _ => return None,
                };
                let mut body = self.proxy_fields(idx, transport, self.conns.user_of(token));
                let channels: Vec<String> = conn
                    .channel_indices()
                    .into_iter()
                    .filter_map(|c| self.channels.get(c).map(|ch| ch.name.to_string()))
                    .collect();
                body.insert("channels".into(), channels.into());
                Some(body)
            }
        }
    }

    /// Answers that came back from the proxy threads (on the waker's event, and every turn
    /// while calls are out, so an answer never waits on a lost wake-up).
    pub(super) fn proxy_answers(&mut self) {
        if self.handover.frozen || self.proxies.in_flight() == 0 {
            return;
        }
        let mut answers = std::mem::take(&mut self.proxies.unmade);
        answers.extend(self.proxies.pool.take_done());
        answers.extend(self.proxies.expired_waits(self.cfg.proxy_timeout));
        for done in answers {
            self.proxy_answer(done);
        }
        // Threads the answers freed take the oldest waiting calls.
        self.proxy_dispatch();
    }

    /// One answer: counted, then acted on by its kind.
    fn proxy_answer(&mut self, done: Done) {
        self.counters.latency.proxy.record(done.micros);
        let outcome = match &done.answer {
            Answer::Allow(_) => "allow",
            Answer::Deny(_) => "deny",
            Answer::Timeout => "timeout",
            Answer::Failed(why) => {
                if let Some(held_back) = self.proxies.errors.allow(Instant::now()) {
                    tracing::warn!(kind = done.kind.name(), error = %why, held_back, "backend proxy call failed");
                }
                "error"
            }
        };
        self.proxies.count(done.kind, outcome);
        match done.kind {
            Ask::Connect | Ask::Subscribe => self.on_gate_answer(done),
            Ask::Publish => self.on_publish_answer(done),
            Ask::Refresh => self.on_refresh_answer(done),
        }
    }

    /// A connect or subscribe answer for a parked subscribe.
    fn on_gate_answer(&mut self, done: Done) {
        let token = done.token;
        let Some(mut p) = self.proxies.parked.remove(&token) else {
            return;
        };
        let Some((idx, conn)) = self.conns.by_token(token) else {
            return;
        };
        let Some(transport) = transport_of(conn.kind) else {
            return;
        };
        let allow = match done.answer {
            Answer::Allow(allow) => allow,
            Answer::Deny(why) => return self.proxy_refuse(idx, transport, Refusal::Denied, &why),
            Answer::Timeout => return self.proxy_refuse(idx, transport, Refusal::Timeout, ""),
            Answer::Failed(_) => return self.proxy_refuse(idx, transport, Refusal::Failed, ""),
        };
        if done.kind == Ask::Connect {
            if let Err(why) = self.take_connect_answer(idx, &mut p, allow) {
                return self.proxy_refuse(idx, transport, Refusal::Failed, why);
            }
        }
        self.proxies.parked.insert(token, p);
        self.proxy_next(idx, token);
    }

    /// What a connect answer sets; Err when it names more channels than a subscription takes.
    fn take_connect_answer(
        &self,
        idx: usize,
        p: &mut Parked,
        allow: Allow,
    ) -> Result<(), &'static str> {
        let more = p.more();
        more.connected = true;
        if let Some(user) = allow.user {
            more.user = Some(user.into());
        }
        if let Some(info) = allow.info {
            more.info = Some(info.into());
        }
        if let Some(at) = allow.expire_at {
            more.exp_ms = Some(at.saturating_mul(1000));
        }
        for c in &allow.channels {
            p.add_channel(c);
        }
        let count = p.count();
        if count > self.cfg.max_channels_per_sub {
            return Err("the connect proxy's channels make more than max_channels_per_sub");
        }
        let plain =
            self.conns[idx].kind == Kind::WsProxying && self.conns[idx].flags & WS_ENVELOPE == 0;
        if plain && count > 1 {
            return Err("format=plain takes one channel; the connect proxy added more");
        }
        Ok(())
    }

    /// Turns a proxied request away in its transport's way, counted.
    fn proxy_refuse(&mut self, idx: usize, transport: Transport, why: Refusal, reason: &str) {
        let r = &mut self.counters.refused;
        match why {
            Refusal::Denied => r.forbidden += 1,
            Refusal::Timeout | Refusal::Failed => r.proxy_failed += 1,
            Refusal::Busy => r.busy += 1,
        }
        let message = match why {
            Refusal::Denied => format!("refused by the backend: {}", clip(reason, 300)),
            Refusal::Timeout => "the backend did not answer in time; retry later".to_string(),
            Refusal::Failed if reason.is_empty() => {
                "the backend call failed; retry later".to_string()
            }
            Refusal::Failed => format!("the backend's answer could not be used: {reason}"),
            Refusal::Busy => "server busy: too many backend calls waiting; retry later".into(),
        };
        match transport {
            Transport::Sse | Transport::LongPoll => {
                let (status, extra) = match why {
                    Refusal::Denied => (403, ""),
                    Refusal::Timeout => (504, "Retry-After: 1\r\n"),
                    Refusal::Failed => (502, "Retry-After: 1\r\n"),
                    Refusal::Busy => (503, "Retry-After: 1\r\n"),
                };
                let answer = self.error_answer(idx, status, &message, extra);
                self.reply_and_close(idx, answer);
            }
            Transport::Ws => {
                let code = match why {
                    Refusal::Denied => CLOSE_REFUSED,
                    Refusal::Timeout | Refusal::Busy => close::TRY_AGAIN_LATER,
                    Refusal::Failed => CLOSE_BAD_GATEWAY,
                };
                self.ws_close(idx, code, clip(&message, MAX_CLOSE_REASON));
            }
            Transport::Tcp => self.reply_and_close(idx, line::encode_err(&message)),
        }
    }

    /// A WebSocket client message to a channel whose namespace asks the publish proxy: asked,
    /// with the connection's later frames held until the answer. False when the proxy does
    /// not apply (publish as usual).
    pub(super) fn publish_by_proxy(&mut self, idx: usize, channel: &str, payload: &[u8]) -> bool {
        if self.cfg.proxy_publish_url.is_none() {
            return false;
        }
        if !self.namespaces.namespace_of(channel).proxy_publish {
            return false;
        }
        let token = self.conns.token(idx);
        let message = Box::new((channel.to_string(), payload.to_vec()));
        self.proxies.publishes.insert(token, message);
        // Set first: a call made at once is answered on a later turn, never within this one.
        self.conns.at(idx).edge |= PROXY_PENDING;
        if !self.proxy_call(Ask::Publish, token, None) {
            self.proxies.publishes.remove(&token);
            self.conns.at(idx).edge &= !PROXY_PENDING;
            self.proxy_refuse(idx, Transport::Ws, Refusal::Busy, "");
        }
        true
    }

    fn on_publish_answer(&mut self, done: Done) {
        let Some((idx, mut conn)) = self.conns.by_token(done.token) else {
            return;
        };
        if conn.kind != Kind::Ws || conn.edge & PROXY_PENDING == 0 {
            return;
        }
        conn.edge &= !PROXY_PENDING;
        let Some(message) = done.publish else {
            return;
        };
        let (channel, payload) = *message;
        match done.answer {
            Answer::Allow(allow) => {
                let payload = allow.data.unwrap_or(payload);
                if payload.len() > self.cfg.max_payload {
                    let why = "the publish proxy's data is over max_payload";
                    return self.proxy_refuse(idx, Transport::Ws, Refusal::Failed, why);
                }
                self.ws_publish(idx, channel, payload);
            }
            Answer::Deny(why) => {
                return self.proxy_refuse(idx, Transport::Ws, Refusal::Denied, &why)
            }
            Answer::Timeout => return self.proxy_refuse(idx, Transport::Ws, Refusal::Timeout, ""),
            Answer::Failed(_) => return self.proxy_refuse(idx, Transport::Ws, Refusal::Failed, ""),
        }
        if self.conns.get(idx).is_some_and(|c| c.kind == Kind::Ws) {
            self.ws_resume_input(idx);
        }
    }

    /// Frames a WebSocket received while it could not take them (joining, or a publish
    /// waiting for the proxy), and reading on if it stopped at a full buffer.
    pub(super) fn ws_resume_input(&mut self, idx: usize) {
        if let Some(mut pending) = self.conns.get_mut(idx).and_then(|mut c| c.take_inbuf()) {
            let used = self.ws_input(idx, pending.unused_mut());
            pending.consume(used);
            if let Some(mut conn) = self.conns.get_mut(idx) {
                if conn.kind != Kind::Closing {
                    conn.keep_inbuf(pending);
                }
            }
        }
        // Edge-triggered: no new event comes for the bytes still in the socket.
        if self.conns.get(idx).is_some_and(|c| {
            c.kind == Kind::Ws && c.flags & READ_PAUSED != 0 && c.edge & PROXY_PENDING == 0
        }) {
            self.on_readable(idx, ReadUntil::WouldBlock);
        }
    }

    /// A held stream reached its expiry: with a refresh proxy it is asked (true) instead of
    /// ending.
    pub(super) fn refresh_by_proxy(&mut self, idx: usize) -> bool {
        if self.cfg.proxy_refresh_url.is_none()
            || !matches!(self.conns[idx].kind, Kind::Sse | Kind::Ws | Kind::TcpStream)
        {
            return false;
        }
        let token = self.conns.token(idx);
        if self.proxy_call(Ask::Refresh, token, None) {
            return true;
        }
        self.refresh_failed(idx, token)
    }

    /// A refresh call failed: tried again after [`REFRESH_RETRY`] (true), or, after
    /// [`REFRESH_TRIES`] failures in a row, the stream ends (false).
    fn refresh_failed(&mut self, idx: usize, token: u64) -> bool {
        let tries = self.proxies.refresh_failures.entry(token).or_insert(0);
        *tries += 1;
        if *tries >= REFRESH_TRIES {
            self.proxies.refresh_failures.remove(&token);
            return false;
        }
        self.arm_timer(idx, REFRESH_RETRY);
        true
    }

    fn on_refresh_answer(&mut self, done: Done) {
        let token = done.token;
        let Some((idx, conn)) = self.conns.by_token(token) else {
            self.proxies.refresh_failures.remove(&token);
            return;
        };
        if conn.edge & EXPIRES == 0 || !matches!(conn.kind, Kind::Sse | Kind::Ws | Kind::TcpStream)
        {
            return;
        }
        match done.answer {
            Answer::Allow(allow) if !allow.expired => {
                self.proxies.refresh_failures.remove(&token);
                match allow.expire_at.map(|s| s.saturating_mul(1000)) {
                    Some(ms) if ms > crate::auth::key::now_millis() => self.set_expiry(idx, ms),
                    Some(_) => self.end_expired(idx),
                    // No expiry: the stream no longer ends on its own.
                    None => self.conns.at(idx).edge &= !EXPIRES,
                }
            }
            Answer::Allow(_) | Answer::Deny(_) => {
                self.proxies.refresh_failures.remove(&token);
                self.end_expired(idx);
            }
            Answer::Timeout | Answer::Failed(_) => {
                if !self.refresh_failed(idx, token) {
                    self.end_expired(idx);
                }
            }
        }
    }

    /// New worker after a live upgrade: what waited on the predecessor's proxy calls is told
    /// to retry (the calls' answers went to the old process).
    pub(super) fn proxy_after_takeover(&mut self, idx: usize) {
        let Some(conn) = self.conns.get(idx) else {
            return;
        };
        let (kind, edge) = (conn.kind, conn.edge);
        if let Some(transport) = transport_of(kind) {
            return self.proxy_refuse(idx, transport, Refusal::Busy, "");
        }
        if edge & PROXY_PENDING != 0 {
            self.conns.at(idx).edge &= !PROXY_PENDING;
            return self.proxy_refuse(idx, Transport::Ws, Refusal::Busy, "");
        }
        // A refresh that was out: asked again now.
        let live = matches!(kind, Kind::Sse | Kind::Ws | Kind::TcpStream);
        if live && edge & EXPIRES != 0 && conn.deadline == 0 {
            self.arm_timer(idx, Duration::ZERO);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a connection waiting on the backend costs beyond its slot: the usual parked
    /// subscribe is 32 bytes with no heap block, carried in its 48-byte queue entry while it
    /// waits for a thread.
    #[test]
    fn the_usual_parked_subscribe_owns_no_heap_block() {
        let p = Parked::new(&["room"]);
        assert!(p.more.is_none());
        assert!(!p.channels.is_heap_allocated());
        assert_eq!(p.channels().collect::<Vec<_>>(), ["room"]);
        assert!(!p.connected());
        assert_eq!((p.next(), p.asked()), (0, 1));
        assert_eq!(p.headers(), serde_json::json!({}));
        // Names up to 24 bytes in all stay inline.
        let p = Parked::new(&["news", "sport", "weather.eu"]);
        assert!(!p.channels.is_heap_allocated() && p.more.is_none());
        assert_eq!(p.count(), 3);
        assert_eq!(std::mem::size_of::<Parked>(), 32);
        assert_eq!(std::mem::size_of::<Waiting>(), 48);
    }

    #[test]
    fn channels_the_connect_answer_adds_are_not_the_clients() {
        let mut p = Parked::new(&["a", "b"]);
        p.add_channel("b");
        assert!(p.more.is_none(), "nothing new, nothing kept");
        p.add_channel("user:ann");
        assert_eq!(p.channels().collect::<Vec<_>>(), ["a", "b", "user:ann"]);
        assert_eq!((p.asked(), p.count()), (2, 3));
        assert_eq!(p.channel(2), Some("user:ann"));
        assert_eq!(p.channel(3), None);
        p.more().headers = Some(r#"{"Cookie":"sid=1"}"#.into());
        assert_eq!(p.headers(), serde_json::json!({"Cookie": "sid=1"}));
    }
}
