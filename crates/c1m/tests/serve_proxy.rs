//! Backend proxies (connect, subscribe, publish, refresh) against a real backend: a small
//! HTTP server in this process on loopback, one thread per connection, answering per path
//! and per request as each test says (allow, deny, a rewrite, or a sleep past the proxy
//! timeout). For every kind: allow, deny, timeout, the backend down (a loopback port nothing
//! listens on), and the per-worker in-flight bound (the excess refused at once: 503 / close
//! 1013 / `ERR`), each checked on the wire and in /metrics. Then the proxies where they meet
//! the rest of the server: calls waiting for a free proxy thread, two nodes on one Redis
//! (redis-server from Debian; skipped loudly without it, as the broker tests are), a live
//! upgrade while a subscribe waits, and HTTP/2 streams (python-h2, as in serve_http2.rs).

use crate::common::{c1m, raw_exchange, status_code, Server, Sse};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

type Ws = WebSocket<TcpStream>;

/// What the backend answers to one request: after `delay`, `status` with a JSON body.
struct Reply {
    delay: Duration,
    status: u16,
    body: Value,
}

fn allow(result: Value) -> Reply {
    Reply {
        delay: Duration::ZERO,
        status: 200,
        body: json!({ "result": result }),
    }
}

fn deny(message: &str) -> Reply {
    Reply {
        delay: Duration::ZERO,
        status: 200,
        body: json!({ "error": { "message": message } }),
    }
}

fn slow(delay: Duration) -> Reply {
    Reply {
        delay,
        status: 200,
        body: json!({ "result": {} }),
    }
}

type Answer = dyn Fn(&str, &Value) -> Reply + Send + Sync;

/// One request the backend received.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    body: Value,
}

