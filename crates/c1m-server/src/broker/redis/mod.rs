//! The Redis broker (`--broker redis://HOST:PORT[/DB]`, `redis+cluster://H1:P1,…` for Redis
//! Cluster, or `redis+sentinel://S1:P1,…/MASTER` for one Redis whose master Sentinel names):
//! ids, history and cross-node delivery live in Redis; this node subscribes once per
//! channel that has local subscribers, not per client.
//!
//! # Layout
//! - The master-side state machine, one for both modes: `broker` ([`RedisBroker`], requests
//!   and answers) and `channels` (subscriptions, syncs and joins: exactly-once per node).
//! - The transport, one for both modes: `protocol` (what the state machine and the threads
//!   say to each other), `commands` (batches, scripts by EVALSHA with NOSCRIPT retry,
//!   pipelines, reconnection with backoff), `pubsub` (pub/sub connections and their pushes,
//!   the push kind as a parameter, and the control link every mode holds for control
//!   messages and presence events) over `pubsub_conn` (the socket), and `shared`.
//! - The modes, each only what differs: `single` (one Redis, fixed or named by Sentinel: asked
//!   again on every reconnection), `cluster` (slot routing by
//!   `slots`, MOVED/ASK) with `cluster_subs` (a sharded pub/sub connection per master).
//! - The data model: `script` (one Redis' Lua scripts and their answers), `cluster_script`
//!   (the per-channel model a cluster needs) and `presence` (member sets, every mode);
//!   `target`, the parsed URL.

mod broker;
mod channels;
mod cluster;
mod cluster_script;
mod cluster_subs;
mod commands;
mod presence;
mod protocol;
mod pubsub;
mod pubsub_conn;
mod script;
mod shared;
mod single;
pub(crate) mod slots;
mod target;

pub use broker::RedisBroker;

/// A parsed `--broker` URL (and `--broker-ca`): one Redis, a Redis Cluster's seeds, or the
/// Sentinels that name one Redis master.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    Single(Box<target::Target>),
    Cluster(target::ClusterTarget),
    Sentinel(target::SentinelTarget),
}

impl RedisTarget {
    pub fn parse(url: &str, ca: Option<&std::path::Path>) -> anyhow::Result<RedisTarget> {
        if target::is_cluster(url) {
            return target::parse_cluster(url, ca).map(RedisTarget::Cluster);
        }
        if target::is_sentinel(url) {
            return target::parse_sentinel(url, ca).map(RedisTarget::Sentinel);
        }
        target::parse(url, ca).map(|t| RedisTarget::Single(Box::new(t)))
    }
}

/// The Redis Cluster hash slot of a key (the tests compare it with `CLUSTER KEYSLOT`).
pub use slots::key_slot;

/// True when `--broker` names a Redis Cluster, whose ids are per channel: a subscription to
/// several channels cannot resume from one last id there (see docs/cluster.md).
pub fn is_cluster(url: &str) -> bool {
    target::is_cluster(url)
}

/// A broker URL as it may be printed (password replaced).
pub fn redact(url: &str) -> String {
    target::redact(url)
}
