//! A real browser across origins with tokens: headless Chromium loads a page from
//! a second loopback origin (`http://127.0.0.2:PORT`, served by this test), which subscribes
//! to the c1m server on `http://127.0.0.1:PORT2` over SSE (`?token=`) and WebSocket
//! (subprotocol `c1m.token.JWT`), CORS and the Origin check sharing `--cors-origins`. It gets a
//! publish on both; an expired token is refused on both (and fetch reads the 401). The page
//! publishes what it saw to a report channel this test reads.
//!
//! The same over TLS (`https://`, `wss://`) with a test CA that Chromium trusts the way a
//! user's browser trusts a real one: imported into the NSS database of the browser's own HOME
//! (certutil, from libnss3-tools), not by switching certificate checks off.

use crate::auth;
use crate::browser;
use crate::common;
use crate::tls_support;

use auth::{now, Keys};
use browser::Browser;
use common::{Server, Sse};
use serde_json::json;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tls_support::{TestPki, TlsServer};

/// Serves tests/auth/page.html for any GET, from its own loopback address; stops on drop.
struct PageServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PageServer {
    fn start() -> PageServer {
        let listener = TcpListener::bind("127.0.0.2:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let page = include_str!("auth/page.html");
        let thread = std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(60);
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf);
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                            page.len()
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        PageServer {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn headless_chromium_on_another_origin_subscribes_with_a_token() {
    let keys = Keys::new("browser");
    let page = PageServer::start();
    let server = Server::start(&[
        "--workers",
        "2",
        "--auth",
        "required",
        "--jwt-key",
        &keys.secret(),
        "--cors-origins",
        &page.origin(),
    ]);
    let token = keys.hs256(&json!({"exp": now() + 120, "channels": ["browser", "report"]}));
    let expired = keys.hs256(&json!({"exp": now() - 10, "channels": ["browser"]}));
    let mut report = Sse::connect(server.http, &format!("/sub/report?token={token}"), "");
    let url = format!(
        "{}/page.html?server=http://{}&token={token}&expired={expired}",
        page.origin(),
        server.http
    );
    let _browser = Browser::open(&url, "auth-plain");
    // The page's two good subscriptions (the report stream is this test's own SSE), and its
    // three refusals (SSE, WebSocket, fetch: 401 each).
    server.wait_status(|s| {
        s["connections"]["websocket"] == 1
            && s["connections"]["sse"] == 2
            && s["refused"]["unauthorized"] == 3
    });
    server.publish("browser", b"hello browser");
    let event = report.next();
    let seen: serde_json::Value = serde_json::from_str(&event.data).unwrap();
    assert_eq!(
        seen,
        json!({
            "sse": "hello browser",
            "ws": "hello browser",
            "sse_expired": "closed",
            "ws_expired": "refused 1006",
            "fetch_expired": 401,
        })
    );
}

/// The same page against `https://` and `wss://`: the server's certificate is issued by a test
/// CA that only this browser's NSS database trusts.
#[test]
fn headless_chromium_subscribes_over_tls_with_a_test_ca() {
    let keys = Keys::new("browser-tls");
    let pki = TestPki::new("browser");
    let leaf = pki.leaf("c1m-browser");
    let page = PageServer::start();
    let server = TlsServer::start(
        &leaf,
        &pki,
        &[
            "--workers",
            "2",
            "--auth",
            "required",
            "--jwt-key",
            &keys.secret(),
            "--cors-origins",
            &page.origin(),
        ],
    );
    let token = keys.hs256(&json!({"exp": now() + 120, "channels": ["browser", "report"]}));
    let expired = keys.hs256(&json!({"exp": now() - 10, "channels": ["browser"]}));
    // This test's own subscription to the page's report, over TLS too.
    let mut report = pki.connect(server.http);
    write!(
        report,
        "GET /sub/report?token={token} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
    )
    .unwrap();
    report.flush().unwrap();
    tls_support::read_until(&mut report, "\r\n\r\n");
    let url = format!(
        "{}/page.html?server=https://{}&token={token}&expired={expired}",
        page.origin(),
        server.http
    );
    let _browser = Browser::open_with(&url, "auth-tls", &[], Some(&pki.ca_pem));
    server.wait_status(&pki, |s| {
        s["connections"]["websocket"] == 1
            && s["connections"]["sse"] == 2
            && s["refused"]["unauthorized"] == 3
            && s["tls"]["handshakes"].as_u64() >= Some(5)
    });
    server.publish(&pki, "browser", b"hello over tls");
    let got = tls_support::read_until(&mut report, "}\n");
    let data = got
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .next_back()
        .unwrap_or_else(|| panic!("no data line in {got:?}"));
    let seen: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(
        seen,
        json!({
            "sse": "hello over tls",
            "ws": "hello over tls",
            "sse_expired": "closed",
            "ws_expired": "refused 1006",
            "fetch_expired": 401,
        })
    );
}
