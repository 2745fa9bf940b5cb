//! Splitting one run among agents: each agent gets a contiguous range of global connection
//! indices (so channel `i mod K` and template `{i}` mean the same as on one box), its part of
//! the open and churn rates, its source addresses, and its own workers (sized by its fd limit
//! and CPUs), numbered globally so reports from every box land in one table.

use super::limits::{AgentLimits, FD_RESERVE};
use crate::plan;
use crate::wire::WorkerConfig;
use anyhow::bail;
use std::net::IpAddr;

/// How connections are divided among agents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SplitBy {
    /// The same number for every agent.
    Even,
    /// In proportion to each agent's reported capacity (ports per pair × addresses, memory).
    Capacity,
}

/// One agent's share of the run.
#[derive(Debug, Clone)]
pub struct AgentShare {
    pub first_conn: u64,
    pub conns: u64,
    pub sources: Vec<IpAddr>,
    pub port_range: Option<(u16, u16)>,
    /// Its workers' configs, global indices from `workers.start`.
    pub workers: Vec<WorkerConfig>,
}

/// What the split needs besides the agents' limits.
pub struct SplitInput<'a> {
    /// The whole run as one worker config (every field but the per-share ones is kept).
    pub template: &'a WorkerConfig,
    pub conns: u64,
    pub rate: f64,
    pub churn_rate: f64,
    /// `--source` as given to the coordinator, dealt out in contiguous chunks.
    pub sources: &'a [IpAddr],
    /// `--port-range`: None = each agent's system range where its kernel can set it.
    pub port_range: Option<&'a str>,
    /// `--workers`: per agent in a fleet run.
    pub workers_per_agent: Option<usize>,
    pub by: SplitBy,
}

pub fn split(input: &SplitInput, agents: &[AgentLimits]) -> anyhow::Result<Vec<AgentShare>> {
    let n = agents.len();
    if n == 0 {
        bail!("no agents");
    }
    if input.conns < n as u64 {
        bail!(
            "{} connections cannot be split over {n} agents",
            input.conns
        );
    }
    let counts = match input.by {
        SplitBy::Even => plan::split(input.conns, n)
            .into_iter()
            .map(|(_, c)| c)
            .collect(),
        SplitBy::Capacity => weighted(
            input.conns,
            &agents.iter().map(|a| a.capacity()).collect::<Vec<_>>(),
        ),
    };
    // The coordinator's --source is dealt out only when some agent has no addresses of its own.
    let chunks = if input.sources.is_empty() || agents.iter().all(|a| !a.sources.is_empty()) {
        Vec::new()
    } else {
        if input.sources.len() < n {
            bail!(
                "--source has {} address(es) for {n} agents: give each agent at least one, or \
                 start each agent with its own --source",
                input.sources.len()
            );
        }
        plan::split(input.sources.len() as u64, n)
            .into_iter()
            .map(|(f, c)| input.sources[f as usize..(f + c) as usize].to_vec())
            .collect()
    };
    let mut out = Vec::with_capacity(n);
    let (mut first, mut index) = (0u64, 0usize);
    for (i, (a, &conns)) in agents.iter().zip(&counts).enumerate() {
        let sources = if !a.sources.is_empty() {
            a.sources.clone()
        } else if let Some(c) = chunks.get(i) {
            c.clone()
        } else if input.template.dst.ip().is_loopback() && input.template.dst.is_ipv4() {
            plan::auto_loopback_sources(conns, a.per_pair(), input.template.dst.ip())
        } else {
            Vec::new()
        };
        let port_range = match input.port_range {
            Some("off") => None,
            Some(s) => Some(parse_range(s)?),
            None => a.port_range_sockopt.then_some(a.port_range),
        };
        let per_worker_fds = a.nofile_hard.saturating_sub(FD_RESERVE).max(16);
        let w = input
            .workers_per_agent
            .unwrap_or_else(|| plan::worker_count(conns, a.cpus, per_worker_fds))
            .clamp(1, conns.max(1) as usize);
        let workers = plan::split(conns, w)
            .into_iter()
            .map(|(f, c)| {
                let mut cfg = input.template.clone();
                cfg.index = index;
                index += 1;
                cfg.first_conn = first + f;
                cfg.conns = c;
                cfg.rate = input.rate * c as f64 / input.conns as f64;
                cfg.churn_rate = input.churn_rate * c as f64 / input.conns as f64;
                cfg.sources = sources.clone();
                cfg.port_range = port_range;
                cfg
            })
            .collect();
        out.push(AgentShare {
            first_conn: first,
            conns,
            sources,
            port_range,
            workers,
        });
        first += conns;
    }
    Ok(out)
}

