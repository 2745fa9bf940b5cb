//! A real Redis Cluster for the tests: cluster-enabled `redis-server` masters on loopback ports
//! (each in its own temp dir, with its own bus port), joined by `redis-cli --cluster create`,
//! and the `CLUSTER SETSLOT … MIGRATING/IMPORTING`, `MIGRATE`, `SETSLOT … NODE` steps that move
//! one slot between masters under a running node.

use super::{free_port, Redis};
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Cluster {
    pub nodes: Vec<Redis>,
}

/// True when the installed redis-server is 7 or newer (sharded pub/sub).
fn version_7(server: &str) -> bool {
    let out = Command::new(server).arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let major = text
        .split("v=")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    major.is_some_and(|m| m >= 7)
}

impl Cluster {
    /// `masters` masters, all slots assigned, every node agreeing (cluster_state:ok). None
    /// (skipped) when redis is not installed.
    pub fn start(masters: usize) -> Option<Cluster> {
        Cluster::create(masters, 0, 5000)
    }

    /// `masters` masters each with one replica (nodes `masters..` are the replicas), a short
    /// `cluster-node-timeout` (ms) so a dead master's replica takes over within seconds.
    pub fn start_with_replicas(masters: usize, node_timeout_ms: u32) -> Option<Cluster> {
        Cluster::create(masters, 1, node_timeout_ms)
    }

    fn create(masters: usize, replicas: usize, node_timeout_ms: u32) -> Option<Cluster> {
        let (server, cli) = super::binaries()?;
        assert!(
            version_7(server),
            "redis-server 7 or newer needed (SSUBSCRIBE)"
        );
        // Ports come from free_port() and are bound later: a test starting beside this one
        // may take one first (a node then dies at start). Such a start is tried again.
        let mut failure = String::new();
        for _ in 0..3 {
            match Cluster::try_create(cli, masters, replicas, node_timeout_ms) {
                Ok(cluster) => return Some(cluster),
                Err(e) => failure = e,
            }
        }
        panic!("{failure}");
    }

    fn try_create(
        cli: &str,
        masters: usize,
        replicas: usize,
        node_timeout_ms: u32,
    ) -> Result<Cluster, String> {
        let total = masters * (1 + replicas);
        let timeout = node_timeout_ms.to_string();
        let nodes: Vec<Redis> = (0..total)
            .map(|_| {
                let bus = free_port().to_string();
                Redis::try_start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    &bus,
                    "--cluster-node-timeout",
                    &timeout,
                ])
                .expect("binaries were found above")
            })
            .collect::<Result<_, String>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new(cli)
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = Cluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes.iter().all(|n| {
            n.cli(&[], &["cluster", "info"])
                .contains("cluster_state:ok")
                && n.cli(&[], &["cluster", "nodes"]).lines().count() == total
                && !n
                    .cli(&[], &["info", "replication"])
                    .contains("master_link_status:down")
        }) {
            if Instant::now() > deadline {
                return Err("cluster never became ok".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(cluster)
    }

    /// Every node's address: a seed list that survives any one node's death.
    pub fn url_all(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The index of the replica of master `master`, by node `asked`'s view.
    pub fn replica_of(&self, master: usize, asked: usize) -> usize {
        let id = self.node_id(master);
        let text = self.nodes[asked].cli(&[], &["cluster", "nodes"]);
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if words.len() > 3 && words[2].contains("slave") && words[3] == id {
                let port = words[1]
                    .split('@')
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse::<u16>().ok());
                if let Some(i) = self.nodes.iter().position(|n| Some(n.port) == port) {
                    return i;
                }
            }
        }
        panic!("master {master} has no replica: {text}");
    }

    /// `redis+cluster://` naming the first two masters as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .take(2)
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// `CLUSTER KEYSLOT key`, asked of the real server.
    pub fn keyslot(&self, key: &str) -> u16 {
        self.nodes[0]
            .cli(&[], &["cluster", "keyslot", key])
            .trim()
            .parse()
            .unwrap()
    }

    pub fn node_id(&self, i: usize) -> String {
        self.nodes[i]
            .cli(&[], &["cluster", "myid"])
            .trim()
            .to_string()
    }

    /// Which master (index) serves `slot`, by node `asked`'s view.
    pub fn owner(&self, slot: u16, asked: usize) -> usize {
        let text = self.nodes[asked].cli(&[], &["cluster", "nodes"]);
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(port) = words
                .get(1)
                .and_then(|a| a.split('@').next())
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse::<u16>().ok())
            else {
                continue;
            };
            let serves = words.iter().skip(8).any(|r| {
                let r = r.trim_start_matches('[');
                let mut ends = r.split('-').map(|x| x.parse::<u16>());
                match (ends.next(), ends.next()) {
                    (Some(Ok(a)), Some(Ok(b))) => a <= slot && slot <= b,
                    (Some(Ok(a)), None) => a == slot,
                    _ => false,
                }
            });
            if serves {
                return self.nodes.iter().position(|n| n.port == port).unwrap();
            }
        }
        panic!("no master serves slot {slot}: {text}");
    }

    /// Moves `slot` from master `from` to master `to` the way redis-cli's resharding does,
    /// pausing `step` between the stages so traffic meets each of them (ASK while the keys are
    /// half-way, then MOVED and the source's SUNSUBSCRIBE once the slot is handed over).
    pub fn move_slot(&self, slot: u16, from: usize, to: usize, step: Duration) {
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let (src_id, dst_id) = (self.node_id(from), self.node_id(to));
        let s = slot.to_string();
        let ok = |out: String| assert!(out.contains("OK"), "{out}");
        ok(dst.cli(&[], &["cluster", "setslot", &s, "importing", &src_id]));
        ok(src.cli(&[], &["cluster", "setslot", &s, "migrating", &dst_id]));
        std::thread::sleep(step);
        let keys = src.cli(&[], &["cluster", "getkeysinslot", &s, "1000"]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if !keys.is_empty() {
            let port = dst.port.to_string();
            let mut args = vec!["migrate", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter());
            ok(src.cli(&[], &args));
        }
        std::thread::sleep(step);
        for n in [to, from] {
            ok(self.nodes[n].cli(&[], &["cluster", "setslot", &s, "node", &dst_id]));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if i != to && i != from {
                ok(n.cli(&[], &["cluster", "setslot", &s, "node", &dst_id]));
            }
        }
    }
}
