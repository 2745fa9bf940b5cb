//! The verdict on one value: its [`Status`] against the recommendation, whether it is
//! harmful, and the *target* `--apply` writes (the recommendation, never lower than a live
//! value that is already higher).
//!
//! Owns: value comparisons only; no I/O. `check` and the config-file scan both use it.

use super::calc::{kernel_default, Host, TCP_MEM_RAM_PCT};
use super::units::parse_numbers;
use crate::params::{Compare, Harm, Param, Unit};
use crate::root::normalize_value;
use serde::Serialize;

/// A key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Low,
    High,
    Harmful,
    /// A configured value that breaks the box now or at the next login or boot (a nofile
    /// above fs.nr_open: logins refused, units failing with 205/LIMITS).
    Critical,
    /// The target needs more kernel memory than this box has (the memory math's finding).
    #[serde(rename = "does-not-fit")]
    DoesNotFit,
    /// The target fits in RAM, but tcp_mem is capped below what full buffers want: memory
    /// pressure starts before every socket has its bytes queued. A warning: nothing for
    /// `--apply` to change.
    #[serde(rename = "tcp-mem-capped")]
    TcpMemCapped,
    Obsolete,
    /// The kernel lacks the key (or the module is not loaded): skipped, not a failure.
    Missing,
    /// Shown for information; never a finding.
    Info,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Low => "low",
            Status::High => "high",
            Status::Harmful => "harmful",
            Status::Critical => "critical",
            Status::DoesNotFit => "does-not-fit",
            Status::TcpMemCapped => "tcp-mem-capped",
            Status::Obsolete => "obsolete",
            Status::Missing => "missing",
            Status::Info => "info",
        }
    }

    /// Whether this status is a warning: worth reading, but no change would clear it.
    pub fn is_warning(self) -> bool {
        self == Status::TcpMemCapped
    }

    /// Whether this status asks for a change (exit 1).
    pub fn needs_change(self) -> bool {
        matches!(
            self,
            Status::Low
                | Status::High
                | Status::Harmful
                | Status::Critical
                | Status::DoesNotFit
                | Status::Obsolete
        )
    }
}

/// Whether a value is harmful for this entry.
pub fn is_harmful(p: &Param, value: &str, host: &Host) -> bool {
    let v = normalize_value(value);
    match p.harm {
        Harm::Never => false,
        Harm::Equals(s) => v == s,
        Harm::NotEquals(s) => v != s,
        Harm::BelowHalfDefault => {
            let kd = kernel_default(p, host).and_then(|d| parse_numbers(&d));
            match (parse_numbers(&v), kd) {
                (Some(l), Some(d)) => l[0] < d[0] / 2,
                _ => false,
            }
        }
    }
}

/// Compares a (non-harmful) value with the recommendation.
pub fn compare(p: &Param, value: &str, rec: &str, host: &Host) -> Status {
    let (l, r) = match (parse_numbers(value), parse_numbers(rec)) {
        (Some(l), Some(r)) => (l, r),
        _ => {
            return if normalize_value(value) == normalize_value(rec) {
                Status::Ok
            } else {
                Status::Low
            }
        }
    };
    match p.compare {
        Compare::None => Status::Info,
        Compare::Exact if l == r => Status::Ok,
        Compare::Exact if l < r => Status::Low,
        Compare::Exact => Status::High,
        Compare::AtLeast => {
            if l.len() != r.len() || l.iter().zip(&r).any(|(a, b)| a < b) {
                Status::Low
            } else if p.unit == Unit::Pages
                && l.last()
                    .copied()
                    .unwrap_or(0)
                    .saturating_mul(host.page_size)
                    > host.mem_bytes / 100 * TCP_MEM_RAM_PCT
            {
                // A tcp_mem max above half of RAM: pressure starts after the OOM killer.
                Status::High
            } else {
                Status::Ok
            }
        }
        Compare::WiderRange => match (l.as_slice(), r.as_slice()) {
            ([llo, lhi], [rlo, rhi]) if llo <= rlo && lhi >= rhi => Status::Ok,
            _ => Status::Low,
        },
    }
}

