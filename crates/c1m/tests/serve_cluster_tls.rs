//! `--broker rediss://`: a real redis-server serving TLS only, with a
//! server certificate for 127.0.0.1 signed by a CA that openssl mints in the test. With
//! `--broker-ca` naming that CA both of a node's connections (commands and pub/sub) run over
//! TLS and messages cross nodes; a CA that did not sign Redis' certificate (or the system
//! roots, which know nothing of the test CA) is refused at start with exit 2.

use crate::common;
use crate::redis_support;

use common::{c1m, Server};
use redis_support::{publish_retrying, run_bounded, Pki, Redis, Sub};
use std::time::Duration;

const PASSWORD: &str = "tls-Pw-7";

fn tls_redis(pki: &Pki) -> Option<Redis> {
    let mut args = pki.redis_args();
    args.extend(["--requirepass".to_string(), PASSWORD.to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Redis::start(&args)
}

fn url(redis: &Redis) -> String {
    format!("rediss://:{PASSWORD}@127.0.0.1:{}", redis.port)
}

fn node(redis: &Redis, ca: &str) -> Server {
    let mut cmd = c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(["--broker", &url(redis), "--broker-ca", ca]);
    let server = Server::spawn(cmd);
    server.wait_status(|s| s["broker"]["connected"] == true);
    server
}

#[test]
fn rediss_with_a_private_ca_carries_messages_between_nodes() {
    let Some(pki) = Pki::mint() else {
        return;
    };
    let Some(redis) = tls_redis(&pki) else {
        return;
    };
    let ca = pki.path("ca.pem");
    let a = node(&redis, &ca);
    let b = node(&redis, &ca);
    let mut on_b = Sub::connect(b.http, "secure", None).expect("subscribe on B");
    let mut on_a = Sub::connect(a.http, "secure", None).expect("subscribe on A");
    for i in 0..5 {
        let payload = format!("m{i}");
        let id = publish_retrying(a.http, "secure", &payload);
        assert_eq!(on_b.expect_message(&payload), id);
        assert_eq!(on_a.expect_message(&payload), id);
    }
    // A resume on B replays from Redis' history over TLS.
    let first = publish_retrying(b.http, "secure", "r1");
    publish_retrying(a.http, "secure", "r2");
    let mut resumed = Sub::connect(b.http, "secure", Some(first - 1)).expect("resume on B");
    resumed.expect_message("r1");
    resumed.expect_message("r2");
    // The plaintext port is off: nothing went in the clear (Redis listens on TLS only).
    let status = a.status();
    assert_eq!(status["broker"]["auth_failures"], 0, "{status}");
    on_a.expect_message("r1");
    on_a.expect_message("r2");
    on_a.expect_silence(Duration::from_millis(200));
}

/// Redis' certificate was signed by a CA the node does not trust: the start stops with exit 2
/// and says why (the pub/sub connection uses the same trust, so it cannot slip through).
#[test]
fn a_certificate_the_trusted_ca_did_not_sign_is_refused() {
    let Some(pki) = Pki::mint() else {
        return;
    };
    let Some(redis) = tls_redis(&pki) else {
        return;
    };
    let other = pki.path("other-ca.pem");
    let runs: [&[&str]; 2] = [&["--broker-ca", &other], &[]];
    for extra in runs {
        let mut cmd = c1m();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
            .args(["--broker", &url(&redis)])
            .args(extra);
        let (code, stderr) = run_bounded(cmd, Duration::from_secs(10));
        assert_eq!(
            code,
            Some(2),
            "{extra:?}: must exit 2 at once; stderr: {stderr}"
        );
        assert!(stderr.contains("certificate"), "{extra:?}: {stderr}");
        assert!(!stderr.contains(PASSWORD), "{stderr}");
    }
    // A CA file that is not a certificate is a configuration error.
    let bad = pki.path("server.key");
    let out = c1m()
        .args([
            "serve",
            "--check-config",
            "--broker",
            &url(&redis),
            "--broker-ca",
            &bad,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
