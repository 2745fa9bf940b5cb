//! A publish stream across a broker failover, checked by the delivery rule: every publish that
//! got a 2xx reaches every subscriber once and in order, or the subscriber got a gap event
//! covering it; every publish that did not get a 2xx got a 503 (never another answer, never a
//! hang). Publishers post numbered messages to a few channels, alternating two nodes; each
//! channel has an SSE and a WebSocket subscriber on each node, which resume with their last id
//! when the node closes their stream (as a client does). The outage is measured on both sides.

use super::{Seen, Sub};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest a publish may take: the broker's command timeout (5 s) with room to spare.
const PUBLISH_LIMIT: Duration = Duration::from_secs(8);
/// Pause between a publisher's publishes.
const PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// One publish: its number, how long it took, and its answer (Ok(id) or the HTTP status).
#[derive(Debug, Clone)]
struct Sent {
    seq: u64,
    at: Instant,
    took: Duration,
    answer: Result<u64, u16>,
}

/// What one subscriber saw: messages (id, payload) and gaps, with the time each came.
#[derive(Debug, Default)]
struct Got {
    what: String,
    events: Vec<(Instant, Seen)>,
    reconnects: u32,
}

/// The figures of one run.
#[derive(Debug)]
pub struct Outage {
    /// Longest time on any channel with no successful publish.
    pub publish_gap: Duration,
    /// Longest time any subscriber went without a message or gap (while publishes went on).
    pub subscriber_stall: Duration,
    pub acked: usize,
    pub refused: usize,
    /// Gap events subscribers got, and times they resumed after their stream closed.
    pub gaps: usize,
    pub resumes: u32,
}

fn publish_once(
    agent: &ureq::Agent,
    node: SocketAddr,
    channel: &str,
    payload: &str,
) -> Result<u64, u16> {
    match agent
        .post(&format!("http://{node}/pub/{channel}"))
        .send_string(payload)
    {
        Ok(resp) => {
            let v: serde_json::Value = serde_json::from_str(&resp.into_string().unwrap()).unwrap();
            Ok(v["id"].as_u64().unwrap())
        }
        Err(ureq::Error::Status(code, resp)) => {
            if code == 503 {
                assert!(
                    resp.header("Retry-After").is_some(),
                    "503 without Retry-After"
                );
            }
            Err(code)
        }
        Err(e) => panic!("publish to {node} failed at the transport: {e}"),
    }
}

/// The subscriber loop for one channel on one node (SSE or WebSocket), until it saw `end` or
/// `deadline` passed.
fn subscribe(
    node: SocketAddr,
    channel: String,
    ws: bool,
    ready: Arc<AtomicBool>,
    deadline: Instant,
) -> Got {
    let mut got = Got {
        what: format!(
            "{} {channel} on {node}",
            if ws { "WebSocket" } else { "SSE" }
        ),
        ..Default::default()
    };
    let mut last: Option<u64> = None;
    let mut first = true;
    'outer: while Instant::now() < deadline {
        if !first {
            got.reconnects += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        first = false;
        let mut next: Box<dyn FnMut() -> Option<Seen>> = if ws {
            let Some(mut socket) = ws_connect(node, &channel, last) else {
                continue;
            };
            Box::new(move || ws_next(&mut socket))
        } else {
            let Some(mut sub) = Sub::connect(node, &channel, last) else {
                continue;
            };
            Box::new(move || sub.next())
        };
        ready.store(true, Ordering::SeqCst);
        while Instant::now() < deadline {
            let Some(seen) = next() else {
                continue 'outer; // closed: resume with the last id
            };
            if let Seen::Message(id, payload) = &seen {
                last = Some(*id);
                if payload == "end" {
                    got.events.push((Instant::now(), seen));
                    break 'outer;
                }
            }
            got.events.push((Instant::now(), seen));
        }
    }
    got
}

type Ws = tungstenite::WebSocket<TcpStream>;

