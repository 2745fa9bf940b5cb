//! `c1m serve` under systemd's `Type=notify`: the test owns a Unix datagram socket, passes it as
//! `$NOTIFY_SOCKET` (with `WATCHDOG_USEC`, as systemd does for `WatchdogSec=`), and reads what
//! the master says: READY=1 once every worker is listening, then WATCHDOG=1 pings at half the
//! watchdog period, then STOPPING=1 when SIGTERM starts the drain.

use crate::common;

use common::{c1m, Server};
use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Removes the socket file even when an assertion fails.
struct SocketDir(std::path::PathBuf);

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn recv(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the timeout");
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

#[test]
fn ready_after_workers_listen_then_watchdog_then_stopping_on_sigterm() {
    let dir = SocketDir(std::env::temp_dir().join(format!("c1m-notify-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();

    let mut cmd = c1m();
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--workers",
        "3",
        "--grace",
        "1s",
    ])
    .env("NOTIFY_SOCKET", &path)
    .env("WATCHDOG_USEC", "400000") // WatchdogSec=400ms: a ping every 200 ms
    .stdin(Stdio::null());
    let mut server = Server::spawn(cmd);

    let ready = recv(&socket);
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(ready.contains("STATUS=listening on"), "{ready:?}");
    // Every worker has reported from its loop (which runs only once its listeners are bound):
    // /healthz is 200 only when all of them answer.
    let health = ureq::get(&server.url("/healthz")).call().unwrap();
    assert_eq!(health.status(), 200);
    // Three subscriber workers and the control worker.
    assert_eq!(server.status()["workers"].as_array().unwrap().len(), 4);

    // Two pings, about 200 ms apart (WATCHDOG_USEC / 2); no further READY.
    let first = Instant::now();
    assert_eq!(recv(&socket), "WATCHDOG=1");
    assert_eq!(recv(&socket), "WATCHDOG=1");
    let gap = first.elapsed();
    assert!(
        gap >= Duration::from_millis(100) && gap < Duration::from_secs(2),
        "pings {gap:?} apart"
    );

    server.signal(libc::SIGTERM);
    // Pings may still be in flight; STOPPING=1 must follow promptly.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let msg = recv(&socket);
        if msg.lines().any(|l| l == "STOPPING=1") {
            break;
        }
        assert_eq!(msg, "WATCHDOG=1", "unexpected notification");
        assert!(Instant::now() < deadline, "no STOPPING=1 after SIGTERM");
    }
    let status = server.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

#[test]
fn workers_do_not_inherit_notify_socket() {
    // The master strips the protocol's variables from its workers' environment: only the main
    // process may speak for the service.
    let dir = SocketDir(std::env::temp_dir().join(format!("c1m-notify2-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let path = dir.0.join("notify.sock");
    let _socket = UnixDatagram::bind(&path).unwrap();
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "2"])
        .env("NOTIFY_SOCKET", &path)
        .stdin(Stdio::null());
    let server = Server::spawn(cmd);
    for pid in server.worker_pids() {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let has = environ
            .split(|&b| b == 0)
            .any(|kv| kv.starts_with(b"NOTIFY_SOCKET="));
        assert!(!has, "worker {pid} inherited NOTIFY_SOCKET");
    }
}

#[test]
fn abstract_notify_socket_gets_ready() {
    // systemd may hand out an abstract socket (`@name`), e.g. in containers.
    use std::os::linux::net::SocketAddrExt;
    let name = format!("c1m-notify-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .env("NOTIFY_SOCKET", format!("@{name}"))
        .env_remove("WATCHDOG_USEC")
        .stdin(Stdio::null());
    let _server = Server::spawn(cmd);
    let ready = recv(&socket);
    assert!(ready.starts_with("READY=1\n"), "{ready:?}");
    // No watchdog configured: no pings follow.
    socket
        .set_read_timeout(Some(Duration::from_millis(600)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(socket.recv(&mut buf).is_err(), "unexpected notification");
}
