//! A real browser receives messages: headless Chromium (Debian package `chromium`, installed by
//! scripts/install-test-deps.sh) loads the server's /demo page, which opens `new WebSocket(…)`
//! and `new EventSource(…)`; once both got the published message the page publishes a report,
//! which this test reads over its own SSE connection.

mod common;

use common::{Server, Sse};
use std::process::{Command, Stdio};

/// Kills the browser even when an assertion fails.
struct Browser(std::process::Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn headless_chromium_receives_over_websocket_and_eventsource() {
    let server = Server::start(&["--workers", "2"]);
    let mut report = Sse::connect(server.http, "/sub/browser-report", "");
    let profile = std::env::temp_dir().join(format!("c1m-chromium-{}", std::process::id()));
    let url = server.url("/demo?channel=browser&report=browser-report");
    let _browser = Browser(
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--remote-debugging-port=0", // keeps the headless browser running
                &format!("--user-data-dir={}", profile.display()),
                &url,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium is installed by scripts/install-test-deps.sh"),
    );
    // The page's two subscriptions (the report stream is this test's own SSE connection).
    server.wait_status(|s| s["connections"]["websocket"] == 1 && s["connections"]["sse"] == 2);
    server.publish("browser", b"hello browser");
    let event = report.next();
    assert_eq!(event.data, "ws=hello browser sse=hello browser");
    let _ = std::fs::remove_dir_all(profile);
}
