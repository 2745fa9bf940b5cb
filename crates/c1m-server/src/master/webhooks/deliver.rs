//! The delivery thread: takes events from the master's loop (a bounded channel), writes them
//! to the spool in segments of at most `batch_events` events and `batch_bytes` bytes, and
//! POSTs the oldest segments that fit those limits together until the backend answers 2xx,
//! then removes them. 5xx, 408, 429, a refused connection or a timeout are retried after
//! 0.1 s, doubling to 5 s; any other 4xx
//! means the backend will never take that batch: it is dropped, logged and counted
//! (`outcome="rejected"`). It runs on its own thread so a slow backend never holds up the
//! master's event loop.

use super::spool::Spool;
use super::Stats;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// At shutdown, how long the thread goes on sending what the spool holds (the rest waits
/// there for the next start).
const FINAL_SEND: Duration = Duration::from_secs(2);
/// The signature header: `sha256=` and the hex HMAC-SHA256 of the body.
pub const SIGNATURE_HEADER: &str = "X-C1m-Signature";

pub struct Settings {
    pub url: String,
    /// For an https:// URL.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub secret: Option<Vec<u8>>,
    pub max_bytes: u64,
    pub batch_events: usize,
    pub batch_bytes: usize,
}

enum Outcome {
    Ok,
    Retry(String),
    Rejected(u16),
}

pub fn run(rx: Receiver<String>, mut spool: Spool, s: Settings, stats: Arc<Stats>) {
    let builder = || {
        let b = ureq::AgentBuilder::new();
        match &s.tls {
            Some(config) => b.tls_connector(Arc::new(super::https::Connector(Arc::clone(config)))),
            None => b,
        }
    };
    let agent = builder()
        .timeout_connect(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build();
    let final_agent = builder()
        .timeout_connect(Duration::from_millis(500))
        .timeout(Duration::from_secs(1))
        .build();
    let mut batch: Vec<String> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut failures = 0u32;
    let mut next_attempt = Instant::now();
    let mut stop_by: Option<Instant> = None;
    let mut append_errors = crate::log::Limited::every(Duration::from_secs(10));
    loop {
        let now = Instant::now();
        if stop_by.is_none() {
            let wait = if spool.is_empty() {
                Duration::from_millis(500)
            } else {
                next_attempt.saturating_duration_since(now)
            };
            let mut first = match rx.recv_timeout(wait) {
                Ok(e) => Some(e),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => {
                    stop_by = Some(Instant::now() + FINAL_SEND);
                    None
                }
            };
            // Everything already queued (bounded per round so sending is not starved).
            let mut taken = 0;
            while let Some(event) = first.take().or_else(|| {
                if taken < 10 * s.batch_events {
                    rx.try_recv().ok()
                } else {
                    None
                }
            }) {
                taken += 1;
                if !batch.is_empty()
                    && (batch.len() >= s.batch_events || batch_bytes + event.len() > s.batch_bytes)
                {
                    write_segment(&mut spool, &mut batch, &stats, &mut append_errors);
                    batch_bytes = 0;
                }
                batch_bytes += event.len() + 1;
                batch.push(event);
            }
        }
        if !batch.is_empty() {
            write_segment(&mut spool, &mut batch, &stats, &mut append_errors);
            batch_bytes = 0;
        }
        spool.rescan_if_due();
        let dropped = spool.enforce(s.max_bytes);
        if !dropped.is_empty() {
            let events: u64 = dropped.iter().map(|d| d.events).sum();
            stats.spool_dropped.fetch_add(events, Ordering::Relaxed);
            tracing::warn!(
                events,
                segments = dropped.len(),
                max_bytes = s.max_bytes,
                "webhook spool full: dropped the oldest events (the backend has not acknowledged them)"
            );
        }
        stats.spool_bytes.store(spool.bytes(), Ordering::Relaxed);
        if let Some(by) = stop_by {
            if spool.is_empty() || Instant::now() >= by {
                if !spool.is_empty() {
                    tracing::info!(
                        spool_bytes = spool.bytes(),
                        "webhooks: stopping with events in the spool; they are sent at the next start"
                    );
                }
                return;
            }
        }
        if Instant::now() < next_attempt {
            continue;
        }
        let Some((run, body)) = spool.oldest_run(s.batch_events as u64, s.batch_bytes) else {
            continue;
        };
        let events: u64 = run.iter().map(|seg| seg.events).sum();
        let agent = if stop_by.is_some() {
            &final_agent
        } else {
            &agent
        };
        let started = Instant::now();
        let outcome = post(agent, &s, &body);
        let took = started.elapsed().as_micros() as u64;
        match outcome {
            Outcome::Ok => {
                stats.record(took, "ok");
                for seg in &run {
                    spool.remove(&seg.name);
                }
                failures = 0;
                next_attempt = Instant::now();
            }
            Outcome::Rejected(status) => {
                stats.record(took, "rejected");
                for seg in &run {
                    spool.remove(&seg.name);
                }
                stats.rejected.fetch_add(events, Ordering::Relaxed);
                tracing::error!(
                    status,
                    events,
                    "webhook batch refused by the backend (4xx): dropped, not retried"
                );
                failures = 0;
                next_attempt = Instant::now();
            }
            Outcome::Retry(why) => {
                stats.record(took, "failed");
                failures += 1;
                stats.retries.fetch_add(1, Ordering::Relaxed);
                let delay = BACKOFF_FIRST
                    .saturating_mul(1 << (failures - 1).min(16))
                    .min(BACKOFF_MAX);
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(
                        error = %why,
                        failures,
                        retry_in_ms = delay.as_millis() as u64,
                        spool_bytes = spool.bytes(),
                        "webhook POST failed; retrying"
                    );
                }
                next_attempt = Instant::now() + delay;
            }
        }
        stats.spool_bytes.store(spool.bytes(), Ordering::Relaxed);
    }
}

fn write_segment(
    spool: &mut Spool,
    batch: &mut Vec<String>,
    stats: &Stats,
    errors: &mut crate::log::Limited,
) {
    if let Err(e) = spool.append(batch) {
        stats
            .spool_dropped
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        if let Some(held_back) = errors.allow(Instant::now()) {
            tracing::error!(error = %e, events = batch.len(), held_back, "webhook spool: writing failed; events dropped");
        }
    }
    batch.clear();
}

fn post(agent: &ureq::Agent, s: &Settings, body: &[u8]) -> Outcome {
    let mut req = agent
        .post(&s.url)
        .set("Content-Type", "application/json")
        .set("User-Agent", concat!("c1m/", env!("CARGO_PKG_VERSION")));
    if let Some(secret) = &s.secret {
        req = req.set(SIGNATURE_HEADER, &signature(secret, body));
    }
    match req.send_bytes(body) {
        Ok(_) => Outcome::Ok,
        Err(ureq::Error::Status(code, _)) if code >= 500 || code == 408 || code == 429 => {
            Outcome::Retry(format!("HTTP {code}"))
        }
        Err(ureq::Error::Status(code, _)) => Outcome::Rejected(code),
        Err(e) => Outcome::Retry(e.to_string()),
    }
}

/// `sha256=` and the lower-case hex HMAC-SHA256 of `body` under `secret`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any size");
    mac.update(body);
    let tag = mac.finalize().into_bytes();
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn signature_matches_rfc_4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            super::signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
