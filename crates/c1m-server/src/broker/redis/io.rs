//! The two Redis connections and their threads. The command thread takes requests from the
//! master, sends them to Redis as one pipeline per batch and returns the answers; the pub/sub
//! thread reads the channel messages this node subscribed to. Both reconnect with backoff and
//! report up/down. Everything the threads send the master goes through one bounded queue
//! (a full queue holds the thread back, and Redis then holds or drops the subscriber
//! connection: a drop is caught up from history on reconnect) and wakes the master's poll.

use super::script;
use redis::Value;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most requests sent to Redis in one pipeline.
const BATCH: usize = 512;
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
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
    fn tag(&self) -> Option<u64> {
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
    pubsub_writer: Mutex<Option<TcpStream>>,
}

impl Shared {
    pub fn new(waker: mio::Waker) -> Shared {
        Shared {
            command_up: AtomicBool::new(false),
            wake_pending: AtomicBool::new(false),
            waker,
            pubsub_writer: Mutex::new(None),
        }
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

    fn send(&self, tx: &SyncSender<Incoming>, msg: Incoming) -> bool {
        if tx.send(msg).is_err() {
            return false; // the master is gone
        }
        if !self.wake_pending.swap(true, Ordering::SeqCst) {
            let _ = self.waker.wake();
        }
        true
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Option<TcpStream>> {
        self.pubsub_writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Where Redis is.
#[derive(Debug, Clone)]
pub struct Target {
    pub client: redis::Client,
    pub addr: String,
    pub db: i64,
}

fn backoff(d: Duration) -> Duration {
    (d * 2).min(BACKOFF_MAX)
}

/// Runs the command connection until the master goes away.
pub fn command_thread(
    target: Target,
    requests: Receiver<Request>,
    tx: SyncSender<Incoming>,
    shared: Arc<Shared>,
) {
    let scripts = Scripts {
        publish: redis::Script::new(&script::publish_script()),
        replay: redis::Script::new(&script::replay_script()),
        presence: redis::Script::new(script::PRESENCE),
        info: redis::Script::new(script::INFO),
    };
    let mut delay = BACKOFF_MIN;
    loop {
        let mut con = match connect_commands(&target, &scripts) {
            Ok(con) => con,
            Err(e) => {
                log_once(&format!("c1m: redis {}: {e}; retrying", target.addr));
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
        tracing::info!(redis = %target.addr, "broker connected");
        let lost = serve_commands(&mut con, &target, &scripts, &requests, &tx, &shared);
        shared.command_up.store(false, Ordering::SeqCst);
        match lost {
            None => return,
            Some(e) => {
                tracing::warn!(redis = %target.addr, error = %e, "broker connection lost; reconnecting");
                if !shared.send(&tx, Incoming::CommandDown) {
                    return;
                }
            }
        }
    }
}

/// Prints a message, but not the same one over and over while Redis stays down.
fn log_once(msg: &str) {
    static LAST: Mutex<String> = Mutex::new(String::new());
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if *last != msg {
        tracing::warn!("{msg}");
        *last = msg.to_string();
    }
}

fn connect_commands(target: &Target, scripts: &Scripts) -> redis::RedisResult<redis::Connection> {
    let mut con = target.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    con.set_read_timeout(Some(IO_TIMEOUT))?;
    con.set_write_timeout(Some(IO_TIMEOUT))?;
    // Loaded now so that the pipeline can use EVALSHA (a restarted Redis has forgotten them).
    for s in [
        &scripts.publish,
        &scripts.replay,
        &scripts.presence,
        &scripts.info,
    ] {
        s.load(&mut con)?;
    }
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
                        .arg(target.db);
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
                    tracing::warn!(error = ?e, "redis refused a request");
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
                    tracing::warn!(error = %e, "redis refused a request");
                    shared.send(tx, Incoming::Answer { tag, value: None });
                }
            }
        }
    }
}

/// Writes a (UN)SUBSCRIBE to the pub/sub connection; a failure shuts it down, and the pub/sub
/// thread's reconnect re-subscribes everything.
fn pubsub_write(shared: &Shared, verb: &str, name: &str) {
    let mut writer = shared.writer();
    let Some(stream) = writer.as_mut() else {
        return;
    };
    let bytes = redis::cmd(verb).arg(name).get_packed_command();
    if stream.write_all(&bytes).is_err() {
        let _ = stream.shutdown(std::net::Shutdown::Both);
        *writer = None;
    }
}

/// Runs the pub/sub connection until the master goes away.
pub fn pubsub_thread(target: Target, tx: SyncSender<Incoming>, shared: Arc<Shared>) {
    let mut delay = BACKOFF_MIN;
    loop {
        match connect_pubsub(&target) {
            Ok(stream) => {
                delay = BACKOFF_MIN;
                let reader = match stream.try_clone() {
                    Ok(r) => r,
                    Err(_) => continue,
                };
                *shared.writer() = Some(stream);
                if !shared.send(&tx, Incoming::PubSubUp) {
                    return;
                }
                let gone = read_pubsub(reader, &target, &tx, &shared);
                if let Some(stream) = shared.writer().take() {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                }
                if gone || !shared.send(&tx, Incoming::PubSubDown) {
                    return;
                }
            }
            Err(e) => log_once(&format!(
                "c1m: redis {} (pub/sub): {e}; retrying",
                target.addr
            )),
        }
        std::thread::sleep(delay);
        delay = backoff(delay);
    }
}

fn connect_pubsub(target: &Target) -> anyhow::Result<TcpStream> {
    use anyhow::Context;
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&target.addr)
        .with_context(|| format!("resolving {}", target.addr))?
        .next()
        .with_context(|| format!("{} resolves to nothing", target.addr))?;
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_nodelay(true)?;
    // Writes (SUBSCRIBE) come from the command thread; one stuck this long means Redis is gone.
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(stream)
}

/// Reads pub/sub pushes until the connection ends. True when the master is gone.
fn read_pubsub(
    stream: TcpStream,
    target: &Target,
    tx: &SyncSender<Incoming>,
    shared: &Shared,
) -> bool {
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut parser = redis::Parser::new();
    loop {
        let Ok(value) = parser.parse_value(&mut reader) else {
            return false;
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
