//! `Idempotency-Key` on publish: a publish retried with the same key on
//! the same channel is answered with the first one's id and stored and delivered once. With
//! the in-process hub, and with Redis where the case that matters is real: Redis stalls with a
//! publish in flight (the node answers 503 after its I/O timeout), then runs it, then restarts
//! (from its append-only file); the publisher's retry gets the original id, and history holds
//! the message once.

use crate::common;
use crate::redis_support;

use common::Server;
use redis_support::{publish, publish_retrying, Redis, Seen, Sub};
use std::time::{Duration, Instant};

#[test]
fn the_in_process_hub_stores_a_retried_publish_once() {
    let server = Server::start(&["--workers", "1"]);
    let mut sub = Sub::connect(server.http, "orders", None).expect("subscribe");
    let first = publish(server.http, "orders", "pay #1", Some("order-1")).unwrap();
    let again = publish(server.http, "orders", "pay #1", Some("order-1")).unwrap();
    assert_eq!(again, first, "a retry gets the first id");
    // The key is per channel; another key is another message.
    let elsewhere = publish(server.http, "refunds", "pay #1", Some("order-1")).unwrap();
    assert_ne!(elsewhere, first);
    let second = publish(server.http, "orders", "pay #2", Some("order-2")).unwrap();
    assert!(second > first);
    assert_eq!(sub.next(), Some(Seen::Message(first, "pay #1".into())));
    assert_eq!(sub.next(), Some(Seen::Message(second, "pay #2".into())));
    // History holds it once too.
    let mut resumed = Sub::connect(server.http, "orders", Some(first - 1)).unwrap();
    assert_eq!(resumed.next(), Some(Seen::Message(first, "pay #1".into())));
    assert_eq!(resumed.next(), Some(Seen::Message(second, "pay #2".into())));
    // Keys that cannot be honoured are refused, not ignored.
    for bad in ["has space", &"k".repeat(201)] {
        assert_eq!(
            publish(server.http, "orders", "x", Some(bad)),
            Err((400, false)),
            "{bad:?}"
        );
    }
    let status = server.status();
    assert_eq!(status["broker"]["idempotent_replays"], 1, "{status}");
    let metrics = server.metrics();
    assert!(
        metrics.contains("c1m_idempotent_replays_total 1"),
        "{metrics}"
    );
}

#[test]
fn a_publish_in_flight_through_a_redis_stall_and_restart_is_stored_once() {
    let Some(mut redis) = Redis::start(&["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let a = Server::start(&["--workers", "1", "--broker", &url]);
    let b = Server::start(&["--workers", "1", "--broker", &url]);
    for node in [&a, &b] {
        node.wait_status(|s| s["broker"]["connected"] == true);
    }
    let mut sub = Sub::connect(b.http, "orders", None).expect("subscribe on B");
    let before = publish_retrying(a.http, "orders", "before");
    assert_eq!(sub.expect_message("before"), before);

    // Redis stops answering with the publish in flight: the node gives up after its I/O
    // timeout and answers 503 (the publisher cannot know whether it was stored).
    redis.signal("STOP");
    let started = Instant::now();
    let answer = publish(a.http, "orders", "payment", Some("pay-42"));
    assert_eq!(
        answer,
        Err((503, true)),
        "a stalled Redis must give 503 + Retry-After"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    // Redis wakes up and runs what it had received (it was stored after all), then restarts.
    redis.signal("CONT");
    std::thread::sleep(Duration::from_millis(300));
    redis.kill();
    redis.run();

    // The publisher retries with its key, on any node: the first id, stored once. (Each node
    // answers 503 until its own connection to the restarted Redis is back.)
    let retry = |node: std::net::SocketAddr| {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match publish(node, "orders", "payment", Some("pay-42")) {
                Ok(id) => return id,
                Err((503, true)) => {}
                other => panic!("retry answered {other:?}"),
            }
            assert!(Instant::now() < deadline, "retries refused for 15 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let id = retry(a.http);
    assert!(id > before);
    assert_eq!(
        retry(b.http),
        id,
        "a retry on another node gets the same id"
    );
    let after = publish_retrying(a.http, "orders", "after");

    let history = redis.cli(&[], &["XRANGE", "c1m:h:orders", "-", "+"]);
    assert_eq!(
        history.matches("payment").count(),
        1,
        "history must hold the payment once: {history}"
    );
    // The live subscriber on B saw it once, in order (caught up after the restart).
    assert_eq!(sub.next(), Some(Seen::Message(id, "payment".into())));
    assert_eq!(sub.next(), Some(Seen::Message(after, "after".into())));
    let replays = a.status()["broker"]["idempotent_replays"].as_u64().unwrap();
    assert!(replays >= 1, "the retry must have found the key");
}