fn ws_connect(node: SocketAddr, channel: &str, last: Option<u64>) -> Option<Ws> {
    let stream = TcpStream::connect(node).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let query = last.map_or(String::new(), |id| format!("?last_id={id}"));
    let (socket, response) =
        tungstenite::client(format!("ws://{node}/sub/{channel}{query}"), stream).ok()?;
    (response.status() == 101).then_some(socket)
}

/// The next message or gap; None when the socket closed (or 10 s of silence).
fn ws_next(socket: &mut Ws) -> Option<Seen> {
    loop {
        match socket.read().ok()? {
            tungstenite::Message::Text(text) => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                if v["type"] == "gap" {
                    return Some(Seen::Gap(v["after"].as_u64()?, v["through"].as_u64()?));
                }
                return Some(Seen::Message(
                    v["id"].as_u64()?,
                    v["data"].as_str()?.to_string(),
                ));
            }
            tungstenite::Message::Close(_) => return None,
            _ => {}
        }
    }
}

/// Streams to `channels` through `nodes`, runs `disrupt` after a second, keeps publishing
/// until every channel has published successfully for a second after it (at most 40 s), then
/// checks the delivery rule for every subscriber and returns the outage.
pub fn run(nodes: [SocketAddr; 2], channels: &[String], disrupt: impl FnOnce()) -> Outage {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut readers = Vec::new();
    let mut readies = Vec::new();
    for ch in channels {
        for node in nodes {
            for ws in [false, true] {
                let ready = Arc::new(AtomicBool::new(false));
                readies.push(ready.clone());
                let ch = ch.clone();
                readers.push(std::thread::spawn(move || {
                    subscribe(node, ch, ws, ready, deadline)
                }));
            }
        }
    }
    let wait = Instant::now() + Duration::from_secs(10);
    while !readies.iter().all(|r| r.load(Ordering::SeqCst)) {
        assert!(Instant::now() < wait, "subscribers did not connect in 10 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The subscriptions are live on both nodes once a first publish reaches a fresh one; a
    // short pause is enough since the nodes answer a join only when its channel is live.
    std::thread::sleep(Duration::from_millis(300));

    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let last_ok: Vec<Arc<Mutex<Option<Instant>>>> =
        channels.iter().map(|_| Arc::default()).collect();
    let publishers: Vec<_> = channels
        .iter()
        .zip(&last_ok)
        .map(|(ch, ok)| {
            let (ch, stop, ok) = (ch.clone(), stop.clone(), ok.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new().timeout(PUBLISH_LIMIT * 2).build();
                let mut sent = Vec::new();
                for seq in 0..100_000u64 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let node = nodes[(seq % 2) as usize];
                    let at = Instant::now();
                    let answer = publish_once(&agent, node, &ch, &format!("{ch}-{seq}"));
                    if answer.is_ok() {
                        *ok.lock().unwrap() = Some(Instant::now());
                    }
                    sent.push(Sent {
                        seq,
                        at,
                        took: at.elapsed(),
                        answer,
                    });
                    std::thread::sleep(PUBLISH_EVERY);
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let disrupted = Instant::now();
    disrupt();
    eprintln!("disruption done after {:?}", disrupted.elapsed());
    // Recovered when every channel has had a publish acknowledged after the disruption; then
    // two more seconds of stream.
    let recovered_by = Instant::now() + Duration::from_secs(40);
    let after = Instant::now();
    while !last_ok
        .iter()
        .all(|t| t.lock().unwrap().is_some_and(|t| t > after))
    {
        assert!(
            Instant::now() < recovered_by,
            "publishes not acknowledged again within 40 s of the disruption"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "publishes acknowledged again {:?} after the disruption began",
        disrupted.elapsed()
    );
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let sent: Vec<Vec<Sent>> = publishers.into_iter().map(|p| p.join().unwrap()).collect();
    for ch in channels {
        super::publish_retrying(nodes[0], ch, "end");
    }
    let got: Vec<Got> = readers.into_iter().map(|r| r.join().unwrap()).collect();

    // Publishers: 2xx or 503, never a hang.
    let mut outage = Outage {
        publish_gap: Duration::ZERO,
        subscriber_stall: Duration::ZERO,
        acked: 0,
        refused: 0,
        gaps: 0,
        resumes: 0,
    };
    for (ch, list) in channels.iter().zip(&sent) {
        let mut last_ok = started;
        for s in list {
            assert!(s.took < PUBLISH_LIMIT, "{ch} #{} took {:?}", s.seq, s.took);
            match s.answer {
                Ok(_) => {
                    outage.acked += 1;
                    outage.publish_gap = outage.publish_gap.max(s.at.duration_since(last_ok));
                    last_ok = s.at + s.took;
                }
                Err(503) => outage.refused += 1,
                Err(code) => panic!("{ch} #{} answered {code} (only 2xx or 503 allowed)", s.seq),
            }
        }
        let acked: Vec<u64> = list.iter().filter_map(|s| s.answer.ok()).collect();
        assert!(
            acked.windows(2).all(|w| w[0] < w[1]),
            "{ch}: acked ids rise: {acked:?}"
        );
    }
    // Subscribers: every acknowledged message once and in order, or covered by a gap.
    for (i, g) in got.iter().enumerate() {
        let c = i / 4;
        let ch = &channels[c];
        outage.resumes += g.reconnects;
        if !matches!(g.events.last(), Some((_, Seen::Message(_, p))) if p == "end") {
            for node in nodes {
                let status = ureq::get(&format!("http://{node}/status"))
                    .call()
                    .map(|r| r.into_string());
                eprintln!("{node} /status: {status:?}");
            }
            panic!(
                "{}: never saw the end marker; saw {} events, resumed {} times, last {:?}",
                g.what,
                g.events.len(),
                g.reconnects,
                g.events.last()
            );
        }
        let mut ids = Vec::new();
        let mut gaps = Vec::new();
        let mut prev_at: Option<Instant> = None;
        for (at, seen) in &g.events {
            if let Some(p) = prev_at {
                if *at > started {
                    outage.subscriber_stall = outage.subscriber_stall.max(at.duration_since(p));
                }
            }
            prev_at = Some(*at);
            match seen {
                Seen::Message(id, payload) => {
                    if payload != "end" {
                        let seq: u64 = payload
                            .strip_prefix(&format!("{ch}-"))
                            .and_then(|s| s.parse().ok())
                            .unwrap_or_else(|| panic!("{}: stray payload {payload:?}", g.what));
                        let s = sent[c].iter().find(|s| s.seq == seq).unwrap();
                        if let Ok(acked) = s.answer {
                            assert_eq!(acked, *id, "{}: #{seq} came with another id", g.what);
                        }
                    }
                    ids.push(*id);
                }
                Seen::Gap(after, through) => {
                    outage.gaps += 1;
                    gaps.push((*after, *through));
                }
            }
        }
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{}: ids not once and in order: {ids:?}",
            g.what
        );
        for s in &sent[c] {
            if let Ok(id) = s.answer {
                assert!(
                    ids.contains(&id) || gaps.iter().any(|&(a, t)| a < id && id <= t),
                    "{}: acknowledged #{} (id {id}) neither delivered nor covered by a gap \
                     (gaps {gaps:?})",
                    g.what,
                    s.seq
                );
            }
        }
    }
    eprintln!(
        "outage: publishers {:?} (longest with no acknowledged publish on a channel), \
         subscribers {:?} (longest stall); {} acknowledged, {} refused (503), {} gap events, \
         {} resumes",
        outage.publish_gap,
        outage.subscriber_stall,
        outage.acked,
        outage.refused,
        outage.gaps,
        outage.resumes
    );
    outage
}
