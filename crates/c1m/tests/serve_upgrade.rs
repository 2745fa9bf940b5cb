//! Live binary upgrade (docs/upgrade.md): `kill -USR2` makes the master start the
//! binary now at its path — here a copy of c1m whose commit string the test patched, so its
//! `--version` and `/status` differ — and hand it the listeners, every connection and the hub.
//! Real clients on every protocol (the harness's SSE parser, raw TCP, tungstenite, a raw
//! keep-alive long-poll loop) read a message stream that runs through the upgrade; each must
//! get every message once, in order, on the connection it opened. Failure cases: a new binary
//! that crashes mid-hand-over, and one that reads another hand-over format.

use crate::common;

use common::{LogLines, Server, Sse};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A scratch directory holding the binary the server runs from (so the test can replace it).
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("c1m-upgrade-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        place_executable(Path::new(env!("CARGO_BIN_EXE_c1m")), &dir.join("c1m"));
        Scratch(dir)
    }

    pub(crate) fn exe(&self) -> PathBuf {
        self.0.join("c1m")
    }

    /// Puts a build whose commit string differs in place of the running binary (same length,
    /// so nothing else in the file moves), as a package upgrade would: new file, rename.
    pub(crate) fn install_patched(&self) -> String {
        self.install_marked("upgraded-build-marker")
    }

    /// As [`Scratch::install_patched`], with the commit string made of `marker`.
    fn install_marked(&self, marker: &str) -> String {
        let original = commit_of(&self.exe());
        let patched: String = marker.chars().cycle().take(original.len()).collect();
        assert_ne!(patched, original);
        let mut bytes = std::fs::read(self.exe()).unwrap();
        let needle = original.as_bytes();
        let mut hits = 0;
        let mut i = 0;
        while i + needle.len() <= bytes.len() {
            if &bytes[i..i + needle.len()] == needle {
                bytes[i..i + needle.len()].copy_from_slice(patched.as_bytes());
                hits += 1;
                i += needle.len();
            } else {
                i += 1;
            }
        }
        assert!(hits > 0, "commit string not found in the binary");
        self.replace_exe(&bytes);
        assert_eq!(commit_of(&self.exe()), patched);
        patched
    }
}

impl Scratch {
    /// Puts `bytes` at the running binary's path as a package upgrade would: new file, rename.
    pub(crate) fn replace_exe(&self, bytes: &[u8]) {
        let staged = self.0.join("c1m.staged");
        std::fs::write(&staged, bytes).unwrap();
        place_executable(&staged, &self.exe());
        std::fs::remove_file(&staged).unwrap();
    }
}

/// Copies `src` to an executable `dest` (via a `.new` file and a rename) with a child `cp`,
/// so this process never holds a descriptor open for writing on a file something will exec.
/// Had it written the file itself, a sibling test's fork in that moment would inherit the
/// descriptor until its own exec, and an exec of `dest` then fails with ETXTBSY.
fn place_executable(src: &Path, dest: &Path) {
    let new = dest.with_extension("new");
    let status = Command::new("cp").arg(src).arg(&new).status().unwrap();
    assert!(
        status.success(),
        "cp {} {}: {status}",
        src.display(),
        new.display()
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&new, dest).unwrap();
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// "c1m 0.1.0 (commit abc)" → "abc".
fn commit_of(exe: &Path) -> String {
    let out = Command::new(exe).arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let start = text.find("(commit ").unwrap() + "(commit ".len();
    text[start..].trim().trim_end_matches(')').to_string()
}

/// The new master outlives the test's child handle: killed on drop (its workers die with it).
pub(crate) struct KillOnDrop(pub(crate) u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0 != 0 {
            let _ = c1m_sys::process::kill(self.0, libc::SIGKILL);
        }
    }
}

/// SIGUSR2 to `server`'s master: waits for it to exit after handing over, then for the new
/// master to answer `/status` on the same port. Returns that status and the new master's
/// kill-on-drop guard.
pub(crate) fn upgrade_in_place(server: &mut Server) -> (serde_json::Value, KillOnDrop) {
    let old_master = server.child.id();
    server.signal(libc::SIGUSR2);
    assert!(server.wait_exit(Duration::from_secs(30)).success());
    let s = server.wait_status(|s| s["pid"].as_u64() != Some(u64::from(old_master)));
    let new = KillOnDrop(s["pid"].as_u64().unwrap() as u32);
    (s, new)
}

