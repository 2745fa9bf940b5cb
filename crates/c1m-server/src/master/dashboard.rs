//! The master's half of `/dashboard`: once a second, while any worker reports a viewer, one
//! JSON snapshot (the `/status` figures, per-worker gauges, the latency histograms and the
//! kernel counters that matter at scale) goes to the workers that hold viewers. The kernel
//! files are read here, at most once a second, with c1m-sys's procfs readers (the ones doctor
//! and top use). Rates are computed by the page from successive totals.

use super::status::Report;
use super::Master;
use crate::histogram::BOUNDS_US;
use crate::ipc::ToWorker;
use c1m_sys::procfs::{parse_paired, parse_sockstat, read_rel, sysctl_nums, Root};
use serde_json::{json, Value};
use std::collections::HashMap;

impl Master {
    pub(super) fn push_dashboard(&mut self) {
        let viewers: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i].stats.dashboard_viewers > 0)
            .collect();
        if viewers.is_empty() {
            return;
        }
        let report = Report::gather(self);
        let snapshot = snapshot(&report, &kernel_figures(&Root::live())).to_string();
        let frame = ToWorker::Dashboard { json: snapshot }.encode();
        for i in viewers {
            self.send(i, frame.clone());
        }
    }
}

/// The snapshot: `/status` as is, plus what only the dashboard shows.
fn snapshot(report: &Report, kernel: &Value) -> Value {
    let mut v: Value = serde_json::from_str(&report.json()).unwrap_or_else(|_| json!({}));
    let workers: Vec<Value> = report
        .gauges
        .iter()
        .map(|g| {
            json!({"index": g.index, "connections": g.connections,
                   "unsent_bytes": g.unsent_bytes, "rss_bytes": g.rss_bytes})
        })
        .collect();
    let histograms: serde_json::Map<String, Value> = report
        .latency
        .fields()
        .iter()
        .map(|(name, _, h)| {
            (
                name.to_string(),
                json!({"counts": h.counts, "sum_us": h.sum_us}),
            )
        })
        .collect();
    if let Some(obj) = v.as_object_mut() {
        obj.insert("time_ms".into(), json!(unix_millis()));
        obj.insert("worker_gauges".into(), json!(workers));
        obj.insert("histograms".into(), Value::Object(histograms));
        obj.insert("bounds_us".into(), json!(BOUNDS_US));
        obj.insert("kernel".into(), kernel.clone());
    }
    v
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// ListenOverflows/ListenDrops (since boot), TCP orphans and memory (pages) against tcp_mem.
/// A file that cannot be read gives nulls and an `errors` entry, not a failed snapshot.
pub fn kernel_figures(root: &Root) -> Value {
    let mut errors = Vec::new();
    let mut netstat = HashMap::new();
    match read_rel(root, "/proc/net/netstat") {
        Ok(text) => parse_paired(&text, &mut netstat),
        Err(e) => errors.push(format!("{e:#}")),
    }
    let mut sockstat = HashMap::new();
    match read_rel(root, "/proc/net/sockstat") {
        Ok(text) => parse_sockstat(&text, &mut sockstat),
        Err(e) => errors.push(format!("{e:#}")),
    }
    let tcp_mem = match sysctl_nums(root, "net.ipv4.tcp_mem") {
        Ok(v) if v.len() == 3 => json!(v),
        Ok(_) => Value::Null,
        Err(e) => {
            errors.push(format!("{e:#}"));
            Value::Null
        }
    };
    json!({
        "listen_overflows": netstat.get("TcpExt.ListenOverflows"),
        "listen_drops": netstat.get("TcpExt.ListenDrops"),
        "tcp_orphans": sockstat.get("TCP.orphan"),
        "tcp_inuse": sockstat.get("TCP.inuse"),
        "tcp_mem_pages": sockstat.get("TCP.mem"),
        "tcp_mem_limits_pages": tcp_mem,
        "errors": errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_figures_come_from_a_fake_proc_tree() {
        let dir = std::env::temp_dir().join(format!("c1m-dash-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("proc/net")).unwrap();
        std::fs::create_dir_all(dir.join("proc/sys/net/ipv4")).unwrap();
        std::fs::write(
            dir.join("proc/net/netstat"),
            "TcpExt: ListenOverflows ListenDrops\nTcpExt: 7 9\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("proc/net/sockstat"),
            "sockets: used 5\nTCP: inuse 3 orphan 2 tw 0 alloc 4 mem 11\n",
        )
        .unwrap();
        std::fs::write(dir.join("proc/sys/net/ipv4/tcp_mem"), "100\t200\t300\n").unwrap();
        let v = kernel_figures(&Root::new(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(v["listen_overflows"], 7);
        assert_eq!(v["listen_drops"], 9);
        assert_eq!(v["tcp_orphans"], 2);
        assert_eq!(v["tcp_mem_pages"], 11);
        assert_eq!(v["tcp_mem_limits_pages"], json!([100, 200, 300]));
        assert_eq!(v["errors"], json!([]));
    }
}
