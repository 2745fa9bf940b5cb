//! Network checks: listen backlogs against somaxconn, ephemeral ports per source and
//! destination (the connect() cliff at half of the range; TIME-WAIT sockets connect() may
//! reuse are not counted), listening ports left out of
//! ip_local_reserved_ports, conntrack fill and hash chains, and softnet (per-CPU input
//! queue) drops.

use super::{fixes, over, pct, ratio_status, skipped, with_target};
use crate::doctor::ctx::PortUse;
use crate::doctor::recommend::recommended;
use crate::doctor::{Ctx, Finding, Status};
use crate::params::Role;
use c1m_proto::ports;
use std::net::IpAddr;

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

/// Whether connect() may take over a TIME-WAIT socket's 4-tuple instead of skipping its port
/// (net/ipv4/tcp_ipv4.c tcp_twsk_unique): tcp_tw_reuse 1, or 2 (the default) when either end
/// is loopback; only with TCP timestamps (PAWS keeps the old connection's segments out), and
/// once the TIME-WAIT socket is tcp_tw_reuse_delay old (1 s). A TIME-WAIT socket it cannot
/// take holds its port toward that destination for 60 s.
struct TwReuse {
    mode: u64,
    timestamps: bool,
    delay_ms: u64,
}

impl TwReuse {
    fn read(ctx: &Ctx) -> TwReuse {
        TwReuse {
            mode: ctx.sysctl_u64("net.ipv4.tcp_tw_reuse").unwrap_or(2),
            timestamps: ctx
                .sysctl_u64("net.ipv4.tcp_timestamps")
                .map_or(true, |v| v != 0),
            // Before 6.13 there is no knob: the kernel waits a second.
            delay_ms: ctx
                .sysctl_u64("net.ipv4.tcp_tw_reuse_delay")
                .unwrap_or(1000),
        }
    }

    fn reusable(&self, u: &PortUse) -> bool {
        let loopback = |ip: IpAddr| ip.to_canonical().is_loopback();
        self.timestamps
            && match self.mode {
                1 => true,
                2 => loopback(u.source) || loopback(u.dest.ip()),
                _ => false,
            }
    }

    /// Ports the pair holds: its open sockets, and its TIME-WAIT ones unless connect() may
    /// take them over.
    fn held(&self, u: &PortUse) -> u64 {
        u.used + if self.reusable(u) { 0 } else { u.time_wait }
    }
}