/// `total` divided in proportion to `weights` (largest remainders first), every part ≥ 1.
fn weighted(total: u64, weights: &[u64]) -> Vec<u64> {
    let n = weights.len() as u64;
    let spare = total - n;
    let sum: u128 = weights.iter().map(|&w| u128::from(w.max(1))).sum();
    let mut parts: Vec<(u64, u128)> = weights
        .iter()
        .map(|&w| {
            let exact = u128::from(spare) * u128::from(w.max(1));
            ((exact / sum) as u64 + 1, exact % sum)
        })
        .collect();
    let mut left = total - parts.iter().map(|p| p.0).sum::<u64>();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| parts[b].1.cmp(&parts[a].1));
    for i in order {
        if left == 0 {
            break;
        }
        parts[i].0 += 1;
        left -= 1;
    }
    parts.into_iter().map(|p| p.0).collect()
}

fn parse_range(s: &str) -> anyhow::Result<(u16, u16)> {
    let parsed = s
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)));
    match parsed {
        Some((lo, hi)) if lo < hi => Ok((lo, hi)),
        _ => bail!("bad --port-range {s:?} (want LO-HI or off)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> WorkerConfig {
        serde_json::from_value(serde_json::json!({
            "index": 0, "parent_pid": 1, "proto": "sse", "dst": "10.0.0.1:80", "host": "h",
            "path_template": "/sub/{ch}", "header_template": "", "channel_base": "c",
            "channels": 1, "first_conn": 0, "conns": 10, "rate": 100.0, "max_inflight": 16,
            "connect_timeout_ms": 1000, "reconnect": null, "sources": [], "port_range": null,
            "tick_ms": 250, "max_runtime_ms": 1000
        }))
        .unwrap()
    }

    fn agent(cpus: usize, sources: &[&str]) -> AgentLimits {
        AgentLimits {
            nofile_soft: 1024,
            nofile_hard: 1024,
            cpus,
            mem_available_bytes: 1 << 40,
            port_range: (32768, 60999),
            port_range_sockopt: false,
            sources: sources.iter().map(|s| s.parse().unwrap()).collect(),
        }
    }

    fn input<'a>(
        t: &'a WorkerConfig,
        conns: u64,
        sources: &'a [IpAddr],
        by: SplitBy,
    ) -> SplitInput<'a> {
        SplitInput {
            template: t,
            conns,
            rate: 900.0,
            churn_rate: 0.0,
            sources,
            port_range: None,
            workers_per_agent: None,
            by,
        }
    }

    #[test]
    fn even_split_is_contiguous_and_numbers_workers_globally() {
        let t = template();
        let agents = [agent(1, &[]), agent(2, &[]), agent(1, &[])];
        let shares = split(&input(&t, 3001, &[], SplitBy::Even), &agents).unwrap();
        assert_eq!(
            shares.iter().map(|s| s.conns).collect::<Vec<_>>(),
            [1001, 1000, 1000]
        );
        let workers: Vec<&WorkerConfig> = shares.iter().flat_map(|s| &s.workers).collect();
        // Each share is above the 960 fds a worker may hold (1024 - 64): two workers each.
        assert_eq!(workers.len(), 6);
        let mut next = 0;
        for (i, w) in workers.iter().enumerate() {
            assert_eq!(w.index, i);
            assert_eq!(w.first_conn, next, "contiguous global connection indices");
            next += w.conns;
        }
        assert_eq!(next, 3001);
        let rate: f64 = workers.iter().map(|w| w.rate).sum();
        assert!((rate - 900.0).abs() < 1e-6, "{rate}");
    }

    #[test]
    fn sources_are_dealt_out_unless_the_agent_has_its_own() {
        let t = template();
        let list: Vec<IpAddr> = ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let agents = [agent(1, &[]), agent(1, &[])];
        let shares = split(&input(&t, 10, &list, SplitBy::Even), &agents).unwrap();
        assert_eq!(shares[0].sources, list[..2]);
        assert_eq!(shares[1].sources, list[2..]);
        let own = [agent(1, &["10.9.0.1"]), agent(1, &["10.9.0.2"])];
        let shares = split(&input(&t, 10, &list, SplitBy::Even), &own).unwrap();
        assert_eq!(
            shares[1].sources,
            vec!["10.9.0.2".parse::<IpAddr>().unwrap()]
        );
        let err = split(&input(&t, 10, &list[..1], SplitBy::Even), &agents).unwrap_err();
        assert!(
            err.to_string().contains("1 address(es) for 2 agents"),
            "{err}"
        );
    }

    #[test]
    fn capacity_split_follows_addresses() {
        let t = template();
        let agents = [
            agent(1, &["10.9.0.1"]),
            agent(1, &["10.9.0.2", "10.9.0.3", "10.9.0.4"]),
        ];
        let shares = split(&input(&t, 1002, &[], SplitBy::Capacity), &agents).unwrap();
        // One part each up front, the other 1000 as 1 : 3.
        assert_eq!((shares[0].conns, shares[1].conns), (251, 751));
        assert_eq!(weighted(10, &[0, 0, 0]), vec![4, 3, 3]);
    }
}
