//! Redis Cluster's pub/sub side: which master each subscribed channel is on, and one sharded
//! pub/sub connection per such master (a thread each, made when first needed, left when its
//! last channel goes). A channel whose subscription ends (`SUNSUBSCRIBE` pushed when its slot
//! moved, `MOVED` to `SSUBSCRIBE`, the connection lost or silent) is reported
//! `Incoming::Lost`: the state machine subscribes it again and catches it up from history
//! after the last id it forwarded, so a resharding costs a catch-up, never a loss or a repeat.
//! Each of those events also marks the slot map stale, for the command thread to read again.

use super::protocol::Incoming;
use super::pubsub::{self, Kind, Owner, Push};
use super::pubsub_conn::{self, Writer};
use super::shared::{Link, Shared};
use super::slots;
use super::target::{ClusterTarget, Target};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The pub/sub side: channels by master, and those masters' connections (write halves; each
/// read half has its thread).
pub struct Subs {
    state: Mutex<SubsState>,
    target: ClusterTarget,
    pub link: Link,
    /// The slot map is out of date (a MOVED, a lost node): the command thread reads it again.
    pub stale: AtomicBool,
}

#[derive(Default)]
struct SubsState {
    nodes: HashMap<String, NodeSubs>,
    /// Channel → the master its SSUBSCRIBE went to.
    at: HashMap<String, String>,
}

#[derive(Default)]
struct NodeSubs {
    writer: Option<Writer>,
    /// Channels subscribed (or being subscribed) on this master.
    channels: HashSet<String>,
    /// SSUBSCRIBEs to send once the connection is up (one per request: each is confirmed).
    queued: Vec<String>,
    /// A thread owns this master's connection.
    running: bool,
}

impl Subs {
    pub fn new(target: ClusterTarget, link: Link) -> Arc<Subs> {
        Arc::new(Subs {
            state: Mutex::new(SubsState::default()),
            target,
            link,
            stale: AtomicBool::new(true),
        })
    }

    fn lock(&self) -> MutexGuard<'_, SubsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribes `channel` on master `addr`, starting that master's thread when needed.
    pub fn subscribe(self: &Arc<Self>, channel: String, addr: String) {
        let mut st = self.lock();
        if let Some(old) = st.at.insert(channel.clone(), addr.clone()) {
            if old != addr {
                if let Some(node) = st.nodes.get_mut(&old) {
                    node.channels.remove(&channel);
                    // Not sent there yet: it must not be sent when that master is back.
                    node.queued.retain(|c| *c != channel);
                }
            }
        }
        let node = st.nodes.entry(addr.clone()).or_default();
        node.channels.insert(channel.clone());
        if !pubsub_conn::write_or_shut(&mut node.writer, &Kind::Sharded.command(true, &channel)) {
            node.queued.push(channel);
        }
        if !node.running {
            node.running = true;
            let link = NodeLink {
                subs: self.clone(),
                addr: addr.clone(),
            };
            let spawned = std::thread::Builder::new()
                .name("c1m-redis-ssub".into())
                .spawn(move || pubsub::link_thread(&link));
            if spawned.is_err() {
                // The node's channels are reported lost: subscribed again (and this retried).
                if let Some(node) = st.nodes.get_mut(&addr) {
                    node.running = false;
                }
                let all: Vec<String> = st
                    .nodes
                    .get(&addr)
                    .map(|n| n.channels.iter().cloned().collect())
                    .unwrap_or_default();
                let lost = self.take(&mut st, &addr, all);
                drop(st);
                self.report_lost(lost);
            }
        }
    }

    pub fn unsubscribe(&self, channel: &str) {
        let mut st = self.lock();
        let Some(addr) = st.at.remove(channel) else {
            return;
        };
        if let Some(node) = st.nodes.get_mut(&addr) {
            node.channels.remove(channel);
            node.queued.retain(|c| c != channel);
            pubsub_conn::write_or_shut(&mut node.writer, &Kind::Sharded.command(false, channel));
        }
    }

    /// Takes `channels` off master `addr` (where they still are) and returns them.
    fn take(&self, st: &mut SubsState, addr: &str, channels: Vec<String>) -> Vec<String> {
        let mut out = Vec::new();
        for ch in channels {
            if st.at.get(&ch).is_some_and(|a| a == addr) {
                st.at.remove(&ch);
                if let Some(node) = st.nodes.get_mut(addr) {
                    node.channels.remove(&ch);
                    node.queued.retain(|c| *c != ch);
                }
                out.push(ch);
            }
        }
        out
    }

