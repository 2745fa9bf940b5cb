//! One reading of the kernel's counters under a root directory: /proc/net/netstat and snmp
//! (by header name), sockstat, softnet_stat, file-nr, conntrack. Doctor reads two of these an
//! interval apart and judges the deltas; `top` reads one per tick.
//!
//! Owns: parsing softnet_stat, file-nr and conntrack, and the [`Sample`] that gathers every
//! counter; the netstat/snmp/sockstat and sysctl readers it builds on live in c1m-sys (the
//! serve dashboard reads them too). Parsers take `&str` so tests feed them text.

use crate::root::Root;
use anyhow::{Context, Result};
use std::collections::HashMap;

// Re-exported so doctor, sockets and top read every counter helper from this one module.
pub use c1m_sys::procfs::{
    parse_paired, parse_sockstat, read_rel, sysctl, sysctl_nums, sysctl_u64,
};

/// Sums of /proc/net/softnet_stat over CPUs (hex columns: processed, dropped, time_squeeze).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Softnet {
    pub processed: u64,
    pub dropped: u64,
    pub time_squeeze: u64,
}

/// Parses /proc/net/softnet_stat.
pub fn parse_softnet(text: &str) -> Result<Softnet> {
    let mut s = Softnet::default();
    for (i, line) in text.lines().enumerate() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 3 {
            anyhow::bail!("softnet_stat line {}: fewer than 3 columns", i + 1);
        }
        let hex = |c: &str| {
            u64::from_str_radix(c, 16).with_context(|| format!("softnet_stat: bad hex {c:?}"))
        };
        s.processed += hex(cols[0])?;
        s.dropped += hex(cols[1])?;
        s.time_squeeze += hex(cols[2])?;
    }
    Ok(s)
}

/// One reading of every counter doctor and top judge. Missing files leave fields empty/None:
/// a check that needs them reports `skipped`.
#[derive(Debug, Default, Clone)]
pub struct Sample {
    /// `"TcpExt.ListenOverflows"` style keys from netstat and snmp.
    pub counters: HashMap<String, u64>,
    /// `"TCP.inuse"` style keys from sockstat and sockstat6 (the latter as `TCP6.inuse`).
    pub sockstat: HashMap<String, u64>,
    pub softnet: Option<Softnet>,
    /// fs/file-nr: allocated handles and file-max.
    pub file_nr: Option<(u64, u64)>,
    /// nf_conntrack count and max, when the module is loaded.
    pub conntrack: Option<(u64, u64)>,
    /// Receive-drop counters per network interface (loopback aside).
    pub nic: std::collections::BTreeMap<String, super::nic::Counters>,
}

impl Sample {
    /// Reads every counter under `root`; a missing file is not an error, a malformed one is.
    pub fn read(root: &Root) -> Result<Sample> {
        let mut s = Sample::default();
        for rel in ["proc/net/netstat", "proc/net/snmp"] {
            if let Ok(text) = read_rel(root, rel) {
                parse_paired(&text, &mut s.counters);
            }
        }
        if let Ok(text) = read_rel(root, "proc/net/sockstat") {
            parse_sockstat(&text, &mut s.sockstat);
        }
        if let Ok(text) = read_rel(root, "proc/net/sockstat6") {
            parse_sockstat(&text, &mut s.sockstat);
        }
        if let Ok(text) = read_rel(root, "proc/net/softnet_stat") {
            s.softnet = Some(parse_softnet(&text)?);
        }
        if let Ok(v) = sysctl_nums(root, "fs.file-nr") {
            if v.len() == 3 {
                s.file_nr = Some((v[0], v[2]));
            }
        }
        if let (Ok(c), Ok(m)) = (
            sysctl_u64(root, "net.netfilter.nf_conntrack_count"),
            sysctl_u64(root, "net.netfilter.nf_conntrack_max"),
        ) {
            s.conntrack = Some((c, m));
        }
        s.nic = super::nic::read(root);
        Ok(s)
    }

    /// A netstat/snmp counter, 0 when the kernel lacks it.
    pub fn counter(&self, key: &str) -> u64 {
        self.counters.get(key).copied().unwrap_or(0)
    }

    /// Whether the kernel exposes this counter at all.
    pub fn has_counter(&self, key: &str) -> bool {
        self.counters.contains_key(key)
    }

    /// How much `key` grew from `earlier` to `self` (0 if it went backwards, e.g. a netns reset).
    pub fn delta(&self, earlier: &Sample, key: &str) -> u64 {
        self.counter(key).saturating_sub(earlier.counter(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softnet_hex_sums() {
        let s =
            parse_softnet("0000001d 00000002 0000000a 0\n00000001 00000010 00000001 0\n").unwrap();
        assert_eq!(
            s,
            Softnet {
                processed: 0x1e,
                dropped: 0x12,
                time_squeeze: 0xb
            }
        );
        assert!(parse_softnet("zz 1 2\n").is_err());
    }
}
