//! The server API (`POST /api/{call}`) against the real binary: every call on one box (a
//! disconnect by user closes exactly that user's SSE and WebSocket connections on both
//! workers, each with its protocol's signal; by connection id; unsubscribe and subscribe;
//! history with its gap; broadcast; batch with a failing item; channels in pages; info), bad
//! input to every call (a JSON 4xx, nothing half-done, counted), and across two nodes on a
//! real redis-server (a disconnect on node A closes the user's connections on node B;
//! channels and info show both nodes). Tokens are minted by tests/auth/mint.py.

use crate::auth::{now, Keys};
use crate::common::{Server, Sse};
use crate::redis_support;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

/// POSTs `body` to `/api/{call}` on `addr`: (status, JSON answer).
fn api_with(addr: SocketAddr, call: &str, body: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = ureq::post(&format!("http://{addr}/api/{call}")).timeout(Duration::from_secs(10));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let (status, text) = match req.send_string(body) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap()),
        Err(e) => panic!("POST /api/{call}: {e}"),
    };
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("/api/{call} answered {status} with non-JSON {text:?}: {e}"));
    (status, v)
}

fn api(addr: SocketAddr, call: &str, body: Value) -> (u16, Value) {
    api_with(addr, call, &body.to_string(), &[])
}

/// The `result` of a call that must succeed.
fn ok(addr: SocketAddr, call: &str, body: Value) -> Value {
    let (status, v) = api(addr, call, body.clone());
    assert_eq!(status, 200, "/api/{call} {body}: {v}");
    v["result"].clone()
}

/// The connection id a stream's response head carries.
fn conn_id(head: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix("C1m-Conn-Id: "))
        .unwrap_or_else(|| panic!("no C1m-Conn-Id in {head:?}"))
        .trim()
        .to_string()
}

fn worker_of(id: &str) -> String {
    id.split('-').next().unwrap().to_string()
}

fn ws(addr: SocketAddr, path: &str) -> (Ws, String) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (socket, response) = tungstenite::client(format!("ws://{addr}{path}"), stream).unwrap();
    assert_eq!(response.status(), 101);
    let id = response.headers()["C1m-Conn-Id"]
        .to_str()
        .unwrap()
        .to_string();
    (socket, id)
}

/// Reads until the close frame: its code and reason (text frames before it are returned too).
fn ws_until_close(socket: &mut Ws) -> (Vec<String>, CloseCode, String) {
    let mut texts = Vec::new();
    for _ in 0..100 {
        match socket.read().expect("a close frame") {
            Message::Text(t) => texts.push(t.to_string()),
            Message::Close(Some(f)) => return (texts, f.code, f.reason.to_string()),
            Message::Close(None) => panic!("close without a code"),
            _ => {}
        }
    }
    panic!("no close frame within 100 frames");
}

fn ws_next_text(socket: &mut Ws) -> Value {
    for _ in 0..100 {
        if let Message::Text(t) = socket.read().expect("a text frame") {
            return serde_json::from_str(&t).unwrap();
        }
    }
    panic!("no text frame within 100 frames");
}

/// Nothing arrives on the stream within `wait` (a read timeout, not a close or data).
fn sse_silent(sse: &mut Sse, wait: Duration) {
    sse.stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 1];
    match sse.stream.read(&mut byte) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        other => panic!("expected silence, got {other:?}"),
    }
    sse.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
}

