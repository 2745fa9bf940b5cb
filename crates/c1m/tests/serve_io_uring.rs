//! Fan-out through io_uring (`--io uring`): every subscriber of every protocol gets
//! every message once and in order, including readers whose socket fills (short send / EAGAIN
//! → out-queue → EPOLLOUT) and a slow consumer over --max-unsent (dropped and counted); /status
//! and /metrics say which path each worker uses; a kernel that refuses io_uring makes `auto`
//! fall back to epoll with the reason and explicit `uring` stop with an error.
//!
//! The refusal is the kernel's own: the test writes `kernel.io_uring_disabled = 2` (Linux ≥
//! 6.6: io_uring_setup then fails with EPERM for everyone) and restores the old value on drop,
//! so the server's real probe meets a real refusal (no test-only switch in the server). The
//! other tests of this file hold a read lock on [`KERNEL_SWITCH`] so none starts a server while
//! io_uring is off.

use crate::common;

use common::{c1m, Server, Sse};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::RwLock;
use std::time::{Duration, Instant};

static KERNEL_SWITCH: RwLock<()> = RwLock::new(());
const DISABLED: &str = "/proc/sys/kernel/io_uring_disabled";

fn io_of(s: &serde_json::Value) -> &serde_json::Value {
    &s["io"]
}

/// Sends through io_uring summed over the workers.
fn uring_sends(s: &serde_json::Value) -> u64 {
    io_of(s)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["uring_sends"].as_u64().unwrap_or(0))
        .sum()
}

fn uring_queued(s: &serde_json::Value) -> u64 {
    io_of(s)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["uring_queued"].as_u64().unwrap_or(0))
        .sum()
}

/// `MSG ch id len\n<payload>\n` frames of the raw TCP protocol; returns (id, payload).
fn tcp_msg(r: &mut BufReader<TcpStream>) -> (u64, Vec<u8>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f[0], "MSG", "{line:?}");
    let len: usize = f[3].parse().unwrap();
    let mut body = vec![0u8; len + 1];
    r.read_exact(&mut body).unwrap();
    body.pop();
    (f[2].parse().unwrap(), body)
}

fn ws_data(ws: &mut tungstenite::WebSocket<TcpStream>) -> Vec<u8> {
    loop {
        match ws.read().unwrap() {
            tungstenite::Message::Text(t) => return t.as_bytes().to_vec(),
            tungstenite::Message::Binary(b) => return b.to_vec(),
            tungstenite::Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    }
}

#[test]
fn every_protocol_gets_every_message_once_and_in_order() {
    let _shared = KERNEL_SWITCH.read().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&[
        "--io",
        "uring",
        "--workers",
        "2",
        "--tcp-listen",
        "127.0.0.1:0",
    ]);
    // Each worker reports its path with its first figures (within 250 ms of its start): the
    // two subscriber workers and the control worker.
    let s = server.wait_status(|s| io_of(s)["uring_workers"] == 3);
    assert_eq!(io_of(&s)["mode"], "uring", "{s}");
    assert_eq!(io_of(&s)["epoll_workers"], 0, "{s}");
    // Several of each, so both workers (SO_REUSEPORT) hold some.
    let mut sses: Vec<Sse> = (0..6)
        .map(|_| Sse::connect(server.http, "/sub/all", ""))
        .collect();
    let mut tcps: Vec<BufReader<TcpStream>> = (0..6)
        .map(|_| {
            let mut t = TcpStream::connect(server.tcp.unwrap()).unwrap();
            t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            t.write_all(b"SUB all\n").unwrap();
            let mut r = BufReader::new(t);
            let mut ok = String::new();
            r.read_line(&mut ok).unwrap();
            assert!(ok.starts_with("OK"), "{ok:?}");
            r
        })
        .collect();
    let mut wss: Vec<_> = (0..6)
        .map(|_| {
            let t = TcpStream::connect(server.http).unwrap();
            t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let (ws, resp) =
                tungstenite::client(format!("ws://{}/sub/all", server.http), t).unwrap();
            assert_eq!(resp.status(), 101);
            ws
        })
        .collect();
    server.wait_status(|s| {
        s["connections"]["sse"] == 6
            && s["connections"]["tcp"] == 6
            && s["connections"]["websocket"] == 6
    });
    // Long-pollers chase the same messages from id 0 (each answer carries what it missed).
    let url = server.url("/sub/all");
    let pollers: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut last = 0u64;
                let mut got = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(20);
                while got.len() < 40 && Instant::now() < deadline {
                    let r = ureq::get(&format!("{url}?last_id={last}")).call().unwrap();
                    if r.status() != 200 {
                        continue;
                    }
                    let v: serde_json::Value =
                        serde_json::from_str(&r.into_string().unwrap()).unwrap();
                    for m in v["messages"].as_array().unwrap() {
                        got.push(m["data"].as_str().unwrap().to_string());
                    }
                    last = v["last_id"].as_u64().unwrap();
                }
                got
            })
        })
        .collect();
    let payloads: Vec<String> = (0..40).map(|i| format!("m{i:03}")).collect();
    let mut ids = Vec::new();
    for p in &payloads {
        ids.push(server.publish("all", p.as_bytes()));
    }
    for sse in &mut sses {
        for (id, p) in ids.iter().zip(&payloads) {
            let ev = sse.next();
            assert_eq!(
                (ev.id.as_deref(), ev.data.as_str()),
                (Some(id.to_string().as_str()), p.as_str())
            );
        }
    }
    for tcp in &mut tcps {
        for (id, p) in ids.iter().zip(&payloads) {
            assert_eq!(tcp_msg(tcp), (*id, p.as_bytes().to_vec()));
        }
    }
    for ws in &mut wss {
        for (id, p) in ids.iter().zip(&payloads) {
            let v: serde_json::Value = serde_json::from_slice(&ws_data(ws)).unwrap();
            assert_eq!(
                (v["id"].as_u64(), v["data"].as_str()),
                (Some(*id), Some(p.as_str()))
            );
        }
    }
    for poller in pollers {
        assert_eq!(poller.join().unwrap(), payloads);
    }
    // Nothing more than once: one more message is the next thing every stream reads.
    let last = server.publish("all", b"end");
    assert_eq!(sses[0].next().id, Some(last.to_string()));
    assert_eq!(tcp_msg(&mut tcps[0]).0, last);
    let v: serde_json::Value = serde_json::from_slice(&ws_data(&mut wss[0])).unwrap();
    assert_eq!(v["id"].as_u64(), Some(last));
    // The fan-outs went through io_uring: 18 streams × 41 messages.
    let s = server.wait_status(|s| uring_sends(s) >= 18 * 41);
    assert_eq!(s["refused"]["slow_consumer"], 0, "{s}");
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_worker_io_uring{worker=\"0\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("c1m_worker_io_uring{worker=\"1\"} 1"),
        "{metrics}"
    );
}

