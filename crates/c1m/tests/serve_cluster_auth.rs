//! `--broker` with credentials: a real redis-server with `requirepass` and
//! an ACL user. Both of a node's Redis connections authenticate (the pub/sub one used not to:
//! its subscribers never went live), a refused password stops the start with exit 2, a
//! password changed under a running node gives 503s, a log line and a counter (never a panic),
//! and the password is never printed (logs, /status, /metrics, --print-config).

use crate::common;
use crate::redis_support;

use common::{c1m, Server};
use redis_support::{publish, publish_retrying, run_bounded, Redis, Sub};
use std::time::Duration;

const PASSWORD: &str = "s3cret-Pw";
const ALICE_PASSWORD: &str = "al1ce-Pw";

fn redis_with_auth() -> Option<Redis> {
    Redis::start(&[
        "--requirepass",
        PASSWORD,
        "--user",
        "alice",
        "on",
        &format!(">{ALICE_PASSWORD}"),
        "~*",
        "&*",
        "+@all",
    ])
}

fn node(url: &str) -> (Server, common::LogLines) {
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--broker", url]);
    let (server, logs) = Server::spawn_capturing_stderr(cmd);
    server.wait_status(|s| s["broker"]["connected"] == true);
    (server, logs)
}

fn assert_no_password(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD) && !text.contains(ALICE_PASSWORD),
        "{what} shows a password: {text}"
    );
}

/// A node with the default user's password and one with an ACL user: messages cross both ways,
/// which needs both pub/sub connections authenticated.
#[test]
fn both_connections_authenticate_with_a_password_or_an_acl_user() {
    let Some(redis) = redis_with_auth() else {
        return;
    };
    let port = redis.port;
    let (a, a_logs) = node(&format!("redis://:{PASSWORD}@127.0.0.1:{port}"));
    let (b, b_logs) = node(&format!(
        "redis://alice:{ALICE_PASSWORD}@127.0.0.1:{port}/2"
    ));
    let (c, c_logs) = node(&format!("redis://alice:{ALICE_PASSWORD}@127.0.0.1:{port}"));
    let mut on_a = Sub::connect(a.http, "room", None).expect("subscribe on A");
    let mut on_b = Sub::connect(b.http, "room", None).expect("subscribe on B (db 2)");
    let mut on_c = Sub::connect(c.http, "room", None).expect("subscribe on C");
    // A (password) and C (ACL user) share database 0: each one's publish reaches the other's
    // subscribers, through the other's pub/sub connection.
    let id = publish_retrying(a.http, "room", "a-to-c");
    assert_eq!(on_c.expect_message("a-to-c"), id);
    assert_eq!(on_a.expect_message("a-to-c"), id);
    let id = publish_retrying(c.http, "room", "c-to-a");
    assert_eq!(on_a.expect_message("c-to-a"), id);
    assert_eq!(on_c.expect_message("c-to-a"), id);
    // B (ACL user, database 2) is a world of its own.
    let id = publish_retrying(b.http, "room", "b-only");
    assert_eq!(on_b.expect_message("b-only"), id);
    on_a.expect_silence(Duration::from_millis(300));

    // Nothing prints a password.
    for server in [&a, &b, &c] {
        assert_no_password("/status", &server.status().to_string());
        let metrics = server.metrics();
        assert_no_password("/metrics", &metrics);
    }
    let printed = c1m()
        .args(["serve", "--print-config", "--broker"])
        .arg(format!("redis://alice:{ALICE_PASSWORD}@127.0.0.1:{port}"))
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout).into_owned();
    assert!(
        printed.contains("broker = \"redis://alice:***@127.0.0.1:"),
        "{printed}"
    );
    assert_no_password("--print-config", &printed);
    for logs in [a_logs, b_logs, c_logs] {
        assert_no_password("the log", &logs.snapshot().join("\n"));
    }
}

/// A password Redis refuses (or none where one is needed) stops the start: exit 2 and a
/// message that names the broker without its password.
#[test]
fn a_refused_password_is_a_start_up_error() {
    let Some(redis) = redis_with_auth() else {
        return;
    };
    let port = redis.port;
    for url in [
        format!("redis://:wrong-{PASSWORD}@127.0.0.1:{port}"),
        format!("redis://alice:wrong-{ALICE_PASSWORD}@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let mut cmd = c1m();
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--broker",
            &url,
        ]);
        let (code, stderr) = run_bounded(cmd, Duration::from_secs(10));
        assert_eq!(
            code,
            Some(2),
            "{url}: must exit 2 at once; stderr: {stderr}"
        );
        assert!(stderr.contains("redis refused this node"), "{stderr}");
        assert_no_password("the start-up error", &stderr);
    }
}

/// Redis' password changes under a running node and its connections are dropped: publishes
/// get 503 + Retry-After, the refusal is logged and counted, the node keeps serving; once the
/// password is back, publishing works again and subscribers get what they missed.
#[test]
fn a_password_changed_later_gives_503_and_is_counted() {
    let Some(redis) = redis_with_auth() else {
        return;
    };
    let port = redis.port;
    let (a, logs) = node(&format!("redis://:{PASSWORD}@127.0.0.1:{port}"));
    let mut sub = Sub::connect(a.http, "news", None).expect("subscribe");
    let first = publish_retrying(a.http, "news", "before");
    assert_eq!(sub.expect_message("before"), first);

    let auth = ["-a", PASSWORD];
    assert!(redis
        .cli(&auth, &["CONFIG", "SET", "requirepass", "changed-pw"])
        .contains("OK"));
    let new_auth = ["-a", "changed-pw"];
    redis.cli(&new_auth, &["CLIENT", "KILL", "TYPE", "normal"]);
    redis.cli(&new_auth, &["CLIENT", "KILL", "TYPE", "pubsub"]);

    a.wait_status(|s| s["broker"]["auth_failures"].as_u64() > Some(0));
    match publish(a.http, "news", "refused", None) {
        Err((503, retry_after)) => assert!(retry_after, "503 without Retry-After"),
        other => panic!("expected 503 while Redis refuses the password, got {other:?}"),
    }
    let metrics = ureq::get(&a.url("/metrics"))
        .call()
        .unwrap()
        .into_string()
        .unwrap();
    let refused = metrics
        .lines()
        .find(|l| l.starts_with("c1m_broker_connect_failures_total{reason=\"refused\"}"))
        .expect("refused counter in /metrics");
    assert_ne!(refused.rsplit(' ').next(), Some("0"), "{refused}");
    assert!(
        logs.wait_for("refused", Duration::from_secs(5)).is_some(),
        "no log line about the refusal"
    );
    // The node still serves (health, status) while Redis refuses it.
    assert_eq!(ureq::get(&a.url("/healthz")).call().unwrap().status(), 200);

    assert!(redis
        .cli(&new_auth, &["CONFIG", "SET", "requirepass", PASSWORD])
        .contains("OK"));
    let after = publish_retrying(a.http, "news", "after");
    assert_eq!(sub.expect_message("after"), after);
    assert_no_password(
        "the log",
        &logs.snapshot().join("\n").replace("changed-pw", ""),
    );
}
