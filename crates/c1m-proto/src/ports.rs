//! The ephemeral-port budget per (source address, destination) pair: how many connections one
//! pair should carry before connect() gets expensive. Shared by `c1m bench` (its default
//! `--per-source`) and `c1m tune` / `c1m doctor` (source addresses needed, port-use
//! thresholds), so the load generator follows the rule the diagnostics preach.
//!
//! Why half: without a per-socket range, __inet_hash_connect (net/ipv4/inet_hashtables.c)
//! tries ports of one parity first and only then the other, so once half of the range is in
//! use towards one destination every connect() walks that whole half. Measured on this
//! project's box with bench/connect-cliff.sh (docs/kernel.md): p50 19-31 µs up to 49 % of the
//! 28,232-port default range, 0.85-3.6 ms from 49 % on. With IP_LOCAL_PORT_RANGE (Linux 6.3)
//! set on the socket the scan is linear over the whole range (step 1, no parity split), but
//! from a random start it still probes ~1/(1 - fill) ports: a 1M ramp of `c1m bench` at 90 %
//! per pair (40 sources) slowed from ~600K on and ended 7 % short in connect timeouts, at
//! 45 % (84 sources) it opened all 1M at the floor's pace (BENCHMARKS.md, 2026-12-02).

/// Where connect() falls off the cliff: this percentage of the range per pair.
pub const CLIFF_PCT: u64 = 50;
/// What c1m plans for per pair: under the cliff with a margin, with or without
/// IP_LOCAL_PORT_RANGE on the socket (the linear scan's cost grows with the fill too).
pub const PLAN_PCT: u64 = 45;
/// Never more than this per pair, whatever the range (keeps worker shares even).
pub const PER_PAIR_MAX: u64 = 50_000;

/// Connections one (source, destination) pair should carry for a port range of `size` ports.
pub fn per_pair(size: u64) -> u64 {
    (size * PLAN_PCT / 100).clamp(1, PER_PAIR_MAX)
}

/// Source addresses needed to carry `conns` connections to one destination.
pub fn sources_needed(conns: u64, size: u64) -> u64 {
    conns.div_ceil(per_pair(size)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_range_with_a_margin() {
        // The kernel default range 32768-60999: 28232 ports.
        assert_eq!(per_pair(28_232), 12_704);
        // c1m tune's client range 10000-65535: 55536 ports → 24991 per pair.
        assert_eq!(per_pair(55_536), 24_991);
        // 1M connections need 41 source addresses at 24991 each (not 19 at the full range).
        assert_eq!(sources_needed(1_000_000, 55_536), 41);
        assert_eq!(per_pair(64_512), 29_030);
        assert_eq!(per_pair(200_000), 50_000);
        assert_eq!(per_pair(1), 1);
    }
}
