//! Test harness: starts the real `c1m serve` binary on loopback ports chosen by the kernel,
//! and talks to it with independent clients (ureq for HTTP, a small SSE parser over a raw
//! TcpStream written from the spec, curl where a whole separate program is wanted).
#![allow(dead_code)] // each test file uses a different part of the harness

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub fn c1m() -> Command {
    Command::new(env!("CARGO_BIN_EXE_c1m"))
}

pub struct Server {
    pub child: Child,
    pub http: SocketAddr,
    pub tcp: Option<SocketAddr>,
}

/// Spawns `cmd` (a `c1m serve …`) and returns the child with its banner line (its first line
/// on stdout), asking nothing else: for a server whose /status is elsewhere (an admin
/// listener), or a test that must leave no pooled connection in a worker.
pub fn spawn_for_banner(mut cmd: Command) -> (Child, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn c1m serve");
    let mut banner = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    (child, banner)
}

impl Server {
    /// `c1m serve --listen 127.0.0.1:0 ARGS…`
    pub fn start(args: &[&str]) -> Server {
        let mut cmd = c1m();
        cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(args);
        Server::spawn(cmd)
    }

    pub fn spawn(cmd: Command) -> Server {
        Server::spawn_with(cmd, Stdio::inherit())
    }

    /// Like [`Server::spawn`], with the server's stderr collected line by line (its logs).
    pub fn spawn_capturing_stderr(cmd: Command) -> (Server, LogLines) {
        let mut server = Server::spawn_with(cmd, Stdio::piped());
        let lines = collect_stderr(&mut server.child);
        (server, lines)
    }

