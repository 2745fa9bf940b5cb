//! Request smuggling behind a real front proxy. The test starts HAProxy (the
//! Debian package) on loopback in front of the real `c1m serve`, with an ACL that denies
//! `/pub/` from outside, and sends the classic desync attacks through it, each hiding a
//! `POST /pub/smuggled`. A subscriber on `smuggled` must receive nothing and
//! `messages.published` must not move: no body of a request HAProxy let through may be read by
//! c1m as a request HAProxy never saw.
//!
//! HAProxy must be installed (scripts/install-test-deps.sh installs it). Without it the test is
//! skipped with a loud message, except under CI (`CI` set), where a missing HAProxy fails it.

use crate::common;

use common::{Server, Sse};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The publish every attack tries to slip past the proxy's ACL.
const SMUGGLED: &str = "POST /pub/smuggled HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nbad";

/// A running HAProxy, stopped (killed and reaped) when dropped, also on panic.
struct Haproxy {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The haproxy binary, or None when it is not installed (then the caller skips, unless CI).
fn haproxy_binary() -> Option<&'static str> {
    [
        "/usr/sbin/haproxy",
        "/usr/bin/haproxy",
        "/usr/local/sbin/haproxy",
    ]
    .into_iter()
    .find(|p| std::path::Path::new(p).exists())
}

/// A loopback port that was free a moment ago (HAProxy cannot report a port 0 bind back).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_haproxy(binary: &str, backend: SocketAddr) -> Haproxy {
    let dir = std::env::temp_dir().join(format!("c1m-haproxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = TempDir(dir);
    let port = free_port();
    // http-reuse always: requests of different clients share backend connections, the setup in
    // which a desync hurts most (a smuggled prefix would be glued to someone else's request).
    let config = format!(
        "global\n  maxconn 200\n\
         defaults\n  mode http\n  timeout connect 2s\n  timeout client 5s\n  timeout server 5s\n\
         \x20 http-reuse always\n\
         frontend edge\n  bind 127.0.0.1:{port}\n\
         \x20 acl internal path_beg /pub/\n  http-request deny deny_status 403 if internal\n\
         \x20 default_backend c1m\n\
         backend c1m\n  server s1 {backend}\n"
    );
    let path = dir.0.join("haproxy.cfg");
    std::fs::write(&path, config).unwrap();
    let check = Command::new(binary)
        .args(["-c", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "haproxy rejects the test config: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let child = Command::new(binary)
        .args(["-db", "-f"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proxy = Haproxy {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(proxy.addr).is_err() {
        assert!(Instant::now() < deadline, "haproxy did not listen in 5 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    proxy
}

/// Sends `request` and returns what comes back until the peer closes, or goes quiet for 500 ms
/// after answering (HAProxy keeps the client side alive even when c1m closed its side), or 5 s.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(request).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while Instant::now() < deadline {
        let quiet = if out.is_empty() { 5000 } else { 500 };
        s.set_read_timeout(Some(Duration::from_millis(quiet)))
            .unwrap();
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
        }
    }
    String::from_utf8_lossy(&out).to_string()
}

fn first_status(answer: &str) -> u16 {
    common::status_code(answer)
}

/// The classic attacks, each hiding SMUGGLED where a desynced server would read a request.
fn attacks() -> Vec<(&'static str, String)> {
    let host = "Host: t\r\n";
    let chunked_smuggle = format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len());
    vec![
        (
            "CL.0: GET with a body",
            format!(
                "GET /healthz HTTP/1.1\r\n{host}Content-Length: {}\r\n\r\n{SMUGGLED}",
                SMUGGLED.len()
            ),
        ),
        (
            "CL.0: GET /status with a body, then a follow-up",
            format!(
                "GET /status HTTP/1.1\r\n{host}Content-Length: {}\r\n\r\n{SMUGGLED}GET /healthz HTTP/1.1\r\n{host}\r\n",
                SMUGGLED.len()
            ),
        ),
        (
            "CL.CL",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Content-Length: 0\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
                SMUGGLED.len()
            ),
        ),
        (
            "TE.CL",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{chunked_smuggle}"
            ),
        ),
        (
            "CL.TE",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\nContent-Length: {}\r\n\r\n0\r\n\r\n{SMUGGLED}",
                SMUGGLED.len() + 5
            ),
        ),
        (
            "TE: xchunked",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding: xchunked\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
                SMUGGLED.len()
            ),
        ),
        (
            "TE: leading space",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding:  chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
            ),
        ),
        (
            "TE: tab",
            format!("POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n{SMUGGLED}"),
        ),
        (
            "TE: name with a space before the colon",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding : chunked\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
                SMUGGLED.len()
            ),
        ),
        (
            "TE: duplicate",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n{chunked_smuggle}"
            ),
        ),
        (
            "TE: chunked on a GET",
            format!("GET /healthz HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n{chunked_smuggle}"),
        ),
        (
            "chunk size with a sign",
            format!(
                "POST /healthz HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n+0\r\n\r\n{SMUGGLED}"
            ),
        ),
    ]
}

#[test]
fn smuggling_through_haproxy_never_publishes() {
    let Some(binary) = haproxy_binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "haproxy is not installed but CI is set: scripts/install-test-deps.sh must install it"
        );
        eprintln!(
            "\n!!!!! SKIPPED smuggling_through_haproxy_never_publishes: haproxy is not \
             installed (apt-get install haproxy) !!!!!\n"
        );
        return;
    };
    let server = Server::start(&["--workers", "1", "--head-timeout", "2s"]);
    let proxy = start_haproxy(binary, server.http);
    let mut watcher = Sse::connect(server.http, "/sub/smuggled", "");

    // The proxy works and its ACL holds for a plain publish.
    assert_eq!(
        first_status(&exchange(
            proxy.addr,
            b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )),
        200
    );
    let denied = exchange(proxy.addr, SMUGGLED.as_bytes());
    assert_eq!(
        first_status(&denied),
        403,
        "the ACL must deny /pub/: {denied}"
    );

    let mut seen = Vec::new();
    for (what, attack) in attacks() {
        let answer = exchange(proxy.addr, attack.as_bytes());
        seen.push(format!("{what}: {}", first_status(&answer)));
    }
    // A marker published now must be the first event the watcher sees, and the only publish.
    let marker = server.publish("smuggled", b"marker");
    let ev = watcher.next();
    assert_eq!(
        (ev.id, ev.data.as_str()),
        (Some(marker.to_string()), "marker"),
        "a smuggled publish got through; statuses through haproxy: {seen:?}"
    );
    let s = server.status();
    assert_eq!(s["messages"]["published"], 1, "{seen:?} {s}");
    eprintln!("statuses through haproxy: {seen:?}");

    // c1m itself refuses every one of them when reached directly, and still publishes nothing.
    for (what, attack) in attacks() {
        let straight = exchange(server.http, attack.as_bytes());
        assert!(
            matches!(first_status(&straight), 400 | 501),
            "{what}: c1m answered directly: {straight}"
        );
    }
    let after = server.publish("smuggled", b"after");
    assert_eq!(watcher.next().id, Some(after.to_string()));
}
