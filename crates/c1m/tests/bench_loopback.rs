//! `c1m bench` end to end over loopback, against a tiny in-test push server (threads, blocking
//! sockets) that speaks docs/PROTOCOL.md for SSE, WebSocket, long-poll, the TCP line protocol,
//! `/pub` and `/status`, and can drop or repeat a message on purpose. Each test runs the real
//! binary with a short, bounded run and checks its JSON report.

use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Acknowledge the n-th publish (1-based, over all channels) but send it to nobody.
    Drop(u64),
    /// Send the n-th publish twice.
    Repeat(u64),
    /// Accept connections and never answer a subscribe.
    Silent,
    /// Close every SSE stream this many ms after it started.
    CloseAfter(u64),
}

enum Sub {
    Sse(TcpStream),
    Ws(TcpStream),
    Tcp(TcpStream),
}

#[derive(Default)]
struct Hub {
    next_id: u64,
    publishes: u64,
    per_channel: HashMap<String, u64>,
    subs: HashMap<String, Vec<Sub>>,
    subscribers: u64,
    /// Subscribers per peer address (shows which source addresses bench used).
    peers: HashMap<std::net::IpAddr, u64>,
    /// Long-poll history per channel: (id, data).
    history: HashMap<String, Vec<(u64, String)>>,
}

struct Server {
    http: SocketAddr,
    tcp: SocketAddr,
    hub: Arc<(Mutex<Hub>, Condvar)>,
}

fn start_server(fault: Fault) -> Server {
    let http = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let hub = Arc::new((
        Mutex::new(Hub {
            next_id: 1000,
            ..Default::default()
        }),
        Condvar::new(),
    ));
    let server = Server {
        http: http.local_addr().unwrap(),
        tcp: tcp.local_addr().unwrap(),
        hub: hub.clone(),
    };
    let h = hub.clone();
    std::thread::spawn(move || {
        for s in http.incoming().flatten() {
            let h = h.clone();
            std::thread::spawn(move || {
                let _ = serve_http(s, &h, fault);
            });
        }
    });
    std::thread::spawn(move || {
        for s in tcp.incoming().flatten() {
            let h = hub.clone();
            std::thread::spawn(move || {
                let _ = serve_tcp(s, &h);
            });
        }
    });
    server
}

fn read_head(r: &mut BufReader<TcpStream>) -> Option<(String, String, HashMap<String, String>)> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).ok()?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Some((method, path, headers))
}

fn serve_http(s: TcpStream, hub: &Arc<(Mutex<Hub>, Condvar)>, fault: Fault) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut w = s;
    while let Some((method, path, headers)) = read_head(&mut r) {
        if fault == Fault::Silent {
            std::thread::sleep(Duration::from_secs(60));
            return Ok(());
        }
        let (path, query) = path.split_once('?').unwrap_or((&path, ""));
        let path = path.to_string();
        if method == "POST" && path.starts_with("/pub/") {
            let ch = path[5..].to_string();
            let len: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            r.read_exact(&mut body)?;
            let data = String::from_utf8_lossy(&body).into_owned();
            let id = publish(hub, &ch, &data, fault);
            let answer = format!("{{\"channel\":\"{ch}\",\"id\":{id}}}");
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{answer}",
                answer.len()
            )?;
        } else if path == "/status" {
            let n = hub.0.lock().unwrap().subscribers;
            let body = format!(
                "{{\"connections\":{{\"total\":{n}}},\"memory\":{{\"rss_bytes\":{},\"pss_bytes\":{}}}}}",
                (n + 1) * 8192,
                (n + 1) * 4096
            );
            write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )?;
            return Ok(());
        } else if let Some(ch) = path.strip_prefix("/sub/") {
            let ch = ch.to_string();
            if let Some(key) = headers.get("sec-websocket-key") {
                let accept = c1m_bench::proto::ws_accept(key);
                let head = format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n");
                subscribe(hub, &ch, Sub::Ws(w.try_clone()?), |_| head.into_bytes())?;
                return hold(r);
            } else if headers
                .get("accept")
                .is_some_and(|a| a.contains("text/event-stream"))
            {
                subscribe(hub, &ch, Sub::Sse(w.try_clone()?), |_| {
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n".to_vec()
                })?;
                if let Fault::CloseAfter(ms) = fault {
                    std::thread::sleep(Duration::from_millis(ms));
                    return w.shutdown(std::net::Shutdown::Both);
                }
                return hold(r);
            } else {
                let last: Option<u64> = query.strip_prefix("last_id=").and_then(|v| v.parse().ok());
                long_poll(hub, &ch, last, &mut w)?;
            }
        } else {
            w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
        }
    }
    Ok(())
}