    fn spawn_with(mut cmd: Command, stderr: Stdio) -> Server {
        cmd.stderr(stderr);
        let (mut child, line) = spawn_for_banner(cmd);
        let parsed = parse_banner(&line);
        let Some((http, tcp)) = parsed else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("unexpected first line from c1m serve: {line:?}");
        };
        let server = Server { child, http, tcp };
        server.wait_status(|s| {
            s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["pid"].as_u64() != Some(0))
        });
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// The `/metrics` body (Prometheus text).
    pub fn metrics(&self) -> String {
        ureq::get(&self.url("/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap()
    }

    pub fn status(&self) -> serde_json::Value {
        let body = ureq::get(&self.url("/status"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    }

    /// Held streams in a /status body: every connection but `other` (an HTTP client's idle
    /// keep-alive connection, a /status request in flight), which a test's own pooled
    /// clients add and remove at any time.
    pub fn held(status: &serde_json::Value) -> u64 {
        let c = &status["connections"];
        c["total"].as_u64().unwrap_or(0) - c["other"].as_u64().unwrap_or(0)
    }

    /// Polls /status until `pred` holds (figures are pushed every 250 ms), at most 10 s.
    pub fn wait_status(&self, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(resp) = ureq::get(&self.url("/status")).call() {
                let v: serde_json::Value =
                    serde_json::from_str(&resp.into_string().unwrap()).unwrap();
                if pred(&v) {
                    return v;
                }
                if Instant::now() > deadline {
                    panic!("status never matched; last: {v}");
                }
            } else if Instant::now() > deadline {
                panic!("status never answered");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn publish(&self, channel: &str, payload: &[u8]) -> u64 {
        let body = ureq::post(&self.url(&format!("/pub/{channel}")))
            .send_bytes(payload)
            .unwrap()
            .into_string()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["channel"], channel);
        v["id"].as_u64().unwrap()
    }

    pub fn signal(&self, sig: i32) {
        c1m_sys::process::kill(self.child.id(), sig).unwrap();
    }

    /// Waits for the master to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn worker_pids(&self) -> Vec<u32> {
        self.status()["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["pid"].as_u64().unwrap() as u32)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Workers die with the master (PR_SET_PDEATHSIG).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines a server wrote to stderr so far, collected by a thread.
#[derive(Clone, Default)]
pub struct LogLines(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

/// Collects `child`'s piped stderr line by line on a thread (each echoed to the test's own
/// stderr as `serve: …`).
pub fn collect_stderr(child: &mut Child) -> LogLines {
    let stderr = child.stderr.take().expect("stderr piped");
    let lines = LogLines::default();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("serve: {line}");
            sink.0.lock().unwrap().push(line);
        }
    });
    lines
}

impl LogLines {
    pub fn snapshot(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) for a line containing `needle`; returns it.
    pub fn wait_for(&self, needle: &str, limit: Duration) -> Option<String> {
        let end = Instant::now() + limit;
        loop {
            if let Some(l) = self.snapshot().into_iter().find(|l| l.contains(needle)) {
                return Some(l);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The admin address the banner ends with (`…; admin http ADDR`, or `admin https ADDR` with
/// `--admin-tls`), or the JSON banner's `admin` field.
pub fn parse_banner_admin(line: &str) -> Option<SocketAddr> {
    if let Some(fields) = json_banner(line) {
        return fields["admin"].as_str()?.parse().ok();
    }
    line.rsplit_once("; admin http ")
        .or_else(|| line.rsplit_once("; admin https "))
        .and_then(|(_, a)| a.trim().parse().ok())
}

/// The `fields` of the banner `--log-format json` writes (one JSON log event).
pub fn json_banner(line: &str) -> Option<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(line.trim()).ok()?;
    (v["fields"]["message"] == "c1m serve: listening").then(|| v["fields"].clone())
}

/// `c1m serve: listening on http ADDR[, tcp ADDR]; …` → (http, tcp); or the same fields from
/// the JSON banner.
pub fn parse_banner(line: &str) -> Option<(SocketAddr, Option<SocketAddr>)> {
    if let Some(fields) = json_banner(line) {
        let http = fields["http"].as_str()?.parse().ok()?;
        let tcp = match fields["tcp"].as_str() {
            Some(t) => Some(t.parse().ok()?),
            None => None,
        };
        return Some((http, tcp));
    }
    let rest = line.strip_prefix("c1m serve: listening on http ")?;
    let (addrs, _) = rest.split_once(';')?;
    let mut parts = addrs.split(", tcp ");
    let http = parts.next()?.parse().ok()?;
    let tcp = match parts.next() {
        Some(t) => Some(t.parse().ok()?),
        None => None,
    };
    Some((http, tcp))
}

/// One SSE event as a client sees it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Event {
    pub event: Option<String>,
    pub id: Option<String>,
    pub data: String,
}

/// A minimal SSE client over a raw TcpStream, following the WHATWG parsing rules.
pub struct Sse {
    pub stream: TcpStream,
    buf: Vec<u8>,
    pub head: String,
}

impl Sse {
    pub fn connect(addr: SocketAddr, path: &str, extra_headers: &str) -> Sse {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{extra_headers}\r\n"
        )
        .unwrap();
        let mut sse = Sse {
            stream,
            buf: Vec::new(),
            head: String::new(),
        };
        let end = sse.read_until(b"\r\n\r\n");
        sse.head = String::from_utf8(sse.buf.drain(..end).collect()).unwrap();
        assert!(sse.head.starts_with("HTTP/1.1 200"), "{}", sse.head);
        assert!(sse.head.contains("text/event-stream"));
        sse
    }

    fn read_until(&mut self, pat: &[u8]) -> usize {
        loop {
            if let Some(p) = self.buf.windows(pat.len()).position(|w| w == pat) {
                return p + pat.len();
            }
            let mut chunk = [0u8; 8192];
            let n = self.stream.read(&mut chunk).expect("read from server");
            assert!(
                n > 0,
                "server closed the stream; buffered: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Next event (comments skipped).
    pub fn next(&mut self) -> Event {
        loop {
            let end = self.read_until(b"\n\n");
            let block: Vec<u8> = self.buf.drain(..end).collect();
            let text = String::from_utf8(block).unwrap();
            let mut ev = Event::default();
            let mut data: Vec<&str> = Vec::new();
            for line in text.lines() {
                if line.starts_with(':') || line.is_empty() {
                    continue;
                }
                let (field, value) = line.split_once(':').unwrap_or((line, ""));
                let value = value.strip_prefix(' ').unwrap_or(value);
                match field {
                    "event" => ev.event = Some(value.to_string()),
                    "id" => ev.id = Some(value.to_string()),
                    "data" => data.push(value),
                    _ => {}
                }
            }
            if data.is_empty() && ev.event.is_none() {
                continue; // a comment-only block (heartbeat)
            }
            ev.data = data.join("\n");
            return ev;
        }
    }

    /// Raw bytes until the server closes (for shutdown checks).
    pub fn read_to_close(&mut self) -> String {
        let mut rest = Vec::new();
        self.stream.read_to_end(&mut rest).unwrap();
        self.buf.extend(rest);
        String::from_utf8_lossy(&self.buf).to_string()
    }
}

/// The Content-Length an HTTP answer's head names (panics without one).
pub fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("content-length")
}

/// Sends raw bytes and returns everything the server answers until it closes (≤ 10 s).
pub fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).to_string()
}

/// Listening sockets on `port` (IPv4, /proc/net/tcp state 0A = LISTEN).
pub fn listening_sockets(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let want = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
        .count()
}

/// Status line code of a raw HTTP answer.
pub fn status_code(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Runs `c1m bench ARGS --report FILE`; returns its exit code, the JSON report and stdout
/// (printed too, so a failing test shows bench's summary).
pub fn run_bench(args: &[&str]) -> (i32, serde_json::Value, String) {
    let report = std::env::temp_dir().join(format!(
        "c1m-bench-report-{}-{}.json",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let out = c1m()
        .arg("bench")
        .args(args)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "no report ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let _ = std::fs::remove_file(&report);
    eprintln!("{stdout}");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_str(&text).unwrap(),
        stdout,
    )
}
