//! TCP counter checks: accept and SYN queue overflows, memory against tcp_mem, orphans and
//! TIME_WAIT. Counters that only ever grow are judged by how much they rose during the
//! interval; totals since boot are mentioned but never fail a box that has since recovered.
//! Orphans are judged with the kernel's ×2/×4 penalty; tcp_mem's max against half of RAM.

use super::{fixes, over, pct, ratio_status, skipped, with_target};
use crate::doctor::recommend::recommended;
use crate::doctor::{Ctx, Finding, Status};
use crate::tune::calc::TCP_MEM_RAM_PCT;
use crate::tune::units::human_bytes;

pub fn accept_queue(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.accept-queue";
    if !ctx.after.has_counter("TcpExt.ListenOverflows") {
        return skipped(N, "TcpExt ListenOverflows not in /proc/net/netstat");
    }
    let ovf = ctx.after.delta(&ctx.before, "TcpExt.ListenOverflows");
    let drops = ctx.after.delta(&ctx.before, "TcpExt.ListenDrops");
    let total = ctx.after.counter("TcpExt.ListenOverflows");
    if ovf == 0 && drops == 0 {
        return Finding::new(
            N,
            Status::Pass,
            format!(
                "no accept queue overflow {} ({total} ListenOverflows since boot)",
                over(ctx)
            ),
        );
    }
    let mut f = Finding::new(
        N,
        Status::Fail,
        format!(
            "ListenOverflows +{ovf}, ListenDrops +{drops} {}: a listener's accept queue is full, SYNs/ACKs are dropped",
            over(ctx)
        ),
    );
    for l in ctx.listeners.iter().flatten() {
        if let Some(b) = l.backlog {
            if l.queued >= b {
                f = f.detail(format!(
                    "{} accept queue {}/{} (full)",
                    l.local, l.queued, b
                ));
            }
        }
    }
    // Accept-queue overflow is somaxconn and the listen backlog, nothing else.
    for cmd in fixes::listen_queue(ctx) {
        f = f.fix(cmd);
    }
    f
}

pub fn syn_queue(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.syn-queue";
    if !ctx.after.has_counter("TcpExt.TCPReqQFullDrop") {
        return skipped(N, "TcpExt TCPReqQFullDrop not in /proc/net/netstat");
    }
    let drop = ctx.after.delta(&ctx.before, "TcpExt.TCPReqQFullDrop");
    let cookies = ctx.after.delta(&ctx.before, "TcpExt.TCPReqQFullDoCookies");
    let sent = ctx.after.delta(&ctx.before, "TcpExt.SyncookiesSent");
    if drop == 0 && cookies == 0 && sent == 0 {
        return Finding::new(
            N,
            Status::Pass,
            format!("no SYN queue drops or syncookies {}", over(ctx)),
        );
    }
    let status = if drop > 0 { Status::Fail } else { Status::Warn };
    let cookies_on = ctx.sysctl_u64("net.ipv4.tcp_syncookies").ok() != Some(0);
    let mut f = Finding::new(
        N,
        status,
        format!(
            "TCPReqQFullDrop +{drop}, TCPReqQFullDoCookies +{cookies}, SyncookiesSent +{sent} {}; {}",
            over(ctx),
            if cookies_on {
                "syncookies are on, so the SYN queue is bounded by the listen backlog (tcp_max_syn_backlog bounds nothing)"
            } else {
                "syncookies are OFF: SYNs beyond tcp_max_syn_backlog are dropped"
            }
        ),
    );
    for cmd in fixes::listen_queue(ctx) {
        f = f.fix(cmd);
    }
    f
}