/// Keeps a streaming subscriber's thread until the client goes away.
fn hold(mut r: BufReader<TcpStream>) -> std::io::Result<()> {
    let mut buf = [0u8; 256];
    while r.read(&mut buf)? > 0 {}
    Ok(())
}

/// Registers a subscriber and sends its confirmation under the hub lock, so no publish can
/// fall between "confirmed" and "registered" (what a correct server must guarantee).
fn subscribe(
    hub: &Arc<(Mutex<Hub>, Condvar)>,
    ch: &str,
    sub: Sub,
    confirm: impl FnOnce(&Hub) -> Vec<u8>,
) -> std::io::Result<()> {
    let mut h = hub.0.lock().unwrap();
    let bytes = confirm(&h);
    match &sub {
        Sub::Sse(s) | Sub::Ws(s) | Sub::Tcp(s) => (&*s).write_all(&bytes)?,
    }
    h.subscribers += 1;
    let peer = match &sub {
        Sub::Sse(s) | Sub::Ws(s) | Sub::Tcp(s) => s.peer_addr().map(|a| a.ip()),
    };
    if let Ok(ip) = peer {
        *h.peers.entry(ip).or_default() += 1;
    }
    h.subs.entry(ch.to_string()).or_default().push(sub);
    Ok(())
}

fn long_poll(
    hub: &Arc<(Mutex<Hub>, Condvar)>,
    ch: &str,
    last: Option<u64>,
    w: &mut TcpStream,
) -> std::io::Result<()> {
    let (lock, cv) = &**hub;
    let mut h = lock.lock().unwrap();
    if last.is_none() {
        h.subscribers += 1;
    }
    let start_len = h.history.get(ch).map_or(0, |v| v.len());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let hist = h.history.get(ch).cloned().unwrap_or_default();
        let fresh: Vec<(u64, String)> = match last {
            Some(l) => hist.into_iter().filter(|(id, _)| *id > l).collect(),
            None => hist.into_iter().skip(start_len).collect(),
        };
        if !fresh.is_empty() {
            let msgs: Vec<String> = fresh
                .iter()
                .map(|(id, d)| format!("{{\"channel\":\"{ch}\",\"id\":{id},\"data\":\"{d}\"}}"))
                .collect();
            let last_id = fresh.last().map(|m| m.0).unwrap_or(0);
            let body = format!(
                "{{\"messages\":[{}],\"gaps\":[],\"last_id\":{last_id}}}",
                msgs.join(",")
            );
            drop(h);
            return write!(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            drop(h);
            return w.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
        }
        h = cv.wait_timeout(h, left).unwrap().0;
    }
}

fn publish(hub: &Arc<(Mutex<Hub>, Condvar)>, ch: &str, data: &str, fault: Fault) -> u64 {
    let (lock, cv) = &**hub;
    let mut h = lock.lock().unwrap();
    h.next_id += 1;
    h.publishes += 1;
    *h.per_channel.entry(ch.to_string()).or_default() += 1;
    let id = h.next_id;
    let n = h.publishes;
    let times = match fault {
        Fault::Drop(k) if k == n => 0,
        Fault::Repeat(k) if k == n => 2,
        _ => 1,
    };
    for _ in 0..times {
        h.history
            .entry(ch.to_string())
            .or_default()
            .push((id, data.to_string()));
        if let Some(subs) = h.subs.get_mut(ch) {
            subs.retain_mut(|s| {
                let res = match s {
                    Sub::Sse(w) => write!(w, "id: {id}\ndata: {data}\n\n"),
                    Sub::Ws(w) => {
                        let json =
                            format!("{{\"channel\":\"{ch}\",\"id\":{id},\"data\":\"{data}\"}}");
                        let mut f = vec![0x81, json.len() as u8];
                        f.extend_from_slice(json.as_bytes());
                        w.write_all(&f)
                    }
                    Sub::Tcp(w) => write!(w, "MSG {ch} {id} {}\n{data}\n", data.len()),
                };
                res.is_ok()
            });
        }
    }
    cv.notify_all();
    id
}

