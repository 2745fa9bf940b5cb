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
    /// How long each answer takes (a slow backend).
    delay: Duration,
}

struct Backend {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backend {
    fn start(addr: &str, script: &[u16]) -> Backend {
        Backend::start_with(addr, script, None)
    }

    /// The same backend over TLS with `leaf`'s certificate (an https:// URL).
    fn start_tls(leaf: &crate::tls_support::Leaf) -> Backend {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(&leaf.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&leaf.key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        Backend::start_with("127.0.0.1:0", &[], Some(Arc::new(config)))
    }

    fn start_with(addr: &str, script: &[u16], tls: Option<Arc<rustls::ServerConfig>>) -> Backend {
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
                    Ok((conn, _)) => {
                        conn.set_nonblocking(false).unwrap();
                        conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                        match &tls {
                            None => serve_one(conn, &s),
                            Some(config) => {
                                let Ok(session) = rustls::ServerConnection::new(Arc::clone(config))
                                else {
                                    continue;
                                };
                                serve_one(rustls::StreamOwned::new(session, conn), &s)
                            }
                        }
                    }
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

    fn https_url(&self) -> String {
        format!("https://{}/hooks", self.addr)
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

    /// Waits (at most `limit`) until `pred` holds over the unique events; the events either
    /// way (the caller's asserts say what is missing).
    fn wait_until(&self, limit: Duration, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + limit;
        loop {
            let events = self.unique_events();
            if pred(&events) || Instant::now() >= deadline {
                return events;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// One request on `conn` (plain or TLS: a failed handshake is a failed read), answered and
/// closed.
fn serve_one(conn: impl Read + Write, seen: &Mutex<Seen>) {
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
    let delay = seen.lock().unwrap().delay;
    std::thread::sleep(delay);
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
    let _ = conn.flush();
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

/// A backend taking 100 ms per POST, and refusing the first five (so the delivery thread backs
/// off for ~3 s), while events trickle in (200 subscribers opened and closed again over 2 s):
/// during the back-off each arrival is spooled as its own small segment, yet every event
/// arrives in far fewer POSTs than events (a POST takes the oldest segments that fit one
/// batch, not one segment), and none is dropped.
#[test]
fn a_slow_backend_gets_a_trickle_of_events_in_merged_posts() {
    let backend = Backend::start("127.0.0.1:0", &[503; 5]);
    backend.seen.lock().unwrap().delay = Duration::from_millis(100);
    let spool = spool_dir("trickle");
    let server = serve(&backend.url(), &spool, &["--workers", "1"]);
    let start = Instant::now();
    for i in 1..=200u64 {
        drop(Sse::connect(server.http, "/sub/trickle", ""));
        let due = start + Duration::from_millis(10 * i);
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
    }
    let events = backend.wait_for(Duration::from_secs(60), |e| {
        count(e, "connect") == 200 && count(e, "disconnect") == 200
    });
    let posts = backend.seen.lock().unwrap().answered.len();
    let all = backend.events().len();
    eprintln!(
        "{} unique events ({all} with repeats) in {posts} POSTs",
        events.len()
    );
    assert!(
        posts * 5 <= events.len(),
        "{posts} POSTs for {} events: batches were not merged",
        events.len()
    );
    let metrics = server.metrics();
    assert_eq!(metric(&metrics, "c1m_webhook_spool_dropped_total"), 0);
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

/// The id a subscriber's response head gave its connection (`C1m-Conn-Id`).
fn conn_id_of(head: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix("C1m-Conn-Id: "))
        .unwrap_or_else(|| panic!("no C1m-Conn-Id in {head:?}"))
        .trim()
        .to_string()
}

/// An SSE subscriber that may fail (the listener is changing hands): its connection id, or
/// None when it did not get its head. The connection is closed again at once.
fn flap_once(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n"
    )
    .ok()?;
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    head.starts_with("HTTP/1.1 200").then(|| conn_id_of(&head))
}

/// A live upgrade while subscribers come and go and the backend is slow and refuses the first
/// POSTs: the old master's events (spooled or queued) and the new master's all arrive; each
/// connection — held across the upgrade or opened and closed around it — has one `connect`
/// and one `disconnect`, both under the id its response head named; an event id is never
/// reused for another event; occupied and vacated pair up per channel.
#[test]
fn a_live_upgrade_loses_no_event() {
    c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    let backend = Backend::start("127.0.0.1:0", &[503, 503, 503, 503]);
    backend.seen.lock().unwrap().delay = Duration::from_millis(20);
    let spool = spool_dir("upgrade");
    let scratch = crate::serve_upgrade::Scratch::new("webhooks");
    let mut cmd = std::process::Command::new(scratch.exe());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "2"])
        .args(["--upgrade-timeout", "15s", "--webhook-vacate-delay", "1s"])
        .args(["--webhook-url", &backend.url()])
        .arg("--webhook-spool")
        .arg(&spool);
    let (mut server, _logs) = Server::spawn_capturing_stderr(cmd);
    let http = server.http;
    let held: Vec<Sse> = (0..40)
        .map(|i| Sse::connect(http, &format!("/sub/u{}", i % 4), ""))
        .collect();
    let mut expected: Vec<String> = held.iter().map(|s| conn_id_of(&s.head)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let (mut ids, mut failed) = (Vec::new(), 0);
            let until = Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until && ids.len() < 400 {
                match flap_once(http, "/sub/c") {
                    Some(id) => ids.push(id),
                    None => failed += 1,
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            (ids, failed)
        })
    };
    backend.wait_for(Duration::from_secs(20), |e| count(e, "connect") >= 60);
    let (s, _new) = crate::serve_upgrade::upgrade_in_place(&mut server);
    assert_eq!(s["upgrades"]["completed"], 1, "{s}");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (churned, failed) = churn.join().unwrap();
    eprintln!("churned connections: {} (failed {failed})", churned.len());
    expected.extend(churned);
    drop(held);
    let events = backend.wait_until(Duration::from_secs(90), |e| {
        count(e, "disconnect") >= expected.len()
            && count(e, "channel_vacated") >= 5
            && count(e, "connect") == count(e, "disconnect")
    });
    eprintln!(
        "{} connections; events: {} connect, {} disconnect, {} vacated",
        expected.len(),
        count(&events, "connect"),
        count(&events, "disconnect"),
        count(&events, "channel_vacated")
    );
    // An id names one event: a second POST of it (a retry) carries the same event.
    let mut by_id: HashMap<String, Value> = HashMap::new();
    for e in backend.events() {
        let id = e["id"].as_str().unwrap().to_string();
        if let Some(first) = by_id.get(&id) {
            assert_eq!(first, &e, "two events share the id {id}");
        }
        by_id.insert(id, e);
    }
    let mut per_conn: HashMap<&str, (usize, usize)> = HashMap::new();
    for e in &events {
        let conn = e["conn"].as_str().unwrap_or("");
        match e["type"].as_str().unwrap() {
            "connect" => per_conn.entry(conn).or_default().0 += 1,
            "disconnect" => {
                assert_eq!(e["reason"], "client_closed", "{e}");
                per_conn.entry(conn).or_default().1 += 1;
            }
            _ => {}
        }
    }
    let unpaired: Vec<_> = per_conn.iter().filter(|(_, &n)| n != (1, 1)).collect();
    assert!(
        unpaired.is_empty(),
        "each connection has one connect and one disconnect; not so: {unpaired:?}"
    );
    let expected: HashSet<&str> = expected.iter().map(String::as_str).collect();
    let missing: Vec<_> = expected
        .iter()
        .filter(|id| !per_conn.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "connections the clients were told of with no events: {missing:?}"
    );
    let mut channels: HashMap<String, (usize, usize)> = HashMap::new();
    for e in &events {
        let c = e["channels"][0].as_str().unwrap_or("").to_string();
        match e["type"].as_str().unwrap() {
            "channel_occupied" => channels.entry(c).or_default().0 += 1,
            "channel_vacated" => channels.entry(c).or_default().1 += 1,
            _ => {}
        }
    }
    for (c, (occupied, vacated)) in &channels {
        assert_eq!(occupied, vacated, "channel {c}: {channels:?}");
    }
    assert_eq!(channels.len(), 5, "{channels:?}");
    let _ = std::fs::remove_dir_all(&spool);
}

/// An https:// backend whose certificate a private CA signed: with `--webhook-ca-file` every
/// event arrives over TLS; without it the certificate is refused (the system's roots do not
/// know that CA), each POST fails with the reason logged and counted, and nothing is sent in
/// the clear. A CA file that is no CA is an error at start.
#[test]
fn an_https_backend_signed_by_a_private_ca_gets_every_event() {
    let pki = crate::tls_support::TestPki::new("webhooks");
    let leaf = pki.leaf("backend");
    let backend = Backend::start_tls(&leaf);
    let spool = spool_dir("https");
    let ca = pki.ca_pem.to_str().unwrap();
    let server = serve(
        &backend.https_url(),
        &spool,
        &["--workers", "1", "--webhook-ca-file", ca],
    );
    flap(&server, "tls", 2);
    let events = backend.wait_for(Duration::from_secs(20), |e| count(e, "disconnect") == 2);
    assert_eq!(count(&events, "connect"), 2, "{events:?}");
    server.wait_status(|s| s["webhooks"]["spool_bytes"].as_u64() == Some(0));
    drop(server);
    let delivered = backend.events().len();

    // Without the CA: refused, retried, said why.
    let untrusted = spool_dir("https-untrusted");
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--webhook-url", &backend.https_url()])
        .arg("--webhook-spool")
        .arg(&untrusted);
    let (server, logs) = Server::spawn_capturing_stderr(cmd);
    flap(&server, "tls", 1);
    let line = logs
        .wait_for("webhook POST failed", Duration::from_secs(15))
        .expect("the refused certificate is logged");
    assert!(line.contains("TLS handshake with 127.0.0.1"), "{line}");
    assert!(line.to_lowercase().contains("certificate"), "{line}");
    let failed = metric(
        &server.metrics(),
        "c1m_webhook_requests_total{outcome=\"failed\"}",
    );
    assert!(failed >= 1);
    assert_eq!(
        backend.events().len(),
        delivered,
        "nothing more reached the backend"
    );
    drop(server);

    // A CA file with no certificate in it stops the start, naming the file.
    let bad = pki.dir.join("not-a-ca.pem");
    std::fs::write(&bad, "hello\n").unwrap();
    let out = c1m()
        .args(["serve", "--listen", "127.0.0.1:0", "--check-config"])
        .args(["--webhook-url", &backend.https_url()])
        .arg("--webhook-spool")
        .arg(&untrusted)
        .arg("--webhook-ca-file")
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--webhook-ca-file") && stderr.contains("not-a-ca.pem"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&spool);
    let _ = std::fs::remove_dir_all(&untrusted);
}

/// The `node` name (`HOST:PORT`) of the node listening on `port`, from its events.
fn node_on_port(events: &[Value], port: u16) -> String {
    let suffix = format!(":{port}");
    events
        .iter()
        .filter_map(|e| e["node"].as_str())
        .find(|n| n.ends_with(&suffix))
        .unwrap_or_else(|| panic!("no event from the node on port {port}"))
        .to_string()
}

/// Two nodes on one Redis, one backend: `count` of the given reason's disconnects.
fn disconnects_for(events: &[Value], reason: &str) -> usize {
    events
        .iter()
        .filter(|e| e["type"] == "disconnect" && e["reason"] == reason)
        .count()
}

/// Node B dies with kill -9 (its master; its worker follows) holding 200 connections: node A
/// reports one `disconnect` with reason `node_lost` per connection, under B's node name and
/// the ids B's clients were told, within 10 s; exactly once (by id), and none for A's own
/// connection. B's mirror is gone from Redis afterwards.
#[test]
fn a_dead_nodes_connections_are_reported_lost_by_another_node_once() {
    let Some(redis) = crate::redis_support::Redis::start(&[]) else {
        return; // skipped loudly by redis_support (a failure under CI)
    };
    dead_node_reported_lost(&format!("redis://{}", redis.addr()), &redis, "c1m:wh:");
}

/// The same under Redis Cluster (3 masters): the mirror's keys share the hash tag `{wh}`, so
/// they live on the shard that owns its slot, where the test reads them.
#[test]
fn under_redis_cluster_a_dead_nodes_connections_are_reported_lost_by_another_node_once() {
    let Some(cluster) = crate::redis_support::cluster::Cluster::start(3) else {
        return; // skipped loudly by redis_support (a failure under CI)
    };
    let shard = cluster.owner(cluster.keyslot("c1m:{wh}:nodes"), 0);
    dead_node_reported_lost(&cluster.url(), &cluster.nodes[shard], "c1m:{wh}:");
}

/// Two nodes on the broker at `url` (webhooks on, one backend); `redis` holds the mirror's
/// keys, named with `prefix`.
fn dead_node_reported_lost(url: &str, redis: &crate::redis_support::Redis, prefix: &str) {
    let url = url.to_string();
    let backend = Backend::start("127.0.0.1:0", &[]);
    let (spool_a, spool_b) = (spool_dir("lost-a"), spool_dir("lost-b"));
    let node =
        |spool: &PathBuf| serve(&backend.url(), spool, &["--workers", "1", "--broker", &url]);
    let a = node(&spool_a);
    let mut b = node(&spool_b);
    let n = 200;
    let held: Vec<Sse> = (0..n)
        .map(|i| Sse::connect(b.http, &format!("/sub/l{}", i % 5), ""))
        .collect();
    let on_b: HashSet<String> = held.iter().map(|s| conn_id_of(&s.head)).collect();
    let on_a = Sse::connect(a.http, "/sub/l0", "");
    let events = backend.wait_for(Duration::from_secs(20), |e| count(e, "connect") == n + 1);
    // Connection ids are per node (A's first may equal B's): B is known by its port.
    let b_node = node_on_port(&events, b.http.port());
    // The mirrors are written once a second.
    let mirrored = || -> usize {
        let keys = redis.cli(&[], &["KEYS", &format!("{prefix}conns:*")]);
        keys.lines()
            .filter(|k| !k.trim().is_empty())
            .map(|k| {
                redis
                    .cli(&[], &["HLEN", k.trim()])
                    .trim()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while mirrored() != n + 1 {
        assert!(
            Instant::now() < deadline,
            "mirrored {} of {}",
            mirrored(),
            n + 1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let b_key = redis
        .cli(&[], &["KEYS", &format!("{prefix}conns:{b_node}|*")])
        .trim()
        .to_string();
    let bytes: usize = redis
        .cli(&[], &["MEMORY", "USAGE", &b_key])
        .trim()
        .parse()
        .unwrap();
    eprintln!(
        "Redis memory of a node's mirror: {bytes} B for {n} connections ({} B each)",
        bytes / n
    );
    let killed = Instant::now();
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    backend.wait_for(Duration::from_secs(20), |e| {
        disconnects_for(e, "node_lost") >= n
    });
    let took = killed.elapsed();
    eprintln!("node_lost disconnects for {n} connections {took:?} after the kill");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Nothing more comes: exactly once.
    std::thread::sleep(Duration::from_secs(3));
    let events = backend.unique_events();
    let lost: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "disconnect" && e["reason"] == "node_lost")
        .collect();
    assert_eq!(lost.len(), n);
    let conns: HashSet<&str> = lost.iter().map(|e| e["conn"].as_str().unwrap()).collect();
    assert_eq!(conns.len(), n, "one per connection");
    assert!(
        conns.iter().all(|c| on_b.contains(*c)),
        "B's connections only"
    );
    assert!(
        lost.iter().all(|e| e["node"] == b_node.as_str()),
        "{:?}",
        lost[0]
    );
    assert!(lost.iter().all(|e| e["reported_by"] != b_node.as_str()));
    assert_eq!(
        count(&events, "disconnect"),
        n,
        "A's own connection is open"
    );
    // B's mirror is gone; A's stays.
    let keys = redis.cli(&[], &["KEYS", &format!("{prefix}conns:*")]);
    assert_eq!(
        keys.lines().filter(|k| !k.trim().is_empty()).count(),
        1,
        "{keys}"
    );
    assert!(!keys.contains(&b_node), "{keys}");
    drop((held, on_a));
    let _ = std::fs::remove_dir_all(&spool_a);
    let _ = std::fs::remove_dir_all(&spool_b);
}

/// Two nodes on one Redis: each reports its own connections (`node` says which), and
/// `channel_occupied` / `channel_vacated` follow each node's own subscribers of a channel —
/// a channel held on both nodes is occupied twice and vacated by each node as it empties
/// there (docs/PROTOCOL.md says so).
#[test]
fn two_nodes_report_their_own_connections_and_channels() {
    let Some(redis) = crate::redis_support::Redis::start(&[]) else {
        return; // skipped loudly by redis_support (a failure under CI)
    };
    let url = format!("redis://{}", redis.addr());
    let backend = Backend::start("127.0.0.1:0", &[]);
    let (spool_a, spool_b) = (spool_dir("two-a"), spool_dir("two-b"));
    let node = |spool: &PathBuf| {
        serve(
            &backend.url(),
            spool,
            &[
                "--workers",
                "1",
                "--broker",
                &url,
                "--webhook-vacate-delay",
                "1s",
            ],
        )
    };
    let (a, b) = (node(&spool_a), node(&spool_b));
    let on_a = Sse::connect(a.http, "/sub/shared", "");
    let on_b = Sse::connect(b.http, "/sub/shared", "");
    let events = backend.wait_for(Duration::from_secs(15), |e| {
        count(e, "subscribe") == 2 && count(e, "channel_occupied") == 2
    });
    let (node_a, node_b) = (
        node_on_port(&events, a.http.port()),
        node_on_port(&events, b.http.port()),
    );
    assert_ne!(node_a, node_b);
    let occupied: HashSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "channel_occupied")
        .map(|e| e["node"].as_str().unwrap())
        .collect();
    assert_eq!(occupied, HashSet::from([node_a.as_str(), node_b.as_str()]));
    // A's subscriber leaves: A's channel empties (vacated from A); B still holds it.
    drop(on_a);
    let events = backend.wait_for(Duration::from_secs(15), |e| {
        count(e, "channel_vacated") == 1
    });
    let vacated: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "channel_vacated")
        .collect();
    assert_eq!(vacated[0]["node"], node_a.as_str(), "{vacated:?}");
    assert_eq!(count(&events, "disconnect"), 1);
    drop(on_b);
    let events = backend.wait_for(Duration::from_secs(15), |e| {
        count(e, "channel_vacated") == 2
    });
    assert_eq!(count(&events, "disconnect"), 2);
    assert!(events
        .iter()
        .filter(|e| e["type"] == "disconnect")
        .all(|e| e["reason"] == "client_closed"));
    let _ = std::fs::remove_dir_all(&spool_a);
    let _ = std::fs::remove_dir_all(&spool_b);
}
