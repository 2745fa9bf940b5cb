//! What a connection does after a quiet spell: with `tcp_slow_start_after_idle=1` the
//! congestion window falls back to the initial window once a connection has been idle longer
//! than its RTO, so the first large push after a pause takes several round trips (seed 003,
//! measured by bench/idle-burst.sh). The wanted value comes from tune's parameter table.

use super::skipped;
use crate::doctor::{Ctx, Finding, Status};
use crate::params::{self, Rule};

const KEY: &str = "net.ipv4.tcp_slow_start_after_idle";

pub fn slow_start_after_idle(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.slow-start-after-idle";
    let Some(Rule::Fixed(want)) = params::lookup(KEY).map(|p| p.rule) else {
        return skipped(N, format!("{KEY} has no fixed recommendation in the table"));
    };
    let Ok(live) = ctx.sysctl_u64(KEY) else {
        return skipped(N, format!("{KEY} not readable"));
    };
    if live.to_string() == want {
        return Finding::new(
            N,
            Status::Pass,
            format!("tcp_slow_start_after_idle {live}: a push after a quiet spell keeps the congestion window it had"),
        );
    }
    Finding::new(
        N,
        Status::Warn,
        format!(
            "tcp_slow_start_after_idle {live}: after an idle spell longer than the RTO, a connection's next push restarts from the initial window (10 segments, doubling per round trip): a 64 KB message takes 3 round trips instead of 1"
        ),
    )
    .detail("bench/idle-burst.sh measures it through a delayed link; docs/field-notes.md (seed 003)")
    .fix(format!("sysctl -w {KEY}={want}"))
}
