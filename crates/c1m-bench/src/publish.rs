//! The publisher: a coordinator thread that POSTs bench payloads to `/pub/{ch}` on a schedule
//! (`--publish-every D`: one message to every channel each D; `--publish-rate R`: R messages
//! per second round-robin over channels) until told to stop. Each acknowledged publish goes to
//! the coordinator, which forwards it to the workers for their expected-delivery arithmetic.
//! `--publishers N` splits the channels over N threads, each with its own keep-alive
//! connection (channel c belongs to thread c mod N, so each channel's sequence has one owner).

use crate::http::Client;
use crate::payload::{encode, now_us, Stamp};
use crate::wire::channel_name;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct PublishPlan {
    pub addr: SocketAddr,
    pub host: String,
    pub channel_base: String,
    pub channels: u32,
    /// Time between publish rounds; each round publishes `per_round` messages.
    pub interval: Duration,
    /// true: each round publishes to every channel; false: one message, round-robin.
    pub all_channels: bool,
    pub payload_size: usize,
    pub key: Option<String>,
    /// Publisher threads (each its own connection).
    pub publishers: u32,
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

pub fn spawn(
    plan: PublishPlan,
    stop: Arc<AtomicBool>,
    out: Sender<crate::coordinator::Msg>,
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

fn run(
    plan: &PublishPlan,
    mine: &[u32],
    threads: u32,
    stop: &AtomicBool,
    out: &Sender<crate::coordinator::Msg>,
) {
    let mut client = Client::new(plan.addr, &plan.host, plan.timeout);
    let channels = plan.channels.max(1);
    let mut seqs = vec![0u32; channels as usize];
    let auth = plan
        .key
        .as_ref()
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    // Round-robin mode: this thread carries 1/threads of the rate.
    let interval = if plan.all_channels {
        plan.interval
    } else {
        plan.interval * threads
    };
    let mut rr = 0usize;
    let mut next = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        next += interval;
        let targets: Vec<u32> = if plan.all_channels {
            mine.to_vec()
        } else {
            rr = (rr + 1) % mine.len().max(1);
            mine.get(rr).copied().into_iter().collect()
        };
        // A round is finished even if stop comes meanwhile: with one publisher thread every
        // channel then has the same number of messages, which keeps "due" easy to state.
        for ch in targets {
            seqs[ch as usize] += 1;
            let seq = seqs[ch as usize];
            let sent_us = now_us();
            let body = encode(
                Stamp {
                    channel: ch,
                    seq,
                    sent_us,
                },
                plan.payload_size,
            );
            let path = format!("/pub/{}", channel_name(&plan.channel_base, channels, ch));
            let res = client.request(
                "POST",
                &path,
                &format!("{auth}Content-Type: text/plain\r\n"),
                &body,
            );
            let error = match res {
                Ok(r) if r.status == 200 => None,
                Ok(r) => {
                    // The server refused it, so nothing was published: the next publish reuses
                    // the sequence and subscribers see no false gap.
                    seqs[ch as usize] -= 1;
                    Some(format!("publish HTTP {}", r.status))
                }
                // Sent but unanswered (a timeout behind a huge fan-out): it may well have been
                // delivered, so the sequence stays used; reusing it would show as duplicates.
                Err(e) => Some(format!("publish failed: {}", root_kind(&e))),
            };
            let msg = Published {
                channel: ch,
                seq,
                sent_us,
                ack_us: now_us(),
                error,
            };
            if out.send(crate::coordinator::Msg::Published(msg)).is_err() {
                return;
            }
        }
    }
}

fn root_kind(e: &anyhow::Error) -> String {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .map(crate::errors::io_kind)
        .unwrap_or_else(|| e.to_string())
}
