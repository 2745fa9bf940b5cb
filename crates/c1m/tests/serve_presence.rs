//! Presence and join/leave events against the real binary: members listed at
//! `GET /channels/{ch}/presence` with their token's `info`, `join`/`leave` events in SSE,
//! WebSocket and the TCP line protocol, the per-channel cap, a worker killed with -9 (its
//! members leave), and a live upgrade (no spurious leave or join). Tokens are minted by
//! tests/auth/mint.py.

use crate::auth::{curl_status, now, Keys};
use crate::common::{Server, Sse};
use crate::serve_upgrade::{start, KillOnDrop, Scratch};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::Message;

fn presence(server: &Server, channel: &str) -> Value {
    try_presence(server, channel).unwrap()
}

fn try_presence(server: &Server, channel: &str) -> Result<Value, Box<ureq::Error>> {
    let body = ureq::get(&server.url(&format!("/channels/{channel}/presence")))
        .call()
        .map_err(Box::new)?
        .into_string()
        .unwrap();
    Ok(serde_json::from_str(&body).unwrap())
}

/// Polls the presence answer until `pred` holds (changes reach the master within a loop
/// turn), at most 10 s.
fn wait_presence(server: &Server, channel: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // A pooled connection to a worker killed since is reset: asked again.
        let p = try_presence(server, channel).unwrap_or_default();
        if pred(&p) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "presence never matched; last: {p}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn users(p: &Value) -> Vec<String> {
    p["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["user"].as_str().unwrap().to_string())
        .collect()
}

fn metric(server: &Server, line_start: &str) -> String {
    let text = server.metrics();
    let line = text
        .lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in /metrics"));
    line[line_start.len()..].trim().to_string()
}

struct Tokens(Keys);

impl Tokens {
    fn new(tag: &str) -> Tokens {
        Tokens(Keys::new(tag))
    }

    fn for_user(&self, sub: &str, info: Option<Value>) -> String {
        let mut claims = json!({"exp": now() + 300, "channels": ["room", "other"], "sub": sub});
        if let Some(info) = info {
            claims["info"] = info;
        }
        self.0.hs256(&claims)
    }
}

/// The next SSE event that is not a message (a join or a leave).
fn next_presence_event(sse: &mut Sse) -> (String, Value) {
    loop {
        let ev = sse.next();
        if let Some(kind) = ev.event.filter(|e| e == "join" || e == "leave") {
            return (kind, serde_json::from_str(&ev.data).unwrap());
        }
    }
}

/// The next join or leave about `user` (a watcher may first hear its own join, or one that
/// raced its subscription).
fn next_event_about(sse: &mut Sse, user: &str) -> (String, Value) {
    loop {
        let (kind, v) = next_presence_event(sse);
        if v["user"] == user {
            return (kind, v);
        }
    }
}

#[test]
fn members_are_listed_and_join_leave_reach_sse_websocket_and_tcp() {
    let tokens = Tokens::new("presence-events");
    let server = Server::start(&[
        "--workers",
        "2",
        "--tcp-listen",
        "127.0.0.1:0",
        "--auth",
        "optional",
        "--jwt-key",
        &tokens.0.secret(),
        "--presence",
        "--join-leave",
    ]);
    // Watchers in three protocols; the SSE one is a member itself (bob), the others are
    // anonymous (counted as clients, never listed, no events about them).
    let bob = tokens.for_user("bob", None);
    let mut sse = Sse::connect(server.http, &format!("/sub/room?token={bob}"), "");
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (mut ws, _) =
        tungstenite::client(format!("ws://{}/sub/room", server.http), stream).unwrap();
    let mut tcp = TcpStream::connect(server.tcp.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(b"SUB room\n").unwrap();
    let mut tcp = BufReader::new(tcp);
    let mut line = String::new();
    tcp.read_line(&mut line).unwrap();
    assert!(line.starts_with("OK "), "{line}");
    let p = wait_presence(&server, "room", |p| p["clients"] == 3);
    assert_eq!(users(&p), ["bob"], "{p}");
    assert_eq!(p["users"], 1);

    // Ann joins (SSE, with an info claim): every watcher hears it.
    let ann = tokens.for_user("ann", Some(json!({"name": "Ann"})));
    let ann_sse = Sse::connect(server.http, &format!("/sub/room?token={ann}"), "");
    let p = wait_presence(&server, "room", |p| p["clients"] == 4);
    assert_eq!(users(&p), ["ann", "bob"], "{p}");
    let ann_conn = p["members"][0]["conn"].as_str().unwrap().to_string();
    assert_eq!(p["members"][0]["info"], json!({"name": "Ann"}));
    let (worker, token) = ann_conn.split_once('-').expect("<worker>-<token hex>");
    assert!(worker.parse::<u32>().is_ok() && u64::from_str_radix(token, 16).is_ok());
    let want = json!({"channel": "room", "user": "ann", "conn": ann_conn, "info": {"name": "Ann"}});
    assert_eq!(
        next_event_about(&mut sse, "ann"),
        ("join".into(), want.clone())
    );
    let ws_event = |ws: &mut tungstenite::WebSocket<TcpStream>| loop {
        if let Message::Text(t) = ws.read().unwrap() {
            let v = serde_json::from_str::<Value>(&t).unwrap();
            if v["user"] != "bob" {
                return v;
            }
        }
    };
    let mut ws_want = want.clone();
    ws_want["type"] = json!("join");
    assert_eq!(ws_event(&mut ws), ws_want);
    let tcp_event = |tcp: &mut BufReader<TcpStream>| loop {
        let mut head = String::new();
        tcp.read_line(&mut head).unwrap();
        let parts: Vec<&str> = head.split_whitespace().collect();
        // `JOIN|LEAVE ch len`, or `MSG ch id len`: the length is last.
        assert_eq!(
            parts.len(),
            if parts[0] == "MSG" { 4 } else { 3 },
            "{head:?}"
        );
        let mut body = vec![0; parts.last().unwrap().parse::<usize>().unwrap() + 1];
        tcp.read_exact(&mut body).unwrap();
        assert_eq!(body.pop(), Some(b'\n'));
        if parts[0] == "MSG" {
            continue;
        }
        let v = serde_json::from_slice::<Value>(&body).unwrap();
        if v["user"] != "bob" {
            return (parts[0].to_string(), parts[1].to_string(), v);
        }
    };
    assert_eq!(
        tcp_event(&mut tcp),
        ("JOIN".into(), "room".into(), want.clone())
    );

    // Events are state, not messages: a message after them has the next id, and a resume
    // replays the message alone.
    let id = server.publish("room", b"hello");
    let msg = sse.next();
    assert_eq!((msg.id, msg.data.as_str()), (Some(id.to_string()), "hello"));
    let mut resumed = Sse::connect(server.http, &format!("/sub/room?last_id={}", id - 1), "");
    let replayed = resumed.next();
    assert_eq!((replayed.event, replayed.data.as_str()), (None, "hello"));

    // Ann leaves: the leave carries the same member.
    drop(ann_sse);
    assert_eq!(
        next_event_about(&mut sse, "ann"),
        ("leave".into(), want.clone())
    );
    let mut ws_want = want.clone();
    ws_want["type"] = json!("leave");
    loop {
        let v = ws_event(&mut ws);
        if v["type"] == "leave" {
            assert_eq!(v, ws_want);
            break;
        }
    }
    assert_eq!(tcp_event(&mut tcp), ("LEAVE".into(), "room".into(), want));
    let p = wait_presence(&server, "room", |p| p["users"] == 1);
    assert_eq!(users(&p), ["bob"], "{p}");
    let s = server.status();
    assert_eq!(s["presence"]["joins"], 5, "{s}");
    assert!(s["presence"]["bytes"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(metric(&server, "c1m_presence_members "), "4");

    // An info claim over 1 KiB is refused like any bad token.
    let big = tokens.for_user("eve", Some(json!("x".repeat(1024))));
    let url = server.url(&format!("/sub/room?token={big}"));
    assert_eq!(curl_status(&["-H", "Accept: text/event-stream", &url]), 401);
}

#[test]
fn joins_past_the_cap_are_left_out_of_presence_and_counted_but_subscribed() {
    let tokens = Tokens::new("presence-cap");
    let server = Server::start(&[
        "--workers",
        "1",
        "--auth",
        "optional",
        "--jwt-key",
        &tokens.0.secret(),
        "--presence",
        "--presence-max-members",
        "2",
    ]);
    let mut subs = Vec::new();
    for (i, u) in ["u1", "u2", "u3"].iter().enumerate() {
        let t = tokens.for_user(u, None);
        subs.push(Sse::connect(
            server.http,
            &format!("/sub/room?token={t}"),
            "",
        ));
        // One at a time, so the one left out is the last.
        if i < 2 {
            wait_presence(&server, "room", |p| p["clients"] == i + 1);
        }
    }
    server.wait_status(|s| s["presence"]["refused"]["channel_full"] == 1);
    let p = presence(&server, "room");
    assert_eq!(users(&p), ["u1", "u2"], "{p}");
    assert_eq!(
        metric(
            &server,
            "c1m_presence_refused_total{reason=\"channel_full\"} "
        ),
        "1"
    );
    // The one left out still gets messages.
    server.publish("room", b"to all");
    for s in &mut subs {
        assert_eq!(s.next().data, "to all");
    }
    // A query where presence is off: 404 with the reason.
    let off = Server::start(&["--workers", "1"]);
    let answer = ureq::get(&off.url("/channels/room/presence")).call();
    match answer {
        Err(ureq::Error::Status(404, r)) => {
            assert!(r.into_string().unwrap().contains("presence is off"))
        }
        other => panic!("expected 404, got {other:?}"),
    }
}

#[test]
fn a_worker_killed_with_9_makes_its_members_leave() {
    let tokens = Tokens::new("presence-crash");
    let server = Server::start(&[
        "--workers",
        "2",
        "--auth",
        "optional",
        "--jwt-key",
        &tokens.0.secret(),
        "--presence",
        "--join-leave",
    ]);
    // Members until both workers hold some (SO_REUSEPORT picks the worker; bounded).
    let mut members: Vec<Sse> = Vec::new();
    let p = loop {
        let n = members.len();
        assert!(n < 40, "40 connections all landed on one worker");
        let t = tokens.for_user(&format!("u{n}"), None);
        members.push(Sse::connect(
            server.http,
            &format!("/sub/room?token={t}"),
            "",
        ));
        let p = wait_presence(&server, "room", |p| p["clients"] == n + 1);
        let workers: std::collections::HashSet<&str> = p["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["conn"].as_str().unwrap().split('-').next().unwrap())
            .collect();
        if n >= 3 && workers.len() == 2 {
            break p;
        }
    };
    let on = |w: &str| -> Vec<(String, String)> {
        p["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["conn"].as_str().unwrap().starts_with(&format!("{w}-")))
            .map(|m| {
                (
                    m["user"].as_str().unwrap().to_string(),
                    m["conn"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let (doomed, survivors) = (on("0"), on("1"));
    // A survivor's stream: drain the joins it saw, then expect exactly the doomed leaves.
    let survivor_user = &survivors[0].0;
    let at: usize = survivor_user[1..].parse().unwrap();
    let watcher = &mut members[at];
    let pid = server.worker_pids()[0];
    c1m_sys::process::kill(pid, libc::SIGKILL).unwrap();
    let mut left = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while left.len() < doomed.len() {
        assert!(Instant::now() < deadline, "leaves so far: {left:?}");
        let (kind, v) = next_presence_event(watcher);
        if kind == "leave" {
            left.push((
                v["user"].as_str().unwrap().to_string(),
                v["conn"].as_str().unwrap().to_string(),
            ));
        }
    }
    left.sort();
    let mut want = doomed.clone();
    want.sort();
    assert_eq!(left, want);
    let p = wait_presence(&server, "room", |p| p["clients"] == survivors.len());
    let mut listed: Vec<(String, String)> = p["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["user"].as_str().unwrap().to_string(),
                m["conn"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    listed.sort();
    let mut want = survivors.clone();
    want.sort();
    assert_eq!(listed, want);
}

#[test]
fn members_cross_a_live_upgrade_without_a_leave_or_a_join() {
    let tokens = Tokens::new("presence-upgrade");
    let scratch = Scratch::new("presence");
    let secret = tokens.0.secret();
    let (server, logs) = start(
        &scratch,
        &[
            ("C1M_AUTH", "optional"),
            ("C1M_JWT_KEY", secret.as_str()),
            ("C1M_PRESENCE", "true"),
            ("C1M_JOIN_LEAVE", "true"),
        ],
    );
    let old_pid = server.child.id();
    let mut subs: Vec<Sse> = ["ann", "bob", "cy"]
        .iter()
        .map(|u| {
            let t = tokens.for_user(u, Some(json!({"n": u})));
            Sse::connect(server.http, &format!("/sub/room?token={t}"), "")
        })
        .collect();
    wait_presence(&server, "room", |p| p["clients"] == 3);
    scratch.install_patched();
    server.signal(libc::SIGUSR2);
    logs.wait_for(
        "upgrade: committed; this master serves",
        Duration::from_secs(30),
    )
    .expect("the new master logs its commit");
    let s = server.wait_status(|s| s["pid"].as_u64() != Some(u64::from(old_pid)));
    let _new = KillOnDrop(s["pid"].as_u64().unwrap() as u32);
    let p = wait_presence(&server, "room", |p| p["clients"] == 3);
    assert_eq!(users(&p), ["ann", "bob", "cy"], "{p}");
    assert_eq!(p["members"][1]["info"], json!({"n": "bob"}));
    // Nothing but the message comes: no leave or join was sent around the upgrade.
    server.publish("room", b"after");
    for s in &mut subs {
        loop {
            let ev = s.next();
            if ev.event.as_deref() == Some("join") {
                continue; // the joins of those that connected after this one, before the upgrade
            }
            assert_eq!((ev.event, ev.data.as_str()), (None, "after"));
            break;
        }
    }
}

#[test]
fn in_a_cluster_presence_is_the_union_and_a_killed_nodes_members_leave_within_10s() {
    let Some(redis) = crate::redis_support::Redis::start(&[]) else {
        return; // skipped loudly by redis_support (a failure under CI)
    };
    let url = format!("redis://{}", redis.addr());
    let tokens = Tokens::new("presence-cluster");
    let secret = tokens.0.secret();
    let node = || {
        Server::start(&[
            "--workers",
            "1",
            "--broker",
            &url,
            "--auth",
            "optional",
            "--jwt-key",
            &secret,
            "--presence",
            "--join-leave",
        ])
    };
    let a = node();
    let mut b = node();
    let bob = tokens.for_user("bob", None);
    let mut watcher = Sse::connect(a.http, &format!("/sub/room?token={bob}"), "");
    watcher
        .stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let ann = tokens.for_user("ann", Some(json!({"name": "Ann"})));
    let _ann = Sse::connect(b.http, &format!("/sub/room?token={ann}"), "");
    // Presence is the union, asked of either node.
    for server in [&a, &b] {
        let p = wait_presence(server, "room", |p| p["clients"] == 2);
        assert_eq!(users(&p), ["ann", "bob"], "{p}");
        assert_eq!(p["members"][0]["info"], json!({"name": "Ann"}));
    }
    // Ann's join crossed from B to A's subscriber.
    let (kind, v) = next_event_about(&mut watcher, "ann");
    assert_eq!(
        (kind.as_str(), &v["info"]),
        ("join", &json!({"name": "Ann"}))
    );
    // Node B dies with -9 (master; its worker follows it): A says Ann left, within 10 s.
    let killed = Instant::now();
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let (kind, v) = next_event_about(&mut watcher, "ann");
    assert_eq!(kind, "leave", "{v}");
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "the leave took {:?}",
        killed.elapsed()
    );
    let p = wait_presence(&a, "room", |p| p["clients"] == 1);
    assert_eq!(users(&p), ["bob"], "{p}");
}

/// The server API's `presence` and `presence_stats` answer from the member sets; an anonymous
/// member counts as a client, not a user; a bad channel is a JSON 400.
#[test]
fn the_server_api_lists_members_and_counts_them() {
    let tokens = Tokens::new("presence-api");
    let secret = tokens.0.secret();
    let server = Server::start(&[
        "--workers",
        "2",
        "--presence",
        "--auth",
        "optional",
        "--jwt-key",
        &secret,
    ]);
    let ann = tokens.for_user("ann", Some(json!({"name": "Ann"})));
    let _a = Sse::connect(server.http, &format!("/sub/room?token={ann}"), "");
    let _anon = Sse::connect(server.http, "/sub/room", "");
    wait_presence(&server, "room", |p| p["clients"] == 2);
    let post = |call: &str, body: Value| -> (u16, Value) {
        match ureq::post(&server.url(&format!("/api/{call}"))).send_string(&body.to_string()) {
            Ok(r) => (
                r.status(),
                serde_json::from_str(&r.into_string().unwrap()).unwrap(),
            ),
            Err(ureq::Error::Status(code, r)) => (
                code,
                serde_json::from_str(&r.into_string().unwrap()).unwrap(),
            ),
            Err(e) => panic!("{call}: {e}"),
        }
    };
    let (status, v) = post("presence", json!({"channel": "room"}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["clients"], 2, "{v}");
    assert_eq!(v["result"]["users"], 1, "{v}");
    assert_eq!(v["result"]["complete"], true, "{v}");
    assert_eq!(v["result"]["members"][0]["user"], "ann", "{v}");
    assert_eq!(v["result"]["members"][0]["info"]["name"], "Ann", "{v}");
    let (status, v) = post("presence_stats", json!({"channel": "room"}));
    assert_eq!((status, &v["result"]["clients"]), (200, &json!(2)), "{v}");
    assert!(v["result"].get("members").is_none(), "{v}");
    let (status, v) = post("presence", json!({"channel": 5}));
    assert_eq!((status, &v["error"]["code"]), (400, &json!(400)), "{v}");
    assert!(
        metric(
            &server,
            "c1m_api_calls_total{call=\"presence\",outcome=\"ok\"}"
        ) == "1"
    );
}