pub fn ephemeral_ports(ctx: &Ctx) -> Finding {
    const N: &str = "net.ephemeral-ports";
    let (lo, hi) = match ctx.sysctl_nums("net.ipv4.ip_local_port_range").as_deref() {
        Ok([lo, hi]) if hi >= lo => (*lo, *hi),
        _ => return skipped(N, "net.ipv4.ip_local_port_range not readable"),
    };
    let Some(all) = &ctx.port_use else {
        let why = ctx.sockets_error.as_deref().unwrap_or("unknown error");
        return skipped(N, format!("sockets could not be listed: {why}"));
    };
    let size = hi - lo + 1;
    let tw = TwReuse::read(ctx);
    let reused: u64 = all
        .iter()
        .filter(|u| tw.reusable(u))
        .map(|u| u.time_wait)
        .sum();
    let reused_note = if reused > 0 {
        let why = if tw.mode == 1 {
            "tcp_tw_reuse=1"
        } else {
            "tcp_tw_reuse=2, a loopback end"
        };
        format!(
            "; {reused} TIME-WAIT sockets not counted: connect() reuses their 4-tuples once they are {} ms old ({why})",
            tw.delay_ms
        )
    } else {
        String::new()
    };
    let mut uses: Vec<&PortUse> = all.iter().filter(|u| tw.held(u) > 0).collect();
    uses.sort_by_key(|u| std::cmp::Reverse(tw.held(u)));
    let Some(top) = uses.first().copied() else {
        return Finding::new(
            N,
            Status::Pass,
            format!(
                "no outgoing connections hold ephemeral ports; {size} ports in ip_local_port_range {lo}-{hi}{reused_note}"
            ),
        );
    };
    let top_used = tw.held(top);
    // connect() scans ports of one parity first: from half of the range per (source,
    // destination) every connect() walks that half (measured: 20-40 µs below, ~1-3 ms above).
    let used_pct = pct(top_used, size);
    let status = if used_pct >= ports::CLIFF_PCT {
        Status::Fail
    } else if used_pct >= ports::PLAN_PCT {
        Status::Warn
    } else {
        Status::Pass
    };
    let top_tw = if tw.reusable(top) { 0 } else { top.time_wait };
    let tw_note = if top_tw > 0 {
        format!(
            " ({top_tw} of them TIME-WAIT, each holding its port toward that destination for 60 s)"
        )
    } else {
        String::new()
    };
    let mut f = Finding::new(
        N,
        status,
        format!(
            "busiest: {} -> {} uses {top_used} of {size} ephemeral ports ({used_pct}%){tw_note}; connect() slows from {}% per source address and destination{reused_note}",
            top.source, top.dest, ports::CLIFF_PCT
        ),
    );
    for u in uses.iter().take(MAX_LISTED) {
        let held = tw.held(u);
        let tw_part = match (u.time_wait, tw.reusable(u)) {
            (0, _) => String::new(),
            (n, true) => format!(", {n} TIME-WAIT reusable"),
            (n, false) => format!(", {n} of them TIME-WAIT"),
        };
        f = f.detail(format!(
            "{} -> {}: {held} ports ({}%){tw_part}",
            u.source,
            u.dest,
            pct(held, size)
        ));
    }
    if status != Status::Pass {
        // TIME-WAIT that connect() could reuse: the cheapest fix, on the box that opens them.
        if top_tw > 0 && !tw.timestamps {
            f = f.fix(
                "sysctl -w net.ipv4.tcp_timestamps=1  # connect() can reuse a TIME-WAIT port only with timestamps (PAWS)",
            );
        } else if top_tw > 0 {
            f = f.fix(
                "sysctl -w net.ipv4.tcp_tw_reuse=1  # on the box that opens these connections (load generator, proxy): connect() reuses a TIME-WAIT port after 1 s",
            );
        }
        let range = recommended(ctx, "net.ipv4.ip_local_port_range")
            .filter(|w| w.value.len() == 2)
            .map(|w| w.value_str())
            .unwrap_or_else(|| {
                // The table's client range: a server's plan does not size it.
                let (plo, phi) = crate::tune::calc::PORT_RANGE;
                format!("{} {}", plo.min(lo), phi.max(hi))
            });
        let wide =
            (crate::tune::calc::PORT_RANGE.1 - crate::tune::calc::PORT_RANGE.0 + 1).max(size);
        let total: u64 = uses
            .iter()
            .filter(|u| u.dest == top.dest)
            .map(|u| tw.held(u))
            .sum();
        let want = ctx.target_conns.unwrap_or(total).max(total);
        if wide > size {
            f = f.fix(format!(
                "sysctl -w net.ipv4.ip_local_port_range=\"{range}\"  # {} ports; then {} for {want} connections to {}",
                wide,
                sources(ports::sources_needed(want, wide)),
                top.dest
            ));
        }
        let (keep, per) = (ports::sources_needed(want, size), ports::per_pair(size));
        f = f.fix(format!(
            "{}use {} towards {} ({per} connections each, under half of the range): {}",
            if wide > size {
                "or, keeping this range, "
            } else {
                ""
            },
            sources(keep),
            top.dest,
            how_to_add_sources(ctx.role)
        ));
    }
    f
}

fn sources(n: u64) -> String {
    if n == 1 {
        "1 source address".to_string()
    } else {
        format!("{n} source addresses")
    }
}

/// Where the extra source addresses go, for the program that opens the connections.
fn how_to_add_sources(role: Role) -> String {
    const BIND: &str = "bind() each socket to its source address with IP_BIND_ADDRESS_NO_PORT set, so the port is chosen at connect() when the destination is known and one port can serve several destinations";
    match role {
        Role::Proxy => format!("add the addresses to this host, then in HAProxy repeat each `server` line once per address with `source ADDR` (bench/proxy-ports.sh), in nginx use `proxy_bind` over them; a proxy of your own should {BIND}"),
        Role::Client => format!("c1m bench --source 127.0.0.0/24 on loopback (or a range of this host's addresses); in your own client, {BIND}"),
        Role::Server => format!("in the program that opens these connections, {BIND}"),
    }
}