/// An SSE subscriber with a 4 KiB receive buffer that reads nothing until told.
fn tiny_window_sse(server: &Server, path: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.http.into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    s
}

#[test]
fn readers_whose_socket_fills_get_everything_in_order_through_the_queue() {
    let _shared = KERNEL_SWITCH.read().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&[
        "--io",
        "uring",
        "--workers",
        "1",
        "--max-unsent",
        "67108864",
    ]);
    let mut slow = tiny_window_sse(&server, "/sub/fill");
    let mut fast = Sse::connect(server.http, "/sub/fill", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);
    // 128 × 40 KiB = 5 MiB: more than the slow socket's send buffer can grow to (tcp_wmem
    // max, 4 MiB by default), so its sends come back short or EAGAIN and the rest waits in its
    // queue for EPOLLOUT.
    const N: usize = 128;
    let payload = |i: usize| format!("{i:04}-{}", "x".repeat(40 * 1024));
    let reader = std::thread::spawn(move || {
        let got = (0..N).map(|_| fast.next().data).collect::<Vec<_>>();
        (got, fast)
    });
    let ids: Vec<u64> = (0..N)
        .map(|i| server.publish("fill", payload(i).as_bytes()))
        .collect();
    let (got, _fast) = reader.join().unwrap();
    assert_eq!(got, (0..N).map(payload).collect::<Vec<_>>());
    let s = server.wait_status(|s| uring_queued(s) >= 1);
    assert_eq!(
        s["connections"]["sse"], 2,
        "the slow reader is still held: {s}"
    );
    // Now the slow reader drains: every message, once, in order.
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 65536];
    let want = ids
        .iter()
        .map(|id| format!("id: {id}\n"))
        .collect::<Vec<_>>();
    let deadline = Instant::now() + Duration::from_secs(15);
    let last_event = format!("{}\n\n", payload(N - 1));
    while !bytes.ends_with(last_event.as_bytes()) {
        assert!(
            Instant::now() < deadline,
            "slow reader never got the last message"
        );
        let n = slow.read(&mut chunk).unwrap();
        assert!(n > 0, "server closed the slow reader");
        bytes.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8(bytes).unwrap();
    let seen: Vec<&str> = text.lines().filter(|l| l.starts_with("id: ")).collect();
    let want: Vec<&str> = want.iter().map(|w| w.trim_end()).collect();
    assert_eq!(seen, want);
    for i in 0..N {
        assert_eq!(text.matches(&payload(i)).count(), 1, "message {i}");
    }
    assert_eq!(server.status()["refused"]["slow_consumer"], 0);
}