fn serve_tcp(s: TcpStream, hub: &Arc<(Mutex<Hub>, Condvar)>) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    if words.next() != Some("SUB") {
        return (&s).write_all(b"ERR bad command\n");
    }
    let ch = words.next().unwrap_or("").to_string();
    subscribe(hub, &ch, Sub::Tcp(s.try_clone()?), |h| {
        format!("OK {}\n", h.next_id).into_bytes()
    })?;
    hold(r)
}

struct Outcome {
    code: i32,
    report: Value,
    stdout: String,
    elapsed: Duration,
}

fn bench(args: &[&str]) -> Outcome {
    let dir = std::env::temp_dir().join(format!(
        "c1m-bench-test-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.json");
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .arg("bench")
        .args(args)
        .arg("--report")
        .arg(&report)
        .arg("--plot")
        .arg(dir.join("plot.svg"))
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report ({e}); stdout:\n{stdout}\nstderr:\n{stderr}"));
    let svg = std::fs::read_to_string(dir.join("plot.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("{stdout}");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        report: serde_json::from_str(&text).unwrap(),
        stdout,
        elapsed,
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn url(s: &Server, ch: &str) -> String {
    format!("http://{}/sub/{ch}", s.http)
}

/// Messages the server published times subscribers per channel: what "all" means.
fn deliveries_due(s: &Server, conns: u64, channels: u64, base: &str) -> u64 {
    let h = s.hub.0.lock().unwrap();
    (0..channels)
        .map(|c| {
            let name = if channels == 1 {
                base.to_string()
            } else {
                format!("{base}-{c}")
            };
            let subs = conns / channels + u64::from(c < conns % channels);
            subs * h.per_channel.get(&name).copied().unwrap_or(0)
        })
        .sum()
}

const RUN: &[&str] = &[
    "--publish-every",
    "200ms",
    "--hold",
    "2s",
    "--drain",
    "600ms",
    "--rate",
    "2000",
];

fn check_all_delivered(o: &Outcome, s: &Server, conns: u64, channels: u64, base: &str) {
    let r = &o.report;
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(r["result"]["peak_online"], conns);
    assert_eq!(r["errors_total"], 0);
    let d = &r["delivery"]["totals"];
    let due = deliveries_due(s, conns, channels, base);
    assert!(due >= conns, "publisher published too little: {due}");
    assert_eq!(d["expected"], due, "{d}");
    assert_eq!(d["received_in_window"], due, "{d}");
    assert_eq!(d["missing"], 0);
    assert_eq!(d["duplicates"], 0);
    assert_eq!(r["delivery"]["delivered_to_all"], true);
    assert_eq!(
        r["publishing"]["published"],
        s.hub.0.lock().unwrap().publishes
    );
    assert!(r["latency_us"]["delivery"]["count"].as_u64().unwrap() >= due);
    assert!(r["latency_us"]["connect"]["p99_us"].as_u64().unwrap() > 0);
    assert!(o.stdout.contains("delivered to all: yes"));
}

#[test]
fn sse_counts_match_exactly_over_channels() {
    let s = start_server(Fault::None);
    let o = bench(&args(
        &[
            &url(&s, "news"),
            "--conns",
            "30",
            "--channels",
            "3",
            "--proto",
            "sse",
            "--publishers",
            "3",
        ],
        RUN,
    ));
    check_all_delivered(&o, &s, 30, 3, "news");
    assert_eq!(s.hub.0.lock().unwrap().subscribers, 30);
    // c1m-style /status was found and the server's memory per connection recorded.
    let srv = &o.report["memory"]["server"];
    assert_eq!(srv["peak"]["connections"], 30);
    assert_eq!(
        srv["pss_bytes_per_connection"].as_f64().unwrap().round(),
        (31.0 * 4096.0 / 30.0f64).round()
    );
    assert!(o.report["environment"]["kernel"].is_string());
    assert!(!o.report["timeline"].as_array().unwrap().is_empty());
}

#[test]
fn ws_counts_match() {
    let s = start_server(Fault::None);
    let o = bench(&args(
        &[
            &url(&s, "w"),
            "--conns",
            "12",
            "--channels",
            "2",
            "--proto",
            "ws",
        ],
        RUN,
    ));
    check_all_delivered(&o, &s, 12, 2, "w");
}

#[test]
fn poll_counts_match() {
    let s = start_server(Fault::None);
    let o = bench(&args(
        &[&url(&s, "lp"), "--conns", "10", "--proto", "poll"],
        RUN,
    ));
    // Long-poll windows open at the first answer, so the first message is not "due".
    let r = &o.report;
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(r["errors_total"], 0);
    let d = &r["delivery"]["totals"];
    assert_eq!(d["received"], deliveries_due(&s, 10, 1, "lp"));
    assert_eq!(d["missing"], 0);
    assert!(d["expected"].as_u64().unwrap() >= 10 * 3);
    assert_eq!(r["delivery"]["delivered_to_all"], true);
}

#[test]
fn tcp_counts_match() {
    let s = start_server(Fault::None);
    let tcp = s.tcp.to_string();
    // 100 KB payloads span several reads of the 64 KiB scratch buffer: the per-connection
    // tail is kept and joined. Round-robin publishing with --publish-rate over 2 channels.
    let o = bench(&[
        &url(&s, "t"),
        "--conns",
        "10",
        "--channels",
        "2",
        "--proto",
        "tcp",
        "--tcp",
        &tcp,
        "--payload-size",
        "100000",
        "--publish-rate",
        "8",
        "--hold",
        "2s",
        "--drain",
        "600ms",
    ]);
    check_all_delivered(&o, &s, 10, 2, "t");
    assert_eq!(o.report["plan"]["payload_size"], 100000);
}

#[test]
fn publishing_during_the_ramp_counts_only_what_each_subscriber_could_get() {
    let s = start_server(Fault::None);
    let o = bench(&[
        &url(&s, "ramp"),
        "--conns",
        "20",
        "--rate",
        "15",
        "--publish-from-start",
        "--publish-every",
        "100ms",
        "--hold",
        "1s",
        "--drain",
        "300ms",
    ]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    let d = &o.report["delivery"]["totals"];
    let published = o.report["publishing"]["published"].as_u64().unwrap();
    let expected = d["expected"].as_u64().unwrap();
    // Late joiners missed early messages on purpose: fewer due than 20 x published, none lost.
    assert!(published > 12, "published {published}");
    assert!(expected < 20 * published && expected > 20 * 4, "{d}");
    assert_eq!(d["missing"], 0);
    assert_eq!(d["received_in_window"], d["expected"]);
    assert_eq!(o.report["delivery"]["delivered_to_all"], true);
}

#[test]
fn dropped_message_is_reported_missing() {
    let s = start_server(Fault::Drop(2));
    let o = bench(&args(
        &[&url(&s, "d"), "--conns", "8", "--proto", "sse"],
        RUN,
    ));
    let d = &o.report["delivery"]["totals"];
    assert_eq!(o.code, 1);
    assert_eq!(d["missing"], 8, "{d}");
    assert_eq!(d["seq_jumps"], 8);
    assert_eq!(o.report["delivery"]["delivered_to_all"], false);
    assert!(o.stdout.contains("delivered to all: NO"));
}

#[test]
fn repeated_message_is_reported_duplicate() {
    let s = start_server(Fault::Repeat(3));
    let o = bench(&args(
        &[&url(&s, "r"), "--conns", "8", "--proto", "sse"],
        RUN,
    ));
    let d = &o.report["delivery"]["totals"];
    assert_eq!(o.code, 1);
    assert_eq!(d["duplicates"], 8, "{d}");
    assert_eq!(d["missing"], 0);
    assert_eq!(o.report["delivery"]["delivered_to_all"], false);
}

#[test]
fn refused_and_unavailable_source_are_named() {
    // A loopback port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = format!("http://127.0.0.1:{port}/sub/x");
    let o = bench(&[&target, "--conns", "20", "--proto", "sse"]);
    assert_eq!(o.code, 1);
    assert_eq!(o.report["errors"]["ECONNREFUSED"], 20);
    assert!(o.elapsed < Duration::from_secs(10));
    // 192.0.2.1 (TEST-NET-1) is not on this host: bind() fails, nothing is sent.
    let o = bench(&[
        &target,
        "--conns",
        "5",
        "--proto",
        "connect",
        "--source",
        "192.0.2.1",
    ]);
    assert_eq!(o.report["errors"]["EADDRNOTAVAIL"], 5);
    assert_eq!(o.report["result"]["connected"], 0);
}

#[test]
fn run_stops_at_its_bound() {
    // The server accepts but never answers: only --duration ends the run.
    let s = start_server(Fault::Silent);
    let o = bench(&[
        &url(&s, "q"),
        "--conns",
        "5",
        "--connect-timeout",
        "60s",
        "--duration",
        "2s",
    ]);
    assert_eq!(o.report["result"]["stop_reason"], "--duration reached");
    assert!(o.elapsed < Duration::from_secs(8), "took {:?}", o.elapsed);
    assert_eq!(o.code, 1);
    // And a subscribe timeout is reported as such.
    let o = bench(&[&url(&s, "q"), "--conns", "3", "--connect-timeout", "500ms"]);
    assert_eq!(o.report["errors"]["subscribe timeout"], 3);
}

#[test]
fn connect_proto_holds_plain_tcp() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let keep = Arc::new(Mutex::new(Vec::new()));
    let k = keep.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            k.lock().unwrap().push(s);
        }
    });
    let o = bench(&[
        &format!("tcp://{addr}"),
        "--conns",
        "50",
        "--proto",
        "connect",
        "--hold",
        "1s",
    ]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(o.report["result"]["peak_online"], 50);
    assert_eq!(o.report["result"]["online_at_end"], 50);
    assert!(o.report["memory"]["bench"]["pss_delta_bytes_per_connection"].is_number());
    // IP_LOCAL_PORT_RANGE goes on every socket exactly where the kernel has it.
    let has = o.report["environment"]["ip_local_port_range_sockopt"] == true;
    assert_eq!(o.report["plan"]["port_range_per_socket"].is_string(), has);
    assert!(o.elapsed < Duration::from_secs(10));
}

#[test]
fn reconnect_storm_is_bounded_and_counted() {
    let s = start_server(Fault::CloseAfter(300));
    let o = bench(&[
        &url(&s, "rc"),
        "--conns",
        "10",
        "--reconnect",
        "--reconnect-min",
        "50ms",
        "--reconnect-max",
        "200ms",
        "--hold",
        "2s",
    ]);
    let r = &o.report;
    assert_eq!(r["result"]["stop_reason"], "hold complete");
    assert!(
        r["result"]["attempts"].as_u64().unwrap() > 20,
        "{}",
        r["result"]
    );
    assert!(r["errors"]["EOF (server closed)"].as_u64().unwrap() > 10);
    assert!(r["result"]["subscribed"].as_u64().unwrap() > 20);
    assert!(o.elapsed < Duration::from_secs(8));
    assert_eq!(o.code, 1);
}

#[test]
fn reconnecting_to_a_closed_port_still_ends_the_ramp_and_the_run() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = bench(&[
        &format!("http://127.0.0.1:{port}/sub/x"),
        "--conns",
        "10",
        "--reconnect",
        "--reconnect-min",
        "20ms",
        "--reconnect-max",
        "100ms",
        "--hold",
        "1s",
        "--duration",
        "20s",
    ]);
    assert_eq!(o.report["result"]["stop_reason"], "hold complete");
    assert!(o.report["errors"]["ECONNREFUSED"].as_u64().unwrap() > 20);
    assert!(o.elapsed < Duration::from_secs(6), "took {:?}", o.elapsed);
    assert_eq!(o.code, 1);
}

#[test]
fn sigint_stops_the_run_with_a_report() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let dir = std::env::temp_dir().join(format!("c1m-bench-int-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("r.json");
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .args([
            "bench",
            &format!("tcp://{addr}"),
            "--proto",
            "connect",
            "--conns",
            "20",
        ])
        .args(["--hold", "60s", "--report"])
        .arg(&report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(r["result"]["stop_reason"], "interrupted (SIGINT/SIGTERM)");
    assert_eq!(r["result"]["peak_online"], 20);
    let _ = std::fs::remove_dir_all(&dir);
    drop(l);
}

#[test]
fn source_addresses_are_spread_and_capped() {
    // Explicit range: 9 connections over 3 addresses, 3 each.
    let s = start_server(Fault::None);
    let o = bench(&[
        &url(&s, "src"),
        "--conns",
        "9",
        "--source",
        "127.0.0.5-127.0.0.7",
        "--hold",
        "1s",
    ]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    let peers = s.hub.0.lock().unwrap().peers.clone();
    let mut got: Vec<(String, u64)> = peers.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("127.0.0.5".into(), 3),
            ("127.0.0.6".into(), 3),
            ("127.0.0.7".into(), 3)
        ]
    );
    // Automatic loopback sources: at most --per-source connections per address.
    let s = start_server(Fault::None);
    let o = bench(&[
        &url(&s, "auto"),
        "--conns",
        "10",
        "--per-source",
        "4",
        "--hold",
        "1s",
    ]);
    assert_eq!(o.code, 0, "{}", o.stdout);
    assert_eq!(o.report["plan"]["source_addresses"], 3);
    let peers = s.hub.0.lock().unwrap().peers.clone();
    assert_eq!(peers.len(), 3);
    assert!(peers.values().all(|n| *n <= 4));
    assert!(peers
        .keys()
        .all(|ip| ip.to_string().starts_with("127.0.0.")));
    // Too few addresses for the cap is refused before anything is sent.
    let out = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .args([
            "bench",
            &url(&s, "x"),
            "--conns",
            "10",
            "--per-source",
            "4",
            "--source",
            "127.0.0.9",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--source"));
}

fn args<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<&'a str> {
    let mut v = a.to_vec();
    v.extend_from_slice(b);
    v
}

/// Context switches of every thread of `pid` so far (each epoll wake-up of a sleeping worker
/// is one).
fn context_switches(pid: u32) -> u64 {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            if line.contains("ctxt_switches:") {
                total += line
                    .split_whitespace()
                    .last()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
    }
    total
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The field after the parenthesised command name: state, then the parent's pid.
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1));
        if ppid == Some(pid.to_string().as_str()) {
            found.push(child);
        }
    }
    found
}

