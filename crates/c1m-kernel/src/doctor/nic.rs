//! NIC receive drops: the kernel's per-interface counters under
//! /sys/class/net/IFACE/statistics (rx_dropped, rx_missed_errors, rx_fifo_errors,
//! rx_over_errors: Documentation/ABI/testing/sysfs-class-net-statistics) and, on a live box
//! with ethtool installed, the driver's own drop counters (`ethtool -S`) and ring sizes
//! (`ethtool -g`), so a fix can name the ring size to set.
//!
//! Owns: reading and parsing those. Loopback is skipped: it has no ring.

use crate::root::Root;
use std::collections::BTreeMap;
use std::process::Command;

/// The sysfs counters that mean "a packet arrived and was not delivered".
pub const SYSFS_DROPS: &[&str] = &[
    "rx_dropped",
    "rx_missed_errors",
    "rx_fifo_errors",
    "rx_over_errors",
];

/// Receive-drop counters of one interface: sysfs names, then `ethtool:NAME` for driver ones.
pub type Counters = BTreeMap<String, u64>;

/// Every non-loopback interface's drop counters.
pub fn read(root: &Root) -> BTreeMap<String, Counters> {
    let mut out = BTreeMap::new();
    let Ok(ifaces) = root.list_subdirs("/sys/class/net") else {
        return out;
    };
    for dir in ifaces {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_string) else {
            continue;
        };
        if name == "lo" {
            continue;
        }
        let mut c = Counters::new();
        for stat in SYSFS_DROPS {
            let path = dir.join("statistics").join(stat);
            if let Ok(Some(v)) = root.read_opt(&path) {
                if let Ok(n) = v.trim().parse() {
                    c.insert((*stat).to_string(), n);
                }
            }
        }
        if root.is_live() {
            if let Some(text) = ethtool(&["-S", &name]) {
                for (k, v) in parse_ethtool_drops(&text) {
                    c.insert(format!("ethtool:{k}"), v);
                }
            }
        }
        out.insert(name, c);
    }
    out
}

/// Runs ethtool when it is installed; None when it is not, or the driver has no answer.
fn ethtool(args: &[&str]) -> Option<String> {
    let out = Command::new("ethtool").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The driver counters of `ethtool -S` whose names say a packet was lost on receive.
pub fn parse_ethtool_drops(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once(':')?;
            let k = k.trim();
            let lossy = [
                "drop", "miss", "no_buf", "nobuf", "fifo", "overrun", "discard",
            ]
            .iter()
            .any(|w| k.contains(w));
            (lossy && (k.starts_with("rx") || k.contains("_rx")))
                .then(|| Some((k.to_string(), v.trim().parse().ok()?)))
                .flatten()
        })
        .collect()
}

/// RX ring (current, maximum) from `ethtool -g` text.
pub fn parse_ring(text: &str) -> Option<(u64, u64)> {
    let mut max = None;
    let mut cur = None;
    let mut in_max = false;
    for l in text.lines() {
        if l.starts_with("Pre-set maximums") {
            in_max = true;
        } else if l.starts_with("Current hardware settings") {
            in_max = false;
        } else if let Some(v) = l.strip_prefix("RX:") {
            let v = v.trim().parse().ok();
            if in_max {
                max = v;
            } else {
                cur = v;
            }
        }
    }
    Some((cur?, max?))
}

/// The RX ring of `iface` on a live box (None elsewhere or without ethtool).
pub fn ring(root: &Root, iface: &str) -> Option<(u64, u64)> {
    if !root.is_live() {
        return None;
    }
    parse_ring(&ethtool(&["-g", iface])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_text() {
        let s = "NIC statistics:\n     rx_packets: 10\n     rx_queue_0_drops: 3\n     rx_missed: 2\n     tx_dropped: 9\n     rx_no_buffer_count: 1\n";
        assert_eq!(
            parse_ethtool_drops(s),
            vec![
                ("rx_queue_0_drops".to_string(), 3),
                ("rx_missed".to_string(), 2),
                ("rx_no_buffer_count".to_string(), 1)
            ]
        );
        let g = "Ring parameters for eth0:\nPre-set maximums:\nRX:\t\t4096\nTX:\t\t4096\nCurrent hardware settings:\nRX:\t\t512\nTX:\t\t512\n";
        assert_eq!(parse_ring(g), Some((512, 4096)));
    }
}
