//! The server API's control messages and cluster presence on every Redis broker: one Redis,
//! Redis Cluster (3 masters) and one Redis behind Sentinel. On each, two nodes: a user's
//! member on node B is listed by both nodes' presence (the union), its join reaches a watcher
//! on node A, `POST /api/presence` on A answers the union with `complete: true`, and
//! `POST /api/disconnect` on A closes the user's stream on B (then its leave reaches A).
//!
//! redis-server (7+) and redis-cli must be installed (scripts/install-test-deps.sh); without
//! them the tests are skipped loudly, except under CI, where they fail.

use crate::auth::{now, Keys};
use crate::common::{Server, Sse};
use crate::redis_support::{cluster::Cluster, sentinel::Sentinels, Redis};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn node(keys: &Keys, url: &str) -> Server {
    let secret = keys.secret();
    let server = Server::start(&[
        "--workers",
        "1",
        "--broker",
        url,
        "--auth",
        "optional",
        "--jwt-key",
        &secret,
        "--presence",
        "--join-leave",
    ]);
    server.wait_status(|s| s["broker"]["connected"] == true);
    server
}

fn token(keys: &Keys, sub: &str) -> String {
    keys.hs256(&json!({"exp": now() + 300, "channels": ["*"], "sub": sub, "info": {"n": sub}}))
}

/// POSTs `body` to `/api/{call}`: (status, JSON answer).
fn api(addr: SocketAddr, call: &str, body: Value) -> (u16, Value) {
    let req = ureq::post(&format!("http://{addr}/api/{call}")).timeout(Duration::from_secs(10));
    let (status, text) = match req.send_string(&body.to_string()) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("POST /api/{call}: {e}"),
    };
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("/api/{call} answered {status} with non-JSON {text:?}: {e}"));
    (status, v)
}

