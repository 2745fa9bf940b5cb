//! What one load box can hold, as its agent reports it before a run ([`AgentLimits`]), and the
//! agent's check of the share a coordinator gives it ([`check_plan`]): a share that cannot fit
//! (a worker above the fd limit, more connections per (source, destination) pair than the
//! ephemeral port range has ports) is refused with the reason; one that comes close (above
//! the per-pair rule `c1m tune` uses, or above an estimate of free memory) runs with warnings.

use crate::wire::WorkerConfig;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// Descriptors a worker keeps for itself besides its connections (epoll, pipes, stdio).
pub const FD_RESERVE: u64 = 64;

/// Memory a held connection costs a load box, for the warning only: kernel socket state at
/// rest (~2-3 KiB) plus bench's own (~1 KiB), rounded up generously.
pub const EST_BYTES_PER_CONN: u64 = 8 * 1024;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AgentLimits {
    /// RLIMIT_NOFILE after raising the soft limit to the hard one (per process).
    pub nofile_soft: u64,
    pub nofile_hard: u64,
    pub cpus: usize,
    /// MemAvailable from /proc/meminfo, bytes.
    pub mem_available_bytes: u64,
    /// net.ipv4.ip_local_port_range.
    pub port_range: (u16, u16),
    /// Whether the kernel has IP_LOCAL_PORT_RANGE (Linux 6.3+).
    pub port_range_sockopt: bool,
    /// Source addresses the agent was started with (`--source`); empty: the coordinator's
    /// share of its `--source`, or the kernel's choice.
    pub sources: Vec<IpAddr>,
}

impl AgentLimits {
    /// Ports per (source, destination) pair under the rule `c1m tune` and `c1m doctor` use.
    pub fn per_pair(&self) -> u64 {
        crate::plan::default_per_source(self.port_range)
    }

    /// Connections this box can hold to one destination: ports per pair times addresses,
    /// and not above what its free memory holds (the estimate above).
    pub fn capacity(&self) -> u64 {
        let ports = self.per_pair() * self.sources.len().max(1) as u64;
        ports
            .min(self.mem_available_bytes / EST_BYTES_PER_CONN)
            .max(1)
    }
}

/// This box's limits, raising the fd soft limit to the hard one first (as workers do).
pub fn gather(sources: Vec<IpAddr>) -> anyhow::Result<AgentLimits> {
    let nofile = c1m_sys::rlimit::raise_nofile_to_hard().context("raise RLIMIT_NOFILE")?;
    let mem = c1m_sys::procfs::Root::new("/")
        .meminfo()
        .context("read /proc/meminfo")?;
    Ok(AgentLimits {
        nofile_soft: nofile.soft,
        nofile_hard: nofile.hard,
        cpus: c1m_sys::process::available_cpus(),
        mem_available_bytes: mem.get("MemAvailable").unwrap_or(0),
        port_range: crate::plan::system_port_range(),
        port_range_sockopt: crate::plan::port_range_sockopt_supported(),
        sources,
    })
}