struct Backend {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backend {
    fn start(answer: impl Fn(&str, &Value) -> Reply + Send + Sync + 'static) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let answer: Arc<Answer> = Arc::new(answer);
        let (s, st) = (Arc::clone(&seen), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            // Bounded: the test stops it, and it ends by itself after two minutes.
            let until = Instant::now() + Duration::from_secs(120);
            while !st.load(Ordering::Relaxed) && Instant::now() < until {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (s, a) = (Arc::clone(&s), Arc::clone(&answer));
                        std::thread::spawn(move || serve(conn, &s, a.as_ref()));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Backend {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits (at most 10 s) until a request to `path` matching `pred` has arrived: the call is
    /// then out, and holds the worker's in-flight slot until it is answered or times out.
    fn wait_asked(&self, path: &str, pred: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.seen(path).iter().any(&pred) {
            assert!(Instant::now() < deadline, "{path}: never asked");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn seen(&self, path: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|s| s.path == path)
            .map(|s| s.body.clone())
            .collect()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One request per connection (`Connection: close`), so each call is its own exchange.
fn serve(conn: TcpStream, seen: &Mutex<Vec<Seen>>, answer: &Answer) {
    conn.set_nonblocking(false).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || !line.starts_with("POST ") {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() {
            return;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&body).expect("the proxy sends JSON");
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        body: body.clone(),
    });
    let reply = answer(&path, &body);
    std::thread::sleep(reply.delay);
    let text = reply.body.to_string();
    let mut conn = reader.into_inner();
    let _ = write!(
        conn,
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        reply.status,
        text.len()
    );
}

/// A loopback URL nothing listens on (the backend is down).
fn dead_url(path: &str) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}{path}")
}

fn start(args: &[&str]) -> Server {
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(args);
    Server::spawn(cmd)
}

fn ws(server: &Server, path: &str) -> Ws {
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (socket, response) =
        tungstenite::client(format!("ws://{}{path}", server.http), stream).unwrap();
    assert_eq!(response.status(), 101);
    socket
}

/// The close frame a WebSocket gets next (data messages before it are skipped).
fn close_of(socket: &mut Ws) -> (u16, String) {
    loop {
        match socket.read() {
            Ok(Message::Close(Some(frame))) => {
                return (u16::from(frame.code), frame.reason.to_string())
            }
            Ok(Message::Close(None)) => panic!("closed without a code"),
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    }
}

/// The next data message of a WebSocket (JSON envelope), as (channel, data).
fn message_of(socket: &mut Ws) -> (String, String) {
    loop {
        match socket.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["type"] == "message" || v.get("data").is_some() {
                    return (
                        v["channel"].as_str().unwrap_or("").to_string(),
                        v["data"].as_str().unwrap_or("").to_string(),
                    );
                }
            }
            Ok(Message::Close(f)) => panic!("closed: {f:?}"),
            Ok(_) => {}
            Err(e) => panic!("no message: {e}"),
        }
    }
}

/// A raw HTTP subscribe's whole answer (the connection closes after a refusal).
fn sse_refusal(server: &Server, path: &str) -> (u16, String) {
    let answer = raw_exchange(
        server.http,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n").as_bytes(),
    );
    (status_code(&answer), answer)
}

/// A TCP line-protocol subscribe's first line.
fn tcp_first_line(addr: SocketAddr, command: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(format!("{command}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

/// One sample of `/metrics`, by its exact name and labels.
fn metric(server: &Server, series: &str) -> u64 {
    let text = server.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} not in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (at most 10 s: workers push their figures every 250 ms) until a `/metrics` sample
/// satisfies `pred`; returns it.
fn metric_when(server: &Server, series: &str, pred: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = metric(server, series);
        if pred(v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{series} stayed at {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`metric_when`] for an exact value.
fn assert_metric(server: &Server, series: &str, want: u64) {
    metric_when(server, series, |v| v == want);
}

fn calls(kind: &str, outcome: &str) -> String {
    format!("c1m_proxy_requests_total{{kind=\"{kind}\",outcome=\"{outcome}\"}}")
}

/// Starts an SSE subscribe without waiting for its answer.
fn send_subscribe(server: &Server, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    s
}

fn status_line(s: &mut TcpStream) -> String {
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    line
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn connect_proxy_allows_with_an_identity_denies_times_out_and_is_bounded() {
    let backend = Backend::start(|_, body| {
        let first = body["channels"][0].as_str().unwrap_or("");
        match first {
            "deny" => deny("banned"),
            "slow" => slow(Duration::from_secs(6)),
            _ => allow(json!({"user": "ann", "channels": ["extra"], "info": {"n": 1}})),
        }
    });
    let connect = backend.url("/connect");
    let server = start(&[
        "--tcp-listen",
        "127.0.0.1:0",
        "--proxy-connect-url",
        &connect,
        "--proxy-headers",
        "Cookie",
        "--proxy-timeout",
        "3s",
        "--proxy-max-in-flight",
        "1",
    ]);
    let tcp = server.tcp.unwrap();

    // Allowed: the connection belongs to the backend's user and gets the added channel.
    let mut sse = Sse::connect(
        server.http,
        "/sub/news",
        "Cookie: sid=42\r\nX-Other: no\r\n",
    );
    let asked = backend.seen("/connect");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let conn_id = sse
        .head
        .lines()
        .find_map(|l| l.strip_prefix("C1m-Conn-Id: "))
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(asked[0]["conn"], conn_id.as_str());
    assert_eq!(asked[0]["transport"], "sse");
    assert_eq!(asked[0]["channels"], json!(["news"]));
    assert_eq!(
        asked[0]["headers"],
        json!({"Cookie": "sid=42"}),
        "only the allow-listed header"
    );
    assert!(asked[0]["remote"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    server.publish("extra", b"from the backend's channel");
    let ev = sse.next();
    assert_eq!(ev.data, "from the backend's channel");
    assert_eq!(
        ev.event.as_deref(),
        Some("extra"),
        "two channels: events name theirs"
    );
    server.wait_status(|s| s["connections"]["with_user"] == 1);

    // Denied, in each transport's way.
    let (code, answer) = sse_refusal(&server, "/sub/deny");
    assert_eq!(code, 403, "{answer}");
    assert!(
        answer.contains("refused by the backend: banned"),
        "{answer}"
    );
    let mut socket = ws(&server, "/sub/deny");
    let (code, reason) = close_of(&mut socket);
    assert_eq!(code, 4403);
    assert!(reason.contains("banned"), "{reason}");
    let line = tcp_first_line(tcp, "SUB deny");
    assert!(
        line.starts_with("ERR refused by the backend: banned"),
        "{line}"
    );

    // A slow backend holds the worker's one call in flight: the next subscribe is refused at
    // once (503 / close 1013 / ERR), and the slow one is answered 504 at the timeout.
    let started = Instant::now();
    let mut waiting = send_subscribe(&server, "/sub/slow");
    backend.wait_asked("/connect", |b| b["channels"][0] == "slow");
    let (code, answer) = sse_refusal(&server, "/sub/news");
    assert_eq!(code, 503, "{answer}");
    assert!(answer.contains("Retry-After: 1"), "{answer}");
    let mut socket = ws(&server, "/sub/news");
    assert_eq!(close_of(&mut socket).0, 1013);
    let line = tcp_first_line(tcp, "SUB news");
    assert!(line.starts_with("ERR server busy"), "{line}");
    let line = status_line(&mut waiting);
    assert!(line.starts_with("HTTP/1.1 504"), "{line}");
    let took = started.elapsed();
    assert!(
        (Duration::from_millis(2900)..Duration::from_millis(5900)).contains(&took),
        "the timeout answered after {took:?}"
    );
    // And over WebSocket (its 101 came first).
    let mut socket = ws(&server, "/sub/slow");
    assert_eq!(close_of(&mut socket).0, 1013);

    assert_metric(&server, &calls("connect", "allow"), 1);
    assert_metric(&server, &calls("connect", "deny"), 3);
    assert_metric(&server, &calls("connect", "timeout"), 2);
    assert_metric(&server, "c1m_proxy_busy_total{kind=\"connect\"}", 3);
    server.wait_status(|s| {
        s["refused"]["proxy_failed"] == 2
            && s["latency"]["proxy_request"]["count"].as_u64() == Some(6)
    });
}

#[test]
fn connect_proxy_down_refuses_with_502_1011_and_err() {
    let url = dead_url("/connect");
    let server = start(&["--tcp-listen", "127.0.0.1:0", "--proxy-connect-url", &url]);
    let (code, answer) = sse_refusal(&server, "/sub/news");
    assert_eq!(code, 502, "{answer}");
    let mut socket = ws(&server, "/sub/news");
    assert_eq!(close_of(&mut socket).0, 1011);
    let line = tcp_first_line(server.tcp.unwrap(), "SUB news");
    assert!(line.starts_with("ERR the backend call failed"), "{line}");
    // A long-poll is refused too: nobody gets in while the backend cannot say yes.
    let got = ureq::get(&server.url("/sub/news")).call();
    assert!(matches!(got, Err(ureq::Error::Status(502, _))), "{got:?}");
    assert_metric(&server, &calls("connect", "error"), 4);
    server.wait_status(|s| s["refused"]["proxy_failed"] == 4);
}

#[test]
fn subscribe_proxy_asks_per_channel_in_proxied_namespaces() {
    let backend = Backend::start(|_, body| match body["channel"].as_str().unwrap_or("") {
        "room:secret" => deny("not a member"),
        "room:slow" => slow(Duration::from_secs(6)),
        _ => allow(json!({})),
    });
    let url = backend.url("/subscribe");
    let server = start(&[
        "--proxy-subscribe-url",
        &url,
        "--proxy-timeout",
        "3s",
        "--proxy-max-in-flight",
        "1",
        "--namespace",
        "public:proxy_subscribe=false",
    ]);
    // Allowed; a channel of a namespace with the proxy off is not asked about.
    let mut sse = Sse::connect(server.http, "/sub/room:a,public:b", "");
    let asked = backend.seen("/subscribe");
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["channel"], "room:a");
    assert_eq!(asked[0]["transport"], "sse");
    server.publish("room:a", b"hi");
    assert_eq!(sse.next().data, "hi");
    // One channel refused refuses the subscribe.
    let (code, answer) = sse_refusal(&server, "/sub/room:a,room:secret");
    assert_eq!(code, 403, "{answer}");
    assert!(answer.contains("not a member"), "{answer}");
    let mut socket = ws(&server, "/sub/room:secret");
    assert_eq!(close_of(&mut socket).0, 4403);
    // Busy while a slow call is out, then that one times out.
    let mut waiting = send_subscribe(&server, "/sub/room:slow");
    backend.wait_asked("/subscribe", |b| b["channel"] == "room:slow");
    let mut socket = ws(&server, "/sub/room:b");
    assert_eq!(close_of(&mut socket).0, 1013);
    let line = status_line(&mut waiting);
    assert!(line.starts_with("HTTP/1.1 504"), "{line}");
    assert_metric(&server, &calls("subscribe", "allow"), 2);
    assert_metric(&server, &calls("subscribe", "deny"), 2);
    assert_metric(&server, &calls("subscribe", "timeout"), 1);
    assert_metric(&server, "c1m_proxy_busy_total{kind=\"subscribe\"}", 1);
    drop(server);

    // The backend down: refused with 502, never let in.
    let dead = dead_url("/subscribe");
    let server = start(&["--proxy-subscribe-url", &dead]);
    let (code, answer) = sse_refusal(&server, "/sub/room:a");
    assert_eq!(code, 502, "{answer}");
    let mut socket = ws(&server, "/sub/room:a");
    assert_eq!(close_of(&mut socket).0, 1011);
    assert_metric(&server, &calls("subscribe", "error"), 2);
}

#[test]
fn publish_proxy_allows_rewrites_denies_times_out_and_is_bounded() {
    let backend = Backend::start(|_, body| match body["data"].as_str().unwrap_or("") {
        "deny" => deny("no swearing"),
        "rewrite" => allow(json!({"data": "rewritten"})),
        "slow" => slow(Duration::from_secs(6)),
        "late" => Reply {
            delay: Duration::from_millis(300),
            ..allow(json!({}))
        },
        _ => allow(json!({})),
    });
    let url = backend.url("/publish");
    let server = start(&[
        "--ws-client-publish",
        "--proxy-publish-url",
        &url,
        "--proxy-timeout",
        "3s",
        "--proxy-max-in-flight",
        "1",
    ]);
    let mut reader = Sse::connect(server.http, "/sub/chat", "");
    let mut writer = ws(&server, "/sub/chat");
    // A slower answer holds the next message back: the order is kept.
    writer.send(Message::text("late")).unwrap();
    writer.send(Message::text("hello")).unwrap();
    writer.send(Message::text("rewrite")).unwrap();
    assert_eq!(reader.next().data, "late");
    assert_eq!(reader.next().data, "hello");
    assert_eq!(reader.next().data, "rewritten");
    let asked = backend.seen("/publish");
    assert_eq!(asked.len(), 3);
    assert_eq!(asked[1]["channel"], "chat");
    assert_eq!(asked[1]["transport"], "websocket");
    assert_eq!(asked[1]["data"], "hello");
    // The writer's own subscription delivered them too.
    assert_eq!(message_of(&mut writer).1, "late");
    writer.send(Message::text("deny")).unwrap();
    let (code, reason) = close_of(&mut writer);
    assert_eq!(code, 4403);
    assert!(reason.contains("no swearing"), "{reason}");

    // One slow publish in flight: another connection's publish is refused at once (1013),
    // then the slow one times out (1013).
    let mut slow_one = ws(&server, "/sub/chat");
    slow_one.send(Message::text("slow")).unwrap();
    backend.wait_asked("/publish", |b| b["data"] == "slow");
    let mut other = ws(&server, "/sub/chat");
    other.send(Message::text("x")).unwrap();
    let (code, reason) = close_of(&mut other);
    assert_eq!(code, 1013, "{reason}");
    let (code, reason) = close_of(&mut slow_one);
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("in time"), "{reason}");
    // Nothing denied or timed out reached the channel.
    server.publish("chat", b"marker");
    assert_eq!(reader.next().data, "marker");

    assert_metric(&server, &calls("publish", "allow"), 3);
    assert_metric(&server, &calls("publish", "deny"), 1);
    assert_metric(&server, &calls("publish", "timeout"), 1);
    assert_metric(&server, "c1m_proxy_busy_total{kind=\"publish\"}", 1);
    drop(server);

    let dead = dead_url("/publish");
    let server = start(&["--ws-client-publish", "--proxy-publish-url", &dead]);
    let mut writer = ws(&server, "/sub/chat");
    writer.send(Message::text("hello")).unwrap();
    assert_eq!(close_of(&mut writer).0, 1011);
    assert_metric(&server, &calls("publish", "error"), 1);
}

#[test]
fn refresh_proxy_extends_ends_and_retries_a_failed_call() {
    // The connect proxy gives every connection an expiry 1-2 s away (Unix seconds); the
    // refresh proxy decides by user: extend, refuse, or answer too late.
    let backend = Backend::start(|path, body| {
        let user = body["user"].as_str().unwrap_or("");
        match path {
            "/connect" => {
                let user = body["channels"][0].as_str().unwrap_or("").to_string();
                allow(json!({"user": user, "expire_at": unix_now() + 1}))
            }
            // Two seconds ahead: one second could already be past when the answer arrives.
            _ if user == "keep" => allow(json!({"expire_at": unix_now() + 2})),
            _ if user == "slow" => slow(Duration::from_secs(3)),
            _ => deny("session over"),
        }
    });
    let (connect, refresh) = (backend.url("/connect"), backend.url("/refresh"));
    let server = start(&[
        "--proxy-connect-url",
        &connect,
        "--proxy-refresh-url",
        &refresh,
        "--proxy-timeout",
        "500ms",
    ]);
    let mut keep = Sse::connect(server.http, "/sub/keep", "");
    let mut ended = ws(&server, "/sub/end");
    // Refused at its expiry: the WebSocket ends like an expired token (4001).
    let (code, _) = close_of(&mut ended);
    assert_eq!(code, u16::from(CloseCode::Library(4001)));
    // Extended: still receiving after several expiries.
    let deadline = Instant::now() + Duration::from_secs(15);
    while backend
        .seen("/refresh")
        .iter()
        .filter(|b| b["user"] == "keep")
        .count()
        < 3
    {
        assert!(Instant::now() < deadline, "never refreshed three times");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.publish("keep", b"still here");
    assert_eq!(keep.next().data, "still here");
    let asked = backend.seen("/refresh");
    let one = asked.iter().find(|b| b["user"] == "keep").unwrap();
    assert_eq!(one["channels"], json!(["keep"]));
    assert_eq!(one["transport"], "sse");

    // A refresh that times out is retried (the stream goes on meanwhile), and the stream
    // ends after three failures in a row.
    let mut slow_one = Sse::connect(server.http, "/sub/slow", "");
    slow_one
        .stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let started = Instant::now();
    server.wait_status(|_| backend.seen("/refresh").iter().any(|b| b["user"] == "slow"));
    server.publish("slow", b"during the retries");
    assert_eq!(slow_one.next().data, "during the retries");
    let rest = slow_one.read_to_close();
    assert!(rest.contains("event: expired"), "{rest}");
    let took = started.elapsed();
    assert!(
        (Duration::from_secs(10)..Duration::from_secs(25)).contains(&took),
        "ended after {took:?}"
    );
    metric_when(&server, &calls("refresh", "allow"), |v| v >= 3);
    assert_metric(&server, &calls("refresh", "deny"), 1);
    assert_metric(&server, &calls("refresh", "timeout"), 3);
    drop(keep);
    drop(server);

    // The backend down: retried, then ended.
    let dead = dead_url("/refresh");
    let server = start(&[
        "--proxy-connect-url",
        &connect,
        "--proxy-refresh-url",
        &dead,
    ]);
    let mut socket = ws(&server, "/sub/down");
    socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (code, _) = close_of(&mut socket);
    assert_eq!(code, 4001);
    assert_metric(&server, &calls("refresh", "error"), 3);
}

#[test]
fn refresh_proxy_busy_is_a_failed_call_retried_later() {
    // One call in flight per worker: a connect call held by a slow backend takes the slot
    // while another stream's refresh comes due.
    let backend = Backend::start(|path, body| {
        let first = body["channels"][0].as_str().unwrap_or("");
        match path {
            "/connect" if first == "hold" => Reply {
                delay: Duration::from_secs(3),
                ..allow(json!({}))
            },
            "/connect" => allow(json!({"user": "r", "expire_at": unix_now() + 2})),
            _ => allow(json!({"expire_at": unix_now() + 60})),
        }
    });
    let (connect, refresh) = (backend.url("/connect"), backend.url("/refresh"));
    let server = start(&[
        "--proxy-connect-url",
        &connect,
        "--proxy-refresh-url",
        &refresh,
        "--proxy-timeout",
        "4s",
        "--proxy-max-in-flight",
        "1",
    ]);
    let mut r = Sse::connect(server.http, "/sub/r", "");
    r.stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _hold = send_subscribe(&server, "/sub/hold");
    // Its refresh came due while the slot was taken: refused at once, counted, and tried
    // again 5 s later, when it is extended; the stream never ended.
    metric_when(&server, "c1m_proxy_busy_total{kind=\"refresh\"}", |v| {
        v == 1
    });
    metric_when(&server, &calls("refresh", "allow"), |v| v == 1);
    server.publish("r", b"alive");
    assert_eq!(r.next().data, "alive");
}

/// A worker makes at most 32 calls at once; past them, calls wait for a free thread. One whose
/// client left meanwhile is never made (the backend hears of no one who is gone), and the
/// others are made, in order, as threads free up.
#[test]
fn a_subscribe_closed_while_its_call_waits_for_a_thread_is_never_asked_about() {
    let backend = Backend::start(|_, body| match body["channels"][0].as_str() {
        Some("hold") => slow(Duration::from_secs(3)),
        _ => allow(json!({})),
    });
    let url = backend.url("/connect");
    let server = start(&[
        "--proxy-connect-url",
        &url,
        "--proxy-timeout",
        "20s",
        "--proxy-max-in-flight",
        "100",
    ]);
    let held: Vec<TcpStream> = (0..32)
        .map(|_| send_subscribe(&server, "/sub/hold"))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while backend.seen("/connect").len() < 32 {
        assert!(
            Instant::now() < deadline,
            "the 32 calls were never all made"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut kept = send_subscribe(&server, "/sub/after");
    let gone = send_subscribe(&server, "/sub/gone");
    let gone_addr = gone.local_addr().unwrap().to_string();
    metric_when(&server, "c1m_proxy_in_flight", |v| v == 34);
    drop(gone);
    server.wait_status(|s| s["connections"]["sse"] == 33);
    for mut s in held {
        assert!(status_line(&mut s).starts_with("HTTP/1.1 200"));
    }
    assert!(status_line(&mut kept).starts_with("HTTP/1.1 200"));
    let asked = backend.seen("/connect");
    assert!(
        !asked.iter().any(|b| b["remote"] == gone_addr.as_str()),
        "the backend was asked about a client that had left: {asked:?}"
    );
    assert_eq!(asked.len(), 33, "{asked:?}");
    assert_eq!(asked[32]["channels"], json!(["after"]));
    assert_metric(&server, "c1m_proxy_in_flight", 0);
}

/// Calls that wait for a thread past their deadline (every thread held by a backend slower
/// than the timeout) are answered like the ones out: each subscribe gets its 504, none hangs.
#[test]
fn calls_that_wait_for_a_thread_past_their_deadline_time_out_too() {
    let backend = Backend::start(|_, _| slow(Duration::from_secs(4)));
    let url = backend.url("/connect");
    let server = start(&[
        "--proxy-connect-url",
        &url,
        "--proxy-timeout",
        "1s",
        "--proxy-max-in-flight",
        "100",
    ]);
    let waiting: Vec<TcpStream> = (0..40)
        .map(|_| send_subscribe(&server, "/sub/late"))
        .collect();
    for mut s in waiting {
        let line = status_line(&mut s);
        assert!(line.starts_with("HTTP/1.1 504"), "{line}");
    }
    assert_metric(&server, &calls("connect", "timeout"), 40);
    assert_metric(&server, "c1m_proxy_in_flight", 0);
    assert!(backend.seen("/connect").len() <= 40);
}

/// Two nodes on one Redis, each with connect, subscribe and publish proxies to the same
/// backend: what the proxies let through crosses the nodes, rewritten where the backend says,
/// and what they refuse stays out.
#[test]
fn two_broker_nodes_ask_their_proxies_and_cross_messages() {
    let Some(redis) = crate::redis_support::Redis::start(&[]) else {
        return;
    };
    let broker = format!("redis://{}", redis.addr());
    let backend = Backend::start(|path, body| match path {
        "/subscribe" if body["channel"] == "secret" => deny("members only"),
        "/publish" => allow(json!({
            "data": format!("{} (checked)", body["data"].as_str().unwrap_or(""))
        })),
        _ => allow(json!({})),
    });
    let (connect, subscribe, publish) = (
        backend.url("/connect"),
        backend.url("/subscribe"),
        backend.url("/publish"),
    );
    let node = || {
        let server = Server::start(&[
            "--workers",
            "1",
            "--broker",
            &broker,
            "--ws-client-publish",
            "--proxy-connect-url",
            &connect,
            "--proxy-subscribe-url",
            &subscribe,
            "--proxy-publish-url",
            &publish,
        ]);
        server.wait_status(|s| s["broker"]["connected"] == true);
        server
    };
    let (a, b) = (node(), node());
    let mut on_a = Sse::connect(a.http, "/sub/room", "");
    on_a.stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    b.publish("room", b"from B");
    assert_eq!(on_a.next().data, "from B");
    // A client publish on B goes through B's publish proxy, and A's subscriber gets the
    // backend's version.
    let mut writer = ws(&b, "/sub/room");
    writer.send(Message::text("hello")).unwrap();
    assert_eq!(on_a.next().data, "hello (checked)");
    assert_eq!(message_of(&mut writer).1, "hello (checked)");
    let (status, answer) = sse_refusal(&b, "/sub/secret");
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("members only"), "{answer}");
    // Each node asked for its own clients.
    let connects = backend.seen("/connect");
    assert!(
        connects
            .iter()
            .any(|c| c["transport"] == "sse" && c["channels"] == json!(["room"])),
        "{connects:?}"
    );
    assert!(
        connects.iter().any(|c| c["transport"] == "websocket"),
        "{connects:?}"
    );
    assert_eq!(backend.seen("/publish").len(), 1);
    assert_metric(&a, &calls("connect", "allow"), 1);
    assert_metric(&b, &calls("subscribe", "deny"), 1);
    assert_metric(&b, &calls("publish", "allow"), 1);
}

/// A live upgrade while subscribes wait on the connect proxy: the calls' answers would go to
/// the old process, so the new one tells each client to retry (503 with Retry-After, close
/// 1013) and counts it; none is left hanging.
#[test]
fn a_subscribe_parked_on_the_backend_during_a_live_upgrade_is_told_to_retry() {
    let backend = Backend::start(|_, _| slow(Duration::from_secs(8)));
    let url = backend.url("/connect");
    let scratch = crate::serve_upgrade::Scratch::new("proxy-parked");
    let mut cmd = std::process::Command::new(scratch.exe());
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--upgrade-timeout", "15s", "--proxy-timeout", "30s"])
        .args(["--proxy-connect-url", &url]);
    let (mut server, _logs) = Server::spawn_capturing_stderr(cmd);
    let mut sse = send_subscribe(&server, "/sub/news");
    let mut socket = ws(&server, "/sub/news");
    let deadline = Instant::now() + Duration::from_secs(10);
    while backend.seen("/connect").len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the connect calls were never made"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (s, _new) = crate::serve_upgrade::upgrade_in_place(&mut server);
    assert_eq!(s["upgrades"]["completed"], 1, "{s}");
    let mut answer = String::new();
    sse.read_to_string(&mut answer).unwrap();
    assert_eq!(status_code(&answer), 503, "{answer}");
    assert!(answer.contains("Retry-After: 1"), "{answer}");
    let (code, reason) = close_of(&mut socket);
    assert_eq!(code, 1013, "{reason}");
    metric_when(&server, "c1m_refused_total{reason=\"busy\"}", |v| v >= 2);
}

/// HTTP/2 streams wait on the connect and subscribe proxies like HTTP/1.1 requests: one held
/// by a slow backend answers once allowed, one refused gets its 403, and the connection's
/// other streams are not held up or touched by either.
#[test]
fn http2_streams_wait_on_the_proxies_and_a_denied_one_leaves_its_siblings() {
    let backend = Backend::start(|path, body| {
        let channel = match path {
            "/connect" => body["channels"][0].as_str().unwrap_or(""),
            _ => body["channel"].as_str().unwrap_or(""),
        };
        match (path, channel) {
            ("/connect", "slow") => Reply {
                delay: Duration::from_millis(1500),
                ..allow(json!({}))
            },
            ("/subscribe", "deny") => deny("not this one"),
            _ => allow(json!({})),
        }
    });
    let (connect, subscribe) = (backend.url("/connect"), backend.url("/subscribe"));
    let server = start(&[
        "--proxy-connect-url",
        &connect,
        "--proxy-subscribe-url",
        &subscribe,
        "--proxy-timeout",
        "10s",
    ]);
    let mut py = crate::serve_http2::PyClient::start(server.http.port(), &["gated"]);
    py.ready();
    server.wait_status(|s| s["connections"]["sse"] == 2);
    server.publish("slow", b"to slow");
    server.publish("live", b"to live");
    let v = py.result();
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["status"]["slow"], "200", "{v}");
    assert_eq!(v["status"]["live"], "200", "{v}");
    assert_eq!(v["status"]["deny"], "403", "{v}");
    assert!(
        v["deny_body"].as_str().unwrap().contains("not this one"),
        "{v}"
    );
    // The slow stream's wait held no sibling back.
    assert_eq!(
        v["order"].as_array().unwrap().last().unwrap(),
        "slow",
        "{v}"
    );
    assert_eq!(v["data"]["slow"], json!(["to slow"]), "{v}");
    assert_eq!(v["data"]["live"], json!(["to live"]), "{v}");
    assert!(
        v["resets"].get("slow").is_none() && v["resets"].get("live").is_none(),
        "{v}"
    );
    assert_metric(&server, &calls("connect", "allow"), 3);
    assert_metric(&server, &calls("subscribe", "deny"), 1);
    assert_metric(&server, &calls("subscribe", "allow"), 2);
}