    fn report_lost(&self, channels: impl IntoIterator<Item = String>) -> bool {
        for ch in channels {
            if !self.link.send(Incoming::Lost(ch)) {
                return false;
            }
        }
        true
    }

    /// Every channel on master `addr` lost its subscription (connection down or dead).
    fn lose_all(&self, addr: &str) -> bool {
        let lost = {
            let mut st = self.lock();
            let all: Vec<String> = st
                .nodes
                .get(addr)
                .map(|n| n.channels.iter().chain(&n.queued).cloned().collect())
                .unwrap_or_default();
            if let Some(node) = st.nodes.get_mut(addr) {
                if let Some(w) = node.writer.take() {
                    w.shutdown();
                }
            }
            self.take(&mut st, addr, all)
        };
        self.stale.store(true, Ordering::SeqCst);
        self.report_lost(lost)
    }
}

/// One master's pub/sub connection, as its thread sees it.
struct NodeLink {
    subs: Arc<Subs>,
    addr: String,
}

impl Owner for NodeLink {
    fn shared(&self) -> &Shared {
        &self.subs.link.shared
    }

    fn shown(&self) -> &str {
        &self.addr
    }

    fn target(&self) -> anyhow::Result<Target> {
        self.subs
            .target
            .node(&self.addr)
            .map_err(|e| anyhow::anyhow!("{e:#}"))
    }

    fn kind(&self) -> Kind {
        Kind::Sharded
    }

    fn up(&self, writer: Writer) -> bool {
        let mut st = self.subs.lock();
        let node = st.nodes.entry(self.addr.clone()).or_default();
        node.writer = Some(writer);
        for ch in std::mem::take(&mut node.queued) {
            pubsub_conn::write_or_shut(&mut node.writer, &Kind::Sharded.command(true, &ch));
        }
        true
    }

    fn push(&self, push: Push) -> bool {
        let subs = &self.subs;
        match push {
            Push::Message {
                channel,
                id,
                payload,
            } => subs.link.send(Incoming::Message {
                channel,
                id,
                payload,
            }),
            // Member presence is per node under Redis Cluster: no events come this way.
            Push::Presence { .. } => true,
            Push::Subscribed(channel) => subs.link.send(Incoming::Subscribed(channel)),
            // Sharded connections never subscribe to the control name.
            Push::Control(_) => true,
            Push::Unsubscribed(channel) => {
                // Ours (a leave) when the channel is no longer recorded here; else Redis ended
                // it: its slot moved.
                let lost = {
                    let mut st = subs.lock();
                    subs.take(&mut st, &self.addr, vec![channel])
                };
                if !lost.is_empty() {
                    subs.stale.store(true, Ordering::SeqCst);
                }
                subs.report_lost(lost)
            }
            Push::Moved(slot) => {
                // MOVED to an SSUBSCRIBE: the map was stale; every channel of that slot waiting
                // here is subscribed again where the slot is now.
                subs.stale.store(true, Ordering::SeqCst);
                let lost = {
                    let mut st = subs.lock();
                    let in_slot: Vec<String> = st
                        .nodes
                        .get(&self.addr)
                        .map(|n| {
                            n.channels
                                .iter()
                                .filter(|c| {
                                    slots::key_slot(Kind::Sharded.name(c).as_bytes()) == slot
                                })
                                .cloned()
                                .collect()
                        })
                        .unwrap_or_default();
                    subs.take(&mut st, &self.addr, in_slot)
                };
                subs.report_lost(lost)
            }
            Push::Refused(error) => {
                // E.g. CLUSTERDOWN while a failover is under way. The refusal does not name its
                // channel and the subscription will not be confirmed, so every channel here is
                // subscribed again (and caught up) on a new connection, after the backoff.
                tracing::warn!(node = %self.addr, error = %error, "redis cluster refused a subscription; subscribing this node's channels again");
                subs.lose_all(&self.addr)
            }
            Push::Unreadable(_) | Push::Other => true,
        }
    }

    fn ping(&self) -> bool {
        let mut st = self.subs.lock();
        let Some(node) = st.nodes.get_mut(&self.addr) else {
            return false;
        };
        pubsub_conn::write_or_shut(&mut node.writer, &redis::cmd("PING"))
    }

    fn down(&self, _connected: bool) -> bool {
        self.subs.lose_all(&self.addr)
    }

    /// Stays while the master holds channels; otherwise the thread ends.
    fn stay(&self) -> bool {
        let mut st = self.subs.lock();
        let node = st.nodes.entry(self.addr.clone()).or_default();
        if node.channels.is_empty() && node.queued.is_empty() {
            node.running = false;
            return false;
        }
        true
    }

    fn label(&self) -> String {
        format!("redis cluster node {}", self.addr)
    }
}
