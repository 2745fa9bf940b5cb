//! HTTP/2 on the HTTP port, against the real binary with independent clients: curl with prior
//! knowledge (h2c) and over TLS (ALPN h2), python-h2 over a real socket (many streams on one
//! connection, a client reset, rapid reset, a stream that never reopens its window, a body over
//! the payload limit), h2spec (the conformance suite, a Go module) and `--no-http2`.

use crate::common::Server;
use crate::tls_support::{path_str, TestPki, TlsServer};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn curl() -> Command {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10"]);
    c
}

/// Reads lines until one equals `want` (bounded by curl's own --max-time).
fn wait_line(lines: &mut impl Iterator<Item = std::io::Result<String>>, want: &str) -> Vec<String> {
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l == want) {
        match lines.next() {
            Some(Ok(l)) => seen.push(l),
            _ => panic!("stream ended before {want:?}; saw {seen:?}"),
        }
    }
    seen
}

pub(crate) fn metric(body: &str, line_start: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line_start} in /metrics"))
}

#[test]
fn h2c_prior_knowledge_with_curl_subscribes_publishes_and_answers_endpoints() {
    let srv = Server::start(&["--workers", "1"]);
    let base = format!("http://127.0.0.1:{}", srv.http.port());
    let mut sse = curl()
        .args([
            "-N",
            "--http2-prior-knowledge",
            "-H",
            "Accept: text/event-stream",
        ])
        .arg(format!("{base}/sub/news"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    srv.wait_status(|s| s["connections"]["sse"] == 1);
    // Publish over HTTP/2 too: the same JSON answer as HTTP/1.1.
    let out = curl()
        .args([
            "--http2-prior-knowledge",
            "-w",
            "\n%{http_version} %{http_code}",
        ])
        .args(["--data-binary", "hello over h2c"])
        .arg(format!("{base}/pub/news"))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(answer.ends_with("\n2 200"), "{answer}");
    let v: serde_json::Value = serde_json::from_str(answer.lines().next().unwrap()).unwrap();
    assert_eq!(v["channel"], "news");
    let id = v["id"].as_u64().unwrap();
    let mut lines = BufReader::new(sse.stdout.take().unwrap()).lines();
    let seen = wait_line(&mut lines, "data: hello over h2c");
    assert!(seen.contains(&format!("id: {id}")), "{seen:?}");
    let _ = sse.kill();
    let _ = sse.wait();
    // Other endpoints and refusals answer as over HTTP/1.1.
    for (path, want) in [
        ("/healthz", "2 200"),
        ("/status", "2 200"),
        ("/nope", "2 404"),
    ] {
        let out = curl()
            .args(["--http2-prior-knowledge", "-o", "/dev/null"])
            .args(["-w", "%{http_version} %{http_code}"])
            .arg(format!("{base}{path}"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{path}");
    }
    // Figures reach the master every 250 ms.
    srv.wait_status(|s| s["http2"]["streams"].as_u64() >= Some(5));
    let m = srv.metrics();
    assert!(
        m.contains("# HELP c1m_http2_connections_total"),
        "no HTTP/2 HELP line in /metrics"
    );
    assert!(metric(&m, "c1m_http2_connections_total") >= 5, "{m}");
    assert!(metric(&m, "c1m_http2_streams_total") >= 5, "{m}");
    // The SSE stream's slot went with its connection.
    srv.wait_status(|s| s["connections"]["sse"] == 0);
}

#[test]
fn no_http2_refuses_h2c_and_offers_only_http11_over_tls() {
    let srv = Server::start(&["--workers", "1", "--no-http2"]);
    let out = curl()
        .args([
            "--http2-prior-knowledge",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(srv.url("/healthz"))
        .output()
        .unwrap();
    assert!(
        !out.status.success() || String::from_utf8_lossy(&out.stdout) != "200",
        "h2c was served with --no-http2"
    );
    let pki = TestPki::new("h2off");
    let leaf = pki.leaf("server");
    let tls = TlsServer::start(&leaf, &pki, &["--workers", "1", "--no-http2"]);
    let out = curl()
        .args([
            "--http2",
            "-v",
            "-o",
            "/dev/null",
            "--cacert",
            path_str(&pki.ca_pem),
        ])
        .arg(format!("https://localhost:{}/healthz", tls.http.port()))
        .output()
        .unwrap();
    let verbose = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{verbose}");
    assert!(
        verbose.contains("ALPN: server accepted http/1.1")
            || verbose.contains("ALPN, server accepted to use http/1.1"),
        "{verbose}"
    );
}

#[test]
fn curl_over_tls_negotiates_h2_and_receives_live_messages() {
    let pki = TestPki::new("h2tls");
    let leaf = pki.leaf("server");
    let srv = TlsServer::start(&leaf, &pki, &["--workers", "1"]);
    let base = format!("https://localhost:{}", srv.http.port());
    let mut sse = curl()
        .args(["-N", "-v", "--http2", "--cacert", path_str(&pki.ca_pem)])
        .args(["-H", "Accept: text/event-stream"])
        .arg(format!("{base}/sub/tls-news"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    srv.wait_status(&pki, |s| s["connections"]["sse"] == 1);
    let out = curl()
        .args([
            "--http2",
            "--cacert",
            path_str(&pki.ca_pem),
            "-w",
            "\n%{http_version}",
        ])
        .args(["--data-binary", "hello over h2"])
        .arg(format!("{base}/pub/tls-news"))
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(answer.ends_with("\n2"), "publish not over HTTP/2: {answer}");
    let mut lines = BufReader::new(sse.stdout.take().unwrap()).lines();
    wait_line(&mut lines, "data: hello over h2");
    let _ = sse.kill();
    let mut verbose = String::new();
    sse.stderr
        .take()
        .unwrap()
        .read_to_string(&mut verbose)
        .unwrap();
    let _ = sse.wait();
    assert!(
        verbose.contains("ALPN: server accepted h2")
            || verbose.contains("ALPN, server accepted to use h2"),
        "curl did not get ALPN h2: {verbose}"
    );
    let s = srv.wait_status(&pki, |s| s["http2"]["streams"].as_u64() >= Some(2));
    assert!(s["http2"]["connections"].as_u64() >= Some(2), "{s}");
}

/// python-h2 (Debian python3-h2) running tests/http2/client.py (or another script there)
/// against the server.
pub(crate) struct PyClient {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl PyClient {
    pub(crate) fn start(port: u16, args: &[&str]) -> PyClient {
        PyClient::script("client.py", port, args)
    }

    /// tests/http2/`name` with its mode (`args[0]`), the port, then the mode's arguments.
    pub(crate) fn script(name: &str, port: u16, args: &[&str]) -> PyClient {
        let script = format!("{}/tests/http2/{name}", env!("CARGO_MANIFEST_DIR"));
        // Debian's interpreter: python3-h2 installs into its dist-packages.
        let mut child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg(args[0])
            .arg(port.to_string())
            .args(&args[1..])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with python3-h2 (scripts/install-test-deps.sh)");
        let out = BufReader::new(child.stdout.take().unwrap());
        PyClient { child, out }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        assert!(!l.is_empty(), "client.py ended early");
        l.trim_end().to_string()
    }

    pub(crate) fn ready(&mut self) {
        assert_eq!(self.line(), "ready");
    }

    pub(crate) fn result(mut self) -> serde_json::Value {
        let v = serde_json::from_str(&self.line()).unwrap();
        let _ = self.child.wait();
        v
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn one_connection_carries_many_sse_streams_and_a_reset_leaves_the_others_alive() {
    let srv = Server::start(&["--workers", "1"]);
    let mut py = PyClient::start(srv.http.port(), &["streams", "20", "5"]);
    py.ready();
    // The reset stream left its channel; 19 + 5 stay.
    srv.wait_status(|s| s["connections"]["sse"] == 24);
    for i in 0..20 {
        srv.publish(&format!("c{i}"), format!("m{i}").as_bytes());
    }
    srv.publish("shared", b"to all five");
    let v = py.result();
    assert_eq!(v["complete"], true, "{v}");
    for i in 1..20 {
        assert_eq!(v["status"][format!("c{i}")], "200", "{v}");
        assert_eq!(
            v["data"][format!("c{i}")],
            serde_json::json!([format!("m{i}")])
        );
    }
    for j in 0..5 {
        assert_eq!(
            v["data"][format!("shared#{j}")],
            serde_json::json!(["to all five"]),
            "{v}"
        );
    }
    assert_eq!(
        v["data"]["c0"],
        serde_json::json!([]),
        "a reset stream got data: {v}"
    );
    // The client closed its connection: every stream slot went with it.
    srv.wait_status(|s| s["connections"]["sse"] == 0);
}

#[test]
fn rapid_reset_gets_goaway_enhance_your_calm_and_is_counted() {
    let srv = Server::start(&["--workers", "1"]);
    let mut py = PyClient::start(srv.http.port(), &["rapid_reset", "300"]);
    py.ready();
    let v = py.result();
    assert_eq!(v["goaway"], 0xb, "expected GOAWAY ENHANCE_YOUR_CALM: {v}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = srv.metrics();
        if metric(
            &m,
            "c1m_http2_connection_errors_total{cause=\"rapid_reset\"}",
        ) == 1
        {
            break;
        }
        assert!(Instant::now() < deadline, "rapid reset not counted: {m}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // No stream slot was left behind by the 300 opened and reset ones.
    srv.wait_status(|s| s["connections"]["sse"] == 0);
}

#[test]
fn a_stream_that_never_reopens_its_window_is_reset_while_its_sibling_keeps_receiving() {
    // The stalled stream may hold min(--max-unsent, 256 KiB) beyond its 64 KiB window; the
    // live one reads as it goes and never comes near that.
    let srv = Server::start(&["--workers", "1"]);
    let mut py = PyClient::start(srv.http.port(), &["stall", "40"]);
    py.ready();
    srv.wait_status(|s| s["connections"]["sse"] == 2);
    let payload = vec![b'x'; 16 * 1024];
    // 640 KiB to the stalled stream: past its window and the 256 KiB it may hold.
    for _ in 0..40 {
        srv.publish("stall", &payload);
        srv.publish("live", &payload);
    }
    let v = py.result();
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["live"], 40, "{v}");
    assert_eq!(v["stall_reset"], 8, "expected RST_STREAM CANCEL: {v}");
    assert_eq!(v["live_reset"], serde_json::Value::Null, "{v}");
    let s = srv.wait_status(|s| s["http2"]["slow_streams"] == 1);
    assert_eq!(s["refused"]["slow_consumer"], 1, "{s}");
    let m = srv.metrics();
    assert_eq!(metric(&m, "c1m_http2_slow_streams_total"), 1);
}

#[test]
fn a_body_over_the_payload_limit_gets_413_then_a_reset_that_stops_the_rest() {
    let srv = Server::start(&["--workers", "1", "--max-payload", "10000"]);
    let total = 1_000_000;
    // Without a content-length the 413 comes once the body passes the limit; the client,
    // sending as fast as the windows allow, is told to stop (RST_STREAM NO_ERROR) instead of
    // having its megabyte read and dropped. With one declared, the 413 comes before any DATA.
    for (declare, most) in [("0", 10_000 + 2 * 65_535), ("1", 65_535)] {
        let mut py = PyClient::start(srv.http.port(), &["oversize", &total.to_string(), declare]);
        py.ready();
        let v = py.result();
        assert_eq!(v["status"], "413", "declared {declare}: {v}");
        assert_eq!(
            v["reset"], 0,
            "expected RST_STREAM NO_ERROR after the 413: {v}"
        );
        assert!(v["goaway"].is_null(), "the connection was closed: {v}");
        let sent = v["sent"].as_u64().unwrap();
        assert!(
            sent <= most,
            "declared {declare}: {sent} body bytes sent: {v}"
        );
    }
    let s = srv.wait_status(|s| s["refused"]["payload_too_large"] == 2);
    assert_eq!(s["http2"]["stream_errors"], 0, "{s}");
}

#[test]
fn a_live_upgrade_ends_http2_streams_with_their_goodbye_and_goaway() {
    // HTTP/2 connections are not handed over; the old worker must still say goodbye the
    // HTTP/2 way so the client reconnects at once instead of finding the socket cut.
    let scratch = crate::serve_upgrade::Scratch::new("h2-goaway");
    let (srv, _logs) = crate::serve_upgrade::start(&scratch, &[]);
    let mut py = PyClient::start(srv.http.port(), &["goaway"]);
    py.ready();
    srv.wait_status(|s| s["connections"]["sse"] == 1);
    scratch.install_patched();
    srv.signal(libc::SIGUSR2);
    let v = py.result();
    // The new master serves on the same port (the old one handed the listeners over).
    let new_master = srv.wait_status(|s| s["pid"].as_u64() != Some(u64::from(srv.child.id())));
    let _kill = crate::serve_upgrade::KillOnDrop(new_master["pid"].as_u64().unwrap() as u32);
    assert_eq!(v["status"], "200", "{v}");
    assert_eq!(
        v["goaway"], 0,
        "expected GOAWAY(NO_ERROR) from the old worker: {v}"
    );
    assert_eq!(v["ended"], true, "the SSE stream was not ended: {v}");
    assert_eq!(v["shutdown_event"], true, "no shutdown event: {v}");
}

/// h2spec (github.com/summerwind/h2spec, a Go module installed by
/// scripts/install-test-deps.sh) against h2c. Sections that cannot pass by design are named.
#[test]
fn h2spec_passes_against_h2c() {
    let h2spec = std::env::var("HOME")
        .map(|h| std::path::PathBuf::from(h).join("go/bin/h2spec"))
        .ok()
        .filter(|p| p.exists())
        .expect("h2spec (scripts/install-test-deps.sh installs it with go install)");
    let srv = Server::start(&["--workers", "1"]);
    let port = srv.http.port().to_string();
    let out = Command::new(h2spec)
        .args(["-h", "127.0.0.1", "-p", &port, "-P", "/healthz", "-o", "3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let failures = text.split("Failures:").nth(1).unwrap_or("");
    // Known and by design:
    // - http2/3.5/2 (invalid preface must close): h2c shares the port with HTTP/1.1, so bytes
    //   that are not the preface are an HTTP/1.1 request and get a 400 answer.
    // - hpack/4.2/1, hpack/5/14-15 and http2/6.10/1 use a dynamic HPACK table: the server
    //   advertises SETTINGS_HEADER_TABLE_SIZE 0 (no table per idle connection), which
    //   h2spec's encoder does not honour.
    let allowed = [
        "Sends invalid connection preface",
        "Sends a dynamic table size update",
        "Sends multiple dynamic table size update",
        "Sends multiple CONTINUATION frames preceded by a HEADERS frame",
    ];
    let unexpected: Vec<&str> = failures
        .lines()
        .filter(|l| l.trim_start().starts_with('×'))
        .filter(|l| !allowed.iter().any(|a| l.contains(a)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "h2spec failures: {unexpected:?}\n{text}"
    );
    let summary = text.lines().last().unwrap_or("");
    eprintln!("h2spec: {summary}");
    assert!(summary.contains("145 tests"), "{summary}");
}

/// The page Chromium loads from a second origin: 20 `EventSource`s to the c1m server; once each
/// got its message it publishes what it saw to `report`.
const TWENTY_STREAMS_PAGE: &str = r#"<!doctype html>
<meta charset="utf-8"><title>twenty streams</title><pre id="log"></pre>
<script>
const server = new URLSearchParams(location.search).get('server');
const got = {};
for (let i = 0; i < 20; i++) {
  const es = new EventSource(server + '/sub/b' + i);
  es.onmessage = e => {
    got['b' + i] = e.data;
    document.getElementById('log').textContent = JSON.stringify(got);
    if (Object.keys(got).length === 20) {
      fetch(server + '/pub/report', { method: 'POST', body: JSON.stringify(got) });
    }
  };
}
</script>"#;

/// Serves [`TWENTY_STREAMS_PAGE`] for any GET from 127.0.0.2 until dropped (60 s at most).
struct PageServer {
    addr: std::net::SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PageServer {
    fn start() -> PageServer {
        use std::io::Write;
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(60);
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf);
                        let page = TWENTY_STREAMS_PAGE;
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                            page.len()
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        PageServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Chromium over TLS (a test CA in its NSS database): 20 `EventSource`s to one origin all open
/// and all get a live message, over one HTTP/2 connection. With `--no-http2` the same page
/// stays at HTTP/1.1's six connections per origin.
#[test]
fn chromium_opens_twenty_event_sources_over_one_http2_connection() {
    let pki = TestPki::new("h2browser");
    let leaf = pki.leaf("c1m-h2");
    let page = PageServer::start();
    let origin = format!("http://{}", page.addr);
    let args = ["--workers", "1", "--cors-origins", &origin];
    let srv = TlsServer::start(&leaf, &pki, &args);
    let mut report = pki.connect(srv.http);
    std::io::Write::write_all(
        &mut report,
        b"GET /sub/report HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n",
    )
    .unwrap();
    crate::tls_support::read_until(&mut report, "\r\n\r\n");
    let url = format!("{origin}/?server=https://{}", srv.http);
    let _browser = crate::browser::Browser::open_with(&url, "h2", &[], Some(&pki.ca_pem));
    // The report stream (HTTP/1.1) and the page's 20.
    let s = srv.wait_status(&pki, |s| s["connections"]["sse"] == 21);
    assert_eq!(s["http2"]["connections"], 1, "one HTTP/2 connection: {s}");
    for i in 0..20 {
        srv.publish(&pki, &format!("b{i}"), format!("live {i}").as_bytes());
    }
    let got = crate::tls_support::read_until(&mut report, "}\n");
    let data = got
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap_or_else(|| panic!("no data line in {got:?}"));
    let seen: serde_json::Value = serde_json::from_str(data).unwrap();
    for i in 0..20 {
        assert_eq!(seen[format!("b{i}")], format!("live {i}"), "{seen}");
    }
    drop(_browser);

    // The same page with HTTP/2 off: six connections per origin, the other 14 wait.
    let srv = TlsServer::start(
        &leaf,
        &pki,
        &["--workers", "1", "--no-http2", "--cors-origins", &origin],
    );
    let url = format!("{origin}/?server=https://{}", srv.http);
    let _browser = crate::browser::Browser::open_with(&url, "h1", &[], Some(&pki.ca_pem));
    srv.wait_status(&pki, |s| s["connections"]["sse"] == 6);
    std::thread::sleep(Duration::from_secs(2));
    let s = srv.status(&pki);
    assert_eq!(s["connections"]["sse"], 6, "HTTP/1.1 limit: {s}");
    assert_eq!(s["http2"]["connections"], 0, "{s}");
}
