//! The check registry: every named check, in report order. A check is a plain function of
//! the [`Ctx`]; adding one is adding a line here and a function in a sibling file.
//!
//! Thresholds for "how full is too full" are shared so every ratio check reads the same way:
//! warn from [`WARN_PCT`], fail from [`FAIL_PCT`].

mod fd;
pub mod fixes;
mod idle;
mod limits;
mod log;
mod mem;
mod net;
mod nic;
mod tcp;
mod timers;

use super::{Check, Ctx, Finding, Status};

/// A ratio at or above this percentage warns.
pub const WARN_PCT: u64 = 70;
/// A ratio at or above this percentage fails.
pub const FAIL_PCT: u64 = 90;

/// Every check, in report order.
pub static REGISTRY: &[Check] = &[
    Check {
        name: "fd.file-max",
        about: "allocated file handles (file-nr) against fs.file-max and the target",
        run: fd::file_max,
    },
    Check {
        name: "fd.nr-open",
        about: "fs.nr_open, the ceiling for RLIMIT_NOFILE, against the target",
        run: fd::nr_open,
    },
    Check {
        name: "fd.process",
        about: "each process's open descriptors against its RLIMIT_NOFILE",
        run: fd::process,
    },
    Check {
        name: "fd.limits-config",
        about: "nofile in limits.conf, limits.d (every user and group), units' LimitNOFILE= and DefaultLimitNOFILE= against fs.nr_open",
        run: limits::limits_config,
    },
    Check {
        name: "mem.target",
        about: "whether the --conns target's kernel memory (socket slab + buffered data) fits this RAM",
        run: mem::target_fits,
    },
    Check {
        name: "net.somaxconn",
        about: "listen backlogs in use (sock_diag) against net.core.somaxconn; full accept queues",
        run: net::somaxconn,
    },
    Check {
        name: "tcp.accept-queue",
        about: "ListenOverflows / ListenDrops rising during the interval",
        run: tcp::accept_queue,
    },
    Check {
        name: "tcp.syn-queue",
        about: "SYN queue drops (TCPReqQFullDrop) and syncookies sent during the interval",
        run: tcp::syn_queue,
    },
    Check {
        name: "tcp.memory",
        about: "sockstat mem against tcp_mem; TCPAbortOnMemory, TCPMemoryPressures",
        run: tcp::memory,
    },
    Check {
        name: "tcp.orphans",
        about: "orphaned sockets against net.ipv4.tcp_max_orphans",
        run: tcp::orphans,
    },
    Check {
        name: "tcp.orphan-retries",
        about: "how long orphans retransmit (tcp_orphan_retries) while they crowd tcp_max_orphans",
        run: timers::orphan_retries,
    },
    Check {
        name: "tcp.dead-peers",
        about: "keepalive time/intvl/probes and tcp_retries2: how long a dead peer holds its socket",
        run: timers::dead_peers,
    },
    Check {
        name: "tcp.notsent-lowat",
        about: "tcp_notsent_lowat: unsent bytes a slow reader may pile up",
        run: timers::notsent_lowat,
    },
    Check {
        name: "tcp.slow-start-after-idle",
        about: "tcp_slow_start_after_idle: whether a push after a quiet spell restarts from the initial window",
        run: idle::slow_start_after_idle,
    },
    Check {
        name: "tcp.ehash",
        about: "TCP established hash slots (boot log or RAM) against the target: thash_entries",
        run: mem::ehash,
    },
    Check {
        name: "tcp.time-wait",
        about: "TIME_WAIT sockets against tcp_max_tw_buckets; TCPTimeWaitOverflow",
        run: tcp::time_wait,
    },
    Check {
        name: "net.ephemeral-ports",
        about: "local ports used per source address and destination against ip_local_port_range",
        run: net::ephemeral_ports,
    },
    Check {
        name: "net.reserved-ports",
        about: "listening ports inside ip_local_port_range missing from ip_local_reserved_ports",
        run: net::reserved_ports,
    },
    Check {
        name: "net.conntrack",
        about: "nf_conntrack_count against nf_conntrack_max; max against nf_conntrack_buckets",
        run: net::conntrack,
    },
    Check {
        name: "net.softnet",
        about: "softnet_stat drops (netdev_max_backlog) and time_squeeze during the interval",
        run: net::softnet,
    },
    Check {
        name: "net.nic-drops",
        about: "NIC receive drops and ring overruns (/sys/class/net/*/statistics, ethtool -S)",
        run: nic::nic_drops,
    },
    Check {
        name: "kernel.log",
        about: "kernel messages: orphans, tcp_mem, SYN flooding, conntrack full, file-max, OOM killer",
        run: log::kernel_log,
    },
];

/// Percentage of `used` in `limit` (0 for an empty limit), rounded down.
pub fn pct(used: u64, limit: u64) -> u64 {
    if limit == 0 {
        0
    } else {
        ((used as u128 * 100) / limit as u128) as u64
    }
}

/// Status for a fill ratio.
pub fn ratio_status(used: u64, limit: u64) -> Status {
    let p = pct(used, limit);
    if limit > 0 && p >= FAIL_PCT {
        Status::Fail
    } else if limit > 0 && p >= WARN_PCT {
        Status::Warn
    } else {
        Status::Pass
    }
}

/// For a usage check against the limit `key` (now `current`): warns when the target needs more,
/// and when anything is off gives the fix, the tune plan's value or else twice the current one.
pub fn with_target(ctx: &Ctx, mut f: Finding, key: &str, current: u64) -> Finding {
    let rec = crate::doctor::recommend::recommended(ctx, key);
    if let Some(r) = rec.as_ref().map(|w| w.need1()).filter(|&r| r > current) {
        f.status = f.status.max(Status::Warn);
        f.summary
            .push_str(&format!("; {r} recommended for the target"));
    }
    if f.status != Status::Pass && !f.fix.iter().any(|x| x.contains(key)) {
        let v = rec.map_or(0, |w| w.value1()).max(current.saturating_mul(2));
        f = f.fix(format!("sysctl -w {key}={v}"));
    }
    f
}

/// A `skipped` finding for a missing input.
pub fn skipped(check: &'static str, why: impl Into<String>) -> Finding {
    Finding::new(check, Status::Skipped, why)
}

/// How long the interval was, for summaries ("in 5.0s").
pub fn over(ctx: &Ctx) -> String {
    format!("in {:.1}s", ctx.interval.as_secs_f64())
}
