//! A Redis that vanishes without closing its sockets (a host that froze, a firewall that
//! dropped the connection's state): the node's pub/sub connection hears nothing, not even an
//! error. The node must notice the silence (PING after 2 s, unanswered for 5 s), drop the
//! connection, make a new one and catch its subscribers up from history, with no gap since
//! nothing was lost. Modelled with a TCP relay between the node and a real redis-server that,
//! told to, stops relaying on every connection it holds while keeping them open (exactly what
//! a SIGSTOPped Redis looks like from the node, but for good); new connections go through.
//!
//! redis-server must be installed (scripts/install-test-deps.sh); without it the test is
//! skipped loudly, except under CI, where it fails.

use crate::common;
use crate::redis_support;

use common::Server;
use redis_support::{publish_retrying, Redis, Seen, Sub};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Relays loopback connections to `to`; [`Relay::blackhole`] silences every connection open
/// at that moment for good (bytes either way are read and dropped, the sockets stay open).
struct Relay {
    addr: SocketAddr,
    epoch: Arc<AtomicU64>,
}

impl Relay {
    fn start(to: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let epoch = Arc::new(AtomicU64::new(0));
        let e = epoch.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(to) else {
                    continue;
                };
                let born = e.load(Ordering::SeqCst);
                for (from, into) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let e = e.clone();
                    std::thread::spawn(move || pump(from, into, born, &e));
                }
            }
        });
        Relay { addr, epoch }
    }

    fn blackhole(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

fn pump(mut from: TcpStream, mut into: TcpStream, born: u64, epoch: &AtomicU64) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if epoch.load(Ordering::SeqCst) == born && into.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = into.shutdown(std::net::Shutdown::Both);
}

#[test]
fn a_silent_pubsub_link_is_noticed_and_delivery_comes_back_without_a_gap() {
    let Some(redis) = Redis::start(&[]) else {
        return;
    };
    let relay = Relay::start(redis.addr());
    let url = format!("redis://{}", relay.addr);
    let node = Server::start(&["--workers", "1", "--broker", &url]);
    node.wait_status(|s| s["broker"]["connected"] == true);
    let mut sub = Sub::connect(node.http, "feed", None).unwrap();
    node.wait_status(|s| s["connections"]["sse"].as_u64() == Some(1));
    let one = node.publish("feed", b"one");
    assert_eq!(sub.next(), Some(Seen::Message(one, "one".into())));

    relay.blackhole();
    // The command connection times out and is made again; the publish then succeeds.
    let two = publish_retrying(node.http, "feed", "two");
    // The pub/sub connection never errs: only the dead-link watch brings "two" (and what
    // follows) back, caught up from history with no gap since nothing was lost.
    assert_eq!(sub.next(), Some(Seen::Message(two, "two".into())));
    let three = node.publish("feed", b"three");
    assert_eq!(sub.next(), Some(Seen::Message(three, "three".into())));
    let status = node.status();
    assert!(
        status["broker"]["pubsub_dead_links"].as_u64() >= Some(1),
        "{status}"
    );
    assert!(
        status["broker"]["resubscribes"].as_u64() >= Some(1),
        "{status}"
    );
    assert_eq!(status["broker"]["live_gaps"], 0, "{status}");
    // The channels' pub/sub connection, and the control connection (API and presence
    // messages between nodes) when its watch fired too: both went through the silenced relay.
    let metrics = node.metrics();
    let dead_links: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("c1m_broker_pubsub_dead_links_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no dead-link counter in\n{metrics}"));
    assert!((1..=2).contains(&dead_links), "{metrics}");
}
