//! Kernel counters and numeric sysctls as text under a [`Root`]: the paired-line format of
//! /proc/net/netstat and /proc/net/snmp, /proc/net/sockstat(6), and sysctls that hold one or
//! more integers. Parsers take `&str` so tests feed them text; readers take the root so tests
//! feed them a fake tree.

use super::root::Root;
use anyhow::{Context, Result};
use std::collections::HashMap;

/// Reads `rel` (e.g. "proc/net/netstat") under `root`, with the path in the error.
pub fn read_rel(root: &Root, rel: &str) -> Result<String> {
    root.read_to_string(rel)
}

/// Reads a sysctl by dotted key (`net.core.somaxconn`) under `root`/proc/sys, whitespace normalised.
pub fn sysctl(root: &Root, key: &str) -> Result<String> {
    root.read_sysctl(key)?
        .with_context(|| format!("sysctl {key} not present under {}", root.dir().display()))
}

/// Reads a sysctl holding whitespace-separated integers (`tcp_mem`, `ip_local_port_range`).
pub fn sysctl_nums(root: &Root, key: &str) -> Result<Vec<u64>> {
    let text = sysctl(root, key)?;
    text.split_whitespace()
        .map(|w| {
            w.parse::<u64>()
                .with_context(|| format!("{key}: not a number: {w:?}"))
        })
        .collect()
}

/// Reads a one-integer sysctl.
pub fn sysctl_u64(root: &Root, key: &str) -> Result<u64> {
    sysctl_nums(root, key)?
        .first()
        .copied()
        .with_context(|| format!("{key}: empty"))
}

/// Parses the paired-line format of /proc/net/netstat and /proc/net/snmp
/// (`TcpExt: A B C` then `TcpExt: 1 2 3`) into `"TcpExt.A" -> 1`, by header name.
pub fn parse_paired(text: &str, out: &mut HashMap<String, u64>) {
    let mut lines = text.lines();
    while let (Some(head), Some(vals)) = (lines.next(), lines.next()) {
        let (Some((p1, names)), Some((p2, nums))) = (head.split_once(':'), vals.split_once(':'))
        else {
            continue;
        };
        if p1 != p2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(nums.split_whitespace()) {
            // Some snmp fields (Tcp MaxConn) are -1: store them as 0, they are never judged.
            out.insert(format!("{p1}.{n}"), v.parse::<u64>().unwrap_or(0));
        }
    }
}

/// Parses /proc/net/sockstat(6) (`TCP: inuse 5 orphan 0 ...`) into `"TCP.inuse" -> 5`.
pub fn parse_sockstat(text: &str, out: &mut HashMap<String, u64>) {
    for line in text.lines() {
        let Some((proto, rest)) = line.split_once(':') else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        for kv in words.chunks(2) {
            if let [k, v] = kv {
                if let Ok(v) = v.parse::<u64>() {
                    out.insert(format!("{proto}.{k}"), v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_found_by_name_not_position() {
        let mut m = HashMap::new();
        parse_paired(
            "TcpExt: B ListenOverflows\nTcpExt: 7 42\nIpExt: InOctets\nIpExt: 9\n",
            &mut m,
        );
        assert_eq!(m["TcpExt.ListenOverflows"], 42);
        assert_eq!(m["TcpExt.B"], 7);
        assert_eq!(m["IpExt.InOctets"], 9);
    }

    #[test]
    fn sockstat_pairs() {
        let mut m = HashMap::new();
        parse_sockstat(
            "sockets: used 13\nTCP: inuse 1 orphan 2 tw 3 alloc 4 mem 216\n",
            &mut m,
        );
        assert_eq!(m["TCP.mem"], 216);
        assert_eq!(m["TCP.orphan"], 2);
        assert_eq!(m["sockets.used"], 13);
    }
}
