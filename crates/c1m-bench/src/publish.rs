//! The publisher: a coordinator thread that publishes bench payloads on a schedule, to c1m's
//! `POST /pub/{ch}` or to any server (`--publish-url` with method, headers and a body template,
//! or `--publish-cmd`, a command per message)
//! (`--publish-every D`: one message to every channel each D; `--publish-rate R`: R messages
//! per second round-robin over channels) until told to stop. Each acknowledged publish goes to
//! the coordinator, which forwards it to the workers for their expected-delivery arithmetic.
//! `--publishers N` splits the channels over N threads, each with its own keep-alive
//! connection (channel c belongs to thread c mod N, so each channel's sequence has one owner).

use crate::http::Client;
use crate::payload::{encode, now_us, Stamp};
use crate::template::expand;
use crate::wire::channel_name;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where and how each message is published.
#[derive(Debug, Clone)]
pub enum PublishTarget {
    /// One HTTP request per message on a keep-alive connection; 2xx = acknowledged.
    Http {
        addr: SocketAddr,
        host: String,
        /// Path (and query) with `{ch}`.
        path_template: String,
        method: String,
        /// Header lines (each ending in CRLF) with `{ch}`.
        headers: String,
        /// Body with `{payload}` and `{ch}`.
        body_template: String,
        /// https:// (the target's, or --publish-url's).
        tls: Option<crate::tls::Tls>,
    },
    /// `sh -c CMD publish CHANNEL BODY`; exit status 0 = acknowledged.
    Cmd { cmd: String, body_template: String },
}

pub struct PublishPlan {
    pub target: PublishTarget,
    pub channel_base: String,
    pub channels: u32,
    /// Time between publish rounds; each round publishes `per_round` messages.
    pub interval: Duration,
    /// true: each round publishes to every channel; false: one message, round-robin.
    pub all_channels: bool,
    pub payload_size: usize,
    /// Publisher threads (each its own connection).
    pub publishers: u32,
    /// Messages per request (1: one request per message; more: c1m's batch call, NDJSON).
    pub batch: u32,
    /// Connect, write and answer timeout of each publish.
    pub timeout: Duration,
}

/// One publish attempt's outcome.
#[derive(Debug, Clone)]
pub struct Published {
    pub channel: u32,
    pub seq: u32,
    pub sent_us: u64,
    pub ack_us: u64,
    /// None = acknowledged with 200; Some(kind) = failed.
    pub error: Option<String>,
}

/// Starts the publisher threads; each outcome is sent on `out` as an `M` (the coordinator's
/// message type), so this module does not depend on the coordinator.
pub fn spawn<M: From<Published> + Send + 'static>(
    plan: PublishPlan,
    stop: Arc<AtomicBool>,
    out: Sender<M>,
) -> std::thread::JoinHandle<()> {
    let n = plan.publishers.clamp(1, plan.channels.max(1));
    let plan = Arc::new(plan);
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (plan, stop, out) = (plan.clone(), stop.clone(), out.clone());
            std::thread::spawn(move || {
                let mine: Vec<u32> = (0..plan.channels.max(1)).filter(|c| c % n == i).collect();
                run(&plan, &mine, n, &stop, &out)
            })
        })
        .collect();
    // One handle for the coordinator: it returns when every publisher thread has.
    std::thread::spawn(move || {
        for t in threads {
            let _ = t.join();
        }
    })
}

fn run<M: From<Published>>(
    plan: &PublishPlan,
    mine: &[u32],
    threads: u32,
    stop: &AtomicBool,
    out: &Sender<M>,
) {
    let mut client = match &plan.target {
        PublishTarget::Http {
            addr, host, tls, ..
        } => Some(Client::new(*addr, host, plan.timeout, tls.clone())),
        PublishTarget::Cmd { .. } => None,
    };
    let channels = plan.channels.max(1);
    let mut seqs = vec![0u32; channels as usize];
    // Round-robin mode: this thread carries 1/threads of the rate.
    let interval = if plan.all_channels {
        plan.interval
    } else {
        plan.interval * threads
    };
    let batch = plan.batch.max(1) as usize;
    let mut rr = 0usize;
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        let targets: Vec<u32> = if plan.all_channels {
            next += interval;
            mine.to_vec()
        } else {
            // A batch carries `batch` round-robin messages, so it waits `batch` intervals; a
            // channel appears at most once per batch (its items keep their order anyway).
            let n = batch.min(mine.len().max(1));
            next += interval * n as u32;
            (0..n)
                .filter_map(|_| {
                    rr = (rr + 1) % mine.len().max(1);
                    mine.get(rr).copied()
                })
                .collect()
        };
        // A round is finished even if stop comes meanwhile: with one publisher thread every
        // channel then has the same number of messages, which keeps "due" easy to state.
        for chunk in targets.chunks(batch) {
            let sent_us = now_us();
            let items: Vec<(u32, u32, String, Vec<u8>)> = chunk
                .iter()
                .map(|&ch| {
                    seqs[ch as usize] += 1;
                    let seq = seqs[ch as usize];
                    let stamp = Stamp {
                        channel: ch,
                        seq,
                        sent_us,
                    };
                    let name = channel_name(&plan.channel_base, channels, ch);
                    (ch, seq, name, encode(stamp, plan.payload_size))
                })
                .collect();
            let outcomes = if batch > 1 {
                publish_batch(plan, client.as_mut(), &items)
            } else {
                let (_, _, name, body) = &items[0];
                vec![publish_one(plan, client.as_mut(), name, body)]
            };
            let ack_us = now_us();
            for ((ch, seq, _, _), outcome) in items.into_iter().zip(outcomes) {
                let error = match outcome {
                    Ok(()) => None,
                    Err(Failure::Refused(kind)) => {
                        // The server refused it, so nothing was published: the next publish
                        // reuses the sequence and subscribers see no false gap.
                        seqs[ch as usize] -= 1;
                        Some(kind)
                    }
                    // Sent but unanswered (a timeout behind a huge fan-out): it may well have
                    // been delivered, so the sequence stays used; reusing it would show as
                    // duplicates.
                    Err(Failure::Unknown(kind)) => Some(kind),
                };
                let msg = Published {
                    channel: ch,
                    seq,
                    sent_us,
                    ack_us,
                    error,
                };
                if out.send(M::from(msg)).is_err() {
                    return;
                }
            }
        }
    }
}

