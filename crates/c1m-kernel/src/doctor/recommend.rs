//! The one door from doctor to the tune parameter table: what value c1m recommends for a key
//! at the target connection count. Doctor never restates a number of its own; when the table
//! has no answer (no `--conns`, or no rule for the key) the comparison is simply not made.

use super::Ctx;

/// The recommended value of `key` for the ctx's target, as the integers the sysctl holds
/// (one for most keys, three for tcp_mem, two for ip_local_port_range).
pub fn recommended(ctx: &Ctx, key: &str) -> Option<Vec<u64>> {
    let _conns = ctx.target_conns?;
    // Filled in from the tune calculator once it lands (branch `tune`).
    let _ = key;
    None
}

/// The single value of a one-number recommendation.
pub fn recommended_u64(ctx: &Ctx, key: &str) -> Option<u64> {
    recommended(ctx, key).and_then(|v| v.first().copied())
}