/// Listening ports inside the ephemeral range that ip_local_reserved_ports does not hold back:
/// an outgoing connection can take the port while the server restarts (EADDRINUSE).
pub fn reserved_ports(ctx: &Ctx) -> Finding {
    const N: &str = "net.reserved-ports";
    let (lo, hi) = match ctx.sysctl_nums("net.ipv4.ip_local_port_range").as_deref() {
        Ok([lo, hi]) if hi >= lo => (*lo, *hi),
        _ => return skipped(N, "net.ipv4.ip_local_port_range not readable"),
    };
    let Some(listeners) = &ctx.listeners else {
        let why = ctx.sockets_error.as_deref().unwrap_or("unknown error");
        return skipped(N, format!("listening sockets could not be listed: {why}"));
    };
    let reserved_text = ctx
        .root
        .read_sysctl("net.ipv4.ip_local_reserved_ports")
        .ok()
        .flatten()
        .unwrap_or_default();
    let reserved = parse_port_list(&reserved_text);
    let mut exposed: Vec<u64> = listeners
        .iter()
        .map(|l| u64::from(l.local.port()))
        .filter(|p| (lo..=hi).contains(p) && !reserved.iter().any(|r| r.contains(p)))
        .collect();
    exposed.sort_unstable();
    exposed.dedup();
    if exposed.is_empty() {
        return Finding::new(
            N,
            Status::Pass,
            format!("no listening port inside ip_local_port_range {lo}-{hi} is unreserved"),
        );
    }
    let list: Vec<String> = exposed.iter().map(u64::to_string).collect();
    let mut all: Vec<String> = reserved_text
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    all.extend(list.iter().cloned());
    Finding::new(
        N,
        Status::Warn,
        format!(
            "listening ports {} are inside ip_local_port_range {lo}-{hi} and not in ip_local_reserved_ports: an outgoing connection can take one while the server restarts",
            list.join(",")
        ),
    )
    .fix(format!(
        "sysctl -w net.ipv4.ip_local_reserved_ports={}",
        all.join(",")
    ))
}

/// `8080,9000-9010` as inclusive ranges.
fn parse_port_list(s: &str) -> Vec<std::ops::RangeInclusive<u64>> {
    s.split(',')
        .filter_map(|p| {
            let p = p.trim();
            match p.split_once('-') {
                Some((a, b)) => Some(a.trim().parse().ok()?..=b.trim().parse().ok()?),
                None => {
                    let n = p.parse().ok()?;
                    Some(n..=n)
                }
            }
        })
        .collect()
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
    let mut f = with_target(ctx, f, "net.netfilter.nf_conntrack_max", max);
    // Raising the max: the buckets go with it (the plan's value, or the new max).
    if f.fix.iter().any(|x| x.contains("nf_conntrack_max=")) {
        let want = recommended(ctx, "net.netfilter.nf_conntrack_buckets")
            .map_or(0, |w| w.value1())
            .max(max.saturating_mul(2));
        f = f.fix(format!(
            "sysctl -w net.netfilter.nf_conntrack_buckets={want}"
        ));
    }
    // Each entry is hashed twice; the kernel's default max = buckets keeps full-table chains
    // at 2 entries. Beyond twice the buckets every lookup walks more than 4.
    if let Ok(buckets) = ctx.sysctl_u64("net.netfilter.nf_conntrack_buckets") {
        f.summary.push_str(&format!(
            "; {buckets} hash buckets, {} entries per chain when full",
            (max * 2).div_ceil(buckets.max(1))
        ));
        if max > buckets.saturating_mul(2) && !f.fix.iter().any(|x| x.contains("buckets")) {
            f.status = f.status.max(Status::Warn);
            f.summary
                .push_str(" (nf_conntrack_max was raised without nf_conntrack_buckets)");
            f = f.fix(format!(
                "sysctl -w net.netfilter.nf_conntrack_buckets={max}  # initial netns only; or echo {max} > /sys/module/nf_conntrack/parameters/hashsize"
            ));
        }
    }
    f
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
    // Raise only while drops grow, doubling each time (from the kernel default when the
    // live value is unreadable: 1000 and 300).
    if dropped > 0 {
        f = f.fix(fixes::raise(ctx, "net.core.netdev_max_backlog", 1000));
    }
    if squeeze > 0 {
        f = f.fix(fixes::raise(ctx, "net.core.netdev_budget", 300));
    }
    f
}
