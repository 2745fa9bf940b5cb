//! The two Redis connections and their threads. The command thread takes requests from the
//! master, sends them to Redis as one pipeline per batch and returns the answers; the pub/sub
//! thread reads the channel messages this node subscribed to. Both reconnect with backoff and
//! report up/down. Everything the threads send the master goes through one bounded queue
//! (a full queue holds the thread back, and Redis then holds or drops the subscriber
//! connection: a drop is caught up from history on reconnect) and wakes the master's poll.

use super::pubsub_conn::{self, Writer};
use super::script;
pub use super::target::Target;
use crate::broker::IDEMPOTENCY_TTL;
use redis::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most requests sent to Redis in one pipeline.
pub(super) const BATCH: usize = 512;
pub(super) const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A Redis that does not answer within this is taken as gone (the connection is remade).
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Master → command thread.
pub enum Request {
    Publish {
        tag: u64,
        channel: String,
        payload: Vec<u8>,
        max_count: usize,
        max_age_ms: u64,
        /// `Idempotency-Key` ('' = none).
        key: String,
    },
    Replay {
        tag: u64,
        channels: Vec<String>,
        after: Option<u64>,
        cap: usize,
        max_age_ms: u64,
    },
    /// One of the small scripts with plain arguments.
    Script {
        tag: u64,
        which: Which,
        args: Vec<String>,
    },
    Subscribe(String),
    Unsubscribe(String),
}

#[derive(Debug, Clone, Copy)]
pub enum Which {
    Presence,
    Info,
}

/// The scripts, loaded on every (re)connection so the pipeline can use EVALSHA.
struct Scripts {
    publish: redis::Script,
    replay: redis::Script,
    presence: redis::Script,
    info: redis::Script,
}

impl Request {
    pub(super) fn tag(&self) -> Option<u64> {
        match self {
            Request::Publish { tag, .. }
            | Request::Replay { tag, .. }
            | Request::Script { tag, .. } => Some(*tag),
            _ => None,
        }
    }
}

/// Threads → master.
pub enum Incoming {
    CommandUp,
    CommandDown,
    /// The answer to the request `tag`; `None` when it failed (connection lost, or Redis
    /// refused it).
    Answer {
        tag: u64,
        value: Option<Value>,
    },
    PubSubUp,
    PubSubDown,
    Subscribed(String),
    /// Redis Cluster: this channel's subscription ended (its slot moved, or its master's
    /// pub/sub connection was lost); it is to be subscribed again and caught up.
    Lost(String),
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
    },
}

/// What both threads and the master share.
pub struct Shared {
    pub command_up: AtomicBool,
    /// Set when the master has been woken and has not drained yet: one wake per batch.
    wake_pending: AtomicBool,
    waker: mio::Waker,
    /// The pub/sub socket's write side (SUBSCRIBE and UNSUBSCRIBE go through it).
    pubsub_writer: Mutex<Option<Writer>>,
    /// Connection attempts (either connection) that failed, for any reason.
    pub connect_failures: AtomicU64,
    /// Of those, the ones Redis refused for a reason an operator must fix (credentials,
    /// permissions, an untrusted certificate): see `pubsub_conn::Refused`.
    pub auth_failures: AtomicU64,
    /// Pub/sub connections dropped because they went silent (not even a PING answered).
    pub dead_links: AtomicU64,
    /// The newest error Redis answered a request with (e.g. `OOM command not allowed …`),
    /// named in the 503 of a publish it refused.
    last_refusal: Mutex<String>,
    /// Such errors are logged once per 10 s with the count held back: an OOM Redis refuses
    /// every publish, and a line per publish would flood the log.
    refusal_log: Mutex<crate::log::Limited>,
}

impl Shared {
    pub fn new(waker: mio::Waker) -> Shared {
        Shared {
            command_up: AtomicBool::new(false),
            wake_pending: AtomicBool::new(false),
            waker,
            pubsub_writer: Mutex::new(None),
            connect_failures: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            dead_links: AtomicU64::new(0),
            last_refusal: Mutex::new(String::new()),
            refusal_log: Mutex::new(crate::log::Limited::every(
                crate::log::REFUSAL_SUMMARY_EVERY,
            )),
        }
    }