pub(crate) fn start(scratch: &Scratch, extra_env: &[(&str, &str)]) -> (Server, LogLines) {
    let mut cmd = Command::new(scratch.exe());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tcp-listen",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--history-size",
        "1000",
        "--upgrade-timeout",
        "15s",
    ]);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    Server::spawn_capturing_stderr(cmd)
}

/// Publishes `m0..m{n}` one after another, retrying each on 503 (the hand-over pauses
/// publishing); returns how many 503s it saw.
fn publish_stream(server_url: String, n: usize, every: Duration) -> usize {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    let mut refused = 0;
    for k in 0..n {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match agent
                .post(&format!("{server_url}/pub/news"))
                .send_bytes(format!("m{k}").as_bytes())
            {
                Ok(_) => break,
                Err(ureq::Error::Status(503, resp)) => {
                    assert!(resp.header("Retry-After").is_some());
                    refused += 1;
                }
                // The listener is the same socket throughout; a failure here is a finding.
                Err(e) => panic!("publish m{k} failed: {e}"),
            }
            assert!(Instant::now() < deadline, "m{k} never accepted");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(every);
    }
    refused
}

fn expected(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("m{k}")).collect()
}

/// The first `n` messages, and the connection, still open: a caller that counts connections
/// afterwards must not race the reader's drop.
fn sse_reader(mut sse: Sse, n: usize) -> (Vec<String>, Sse) {
    let got = (0..n).map(|_| sse.next().data).collect();
    (got, sse)
}

fn tcp_reader(
    addr: std::net::SocketAddr,
    n: usize,
    ready: Arc<AtomicBool>,
) -> (Vec<String>, BufReader<TcpStream>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"SUB news\n").unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("OK "), "{line}");
    ready.store(true, Ordering::SeqCst);
    let mut got = Vec::new();
    while got.len() < n {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "tcp stream closed");
        let parts: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(parts[0], "MSG", "{line}");
        let len: usize = parts[3].parse().unwrap();
        let mut payload = vec![0u8; len + 1];
        r.read_exact(&mut payload).unwrap();
        got.push(String::from_utf8_lossy(&payload[..len]).to_string());
    }
    (got, r)
}

fn ws_reader(
    addr: std::net::SocketAddr,
    n: usize,
    ready: Arc<AtomicBool>,
) -> (Vec<String>, tungstenite::WebSocket<TcpStream>) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let (mut ws, _) = tungstenite::client(format!("ws://{addr}/sub/news"), stream).unwrap();
    ready.store(true, Ordering::SeqCst);
    let mut got = Vec::new();
    while got.len() < n {
        match ws.read().expect("websocket read") {
            tungstenite::Message::Text(t) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                got.push(v["data"].as_str().unwrap().to_string());
            }
            tungstenite::Message::Close(c) => panic!("websocket closed: {c:?}"),
            _ => {}
        }
    }
    (got, ws)
}

/// One keep-alive connection polling with `last_id` until it has `n` messages.
fn poll_reader(addr: std::net::SocketAddr, n: usize, ready: Arc<AtomicBool>) -> Vec<String> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut last: Option<u64> = None;
    let mut r = BufReader::new(s.try_clone().unwrap());
    while got.len() < n {
        let q = last.map(|id| format!("?last_id={id}")).unwrap_or_default();
        write!(s, "GET /sub/news{q} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        ready.store(true, Ordering::SeqCst);
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        assert!(!status.is_empty(), "long-poll connection closed");
        let mut length = 0;
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            if h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            assert!(
                !h.to_ascii_lowercase().starts_with("connection: close"),
                "{h}"
            );
        }
        let mut body = vec![0u8; length];
        r.read_exact(&mut body).unwrap();
        match status.split_whitespace().nth(1) {
            Some("204") => continue,
            Some("200") => {}
            other => panic!("long-poll answered {other:?}"),
        }
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(v["gaps"].as_array().is_none_or(|g| g.is_empty()), "{v}");
        for m in v["messages"].as_array().unwrap() {
            got.push(m["data"].as_str().unwrap().to_string());
        }
        last = v["last_id"].as_u64();
    }
    got
}

