//! What the Redis-backed cluster tests share: a real `redis-server` from
//! Debian started on a loopback port in its own temp dir (with a password, an ACL user, TLS
//! from an openssl-minted CA, or as one master of a Redis Cluster), `redis-cli` to change it
//! under a running node, and an SSE subscriber that reports messages and gaps.
//!
//! redis-server, redis-cli and openssl must be installed (scripts/install-test-deps.sh).
//! Without them the tests are skipped with a loud message, except under CI (`CI` set), where a
//! missing binary fails them.
#![allow(dead_code)] // each test file uses a different part

pub mod cluster;
pub mod sentinel;
pub mod stream;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "c1m-redis5-{what}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed and reaped when dropped, also on panic.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn find(candidates: &[&'static str]) -> Option<&'static str> {
    candidates.iter().copied().find(|p| Path::new(p).exists())
}

/// The redis-server and redis-cli binaries, or None (the caller skips, unless under CI).
pub fn binaries() -> Option<(&'static str, &'static str)> {
    let server = find(&["/usr/bin/redis-server", "/usr/local/bin/redis-server"]);
    let cli = find(&["/usr/bin/redis-cli", "/usr/local/bin/redis-cli"]);
    match (server, cli) {
        (Some(s), Some(c)) => Some((s, c)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "redis-server or redis-cli missing under CI: scripts/install-test-deps.sh must install them"
            );
            eprintln!("SKIPPED: redis-server or redis-cli is not installed");
            None
        }
    }
}

pub fn wait_listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen in 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One redis-server on a loopback port.
pub struct Redis {
    proc: Option<Proc>,
    pub server: &'static str,
    pub cli: &'static str,
    pub port: u16,
    pub dir: TempDir,
    args: Vec<String>,
}

impl Redis {
    /// Started with `extra` arguments (e.g. `--requirepass x`), no persistence.
    pub fn start(extra: &[&str]) -> Option<Redis> {
        Some(Redis::try_start(extra)?.unwrap_or_else(|e| panic!("{e}")))
    }

    /// Like [`Redis::start`], but a server that does not come up (its port, from
    /// `free_port()`, taken by another test between the probe and redis-server's bind) is an
    /// error carrying its log, so a caller starting many nodes can try again on new ports.
    pub fn try_start(extra: &[&str]) -> Option<Result<Redis, String>> {
        Redis::try_start_on(free_port(), extra)
    }

    /// [`Redis::try_start`] on a given port.
    pub fn try_start_on(port: u16, extra: &[&str]) -> Option<Result<Redis, String>> {
        let (server, cli) = binaries()?;
        let mut r = Redis {
            proc: None,
            server,
            cli,
            port,
            dir: TempDir::new(&format!("redis-{port}")),
            args: extra.iter().map(|s| s.to_string()).collect(),
        };
        Some(r.try_run().map(|()| r))
    }

    /// (Re)starts the server on its port and directory; panics if it does not come up.
    pub fn run(&mut self) {
        if let Err(e) = self.try_run() {
            panic!("{e}");
        }
    }

