//! `c1m sockets`: counts TCP sockets by state, local port, remote port or remote address.
//!
//! Owns: the grouping and its text/JSON rendering. The rows come from [`source`]: netlink
//! sock_diag on the live box, with the `--state` filter applied by the kernel (so asking for
//! LISTEN among a million ESTABLISHED sockets costs little), or /proc/net/tcp{,6} under a fake
//! `--root`. Counting by state never builds a row at all. Each dump asks for both families at
//! once, so the kernel walks its tables once, not once per family. By state, the kernel's
//! cost is the walk itself: with `--threads 2` one thread walks the connection table and one
//! the bind table. Grouped by port or address, the cost per record dominates, so two threads
//! each dump half the table (split in the kernel by a port filter) and the counts are merged.

pub mod source;

use crate::root::Root;
use anyhow::{Context, Result};
use c1m_sys::sock_diag::{StateMask, TcpState, BOUND_INACTIVE};
use clap::{Args, ValueEnum};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Instant;

/// What to group sockets by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    State,
    Lport,
    Dport,
    Raddr,
}

/// `c1m sockets` arguments.
#[derive(Args, Debug, Clone)]
pub struct SocketsArgs {
    /// Group by TCP state, local port, remote (destination) port or remote address.
    #[arg(long, value_enum, default_value = "state")]
    pub by: By,
    /// Only these states (comma-separated ss names: estab, listen, time-wait, syn-sent, ...);
    /// filtered in the kernel.
    #[arg(long, value_delimiter = ',')]
    pub state: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Show at most this many groups, largest first (0 = all). By state shows all.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Dump threads: 1 dumps the table in one pass; 2 splits the kernel's work over two CPUs
    /// (by state: the connection table and the bind table walked at once; by port or address:
    /// a port filter in the kernel halves the table). Default: 2 when /proc/net/sockstat
    /// counts more than 250,000 TCP sockets and a CPU is idle (1-minute load below CPUs - 1),
    /// else 1.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub threads: Option<u8>,
    /// Root of the tree to read; other than `/`, /proc/net/tcp{,6} under it replace netlink.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

/// Counted groups, largest first (states in kernel order).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Counts {
    pub by: By,
    pub total: u64,
    pub groups: Vec<Group>,
    /// Groups beyond `--limit` that were not shown.
    pub more_groups: usize,
    /// Dump threads used.
    pub threads: u8,
    pub elapsed_ms: f64,
}

/// One group's key and count.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Group {
    pub key: String,
    pub count: u64,
}

/// Parses `--state` names into a kernel filter mask (empty = all states).
pub fn parse_states(names: &[String]) -> Result<StateMask> {
    if names.is_empty() {
        return Ok(StateMask::ALL);
    }
    let mut states = Vec::new();
    for n in names {
        if n.eq_ignore_ascii_case("all") {
            return Ok(StateMask::ALL);
        }
        states.push(TcpState::parse(n).with_context(|| {
            let known: Vec<_> = TcpState::ALL.iter().map(|s| s.name()).collect();
            format!("unknown state {n:?}; known: {}", known.join(", "))
        })?);
    }
    Ok(StateMask::of(&states))
}

/// From this many TCP sockets on, `--threads` defaults to 2. Two threads cost ~1.5x the CPU
/// (each walks every hash bucket; measured 1.69 s vs 1.14 s at 1M sockets) for ~0.75x the
/// wall time; below this size one pass takes under a quarter second anyway.
const PARALLEL_FROM: u64 = 250_000;

/// Whether to dump with two threads: as asked, or by the table's size (an O(1) read of
/// /proc/net/sockstat) and whether a second CPU is free. On a busy box the second thread
/// only adds its walk of the table to the queue (measured: 1.94 s vs 1.37 s at 1M sockets
/// with the other builders' load), so the load average decides.
fn parallel(args: &SocketsArgs, root: &Root) -> bool {
    if let Some(t) = args.threads {
        return t > 1;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut st = HashMap::new();
    if let Ok(text) = root.read_to_string("/proc/net/sockstat") {
        crate::doctor::sample::parse_sockstat(&text, &mut st);
    }
    let sockets = st.get("TCP.inuse").unwrap_or(&0) + st.get("TCP.tw").unwrap_or(&0);
    let load1: f64 = root
        .read_to_string("/proc/loadavg")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::MAX);
    root.is_live() && cpus >= 2 && sockets >= PARALLEL_FROM && load1 < (cpus - 1) as f64
}