fn presence(server: &Server) -> Value {
    ureq::get(&server.url("/channels/room/presence"))
        .timeout(Duration::from_secs(10))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Polls `ask` until `pred` holds, at most 10 s.
fn wait_for(what: &str, ask: impl Fn() -> Value, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = ask();
        if pred(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what} never matched; last: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn users(members: &Value) -> Vec<String> {
    let mut u: Vec<String> = members
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["user"].as_str().map(str::to_string))
        .collect();
    u.sort();
    u
}

/// The next join or leave about `user` (other events and messages are passed).
fn next_event_about(sse: &mut Sse, user: &str) -> String {
    loop {
        let ev = sse.next();
        let Some(kind) = ev.event.filter(|e| e == "join" || e == "leave") else {
            continue;
        };
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        if v["user"] == user {
            return kind;
        }
    }
}

/// The whole check, on two nodes of the broker at `url`.
fn control_and_presence_cross_nodes(url: &str, kind: &str) {
    let keys = Keys::new("broker-control");
    let a = node(&keys, url);
    let b = node(&keys, url);
    assert_eq!(a.status()["broker"]["kind"], kind);
    let mut watcher = Sse::connect(
        a.http,
        &format!("/sub/room?token={}", token(&keys, "bob")),
        "",
    );
    watcher
        .stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut ann = Sse::connect(
        b.http,
        &format!("/sub/room?token={}", token(&keys, "ann")),
        "",
    );
    ann.stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    // Presence is the union, asked of either node.
    for server in [&a, &b] {
        let p = wait_for("presence", || presence(server), |p| p["clients"] == 2);
        assert_eq!(users(&p["members"]), ["ann", "bob"], "{p}");
        assert_eq!(p["complete"], true, "{p}");
    }
    // Ann's join crossed from B to A's subscriber.
    assert_eq!(next_event_about(&mut watcher, "ann"), "join");
    // The server API's presence on A answers the union too.
    let (status, v) = api(a.http, "presence", json!({"channel": "room"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        (&v["result"]["clients"], &v["result"]["complete"]),
        (&json!(2), &json!(true)),
        "{v}"
    );
    assert_eq!(users(&v["result"]["members"]), ["ann", "bob"], "{v}");
    // A disconnect asked of A closes Ann's stream on B; her leave reaches A's watcher.
    let (status, v) = api(a.http, "disconnect", json!({"user": "ann"}));
    assert_eq!(
        (status, &v["result"]["cluster"]),
        (200, &json!("sent")),
        "{v}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ev = ann.next();
        if ev.event.as_deref() == Some("disconnect") {
            break;
        }
        assert!(Instant::now() < deadline, "no disconnect on node B");
    }
    assert_eq!(next_event_about(&mut watcher, "ann"), "leave");
    let p = wait_for("presence", || presence(&a), |p| p["clients"] == 1);
    assert_eq!(users(&p["members"]), ["bob"], "{p}");
}

#[test]
fn on_one_redis_control_and_presence_cross_nodes() {
    let Some(redis) = Redis::start(&[]) else {
        return;
    };
    control_and_presence_cross_nodes(&format!("redis://{}", redis.addr()), "redis");
}

#[test]
fn on_redis_cluster_control_and_presence_cross_nodes() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    control_and_presence_cross_nodes(&cluster.url_all(), "redis-cluster");
}

#[test]
fn behind_sentinel_control_and_presence_cross_nodes() {
    let Some(sentinels) = Sentinels::start() else {
        return;
    };
    control_and_presence_cross_nodes(&sentinels.url(), "redis-sentinel");
}

/// A call the master cannot answer within 3 s (Redis stopped mid-call, so `history` waits on
/// it) gets the API's JSON error shape with 503 and `Retry-After`, and is counted as
/// `refused.api_timeouts`; once Redis is back, the same call answers, and the first call's
/// answer, which came after the 503, is counted `late` rather than `ok`.
#[test]
fn a_call_not_answered_in_3s_is_a_json_503() {
    let Some(redis) = Redis::start(&[]) else {
        return;
    };
    let keys = Keys::new("broker-control-slow");
    let a = node(&keys, &format!("redis://{}", redis.addr()));
    a.publish("slow", b"one");
    redis.signal("STOP");
    let started = Instant::now();
    let resp = ureq::post(&a.url("/api/history"))
        .timeout(Duration::from_secs(10))
        .send_string(r#"{"channel":"slow"}"#);
    redis.signal("CONT");
    let Err(ureq::Error::Status(503, r)) = resp else {
        panic!("not a 503: {resp:?}");
    };
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(r.header("Retry-After"), Some("1"));
    let v: Value = serde_json::from_str(&r.into_string().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], 503, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("3s"),
        "{v}"
    );
    a.wait_status(|s| s["refused"]["api_timeouts"] == 1);
    let h = wait_for(
        "history",
        || api(a.http, "history", json!({"channel": "slow"})).1,
        |v| v["result"]["messages"][0]["data"] == "one",
    );
    assert_eq!(h["result"]["messages"].as_array().unwrap().len(), 1, "{h}");
    let metrics = a.metrics();
    let count = |outcome: &str| {
        let series = format!("c1m_api_calls_total{{call=\"history\",outcome=\"{outcome}\"}} ");
        let line = metrics.lines().find(|l| l.starts_with(&series));
        line.unwrap_or_else(|| panic!("no {series} in {metrics}"))[series.len()..].to_string()
    };
    assert_eq!(count("late"), "1");
    assert_ne!(count("ok"), "0");
}

/// Messages on c1m's pub/sub names that this build cannot read (a node of another version
/// during a rolling upgrade, or another program publishing there) are counted in
/// `broker.unreadable_messages` and ignored, never dropped silently; the node goes on
/// delivering what it can read.
#[test]
fn unreadable_messages_from_other_nodes_are_counted_not_dropped_silently() {
    let Some(redis) = Redis::start(&[]) else {
        return;
    };
    let keys = Keys::new("broker-control-unreadable");
    let a = node(&keys, &format!("redis://{}", redis.addr()));
    let mut sse = Sse::connect(a.http, "/sub/news", "");
    a.wait_status(|s| s["connections"]["sse"] == 1);
    let garbage = [
        ("c1m:0:control", "not json"),
        (
            "c1m:0:control",
            r#"{"kind":"a-kind-from-a-newer-build","from":"x"}"#,
        ),
        (
            "c1m:0:control",
            r#"{"kind":"act","from":"x","call":"disconnect"}"#,
        ),
        ("c1m:0:presence", "X\nnode\nroom\n{}"),
        ("c1m:0:p:news", "no id line"),
    ];
    for (name, message) in garbage {
        redis.cli(&[], &["PUBLISH", name, message]);
    }
    let status = a.wait_status(|s| s["broker"]["unreadable_messages"] == garbage.len());
    assert_eq!(status["broker"]["connected"], true, "{status}");
    let metrics = a.metrics();
    assert!(
        metrics.contains("c1m_broker_unreadable_messages_total 5\n"),
        "{metrics}"
    );
    a.publish("news", b"still delivered");
    assert_eq!(sse.next().data, "still delivered");
}