    /// Records an error Redis answered a request with, and logs it (rate-limited).
    pub fn refused(&self, error: &str) {
        let error = error.trim();
        *self.last_refusal.lock().unwrap_or_else(|e| e.into_inner()) = error.to_string();
        let allowed = self
            .refusal_log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .allow(std::time::Instant::now());
        if let Some(held_back) = allowed {
            tracing::warn!(error = %error, held_back, "redis refused a request");
        }
    }

    /// The newest error Redis answered with ("" when none yet).
    pub fn last_refusal(&self) -> String {
        self.last_refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Called by the master before it drains.
    pub fn woken(&self) {
        self.wake_pending.store(false, Ordering::SeqCst);
    }

    /// The master stopped draining with more queued: poll again at once.
    pub fn rewake(&self) {
        self.wake_pending.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    pub(super) fn send(&self, tx: &SyncSender<Incoming>, msg: Incoming) -> bool {
        if tx.send(msg).is_err() {
            return false; // the master is gone
        }
        if !self.wake_pending.swap(true, Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
        true
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Option<Writer>> {
        self.pubsub_writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a pub/sub link found dead (the caller drops it and reconnects).
    pub(super) fn dead_link(&self, shown: &str) {
        self.dead_links.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(redis = %shown, "pub/sub connection silent, PING unanswered; reconnecting");
    }

    /// Counts a failed connection attempt.
    pub(super) fn failed(&self, refused: bool) {
        self.connect_failures.fetch_add(1, Ordering::Relaxed);
        if refused {
            self.auth_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One connection of each kind, made and dropped at start: a refusal (wrong password, no
/// permission, untrusted certificate) is returned so the node does not start misconfigured;
/// Redis simply being down is not an error (the threads keep trying).
pub fn probe(target: &Target) -> anyhow::Result<()> {
    let scripts = Scripts::new();
    match connect_commands(target, &scripts) {
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

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            publish: redis::Script::new(&script::publish_script()),
            replay: redis::Script::new(&script::replay_script()),
            presence: redis::Script::new(&script::presence_script(false)),
            info: redis::Script::new(&script::info_script(false)),
        }
    }
}

pub(super) fn backoff(d: Duration) -> Duration {
    (d * 2).min(BACKOFF_MAX)
}

/// Runs the command connection until the master goes away.
pub fn command_thread(
    target: Target,
    requests: Receiver<Request>,
    tx: SyncSender<Incoming>,
    shared: Arc<Shared>,
) {
    let scripts = Scripts::new();
    let mut delay = BACKOFF_MIN;
    loop {
        let mut con = match connect_commands(&target, &scripts) {
            Ok(con) => con,
            Err(e) => {
                let refused = pubsub_conn::is_refusal(&e);
                shared.failed(refused);
                let why = if refused {
                    " (refused: check the URL's user and password, the ACL, --broker-ca)"
                } else {
                    ""
                };
                log_once(&format!("c1m: redis {}: {e}{why}; retrying", target.shown));
                // Nothing can be answered while down: fail what waits, keep (un)subscribes
                // (the master re-subscribes everything when pub/sub is back anyway).
                if !fail_waiting(&target, &requests, &tx, &shared, delay) {
                    return;
                }
                delay = backoff(delay);
                continue;
            }
        };
        delay = BACKOFF_MIN;
        shared.command_up.store(true, Ordering::SeqCst);
        if !shared.send(&tx, Incoming::CommandUp) {
            return;
        }
        tracing::info!(redis = %target.shown, "broker connected");
        let lost = serve_commands(&mut con, &target, &scripts, &requests, &tx, &shared);
        shared.command_up.store(false, Ordering::SeqCst);
        match lost {
            None => return,
            Some(e) => {
                tracing::warn!(redis = %target.shown, error = %e, "broker connection lost; reconnecting");
                if !shared.send(&tx, Incoming::CommandDown) {
                    return;
                }
            }
        }
    }
}

/// Prints a message, but not the same one over and over while Redis stays down.
pub(super) fn log_once(msg: &str) {
    static LAST: Mutex<String> = Mutex::new(String::new());
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if *last != msg {
        tracing::warn!("{msg}");
        *last = msg.to_string();
    }
}

fn connect_commands(target: &Target, scripts: &Scripts) -> redis::RedisResult<redis::Connection> {
    // Loaded now so that the pipeline can use EVALSHA (a restarted Redis has forgotten them).
    connect_with(target, |con| {
        for s in [
            &scripts.publish,
            &scripts.replay,
            &scripts.presence,
            &scripts.info,
        ] {
            s.load(con)?;
        }
        Ok(())
    })
}

/// A command connection with its I/O timeouts, `prepare`d (scripts loaded) before use.
pub(super) fn connect_with(
    target: &Target,
    prepare: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<()>,
) -> redis::RedisResult<redis::Connection> {
    let mut con = target.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    con.set_read_timeout(Some(IO_TIMEOUT))?;
    con.set_write_timeout(Some(IO_TIMEOUT))?;
    prepare(&mut con)?;
    Ok(con)
}

/// While the command connection is down: waits `delay` for requests and fails each publish,
/// replay and script at once. (UN)SUBSCRIBEs still go to the pub/sub connection, which may be
/// up: dropping one would leave its channel waiting for a confirmation that never comes.
/// False when the master is gone.
fn fail_waiting(
    target: &Target,
    requests: &Receiver<Request>,
    tx: &SyncSender<Incoming>,
    shared: &Shared,
    delay: Duration,
) -> bool {
    let deadline = std::time::Instant::now() + delay;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match requests.recv_timeout(left) {
            Ok(Request::Subscribe(ch)) => {
                pubsub_write(shared, "SUBSCRIBE", &script::pubsub_name(target.db, &ch))
            }
            Ok(Request::Unsubscribe(ch)) => {
                pubsub_write(shared, "UNSUBSCRIBE", &script::pubsub_name(target.db, &ch))
            }
            Ok(req) => {
                if let Some(tag) = req.tag() {
                    if !shared.send(tx, Incoming::Answer { tag, value: None }) {
                        return false;
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}

/// Serves requests until the connection fails (Some(error)) or the master goes (None).
fn serve_commands(
    con: &mut redis::Connection,
    target: &Target,
    scripts: &Scripts,
    requests: &Receiver<Request>,
    tx: &SyncSender<Incoming>,
    shared: &Shared,
) -> Option<redis::RedisError> {
    let start_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(1)
    };
    loop {
        let first = requests.recv().ok()?;
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match requests.try_recv() {
                Ok(r) => batch.push(r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return None,
            }
        }
        let mut packed = Vec::new();
        let mut tags = Vec::new();
        for req in &batch {
            let cmd = match req {
                Request::Publish {
                    tag,
                    channel,
                    payload,
                    max_count,
                    max_age_ms,
                    key,
                } => {
                    tags.push(*tag);
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(scripts.publish.get_hash())
                        .arg(0)
                        .arg(channel)
                        .arg(payload)
                        .arg(*max_count)
                        .arg(*max_age_ms)
                        .arg(start_us())
                        .arg(target.db)
                        .arg(key)
                        .arg(IDEMPOTENCY_TTL.as_millis() as u64);
                    cmd
                }
                Request::Replay {
                    tag,
                    channels,
                    after,
                    cap,
                    max_age_ms,
                } => {
                    tags.push(*tag);
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(scripts.replay.get_hash())
                        .arg(0)
                        .arg(after.map(|a| a.to_string()).unwrap_or_default())
                        .arg(*cap)
                        .arg(*max_age_ms)
                        .arg(start_us())
                        .arg(channels);
                    cmd
                }
                Request::Script { tag, which, args } => {
                    tags.push(*tag);
                    let script = match which {
                        Which::Presence => &scripts.presence,
                        Which::Info => &scripts.info,
                    };
                    let mut cmd = redis::cmd("EVALSHA");
                    cmd.arg(script.get_hash()).arg(0).arg(args);
                    cmd
                }
                Request::Subscribe(ch) => {
                    pubsub_write(shared, "SUBSCRIBE", &script::pubsub_name(target.db, ch));
                    continue;
                }
                Request::Unsubscribe(ch) => {
                    pubsub_write(shared, "UNSUBSCRIBE", &script::pubsub_name(target.db, ch));
                    continue;
                }
            };
            packed.extend(cmd.get_packed_command());
        }
        if tags.is_empty() {
            continue;
        }
        // One write for the whole batch, then the answers in order: a pipeline.
        let sent = con.send_packed_command(&packed);
        for (i, &tag) in tags.iter().enumerate() {
            let answer = match &sent {
                Ok(()) => con.recv_response(),
                Err(e) => Err(e.clone()),
            };
            match answer {
                Ok(Value::ServerError(e)) => {
                    let text = match e.details() {
                        Some(detail) => format!("{} {detail}", e.code()),
                        None => e.code().to_string(),
                    };
                    shared.refused(&text);
                    shared.send(tx, Incoming::Answer { tag, value: None });
                }
                Ok(value) => {
                    shared.send(
                        tx,
                        Incoming::Answer {
                            tag,
                            value: Some(value),
                        },
                    );
                }
                Err(e) if e.is_unrecoverable_error() || e.is_io_error() || e.is_timeout() => {
                    for &tag in &tags[i..] {
                        shared.send(tx, Incoming::Answer { tag, value: None });
                    }
                    return Some(e);
                }
                Err(e) => {
                    shared.refused(&e.to_string());
                    shared.send(tx, Incoming::Answer { tag, value: None });
                }
            }
        }
    }
}

/// Writes a (UN)SUBSCRIBE to the pub/sub connection; a failure shuts it down, and the pub/sub
/// thread's reconnect re-subscribes everything.
fn pubsub_write(shared: &Shared, verb: &str, name: &str) {
    pubsub_conn::write_or_shut(&mut shared.writer(), redis::cmd(verb).arg(name));
}

/// Runs the pub/sub connection until the master goes away.
pub fn pubsub_thread(target: Target, tx: SyncSender<Incoming>, shared: Arc<Shared>) {
    let mut delay = BACKOFF_MIN;
    loop {
        match pubsub_conn::connect(&target, CONNECT_TIMEOUT) {
            Ok((mut conn, writer)) => {
                delay = BACKOFF_MIN;
                *shared.writer() = Some(writer);
                if !shared.send(&tx, Incoming::PubSubUp) {
                    return;
                }
                let gone = read_pubsub(&mut conn, &target, &tx, &shared);
                if let Some(writer) = shared.writer().take() {
                    writer.shutdown();
                }
                if gone || !shared.send(&tx, Incoming::PubSubDown) {
                    return;
                }
            }
            Err(e) => {
                let refused = pubsub_conn::is_refused(&e);
                shared.failed(refused);
                log_once(&format!(
                    "c1m: redis {} (pub/sub): {e:#}; retrying",
                    target.shown
                ))
            }
        }
        std::thread::sleep(delay);
        delay = backoff(delay);
    }
}

/// Reads pub/sub pushes until the connection ends. True when the master is gone.
fn read_pubsub(
    conn: &mut pubsub_conn::Conn,
    target: &Target,
    tx: &SyncSender<Incoming>,
    shared: &Shared,
) -> bool {
    let mut ping = || pubsub_conn::write_or_shut(&mut shared.writer(), &redis::cmd("PING"));
    loop {
        let value = match conn.next_watched(&mut ping) {
            pubsub_conn::Next::Value(v) => v,
            pubsub_conn::Next::Dead => {
                shared.dead_link(&target.shown);
                return false;
            }
            pubsub_conn::Next::Closed => return false,
        };
        let Value::Array(parts) = value else {
            continue;
        };
        let msg = match parts.as_slice() {
            [Value::BulkString(kind), Value::BulkString(name), Value::BulkString(data)]
                if kind == b"message" =>
            {
                let (Some(channel), Some((id, payload))) = (
                    script::channel_of(target.db, name),
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
            [Value::BulkString(kind), Value::BulkString(name), _] if kind == b"subscribe" => {
                let Some(channel) = script::channel_of(target.db, name) else {
                    continue;
                };
                Incoming::Subscribed(channel.to_string())
            }
            _ => continue,
        };
        if !shared.send(tx, msg) {
            return true;
        }
    }
}

/// A bounded send for the master's side: false when the queue is full.
pub fn try_request(tx: &SyncSender<Request>, req: Request) -> Result<(), Request> {
    match tx.try_send(req) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(r)) | Err(TrySendError::Disconnected(r)) => Err(r),
    }
}
