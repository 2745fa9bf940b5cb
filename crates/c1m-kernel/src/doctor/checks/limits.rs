//! Configured RLIMIT_NOFILE against fs.nr_open: pam_limits lines (every domain), units'
//! LimitNOFILE= and systemd's DefaultLimitNOFILE=. A value above nr_open is the field notes'
//! classic lockout (seed 002): the next login is refused, the unit fails with 205/LIMITS.

use super::skipped;
use crate::doctor::{Ctx, Finding, Status};
use crate::nofile::{self, SYSTEMD_NR_OPEN};

pub fn limits_config(ctx: &Ctx) -> Finding {
    const N: &str = "fd.limits-config";
    let Ok(nr_open) = ctx.sysctl_u64("fs.nr_open") else {
        return skipped(N, "fs/nr_open not readable");
    };
    let lines = match (
        nofile::pam_lines(&ctx.root),
        nofile::systemd_lines(&ctx.root),
    ) {
        (Ok(mut p), Ok(s)) => {
            p.extend(s);
            p
        }
        (Err(e), _) | (_, Err(e)) => return skipped(N, format!("{e:#}")),
    };
    let bad: Vec<&nofile::Line> = lines.iter().filter(|l| l.above(nr_open)).collect();
    let default = lines
        .iter()
        .rev()
        .find(|l| l.origin == nofile::Origin::Default)
        .and_then(|l| l.largest())
        .map_or("unset (soft 1024, hard 524288)".to_string(), |v| {
            v.to_string()
        });
    if bad.is_empty() {
        return Finding::new(
            N,
            Status::Pass,
            format!(
                "{} nofile lines (pam_limits, LimitNOFILE=, DefaultLimitNOFILE=), none above fs.nr_open {nr_open}; DefaultLimitNOFILE {default}",
                lines.len()
            ),
        );
    }
    let mut f = Finding::new(
        N,
        Status::Fail,
        format!(
            "{} nofile lines above fs.nr_open {nr_open}: the kernel refuses setrlimit() above it (systemd as PID 1 raises nr_open to {SYSTEMD_NR_OPEN} at boot; this box has {nr_open})",
            bad.len()
        ),
    );
    for l in &bad {
        f = f.detail(format!(
            "{}: nofile {} for {}: {}",
            l.at(),
            l.largest().unwrap_or(0),
            l.domain,
            l.effect()
        ));
    }
    let worst = bad.iter().max_by_key(|l| l.largest()).copied();
    if let Some(l) = worst {
        for cmd in nofile::fix_above(l, nr_open) {
            f = f.fix(cmd);
        }
    }
    f
}
