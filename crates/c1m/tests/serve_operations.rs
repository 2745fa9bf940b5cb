//! Operating the server: SIGTERM drains queued data and says goodbye in every
//! protocol; SIGHUP re-reads the configuration without dropping anyone; the kernel reaps peers
//! that vanished; `_total` counters survive a worker's death; `/healthz` reflects the master;
//! a second instance cannot join the first's port.

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get(server: &Server, path: &str) -> (u16, String) {
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(5))
        .build();
    match agent.get(&server.url(path)).call() {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("GET {path}: {e}"),
    }
}

/// Every `name value` line of a Prometheus text whose name ends in `_total`.
fn totals(metrics: &str) -> Vec<(String, u64)> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(name, _)| name.split('{').next().unwrap().ends_with("_total"))
        .map(|(name, v)| (name.to_string(), v.parse().unwrap()))
        .collect()
}

#[test]
fn sigterm_flushes_queue_and_goodbye() {
    let mut server = Server::start(&[
        "--workers",
        "1",
        "--grace",
        "8s",
        "--max-unsent",
        "33554432",
        "--tcp-listen",
        "127.0.0.1:0",
    ]);
    // A subscriber that stops reading: 8 MiB is more than the kernel buffers on loopback
    // (tcp_wmem max 4 MiB + an unread receive window), so the rest waits in the worker's queue.
    let mut full = Sse::connect(server.http, "/sub/full", "");
    let mut ws = {
        let stream = TcpStream::connect(server.http).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        tungstenite::client(format!("ws://{}/sub/calm", server.http), stream)
            .unwrap()
            .0
    };
    let mut tcp = TcpStream::connect(server.tcp.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(b"SUB calm\n").unwrap();
    let mut poll = TcpStream::connect(server.http).unwrap();
    poll.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    poll.write_all(b"GET /sub/calm HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    server.wait_status(|s| {
        let c = &s["connections"];
        c["sse"] == 1 && c["websocket"] == 1 && c["tcp"] == 1 && c["longpoll"] == 1
    });
    let payload = vec![b'q'; 64 * 1024];
    let ids: Vec<u64> = (0..128).map(|_| server.publish("full", &payload)).collect();
    server.wait_status(|s| s["messages"]["delivered"] == 128);

    let workers = server.worker_pids();
    let signalled = Instant::now();
    server.signal(libc::SIGTERM);
    // The subscriber has not read: the server must wait for it (not exit in milliseconds).
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server exited with 8 MiB still queued for a subscriber"
    );
    for id in &ids {
        let ev = full.next();
        assert_eq!(ev.id, Some(id.to_string()));
        assert_eq!(ev.data.len(), payload.len());
    }
    let rest = full.read_to_close();
    assert!(rest.ends_with("event: shutdown\ndata: \n\n"), "{rest:?}");

    match ws.read() {
        Ok(tungstenite::Message::Close(Some(frame))) => {
            assert_eq!(u16::from(frame.code), 1001, "{frame:?}")
        }
        other => panic!("expected a 1001 close, got {other:?}"),
    }
    let mut out = String::new();
    tcp.read_to_string(&mut out).unwrap();
    assert!(out.ends_with("BYE\n"), "{out:?}");
    let mut answer = String::new();
    poll.read_to_string(&mut answer).unwrap();
    assert_eq!(common::status_code(&answer), 503, "{answer:?}");

    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}");
    for pid in workers {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} outlived the master"
        );
    }
    assert!(
        signalled.elapsed() < Duration::from_secs(8),
        "took {:?}: the drain should end as soon as everything is written",
        signalled.elapsed()
    );
}

#[test]
fn slow_reader_is_closed_when_grace_ends() {
    let mut server = Server::start(&[
        "--workers",
        "1",
        "--grace",
        "1s",
        "--max-unsent",
        "33554432",
    ]);
    let _stuck = Sse::connect(server.http, "/sub/stuck", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    let payload = vec![b'q'; 64 * 1024];
    for _ in 0..128 {
        server.publish("stuck", &payload);
    }
    let signalled = Instant::now();
    // SIGINT (Ctrl-C) drains like SIGTERM.
    server.signal(libc::SIGINT);
    let status = server.wait_exit(Duration::from_secs(5));
    assert!(status.success(), "{status}");
    let took = signalled.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "a reader that never reads holds the shutdown for the grace period only; took {took:?}"
    );
}

