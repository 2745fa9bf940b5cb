//! `/dashboard`: headless Chromium (Debian package `chromium`, installed by
//! scripts/install-test-deps.sh) loads the page while the test keeps real load going
//! (SSE subscribers, a publish every 50 ms); the page's live figures, read back from the DOM
//! (`--dump-dom`; the page mirrors each figure in a data-* attribute of <body>), must be
//! non-zero, and a screenshot goes to docs/dashboard.png. Also: /dashboard/events is a plain
//! SSE stream of JSON snapshots, and with --admin-listen the public listener answers 404.

mod common;

use common::{Server, Sse};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Stops the publishing thread even when an assertion fails.
struct StopFlag(Arc<AtomicBool>);

impl Drop for StopFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs headless Chromium on `url` with `extra` flags, killed after 30 s at most.
fn chromium(url: &str, extra: &[&str], tag: &str) -> String {
    let profile = std::env::temp_dir().join(format!("c1m-dash-{tag}-{}", std::process::id()));
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,820",
            // Let the page collect a few snapshots (one a second) before the dump/screenshot.
            "--timeout=4500",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(extra)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium is installed by scripts/install-test-deps.sh");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(stdout).unwrap_or_default());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(profile);
    reader.join().unwrap()
}

/// `data-NAME="VALUE"` of the dumped <body>.
fn data_attr(dom: &str, name: &str) -> Option<f64> {
    let start = dom.find(&format!("data-{name}=\""))? + name.len() + 7;
    dom[start..].split('"').next()?.parse().ok()
}

#[test]
fn headless_chromium_shows_live_nonzero_figures() {
    let server = Server::start(&["--workers", "2"]);
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
    let page = server.url("/dashboard");
    let dom = chromium(&page, &["--dump-dom"], "dom");
    let shot = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/dashboard.png");
    chromium(
        &page,
        &[&format!("--screenshot={}", shot.display())],
        "shot",
    );
    drop(stop);
    let sent = publisher.join().unwrap();
    assert!(sent > 0);
    // The subscribers really got the load the page shows.
    assert_eq!(subs[0].next().data, "tick");
    drop(subs.pop());

    let get = |name| data_attr(&dom, name).unwrap_or_else(|| panic!("data-{name} in {dom}"));
    assert!(get("snapshots") >= 2.0, "{dom}");
    assert!(get("connections") >= 6.0);
    assert!(get("sse") >= 6.0);
    assert!(get("published") > 0.0);
    assert!(get("delivered") > 0.0);
    assert!(get("publish-rate") > 0.0, "publish rate: {dom}");
    assert!(get("latency-count") > 0.0);
    assert!(get("mem-per-conn") > 0.0);
    assert_eq!(get("workers"), 2.0);
    assert!(dom.contains("live, updated"), "{dom}");
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
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
    assert_eq!(v["worker_gauges"].as_array().unwrap().len(), 1);
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
    let http: std::net::SocketAddr = banner
        .strip_prefix("c1m serve: listening on http ")
        .and_then(|r| r.split(';').next())
        .and_then(|a| a.parse().ok())
        .expect("http address in banner");
    let admin: std::net::SocketAddr = banner
        .rsplit_once("; admin http ")
        .and_then(|(_, a)| a.trim().parse().ok())
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
