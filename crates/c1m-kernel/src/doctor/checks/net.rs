//! Network checks: listen backlogs against somaxconn, ephemeral ports per destination,
//! conntrack fill and softnet (per-CPU input queue) drops.

use super::{over, pct, ratio_status, skipped, with_target};
use crate::doctor::recommend::recommended;
use crate::doctor::{Ctx, Finding, Status};

/// Destinations listed in a port-use finding.
const MAX_LISTED: usize = 5;

pub fn somaxconn(ctx: &Ctx) -> Finding {
    const N: &str = "net.somaxconn";
    let Ok(somaxconn) = ctx.sysctl_u64("net.core.somaxconn") else {
        return skipped(N, "net.core.somaxconn not readable");
    };
    let Some(listeners) = &ctx.listeners else {
        let why = ctx.sockets_error.as_deref().unwrap_or("unknown error");
        return skipped(N, format!("listening sockets could not be listed: {why}"));
    };
    let full: Vec<_> = listeners
        .iter()
        .filter(|l| l.backlog.is_some_and(|b| l.queued >= b))
        .collect();
    let capped = listeners
        .iter()
        .filter(|l| l.backlog == Some(somaxconn as u32))
        .count();
    let max_backlog = listeners.iter().filter_map(|l| l.backlog).max();
    let mut f = Finding::new(
        N,
        Status::Pass,
        format!(
            "somaxconn {somaxconn}; {} listeners, largest backlog {}, {capped} capped at somaxconn",
            listeners.len(),
            max_backlog.map_or("unknown".into(), |b| b.to_string())
        ),
    );
    if !full.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "{} listeners have a full accept queue now (somaxconn {somaxconn})",
            full.len()
        );
        for l in full.iter().take(MAX_LISTED) {
            f = f.detail(format!(
                "{} accept queue {}/{}",
                l.local,
                l.queued,
                l.backlog.unwrap_or(0)
            ));
        }
        f = f.fix(format!(
            "sysctl -w net.core.somaxconn={}  # and a larger listen() backlog; the server is not accepting fast enough",
            somaxconn.saturating_mul(2)
        ));
    }
    if let Some(w) = recommended(ctx, "net.core.somaxconn").filter(|w| w.need1() > somaxconn) {
        f.status = f.status.max(Status::Warn);
        f.summary
            .push_str(&format!("; the target needs somaxconn >= {}", w.need1()));
        f = f.fix(format!("sysctl -w net.core.somaxconn={}", w.value1()));
    }
    f
}

pub fn ephemeral_ports(ctx: &Ctx) -> Finding {
    const N: &str = "net.ephemeral-ports";
    let (lo, hi) = match ctx.sysctl_nums("net.ipv4.ip_local_port_range").as_deref() {
        Ok([lo, hi]) if hi >= lo => (*lo, *hi),
        _ => return skipped(N, "net.ipv4.ip_local_port_range not readable"),
    };
    let Some(uses) = &ctx.port_use else {
        let why = ctx.sockets_error.as_deref().unwrap_or("unknown error");
        return skipped(N, format!("sockets could not be listed: {why}"));
    };
    let size = hi - lo + 1;
    let Some(top) = uses.first() else {
        return Finding::new(
            N,
            Status::Pass,
            format!("no outgoing connections; {size} ports in ip_local_port_range {lo}-{hi}"),
        );
    };
    let status = ratio_status(top.used, size);
    let mut f = Finding::new(
        N,
        status,
        format!(
            "busiest: {} -> {} uses {} of {size} ephemeral ports ({}%)",
            top.source,
            top.dest,
            top.used,
            pct(top.used, size)
        ),
    );
    for u in uses.iter().take(MAX_LISTED) {
        f = f.detail(format!(
            "{} -> {}: {} ports ({}%)",
            u.source,
            u.dest,
            u.used,
            pct(u.used, size)
        ));
    }
    if status != Status::Pass {
        let range = recommended(ctx, "net.ipv4.ip_local_port_range")
            .filter(|w| w.value.len() == 2)
            .map(|w| w.value_str())
            .unwrap_or_else(|| {
                // The table's client range: a server's plan does not size it.
                let (plo, phi) = crate::tune::calc::PORT_RANGE;
                format!("{} {}", plo.min(lo), phi.max(hi))
            });
        f = f
            .fix(format!("sysctl -w net.ipv4.ip_local_port_range=\"{range}\""))
            .fix("spread connections over more source addresses (c1m bench --source CIDR; IP_BIND_ADDRESS_NO_PORT)");
    }
    f
}

pub fn conntrack(ctx: &Ctx) -> Finding {
    const N: &str = "net.conntrack";
    let Some((count, max)) = ctx.after.conntrack else {
        return skipped(N, "nf_conntrack not loaded (no connection tracking)");
    };
    let st = ratio_status(count, max);
    let f = Finding::new(
        N,
        st,
        format!(
            "{count} of nf_conntrack_max {max} entries ({}%)",
            pct(count, max)
        ),
    );
    with_target(ctx, f, "net.netfilter.nf_conntrack_max", max)
}

pub fn softnet(ctx: &Ctx) -> Finding {
    const N: &str = "net.softnet";
    let (Some(a), Some(b)) = (ctx.before.softnet, ctx.after.softnet) else {
        return skipped(N, "/proc/net/softnet_stat not readable");
    };
    let dropped = b.dropped.saturating_sub(a.dropped);
    let squeeze = b.time_squeeze.saturating_sub(a.time_squeeze);
    let status = if dropped > 0 {
        Status::Fail
    } else if squeeze > 0 {
        Status::Warn
    } else {
        Status::Pass
    };
    let mut f = Finding::new(
        N,
        status,
        format!(
            "softnet dropped +{dropped}, time_squeeze +{squeeze} {} ({} dropped since boot)",
            over(ctx),
            b.dropped
        ),
    );
    // kernel-facts.md: raise only while drops grow, doubling each time.
    let doubled = |key: &str| {
        ctx.sysctl_u64(key).map_or_else(
            |_| format!("sysctl -w {key}=<twice the current value>"),
            |cur| format!("sysctl -w {key}={}", cur.saturating_mul(2)),
        )
    };
    if dropped > 0 {
        f = f.fix(doubled("net.core.netdev_max_backlog"));
    }
    if squeeze > 0 {
        f = f.fix(doubled("net.core.netdev_budget"));
    }
    f
}