/// Checks a plan against the limits: Err(reason) when it cannot fit, else the warnings.
pub fn check_plan(limits: &AgentLimits, workers: &[WorkerConfig]) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    let mut per_pair: BTreeMap<(Option<IpAddr>, String), u64> = BTreeMap::new();
    let mut total = 0u64;
    for w in workers {
        if w.conns + FD_RESERVE > limits.nofile_hard {
            return Err(format!(
                "worker {} would hold {} connections, above this box's fd limit {} (hard \
                 RLIMIT_NOFILE; raise it or let the coordinator use more workers)",
                w.index, w.conns, limits.nofile_hard
            ));
        }
        if w.port_range.is_some() && !limits.port_range_sockopt {
            return Err(
                "the plan sets a per-socket port range, which this kernel lacks \
                        (IP_LOCAL_PORT_RANGE, Linux 6.3+)"
                    .into(),
            );
        }
        total += w.conns;
        // Connection g binds sources[g % len]: count each pair exactly.
        let n = w.sources.len() as u64;
        for (k, src) in w.sources.iter().enumerate() {
            let k = k as u64;
            let first = (k + n - w.first_conn % n) % n;
            let count = if first < w.conns {
                (w.conns - first).div_ceil(n)
            } else {
                0
            };
            *per_pair.entry((Some(*src), w.dst.to_string())).or_default() += count;
        }
        if w.sources.is_empty() {
            *per_pair.entry((None, w.dst.to_string())).or_default() += w.conns;
        }
    }
    let (lo, hi) = limits.port_range;
    let ports = u64::from(hi.saturating_sub(lo)) + 1;
    let rule = limits.per_pair();
    for ((src, dst), n) in &per_pair {
        let src = src.map_or("the kernel's source address".to_string(), |s| s.to_string());
        if *n > ports {
            return Err(format!(
                "{n} connections from {src} to {dst}, but the ephemeral port range {lo}-{hi} has \
                 {ports} ports per (source, destination); give the agent more addresses with \
                 --source or widen net.ipv4.ip_local_port_range"
            ));
        }
        if *n > rule {
            warnings.push(format!(
                "{n} connections from {src} to {dst}: above {rule} per (source, destination), \
                 where connect() slows down (c1m tune's rule)"
            ));
        }
    }
    let need = total * EST_BYTES_PER_CONN;
    if need > limits.mem_available_bytes {
        warnings.push(format!(
            "{total} connections at ~{} KiB each need ~{} MiB; MemAvailable is {} MiB",
            EST_BYTES_PER_CONN / 1024,
            need >> 20,
            limits.mem_available_bytes >> 20
        ));
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> AgentLimits {
        AgentLimits {
            nofile_soft: 20_000,
            nofile_hard: 20_000,
            cpus: 2,
            mem_available_bytes: 1 << 30,
            port_range: (50_000, 50_999),
            port_range_sockopt: false,
            sources: Vec::new(),
        }
    }

    fn worker(first_conn: u64, conns: u64, sources: &[&str]) -> WorkerConfig {
        serde_json::from_value(serde_json::json!({
            "index": 0, "parent_pid": 1, "proto": "sse", "dst": "10.0.0.1:80", "host": "h",
            "path_template": "/sub/{ch}", "header_template": "", "channel_base": "c",
            "channels": 1, "first_conn": first_conn, "conns": conns, "rate": 0.0,
            "max_inflight": 16, "connect_timeout_ms": 1000, "reconnect": null,
            "sources": sources, "port_range": null, "tick_ms": 250, "max_runtime_ms": 1000
        }))
        .unwrap()
    }

    #[test]
    fn a_share_above_the_ports_or_fds_is_refused_and_one_near_them_warned() {
        let l = limits();
        // 1,000 ports; the rule allows 450 per pair.
        assert_eq!(check_plan(&l, &[worker(0, 400, &[])]), Ok(vec![]));
        let w = check_plan(&l, &[worker(0, 600, &[])]).unwrap();
        assert!(
            w[0].contains("above 450 per (source, destination)"),
            "{w:?}"
        );
        let err = check_plan(&l, &[worker(0, 600, &[]), worker(600, 600, &[])]).unwrap_err();
        assert!(
            err.contains("1200 connections from the kernel's source address"),
            "{err}"
        );
        // Two addresses carry 1,200 as 600 + 600 (connection g binds sources[g % 2]), also
        // when a worker's range starts on an odd index.
        let two = ["10.1.0.1", "10.1.0.2"];
        assert!(check_plan(&l, &[worker(0, 601, &two), worker(601, 599, &two)]).is_ok());
        let err = check_plan(&l, &[worker(0, 20_000, &[])]).unwrap_err();
        assert!(err.contains("above this box's fd limit 20000"), "{err}");
        let mut small = l.clone();
        small.mem_available_bytes = 1 << 20;
        let w = check_plan(&small, &[worker(0, 400, &[])]).unwrap();
        assert!(w[0].contains("MemAvailable is 1 MiB"), "{w:?}");
    }
}
