//! The kernel-log check: a known message that appeared during the interval fails; one only
//! seen earlier (since boot, or since the log buffer wrapped) warns. Each condition (orphans,
//! tcp_mem, SYN flood, conntrack, file-max, OOM killer) gets its own meaning and fix.

use super::{fixes, skipped};
use crate::doctor::kmsg::{classify, Condition, KNOWN};
use crate::doctor::{Ctx, Finding, Status};

/// Log lines quoted in a finding.
const MAX_LISTED: usize = 5;

pub fn kernel_log(ctx: &Ctx) -> Finding {
    const N: &str = "kernel.log";
    let Some(after) = &ctx.log_after else {
        return skipped(N, "kernel log not readable (/dev/kmsg)");
    };
    let seen_before = ctx
        .log_before
        .as_ref()
        .and_then(|l| l.iter().map(|r| r.seq).max())
        .unwrap_or(0);
    let mut new = 0usize;
    let mut old = 0usize;
    let mut kinds: Vec<Condition> = Vec::new();
    let mut lines = Vec::new();
    for r in after {
        let Some(k) = classify(&r.text) else { continue };
        if r.seq > seen_before && ctx.log_before.is_some() {
            new += 1;
        } else {
            old += 1;
        }
        if !kinds.contains(&k) {
            kinds.push(k);
        }
        lines.push(r.text.clone());
    }
    if new == 0 && old == 0 {
        return Finding::new(
            N,
            Status::Pass,
            format!(
                "none of {} known messages in {} log records",
                KNOWN.len(),
                after.len()
            ),
        );
    }
    let status = if new > 0 { Status::Fail } else { Status::Warn };
    let mut f = Finding::new(
        N,
        status,
        format!(
            "{new} known messages during the interval, {old} earlier: {}",
            kinds
                .iter()
                .map(|k| k.meaning())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    );
    for l in lines.iter().rev().take(MAX_LISTED) {
        f = f.detail(l.clone());
    }
    for &k in &kinds {
        for cmd in fixes::for_condition(ctx, k) {
            f = f.fix(cmd);
        }
    }
    f
}
