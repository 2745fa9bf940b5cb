//! Lifecycle webhooks (`--webhook-url`): what the master knows about every held connection of
//! this node, turned into events for the application's backend. The workers report each
//! connection opened (user, channels) and closed (reason) over the ipc link
//! (`ToMaster::Lifecycle`); the master keeps them per worker, so a worker that dies without a
//! word (kill -9) still yields one `disconnect` with reason `worker_crash` per connection it
//! held. `channel_occupied` / `channel_vacated` follow this node's subscriber count of a
//! channel (in a cluster each node reports its own), the vacate only after
//! `webhook_vacate_delay` so a reconnect flap sends nothing.
//!
//! Events leave through [`deliver`] (a thread: spool, POST, retry) over a bounded channel; a
//! full channel drops the event, logged and counted, rather than block the loop.
//! Files: [`spool`] (segments on disk), [`deliver`] (the thread), [`https`] (TLS to the
//! backend).

mod deliver;
mod https;
mod mirror;
mod spool;

pub use https::tls_config;

use crate::conn_id::ConnId;
use crate::histogram::Histogram;
use crate::ipc::{CloseReason, ConnReport};
use anyhow::Context;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Events queued between the loop and the delivery thread.
const QUEUE: usize = 65_536;
/// Most events in one POST.
pub const BATCH_EVENTS: usize = 500;
/// Most bytes in one POST (and at most an eighth of the spool).
pub const BATCH_BYTES: usize = 1024 * 1024;

/// A URL the delivery thread can POST to: http:// or https:// with a host.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("{url:?}: only http:// and https:// URLs are supported"))?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(format!("{url:?}: no host"));
    }
    Ok(())
}

/// Counters shared with the delivery thread.
#[derive(Default)]
pub struct Stats {
    events: AtomicU64,
    requests_ok: AtomicU64,
    requests_retry: AtomicU64,
    requests_rejected: AtomicU64,
    rejected: AtomicU64,
    retries: AtomicU64,
    spool_bytes: AtomicU64,
    spool_dropped: AtomicU64,
    latency: Mutex<Histogram>,
}

impl Stats {
    fn record(&self, micros: u64, outcome: &str) {
        let c = match outcome {
            "ok" => &self.requests_ok,
            "rejected" => &self.requests_rejected,
            _ => &self.requests_retry,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut h) = self.latency.lock() {
            h.record(micros);
        }
    }

    /// `/metrics` lines (Prometheus text, with HELP and TYPE).
    pub fn prometheus(&self, out: &mut String) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut metric = |name: &str, kind: &str, help: &str, rows: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP c1m_{name} {help}\n# TYPE c1m_{name} {kind}");
            for (labels, v) in rows {
                let _ = writeln!(out, "c1m_{name}{labels} {v}");
            }
        };
        metric(
            "webhook_events_total",
            "counter",
            "Lifecycle events produced for the webhook backend.",
            &[("", get(&self.events))],
        );
        metric(
            "webhook_requests_total",
            "counter",
            "Webhook POSTs by outcome: ok (2xx), failed (5xx, 408, 429, connect error or timeout; retried), rejected (other 4xx; the batch is dropped).",
            &[
                ("{outcome=\"ok\"}", get(&self.requests_ok)),
                ("{outcome=\"failed\"}", get(&self.requests_retry)),
                ("{outcome=\"rejected\"}", get(&self.requests_rejected)),
            ],
        );
        metric(
            "webhook_retries_total",
            "counter",
            "Webhook POSTs that failed and were scheduled again.",
            &[("", get(&self.retries))],
        );
        metric(
            "webhook_spool_bytes",
            "gauge",
            "Bytes of events in the webhook spool, not yet acknowledged by the backend.",
            &[("", get(&self.spool_bytes))],
        );
        metric(
            "webhook_spool_dropped_total",
            "counter",
            "Webhook events dropped unsent: the spool past its limit (oldest first), its queue full, or a write failed.",
            &[("", get(&self.spool_dropped))],
        );
        metric(
            "webhook_rejected_events_total",
            "counter",
            "Webhook events in batches the backend refused with a 4xx (not retried).",
            &[("", get(&self.rejected))],
        );
        let h = self.latency.lock().map(|h| *h).unwrap_or_default();
        h.prometheus(
            out,
            "webhook_request_duration_seconds",
            "Time from sending a webhook POST to its answer (or failure).",
        );
    }

    /// `/status` key `webhooks`.
    pub fn json(&self) -> serde_json::Value {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "events": get(&self.events),
            "requests_ok": get(&self.requests_ok),
            "requests_failed": get(&self.requests_retry),
            "requests_rejected": get(&self.requests_rejected),
            "retries": get(&self.retries),
            "spool_bytes": get(&self.spool_bytes),
            "spool_dropped": get(&self.spool_dropped),
        })
    }
}