/// Counts per state. On the live box ESTABLISHED is derived from the kernel's own counter,
/// /proc/net/snmp `Tcp: CurrEstab`, which counts ESTABLISHED and CLOSE_WAIT sockets of this
/// network namespace in both families (RFC 1213's tcpCurrEstab, as Linux keeps it; the live
/// test checks it against a full dump), so only the other states are dumped and CLOSE_WAIT is
/// subtracted. The kernel still walks the whole table but builds no message for an established
/// socket, which is most of the cost: 0.07 s instead of 0.37 s at 336K sockets, 300K of them
/// established (2026-11-22). The readings are microseconds apart, like any two socket counts.
///
/// Bound-but-inactive sockets (reported as UNCONN) cost a second walk, of the bind table,
/// where every bound socket sits (2M at 1M loopback connections). It is skipped when
/// /proc/net/sockstat proves there are none: see [`no_unhashed_tcp`].
fn count_by_state(root: &Root, mask: StateMask, parallel: bool) -> Result<[u64; 16]> {
    let mut mask = mask;
    if root.is_live() && mask.0 & BOUND_INACTIVE.0 != 0 && no_unhashed_tcp(root) {
        mask = StateMask(mask.0 & !BOUND_INACTIVE.0);
    }
    let estab = TcpState::Established as usize;
    let close_wait = TcpState::CloseWait as usize;
    let (estab_bit, close_wait_bit) = (1u32 << estab, 1u32 << close_wait);
    if root.is_live() && mask.0 & estab_bit != 0 {
        if let Some(current) = curr_estab(root) {
            let dumped = StateMask((mask.0 & !estab_bit) | close_wait_bit);
            let mut per = source::count_states(root, dumped, parallel)?;
            per[estab] = current.saturating_sub(per[close_wait]);
            if mask.0 & close_wait_bit == 0 {
                per[close_wait] = 0;
            }
            return Ok(per);
        }
    }
    source::count_states(root, mask, parallel)
}

/// Whether /proc/net/sockstat{,6} show that every TCP socket in existence is in a hash table
/// (listening, connected, or connecting), so none is bound-but-inactive and the bind-table
/// walk would find nothing.
///
/// `TCP: alloc` counts every TCP socket of both families alive on the box (all network
/// namespaces: IPv6 shares the counter), from socket() or accept until it is closed;
/// `TCP: inuse` and `TCP6: inuse` count this namespace's hashed ones. A bound-but-inactive
/// socket is alive and unhashed, so `alloc - inuse - inuse6 >= its count`, and when the
/// difference is 0 there is none. Any other unhashed socket on the box (one just made by
/// socket(), one in another namespace) only makes this answer "walk", never a wrong count.
/// TIME-WAIT and request sockets are in neither counter.
fn no_unhashed_tcp(root: &Root) -> bool {
    let mut st = HashMap::new();
    let Ok(text) = root.read_to_string("/proc/net/sockstat") else {
        return false;
    };
    crate::doctor::sample::parse_sockstat(&text, &mut st);
    if let Ok(text6) = root.read_to_string("/proc/net/sockstat6") {
        crate::doctor::sample::parse_sockstat(&text6, &mut st);
    }
    let (Some(alloc), Some(inuse)) = (st.get("TCP.alloc"), st.get("TCP.inuse")) else {
        return false;
    };
    let inuse6 = st.get("TCP6.inuse").copied().unwrap_or(0);
    alloc.saturating_sub(inuse + inuse6) == 0
}

/// `Tcp: CurrEstab` from /proc/net/snmp, if readable.
fn curr_estab(root: &Root) -> Option<u64> {
    let text = root.read_to_string("/proc/net/snmp").ok()?;
    let mut counters = HashMap::new();
    crate::doctor::sample::parse_paired(&text, &mut counters);
    counters.get("Tcp.CurrEstab").copied()
}