/// Why a publish was not acknowledged.
enum Failure {
    /// The server answered no (non-2xx, or the command exited non-zero): nothing was published.
    Refused(String),
    /// No answer: it may or may not have been published.
    Unknown(String),
}

fn publish_one(
    plan: &PublishPlan,
    client: Option<&mut Client>,
    channel: &str,
    payload: &[u8],
) -> Result<(), Failure> {
    let payload = String::from_utf8_lossy(payload);
    let vars = [("payload", payload.as_ref()), ("ch", channel)];
    match (&plan.target, client) {
        (
            PublishTarget::Http {
                path_template,
                method,
                headers,
                body_template,
                ..
            },
            Some(client),
        ) => {
            let path = expand(path_template, &vars);
            let body = expand(body_template, &vars);
            match client.request(method, &path, &expand(headers, &vars), body.as_bytes()) {
                Ok(r) if (200..300).contains(&r.status) => Ok(()),
                Ok(r) => Err(Failure::Refused(format!("publish HTTP {}", r.status))),
                Err(e) => Err(Failure::Unknown(format!(
                    "publish failed: {}",
                    root_kind(&e)
                ))),
            }
        }
        (PublishTarget::Cmd { cmd, body_template }, _) => {
            let body = expand(body_template, &vars);
            run_cmd(cmd, channel, &body, plan.timeout)
        }
        (PublishTarget::Http { .. }, None) => Err(Failure::Unknown("no HTTP client".into())),
    }
}

/// One request to c1m's batch call carrying every item as an NDJSON line; the answer has one
/// result per item, in order (`{"channel","id"}` or `{"channel","error"}`).
fn publish_batch(
    plan: &PublishPlan,
    client: Option<&mut Client>,
    items: &[(u32, u32, String, Vec<u8>)],
) -> Vec<Result<(), Failure>> {
    let all = |f: &dyn Fn() -> Failure| items.iter().map(|_| Err(f())).collect();
    let (
        PublishTarget::Http {
            path_template,
            method,
            headers,
            ..
        },
        Some(client),
    ) = (&plan.target, client)
    else {
        return all(&|| Failure::Refused("--publish-batch needs an HTTP target".into()));
    };
    let mut body = Vec::with_capacity(items.len() * 64);
    for (_, _, name, payload) in items {
        let line = serde_json::json!({
            "channel": name,
            "data": String::from_utf8_lossy(payload),
        });
        body.extend_from_slice(line.to_string().as_bytes());
        body.push(b'\n');
    }
    let vars = [("ch", "")];
    let answer = match client.request(method, path_template, &expand(headers, &vars), &body) {
        Ok(r) if (200..300).contains(&r.status) => r.body,
        Ok(r) => {
            let status = r.status;
            return all(&|| Failure::Refused(format!("publish HTTP {status}")));
        }
        Err(e) => {
            let kind = root_kind(&e);
            return all(&|| Failure::Unknown(format!("publish failed: {kind}")));
        }
    };
    let results = serde_json::from_slice::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| v["result"]["results"].as_array().cloned())
        .filter(|r| r.len() == items.len());
    let Some(results) = results else {
        return all(&|| Failure::Unknown("publish batch answer unreadable".into()));
    };
    results
        .iter()
        .map(|r| match r.get("error") {
            None if r.get("id").is_some() => Ok(()),
            None => Err(Failure::Unknown("publish batch item without id".into())),
            Some(e) => Err(Failure::Refused(format!(
                "publish refused: {}",
                e.as_str().unwrap_or("?")
            ))),
        })
        .collect()
}

/// Runs the publish command for one message, bounded by `timeout` (killed past it).
fn run_cmd(cmd: &str, channel: &str, body: &str, timeout: Duration) -> Result<(), Failure> {
    let mut child = Command::new("sh")
        .args(["-c", cmd, "publish", channel, body])
        .env("C1M_CHANNEL", channel)
        .env("C1M_BODY", body)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            Failure::Refused(format!("publish-cmd spawn: {}", crate::errors::io_kind(&e)))
        })?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return Ok(()),
            Ok(Some(st)) => {
                return Err(Failure::Refused(format!(
                    "publish-cmd exit {}",
                    st.code().map_or("signal".to_string(), |c| c.to_string())
                )))
            }
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::Unknown("publish-cmd timeout".into()));
            }
            // Polled rather than waited on so the timeout holds; 200 µs keeps the ack time
            // (part of the publish latency) close to the real exit.
            Ok(None) => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => return Err(Failure::Unknown(format!("publish-cmd wait: {e}"))),
        }
    }
}

fn root_kind(e: &anyhow::Error) -> String {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .map(crate::errors::io_kind)
        .unwrap_or_else(|| e.to_string())
}
