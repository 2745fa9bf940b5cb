//! A real cluster: `redis-server` and `haproxy` from Debian (started here on
//! loopback ports, each in its own temp dir) and three `c1m serve --broker redis://…` nodes.
//! Publishes on node A reach subscribers on B and C once and in order; a kill -9 of B sends
//! its subscribers through HAProxy to C, where they resume with nothing lost or repeated; a
//! Redis restart resumes delivery everywhere, with a gap event exactly when Redis lost its data.
//!
//! redis-server and haproxy must be installed (scripts/install-test-deps.sh installs them).
//! Without them the tests are skipped with a loud message, except under CI (`CI` set), where a
//! missing binary fails them.

use crate::common;
use crate::redis_support;

use common::Server;
use redis_support::{find, free_port, wait_listening, Proc, Seen, Sub, TempDir};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The redis-server and haproxy binaries, or None (the caller skips, unless under CI).
fn binaries() -> Option<(&'static str, &'static str)> {
    let redis = find(&["/usr/bin/redis-server", "/usr/local/bin/redis-server"]);
    let haproxy = find(&["/usr/sbin/haproxy", "/usr/bin/haproxy"]);
    match (redis, haproxy) {
        (Some(r), Some(h)) => Some((r, h)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "redis-server or haproxy missing under CI: scripts/install-test-deps.sh must install them"
            );
            eprintln!("SKIPPED: redis-server or haproxy is not installed");
            None
        }
    }
}

/// redis-server on a fixed loopback port, its data in `dir`. With `persist`, every write is in
/// the append-only file before Redis answers, so even a kill -9 loses nothing.
struct Redis {
    proc: Option<Proc>,
    binary: &'static str,
    port: u16,
    dir: TempDir,
}