#[test]
fn a_ramp_held_at_its_in_flight_cap_sleeps_until_an_answer_comes() {
    // The server never answers, so both attempts in flight wait and nothing else is due
    // for a minute: the connection-holding worker must sleep, not poll the clock (a 1M ramp
    // runs 51 of them on two cores).
    let s = start_server(Fault::Silent);
    let mut run = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .arg("bench")
        .args([
            &url(&s, "q"),
            "--conns",
            "10",
            "--max-inflight",
            "2",
            "--rate",
            "0",
        ])
        .args(["--connect-timeout", "60s", "--duration", "5s", "-q"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let worker = loop {
        if let Some(&w) = children_of(run.id()).first() {
            break w;
        }
        assert!(Instant::now() < deadline, "bench started no worker process");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(1000));
    let before = context_switches(worker);
    std::thread::sleep(Duration::from_millis(2000));
    let woke = context_switches(worker) - before;
    let status = run.wait().unwrap();
    assert_eq!(
        s.hub.0.lock().unwrap().subscribers,
        0,
        "the server answered nobody"
    );
    // A 1 ms poll is ~2,000 wake-ups in these 2 s; the report tick and the coordinator's
    // lines are a few dozen.
    assert!(woke < 200, "the waiting worker woke {woke} times in 2 s");
    assert_eq!(status.code(), Some(1), "an unfinished ramp is a finding");
}
