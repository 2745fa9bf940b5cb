//! A publish the Redis broker cannot take says so: `503` with `Retry-After` and a body naming
//! the broker (`broker unavailable: …`), counted as `refused.broker_unavailable` (not as
//! `refused.busy`, which means subscribers are behind), and logged as a summary rather than a
//! line per publish. Two causes with a real redis-server: it is gone (killed by the test), and
//! it refuses writes (out of memory under `maxmemory` with `noeviction`). And what the broker
//! can take it does not refuse: a Redis that forgot the scripts (`SCRIPT FLUSH`) has them
//! loaded again when it answers `NOSCRIPT`, and the publish goes through.
//!
//! redis-server must be installed (scripts/install-test-deps.sh); without it the tests are
//! skipped loudly, except under CI, where they fail.

use crate::common;
use crate::redis_support;

use common::Server;
use redis_support::Redis;
use std::time::{Duration, Instant};

/// POST /pub/CH: (status, Retry-After present, body).
fn publish(node: &Server, channel: &str, payload: &[u8]) -> (u16, bool, String) {
    match ureq::post(&node.url(&format!("/pub/{channel}"))).send_bytes(payload) {
        Ok(resp) => (resp.status(), false, resp.into_string().unwrap()),
        Err(ureq::Error::Status(code, resp)) => {
            let retry = resp.header("Retry-After").is_some();
            (code, retry, resp.into_string().unwrap())
        }
        Err(e) => panic!("publish failed: {e}"),
    }
}

fn refused(node: &Server, reason: &str) -> u64 {
    node.status()["refused"][reason].as_u64().unwrap()
}

fn node_on(redis: &Redis) -> (Server, common::LogLines) {
    let mut cmd = common::c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--broker", &format!("redis://{}", redis.addr())]);
    Server::spawn_capturing_stderr(cmd)
}

#[test]
fn publish_during_a_redis_outage_is_refused_as_broker_unavailable() {
    let Some(mut redis) = Redis::start(&[]) else {
        return;
    };
    let (node, _logs) = node_on(&redis);
    redis_support::publish_retrying(node.http, "news", "before");
    redis.kill();
    let deadline = Instant::now() + Duration::from_secs(15);
    let (code, retry, body) = loop {
        let answer = publish(&node, "news", b"during");
        if answer.0 != 200 || Instant::now() > deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, 503, "{body}");
    assert!(retry, "503 without Retry-After");
    assert!(body.starts_with("broker unavailable: "), "{body}");
    let status = node.wait_status(|s| s["refused"]["broker_unavailable"].as_u64() >= Some(1));
    assert_eq!(status["refused"]["busy"].as_u64(), Some(0), "{status}");
    let metrics = node.metrics();
    assert!(
        metrics.contains("c1m_refused_total{reason=\"broker_unavailable\"}"),
        "{metrics}"
    );
}

#[test]
fn publish_to_an_out_of_memory_redis_names_it_and_logs_a_summary() {
    let Some(redis) = Redis::start(&["--maxmemory", "1mb", "--maxmemory-policy", "noeviction"])
    else {
        return;
    };
    let (node, logs) = node_on(&redis);
    // Connected (so a refusal is Redis' own, not a connection not made yet).
    node.wait_status(|s| s["broker"]["connected"] == true);
    let payload = vec![b'p'; 60 * 1024];
    let mut refusal = None;
    for i in 0..200 {
        let answer = publish(&node, &format!("fill{i}"), &payload);
        if answer.0 != 200 {
            refusal = Some(answer);
            break;
        }
    }
    let (code, retry, body) = refusal.expect("redis never ran out of memory");
    assert_eq!(code, 503, "{body}");
    assert!(retry, "503 without Retry-After");
    assert!(
        body.starts_with("broker unavailable: ") && body.contains("OOM"),
        "{body}"
    );
    // Many more refused publishes: counted each, logged once per summary period.
    for i in 0..50 {
        assert_eq!(publish(&node, &format!("more{i}"), &payload).0, 503);
    }
    let status = node.wait_status(|s| s["refused"]["broker_unavailable"].as_u64() >= Some(51));
    assert_eq!(status["refused"]["busy"].as_u64(), Some(0), "{status}");
    assert!(refused(&node, "broker_unavailable") >= 51);
    let lines = logs
        .snapshot()
        .into_iter()
        .filter(|l| l.contains("redis refused a request"))
        .count();
    assert!(lines <= 2, "{lines} log lines for 51 refused publishes");
}

#[test]
fn a_redis_that_forgot_the_scripts_gets_them_again() {
    let Some(redis) = Redis::start(&[]) else {
        return;
    };
    let (node, _logs) = node_on(&redis);
    redis_support::publish_retrying(node.http, "news", "before");
    assert_eq!(redis.cli(&[], &["SCRIPT", "FLUSH"]).trim(), "OK");
    // Every publish goes through at once, each after the flush as before it.
    for i in 0..3 {
        let (code, _, body) = publish(&node, "news", format!("after{i}").as_bytes());
        assert_eq!(code, 200, "{body}");
    }
    assert_eq!(refused(&node, "broker_unavailable"), 0);
    // So does a resume, which reads history with the other script (forgotten again here).
    assert_eq!(redis.cli(&[], &["SCRIPT", "FLUSH"]).trim(), "OK");
    let mut sub = redis_support::Sub::connect(node.http, "news", Some(0)).expect("subscribe");
    for payload in ["before", "after0", "after1", "after2"] {
        sub.expect_message(payload);
    }
}