fn wait_until(what: &str, limit: Duration, f: impl Fn() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn upgrade_under_a_message_stream_keeps_every_connection_and_message() {
    let scratch = Scratch::new("ok");
    let (mut server, logs) = start(&scratch, &[]);
    let old_pid = server.child.id();
    let old_commit = commit_of(&scratch.exe());
    let n = 60;
    let http = server.http;
    let tcp = server.tcp.unwrap();
    // One subscriber per protocol, each on its own connection, ready before the stream starts.
    let sse = Sse::connect(http, "/sub/news", "");
    let sse = std::thread::spawn(move || sse_reader(sse, n));
    let flags: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let f = flags.clone();
    let tcp_t = {
        let f = f[0].clone();
        std::thread::spawn(move || tcp_reader(tcp, n, f))
    };
    let ws_t = {
        let f = f[1].clone();
        std::thread::spawn(move || ws_reader(http, n, f))
    };
    let poll_t = {
        let f = f[2].clone();
        std::thread::spawn(move || poll_reader(http, n, f))
    };
    wait_until("subscribers", Duration::from_secs(10), || {
        flags.iter().all(|f| f.load(Ordering::SeqCst))
    });
    server.wait_status(|s| {
        let c = &s["connections"];
        c["sse"] == 1 && c["tcp"] == 1 && c["websocket"] == 1 && c["longpoll"] == 1
    });
    let patched = scratch.install_patched();

    let url = format!("http://{http}");
    let publisher = std::thread::spawn(move || publish_stream(url, n, Duration::from_millis(30)));
    // Upgrade once a third of the stream is out.
    wait_until("a third of the stream", Duration::from_secs(20), || {
        server.status()["messages"]["published"].as_u64().unwrap() >= (n / 3) as u64
    });
    server.signal(libc::SIGUSR2);
    let exited = server.wait_exit(Duration::from_secs(20));
    assert!(exited.success(), "old master: {exited}");
    let line = logs
        .wait_for(
            "upgrade: committed; this master serves",
            Duration::from_secs(5),
        )
        .expect("the new master logs its commit");
    assert!(line.contains("old_master"), "{line}");
    // The new master answers on the same port: another pid, the patched build.
    let s = server.wait_status(|s| s["pid"].as_u64() != Some(u64::from(old_pid)));
    let _new = KillOnDrop(s["pid"].as_u64().unwrap() as u32);
    assert_eq!(s["commit"], patched.as_str(), "{s}");
    assert_ne!(old_commit, patched);
    assert_eq!(s["upgrades"]["attempted"], 1, "{s}");
    assert_eq!(s["upgrades"]["completed"], 1, "{s}");
    assert_eq!(s["upgrades"]["failed"], 0, "{s}");
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_upgrades_completed_total 1"),
        "{metrics}"
    );
    assert!(metrics.contains(&format!("commit=\"{patched}\"")));
    let refused_503 = publisher.join().unwrap();
    // Every subscriber got every message once, in order, on the connection it opened.
    let want = expected(n);
    assert_eq!(sse.join().unwrap().0, want, "sse");
    assert_eq!(tcp_t.join().unwrap().0, want, "tcp");
    assert_eq!(ws_t.join().unwrap().0, want, "websocket");
    assert_eq!(poll_t.join().unwrap(), want, "long-poll");
    // Still the same four connections, counted by the new workers; none was closed for cause.
    let s = server.wait_status(|s| s["connections"]["sse"] == 1 && s["connections"]["tcp"] == 1);
    assert_eq!(s["connections"]["websocket"], 1, "{s}");
    assert_eq!(s["messages"]["published"], n as u64, "{s}");
    eprintln!("publishes answered 503 during the hand-over: {refused_503}");
    for step in [
        "upgrade: the new binary accepted",
        "workers hand over their connections",
        "upgrade: connections handed over",
        "upgrade: committed; old worker exits",
    ] {
        assert!(
            logs.snapshot().iter().any(|l| l.contains(step)),
            "no log line {step:?}"
        );
    }
}

