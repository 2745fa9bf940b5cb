//! The concrete fix commands checks share, computed from the live values and the tune plan:
//! never a placeholder. When the plan sizes the key its value is used, else twice the live
//! value (tcp_mem: up to half of RAM), else twice the kernel default.

use crate::doctor::kmsg::Condition;
use crate::doctor::recommend::recommended;
use crate::doctor::Ctx;
use crate::tune::calc::{tcp_mem_shape, TCP_MEM_RAM_PCT};

/// The plan's value for `key`, else `fallback` doubled.
fn raised(ctx: &Ctx, key: &str, fallback: u64) -> u64 {
    let live = ctx.sysctl_u64(key).unwrap_or(fallback);
    recommended(ctx, key)
        .map_or(0, |w| w.value1())
        .max(live.saturating_mul(2))
}

/// `sysctl -w KEY=V` with V the plan's value or twice the live one (`default` when unreadable).
pub fn raise(ctx: &Ctx, key: &str, default: u64) -> String {
    format!("sysctl -w {key}={}", raised(ctx, key, default))
}

/// tcp_mem: the plan's when there is one; else the live shape doubled, but max never above
/// [`TCP_MEM_RAM_PCT`] of RAM (pressure must start before the OOM killer).
pub fn tcp_mem(ctx: &Ctx) -> String {
    if let Some(w) = recommended(ctx, "net.ipv4.tcp_mem").filter(|w| w.value.len() == 3) {
        return format!("sysctl -w net.ipv4.tcp_mem=\"{}\"", w.value_str());
    }
    let live = ctx.sysctl_nums("net.ipv4.tcp_mem").unwrap_or_default();
    let pressure = live.get(1).copied().unwrap_or(0).saturating_mul(2);
    let cap = ctx
        .host
        .map(|h| h.mem_bytes / 100 * TCP_MEM_RAM_PCT / h.page_size)
        .unwrap_or(u64::MAX);
    let [a, b, c] = if tcp_mem_shape(pressure)[2] > cap {
        tcp_mem_shape(cap / 3 * 2)
    } else {
        tcp_mem_shape(pressure)
    };
    format!("sysctl -w net.ipv4.tcp_mem=\"{a} {b} {c}\"")
}

/// conntrack: the max and the hash buckets together (raising the max alone lengthens chains).
pub fn conntrack(ctx: &Ctx) -> Vec<String> {
    let max = raised(ctx, "net.netfilter.nf_conntrack_max", 65_536);
    vec![
        format!("sysctl -w net.netfilter.nf_conntrack_max={max} net.netfilter.nf_conntrack_buckets={max}"),
        "or exempt the port from tracking: iptables -t raw -A PREROUTING -p tcp --dport PORT -j NOTRACK".into(),
    ]
}

/// Accept and SYN queues: somaxconn, and the server's listen() backlog with it; syncookies
/// back on when someone turned them off (tcp_max_syn_backlog only matters without them).
pub fn listen_queue(ctx: &Ctx) -> Vec<String> {
    let mut out = Vec::new();
    if ctx.sysctl_u64("net.ipv4.tcp_syncookies").ok() == Some(0) {
        out.push("sysctl -w net.ipv4.tcp_syncookies=1".to_string());
    }
    let s = raised(ctx, "net.core.somaxconn", 4096);
    out.push(format!(
        "sysctl -w net.core.somaxconn={s}  # and restart the server with listen() backlog {s} (c1m serve --backlog {s}): with syncookies on, the SYN and accept queues are bounded by the listen backlog, not by tcp_max_syn_backlog"
    ));
    out
}

/// What fixes a kernel-log condition.
pub fn for_condition(ctx: &Ctx, c: Condition) -> Vec<String> {
    match c {
        Condition::Orphans => {
            let mut v = vec![raise(ctx, "net.ipv4.tcp_max_orphans", 65_536)];
            if ctx.sysctl_u64("net.ipv4.tcp_orphan_retries").ok() == Some(0) {
                v.push("sysctl -w net.ipv4.tcp_orphan_retries=3  # orphans give up after ~3 s instead of ~102 s".into());
            }
            v
        }
        Condition::TcpMem => vec![tcp_mem(ctx)],
        Condition::SynFlood => listen_queue(ctx),
        Condition::ConntrackFull => conntrack(ctx),
        Condition::FileMax => vec![raise(ctx, "fs.file-max", 8192)],
        Condition::OomKill => {
            let mut v = vec![
                "dmesg | grep -A30 'invoked oom-killer' | tail -40  # which process, and the slab/TCP figures at the time".to_string(),
            ];
            let high = match (ctx.sysctl_nums("net.ipv4.tcp_mem").ok(), ctx.host) {
                (Some(m), Some(h)) => m.get(2).is_some_and(|&max| {
                    max.saturating_mul(h.page_size) > h.mem_bytes / 100 * TCP_MEM_RAM_PCT
                }),
                _ => false,
            };
            if high {
                v.push(tcp_mem(ctx));
            }
            v
        }
    }
}
