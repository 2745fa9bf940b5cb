//! A real browser receives messages: headless Chromium (Debian package `chromium`, installed by
//! scripts/install-test-deps.sh) loads the server's /demo page, which opens `new WebSocket(…)`
//! and `new EventSource(…)`; once both got the published message the page publishes a report,
//! which this test reads over its own SSE connection.

use crate::browser;
use crate::common;

use browser::Browser;
use common::{Server, Sse};

#[test]
fn headless_chromium_receives_over_websocket_and_eventsource() {
    let server = Server::start(&["--workers", "2"]);
    let mut report = Sse::connect(server.http, "/sub/browser-report", "");
    let url = server.url("/demo?channel=browser&report=browser-report");
    let _browser = Browser::open(&url, "demo");
    // The page's two subscriptions (the report stream is this test's own SSE connection).
    server.wait_status(|s| s["connections"]["websocket"] == 1 && s["connections"]["sse"] == 2);
    server.publish("browser", b"hello browser");
    let event = report.next();
    assert_eq!(event.data, "ws=hello browser sse=hello browser");
}