#[test]
fn sighup_reloads_live_config_and_keeps_connections() {
    let dir = std::env::temp_dir().join(format!("c1m-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("serve.toml");
    std::fs::write(&path, "workers = 1\nmax_payload = 100\n").unwrap();
    let mut server = Server::start(&["--config", path.to_str().unwrap()]);
    let too_big = |server: &Server| {
        matches!(
            // A channel of its own: a probe that passes publishes, and must not reach `sub`.
            ureq::post(&server.url("/pub/probe")).send_bytes(&[b'x'; 500]),
            Err(ureq::Error::Status(413, _))
        )
    };
    assert!(too_big(&server));
    let mut sub = Sse::connect(server.http, "/sub/r", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);

    // A live key and a restart-only key (kept, logged).
    std::fs::write(&path, "workers = 3\nmax_payload = 1000\n").unwrap();
    server.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(5);
    while too_big(&server) {
        assert!(Instant::now() < deadline, "max_payload was not reloaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "SIGHUP killed the server"
    );
    // One subscriber worker and the control worker.
    assert_eq!(server.worker_pids().len(), 2, "workers needs a restart");
    let id = server.publish("r", &[b'y'; 500]);
    assert_eq!(
        sub.next().id,
        Some(id.to_string()),
        "the subscriber was kept"
    );

    // An invalid file is refused (one that does not parse, one that fails the start-up
    // checks: history too small for one payload); the running configuration stays.
    for bad in [
        "max_payload = \"lots\"\n",
        "max_payload = 100\nhistory_max_bytes = 10\n",
    ] {
        std::fs::write(&path, bad).unwrap();
        server.signal(libc::SIGHUP);
        std::thread::sleep(Duration::from_millis(300));
        assert!(server.child.try_wait().unwrap().is_none());
        assert!(!too_big(&server), "{bad:?} was applied");
    }

    // A restarted worker starts with the reloaded configuration.
    let pid = server.worker_pids()[0];
    c1m_sys::process::kill(pid, libc::SIGKILL).unwrap();
    server.wait_status(|s| s["worker_restarts"] == 1 && s["workers"][0]["pid"].as_u64() != Some(0));
    server.publish("r", &[b'y'; 500]);
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(Duration::from_secs(10)).success());
    std::fs::remove_dir_all(dir).unwrap();
}

/// A network namespace joined to the host by a veth pair; deleted (with the pair) on drop.
struct Netns {
    name: String,
    host_ip: String,
    peer_ip: String,
    peer_dev: String,
    host_dev: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    fn create() -> Netns {
        let pid = std::process::id();
        let n = Netns {
            name: format!("c1mt{pid}"),
            host_ip: format!("10.{}.{}.1", 200 + pid % 50, (pid / 50) % 250),
            peer_ip: format!("10.{}.{}.2", 200 + pid % 50, (pid / 50) % 250),
            peer_dev: format!("c1n{pid}"),
            host_dev: format!("c1h{pid}"),
        };
        let host_dev = n.host_dev.clone();
        ip(&["netns", "add", &n.name]);
        ip(&[
            "link",
            "add",
            &host_dev,
            "type",
            "veth",
            "peer",
            "name",
            &n.peer_dev,
            "netns",
            &n.name,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", n.host_ip),
            "dev",
            &host_dev,
        ]);
        ip(&["link", "set", &host_dev, "up"]);
        ip(&[
            "-n",
            &n.name,
            "addr",
            "add",
            &format!("{}/30", n.peer_ip),
            "dev",
            &n.peer_dev,
        ]);
        ip(&["-n", &n.name, "link", "set", &n.peer_dev, "up"]);
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The pair goes first: a namespace outlives its name while a socket in it still
        // retransmits (the vanished client's), and its veth would stay until then.
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_dev])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dead_peer_reaped() {
    let ns = Netns::create();
    let mut cmd = common::c1m();
    cmd.args([
        "serve",
        "--listen",
        &format!("{}:0", ns.host_ip),
        "--workers",
        "1",
        "--sse-heartbeat",
        "0",
        "--tcp-keepalive",
        "1s",
        "--tcp-keepalive-interval",
        "1s",
        "--tcp-keepalive-count",
        "2",
    ]);
    let server = Server::spawn(cmd);
    // The subscriber lives in the namespace: a real, separate client (curl).
    let _curl = KillOnDrop(
        Command::new("ip")
            .args(["netns", "exec", &ns.name, "curl", "-sN"])
            .args(["-H", "Accept: text/event-stream"])
            .arg(server.url("/sub/gone"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    server.wait_status(|s| s["connections"]["sse"] == 1);
    // Idle past several keepalive rounds: a live peer answers the probes and stays.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        server.status()["connections"]["sse"],
        1,
        "a live peer was reaped"
    );
    // The peer vanishes without a FIN: its address is gone, so packets to it are dropped.
    ip(&["-n", &ns.name, "addr", "flush", "dev", &ns.peer_dev]);
    let gone = Instant::now();
    let s = server.wait_status(|s| s["connections"]["sse"] == 0);
    assert_eq!(s["refused"]["dead_peer"], 1, "{s}");
    // Keepalive 1 s idle + 2 × 1 s probes (TCP_USER_TIMEOUT matches): ~3 s, well under 10.
    assert!(
        gone.elapsed() < Duration::from_secs(8),
        "{:?}",
        gone.elapsed()
    );
}

#[test]
fn counters_monotonic_across_worker_restart() {
    let server = Server::start(&["--workers", "2"]);
    let mut subs: Vec<Sse> = (0..16)
        .map(|_| Sse::connect(server.http, "/sub/count", ""))
        .collect();
    let s = server.wait_status(|s| s["connections"]["sse"] == 16);
    assert!(
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["role"] == "subscribers")
            .all(|w| w["connections"].as_u64().unwrap() > 0),
        "both workers need subscribers: {s}"
    );
    for _ in 0..3 {
        server.publish("count", b"x");
    }
    for sub in &mut subs {
        for _ in 0..3 {
            sub.next();
        }
    }
    for _ in 0..8 {
        let _ = get(&server, "/nowhere");
    }
    server.wait_status(|s| s["messages"]["delivered"] == 48 && s["refused"]["not_found"] == 8);
    let before = totals(&get(&server, "/metrics").1);
    assert!(before
        .iter()
        .any(|(n, v)| n.contains("delivered") && *v == 48));

    let victim = server.worker_pids()[0];
    c1m_sys::process::kill(victim, libc::SIGKILL).unwrap();
    server.wait_status(|s| {
        s["worker_restarts"] == 1
            && s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["pid"] != 0)
    });
    let after = totals(&get(&server, "/metrics").1);
    for (name, value) in &before {
        let now = after
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} vanished"))
            .1;
        assert!(now >= *value, "{name} went down from {value} to {now}");
    }
    let s = server.status();
    assert_eq!(s["messages"]["delivered"], 48, "{s}");
}

/// Sends SIGCONT on drop, so a process the test stopped runs again even when it fails.
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        let _ = c1m_sys::process::kill(self.0, libc::SIGCONT);
    }
}