/// Counts sockets as `args` asks.
pub fn count(args: &SocketsArgs) -> Result<Counts> {
    let start = Instant::now();
    let mask = parse_states(&args.state)?;
    let root = Root::new(args.root.clone());
    let parallel = parallel(args, &root);
    let mut groups: Vec<Group>;
    if args.by == By::State {
        let per = count_by_state(&root, mask, parallel)?;
        groups = (0..16u8)
            .filter(|&s| per[s as usize] > 0)
            .map(|s| Group {
                key: source::state_name(s),
                count: per[s as usize],
            })
            .collect();
    } else {
        // Key by number/address first so a million rows do not format a million strings.
        type Acc = (HashMap<u16, u64>, HashMap<IpAddr, u64>);
        let by = args.by;
        let parts = source::fold(
            &root,
            mask,
            parallel,
            Acc::default,
            |(ports, addrs), r| match by {
                By::Lport => *ports.entry(r.local.port()).or_default() += 1,
                By::Dport => *ports.entry(r.remote.port()).or_default() += 1,
                By::Raddr => *addrs.entry(r.remote.ip()).or_default() += 1,
                By::State => unreachable!("handled above"),
            },
        )?;
        let (mut ports, mut addrs) = Acc::default();
        for (p, a) in parts {
            for (k, v) in p {
                *ports.entry(k).or_default() += v;
            }
            for (k, v) in a {
                *addrs.entry(k).or_default() += v;
            }
        }
        groups = ports
            .into_iter()
            .map(|(p, count)| Group {
                key: p.to_string(),
                count,
            })
            .chain(addrs.into_iter().map(|(a, count)| Group {
                key: a.to_string(),
                count,
            }))
            .collect();
        groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    }
    let total = groups.iter().map(|g| g.count).sum();
    let mut more_groups = 0;
    if args.by != By::State && args.limit > 0 && groups.len() > args.limit {
        more_groups = groups.len() - args.limit;
        groups.truncate(args.limit);
    }
    Ok(Counts {
        by: args.by,
        total,
        groups,
        more_groups,
        threads: if parallel { 2 } else { 1 },
        elapsed_ms: start.elapsed().as_secs_f64() * 1e3,
    })
}

/// Renders counts as an aligned two-column table.
pub fn render_text(c: &Counts) -> String {
    let head = match c.by {
        By::State => "STATE",
        By::Lport => "LPORT",
        By::Dport => "DPORT",
        By::Raddr => "RADDR",
    };
    let w = c
        .groups
        .iter()
        .map(|g| g.key.len())
        .chain([head.len(), 5])
        .max()
        .unwrap_or(5);
    let mut out = format!("{head:<w$}  {:>10}\n", "COUNT");
    for g in &c.groups {
        out.push_str(&format!("{:<w$}  {:>10}\n", g.key, g.count));
    }
    if c.more_groups > 0 {
        out.push_str(&format!(
            "({} more groups; --limit 0 shows all)\n",
            c.more_groups
        ));
    }
    out.push_str(&format!("{:<w$}  {:>10}\n", "TOTAL", c.total));
    out
}

/// `c1m sockets`.
pub fn run_sockets(args: SocketsArgs) -> Result<u8> {
    let c = count(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else {
        print!("{}", render_text(&c));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_root(sockstat: &str, sockstat6: Option<&str>) -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
        std::fs::write(dir.path().join("proc/net/sockstat"), sockstat).unwrap();
        if let Some(s6) = sockstat6 {
            std::fs::write(dir.path().join("proc/net/sockstat6"), s6).unwrap();
        }
        let root = Root::new(dir.path().to_path_buf());
        (dir, root)
    }

    #[test]
    fn bind_table_walk_skipped_only_when_sockstat_proves_it_empty() {
        let v4 = |inuse: u64, alloc: u64| {
            format!("sockets: used 9\nTCP: inuse {inuse} orphan 0 tw 3 alloc {alloc} mem 1\n")
        };
        let v6 = |inuse: u64| format!("TCP6: inuse {inuse}\nUDP6: inuse 0\n");
        // Every allocated socket is hashed (v4 + v6): no bound-inactive socket can exist.
        let (_d, r) = fake_root(&v4(5, 7), Some(&v6(2)));
        assert!(no_unhashed_tcp(&r));
        // One socket alive and unhashed (bound-only, or just created): walk.
        let (_d, r) = fake_root(&v4(5, 8), Some(&v6(2)));
        assert!(!no_unhashed_tcp(&r));
        // No IPv6 on the box: sockstat6 missing counts as 0 hashed v6 sockets.
        let (_d, r) = fake_root(&v4(5, 5), None);
        assert!(no_unhashed_tcp(&r));
        let (_d, r) = fake_root(&v4(5, 7), None);
        assert!(!no_unhashed_tcp(&r));
        // Unreadable or unexpected: walk.
        let (_d, r) = fake_root("TCP: inuse 5\n", None);
        assert!(!no_unhashed_tcp(&r));
    }
}
