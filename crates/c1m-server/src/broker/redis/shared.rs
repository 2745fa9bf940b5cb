//! What the connection threads and the master share, in both modes: the up flag and counters
//! behind `/status`, the rate-limited log of Redis' refusals, the one wake per batch of the
//! master's poll ([`Link`]), and the connection constants (timeouts, backoff) every thread
//! reconnects by.

use super::protocol::Incoming;
use super::target::Target;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most requests sent to Redis in one pipeline.
pub const BATCH: usize = 512;
pub const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// A Redis that does not answer within this is taken as gone (the connection is remade).
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The next wait after a failed attempt.
pub fn backoff(d: Duration) -> Duration {
    (d * 2).min(BACKOFF_MAX)
}

/// What the threads and the master share.
pub struct Shared {
    pub command_up: AtomicBool,
    /// Set when the master has been woken and has not drained yet: one wake per batch.
    wake_pending: AtomicBool,
    waker: mio::Waker,
    /// Connection attempts (any connection) that failed, for any reason.
    pub connect_failures: AtomicU64,
    /// Of those, the ones Redis refused for a reason an operator must fix (credentials,
    /// permissions, an untrusted certificate): see `pubsub_conn::Refused`.
    pub auth_failures: AtomicU64,
    /// Pub/sub connections dropped because they went silent (not even a PING answered).
    pub dead_links: AtomicU64,
    /// Messages on c1m's own pub/sub names this build could not read (see `Push::Unreadable`).
    pub unreadable: AtomicU64,
    unreadable_log: Mutex<crate::log::Limited>,
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
            connect_failures: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            dead_links: AtomicU64::new(0),
            unreadable: AtomicU64::new(0),
            unreadable_log: Mutex::new(crate::log::Limited::every(
                crate::log::REFUSAL_SUMMARY_EVERY,
            )),
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
        if let Some(held_back) = allow_now(&self.refusal_log) {
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

    /// Counts a pub/sub link found dead (the caller drops it and reconnects).
    pub fn dead_link(&self, shown: &str) {
        self.dead_links.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(redis = %shown, "pub/sub connection silent, PING unanswered; reconnecting");
    }

    /// Counts a message this build could not read, logged at most once per 10 s with the
    /// count held back: a node of another version publishes many.
    pub fn unreadable(&self, shown: &str, what: &str) {
        self.unreadable.fetch_add(1, Ordering::Relaxed);
        if let Some(held_back) = allow_now(&self.unreadable_log) {
            tracing::warn!(redis = %shown, what, held_back, "unreadable {what} from the broker ignored (a node of another c1m version, or another program publishing on c1m's names?)");
        }
    }

    /// Counts a failed connection attempt.
    pub fn failed(&self, refused: bool) {
        self.connect_failures.fetch_add(1, Ordering::Relaxed);
        if refused {
            self.auth_failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether a line of a rate-limited log (shared by the Redis threads) may go out now, and how
/// many were held back since the last.
fn allow_now(log: &Mutex<crate::log::Limited>) -> Option<u64> {
    log.lock()
        .unwrap_or_else(|e| e.into_inner())
        .allow(std::time::Instant::now())
}

/// A thread's way to the master: the bounded queue (a full queue holds the thread back, and
/// Redis then holds or drops the subscriber connection: a drop is caught up from history on
/// reconnect) and the shared state.
#[derive(Clone)]
pub struct Link {
    pub tx: SyncSender<Incoming>,
    pub shared: Arc<Shared>,
}

impl Link {
    /// Queues `msg` and wakes the master's poll if it is not already awake; false when the
    /// master is gone.
    pub fn send(&self, msg: Incoming) -> bool {
        if self.tx.send(msg).is_err() {
            return false;
        }
        if !self.shared.wake_pending.swap(true, Ordering::SeqCst) {
            let _ = self.shared.waker.wake();
        }
        true
    }
}

/// Prints a message, but not the same one over and over while Redis stays down.
pub fn log_once(msg: &str) {
    static LAST: Mutex<String> = Mutex::new(String::new());
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if *last != msg {
        tracing::warn!("{msg}");
        *last = msg.to_string();
    }
}

/// A command connection with its I/O timeouts, `prepare`d (scripts loaded) before use.
pub fn connect_with(
    target: &Target,
    prepare: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<()>,
) -> redis::RedisResult<redis::Connection> {
    let mut con = target.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    con.set_read_timeout(Some(IO_TIMEOUT))?;
    con.set_write_timeout(Some(IO_TIMEOUT))?;
    prepare(&mut con)?;
    Ok(con)
}
