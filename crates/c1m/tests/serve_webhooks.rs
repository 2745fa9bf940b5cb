//! Lifecycle webhooks against a real backend: a small HTTP server in this process on
//! loopback that records every POST (its signature header and body) and answers as the test
//! says. Batching and the HMAC signature (checked with the test's own HMAC), retries after
//! 500s and after the backend was down, one `disconnect` per connection of a worker killed
//! with -9, the spool across a restart, and a full spool dropping its oldest events.

use crate::common::{c1m, Server, Sse};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct Seen {
    /// (X-C1m-Signature, body) of each POST answered 2xx.
    accepted: Vec<(Option<String>, Vec<u8>)>,
    /// Status codes to answer before the default 200, in order.
    script: VecDeque<u16>,
    answered: Vec<u16>,
}

struct Backend {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backend {
    fn start(addr: &str, script: &[u16]) -> Backend {
        let listener = TcpListener::bind(addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen {
            script: script.iter().copied().collect(),
            ..Default::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&seen), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            // Bounded: the test stops it, and it ends by itself after two minutes.
            let until = Instant::now() + Duration::from_secs(120);
            while !st.load(Ordering::Relaxed) && Instant::now() < until {
                match listener.accept() {
                    Ok((conn, _)) => serve_one(conn, &s),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Backend {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// Every event accepted so far (in arrival order, duplicates kept).
    fn events(&self) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.accepted
            .iter()
            .flat_map(|(_, body)| {
                let v: Value = serde_json::from_slice(body).unwrap();
                v["events"].as_array().unwrap().clone()
            })
            .collect()
    }

    /// Events de-duplicated by id, as a backend would.
    fn unique_events(&self) -> Vec<Value> {
        let mut ids = HashSet::new();
        self.events()
            .into_iter()
            .filter(|e| ids.insert(e["id"].as_str().unwrap().to_string()))
            .collect()
    }

    /// Waits (at most `limit`) until `pred` holds over the unique events.
    fn wait_for(&self, limit: Duration, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let events = self.unique_events();
            if pred(&events) {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "backend never saw what was expected; got {} events: {:?}",
                events.len(),
                events.iter().take(20).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(conn: std::net::TcpStream, seen: &Mutex<Seen>) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || !line.starts_with("POST ") {
        return;
    }
    let (mut len, mut signature) = (0usize, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.to_ascii_lowercase().as_str() {
                "content-length" => len = v.trim().parse().unwrap(),
                "x-c1m-signature" => signature = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let status = {
        let mut s = seen.lock().unwrap();
        let status = s.script.pop_front().unwrap_or(200);
        s.answered.push(status);
        if status == 200 {
            s.accepted.push((signature, body));
        }
        status
    };
    let mut conn = reader.into_inner();
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
}

fn spool_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("c1m-webhooks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A loopback port nobody listens on (bound, then released), for a backend that is down.
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn serve(url: &str, spool: &PathBuf, extra: &[&str]) -> Server {
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--webhook-url", url])
        .arg("--webhook-spool")
        .arg(spool)
        .args(extra);
    Server::spawn(cmd)
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

/// Opens `n` SSE subscribers of `channel` and closes them again.
fn flap(server: &Server, channel: &str, n: usize) {
    let subs: Vec<Sse> = (0..n)
        .map(|_| Sse::connect(server.http, &format!("/sub/{channel}"), ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"].as_u64() == Some(n as u64));
    drop(subs);
    server.wait_status(|s| s["connections"]["sse"].as_u64() == Some(0));
}

#[test]
fn events_arrive_batched_and_signed() {
    let backend = Backend::start("127.0.0.1:0", &[]);
    let spool = spool_dir("signed");
    std::fs::create_dir_all(&spool).unwrap();
    let secret_file = spool.with_extension("secret");
    std::fs::write(&secret_file, "s3cret\n").unwrap();
    let server = serve(
        &backend.url(),
        &spool.join("q"),
        &[
            "--workers",
            "1",
            "--webhook-vacate-delay",
            "1s",
            "--webhook-secret-file",
            secret_file.to_str().unwrap(),
        ],
    );
    flap(&server, "room", 3);
    let events = backend.wait_for(Duration::from_secs(15), |e| {
        count(e, "disconnect") == 3 && count(e, "channel_vacated") == 1
    });
    assert_eq!(count(&events, "connect"), 3, "{events:?}");
    assert_eq!(count(&events, "subscribe"), 3);
    assert_eq!(count(&events, "unsubscribe"), 3);
    assert_eq!(count(&events, "channel_occupied"), 1);
    for e in &events {
        assert!(e["time_ms"].as_u64().unwrap() > 0);
        assert!(!e["node"].as_str().unwrap().is_empty());
        assert_eq!(e["channels"], serde_json::json!(["room"]));
        if e["type"] == "disconnect" {
            assert_eq!(e["reason"], "client_closed");
            assert!(e["conn"].as_str().unwrap().starts_with("0-"), "{e}");
        }
    }
    let conns: HashSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "connect")
        .map(|e| e["conn"].as_str().unwrap())
        .collect();
    assert_eq!(conns.len(), 3, "each connection has its own id");
    let seen = backend.seen.lock().unwrap();
    assert!(
        seen.accepted.len() < events.len(),
        "events are batched: {} POSTs for {} events",
        seen.accepted.len(),
        events.len()
    );
    for (signature, body) in &seen.accepted {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
        mac.update(body);
        let want: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            signature.as_deref(),
            Some(format!("sha256={want}").as_str())
        );
    }
    drop(seen);
    // The gauge falls once the thread has the backend's answer (just after the backend
    // recorded the body).
    server.wait_status(|s| s["webhooks"]["spool_bytes"].as_u64() == Some(0));
    let metrics = server.metrics();
    for name in [
        "c1m_webhook_events_total 14",
        "c1m_webhook_requests_total{outcome=\"ok\"}",
        "c1m_webhook_retries_total 0",
        "c1m_webhook_spool_bytes 0",
        "c1m_webhook_spool_dropped_total 0",
        "c1m_webhook_request_duration_seconds_count",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    let _ = std::fs::remove_dir_all(&spool);
    let _ = std::fs::remove_file(&secret_file);
}

#[test]
fn a_backend_answering_500_gets_every_event_on_retry() {
    let backend = Backend::start("127.0.0.1:0", &[500, 500, 503]);
    let spool = spool_dir("retry");
    let server = serve(&backend.url(), &spool, &["--workers", "1"]);
    flap(&server, "r", 2);
    let events = backend.wait_for(Duration::from_secs(15), |e| count(e, "disconnect") == 2);
    assert_eq!(count(&events, "connect"), 2);
    assert_eq!(&backend.seen.lock().unwrap().answered[..3], [500, 500, 503]);
    let metrics = server.metrics();
    let retries = metric(&metrics, "c1m_webhook_retries_total");
    assert!(retries >= 3, "{metrics}");
    assert!(metric(&metrics, "c1m_webhook_requests_total{outcome=\"failed\"}") >= 3);
    let _ = std::fs::remove_dir_all(&spool);
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in metrics:\n{text}"))
}

#[test]
fn a_backend_down_for_a_while_gets_every_event_once_up() {
    let addr = free_port();
    let spool = spool_dir("down");
    let server = serve(&format!("http://{addr}/hooks"), &spool, &["--workers", "1"]);
    flap(&server, "d", 4);
    // Down for three seconds: the events wait in the spool, retried with backoff.
    std::thread::sleep(Duration::from_secs(3));
    assert!(metric(&server.metrics(), "c1m_webhook_spool_bytes") > 0);
    let backend = Backend::start(&addr.to_string(), &[]);
    let events = backend.wait_for(Duration::from_secs(20), |e| count(e, "disconnect") == 4);
    assert_eq!(count(&events, "connect"), 4);
    server.wait_status(|s| s["webhooks"]["spool_bytes"].as_u64() == Some(0));
    let _ = std::fs::remove_dir_all(&spool);
}

#[test]
fn a_worker_killed_with_9_yields_one_disconnect_per_connection() {
    c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    let backend = Backend::start("127.0.0.1:0", &[]);
    let spool = spool_dir("kill9");
    let server = serve(&backend.url(), &spool, &["--workers", "1"]);
    let http = server.http;
    let clients: Vec<_> = (0..2)
        .map(|t| {
            std::thread::spawn(move || {
                (0..500)
                    .map(|i| Sse::connect(http, &format!("/sub/k{}", (t * 500 + i) % 10), ""))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let held: Vec<Sse> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    server.wait_status(|s| s["connections"]["sse"].as_u64() == Some(1000));
    backend.wait_for(Duration::from_secs(20), |e| count(e, "connect") == 1000);
    let pid = server.worker_pids()[0];
    c1m_sys::process::kill(pid, libc::SIGKILL).unwrap();
    let events = backend.wait_for(Duration::from_secs(30), |e| count(e, "disconnect") >= 1000);
    let disconnects: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "disconnect")
        .collect();
    assert_eq!(disconnects.len(), 1000);
    assert!(disconnects.iter().all(|e| e["reason"] == "worker_crash"));
    let conns: HashSet<&str> = disconnects
        .iter()
        .map(|e| e["conn"].as_str().unwrap())
        .collect();
    assert_eq!(conns.len(), 1000, "one per connection");
    let connected: HashSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "connect")
        .map(|e| e["conn"].as_str().unwrap())
        .collect();
    assert_eq!(
        conns, connected,
        "the connections that were open, each once"
    );
    drop(held);
    let _ = std::fs::remove_dir_all(&spool);
}

#[test]
fn the_spool_survives_a_restart() {
    let addr = free_port();
    let url = format!("http://{addr}/hooks");
    let spool = spool_dir("restart");
    let mut server = serve(&url, &spool, &["--workers", "1", "--grace", "1s"]);
    flap(&server, "s", 3);
    server.wait_status(|s| s["webhooks"]["spool_bytes"].as_u64() > Some(0));
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(20)).success());
    let files = std::fs::read_dir(&spool).unwrap().count();
    assert!(files > 0, "the spool holds the events");
    let backend = Backend::start(&addr.to_string(), &[]);
    let _again = serve(&url, &spool, &["--workers", "1"]);
    let events = backend.wait_for(Duration::from_secs(20), |e| {
        count(e, "disconnect") == 3 && count(e, "channel_vacated") == 1
    });
    assert_eq!(count(&events, "connect"), 3);
    assert_eq!(count(&events, "channel_occupied"), 1);
    let _ = std::fs::remove_dir_all(&spool);
}

#[test]
fn a_full_spool_drops_the_oldest_and_says_so() {
    let addr = free_port();
    let spool = spool_dir("full");
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--webhook-url", &format!("http://{addr}/hooks")])
        .arg("--webhook-spool")
        .arg(&spool)
        .args(["--webhook-spool-max-bytes", "65536"]);
    let (server, logs) = Server::spawn_capturing_stderr(cmd);
    // ~250 B per event, 4 events per connection: 150 connections overfill 64 KiB.
    for round in 0..5 {
        flap(&server, &format!("f{round}"), 30);
    }
    let line = logs
        .wait_for("webhook spool full", Duration::from_secs(10))
        .expect("the drop is logged");
    assert!(line.contains("events="), "{line}");
    let status = server.wait_status(|s| s["webhooks"]["spool_dropped"].as_u64() > Some(0));
    assert!(status["webhooks"]["spool_bytes"].as_u64().unwrap() <= 65536);
    assert!(metric(&server.metrics(), "c1m_webhook_spool_dropped_total") > 0);
    // The backend comes up: what is left are the newest events (the last round's), not the
    // first round's.
    let backend = Backend::start(&addr.to_string(), &[]);
    let events = backend.wait_for(Duration::from_secs(20), |e| {
        e.iter()
            .filter(|e| e["type"] == "disconnect" && e["channels"][0] == "f4")
            .count()
            == 30
    });
    let by_channel: HashMap<String, usize> = events.iter().fold(HashMap::new(), |mut m, e| {
        *m.entry(e["channels"][0].as_str().unwrap().to_string())
            .or_default() += 1;
        m
    });
    assert!(
        by_channel.get("f0").copied().unwrap_or(0) < 4 * 30,
        "the oldest round lost events: {by_channel:?}"
    );
    let _ = std::fs::remove_dir_all(&spool);
}

/// A user kicked by the server API leaves with reason `kicked`, and every event of its
/// connection names the user its token did.
#[test]
fn a_kick_by_the_server_api_is_a_kicked_disconnect_of_that_user() {
    let backend = Backend::start("127.0.0.1:0", &[]);
    let spool = spool_dir("kicked");
    let keys = crate::auth::Keys::new("webhook-kick");
    let secret = keys.secret();
    let server = serve(
        &backend.url(),
        &spool.join("q"),
        &["--workers", "1", "--auth", "optional", "--jwt-key", &secret],
    );
    let token = keys.hs256(&serde_json::json!({
        "exp": crate::auth::now() + 300, "channels": ["room"], "sub": "ann"
    }));
    let mut kicked = Sse::connect(server.http, &format!("/sub/room?token={token}"), "");
    let _other = Sse::connect(server.http, "/sub/room", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);
    let answer = ureq::post(&server.url("/api/disconnect"))
        .send_string(r#"{"user":"ann"}"#)
        .unwrap()
        .into_string()
        .unwrap();
    assert!(answer.contains("\"disconnected\":1"), "{answer}");
    let _ = kicked.read_to_close();
    let events = backend.wait_for(Duration::from_secs(15), |e| count(e, "disconnect") == 1);
    let gone: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "disconnect")
        .collect();
    assert_eq!(gone[0]["reason"], "kicked", "{events:?}");
    assert_eq!(gone[0]["user"], "ann", "{events:?}");
    let _ = std::fs::remove_dir_all(&spool);
}
