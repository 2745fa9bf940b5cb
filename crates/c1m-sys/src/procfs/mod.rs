//! Reading (and, for `tune`, writing) /proc, /sys and /etc under a chosen root directory, so
//! every caller can be tested against a fake tree instead of the live host.
//!
//! Owns: the [`Root`] abstraction and the text formats that more than one command reads: the
//! paired-line counters of /proc/net/netstat and snmp, /proc/net/sockstat, whitespace-separated
//! sysctls, /proc/meminfo, the cpu list and /proc/self/limits. Judging those values (what they
//! should be, when they are a problem) belongs to c1m-kernel; showing them to c1m-server's
//! dashboard. No unsafe code here: plain file reads.

pub mod counters;
pub mod root;

pub use counters::{parse_paired, parse_sockstat, read_rel, sysctl, sysctl_nums, sysctl_u64};
pub use root::{
    normalize_value, parse_cpu_ids, parse_cpu_list, parse_limits_nofile, parse_meminfo,
    sysctl_rel_path, MemInfo, Nofile, Root,
};
