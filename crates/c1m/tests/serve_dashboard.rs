//! `/dashboard`: headless Chromium (Debian package `chromium`, installed by
//! scripts/install-test-deps.sh) loads the page while the test keeps real load going
//! (SSE subscribers, a publish every 50 ms); the page's live figures, read back from the DOM
//! (over the DevTools protocol; the page mirrors each figure in a data-* attribute of <body>), must be
//! non-zero, the refusal counters and the 5-minute series must be drawn, and with a dozen workers
//! the worker table must stay in a bounded box so the latency histogram is above the fold of an
//! 860 px window; and a screenshot is taken (written to docs/dashboard.png with C1M_UPDATE_DOCS=1). Also: /dashboard/events is a plain
//! SSE stream of JSON snapshots, and with --admin-listen the public listener answers 404.

use crate::browser;
use crate::common;

use browser::Browser;
use common::{Server, Sse};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Stops the publishing thread even when an assertion fails.
struct StopFlag(Arc<AtomicBool>);

impl Drop for StopFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

type DevTools = tungstenite::WebSocket<std::net::TcpStream>;

/// Headless Chromium on `url`, driven over the DevTools protocol (its own WebSocket): a page
/// with a live EventSource never finishes loading, so `--dump-dom`/`--screenshot` would
/// capture it before the first snapshot; here the test waits until the page has drawn several.
fn open_browser(url: &str) -> (Browser, DevTools) {
    let browser = Browser::open_with(
        url,
        "dashboard",
        &["--hide-scrollbars", "--window-size=1280,860"],
        None,
    );
    let profile = browser.profile();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Chromium writes the port it chose to DevToolsActivePort; the page appears in /json/list.
    let ws_url = loop {
        assert!(
            Instant::now() < deadline,
            "chromium's DevTools never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
        let Ok(text) = std::fs::read_to_string(profile.join("DevToolsActivePort")) else {
            continue;
        };
        let Some(port) = text.lines().next() else {
            continue;
        };
        let Ok(list) = ureq::get(&format!("http://127.0.0.1:{port}/json/list")).call() else {
            continue;
        };
        let list: serde_json::Value = serde_json::from_str(&list.into_string().unwrap()).unwrap();
        let page = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page");
        if let Some(ws) = page.and_then(|p| p["webSocketDebuggerUrl"].as_str()) {
            break ws.to_string();
        }
    };
    let (socket, _) = tungstenite::connect(ws_url).expect("DevTools WebSocket");
    let config = *socket.get_config();
    let tungstenite::stream::MaybeTlsStream::Plain(stream) = socket.into_inner() else {
        unreachable!("DevTools is plain ws://");
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let ws = tungstenite::WebSocket::from_raw_socket(
        stream,
        tungstenite::protocol::Role::Client,
        Some(config),
    );
    (browser, ws)
}

/// One DevTools call; returns its `result`.
fn devtools(
    ws: &mut DevTools,
    id: u64,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    let call = serde_json::json!({"id": id, "method": method, "params": params});
    ws.send(tungstenite::Message::text(call.to_string()))
        .unwrap();
    for _ in 0..1000 {
        let msg = ws.read().expect("DevTools answer");
        let Ok(text) = msg.to_text() else { continue };
        let v: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
        if v["id"] == id {
            return v["result"].clone();
        }
    }
    panic!("no DevTools answer to {method}");
}

/// The page's geometry, as JSON: where the histogram's bars end, the window height, the worker
/// card's height and rows, and the points of the connections series.
const LAYOUT: &str = "JSON.stringify({\
    bars_bottom: document.getElementById('bars').getBoundingClientRect().bottom,\
    window_height: window.innerHeight,\
    workers_card_height: document.getElementById('workers').closest('.card')\
        .getBoundingClientRect().height,\
    worker_rows: document.querySelectorAll('#workers tr').length,\
    series_points: (document.querySelector('#series-connections polyline')\
        ?.getAttribute('points') || '').trim().split(/\\s+/).filter(Boolean).length,\
})";

#[test]
fn headless_chromium_shows_live_nonzero_figures() {
    // A dozen workers: their table alone would be taller than the bound the page keeps it in.
    let server = Server::start(&["--workers", "12"]);
    // Refusals for the page to show: three 404s.
    for _ in 0..3 {
        let status = match ureq::get(&server.url("/no-such-page")).call() {
            Err(ureq::Error::Status(code, _)) => code,
            other => panic!("expected 404, got {:?}", other.map(|r| r.status())),
        };
        assert_eq!(status, 404);
    }
    let mut subs: Vec<Sse> = (0..6)
        .map(|_| Sse::connect(server.http, "/sub/dash", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == 6);
    let stop = StopFlag(Arc::new(AtomicBool::new(false)));
    let flag = stop.0.clone();
    let url = server.url("/pub/dash");
    let publisher = std::thread::spawn(move || {
        let mut sent = 0u64;
        // Bounded: at most 30 s of publishing.
        while !flag.load(Ordering::Relaxed) && sent < 600 {
            if ureq::post(&url).send_bytes(b"tick").is_ok() {
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        sent
    });
    let (_browser, mut ws) = open_browser(&server.url("/dashboard"));
    // Wait (at most 15 s) until the page has drawn 3 snapshots, then read what it shows.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut id = 0;
    let expression = "JSON.stringify(document.body.dataset) + '|' + \
                      document.getElementById('state').textContent";
    let shown = loop {
        id += 1;
        let r = devtools(
            &mut ws,
            id,
            "Runtime.evaluate",
            serde_json::json!({"expression": expression, "returnByValue": true}),
        );
        let text = r["result"]["value"].as_str().unwrap_or("").to_string();
        let (data, state) = text.split_once('|').unwrap_or(("{}", ""));
        let data: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
        let snapshots: u64 = data["snapshots"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        if snapshots >= 3 {
            assert!(state.starts_with("live, updated"), "{state}");
            break data;
        }
        assert!(
            Instant::now() < deadline,
            "page never drew 3 snapshots: {text}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    // Where things are: the histogram (its bars) inside the 860 px window, the worker table's
    // box bounded however many workers there are.
    id += 1;
    let layout = devtools(
        &mut ws,
        id,
        "Runtime.evaluate",
        serde_json::json!({"expression": LAYOUT, "returnByValue": true}),
    );
    let layout: serde_json::Value =
        serde_json::from_str(layout["result"]["value"].as_str().unwrap_or("{}")).unwrap();
    let px = |k: &str| {
        layout[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} in {layout}"))
    };
    assert!(
        px("bars_bottom") <= px("window_height"),
        "the histogram is below the fold: {layout}"
    );
    assert!(
        px("workers_card_height") <= 260.0,
        "the worker table is not bounded: {layout}"
    );
    // A header, then a row per worker: the twelve subscriber workers and the control worker.
    assert_eq!(
        px("worker_rows"),
        14.0,
        "every worker is still listed: {layout}"
    );
    assert!(px("series_points") >= 2.0, "{layout}");
    id += 1;
    let shot = devtools(
        &mut ws,
        id,
        "Page.captureScreenshot",
        serde_json::json!({"format": "png"}),
    );
    let png = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        shot["data"].as_str().expect("screenshot data"),
    )
    .unwrap();
    // A PNG, not an empty capture; docs/dashboard.png is rewritten only when asked
    // (C1M_UPDATE_DOCS=1), so a test run leaves the checkout clean.
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    let path = if std::env::var_os("C1M_UPDATE_DOCS").is_some() {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard.png")
    } else {
        std::env::temp_dir().join(format!("c1m-dashboard-{}.png", std::process::id()))
    };
    std::fs::write(&path, &png).unwrap();
    drop(stop);
    let sent = publisher.join().unwrap();
    assert!(sent > 0);
    // The subscribers really got the load the page shows.
    assert_eq!(subs[0].next().data, "tick");
    drop(subs.pop());

    let get = |name: &str| -> f64 {
        shown[name]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("data-{name} in {shown}"))
    };
    assert!(get("connections") >= 6.0, "{shown}");
    assert!(get("sse") >= 6.0);
    assert!(get("published") > 0.0);
    assert!(get("delivered") > 0.0);
    assert!(get("publishRate") > 0.0, "publish rate: {shown}");
    assert!(get("latencyCount") > 0.0);
    assert!(get("memPerConn") > 0.0);
    assert_eq!(
        get("workers"),
        13.0,
        "twelve subscriber workers and the control worker"
    );
    assert!(get("refusedNotFound") >= 3.0, "refusals: {shown}");
    assert!(get("refusedTotal") >= 3.0, "refusals: {shown}");
    assert!(get("refusedKeys") >= 10.0, "every refusal counter: {shown}");
    assert!(get("seriesConnections") >= 3.0, "series: {shown}");
    assert!(get("seriesPublishes") >= 2.0, "series: {shown}");
    assert!(get("seriesDeliveries") >= 2.0, "series: {shown}");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}

#[test]
fn dashboard_events_stream_json_snapshots_and_admin_listener_moves_them() {
    let server = Server::start(&["--workers", "1"]);
    let mut events = Sse::connect(server.http, "/dashboard/events", "");
    let first = events.next();
    assert_eq!(first.event.as_deref(), Some("snapshot"));
    let v: serde_json::Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(v["connections"]["sse"], 1); // this stream itself
                                            // The subscriber worker and the control worker.
    assert_eq!(v["worker_gauges"].as_array().unwrap().len(), 2);
    assert!(v["kernel"]["tcp_mem_pages"].is_u64(), "{v}");
    assert!(v["kernel"]["listen_overflows"].is_u64(), "{v}");
    let second = events.next();
    let w: serde_json::Value = serde_json::from_str(&second.data).unwrap();
    assert!(w["time_ms"].as_u64() > v["time_ms"].as_u64());

    drop(events);

    // With --admin-listen: served there, 404 on the public listener (like /status).
    let mut child = common::c1m()
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--workers", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut banner,
    )
    .unwrap();
    let (http, _) = common::parse_banner(&banner).expect("http address in banner");
    let admin = common::parse_banner_admin(&banner)
        .unwrap_or_else(|| panic!("no admin address in {banner:?}"));
    let _server = Server {
        child,
        http,
        tcp: None,
    }; // its drop kills it
    let get = |addr, path: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            // The workers bind a moment after the banner: wait for one to take the connection.
            if std::net::TcpStream::connect(addr).is_err() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{addr} never listened"
                );
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let answer = common::raw_exchange(
                addr,
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            );
            if !answer.is_empty() || std::time::Instant::now() > deadline {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for path in ["/dashboard", "/dashboard/events"] {
        assert_eq!(common::status_code(&get(http, path)), 404, "public {path}");
    }
    let page = get(admin, "/dashboard");
    assert_eq!(common::status_code(&page), 200);
    assert!(page.contains("/dashboard/events"));
    let mut on_admin = Sse::connect(admin, "/dashboard/events", "");
    assert_eq!(on_admin.next().event.as_deref(), Some("snapshot"));
}