impl Redis {
    fn start(binary: &'static str) -> Redis {
        let mut r = Redis {
            proc: None,
            binary,
            port: free_port(),
            dir: TempDir::new("redis"),
        };
        r.run(true);
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn run(&mut self, persist: bool) {
        let aof = if persist { "yes" } else { "no" };
        let child = Command::new(self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", aof, "--appendfsync", "always"])
            .arg("--dir")
            .arg(&self.dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.proc = Some(Proc(child));
        wait_listening(
            SocketAddr::from(([127, 0, 0, 1], self.port)),
            "redis-server",
        );
    }

    /// kill -9 (and reap).
    fn kill(&mut self) {
        self.proc = None;
    }

    /// Empties the data directory (a box that lost its disk).
    fn wipe(&self) {
        for entry in std::fs::read_dir(&self.dir.0).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                std::fs::remove_dir_all(path).unwrap();
            } else {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
}

/// HAProxy in front of `nodes`, health-checking `/healthz`. `balance first`: every connection
/// goes to the first node that is up, so the test knows where subscribers land.
fn start_haproxy(binary: &str, nodes: &[SocketAddr]) -> (Proc, SocketAddr, TempDir) {
    let dir = TempDir::new("haproxy");
    let port = free_port();
    let mut config = format!(
        "global\n  maxconn 1000\n\
         defaults\n  mode http\n  timeout connect 1s\n  timeout client 30s\n\
         \x20 timeout server 30s\n  timeout tunnel 1h\n  option redispatch\n  retries 3\n\
         frontend edge\n  bind 127.0.0.1:{port}\n  default_backend nodes\n\
         backend nodes\n  balance first\n  option httpchk GET /healthz\n\
         \x20 http-check expect status 200\n  default-server check inter 200ms fall 1 rise 2\n"
    );
    for (i, node) in nodes.iter().enumerate() {
        config.push_str(&format!("  server n{i} {node}\n"));
    }
    let path = dir.0.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(binary)
        .args(["-db", "-f"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn haproxy");
    let proc = Proc(child);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(addr, "haproxy");
    (proc, addr, dir)
}

fn node(redis: &Redis, workers: &str) -> Server {
    let server = Server::start(&["--workers", workers, "--broker", &redis.url()]);
    wait_connected(&server);
    server
}

/// Publishes, retrying while the node answers 503 (Redis unreachable), for at most 15 s.
/// Returns the id and how many 503s came first (each must carry Retry-After).
fn publish_retrying(node: &Server, channel: &str, payload: &str) -> (u64, u32) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut refused = 0;
    loop {
        match ureq::post(&node.url(&format!("/pub/{channel}"))).send_string(payload) {
            Ok(resp) => {
                let v: serde_json::Value =
                    serde_json::from_str(&resp.into_string().unwrap()).unwrap();
                return (v["id"].as_u64().unwrap(), refused);
            }
            Err(ureq::Error::Status(503, resp)) => {
                assert!(
                    resp.header("Retry-After").is_some(),
                    "503 without Retry-After"
                );
                refused += 1;
            }
            Err(e) => panic!("publish failed: {e}"),
        }
        assert!(Instant::now() < deadline, "publishes refused for 15 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `GET /channels/{ch}` on `node` until `pred` holds (presence is reported about once a
/// second), at most 10 s.
fn wait_channel(
    node: &Server,
    channel: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = ureq::get(&node.url(&format!("/channels/{channel}")))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "channel info never matched: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the node's broker is connected (after a Redis restart), at most 10 s.
fn wait_connected(node: &Server) {
    node.wait_status(|s| s["broker"]["connected"] == true);
}

/// Publish on A; subscribers on B (through HAProxy) and C (direct) receive every message
/// once, in order. Then kill -9 B: its subscribers reconnect through HAProxy (to C) with
/// their last id, while A keeps publishing, and resume with nothing lost or repeated.
#[test]
fn publish_anywhere_and_survive_a_killed_node() {
    let Some((redis_bin, haproxy_bin)) = binaries() else {
        return;
    };
    let redis = Redis::start(redis_bin);
    let a = node(&redis, "1");
    let mut b = node(&redis, "1");
    let c = node(&redis, "2");
    let (_haproxy, lb, _dir) = start_haproxy(haproxy_bin, &[b.http, c.http]);
    // HAProxy sends new connections to B (the first node up) once its check passed.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut on_b = Vec::new();
    while on_b.len() < 3 {
        match Sub::connect(lb, "room", None) {
            Some(sub) => on_b.push(sub),
            None => std::thread::sleep(Duration::from_millis(50)),
        }
        assert!(Instant::now() < deadline, "haproxy never routed to a node");
    }
    b.wait_status(|s| s["connections"]["sse"].as_u64() == Some(3));
    let mut on_c: Vec<Sub> = (0..2)
        .map(|_| Sub::connect(c.http, "room", None).unwrap())
        .collect();
    c.wait_status(|s| s["connections"]["sse"].as_u64() == Some(2));

    // Presence over the cluster: any node counts every node's subscribers.
    wait_channel(&a, "room", |v| v["subscribers"] == 5 && v["nodes"] == 3);

    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(a.publish("room", format!("m{i}").as_bytes()));
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids rise: {ids:?}");
    for sub in on_b.iter_mut().chain(on_c.iter_mut()) {
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(sub.next(), Some(Seen::Message(*id, format!("m{i}"))));
        }
    }

    // kill -9 B (its workers die with it); A keeps publishing meanwhile.
    let _ = b.child.kill();
    let _ = b.child.wait();
    for sub in on_b.iter_mut() {
        assert_eq!(sub.next(), None, "B's streams end");
    }
    for i in 20..30 {
        ids.push(a.publish("room", format!("m{i}").as_bytes()));
    }
    // Each of B's subscribers comes back through HAProxy with the id it saw last.
    let last_seen = ids[19];
    let mut resumed: Vec<Sub> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while resumed.len() < on_b.len() {
        match Sub::connect(lb, "room", Some(last_seen)) {
            Some(sub) => resumed.push(sub),
            None => {
                assert!(Instant::now() < deadline, "no node took the resume");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    c.wait_status(|s| s["connections"]["sse"].as_u64() == Some(2 + on_b.len() as u64));
    for i in 30..40 {
        ids.push(a.publish("room", format!("m{i}").as_bytes()));
    }
    for sub in resumed.iter_mut() {
        for (i, id) in ids.iter().enumerate().skip(20) {
            assert_eq!(sub.next(), Some(Seen::Message(*id, format!("m{i}"))));
        }
    }
    for sub in on_c.iter_mut() {
        for (i, id) in ids.iter().enumerate().skip(20) {
            assert_eq!(sub.next(), Some(Seen::Message(*id, format!("m{i}"))));
        }
    }
    // B's subscribers now count on C; B's own report expired with it.
    let info = wait_channel(&a, "room", |v| v["subscribers"] == 5 && v["nodes"] == 2);
    assert_eq!(info["last_id"], ids[39]);
    // Nothing more (no duplicate) follows: the next thing each stream carries is the next
    // message.
    let marker = a.publish("room", b"end");
    for sub in resumed.iter_mut().chain(on_c.iter_mut()) {
        assert_eq!(sub.next(), Some(Seen::Message(marker, "end".into())));
    }
}

/// Restart Redis with its data (AOF, kill -9): delivery resumes on every node with no gap and
/// nothing lost; while it is down publishes get 503 + Retry-After and subscribers stay
/// connected. Restart it without its data: every subscriber gets one gap event, and a resume
/// from an id of the lost data set gets a gap too.
#[test]
fn redis_restart_resumes_delivery_with_a_gap_only_when_data_was_lost() {
    let Some((redis_bin, _)) = binaries() else {
        return;
    };
    let mut redis = Redis::start(redis_bin);
    let a = node(&redis, "1");
    let b = node(&redis, "2");
    let mut subs: Vec<Sub> = [&a, &b, &b]
        .iter()
        .map(|n| Sub::connect(n.http, "feed", None).unwrap())
        .collect();
    a.wait_status(|s| s["connections"]["sse"].as_u64() == Some(1));
    b.wait_status(|s| s["connections"]["sse"].as_u64() == Some(2));
    let first = a.publish("feed", b"one");
    for sub in subs.iter_mut() {
        assert_eq!(sub.expect_message("one"), first);
    }

    // With its data: kill -9 and start again on the same port and directory.
    redis.kill();
    redis.run(true);
    let (second, refused) = publish_retrying(&b, "feed", "two");
    assert!(second > first, "ids go on: {first} then {second}");
    eprintln!("publishes refused while reconnecting: {refused}");
    for sub in subs.iter_mut() {
        assert_eq!(sub.next(), Some(Seen::Message(second, "two".into())));
    }
    wait_connected(&a);
    // History survived: a resume from the first id replays exactly the second.
    let mut resumed = Sub::connect(a.http, "feed", Some(first)).unwrap();
    assert_eq!(resumed.next(), Some(Seen::Message(second, "two".into())));

    // While Redis is down: publishes are refused with Retry-After, subscribers stay.
    redis.kill();
    match ureq::post(&a.url("/pub/feed")).send_string("lost?") {
        Err(ureq::Error::Status(503, resp)) => assert_eq!(resp.header("Retry-After"), Some("1")),
        Ok(_) => panic!("a publish was taken while Redis was down"),
        Err(e) => panic!("publish: {e}"),
    }
    a.wait_status(|s| {
        s["broker"]["connected"] == false && s["broker"]["publish_unavailable"].as_u64() >= Some(1)
    });
    let metrics = ureq::get(&a.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    assert!(metrics.contains("c1m_broker_connected 0"), "{metrics}");
    assert!(
        metrics.contains("c1m_broker_unavailable_total{op=\"publish\"}"),
        "{metrics}"
    );

    // Without its data (an empty directory): the new data set starts a new epoch.
    redis.wipe();
    redis.run(false);
    let (third, _) = publish_retrying(&a, "feed", "three");
    assert!(third > second, "ids never reused: {second} then {third}");
    for sub in subs.iter_mut().chain(std::iter::once(&mut resumed)) {
        match sub.next() {
            Some(Seen::Gap(after, through)) => {
                assert_eq!(after, second, "the gap starts after what was delivered");
                assert!(through < third, "the gap ends before the new data set");
            }
            other => panic!("expected a gap event, got {other:?}"),
        }
        assert_eq!(sub.next(), Some(Seen::Message(third, "three".into())));
    }
    wait_connected(&b);
    let status = b.status();
    assert!(
        status["broker"]["live_gaps"].as_u64() >= Some(1),
        "{status}"
    );
    assert!(
        status["broker"]["reconnects"].as_u64() >= Some(2),
        "{status}"
    );
    // A client resuming from the lost data set is told so, then gets what is new.
    let mut late = Sub::connect(b.http, "feed", Some(second)).unwrap();
    assert!(matches!(late.next(), Some(Seen::Gap(a, _)) if a == second));
    assert_eq!(late.next(), Some(Seen::Message(third, "three".into())));
}

/// `GET /channels/{ch}` is behind the publish rule (here: the publish key) and, on one box
/// without a broker, counts this box's subscribers and the newest id in history.
#[test]
fn channel_info_needs_the_publish_key_and_counts_one_box() {
    let server = Server::start(&["--workers", "2", "--publish-key", "sekret"]);
    let denied = ureq::get(&server.url("/channels/news")).call();
    match denied {
        Err(ureq::Error::Status(code, _)) => assert!(code == 401 || code == 403, "{code}"),
        other => panic!("expected 401/403 without the key, got {other:?}"),
    }
    let bad = ureq::get(&server.url("/channels/no%20spaces"))
        .set("Authorization", "Bearer sekret")
        .call();
    assert!(matches!(bad, Err(ureq::Error::Status(400, _))), "{bad:?}");
    let _subs: Vec<Sub> = (0..3)
        .map(|_| Sub::connect(server.http, "news", None).unwrap())
        .collect();
    let id = {
        let body = ureq::post(&server.url("/pub/news"))
            .set("Authorization", "Bearer sekret")
            .send_string("x")
            .unwrap()
            .into_string()
            .unwrap();
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
            .as_u64()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = ureq::get(&server.url("/channels/news"))
            .set("Authorization", "Bearer sekret")
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["subscribers"] == 3 {
            assert_eq!(v["last_id"], id);
            assert_eq!(v["nodes"], 1);
            assert_eq!(v["complete"], true);
            break;
        }
        assert!(Instant::now() < deadline, "never counted 3: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--history-age` holds in Redis: a message older than it leaves history (the next publish
/// trims it), and a resume from before it is told so with a gap, then gets what is left.
#[test]
fn history_age_applies_in_redis() {
    let Some((redis_bin, _)) = binaries() else {
        return;
    };
    let redis = Redis::start(redis_bin);
    let server = Server::start(&[
        "--workers",
        "1",
        "--broker",
        &redis.url(),
        "--history-age",
        "1s",
    ]);
    wait_connected(&server);
    let old = server.publish("aged", b"old");
    std::thread::sleep(Duration::from_millis(1300));
    let new = server.publish("aged", b"new");
    let mut sub = Sub::connect(server.http, "aged", Some(old - 1)).unwrap();
    assert_eq!(sub.next(), Some(Seen::Gap(old - 1, old)));
    assert_eq!(sub.next(), Some(Seen::Message(new, "new".into())));
}
