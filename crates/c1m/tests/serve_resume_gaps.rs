//! A resume from id 0 ("from the beginning", the JS client's first connect) gets the channel's
//! whole history and no gap when nothing was lost: neither on a channel whose history is all
//! held nor on one never published, with the in-process hub (SSE and WebSocket) and with a
//! Redis broker. A gap is still reported when history was really trimmed.
//!
//! The Redis case needs redis-server (scripts/install-test-deps.sh); without it that test is
//! skipped loudly, except under CI, where it fails.

use crate::common;
use crate::redis_support;

use common::{Server, Sse};
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::Message;

/// The SSE events of `/sub/{channel}?last_id=0` up to `messages` messages (gaps included).
fn sse_from_zero(server: &Server, channel: &str, messages: usize) -> Vec<common::Event> {
    let mut sse = Sse::connect(server.http, &format!("/sub/{channel}?last_id=0"), "");
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|e: &&common::Event| e.event.is_none())
        .count()
        < messages
    {
        seen.push(sse.next());
    }
    seen
}

#[test]
fn sse_and_websocket_resume_from_zero_get_no_false_gap() {
    let server = Server::start(&["--workers", "1", "--history-size", "3"]);
    let ids: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|p| server.publish("fresh", p.as_bytes()))
        .collect();

    let seen = sse_from_zero(&server, "fresh", 3);
    assert!(
        seen.iter().all(|e| e.event.as_deref() != Some("gap")),
        "false gap: {seen:?}"
    );
    let got: Vec<u64> = seen
        .iter()
        .map(|e| e.id.as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(got, ids);

    // WebSocket: the first frame is the first message, not a gap.
    let stream = TcpStream::connect(server.http).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let url = format!("ws://{}/sub/fresh?last_id=0", server.http);
    let (mut socket, _) = tungstenite::client(url, stream).unwrap();
    let mut frames = Vec::new();
    while frames.len() < 3 {
        if let Message::Text(t) = socket.read().unwrap() {
            frames.push(serde_json::from_str::<serde_json::Value>(&t).unwrap());
        }
    }
    let kinds: Vec<_> = frames.iter().map(|f| f["id"].as_u64()).collect();
    assert_eq!(
        kinds,
        ids.iter().map(|&i| Some(i)).collect::<Vec<_>>(),
        "{frames:?}"
    );

    // A channel never published: from 0 there is nothing to replay and no gap; the first
    // live message comes first.
    let mut never = Sse::connect(server.http, "/sub/never?last_id=0", "");
    std::thread::sleep(Duration::from_millis(200));
    let live = server.publish("never", b"live");
    let first = never.next();
    assert_eq!(
        (first.event.as_deref(), first.id.clone()),
        (None, Some(live.to_string())),
        "{first:?}"
    );

    // Really trimmed history (4 messages, 3 kept) still reports the gap from 0.
    let fourth = server.publish("fresh", b"d");
    let seen = sse_from_zero(&server, "fresh", 3);
    assert_eq!(seen[0].event.as_deref(), Some("gap"), "{seen:?}");
    let gap: serde_json::Value = serde_json::from_str(&seen[0].data).unwrap();
    assert_eq!(
        (gap["after"].as_u64(), gap["through"].as_u64()),
        (Some(0), Some(ids[0]))
    );
    assert_eq!(seen.last().unwrap().id, Some(fourth.to_string()));
}

#[test]
fn redis_broker_resume_from_zero_gets_no_false_gap() {
    let Some(redis) = redis_support::Redis::start(&[]) else {
        return;
    };
    let url = format!("redis://{}", redis.addr());
    let node = Server::start(&["--workers", "1", "--history-size", "3", "--broker", &url]);
    let ids: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|p| redis_support::publish_retrying(node.http, "fresh", p))
        .collect();
    let seen = sse_from_zero(&node, "fresh", 3);
    assert!(
        seen.iter().all(|e| e.event.as_deref() != Some("gap")),
        "false gap: {seen:?}"
    );
    let got: Vec<u64> = seen
        .iter()
        .map(|e| e.id.as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(got, ids);

    // Never published under the broker: no gap, the live message comes first.
    let mut never = Sse::connect(node.http, "/sub/never?last_id=0", "");
    std::thread::sleep(Duration::from_millis(300));
    let live = redis_support::publish_retrying(node.http, "never", "live");
    let first = never.next();
    assert_eq!(
        (first.event.as_deref(), first.id.clone()),
        (None, Some(live.to_string())),
        "{first:?}"
    );

    // Trimmed by count: the gap is still told.
    redis_support::publish_retrying(node.http, "fresh", "d");
    let seen = sse_from_zero(&node, "fresh", 3);
    assert_eq!(seen[0].event.as_deref(), Some("gap"), "{seen:?}");
    let gap: serde_json::Value = serde_json::from_str(&seen[0].data).unwrap();
    assert_eq!(
        (gap["after"].as_u64(), gap["through"].as_u64()),
        (Some(0), Some(ids[0]))
    );
}
