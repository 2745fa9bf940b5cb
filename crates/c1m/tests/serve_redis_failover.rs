//! Broker failover under a publish stream: a Redis Cluster with replicas (3 masters + 3
//! replicas, `cluster-node-timeout` 1 s) losing a master to `CLUSTER FAILOVER` on its replica
//! and to `kill -9`. Two nodes, SSE and WebSocket subscribers on both, publishers alternating
//! the nodes; the rule checked (see `redis_support::stream`): every acknowledged publish reaches
//! every subscriber once and in order or is covered by a gap event, every other publish got a
//! 503, none hung. The outage seen by publishers and subscribers is printed.
//!
//! redis-server (7+) and redis-cli must be installed (scripts/install-test-deps.sh); without
//! them the tests are skipped loudly, except under CI, where they fail.

use crate::common;
use crate::redis_support;

use common::Server;
use redis_support::cluster::Cluster;
use redis_support::sentinel::{Sentinels, MASTER_NAME};
use redis_support::stream;
use std::time::{Duration, Instant};

fn node(url: &str) -> Server {
    let server = Server::start(&["--workers", "1", "--broker", url]);
    server.wait_status(|s| s["broker"]["connected"] == true);
    server
}

/// One channel per master (`f0`, `f1`, … tried until each master has one), in master order,
/// with the master's index.
fn one_channel_per_master(cluster: &Cluster) -> Vec<(String, usize)> {
    let mut found: Vec<(String, usize)> = Vec::new();
    for i in 0..1000 {
        let name = format!("f{i}");
        let owner = cluster.owner(cluster.keyslot(&name), 0);
        if !found.iter().any(|(_, o)| *o == owner) {
            found.push((name, owner));
        }
        if found.len() == cluster.nodes.len() / 2 {
            break;
        }
    }
    found.sort_by_key(|(_, o)| *o);
    found
}

/// Waits (at most `limit`) until node `asked` says `slot` is served by node `by`.
fn wait_owner(cluster: &Cluster, slot: u16, by: usize, asked: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while cluster.owner(slot, asked) != by {
        assert!(
            Instant::now() < deadline,
            "slot {slot} not taken over in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cluster_failover_on_a_replica_loses_no_acknowledged_message() {
    let Some(cluster) = Cluster::start_with_replicas(3, 1000) else {
        return;
    };
    let channels = one_channel_per_master(&cluster);
    let (victim_channel, victim) = channels[0].clone();
    let slot = cluster.keyslot(&victim_channel);
    let replica = cluster.replica_of(victim, replica_asked(victim));
    let url = cluster.url_all();
    let (a, b) = (node(&url), node(&url));
    let names: Vec<String> = channels.iter().map(|(c, _)| c.clone()).collect();
    let _dump = Dump(&cluster, names.clone());
    let outage = stream::run([a.http, b.http], &names, || {
        let out = cluster.nodes[replica].cli(&[], &["cluster", "failover"]);
        assert!(out.contains("OK"), "CLUSTER FAILOVER: {out}");
        wait_owner(&cluster, slot, replica, replica, Duration::from_secs(10));
    });
    eprintln!("CLUSTER FAILOVER: {outage:?}");
}

#[test]
fn cluster_master_killed_loses_no_acknowledged_message() {
    let Some(cluster) = Cluster::start_with_replicas(3, 1000) else {
        return;
    };
    let channels = one_channel_per_master(&cluster);
    let (victim_channel, victim) = channels[0].clone();
    let slot = cluster.keyslot(&victim_channel);
    let replica = cluster.replica_of(victim, replica_asked(victim));
    let url = cluster.url_all();
    let (a, b) = (node(&url), node(&url));
    let names: Vec<String> = channels.iter().map(|(c, _)| c.clone()).collect();
    let _dump = Dump(&cluster, names.clone());
    let outage = stream::run([a.http, b.http], &names, || {
        cluster.nodes[victim].signal("KILL");
        wait_owner(&cluster, slot, replica, replica, Duration::from_secs(15));
    });
    eprintln!("kill -9 of a master: {outage:?}");
}

/// A node other than `victim` to ask about the cluster.
fn replica_asked(victim: usize) -> usize {
    usize::from(victim == 0)
}

/// On a failure, what each live Redis says about the cluster and the channels' subscriptions.
struct Dump<'a>(&'a Cluster, Vec<String>);

impl Drop for Dump<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for n in &self.0.nodes {
            eprintln!(
                "--- redis {}: {}",
                n.port,
                n.cli(&[], &["cluster", "nodes"])
            );
            for ch in &self.1 {
                let name = format!("c1m:{{{ch}}}:p");
                eprintln!(
                    "  {ch}: {}",
                    n.cli(&[], &["pubsub", "shardnumsub", &name])
                        .replace('\n', " ")
                );
            }
        }
    }
}