pub fn memory(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.memory";
    let Some(&mem) = ctx.after.sockstat.get("TCP.mem") else {
        return skipped(N, "TCP mem not in /proc/net/sockstat");
    };
    let tcp_mem = match ctx.sysctl_nums("net.ipv4.tcp_mem").as_deref() {
        Ok([a, b, c]) => [*a, *b, *c],
        _ => return skipped(N, "net.ipv4.tcp_mem not readable"),
    };
    let aborts = ctx.after.delta(&ctx.before, "TcpExt.TCPAbortOnMemory");
    let pressures = ctx.after.delta(&ctx.before, "TcpExt.TCPMemoryPressures");
    let mut status = if mem >= tcp_mem[1] || aborts > 0 {
        Status::Fail
    } else if mem >= tcp_mem[0] || pressures > 0 {
        Status::Warn
    } else {
        Status::Pass
    };
    let mut summary = format!(
        "TCP mem {mem} pages of tcp_mem {} {} {} ({}% of pressure); TCPAbortOnMemory +{aborts}, TCPMemoryPressures +{pressures} {}",
        tcp_mem[0],
        tcp_mem[1],
        tcp_mem[2],
        pct(mem, tcp_mem[1]),
        over(ctx)
    );
    let rec = recommended(ctx, "net.ipv4.tcp_mem").filter(|w| w.need.len() == 3);
    if let (Some(conns), Some(w)) = (ctx.target_conns, &rec) {
        if tcp_mem[2] < w.need[2] {
            status = status.max(Status::Warn);
            summary.push_str(&format!(
                "; {conns} connections need tcp_mem max >= {}",
                w.need[2]
            ));
        }
    }
    // A max above half of RAM: TCP may take memory the processes need before pressure mode
    // (tcp_mem[1]) ever starts, so the OOM killer acts first.
    if let Some(h) = ctx.host {
        let max_bytes = tcp_mem[2].saturating_mul(h.page_size);
        if max_bytes > h.mem_bytes / 100 * TCP_MEM_RAM_PCT {
            status = status.max(Status::Warn);
            summary.push_str(&format!(
                "; tcp_mem max is {} of {} RAM, above {TCP_MEM_RAM_PCT} %: memory pressure would start only after the OOM killer",
                human_bytes(max_bytes),
                human_bytes(h.mem_bytes)
            ));
        }
    }
    let mut f = Finding::new(N, status, summary);
    if status != Status::Pass {
        f = f.fix(fixes::tcp_mem(ctx));
    }
    f
}

pub fn orphans(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.orphans";
    let Some(&orphan) = ctx.after.sockstat.get("TCP.orphan") else {
        return skipped(N, "TCP orphan not in /proc/net/sockstat");
    };
    let Ok(max) = ctx.sysctl_u64("net.ipv4.tcp_max_orphans") else {
        return skipped(N, "net.ipv4.tcp_max_orphans not readable");
    };
    // The kernel compares orphans << shift with the max, shift 1 or 2 for sockets whose peer
    // kept its window shut or after soft ICMP errors (tcp_out_of_resources): resets can start
    // at a quarter of the limit, and at half only two doublings are needed.
    let st = if orphan.saturating_mul(2) >= max {
        Status::Fail
    } else if orphan.saturating_mul(4) >= max {
        Status::Warn
    } else {
        Status::Pass
    };
    let f = Finding::new(
        N,
        st,
        format!(
            "{orphan} orphaned sockets of tcp_max_orphans {max} ({}%; counted ×2 or ×4 under the kernel's penalty, resets can start at 25%)",
            pct(orphan, max)
        ),
    );
    with_target(ctx, f, "net.ipv4.tcp_max_orphans", max)
}

pub fn time_wait(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.time-wait";
    let Some(&tw) = ctx.after.sockstat.get("TCP.tw") else {
        return skipped(N, "TCP tw not in /proc/net/sockstat");
    };
    let Ok(max) = ctx.sysctl_u64("net.ipv4.tcp_max_tw_buckets") else {
        return skipped(N, "net.ipv4.tcp_max_tw_buckets not readable");
    };
    let overflow = ctx.after.delta(&ctx.before, "TcpExt.TCPTimeWaitOverflow");
    let fill = ratio_status(tw, max);
    // Overflow means connections closed without TIME_WAIT protection: always a failure.
    let status = if overflow > 0 { Status::Fail } else { fill };
    let f = Finding::new(
        N,
        status,
        format!(
            "{tw} TIME_WAIT of tcp_max_tw_buckets {max} ({}%); TCPTimeWaitOverflow +{overflow} {}",
            pct(tw, max),
            over(ctx)
        ),
    );
    with_target(ctx, f, "net.ipv4.tcp_max_tw_buckets", max)
}
