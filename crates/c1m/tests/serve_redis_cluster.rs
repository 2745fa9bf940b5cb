//! `--broker redis+cluster://…` against a real Redis Cluster (3 masters started here, joined
//! with `redis-cli --cluster create`): every channel's keys on its own shard, ids per channel,
//! sharded pub/sub. Channels are picked to land on all three masters. Publishes on node A reach
//! node B's subscribers once and in order; a resume on the other node is exact; a slot moved
//! mid-stream (MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE) loses and repeats nothing; a
//! multi-channel resume is refused (400), since one last id cannot name a position on several
//! per-channel id spaces.
//!
//! redis-server (7+) and redis-cli must be installed (scripts/install-test-deps.sh); without
//! them the tests are skipped loudly, except under CI, where they fail.

use crate::common;
use crate::redis_support;

use common::Server;
use redis_support::cluster::Cluster;
use redis_support::{publish, publish_retrying, Seen, Sub};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A node on the cluster; `extra`: more flags.
fn node(cluster: &Cluster, workers: &str, extra: &[&str]) -> Server {
    let url = cluster.url();
    let mut args = vec!["--workers", workers, "--broker", &url];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    server.wait_status(|s| s["broker"]["connected"] == true);
    server
}

/// One channel name per master, in master order (`c0`, `c1`, … tried until each has one).
fn one_channel_per_master(cluster: &Cluster) -> Vec<String> {
    let mut found: Vec<Option<String>> = vec![None; cluster.nodes.len()];
    for i in 0.. {
        let name = format!("c{i}");
        let owner = cluster.owner(cluster.keyslot(&name), 0);
        found[owner].get_or_insert(name);
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    found.into_iter().map(Option::unwrap).collect()
}

/// The status line of a raw HTTP request's answer, and its body.
fn raw_get(addr: std::net::SocketAddr, head: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text.lines().next().unwrap_or_default().to_string();
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

#[test]
fn publish_on_a_reaches_b_once_in_order_resumes_across_nodes_and_refuses_multi_resume() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    // The node's slot function agrees with the real server's CLUSTER KEYSLOT.
    for key in [
        "c1m:{news}:h",
        "c1m:{c7}:p",
        "plain",
        "{user1000}.following",
        "a{}b",
    ] {
        assert_eq!(
            c1m_server::redis_cluster_key_slot(key.as_bytes()),
            cluster.keyslot(key),
            "{key}"
        );
    }
    let channels = one_channel_per_master(&cluster);
    // History holds 5 messages per channel: a resume from further back gets a gap.
    let a = node(&cluster, "1", &["--history-size", "5"]);
    let b = node(
        &cluster,
        "2",
        &["--history-size", "5", "--tcp-listen", "127.0.0.1:0"],
    );
    let mut subs: Vec<Sub> = channels
        .iter()
        .map(|ch| Sub::connect(b.http, ch, None).unwrap())
        .collect();
    // Several channels without a last id: served live.
    let mut multi = Sub::connect(b.http, &channels.join(","), None).unwrap();
    b.wait_status(|s| s["connections"]["sse"].as_u64() == Some(4));

    let mut sent: Vec<Vec<(u64, String)>> = vec![Vec::new(); 3];
    for i in 0..8 {
        for (c, ch) in channels.iter().enumerate() {
            let payload = format!("{ch}-{i}");
            let id = a.publish(ch, payload.as_bytes());
            sent[c].push((id, payload));
        }
    }
    for (c, sub) in subs.iter_mut().enumerate() {
        assert!(sent[c].windows(2).all(|w| w[0].0 < w[1].0), "ids rise");
        for (id, payload) in &sent[c] {
            assert_eq!(sub.next(), Some(Seen::Message(*id, payload.clone())));
        }
    }
    // The multi-channel stream: every message once, each channel in its order.
    let mut got: Vec<Vec<(u64, String)>> = vec![Vec::new(); 3];
    for _ in 0..24 {
        let Some((channel, id, payload)) = multi.next_on_channel() else {
            panic!("multi-channel stream ended early: {got:?}");
        };
        let c = channels.iter().position(|ch| *ch == channel).unwrap();
        got[c].push((id, payload));
    }
    assert_eq!(got, sent);

    // Resume on the other node from the 4th message: exactly the rest, then the next live one.
    drop(subs.remove(0));
    let mut resumed = Sub::connect(a.http, &channels[0], Some(sent[0][3].0)).unwrap();
    for (id, payload) in &sent[0][4..] {
        assert_eq!(resumed.next(), Some(Seen::Message(*id, payload.clone())));
    }
    let marker = a.publish(&channels[0], b"end");
    assert_eq!(resumed.next(), Some(Seen::Message(marker, "end".into())));
    // From further back than history holds (5): a gap through the last trimmed id, then the
    // five it holds.
    let mut far = Sub::connect(a.http, &channels[1], Some(sent[1][0].0)).unwrap();
    assert_eq!(far.next(), Some(Seen::Gap(sent[1][0].0, sent[1][2].0)));
    for (id, payload) in &sent[1][3..] {
        assert_eq!(far.next(), Some(Seen::Message(*id, payload.clone())));
    }
    // A retried publish with the same Idempotency-Key, on the other node: the first id, once.
    let first = publish(a.http, &channels[2], "once", Some("k-1")).unwrap();
    let again = publish(b.http, &channels[2], "once", Some("k-1")).unwrap();
    assert_eq!(first, again);
    assert_eq!(subs[1].next(), Some(Seen::Message(first, "once".into())));
    let after = a.publish(&channels[2], b"next");
    assert_eq!(subs[1].next(), Some(Seen::Message(after, "next".into())));

    // Channel info: presence from every node, last id from the channel's shard.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let body = ureq::get(&b.url(&format!("/channels/{}", channels[0])))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        if v["subscribers"] == 2 && v["nodes"] == 2 && v["last_id"] == marker {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "channel info: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A multi-channel resume is refused plainly, and counted.
    let before = b.status()["refused"]["bad_request"].as_u64().unwrap();
    let (status, body) = raw_get(
        b.http,
        &format!(
            "GET /sub/{},{} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n\
             Last-Event-ID: {}\r\nConnection: close\r\n\r\n",
            channels[1], channels[2], sent[1][0].0
        ),
    );
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    assert!(
        body.contains("multi-channel resume is not exact under Redis Cluster"),
        "{body}"
    );
    b.wait_status(|s| s["refused"]["bad_request"].as_u64() == Some(before + 1));
    // The raw TCP protocol says ERR, with the same reason.
    let mut tcp = TcpStream::connect(b.tcp.unwrap()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    writeln!(tcp, "SUB {},{} {}", channels[1], channels[2], sent[1][0].0).unwrap();
    let mut line = String::new();
    let _ = tcp.read_to_string(&mut line);
    assert!(
        line.starts_with("ERR ") && line.contains("not exact under Redis Cluster"),
        "{line:?}"
    );
    b.wait_status(|s| s["refused"]["bad_request"].as_u64() == Some(before + 2));
    assert_eq!(b.status()["broker"]["kind"], "redis-cluster");
}

#[test]
fn a_slot_moved_mid_stream_loses_and_repeats_nothing() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let channel = "moving";
    let slot = cluster.keyslot(channel);
    let from = cluster.owner(slot, 0);
    let to = (from + 1) % 3;
    let a = node(&cluster, "1", &[]);
    let b = node(&cluster, "1", &[]);
    let mut sub = Sub::connect(b.http, channel, None).unwrap();
    b.wait_status(|s| s["connections"]["sse"].as_u64() == Some(1));

    let publisher = {
        let addr = a.http;
        std::thread::spawn(move || {
            (0..60)
                .map(|i| {
                    let payload = format!("m{i}");
                    let id = publish_retrying(addr, channel, &payload);
                    std::thread::sleep(Duration::from_millis(20));
                    (id, payload)
                })
                .collect::<Vec<_>>()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    cluster.move_slot(slot, from, to, Duration::from_millis(300));
    let sent = publisher.join().unwrap();
    assert_eq!(cluster.owner(slot, from), to, "the slot moved");
    assert!(
        sent.windows(2).all(|w| w[0].0 < w[1].0),
        "ids rise: {sent:?}"
    );
    for (id, payload) in &sent {
        assert_eq!(sub.next(), Some(Seen::Message(*id, payload.clone())));
    }
    // Nothing repeated after: the next thing on the stream is the next message.
    let marker = a.publish(channel, b"end");
    assert_eq!(sub.next(), Some(Seen::Message(marker, "end".into())));
    // B's subscription followed the slot: counted as a resubscribe.
    let status = b.status();
    assert!(
        status["broker"]["resubscribes"].as_u64() >= Some(1),
        "{status}"
    );
}
