//! The JavaScript client (clients/js, built by `npm ci && npm run build`, which
//! scripts/test.sh does first) in headless Chromium against a real `c1m serve` that is killed
//! and restarted on the same port: over both SSE and WebSocket the page must see every
//! message once, in order, and a gap event for what the restart lost (the new server's history
//! does not hold the old ids).
//!
//! A second page meets a server with `--auth required`: with a token the server refuses (SSE
//! 401, WebSocket upgrade 401) the client must say `connecting`, give up after `maxFailures`
//! attempts with a `failed` event, and with a token that expires while the stream is held it
//! must report `expired` and resume with the next token.
//!
//! The page comes from a small static file server in this test (the client's dist/ files plus
//! a test page), so it is cross-origin to c1m: the server allows that origin with
//! `--cors-origins` (browser security stays on). The page reports to the test by publishing on
//! a report channel.

use crate::auth;
use crate::browser;
use crate::common;

use browser::Browser;
use common::{c1m, Server, Sse};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PAGE: &str = r#"<!doctype html>
<meta charset="utf-8">
<title>c1m client e2e</title>
<script type="module">
import { subscribe } from "/c1m/index.js";
const params = new URLSearchParams(location.search);
const server = params.get("server");
const want = Number(params.get("want"));
const results = {};
const report = (body) => fetch(server + "/pub/e2e-report", { method: "POST", body }).catch(() => {});
function progress() {
  const counts = ["sse", "websocket"].map((t) => results[t].messages.length);
  report(counts.join(","));
  if (counts.every((n) => n >= want)) report(JSON.stringify(results));
}
for (const transport of ["sse", "websocket"]) {
  const r = (results[transport] = { messages: [], ids: [], gaps: [], opens: 0, tokens: 0, errors: [] });
  const sub = subscribe({
    url: server,
    channels: "e2e",
    transport,
    backoff: { initialMs: 100, maxMs: 800 },
    getToken: () => `t${++r.tokens}`,
  });
  sub.on("message", (m) => { r.messages.push(m.data); r.ids.push(m.id); progress(); });
  sub.on("gap", (g) => r.gaps.push(g));
  sub.on("open", () => r.opens++);
  sub.on("error", (e) => r.errors.push(e.reason));
}
</script>
"#;

/// Each transport: one subscription whose tokens are refused (expired before it starts), and
/// one whose first token expires six seconds in (the next one is good). `params`: server,
/// refused (an expired token), short (valid for 2 s), good.
const PAGE_AUTH: &str = r#"<!doctype html>
<meta charset="utf-8">
<title>c1m client refusals</title>
<script type="module">
import { subscribe } from "/c1m/index.js";
const params = new URLSearchParams(location.search);
const server = params.get("server");
const results = {};
const report = (body) => fetch(server + "/pub/e2e-report", { method: "POST", body }).catch(() => {});
function progress() {
  const done = ["sse", "websocket"].every(
    (t) => results[t].failed && results[t].expired.length > 0 && results[t].messages.length > 0,
  );
  if (done) report(JSON.stringify(results));
}
for (const transport of ["sse", "websocket"]) {
  const r = (results[transport] = { states: [], failed: null, attempts: 0, expired: [], messages: [], reasons: [] });
  const refused = subscribe({
    url: server,
    channels: "e2e",
    transport,
    backoff: { initialMs: 50, maxMs: 200 },
    maxFailures: 3,
    getToken: () => { r.attempts++; return params.get("refused"); },
  });
  refused.on("state", (e) => r.states.push(e.state));
  refused.on("failed", (f) => { r.failed = f; progress(); });
  let tokens = 0;
  const expiring = subscribe({
    url: server,
    channels: "e2e",
    transport,
    backoff: { initialMs: 50, maxMs: 200 },
    getToken: () => (++tokens === 1 ? params.get("short") : params.get("good")),
  });
  expiring.on("expired", (e) => { r.expired.push(e.transport); progress(); });
  expiring.on("reconnect", (e) => r.reasons.push(e.reason));
  expiring.on("message", (m) => { r.messages.push(m.data); progress(); });
}
</script>
"#;