/// Waits (at most 5 s) until `path` answers 200 again.
fn wait_until_ok(server: &Server, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while get(server, path).0 != 200 {
        assert!(Instant::now() < deadline, "{path} did not recover");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn healthz_fails_while_master_stopped() {
    let server = Server::start(&["--workers", "1"]);
    assert_eq!(get(&server, "/healthz"), (200, "ok\n".to_string()));
    server.signal(libc::SIGSTOP);
    let _resume = Continue(server.child.id());
    let asked = Instant::now();
    let (code, body) = get(&server, "/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("master did not answer"), "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    server.signal(libc::SIGCONT);
    wait_until_ok(&server, "/healthz");
}

#[test]
fn status_answers_503_while_master_stopped() {
    let server = Server::start(&["--workers", "1"]);
    assert_eq!(get(&server, "/status").0, 200);
    server.signal(libc::SIGSTOP);
    let _resume = Continue(server.child.id());
    let asked = Instant::now();
    for path in ["/status", "/metrics"] {
        let (code, body) = get(&server, path);
        assert_eq!(code, 503, "{path}: {body}");
        assert!(body.contains("master did not answer"), "{body}");
    }
    // 3 s each (STATUS_TIMEOUT), not a hang until the client gives up.
    assert!(
        asked.elapsed() < Duration::from_secs(9),
        "{:?}",
        asked.elapsed()
    );
    server.signal(libc::SIGCONT);
    wait_until_ok(&server, "/status");
}

#[test]
fn healthz_fails_while_a_worker_stopped() {
    let server = Server::start(&["--workers", "2"]);
    let stopped = server.worker_pids()[0];
    c1m_sys::process::kill(stopped, libc::SIGSTOP).unwrap();
    let _resume = Continue(stopped);
    // SO_REUSEPORT sends some connections to the stopped worker (they wait in its queue), so
    // each try is a new connection with a short timeout; the live worker must say 503.
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        assert!(Instant::now() < deadline, "/healthz stayed healthy");
        let mut c = TcpStream::connect(server.http).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        if common::status_code(&answer) == 503 {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.contains("worker 0 has not reported"), "{body}");
    c1m_sys::process::kill(stopped, libc::SIGCONT).unwrap();
    wait_until_ok(&server, "/healthz");
}

#[test]
fn second_instance_refused() {
    let server = Server::start(&["--workers", "1"]);
    let mut second = KillOnDrop(
        common::c1m()
            .args(["serve", "--workers", "1", "--listen"])
            .arg(server.http.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = second.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "a second instance started on the same port"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2));
    let mut err = String::new();
    second
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("already served by another c1m serve"), "{err}");
    // The first instance still has all the traffic.
    let mut subs: Vec<Sse> = (0..8)
        .map(|_| Sse::connect(server.http, "/sub/mine", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == 8);
    let id = server.publish("mine", b"x");
    for sub in &mut subs {
        assert_eq!(sub.next().id, Some(id.to_string()));
    }
}

#[test]
fn foreign_reuseport_listener_refused() {
    // Another program of the same user listening with SO_REUSEPORT: joining its group would
    // silently split its connections with it.
    let other = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    other.set_reuse_port(true).unwrap();
    other
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    other.listen(16).unwrap();
    let addr = other.local_addr().unwrap().as_socket().unwrap();
    let mut serve = KillOnDrop(
        common::c1m()
            .args(["serve", "--workers", "1", "--listen", &addr.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = serve.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "c1m serve joined another program's port"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(2));
    let mut err = String::new();
    serve
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("in use by another program"), "{err}");
}