#[test]
fn a_new_binary_that_crashes_mid_hand_over_loses_nothing() {
    let scratch = Scratch::new("crash");
    let crash_file = scratch.0.join("crash-after");
    // The new worker aborts after receiving 2 connections; each old worker holds more.
    std::fs::write(&crash_file, "2").unwrap();
    let crash = crash_file.to_str().unwrap().to_string();
    let (server, logs) = start(&scratch, &[("C1M_TEST_UPGRADE_CRASH_FILE", crash.as_str())]);
    let old_pid = server.child.id();
    let mut subs: Vec<Sse> = (0..12)
        .map(|_| Sse::connect(server.http, "/sub/news", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == 12);
    let first = server.publish("news", b"before");
    for s in &mut subs {
        assert_eq!(s.next().data, "before");
    }
    scratch.install_patched();
    server.signal(libc::SIGUSR2);
    logs.wait_for(
        "upgrade failed; the old processes serve on",
        Duration::from_secs(20),
    )
    .expect("the old master reports the failed upgrade");
    // The same master serves every connection on; a message reaches all of them once.
    let s = server.wait_status(|s| s["upgrades"]["failed"] == 1);
    assert_eq!(s["pid"].as_u64(), Some(u64::from(old_pid)));
    assert_eq!(s["upgrades"]["completed"], 0, "{s}");
    let after = server.publish("news", b"after");
    assert!(after > first);
    for s in &mut subs {
        let ev = s.next();
        assert_eq!(
            (ev.data.as_str(), ev.id),
            ("after", Some(after.to_string()))
        );
    }
    let s = server.wait_status(|s| s["connections"]["sse"] == 12);
    assert_eq!(s["messages"]["dropped"], 0, "{s}");
    // New connections are still accepted, and a second attempt without the crash succeeds.
    let mut late = Sse::connect(server.http, "/sub/news", "");
    std::fs::remove_file(&crash_file).unwrap();
    let mut server = server;
    // This time through the command line: it waits for the outcome and names the new master.
    let out = Command::new(scratch.exe())
        .args(["upgrade", &old_pid.to_string(), "--timeout", "20s"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(server.wait_exit(Duration::from_secs(20)).success());
    let s = server.wait_status(|s| s["pid"].as_u64() != Some(u64::from(old_pid)));
    let _new = KillOnDrop(s["pid"].as_u64().unwrap() as u32);
    assert!(
        said.contains(&format!("the new master is {}", s["pid"])),
        "{said}"
    );
    assert_eq!(
        (&s["upgrades"]["attempted"], &s["upgrades"]["failed"]),
        (&2.into(), &1.into())
    );
    let last = server.publish("news", b"last");
    for s in subs.iter_mut().chain(std::iter::once(&mut late)) {
        let ev = s.next();
        assert_eq!((ev.data.as_str(), ev.id), ("last", Some(last.to_string())));
    }
}

#[test]
fn another_hand_over_format_is_refused_and_the_old_master_serves_on() {
    let scratch = Scratch::new("format");
    // The old master announces format 99, which this build does not read.
    let (server, logs) = start(&scratch, &[("C1M_TEST_HANDOVER_FORMAT", "99")]);
    let old_pid = server.child.id();
    let mut sub = Sse::connect(server.http, "/sub/news", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    let out = Command::new(scratch.exe())
        .args(["upgrade", &old_pid.to_string(), "--timeout", "5s"])
        .output()
        .unwrap();
    // Not upgraded: exit 1, and the old master is still the one running.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let refused = logs
        .wait_for("upgrade refused", Duration::from_secs(20))
        .expect("the new binary logs its refusal");
    assert!(refused.contains("format version 99"), "{refused}");
    logs.wait_for("the new binary refused", Duration::from_secs(10))
        .expect("the old master logs the refusal");
    let s = server.wait_status(|s| s["upgrades"]["failed"] == 1);
    assert_eq!(s["pid"].as_u64(), Some(u64::from(old_pid)));
    let id = server.publish("news", b"still here");
    let ev = sub.next();
    assert_eq!(
        (ev.data.as_str(), ev.id),
        ("still here", Some(id.to_string()))
    );
}

/// Input the old worker had read but not used (half a publish request, half a WebSocket
/// frame) travels with the connection: the client sends the rest to the new worker, which
/// finishes what the old one started.
#[test]
fn half_read_requests_and_frames_finish_in_the_new_binary() {
    let scratch = Scratch::new("half");
    let mut cmd = Command::new(scratch.exe());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--ws-client-publish",
        "--upgrade-timeout",
        "15s",
    ]);
    let (mut server, logs) = Server::spawn_capturing_stderr(cmd);
    let old_pid = server.child.id();
    let mut sub = Sse::connect(server.http, "/sub/news", "");
    // Half a publish: the head and 2 of 5 body bytes.
    let mut publisher = TcpStream::connect(server.http).unwrap();
    publisher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    publisher
        .write_all(b"POST /pub/news HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nab")
        .unwrap();
    // Half a masked WebSocket text frame "hello ws" (FIN set): header, mask and 3 bytes.
    let stream = TcpStream::connect(server.http).unwrap();
    let (mut ws, _) = tungstenite::client(format!("ws://{}/sub/news", server.http), stream)
        .expect("websocket handshake");
    let text = b"hello ws";
    let mask = [7u8, 1, 9, 3];
    let mut frame = vec![0x81, 0x80 | text.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    ws.get_mut().write_all(&frame[..9]).unwrap();
    server.wait_status(|s| s["connections"]["websocket"] == 1);
    std::thread::sleep(Duration::from_millis(300)); // both halves read by the old worker

    scratch.install_patched();
    server.signal(libc::SIGUSR2);
    assert!(server.wait_exit(Duration::from_secs(20)).success());
    logs.wait_for("upgrade: committed; serving", Duration::from_secs(5))
        .expect("the new worker serves");
    let s = server.wait_status(|s| s["pid"].as_u64() != Some(u64::from(old_pid)));
    let _new = KillOnDrop(s["pid"].as_u64().unwrap() as u32);

    // The rest of each goes to the new binary, which completes them.
    publisher.write_all(b"cde").unwrap();
    let mut answer = String::new();
    BufReader::new(publisher.try_clone().unwrap())
        .read_line(&mut answer)
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(sub.next().data, "abcde");
    ws.get_mut().write_all(&frame[9..]).unwrap();
    assert_eq!(sub.next().data, "hello ws");
    // The WebSocket also still receives (it subscribed to the channel it publishes to).
    let mut seen = Vec::new();
    while seen.len() < 2 {
        if let tungstenite::Message::Text(t) = ws.read().unwrap() {
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            seen.push(v["data"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(seen, ["abcde", "hello ws"]);
}

/// GET `path` on `addr` with a fresh connection; the JSON body, or None when not answered.
fn json_at(addr: std::net::SocketAddr, path: &str) -> Option<serde_json::Value> {
    TcpStream::connect(addr).ok()?; // raw_exchange panics when nothing listens
    let answer = common::raw_exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    serde_json::from_str(answer.split_once("\r\n\r\n")?.1).ok()
}

fn control_pid(status: &serde_json::Value) -> Option<u64> {
    status["workers"]
        .as_array()?
        .iter()
        .find(|w| w["role"] == "control")?["pid"]
        .as_u64()
}

#[test]
fn the_control_worker_hands_the_admin_listener_to_its_successor() {
    let scratch = Scratch::new("admin");
    let mut cmd = Command::new(scratch.exe());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--admin-publish",
        "--workers",
        "2",
        "--upgrade-timeout",
        "15s",
    ]);
    let (child, banner) = common::spawn_for_banner(cmd);
    let (http, _) = common::parse_banner(&banner).expect("banner");
    let admin = common::parse_banner_admin(&banner)
        .unwrap_or_else(|| panic!("no admin address in {banner:?}"));
    let mut server = Server {
        child,
        http,
        tcp: None,
    };
    let old_pid = server.child.id();
    wait_until("the control worker", Duration::from_secs(10), || {
        json_at(admin, "/status").is_some_and(|s| control_pid(&s).is_some_and(|p| p != 0))
    });
    let old_control = control_pid(&json_at(admin, "/status").unwrap()).unwrap();
    let mut sse = Sse::connect(http, "/sub/up", "");
    scratch.install_patched();
    server.signal(libc::SIGUSR2);
    assert!(server.wait_exit(Duration::from_secs(20)).success());
    let new_pid = std::cell::Cell::new(0);
    wait_until(
        "the new master's control worker",
        Duration::from_secs(10),
        || {
            json_at(admin, "/status").is_some_and(|s| {
                new_pid.set(s["pid"].as_u64().unwrap_or(0));
                new_pid.get() != u64::from(old_pid)
                    && control_pid(&s).is_some_and(|p| p != old_control)
            })
        },
    );
    let _new = KillOnDrop(new_pid.get() as u32);
    // One admin listening socket still (handed over, not bound twice), and the old control
    // worker is gone with its generation.
    wait_until("one admin listener", Duration::from_secs(10), || {
        common::listening_sockets(admin.port()) == 1
    });
    let status = json_at(admin, "/status").unwrap();
    assert_eq!(status["workers"].as_array().unwrap().len(), 3, "{status}");
    let publish = common::raw_exchange(
        admin,
        b"POST /pub/up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nafter",
    );
    assert_eq!(common::status_code(&publish), 200, "{publish}");
    assert_eq!(sse.next().data, "after");
}

/// A process that is neither gone nor a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// Each new master passes its port reservations on again: three upgrades in a row, each to
/// another build, under a message stream, every subscriber kept and getting every message once.
#[test]
fn three_upgrades_in_a_row_under_load_keep_every_subscriber() {
    let scratch = Scratch::new("thrice");
    let (mut server, _logs) = start(&scratch, &[]);
    let n = 200;
    let http = server.http;
    let tcp = server.tcp.unwrap();
    let sses: Vec<_> = (0..6)
        .map(|_| {
            let sse = Sse::connect(http, "/sub/news", "");
            std::thread::spawn(move || sse_reader(sse, n))
        })
        .collect();
    let flags: Vec<Arc<AtomicBool>> = (0..2).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let tcp_t = {
        let f = flags[0].clone();
        std::thread::spawn(move || tcp_reader(tcp, n, f))
    };
    let ws_t = {
        let f = flags[1].clone();
        std::thread::spawn(move || ws_reader(http, n, f))
    };
    wait_until("subscribers", Duration::from_secs(10), || {
        flags.iter().all(|f| f.load(Ordering::SeqCst))
    });
    server.wait_status(|s| s["connections"]["sse"] == 6 && s["connections"]["websocket"] == 1);
    let url = format!("http://{http}");
    let publisher = std::thread::spawn(move || publish_stream(url, n, Duration::from_millis(25)));
    let mut master = server.child.id();
    let mut new_masters = Vec::new();
    for (round, marker) in ["first-upgrade-", "second-upgrade-", "third-upgrade-"]
        .into_iter()
        .enumerate()
    {
        wait_until("the stream to move on", Duration::from_secs(20), || {
            server.status()["messages"]["published"].as_u64().unwrap()
                >= ((round + 1) * n / 5) as u64
        });
        let patched = scratch.install_marked(marker);
        c1m_sys::process::kill(master, libc::SIGUSR2).unwrap();
        let s = server.wait_status(|s| s["commit"] == patched.as_str());
        let new_pid = s["pid"].as_u64().unwrap() as u32;
        assert_ne!(new_pid, master);
        new_masters.push(KillOnDrop(new_pid));
        assert_eq!(s["upgrades"]["completed"], round as u64 + 1, "{s}");
        assert_eq!(s["upgrades"]["failed"], 0, "{s}");
        wait_until("the old master to exit", Duration::from_secs(20), || {
            !alive(master)
        });
        if round == 0 {
            assert!(server.wait_exit(Duration::from_secs(5)).success());
        }
        master = new_pid;
    }
    publisher.join().unwrap();
    let want = expected(n);
    // The readers hand their connections back open, so the count below sees the subscribers
    // the upgrades kept, not a reader that finished and hung up a moment before.
    let mut held_sse = Vec::new();
    for (i, sse) in sses.into_iter().enumerate() {
        let (got, conn) = sse.join().unwrap();
        assert_eq!(got, want, "sse {i}");
        held_sse.push(conn);
    }
    let (got, _held_tcp) = tcp_t.join().unwrap();
    assert_eq!(got, want, "tcp");
    let (got, _held_ws) = ws_t.join().unwrap();
    assert_eq!(got, want, "websocket");
    let s = server.wait_status(|s| {
        s["connections"]["sse"] == 6
            && s["connections"]["tcp"] == 1
            && s["connections"]["websocket"] == 1
    });
    assert_eq!(s["messages"]["published"], n as u64, "{s}");
    drop(held_sse);
}

/// Kills the given processes on drop (a hung fake binary and what it started), so a failing
/// test leaves nothing behind.
struct KillAll(Vec<u32>);

impl Drop for KillAll {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                let _ = c1m_sys::process::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// An upgrade to a binary that never answers: the master keeps serving while it waits
/// (publishes and /healthz answer at once), and at `--upgrade-timeout` kills the new process
/// and everything it started, so nothing keeps the port claimed.
#[test]
fn an_upgrade_to_a_hung_binary_neither_freezes_the_master_nor_outlives_the_timeout() {
    let scratch = Scratch::new("hung");
    let mut cmd = Command::new(scratch.exe());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "1",
        "--upgrade-timeout",
        "3s",
    ]);
    let (mut server, logs) = Server::spawn_capturing_stderr(cmd);
    let mut sub = Sse::connect(server.http, "/sub/news", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    // The "new binary": a script that starts a child (which inherits its descriptors) and hangs.
    let pids = scratch.0.join("pids");
    let script = format!(
        "#!/bin/sh\nsleep 60 &\necho \"$$ $!\" > {}.tmp\nmv {0}.tmp {0}\nwait\n",
        pids.display()
    );
    scratch.replace_exe(script.as_bytes());
    server.signal(libc::SIGUSR2);
    wait_until("the hung binary to start", Duration::from_secs(5), || {
        pids.exists()
    });
    let hung: Vec<u32> = std::fs::read_to_string(&pids)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let _cleanup = KillAll(hung.clone());
    assert!(hung.iter().all(|&p| alive(p)), "{hung:?}");
    // While the master waits for the hung binary, it answers as usual.
    let mut slowest = Duration::ZERO;
    for k in 0..5 {
        let t = Instant::now();
        let id = server.publish("news", format!("during {k}").as_bytes());
        let ev = sub.next();
        slowest = slowest.max(t.elapsed());
        assert_eq!(ev.id, Some(id.to_string()));
        let t = Instant::now();
        let health = ureq::get(&server.url("/healthz")).call().unwrap();
        slowest = slowest.max(t.elapsed());
        assert_eq!(health.status(), 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("slowest publish or /healthz while the upgrade waited: {slowest:?}");
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");
    assert!(
        hung.iter().all(|&p| alive(p)),
        "the test must run inside the wait"
    );
    logs.wait_for("upgrade failed", Duration::from_secs(10))
        .expect("the timeout fails the upgrade");
    wait_until(
        "the hung processes to be gone",
        Duration::from_secs(3),
        || hung.iter().all(|&p| !alive(p)),
    );
    let s = server.wait_status(|s| s["upgrades"]["failed"] == 1);
    assert_eq!(s["pid"].as_u64(), Some(u64::from(server.child.id())));
    // Stopped, the port is free for another server at once.
    let port = server.http.port();
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(10)).success());
    let mut cmd = common::c1m();
    cmd.args([
        "serve",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--workers",
        "1",
    ]);
    let again = Server::spawn(cmd);
    assert_eq!(again.http.port(), port);
}
