//! The environment a report is measured in: kernel, CPUs, RAM, the sysctls that bound
//! connection counts, fd limits, and a UTC timestamp. Read from /proc; missing files are left
//! out rather than failing the run.

use serde_json::{json, Map, Value};
use std::time::{SystemTime, UNIX_EPOCH};

const SYSCTLS: &[&str] = &[
    "net/ipv4/ip_local_port_range",
    "net/ipv4/tcp_mem",
    "net/ipv4/tcp_rmem",
    "net/ipv4/tcp_wmem",
    "net/ipv4/tcp_max_syn_backlog",
    "net/ipv4/tcp_tw_reuse",
    "net/ipv4/tcp_fin_timeout",
    "net/core/somaxconn",
    "net/core/netdev_max_backlog",
    "net/netfilter/nf_conntrack_max",
    "fs/file-max",
    "fs/nr_open",
];

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

pub fn environment() -> Value {
    let mut sysctls = Map::new();
    for key in SYSCTLS {
        if let Some(v) = read_trim(&format!("/proc/sys/{key}")) {
            sysctls.insert(key.replace('/', "."), Value::String(v));
        }
    }
    let mem_total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    let nofile = c1m_sys::rlimit::nofile().ok();
    // Whether this kernel has IP_LOCAL_PORT_RANGE (6.3+): probe it on a throwaway socket.
    let port_range_sockopt =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .ok()
            .map(|s| c1m_sys::sockopt::set_local_port_range(&s, 32768, 60999).is_ok());
    json!({
        "kernel": read_trim("/proc/sys/kernel/osrelease"),
        "cpus": c1m_sys::process::available_cpus(),
        "cpu_model": cpu_model,
        "mem_total_bytes": mem_total,
        "nofile_soft": nofile.map(|n| n.soft),
        "nofile_hard": nofile.map(|n| n.hard),
        "ip_local_port_range_sockopt": port_range_sockopt,
        "sysctls": sysctls,
    })
}

/// `2026-11-22T04:02:17Z` for a Unix time in seconds (civil-from-days, proleptic Gregorian).
pub fn utc_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub fn now_utc() -> String {
    utc_string(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc() {
        assert_eq!(utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_string(1_709_251_199), "2024-02-29T23:59:59Z");
        let env = environment();
        assert!(env["cpus"].as_u64().unwrap() >= 1);
    }
}