    fn try_run(&mut self) -> Result<(), String> {
        let uses_tls = self.args.iter().any(|a| a == "--tls-port");
        let mut cmd = Command::new(self.server);
        if uses_tls {
            // The plain port off; the TLS one is self.port.
            cmd.args(["--port", "0", "--tls-port", &self.port.to_string()]);
        } else {
            cmd.args(["--port", &self.port.to_string()]);
        }
        let log = self.dir.0.join("redis.log");
        // A restart starts a new log: readiness is read from it.
        let _ = std::fs::remove_file(&log);
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir.0)
            .arg("--logfile")
            .arg(&log)
            .args(self.args.iter().filter(|a| *a != "--tls-port"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = Proc(cmd.spawn().expect("spawn redis-server"));
        // Ready means this server said so in its log: a connect alone could reach another
        // test's listener that took the port first.
        let ready = || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Ready to accept connections"))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            let exited = child.0.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let why = match exited {
                    Some(status) => format!("exited ({status})"),
                    None => "was not ready in 10 s".to_string(),
                };
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                return Err(format!(
                    "redis-server on 127.0.0.1:{} {why}; its log ends: {}",
                    self.port,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.proc = Some(child);
        Ok(())
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// redis-cli with `auth` (e.g. `["-a", "pw"]`) and a command; its output.
    pub fn cli(&self, auth: &[&str], command: &[&str]) -> String {
        let out: Output = Command::new(self.cli)
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "--no-auth-warning",
            ])
            .args(auth)
            .args(command)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// kill -9 (and reap).
    pub fn kill(&mut self) {
        self.proc = None;
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to the running server.
    pub fn signal(&self, signal: &str) {
        let pid = self.proc.as_ref().expect("redis running").0.id();
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }
}

/// A private CA and a server certificate it signed for 127.0.0.1 (and localhost), minted by
/// openssl; plus a second CA that signed nothing Redis serves.
pub struct Pki {
    pub dir: TempDir,
}

impl Pki {
    pub fn mint() -> Option<Pki> {
        let Some(openssl) = find(&["/usr/bin/openssl", "/usr/local/bin/openssl"]) else {
            assert!(
                std::env::var_os("CI").is_none(),
                "openssl missing under CI: scripts/install-test-deps.sh must install it"
            );
            eprintln!("SKIPPED: openssl is not installed");
            return None;
        };
        let pki = Pki {
            dir: TempDir::new("pki"),
        };
        let run = |args: &[&str]| {
            let out = Command::new(openssl)
                .current_dir(&pki.dir.0)
                .args(args)
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        for ca in ["ca", "other-ca"] {
            run(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=c1m test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        std::fs::write(
            pki.dir.0.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            "server.pem",
        ]);
        Some(pki)
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.0.join(name).to_string_lossy().into_owned()
    }

    /// redis-server arguments for TLS on its port with this server certificate.
    pub fn redis_args(&self) -> Vec<String> {
        vec![
            "--tls-port".into(),
            "--tls-cert-file".into(),
            self.path("server.pem"),
            "--tls-key-file".into(),
            self.path("server.key"),
            "--tls-ca-cert-file".into(),
            self.path("ca.pem"),
            "--tls-auth-clients".into(),
            "no".into(),
        ]
    }
}

/// Runs `cmd` (stdout ignored) for at most `limit`: its exit code (None if it was still
/// running and got killed) and its stderr.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> (Option<i32>, String) {
    let mut child = Proc(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let mut stderr = child.0.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + limit;
    let code = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() >= deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(child); // kills it if still running, so stderr ends
    (code, reader.join().unwrap())
}

/// What a subscriber saw on its stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Message(u64, String),
    Gap(u64, u64),
}

/// An SSE subscriber over a raw socket.
pub struct Sub {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Sub {
    /// Connects and waits for the 200 head; None when the node refused (e.g. 503).
    pub fn connect(addr: SocketAddr, channels: &str, last_id: Option<u64>) -> Option<Sub> {
        let mut stream = TcpStream::connect(addr).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let resume = last_id.map_or(String::new(), |id| format!("Last-Event-ID: {id}\r\n"));
        write!(
            stream,
            "GET /sub/{channels} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n{resume}\r\n"
        )
        .ok()?;
        let mut sub = Sub {
            stream,
            buf: Vec::new(),
        };
        let end = sub.read_until(b"\r\n\r\n")?;
        let head: Vec<u8> = sub.buf.drain(..end).collect();
        String::from_utf8_lossy(&head)
            .starts_with("HTTP/1.1 200")
            .then_some(sub)
    }

    fn read_until(&mut self, pat: &[u8]) -> Option<usize> {
        loop {
            if let Some(p) = self.buf.windows(pat.len()).position(|w| w == pat) {
                return Some(p + pat.len());
            }
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next SSE block's event, id and data; None when the stream ended (or 10 s of
    /// silence).
    fn next_block(&mut self) -> Option<(Option<String>, Option<u64>, Option<String>)> {
        let end = self.read_until(b"\n\n")?;
        let block: Vec<u8> = self.buf.drain(..end).collect();
        let text = String::from_utf8(block).unwrap();
        let (mut event, mut id, mut data) = (None, None, None);
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("event: ") {
                event = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = v.parse::<u64>().ok();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(v.to_string());
            }
        }
        Some((event, id, data))
    }

    /// The next message of a multi-channel stream (named by its channel): (channel, id,
    /// payload); None when the stream ended or something else (a gap) came.
    pub fn next_on_channel(&mut self) -> Option<(String, u64, String)> {
        loop {
            match self.next_block()? {
                (Some(event), Some(id), Some(data)) if event != "gap" => {
                    return Some((event, id, data))
                }
                (Some(_), _, _) => return None,
                _ => continue, // heartbeat or comment
            }
        }
    }

    /// The next message or gap; None when the stream ended (or 10 s of silence).
    pub fn next(&mut self) -> Option<Seen> {
        loop {
            let (event, id, data) = self.next_block()?;
            match (event.as_deref(), id, data) {
                (Some("gap"), _, Some(json)) => {
                    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
                    return Some(Seen::Gap(
                        v["after"].as_u64().unwrap(),
                        v["through"].as_u64().unwrap(),
                    ));
                }
                (None, Some(id), Some(data)) => return Some(Seen::Message(id, data)),
                _ => continue, // heartbeat or comment
            }
        }
    }

    pub fn expect_message(&mut self, payload: &str) -> u64 {
        match self.next() {
            Some(Seen::Message(id, data)) if data == payload => id,
            other => panic!("expected message {payload:?}, got {other:?}"),
        }
    }

    /// Asserts nothing arrives for `wait`.
    pub fn expect_silence(&mut self, wait: Duration) {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut chunk = [0u8; 4096];
        let got: usize = self.stream.read(&mut chunk).unwrap_or_default();
        let text = String::from_utf8_lossy(&chunk[..got]).into_owned();
        assert!(
            got == 0 || !text.contains("data: "),
            "expected nothing, got {text:?}"
        );
        self.buf.extend_from_slice(&chunk[..got]);
        self.stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
    }
}

/// POST /pub/CH; Ok(id) or Err(status, Retry-After present).
pub fn publish(
    node: SocketAddr,
    channel: &str,
    payload: &str,
    key: Option<&str>,
) -> Result<u64, (u16, bool)> {
    let mut req = ureq::post(&format!("http://{node}/pub/{channel}"));
    if let Some(key) = key {
        req = req.set("Idempotency-Key", key);
    }
    match req.send_string(payload) {
        Ok(resp) => {
            let v: serde_json::Value = serde_json::from_str(&resp.into_string().unwrap()).unwrap();
            Ok(v["id"].as_u64().unwrap())
        }
        Err(ureq::Error::Status(code, resp)) => Err((code, resp.header("Retry-After").is_some())),
        Err(e) => panic!("publish failed: {e}"),
    }
}

/// Publishes, retrying while the node answers 503, for at most 15 s.
pub fn publish_retrying(node: SocketAddr, channel: &str, payload: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match publish(node, channel, payload, None) {
            Ok(id) => return id,
            Err((503, retry_after)) => assert!(retry_after, "503 without Retry-After"),
            Err((code, _)) => panic!("publish answered {code}"),
        }
        assert!(Instant::now() < deadline, "publishes refused for 15 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A node whose port another socket took between `free_port()` and its bind must come back as
/// an error, fast and with the server's own words, so that a cluster start tries new ports
/// instead of panicking (or, worse, taking the other listener for the node).
#[test]
fn a_redis_node_whose_port_is_taken_is_an_error_with_its_log() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let started = Instant::now();
    let Some(result) = Redis::try_start_on(port, &[]) else {
        return; // redis-server not installed outside CI: skipped loudly by binaries()
    };
    let err = result
        .err()
        .expect("a node on a taken port must not count as started");
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    assert!(err.contains("exited"), "{err}");
    assert!(
        err.to_lowercase().contains("address already in use"),
        "{err}"
    );
}
