//! TCP counter checks: accept and SYN queue overflows, memory against tcp_mem, orphans and
//! TIME_WAIT. Counters that only ever grow are judged by how much they rose during the
//! interval; totals since boot are mentioned but never fail a box that has since recovered.

use super::{over, pct, ratio_status, skipped, with_target};
use crate::doctor::recommend::recommended;
use crate::doctor::{Ctx, Finding, Status};

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
    let somaxconn = ctx.sysctl_u64("net.core.somaxconn").unwrap_or(0);
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
    // The plan's value when a target was given, else twice the current one.
    let want = recommended(ctx, "net.core.somaxconn")
        .map_or(0, |w| w.value1())
        .max(somaxconn.saturating_mul(2));
    f.fix(format!(
        "sysctl -w net.core.somaxconn={want}  # then restart the server with a larger listen() backlog; accept faster"
    ))
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
    let backlog = ctx.sysctl_u64("net.ipv4.tcp_max_syn_backlog").unwrap_or(0);
    let somaxconn = ctx.sysctl_u64("net.core.somaxconn").unwrap_or(0);
    let want = |key: &str, cur: u64| {
        recommended(ctx, key)
            .map_or(0, |w| w.value1())
            .max(cur.saturating_mul(2))
    };
    let mut f = Finding::new(
        N,
        status,
        format!(
            "TCPReqQFullDrop +{drop}, TCPReqQFullDoCookies +{cookies}, SyncookiesSent +{sent} {}",
            over(ctx)
        ),
    )
    .fix(format!(
        "sysctl -w net.ipv4.tcp_max_syn_backlog={} net.core.somaxconn={}",
        want("net.ipv4.tcp_max_syn_backlog", backlog),
        want("net.core.somaxconn", somaxconn)
    ));
    if drop > 0 && ctx.sysctl_u64("net.ipv4.tcp_syncookies").ok() == Some(0) {
        f = f.fix("sysctl -w net.ipv4.tcp_syncookies=1");
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
    let mut f = Finding::new(N, status, summary);
    if status != Status::Pass {
        f = f.fix(match &rec {
            Some(w) => format!("sysctl -w net.ipv4.tcp_mem=\"{}\"", w.value_str()),
            None => "c1m tune --conns <target> --check   # sizes net.ipv4.tcp_mem from RAM".into(),
        });
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
    let st = ratio_status(orphan, max);
    let f = Finding::new(
        N,
        st,
        format!(
            "{orphan} orphaned sockets of tcp_max_orphans {max} ({}%)",
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
