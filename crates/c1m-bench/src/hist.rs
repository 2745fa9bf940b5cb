//! Latency histograms (HdrHistogram, µs, 3 significant digits) and their wire form between
//! worker and coordinator: the recorded buckets as `[value, count]` pairs, so a worker can ship
//! a delta every tick and reset, and the coordinator merges exactly (bucket for bucket).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest value tracked: one hour in µs; larger values are clamped.
const HIGHEST_US: u64 = 3_600_000_000;

pub fn new_hist() -> Histogram<u64> {
    // Bounds are constants that HdrHistogram accepts; a failure here is a programming error
    // caught by the unit tests, never input-dependent.
    Histogram::new_with_bounds(1, HIGHEST_US, 3).expect("valid histogram bounds")
}

pub fn record(h: &mut Histogram<u64>, us: u64) {
    // saturating_record clamps instead of failing on out-of-range values.
    h.saturating_record(us.max(1));
}

/// Recorded buckets as (highest equivalent value, count) pairs.
pub fn to_pairs(h: &Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// Recorded buckets since the last call, and a reset. An empty histogram is neither walked
/// nor reset: both cost the whole bucket array (~45K counters for 1 µs..1 h at 3 digits), and a
/// worker ships five every 250 ms, most of them empty during a ramp. Walking and zeroing them
/// all took ~5 % of the box's CPU in a whole-box profile of a 1M ramp (51 bench workers,
/// bench/out/ramp-serve-1000000-scale.svg), CPU the server under test did not get.
pub fn take_pairs(h: &mut Histogram<u64>) -> Vec<(u64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let pairs = to_pairs(h);
    h.reset();
    pairs
}

pub fn add_pairs(h: &mut Histogram<u64>, pairs: &[(u64, u64)]) {
    for &(v, n) in pairs {
        let _ = h.record_n(v.clamp(1, HIGHEST_US), n);
    }
}

/// The percentiles a report shows, in µs.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub min_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    pub mean_us: f64,
}

pub fn percentiles(h: &Histogram<u64>) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        count: h.len(),
        min_us: h.min(),
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        mean_us: (h.mean() * 10.0).round() / 10.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::human::fmt_us;

    #[test]
    fn take_pairs_ships_a_delta_and_skips_empty_histograms() {
        let mut h = new_hist();
        assert!(take_pairs(&mut h).is_empty());
        record(&mut h, 150);
        record(&mut h, 150);
        record(&mut h, 9_000);
        let first = take_pairs(&mut h);
        assert_eq!(first.iter().map(|&(_, n)| n).sum::<u64>(), 3);
        assert!(h.is_empty(), "reset after shipping");
        assert!(
            take_pairs(&mut h).is_empty(),
            "nothing new, nothing shipped"
        );
        record(&mut h, 150);
        assert_eq!(take_pairs(&mut h).iter().map(|&(_, n)| n).sum::<u64>(), 1);
    }

    #[test]
    fn pairs_merge_exactly() {
        let mut a = new_hist();
        for v in [5, 100, 100, 2_000, 1_000_000] {
            record(&mut a, v);
        }
        let mut b = new_hist();
        add_pairs(&mut b, &to_pairs(&a));
        add_pairs(&mut b, &to_pairs(&a));
        assert_eq!(b.len(), 10);
        assert_eq!(percentiles(&b).p50_us, percentiles(&a).p50_us);
        assert!(b.max() >= 1_000_000 && b.max() < 1_001_000);
        record(&mut b, u64::MAX);
        assert_eq!(fmt_us(1500), "1.5ms");
    }
}
