//! Descriptor checks: system-wide handles (file-nr vs file-max), the RLIMIT_NOFILE ceiling
//! (nr_open) and each process's descriptors against its own limit.

use super::{pct, ratio_status, skipped, FAIL_PCT, WARN_PCT};
use crate::doctor::recommend::recommended;
use crate::doctor::{Ctx, Finding, Status};

/// Descriptors a process keeps for itself beyond its connections (listeners, pipes, logs).
const RESERVE_FDS: u64 = 64;
/// Offending processes listed in a finding.
const MAX_LISTED: usize = 10;

pub fn file_max(ctx: &Ctx) -> Finding {
    const N: &str = "fd.file-max";
    let Some((alloc, max)) = ctx.after.file_nr else {
        return skipped(N, "fs/file-nr not readable");
    };
    let st = ratio_status(alloc, max);
    let mut f = Finding::new(
        N,
        st,
        format!(
            "{alloc} of fs.file-max {max} file handles allocated ({}%)",
            pct(alloc, max)
        ),
    );
    if st != Status::Pass {
        f = f.fix(format!("sysctl -w fs.file-max={}", alloc.saturating_mul(2)));
    }
    if let (Some(conns), Some(w)) = (ctx.target_conns, recommended(ctx, "fs.file-max")) {
        if max < w.need1() {
            f.status = f.status.max(Status::Warn);
            f.summary.push_str(&format!(
                "; {conns} connections need fs.file-max >= {}",
                w.need1()
            ));
            f = f.fix(format!("sysctl -w fs.file-max={}", w.value1()));
        }
    }
    f
}

pub fn nr_open(ctx: &Ctx) -> Finding {
    const N: &str = "fd.nr-open";
    let Ok(nr_open) = ctx.sysctl_u64("fs.nr_open") else {
        return skipped(N, "fs/nr_open not readable");
    };
    let Some(conns) = ctx.target_conns else {
        return Finding::new(
            N,
            Status::Pass,
            format!("fs.nr_open {nr_open} (no --conns target to judge against)"),
        );
    };
    let Some(w) = recommended(ctx, "fs.nr_open") else {
        let why = ctx
            .plan_error
            .as_deref()
            .unwrap_or("the plan does not size fs.nr_open");
        return skipped(N, format!("no recommendation: {why}"));
    };
    let need = w.need1();
    if nr_open < need {
        Finding::new(
            N,
            Status::Warn,
            format!("fs.nr_open {nr_open} < {need} needed for {conns} connections per process"),
        )
        .fix(format!("sysctl -w fs.nr_open={}", w.value1()))
    } else {
        Finding::new(
            N,
            Status::Pass,
            format!("fs.nr_open {nr_open} >= {need} needed for {conns} connections per process"),
        )
    }
}

pub fn process(ctx: &Ctx) -> Finding {
    const N: &str = "fd.process";
    if ctx.procs.is_empty() {
        return skipped(N, "no readable /proc/PID entries");
    }
    let mut hot: Vec<_> = ctx
        .procs
        .iter()
        .filter(|p| p.soft != u64::MAX && pct(p.open, p.soft) >= WARN_PCT)
        .collect();
    hot.sort_by_key(|p| std::cmp::Reverse(pct(p.open, p.soft)));
    let worst = hot
        .iter()
        .map(|p| ratio_status(p.open, p.soft))
        .max()
        .unwrap_or(Status::Pass);
    let mut f = if hot.is_empty() {
        Finding::new(
            N,
            Status::Pass,
            format!(
                "{} processes, none above {WARN_PCT}% of RLIMIT_NOFILE",
                ctx.procs.len()
            ),
        )
    } else {
        let at_fail = hot
            .iter()
            .filter(|p| pct(p.open, p.soft) >= FAIL_PCT)
            .count();
        Finding::new(
            N,
            worst,
            format!(
                "{} processes above {WARN_PCT}% of RLIMIT_NOFILE ({at_fail} above {FAIL_PCT}%)",
                hot.len()
            ),
        )
    };
    for p in hot.iter().take(MAX_LISTED) {
        f = f.detail(format!(
            "pid {} ({}): {} of {} descriptors open (hard {})",
            p.pid, p.comm, p.open, p.soft, p.hard
        ));
        // Raising the soft limit to the hard one needs no privilege; past the hard limit the
        // service's own LimitNOFILE= (systemd) or limits.d (logins) must change.
        let target = if p.soft < p.hard {
            p.hard
        } else {
            p.hard.saturating_mul(2)
        };
        f = f.fix(format!(
            "prlimit --pid {} --nofile={target}:{target}",
            p.pid
        ));
    }
    if let Some(conns) = ctx.target_conns {
        let hard = ctx
            .procs
            .iter()
            .find(|p| p.pid == std::process::id())
            .map(|p| p.hard)
            .unwrap_or(0);
        if hard > RESERVE_FDS && hard != u64::MAX {
            let per = hard - RESERVE_FDS;
            f = f.detail(format!(
                "{conns} connections at hard RLIMIT_NOFILE {hard} need {} processes (c1m serve --workers auto)",
                conns.div_ceil(per)
            ));
        }
    }
    f
}