/// `--broker redis+sentinel://`: one Redis master and its replica watched by three Sentinels.
/// `SENTINEL failover` moves the master to the replica under a publish stream; then the new
/// master is killed with -9 and the Sentinels promote the old one back. The delivery rule
/// holds through both, and each outage is printed.
#[test]
fn sentinel_failover_and_master_killed_lose_no_acknowledged_message() {
    let Some(sentinels) = Sentinels::start() else {
        return;
    };
    let url = sentinels.url();
    let (a, b) = (node(&url), node(&url));
    assert_eq!(a.status()["broker"]["kind"], "redis-sentinel");
    let first = sentinels.master();
    let other = 1 - first;
    let names: Vec<String> = (0..3).map(|i| format!("s{i}")).collect();
    let outage = stream::run([a.http, b.http], &names, || {
        let out = sentinels.ask(sentinels.ports[0], &["sentinel", "failover", MASTER_NAME]);
        assert!(out.contains("OK"), "SENTINEL failover: {out}");
        sentinels.wait_master(other, Duration::from_secs(15));
    });
    eprintln!("SENTINEL failover: {outage:?}");
    // The old master becomes the new one's replica before it can take over again.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !sentinels.redis[first]
        .cli(&[], &["info", "replication"])
        .contains("master_link_status:up")
    {
        assert!(
            Instant::now() < deadline,
            "the old master never became a replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let names: Vec<String> = (0..3).map(|i| format!("k{i}")).collect();
    let outage = stream::run([a.http, b.http], &names, || {
        sentinels.redis[other].signal("KILL");
        sentinels.wait_master(first, Duration::from_secs(20));
    });
    eprintln!("kill -9 of the Sentinel master: {outage:?}");
}

/// Sentinel promotes a replica that missed the newest ids: it is cut off (stopped, its link
/// closed by the master) while two more messages are published, then the master is killed
/// with -9 and the Sentinels promote it. Ids come from the counter raised to the wall clock,
/// so the first id on the promoted replica is above every id the old master handed out: the
/// streaming subscriber gets the new message (an id at or below its last one would be dropped
/// as already delivered) and a resume from the last old id replays exactly it.
#[test]
fn sentinel_promoting_a_replica_behind_never_reuses_an_id() {
    let Some(sentinels) = Sentinels::start() else {
        return;
    };
    let a = node(&sentinels.url());
    let (first, other) = (sentinels.master(), 1 - sentinels.master());
    let mut sub = redis_support::Sub::connect(a.http, "ids", None).expect("subscribed");
    let m1 = a.publish("ids", b"m1");
    assert_eq!(sub.expect_message("m1"), m1);
    let acked = sentinels.redis[first].cli(&[], &["wait", "1", "5000"]);
    assert_eq!(acked.trim(), "1", "the replica never had m1");
    sentinels.redis[other].signal("STOP");
    let killed = sentinels.redis[first].cli(&[], &["client", "kill", "type", "replica"]);
    assert_eq!(killed.trim(), "1", "CLIENT KILL TYPE replica: {killed}");
    let m2 = a.publish("ids", b"m2");
    let m3 = a.publish("ids", b"m3");
    sentinels.redis[first].signal("KILL");
    sentinels.redis[other].signal("CONT");
    assert_eq!(sub.expect_message("m2"), m2);
    assert_eq!(sub.expect_message("m3"), m3);
    sentinels.wait_master(other, Duration::from_secs(20));
    let behind: u64 = sentinels.redis[other]
        .cli(&[], &["get", "c1m:id"])
        .trim()
        .parse()
        .unwrap();
    assert!(
        behind < m3,
        "the promoted replica is not behind: {behind} >= {m3}"
    );
    let m4 = redis_support::publish_retrying(a.http, "ids", "m4");
    assert!(m4 > m3, "an id went back across the failover: {m4} <= {m3}");
    // Live: m4 arrives (a gap may come first: the node cannot know what Redis lost).
    loop {
        match sub.next() {
            Some(redis_support::Seen::Gap(..)) => continue,
            Some(redis_support::Seen::Message(id, data)) => {
                assert_eq!((id, data.as_str()), (m4, "m4"));
                break;
            }
            None => panic!("m4 never reached the streaming subscriber"),
        }
    }
    // Resume from the last old id: exactly m4, no gap.
    let mut resumed = redis_support::Sub::connect(a.http, "ids", Some(m3)).expect("resumed");
    assert_eq!(
        resumed.next(),
        Some(redis_support::Seen::Message(m4, "m4".into()))
    );
}