/// A connection the master knows to be open.
struct Held {
    user: Option<String>,
    channels: Vec<String>,
}

pub struct Webhooks {
    tx: Option<SyncSender<String>>,
    thread: Option<JoinHandle<()>>,
    pub stats: Arc<Stats>,
    node: String,
    /// Unique to this master process: start time and pid; an event id is this and a count.
    id_prefix: String,
    seq: u64,
    /// Per worker slot: open connections by token.
    held: Vec<HashMap<u64, Held>>,
    /// Per worker slot: connections it sent to a live upgrade's new worker, until the
    /// upgrade ends. A close reported meanwhile (a connection that did not move) is said
    /// here; an abort gives them back to `held`; a commit leaves them to the new master.
    handed: Vec<HashMap<u64, Held>>,
    /// A live upgrade committed: the new master owns what was handed over.
    committed: bool,
    /// This node's open connections per channel.
    occupancy: HashMap<String, u32>,
    /// Empty channels and when their `channel_vacated` is due.
    vacating: HashMap<String, Instant>,
    vacate_delay: Duration,
    queue_full: crate::log::Limited,
    /// With a Redis broker: this node's connections, mirrored for `node_lost`.
    mirror: Option<mirror::Mirror>,
}

impl Webhooks {
    /// Starts the delivery thread over the spool (None when webhooks are off).
    pub fn start(cfg: &crate::config::Config) -> anyhow::Result<Option<Webhooks>> {
        let Some(url) = &cfg.webhook_url else {
            return Ok(None);
        };
        let dir = cfg
            .webhook_spool
            .as_ref()
            .context("--webhook-url needs --webhook-spool")?;
        let secret = match &cfg.webhook_secret_file {
            Some(path) => {
                let mut bytes = std::fs::read(path)
                    .with_context(|| format!("reading the webhook secret {}", path.display()))?;
                while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                    bytes.pop();
                }
                anyhow::ensure!(
                    !bytes.is_empty(),
                    "the webhook secret file {} is empty",
                    path.display()
                );
                Some(bytes)
            }
            None => {
                tracing::warn!("--webhook-url without --webhook-secret-file: POSTs are not signed");
                None
            }
        };
        let tls = if url.starts_with("https://") {
            Some(https::tls_config(cfg.webhook_ca_file.as_deref())?)
        } else {
            None
        };
        let spool = spool::Spool::open(dir)?;
        let stats = Arc::new(Stats::default());
        let (tx, rx) = sync_channel(QUEUE);
        let settings = deliver::Settings {
            url: url.clone(),
            tls,
            secret,
            max_bytes: cfg.webhook_spool_max_bytes,
            batch_events: BATCH_EVENTS,
            batch_bytes: BATCH_BYTES.min((cfg.webhook_spool_max_bytes / 8) as usize),
        };
        let thread_stats = Arc::clone(&stats);
        let thread = std::thread::Builder::new()
            .name("c1m-webhooks".into())
            .spawn(move || deliver::run(rx, spool, settings, thread_stats))
            .context("starting the webhook thread")?;
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "localhost".into());
        let node = format!("{host}:{}", cfg.listen.port());
        let id_prefix = format!("{started:x}-{:x}", std::process::id());
        let mirror =
            mirror::Mirror::start(cfg, &node, &id_prefix, dir.clone(), Arc::clone(&stats))?;
        Ok(Some(Webhooks {
            tx: Some(tx),
            thread: Some(thread),
            stats,
            node,
            id_prefix,
            seq: 0,
            held: Vec::new(),
            handed: Vec::new(),
            committed: false,
            occupancy: HashMap::new(),
            vacating: HashMap::new(),
            vacate_delay: cfg.webhook_vacate_delay,
            queue_full: crate::log::Limited::every(Duration::from_secs(10)),
            mirror,
        }))
    }

    fn slot(&mut self, worker: usize) -> &mut HashMap<u64, Held> {
        if self.held.len() <= worker {
            self.held.resize_with(worker + 1, HashMap::new);
        }
        &mut self.held[worker]
    }

    fn handed_slot(&mut self, worker: usize) -> &mut HashMap<u64, Held> {
        if self.handed.len() <= worker {
            self.handed.resize_with(worker + 1, HashMap::new);
        }
        &mut self.handed[worker]
    }

    /// A worker's reports of one loop turn.
    pub fn on_reports(&mut self, worker: usize, reports: Vec<ConnReport>) {
        for r in reports {
            match r {
                ConnReport::Opened {
                    token,
                    user,
                    channels,
                    resumed,
                } => {
                    let id = ConnId::new(worker, token);
                    if resumed {
                        // An aborted upgrade: the connection stayed here, counted all along.
                        if let Some(back) = self.handed_slot(worker).remove(&token) {
                            self.slot(worker).insert(token, back);
                            continue;
                        }
                    } else {
                        self.emit("connect", Some(id), user.as_deref(), &channels, None);
                        self.emit("subscribe", Some(id), user.as_deref(), &channels, None);
                    }
                    for c in &channels {
                        self.occupy(c, !resumed);
                    }
                    if let Some(m) = &mut self.mirror {
                        m.opened(id, user.as_deref(), &channels);
                    }
                    self.slot(worker).insert(token, Held { user, channels });
                }
                ConnReport::Closed { token, reason } => {
                    let held = match self.slot(worker).remove(&token) {
                        Some(held) => held,
                        None => match self.handed_slot(worker).remove(&token) {
                            Some(held) => held,
                            None => continue,
                        },
                    };
                    self.closed(ConnId::new(worker, token), held, reason);
                }
            }
        }
    }

    /// Worker `worker` is gone: every connection it still held is disconnected for `reason`.
    /// What it handed to a committed upgrade's new worker lives on there (forgotten here
    /// without a word); before the commit, those connections went with the worker too.
    pub fn worker_gone(&mut self, worker: usize, reason: CloseReason) {
        let mut held = std::mem::take(self.slot(worker));
        let handed = std::mem::take(self.handed_slot(worker));
        if self.committed {
            self.forget(handed);
        } else {
            held.extend(handed);
        }
        if !held.is_empty() {
            tracing::info!(
                worker,
                connections = held.len(),
                reason = reason.as_str(),
                "webhooks: disconnects for the connections of a worker that is gone"
            );
        }
        let mut held: Vec<_> = held.into_iter().collect();
        held.sort_unstable_by_key(|(t, _)| *t);
        for (token, h) in held {
            self.closed(ConnId::new(worker, token), h, reason);
        }
    }

    /// Worker `worker` sent its connections to a live upgrade's new worker: kept aside until
    /// the upgrade ends (see `handed`).
    pub fn handed_over(&mut self, worker: usize) {
        let held = std::mem::take(self.slot(worker));
        self.handed_slot(worker).extend(held);
    }

    /// The live upgrade committed: the new master's generation reports the connections
    /// handed over (as already open) and owns their events from here.
    pub fn upgrade_committed(&mut self) {
        self.committed = true;
    }

    /// Connections another master now owns: out of this node's counts, no event.
    fn forget(&mut self, conns: HashMap<u64, Held>) {
        for h in conns.into_values() {
            for c in &h.channels {
                if let Some(n) = self.occupancy.get_mut(c) {
                    *n -= 1;
                    if *n == 0 {
                        self.occupancy.remove(c);
                    }
                }
            }
        }
    }

    fn closed(&mut self, id: ConnId, held: Held, reason: CloseReason) {
        if let Some(m) = &mut self.mirror {
            m.closed(id);
        }
        let user = held.user.as_deref();
        self.emit("unsubscribe", Some(id), user, &held.channels, None);
        self.emit("disconnect", Some(id), user, &held.channels, Some(reason));
        let now = Instant::now();
        for c in &held.channels {
            if let Some(n) = self.occupancy.get_mut(c) {
                *n -= 1;
                if *n == 0 {
                    self.occupancy.remove(c);
                    self.vacating.insert(c.clone(), now + self.vacate_delay);
                }
            }
        }
    }

    fn occupy(&mut self, channel: &str, announce: bool) {
        match self.occupancy.get_mut(channel) {
            Some(n) => *n += 1,
            None => {
                self.occupancy.insert(channel.to_string(), 1);
                // Back within the vacate delay: nothing was said, nothing to say.
                let was_vacating = self.vacating.remove(channel).is_some();
                if announce && !was_vacating {
                    self.emit("channel_occupied", None, None, &[channel.to_string()], None);
                }
            }
        }
    }

    /// Sends the `channel_vacated` events that are due.
    pub fn tick(&mut self, now: Instant) {
        if let Some(m) = &mut self.mirror {
            m.flush();
        }
        if self.vacating.is_empty() {
            return;
        }
        let mut due: Vec<String> = self
            .vacating
            .iter()
            .filter(|(_, &t)| t <= now)
            .map(|(c, _)| c.clone())
            .collect();
        due.sort_unstable();
        for c in due {
            self.vacating.remove(&c);
            self.emit("channel_vacated", None, None, &[c], None);
        }
    }

    fn emit(
        &mut self,
        kind: &str,
        conn: Option<ConnId>,
        user: Option<&str>,
        channels: &[String],
        reason: Option<CloseReason>,
    ) {
        self.seq += 1;
        let time_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut event = serde_json::json!({
            "id": format!("{}-{:x}", self.id_prefix, self.seq),
            "type": kind,
            "time_ms": time_ms,
            "node": self.node,
            "channels": channels,
        });
        if let Some(id) = conn {
            event["conn"] = id.to_string().into();
            event["user"] = user.into();
        }
        if let Some(r) = reason {
            event["reason"] = r.as_str().into();
        }
        self.stats.events.fetch_add(1, Ordering::Relaxed);
        let Some(tx) = &self.tx else {
            return;
        };
        match tx.try_send(event.to_string()) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.stats.spool_dropped.fetch_add(1, Ordering::Relaxed);
                if let Some(held_back) = self.queue_full.allow(Instant::now()) {
                    tracing::error!(
                        held_back,
                        "webhooks: the delivery thread is behind (queue full); event dropped"
                    );
                }
            }
        }
    }

    /// At the master's exit: the thread writes what is queued to the spool, sends what it can
    /// within a short time, and ends; the rest waits in the spool for the next start.
    pub fn finish(&mut self) {
        // Channels still waiting for their vacate delay: said now, while it can be.
        let now = Instant::now() + self.vacate_delay;
        self.tick(now);
        if let Some(m) = &mut self.mirror {
            m.finish();
        }
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_url;

    #[test]
    fn only_http_and_https_urls_with_a_host() {
        assert!(check_url("http://127.0.0.1:9/hooks").is_ok());
        assert!(check_url("https://example.test/").is_ok());
        assert!(check_url("https:///x").is_err());
        assert!(check_url("http:///x").is_err());
        assert!(check_url("ftp://x").is_err());
    }
}