fn metric(server: &Server, line_start: &str) -> u64 {
    let text = server.metrics();
    let line = text
        .lines()
        .find(|l| l.starts_with(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in /metrics"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn auth_server(keys: &Keys, extra: &[&str]) -> Server {
    let mut args = vec!["--workers", "2", "--auth", "optional"];
    let secret = keys.secret();
    args.extend(["--jwt-key", secret.as_str()]);
    args.extend(extra);
    Server::start(&args)
}

fn token(keys: &Keys, sub: &str) -> String {
    keys.hs256(&json!({"exp": now() + 300, "channels": ["*"], "sub": sub}))
}

#[test]
fn disconnect_by_user_closes_exactly_that_users_streams_on_both_workers() {
    let keys = Keys::new("api-kick");
    let server = auth_server(&keys, &[]);
    let ann = token(&keys, "ann");
    // Ann's SSE streams until they sit on both workers (the kernel spreads them), bounded.
    let mut ann_sse = Vec::new();
    let mut workers = HashSet::new();
    for _ in 0..24 {
        let s = Sse::connect(server.http, &format!("/sub/room?token={ann}"), "");
        workers.insert(worker_of(&conn_id(&s.head)));
        ann_sse.push(s);
        if workers.len() == 2 && ann_sse.len() >= 2 {
            break;
        }
    }
    assert_eq!(workers.len(), 2, "ann's streams never reached both workers");
    let mut ann_ws = Vec::new();
    for _ in 0..24 {
        let (w, id) = ws(server.http, &format!("/sub/room?token={ann}"));
        workers.insert(worker_of(&id));
        ann_ws.push((w, worker_of(&id)));
        let on: HashSet<_> = ann_ws.iter().map(|(_, w)| w.clone()).collect();
        if on.len() == 2 {
            break;
        }
    }
    let bob = token(&keys, "bob");
    let mut bob_sse = Sse::connect(server.http, &format!("/sub/room?token={bob}"), "");
    let (mut bob_ws, _) = ws(server.http, &format!("/sub/room?token={bob}"));
    let mut anonymous = Sse::connect(server.http, "/sub/room", "");
    let total = ann_sse.len() + ann_ws.len() + 3;
    server.wait_status(|s| Server::held(s) == total as u64);

    let answer = ok(server.http, "disconnect", json!({"user": "ann"}));
    assert_eq!(
        answer["disconnected"],
        (ann_sse.len() + ann_ws.len()) as u64,
        "{answer}"
    );
    for s in &mut ann_sse {
        let ev = s.next();
        assert_eq!(ev.event.as_deref(), Some("disconnect"));
        let data: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(data, json!({"reason": "kicked", "reconnect": false}));
        let rest = s.read_to_close();
        assert!(
            !rest.contains("data:"),
            "nothing after the disconnect event: {rest:?}"
        );
    }
    for (w, _) in &mut ann_ws {
        let (_, code, reason) = ws_until_close(w);
        assert_eq!(code, CloseCode::Library(4010));
        assert_eq!(reason, "kicked, do not reconnect");
    }
    // Everyone else is untouched and still gets messages.
    let id = server.publish("room", b"still here");
    for s in [&mut bob_sse, &mut anonymous] {
        let ev = s.next();
        assert_eq!(
            (ev.id, ev.data.as_str()),
            (Some(id.to_string()), "still here")
        );
    }
    assert_eq!(ws_next_text(&mut bob_ws)["data"], "still here");
    server.wait_status(|s| Server::held(s) == 3);

    // With the advice to come back: WebSocket 4011, SSE says reconnect: true.
    let (status, v) = api(
        server.http,
        "disconnect",
        json!({"user": "bob", "reconnect": true}),
    );
    assert_eq!(
        (status, &v["result"]["disconnected"]),
        (200, &json!(2)),
        "{v}"
    );
    let (_, code, reason) = ws_until_close(&mut bob_ws);
    assert_eq!(
        (code, reason.as_str()),
        (CloseCode::Library(4011), "kicked, reconnect")
    );
    let ev = bob_sse.next();
    assert_eq!(ev.event.as_deref(), Some("disconnect"));
    assert_eq!(
        serde_json::from_str::<Value>(&ev.data).unwrap()["reconnect"],
        true
    );
    // A user with no connections: 0, not an error.
    assert_eq!(
        ok(server.http, "disconnect", json!({"user": "nobody"}))["disconnected"],
        0
    );
    assert_eq!(
        metric(
            &server,
            "c1m_api_calls_total{call=\"disconnect\",outcome=\"ok\"}"
        ),
        3
    );
}

#[test]
fn disconnect_by_connection_id_closes_that_one_connection() {
    let server = Server::start(&["--workers", "2", "--tcp-listen", "127.0.0.1:0"]);
    let mut first = Sse::connect(server.http, "/sub/room", "");
    let mut second = Sse::connect(server.http, "/sub/room", "");
    let (mut w, ws_id) = ws(server.http, "/sub/room");
    server.wait_status(|s| Server::held(s) == 3);
    // Bad ids are refused before anything is done.
    for bad in ["", "x-1", "1", "1-zz", "1-2-3"] {
        let (status, v) = api(server.http, "disconnect", json!({"conn": bad}));
        assert_eq!(status, 400, "{bad:?}: {v}");
        assert_eq!(v["error"]["code"], 400);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("connection id"),
            "{v}"
        );
    }
    let (status, v) = api(
        server.http,
        "disconnect",
        json!({"conn": conn_id(&first.head), "user": "a"}),
    );
    assert_eq!(status, 400, "user and conn together: {v}");
    let id = conn_id(&first.head);
    let answer = ok(
        server.http,
        "disconnect",
        json!({"conn": id, "reconnect": true}),
    );
    assert_eq!(answer["disconnected"], 1);
    let ev = first.next();
    assert_eq!(ev.event.as_deref(), Some("disconnect"));
    first.read_to_close();
    // The same id again: that connection is gone.
    assert_eq!(
        ok(server.http, "disconnect", json!({"conn": id}))["disconnected"],
        0
    );
    assert_eq!(
        ok(server.http, "disconnect", json!({"conn": ws_id}))["disconnected"],
        1
    );
    let (_, code, _) = ws_until_close(&mut w);
    assert_eq!(code, CloseCode::Library(4010));
    let pid = server.publish("room", b"left");
    assert_eq!(second.next().id, Some(pid.to_string()));
    assert_eq!(
        metric(
            &server,
            "c1m_api_calls_total{call=\"disconnect\",outcome=\"error\"}"
        ),
        6
    );
}

#[test]
fn unsubscribe_and_subscribe_move_a_users_live_streams() {
    let keys = Keys::new("api-subs");
    let server = auth_server(&keys, &[]);
    let ann = token(&keys, "ann");
    let mut sse = Sse::connect(server.http, &format!("/sub/room?token={ann}"), "");
    let (mut w, _) = ws(server.http, &format!("/sub/room?token={ann}"));
    let mut other = Sse::connect(server.http, "/sub/room", "");
    server.wait_status(|s| Server::held(s) == 3);

    // Server-side subscribe: ann's streams join `news` live (no replay of what came before).
    server.publish("news", b"before");
    assert_eq!(
        ok(
            server.http,
            "subscribe",
            json!({"user": "ann", "channel": "news"})
        )["subscribed"],
        2
    );
    assert_eq!(
        ok(
            server.http,
            "subscribe",
            json!({"user": "ann", "channel": "news"})
        )["subscribed"],
        0
    );
    let id = server.publish("news", b"fresh");
    let ev = sse.next();
    assert_eq!(
        (ev.event.as_deref(), ev.data.as_str()),
        (Some("news"), "fresh")
    );
    assert_eq!(ev.id, Some(id.to_string()));
    let m = ws_next_text(&mut w);
    assert_eq!(
        (&m["channel"], &m["data"]),
        (&json!("news"), &json!("fresh")),
        "{m}"
    );

    // Unsubscribe: they are told, and `room` no longer reaches them.
    assert_eq!(
        ok(
            server.http,
            "unsubscribe",
            json!({"user": "ann", "channel": "room"})
        )["unsubscribed"],
        2
    );
    let ev = sse.next();
    assert_eq!(ev.event.as_deref(), Some("unsubscribed"));
    assert_eq!(
        serde_json::from_str::<Value>(&ev.data).unwrap(),
        json!({"channel": "room"})
    );
    assert_eq!(
        ws_next_text(&mut w),
        json!({"type": "unsubscribed", "channel": "room"})
    );
    let room = server.publish("room", b"room only");
    assert_eq!(other.next().id, Some(room.to_string()));
    let news = server.publish("news", b"news again");
    let ev = sse.next();
    assert_eq!(
        (ev.id, ev.data.as_str()),
        (Some(news.to_string()), "news again")
    );
    assert_eq!(ws_next_text(&mut w)["id"], news);
    sse_silent(&mut sse, Duration::from_millis(300));
    // Not a member any more: 0.
    assert_eq!(
        ok(
            server.http,
            "unsubscribe",
            json!({"user": "ann", "channel": "room"})
        )["unsubscribed"],
        0
    );
}

#[test]
fn history_answers_the_newest_or_a_resume_with_its_gap() {
    let server = Server::start(&["--workers", "1", "--history-size", "3"]);
    let ids: Vec<u64> = (1..=5)
        .map(|n| server.publish("h", format!("m{n}").as_bytes()))
        .collect();
    let newest = ok(server.http, "history", json!({"channel": "h", "limit": 2}));
    assert_eq!(
        newest["messages"],
        json!([{"id": ids[3], "data": "m4"}, {"id": ids[4], "data": "m5"}])
    );
    assert!(newest.get("gap").is_none(), "no resume, no gap: {newest}");
    // From the first id: the second is gone from history (3 kept), so the gap says so.
    let resume = ok(
        server.http,
        "history",
        json!({"channel": "h", "since": ids[0]}),
    );
    assert_eq!(resume["gap"], true, "{resume}");
    assert_eq!(
        resume["missed"],
        json!({"after": ids[0], "through": ids[1]})
    );
    assert_eq!(resume["messages"].as_array().unwrap().len(), 3);
    let caught_up = ok(
        server.http,
        "history",
        json!({"channel": "h", "since": ids[3], "limit": 5}),
    );
    assert_eq!(caught_up["gap"], false);
    assert_eq!(caught_up["messages"], json!([{"id": ids[4], "data": "m5"}]));
    let empty = ok(server.http, "history", json!({"channel": "never"}));
    assert_eq!(empty["messages"], json!([]));
}

#[test]
fn broadcast_and_batch_answer_per_channel_and_per_item() {
    let server = Server::start(&["--workers", "2"]);
    let mut a = Sse::connect(server.http, "/sub/a", "");
    let mut b = Sse::connect(server.http, "/sub/b", "");
    server.wait_status(|s| Server::held(s) == 2);
    let r = ok(
        server.http,
        "broadcast",
        json!({"channels": ["a", "b"], "data": "to both"}),
    );
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (res, sse, name) in [(&results[0], &mut a, "a"), (&results[1], &mut b, "b")] {
        assert_eq!(res["channel"], name);
        let ev = sse.next();
        assert_eq!(ev.id, Some(res["id"].as_u64().unwrap().to_string()));
        assert_eq!(ev.data, "to both");
    }
    // One bad channel refuses the whole broadcast: nothing is published.
    let (status, v) = api(
        server.http,
        "broadcast",
        json!({"channels": ["a", "no spaces"], "data": "x"}),
    );
    assert_eq!(status, 400, "{v}");
    // A batch: each item stands alone; the bad one fails, the others are published.
    let r = ok(
        server.http,
        "batch",
        json!({"items": [
            {"channel": "a", "data": "one"},
            {"channel": "bad name", "data": "two"},
            {"channel": "b", "data_b64": "dGhyZWU="},
        ]}),
    );
    let items = r["results"].as_array().unwrap();
    assert!(items[0]["id"].is_u64() && items[2]["id"].is_u64(), "{r}");
    assert!(
        items[1]["error"]
            .as_str()
            .unwrap()
            .contains("bad channel name"),
        "{r}"
    );
    assert_eq!(
        a.next().data,
        "one",
        "the refused broadcast sent nothing before it"
    );
    assert_eq!(b.next().data, "three");
    // The same as NDJSON.
    let ndjson = "{\"channel\":\"a\",\"data\":\"n1\"}\n\n{\"channel\":\"a\",\"data\":\"n2\"}\n";
    let (status, v) = api_with(
        server.http,
        "batch",
        ndjson,
        &[("Content-Type", "application/x-ndjson")],
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["results"].as_array().unwrap().len(), 2);
    assert_eq!(a.next().data, "n1");
    assert_eq!(a.next().data, "n2");
}

#[test]
fn channels_come_in_pages_and_info_names_the_node() {
    let server = Server::start(&["--workers", "2"]);
    let names = ["p.a", "p.b", "p.c", "p.d", "p.e", "q.z"];
    let _subs: Vec<Sse> = names
        .iter()
        .map(|n| Sse::connect(server.http, &format!("/sub/{n}"), ""))
        .collect();
    let _two = Sse::connect(server.http, "/sub/p.c", "");
    server.wait_status(|s| Server::held(s) == 7);
    // Counts reach the master with the workers' stats (every 250 ms): wait for all of them.
    let mut seen = Vec::new();
    for _ in 0..40 {
        seen.clear();
        let mut cursor = Value::Null;
        for _ in 0..10 {
            let mut body = json!({"prefix": "p.", "limit": 2});
            if !cursor.is_null() {
                body["cursor"] = cursor.clone();
            }
            let page = ok(server.http, "channels", body);
            let list = page["channels"].as_array().unwrap();
            assert!(list.len() <= 2, "{page}");
            seen.extend(list.iter().cloned());
            cursor = page["next_cursor"].clone();
            if cursor.is_null() {
                break;
            }
        }
        if seen.len() == 5 && seen[2]["subscribers"] == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let listed: Vec<&str> = seen.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["p.a", "p.b", "p.c", "p.d", "p.e"]);
    assert_eq!(seen[2]["subscribers"], 2);
    let info = ok(server.http, "info", json!({}));
    let nodes = info["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{info}");
    let node = &nodes[0];
    assert_eq!(node["pid"], server.child.id());
    assert_eq!(
        node["workers"], 3,
        "two subscriber workers and the control worker"
    );
    assert_eq!(node["connections"], 7);
    assert_eq!(node["version"], env!("CARGO_PKG_VERSION"));
    assert!(node["node"]
        .as_str()
        .unwrap()
        .ends_with(&format!(":{}", server.child.id())));
    assert!(node["uptime_s"].is_u64());
}

#[test]
fn bad_input_to_every_call_is_a_json_4xx_and_nothing_is_done() {
    let server = Server::start(&["--workers", "1", "--api-max-body", "2000"]);
    let mut sub = Sse::connect(server.http, "/sub/a", "");
    server.wait_status(|s| Server::held(s) == 1);
    let cases = [
        ("publish", json!({"channel": 5, "data": "x"})),
        (
            "publish",
            json!({"channel": "a", "data": "x", "extra": true}),
        ),
        ("publish", json!({"channel": "a"})),
        (
            "publish",
            json!({"channel": "a", "data": "x", "data_b64": "eA=="}),
        ),
        (
            "publish",
            json!({"channel": "a", "data_b64": "not base64!"}),
        ),
        ("publish", json!({"channel": "a b", "data": "x"})),
        ("broadcast", json!({"channels": "a", "data": "x"})),
        ("broadcast", json!({"channels": [], "data": "x"})),
        ("batch", json!({"items": {"channel": "a"}})),
        ("batch", json!({"items": []})),
        ("batch", json!({"items": [{"channel": "a", "data": 1}]})),
        ("disconnect", json!({"user": 7})),
        ("disconnect", json!({"user": ""})),
        ("disconnect", json!({})),
        ("disconnect", json!({"user": "ann", "channel": "a"})),
        ("unsubscribe", json!({"user": "ann"})),
        (
            "unsubscribe",
            json!({"user": "ann", "channel": "a", "reconnect": true}),
        ),
        ("subscribe", json!({"user": "ann", "channel": "bad name"})),
        ("subscribe", json!({"user": ["ann"], "channel": "a"})),
        ("history", json!({"channel": "a", "limit": "2"})),
        ("history", json!({"channel": "a", "limit": 0})),
        ("history", json!({"channel": "a", "since": -1})),
        ("channels", json!({"limit": 100000})),
        ("channels", json!({"prefix": 3})),
        ("info", json!({"verbose": true})),
    ];
    for (call, body) in &cases {
        let (status, v) = api(server.http, call, body.clone());
        assert_eq!(status, 400, "{call} {body}: {v}");
        assert_eq!(v["error"]["code"], 400, "{v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    }
    for raw in ["not json", "[1,2]", "\"a\""] {
        let (status, v) = api_with(server.http, "publish", raw, &[]);
        assert_eq!(
            (status, &v["error"]["code"]),
            (400, &json!(400)),
            "{raw}: {v}"
        );
    }
    // Unknown call, wrong method, oversize body (and an oversize batch in items).
    let (status, v) = api(server.http, "kick", json!({}));
    assert_eq!((status, &v["error"]["code"]), (404, &json!(404)));
    let resp = ureq::get(&server.url("/api/info")).call();
    let Err(ureq::Error::Status(405, r)) = resp else {
        panic!("GET /api/info: {resp:?}")
    };
    assert_eq!(r.header("Allow"), Some("POST"));
    let big = json!({"channel": "a", "data": "x".repeat(3000)});
    let (status, v) = api(server.http, "publish", big);
    assert_eq!((status, &v["error"]["code"]), (413, &json!(413)), "{v}");
    let many: Vec<Value> = (0..10_001)
        .map(|_| json!({"channel": "a", "data": ""}))
        .collect();
    let server_big = Server::start(&["--workers", "1", "--api-max-body", "4000000"]);
    let (status, v) = api(server_big.http, "batch", json!({"items": many}));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("10000"),
        "{v}"
    );
    // Nothing was published anywhere above, nothing was closed.
    sse_silent(&mut sub, Duration::from_millis(300));
    assert_eq!(server.status()["messages"]["published"], 0);
    assert_eq!(server_big.status()["messages"]["published"], 0);
    let errors: u64 = [
        "publish",
        "broadcast",
        "batch",
        "disconnect",
        "unsubscribe",
        "subscribe",
        "history",
        "channels",
        "info",
        "unknown",
    ]
    .iter()
    .map(|c| {
        metric(
            &server,
            &format!("c1m_api_calls_total{{call=\"{c}\",outcome=\"error\"}}"),
        )
    })
    .sum();
    assert_eq!(errors, cases.len() as u64 + 3 + 3);
}

#[test]
fn the_api_is_never_more_open_than_publishing() {
    let server = Server::start(&["--workers", "1", "--publish-key", "sesame"]);
    let (status, v) = api(server.http, "info", json!({}));
    assert_eq!((status, &v["error"]["code"]), (401, &json!(401)), "{v}");
    let (status, v) = api_with(
        server.http,
        "info",
        "{}",
        &[("Authorization", "Bearer sesame")],
    );
    assert_eq!(status, 200, "{v}");
    // With the admin listener and --admin-publish, the API is there and not on the public one.
    let (admin_server, admin) =
        crate::serve_cors_admin::start_with_admin(&["--workers", "1", "--admin-publish"]);
    assert_eq!(api(admin, "info", json!({})).0, 200);
    let resp = ureq::post(&admin_server.url("/api/info")).send_string("{}");
    assert!(matches!(resp, Err(ureq::Error::Status(404, _))), "{resp:?}");
}

/// Two nodes on one real redis-server: a disconnect on node A reaches the user's streams on
/// node B; channels and info list both nodes.
#[test]
fn across_two_nodes_a_disconnect_reaches_the_other_node_and_lists_gather_both() {
    let Some(redis) = redis_support::Redis::start(&[]) else {
        return;
    };
    let keys = Keys::new("api-cluster");
    let broker = format!("redis://{}", redis.addr());
    let a = auth_server(&keys, &["--broker", &broker]);
    let b = auth_server(&keys, &["--broker", &broker]);
    let ann = token(&keys, "ann");
    let mut on_b = Sse::connect(b.http, &format!("/sub/room?token={ann}"), "");
    let (mut ws_on_b, _) = ws(b.http, &format!("/sub/room?token={ann}"));
    let mut on_a = Sse::connect(a.http, &format!("/sub/room?token={ann}"), "");
    let mut other_on_b = Sse::connect(b.http, "/sub/lobby", "");
    b.wait_status(|s| Server::held(s) == 3);
    a.wait_status(|s| Server::held(s) == 1);
    let answer = ok(a.http, "disconnect", json!({"user": "ann"}));
    assert_eq!(answer["disconnected"], 1, "this node's count: {answer}");
    assert_eq!(answer["cluster"], "sent", "{answer}");
    for s in [&mut on_a, &mut on_b] {
        let ev = s.next();
        assert_eq!(ev.event.as_deref(), Some("disconnect"));
    }
    let (_, code, _) = ws_until_close(&mut ws_on_b);
    assert_eq!(code, CloseCode::Library(4010));
    b.wait_status(|s| Server::held(s) == 1);
    let id = b.publish("lobby", b"still here");
    assert_eq!(other_on_b.next().id, Some(id.to_string()));

    // channels and info gather both nodes (counts reach each master with its workers' stats).
    let _lobby_a = Sse::connect(a.http, "/sub/lobby", "");
    let mut lobby = Value::Null;
    for _ in 0..50 {
        let page = ok(a.http, "channels", json!({"prefix": "lobby"}));
        lobby = page.clone();
        if page["nodes"] == 2 && page["channels"][0]["subscribers"] == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        lobby["channels"],
        json!([{"name": "lobby", "subscribers": 2}]),
        "{lobby}"
    );
    let info = ok(b.http, "info", json!({}));
    let pids: HashSet<u64> = info["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(
        pids,
        HashSet::from([u64::from(a.child.id()), u64::from(b.child.id())]),
        "{info}"
    );
    // History through Redis.
    let h = ok(a.http, "history", json!({"channel": "lobby"}));
    assert_eq!(
        h["messages"],
        json!([{"id": id, "data": "still here"}]),
        "{h}"
    );
}