#[test]
fn slow_consumer_over_max_unsent_is_dropped_and_counted() {
    let _shared = KERNEL_SWITCH.read().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&["--io", "uring", "--workers", "1", "--max-unsent", "65536"]);
    let _never_reads = tiny_window_sse(&server, "/sub/flood");
    let mut fast = Sse::connect(server.http, "/sub/flood", "");
    server.wait_status(|s| s["connections"]["sse"] == 2);
    let payload = vec![b'p'; 16 * 1024];
    let reader =
        std::thread::spawn(move || (0..200).map(|_| fast.next().data.len()).sum::<usize>());
    for _ in 0..200 {
        server.publish("flood", &payload);
    }
    assert_eq!(reader.join().unwrap(), 200 * payload.len());
    let s = server.wait_status(|s| s["refused"]["slow_consumer"] == 1);
    assert!(s["messages"]["dropped"].as_u64().unwrap() >= 1, "{s}");
    assert!(
        uring_queued(&s) >= 1,
        "the slow reader's sends came back short: {s}"
    );
    assert!(uring_sends(&s) >= 200, "{s}");
}

/// Writes `kernel.io_uring_disabled` and puts the old value back on drop (also on panic).
struct KernelSwitch(String);

impl KernelSwitch {
    fn set(value: &str) -> KernelSwitch {
        let old = std::fs::read_to_string(DISABLED)
            .unwrap_or_else(|e| panic!("{DISABLED}: {e} (kernel < 6.6 has no io_uring switch)"));
        std::fs::write(DISABLED, value)
            .unwrap_or_else(|e| panic!("writing {DISABLED}: {e} (this test needs root)"));
        KernelSwitch(old.trim().to_string())
    }
}

impl Drop for KernelSwitch {
    fn drop(&mut self) {
        let _ = std::fs::write(DISABLED, &self.0);
    }
}

#[test]
fn a_kernel_that_refuses_io_uring_means_epoll_under_auto_and_an_error_under_uring() {
    let _exclusive = KERNEL_SWITCH.write().unwrap_or_else(|e| e.into_inner());
    let (server, logs) = {
        let _off = KernelSwitch::set("2");
        // Explicit uring: the server does not start, and says why.
        let out = c1m()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--io",
                "uring",
                "--workers",
                "1",
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--io uring: the kernel refused io_uring"),
            "{err}"
        );
        assert!(err.contains("Operation not permitted"), "{err}");
        // auto: it starts on epoll and logs the reason. The workers make their rings while
        // io_uring is still off: wait until both have reported.
        let mut cmd = c1m();
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--io",
            "auto",
            "--workers",
            "2",
        ]);
        let (server, logs) = Server::spawn_capturing_stderr(cmd);
        // Two subscriber workers and the control worker.
        server.wait_status(|s| io_of(s)["epoll_workers"] == 3);
        (server, logs)
    };
    let s = server.status();
    assert_eq!(io_of(&s)["mode"], "auto", "{s}");
    assert_eq!(io_of(&s)["uring_workers"], 0, "{s}");
    for w in io_of(&s)["workers"].as_array().unwrap() {
        assert_eq!(w["path"], "epoll", "{s}");
        let why = w["fallback_reason"].as_str().unwrap_or_default();
        assert!(why.contains("Operation not permitted"), "{s}");
    }
    assert!(
        logs.wait_for("io_uring refused", Duration::from_secs(5))
            .is_some(),
        "{:?}",
        logs.snapshot()
    );
    // And it serves, on write().
    let mut sse = Sse::connect(server.http, "/sub/back", "");
    server.wait_status(|s| s["connections"]["sse"] == 1);
    let id = server.publish("back", b"on epoll");
    assert_eq!(sse.next().id, Some(id.to_string()));
    assert_eq!(uring_sends(&server.status()), 0);
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_worker_io_uring{worker=\"0\"} 0"),
        "{metrics}"
    );
}

#[test]
fn io_epoll_never_uses_io_uring() {
    let _shared = KERNEL_SWITCH.read().unwrap_or_else(|e| e.into_inner());
    let server = Server::start(&["--io", "epoll", "--workers", "1"]);
    let mut sse = Sse::connect(server.http, "/sub/e", "");
    // The subscriber worker and the control worker.
    server.wait_status(|s| s["connections"]["sse"] == 1 && io_of(s)["epoll_workers"] == 2);
    let id = server.publish("e", b"x");
    assert_eq!(sse.next().id, Some(id.to_string()));
    let s = server.status();
    assert_eq!(io_of(&s)["epoll_workers"], 2, "{s}");
    assert!(io_of(&s)["workers"][0]["fallback_reason"].is_null(), "{s}");
    assert_eq!(uring_sends(&s), 0);
}
