//! Latency histograms with fixed, log-spaced buckets (1-2.5-5 per decade, 10 µs to 10 s), kept
//! per worker, sent to the master in `WorkerStats` and summed there for `/metrics` (Prometheus
//! `_bucket`/`_sum`/`_count`) and `/status` (count, mean, p50/p99 upper bounds). Fixed buckets
//! make summing across workers exact and recording one array index, with no allocation.

/// Upper bounds of the finite buckets, in microseconds; one more bucket holds everything above.
pub const BOUNDS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Buckets including the last (+Inf) one.
pub const BUCKETS: usize = BOUNDS_US.len() + 1;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Per-bucket (not cumulative) counts: `counts[i]` holds values ≤ `BOUNDS_US[i]` and above
    /// the bound before it.
    pub counts: [u64; BUCKETS],
    pub sum_us: u64,
}

impl Histogram {
    pub fn record(&mut self, micros: u64) {
        let i = BOUNDS_US.partition_point(|&b| b < micros);
        self.counts[i] += 1;
        self.sum_us = self.sum_us.saturating_add(micros);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn add(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
    }

    /// The upper bound (µs) of the bucket holding quantile `q`; None when empty, u64::MAX when
    /// it falls in the +Inf bucket. An upper bound, as a fixed-bucket histogram can only say.
    pub fn quantile_bound_us(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(BOUNDS_US.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }

    /// `/status` summary: count, mean and p50/p99 upper bounds in µs (null when empty or +Inf).
    pub fn summary_json(&self) -> serde_json::Value {
        let count = self.count();
        let bound = |q| {
            self.quantile_bound_us(q)
                .filter(|&b| b != u64::MAX)
                .map_or(serde_json::Value::Null, serde_json::Value::from)
        };
        serde_json::json!({
            "count": count,
            "mean_us": self.sum_us.checked_div(count),
            "p50_le_us": bound(0.5),
            "p99_le_us": bound(0.99),
        })
    }

    /// Prometheus histogram lines for `name` (without the `c1m_` prefix), HELP and TYPE first.
    pub fn prometheus(&self, out: &mut String, name: &str, help: &str) {
        use std::fmt::Write;
        let _ = writeln!(out, "# HELP c1m_{name} {help}\n# TYPE c1m_{name} histogram");
        let mut cumulative = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c;
            match BOUNDS_US.get(i) {
                Some(&b) => {
                    let le = b as f64 / 1e6;
                    let _ = writeln!(out, "c1m_{name}_bucket{{le=\"{le}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "c1m_{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let _ = writeln!(out, "c1m_{name}_sum {:.6}", self.sum_us as f64 / 1e6);
        let _ = writeln!(out, "c1m_{name}_count {cumulative}");
    }
}

/// The latency histograms one worker keeps (all µs). `/status` key `latency`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latencies {
    /// Master received the publish → the worker handed it to a subscriber's socket, once per
    /// delivery.
    pub publish_to_write: Histogram,
    /// One message to all of one worker's subscribers of its channel, once per message and
    /// worker that has subscribers.
    pub fan_out: Histogram,
    /// Publish request parsed → its 200 answer handed to the socket.
    pub publish_ack: Histogram,
    /// TLS handshake, first byte accepted → done (empty without `--tls-cert`).
    pub tls_handshake: Histogram,
    /// A backend proxy call, handed to the proxy threads → its answer back in the loop.
    pub proxy: Histogram,
}

impl Latencies {
    pub const COUNT: usize = 5;

    /// (name, help, histogram) in the fixed wire and output order.
    pub fn fields(&self) -> [(&'static str, &'static str, &Histogram); Latencies::COUNT] {
        [
            ("publish_to_write_seconds", "Time from the master receiving a publish to a worker handing it to a subscriber's socket, per delivery.", &self.publish_to_write),
            ("fan_out_seconds", "Time to hand one message to all of one worker's subscribers of its channel.", &self.fan_out),
            ("publish_ack_seconds", "Time from a publish request parsed to its 200 answer written.", &self.publish_ack),
            ("tls_handshake_seconds", "TLS handshake time, first byte accepted to handshake done.", &self.tls_handshake),
            ("proxy_request_seconds", "Backend proxy calls (connect, subscribe, publish, refresh), from the call handed to the proxy threads to its answer back in the worker's loop; timeouts and failures included.", &self.proxy),
        ]
    }

    pub fn fields_mut(&mut self) -> [&mut Histogram; Latencies::COUNT] {
        [
            &mut self.publish_to_write,
            &mut self.fan_out,
            &mut self.publish_ack,
            &mut self.tls_handshake,
            &mut self.proxy,
        ]
    }

    pub fn add(&mut self, other: &Latencies) {
        for (mine, (_, _, theirs)) in self.fields_mut().into_iter().zip(other.fields()) {
            mine.add(theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_bucket_whose_bound_they_do_not_exceed() {
        let mut h = Histogram::default();
        for us in [0, 10, 11, 25, 10_000_000, 10_000_001] {
            h.record(us);
        }
        assert_eq!(h.counts[0], 2); // 0 and 10 (le is inclusive)
        assert_eq!(h.counts[1], 2); // 11 and 25
        assert_eq!(h.counts[BUCKETS - 2], 1);
        assert_eq!(h.counts[BUCKETS - 1], 1); // +Inf
        assert_eq!(h.count(), 6);
    }

    #[test]
    fn quantile_bounds_and_prometheus_are_cumulative() {
        let mut h = Histogram::default();
        for _ in 0..99 {
            h.record(40);
        }
        h.record(2_000);
        assert_eq!(h.quantile_bound_us(0.5), Some(50));
        assert_eq!(h.quantile_bound_us(0.999), Some(2_500));
        let mut out = String::new();
        h.prometheus(&mut out, "x_seconds", "X.");
        assert!(
            out.contains("c1m_x_seconds_bucket{le=\"0.00005\"} 99\n"),
            "{out}"
        );
        assert!(out.contains("c1m_x_seconds_bucket{le=\"+Inf\"} 100\n"));
        assert!(out.contains("c1m_x_seconds_count 100\n"));
    }
}