/// A static file server for the page and the client's modules; stops when dropped.
struct StaticFiles {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StaticFiles {
    fn start(dist: PathBuf) -> StaticFiles {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => serve_file(stream, &dist),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        StaticFiles {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for StaticFiles {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request per connection: `/` is the page, `/auth` the refusal page, `/c1m/NAME.js` a
/// file of dist/.
fn serve_file(mut stream: TcpStream, dist: &Path) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let path = line.split(' ').nth(1).unwrap_or("/");
    let path = path.split('?').next().unwrap_or("/");
    let (status, kind, body) = match path.strip_prefix("/c1m/") {
        None if path == "/" => ("200 OK", "text/html", PAGE.as_bytes().to_vec()),
        None if path == "/auth" => ("200 OK", "text/html", PAGE_AUTH.as_bytes().to_vec()),
        Some(name) if !name.contains("..") && name.ends_with(".js") => {
            match std::fs::read(dist.join(name)) {
                Ok(b) => ("200 OK", "text/javascript", b),
                Err(_) => ("404 Not Found", "text/plain", b"missing".to_vec()),
            }
        }
        _ => ("404 Not Found", "text/plain", b"not found".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

/// `c1m serve` on exactly `addr` (the port the killed server had): retried briefly, as the
/// old workers' sockets may take a moment to go.
fn restart_on(addr: SocketAddr, origin: &str) -> Server {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut child = c1m()
            .args(["serve", "--workers", "2", "--listen", &addr.to_string()])
            .args(["--cors-origins", origin])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let server = Server {
            child,
            http: addr,
            tcp: None,
        };
        if line.starts_with("c1m serve: listening on http ") {
            server.wait_status(|s| {
                s["workers"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|w| w["pid"].as_u64() != Some(0))
            });
            return server;
        }
        drop(server); // exited: the port was still held
        assert!(Instant::now() < deadline, "port {addr} never came free");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads report events until one satisfies `done`, at most 20 s.
fn wait_report(report: &mut Sse, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let event = report.next();
        if done(&event.data) {
            return event.data;
        }
        assert!(Instant::now() < deadline, "no matching report");
    }
}

#[test]
fn browser_client_resumes_across_a_server_restart_with_a_gap() {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js/dist");
    assert!(
        dist.join("index.js").exists(),
        "clients/js is not built: run `npm ci && npm run build` there (scripts/test.sh does)"
    );
    let files = StaticFiles::start(dist);
    let origin = format!("http://{}", files.addr);
    let mut server = Server::start(&["--workers", "2", "--cors-origins", &origin]);
    let port = server.http;
    let mut report = Sse::connect(server.http, "/sub/e2e-report", "");
    let page = format!(
        "http://{}/?server=http://{}&want=6",
        files.addr, server.http
    );
    let _browser = Browser::open(&page, "js-client");
    // The page's two subscriptions plus this test's report stream.
    server.wait_status(|s| s["connections"]["websocket"] == 1 && s["connections"]["sse"] == 2);
    let mut ids = Vec::new();
    for m in ["m1", "m2", "m3"] {
        ids.push(server.publish("e2e", m.as_bytes()));
    }
    wait_report(&mut report, |r| r == "3,3");

    // Crash: the master and (through PR_SET_PDEATHSIG) its workers die at once, history too.
    server.signal(libc::SIGKILL);
    server.wait_exit(Duration::from_secs(5));
    drop(report);
    let server = restart_on(port, &origin);
    let mut report = Sse::connect(server.http, "/sub/e2e-report", "");
    // m4 may land before the page reconnects (it is then replayed after the gap) or after.
    ids.push(server.publish("e2e", b"m4"));
    server.wait_status(|s| s["connections"]["websocket"] == 1 && s["connections"]["sse"] == 2);
    for m in ["m5", "m6"] {
        ids.push(server.publish("e2e", m.as_bytes()));
    }
    let json = wait_report(&mut report, |r| r.starts_with('{'));
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    for transport in ["sse", "websocket"] {
        let r = &results[transport];
        let messages: Vec<&str> = r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert_eq!(
            messages,
            ["m1", "m2", "m3", "m4", "m5", "m6"],
            "{transport}: {r}"
        );
        let got_ids: Vec<u64> = r["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().parse().unwrap())
            .collect();
        assert_eq!(got_ids, ids, "{transport}");
        let gaps = r["gaps"].as_array().unwrap();
        assert_eq!(gaps.len(), 1, "{transport}: one gap, for the restart: {r}");
        assert_eq!(gaps[0]["channel"], "e2e");
        assert_eq!(gaps[0]["after"], ids[2].to_string(), "{transport}");
        let through: u64 = gaps[0]["through"].as_str().unwrap().parse().unwrap();
        assert!(through > ids[2] && through < ids[3], "{transport}: {r}");
        assert_eq!(r["opens"], 2, "{transport}: one open per server: {r}");
        assert!(
            r["tokens"].as_u64().unwrap() >= 2,
            "a token per attempt: {r}"
        );
        assert_eq!(r["errors"].as_array().unwrap().len(), 0, "{transport}: {r}");
    }
}

#[test]
fn browser_client_gives_up_on_refusal_and_reports_expiry() {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js/dist");
    assert!(
        dist.join("index.js").exists(),
        "clients/js is not built: run `npm ci && npm run build` there (scripts/test.sh does)"
    );
    let keys = auth::Keys::new("js-client");
    let files = StaticFiles::start(dist);
    let origin = format!("http://{}", files.addr);
    let server = Server::start(&[
        "--workers",
        "2",
        "--auth",
        "required",
        "--jwt-key",
        &keys.secret(),
        "--cors-origins",
        &origin,
    ]);
    let claims = |exp: u64| serde_json::json!({"exp": exp, "channels": ["e2e", "e2e-report"]});
    let refused = keys.hs256(&claims(auth::now() - 10));
    let good = keys.hs256(&claims(auth::now() + 120));
    let mut report = Sse::connect(server.http, &format!("/sub/e2e-report?token={good}"), "");
    let short = keys.hs256(&claims(auth::now() + 6));
    let page = format!(
        "http://{}/auth?server=http://{}&refused={refused}&short={short}&good={good}",
        files.addr, server.http
    );
    let _browser = Browser::open(&page, "js-client-auth");
    // Both expiring subscriptions back with the good token (one SSE is this test's report).
    server.wait_status(|s| {
        s["refused"]["expired"] == 2
            && s["connections"]["websocket"] == 1
            && s["connections"]["sse"] == 2
    });
    server.publish("e2e", b"after expiry");
    let json = wait_report(&mut report, |r| r.starts_with('{'));
    let results: serde_json::Value = serde_json::from_str(&json).unwrap();
    for transport in ["sse", "websocket"] {
        let r = &results[transport];
        assert_eq!(
            r["states"],
            serde_json::json!(["connecting", "failed"]),
            "{transport}: {r}"
        );
        assert_eq!(r["attempts"], 3, "{transport}: bounded attempts: {r}");
        assert_eq!(r["failed"]["attempts"], 3, "{transport}: {r}");
        // EventSource tells a refusal from a drop; a refused WebSocket upgrade looks like an
        // unreachable server (1006).
        let (refused, reason) = match transport {
            "sse" => (true, "refused (HTTP error status or CORS)"),
            _ => (false, "close 1006 before open (refused or unreachable)"),
        };
        assert_eq!(r["failed"]["refused"], refused, "{transport}: {r}");
        assert_eq!(r["failed"]["reason"], reason, "{transport}: {r}");
        assert_eq!(
            r["expired"],
            serde_json::json!([transport]),
            "{transport}: {r}"
        );
        assert_eq!(r["reasons"][0], "token expired", "{transport}: {r}");
        assert_eq!(
            r["messages"],
            serde_json::json!(["after expiry"]),
            "{transport}: {r}"
        );
    }
}