/// The value `--apply` writes: the recommendation, except that a live value already at or
/// above it (element-wise) is kept, so c1m never lowers anything.
pub fn target(p: &Param, live: &str, rec: &str, status: Status) -> String {
    if status == Status::Ok && p.compare != Compare::Exact {
        return normalize_value(live);
    }
    if p.compare == Compare::AtLeast && status == Status::Low {
        if let (Some(l), Some(r)) = (parse_numbers(live), parse_numbers(rec)) {
            if l.len() == r.len() {
                let m: Vec<String> = l
                    .iter()
                    .zip(&r)
                    .map(|(a, b)| a.max(b).to_string())
                    .collect();
                return m.join(" ");
            }
        }
    }
    rec.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::lookup;

    fn host() -> Host {
        Host {
            mem_bytes: 24 << 30,
            cpus: 2,
            page_size: 4096,
            conntrack_loaded: false,
            obj: crate::tune::slab::ObjSizes::MEASURED,
        }
    }

    fn p(key: &str) -> &'static Param {
        lookup(key).unwrap()
    }

    #[test]
    fn harm_predicates() {
        let h = host();
        assert!(is_harmful(p("net.ipv4.tcp_max_tw_buckets"), "5000", &h));
        // Default on 24 GiB is 131072: 65536 is half, not below half.
        assert!(!is_harmful(p("net.ipv4.tcp_max_tw_buckets"), "65536", &h));
        assert!(is_harmful(p("net.ipv4.ip_no_pmtu_disc"), "1", &h));
        assert!(!is_harmful(p("net.ipv4.ip_no_pmtu_disc"), "0\n", &h));
        // Swappiness is not c1m's business: never harmful, never repaired.
        assert!(!is_harmful(p("vm.swappiness"), "0", &h));
        assert!(is_harmful(p("net.ipv4.tcp_tw_recycle"), "1", &h));
    }

    #[test]
    fn comparisons() {
        let h = host();
        let mem = p("net.ipv4.tcp_mem");
        let rec = "750000 1000000 1500000";
        assert_eq!(compare(mem, "287898\t383866\t575796", rec, &h), Status::Low);
        assert_eq!(compare(mem, "750000 1000000 2000000", rec, &h), Status::Ok);
        // 7000000 pages × 4 KiB = 26.7 GiB > 24 GiB RAM.
        assert_eq!(
            compare(mem, "750000 1000000 7000000", rec, &h),
            Status::High
        );
        // 3200000 pages = 12.2 GiB: above half of 24 GiB, so pressure would come too late.
        assert_eq!(
            compare(mem, "750000 1000000 3200000", rec, &h),
            Status::High
        );
        assert_eq!(compare(mem, "750000 1000000 3100000", rec, &h), Status::Ok);
        let reuse = p("net.ipv4.tcp_tw_reuse");
        assert_eq!(compare(reuse, "2", "1", &h), Status::High);
        assert_eq!(compare(reuse, "0", "1", &h), Status::Low);
        let range = p("net.ipv4.ip_local_port_range");
        assert_eq!(
            compare(range, "32768 60999", "10000 65535", &h),
            Status::Low
        );
        assert_eq!(compare(range, "1024 65535", "10000 65535", &h), Status::Ok);
    }

    #[test]
    fn target_never_lowers() {
        let mem = p("net.ipv4.tcp_mem");
        let rec = "750000 1000000 1500000";
        assert_eq!(
            target(mem, "800000 900000 2000000", rec, Status::Low),
            "800000 1000000 2000000"
        );
        let orphans = p("net.ipv4.tcp_max_orphans");
        assert_eq!(target(orphans, "4000000", "262144", Status::Ok), "4000000");
        let range = p("net.ipv4.ip_local_port_range");
        assert_eq!(
            target(range, "1024 65535", "10000 65535", Status::Ok),
            "1024 65535"
        );
        assert_eq!(
            target(range, "32768 60999", "10000 65535", Status::Low),
            "10000 65535"
        );
    }
}
