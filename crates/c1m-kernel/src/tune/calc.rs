//! The calculator: turns the host (RAM, CPUs, page size, conntrack loaded) and the target
//! (connections, role, expected buffered bytes) into a value for every table entry whose
//! [`Rule`] says c1m sizes it, plus the memory math shown to the user.
//!
//! Owns: the sizing formulas and the estimates of the kernel's own defaults. It reads nothing
//! from disk (the caller builds [`Host`] from a `Root`), so every formula is unit-testable with
//! hand-computed figures.

use crate::params::{KernelDefault, Param, Role, Rule, PARAMS};
use serde::Serialize;

/// Kernel slab memory one idle ESTABLISHED socket with an fd and an epoll watch holds
/// (tcp_sock, sock_inode, dentry, filp, epitem...): measured on kernel 6.18, see
/// kernel-facts.md "Per-connection cost". An idle socket holds no send/receive buffer.
pub const KERNEL_BYTES_PER_SOCKET: u64 = 4700;
/// Descriptors a process needs besides its connections (listeners, logs, pipes, libraries).
pub const FD_RESERVE: u64 = 1024;
/// The most fs.nr_open can be on 64-bit kernels (`sysctl_nr_open_max`: INT_MAX rounded down to
/// a multiple of BITS_PER_LONG), so the most descriptors one process can ever hold.
pub const NR_OPEN_MAX: u64 = 2_147_483_584;
/// A TIME_WAIT socket (kernel-facts.md): what a raised tcp_max_tw_buckets can cost.
pub const TIME_WAIT_BYTES: u64 = 168;
/// Queued data an orphan may still hold (kernel-facts.md).
pub const ORPHAN_MAX_BYTES: u64 = 64 * 1024;
/// Cost of one epoll watch (kernel-facts.md), for the kernel default estimate.
pub const EPOLL_WATCH_BYTES: u64 = 160;
/// RAM per TCP established hash slot (`tcp_init`: scale 17, one slot per 128 KiB) and the
/// table's cap (512K slots), for estimating tcp_max_orphans / tcp_max_tw_buckets defaults.
pub const EHASH_BYTES_PER_SLOT: u64 = 128 * 1024;
pub const EHASH_MAX_SLOTS: u64 = 512 * 1024;
/// The ephemeral port range c1m recommends to clients: ends of different parity (the kernel
/// docs' advice) and ports below 10000 left to services.
pub const PORT_RANGE: (u64, u64) = (10000, 65535);
/// somaxconn bounds: never below the kernel default since 5.4, never above what the many
/// programs that pass a 16-bit backlog can use.
pub const SOMAXCONN_MIN: u64 = 4096;
pub const SOMAXCONN_MAX: u64 = 65535;
/// Share of the target that may arrive at once on one listener in a reconnect storm (1/100).
pub const STORM_DIVISOR: u64 = 100;
/// Keepalive interval the field notes use, to show the probe rate it would cost.
pub const NOTES_KEEPALIVE_SECS: u64 = 30;
/// Kernel default tcp_keepalive_time.
pub const DEFAULT_KEEPALIVE_SECS: u64 = 7200;

/// Facts about the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Host {
    pub mem_bytes: u64,
    pub cpus: u64,
    pub page_size: u64,
    /// /proc/sys/net/netfilter/nf_conntrack_max exists.
    pub conntrack_loaded: bool,
}

/// What the box must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Target {
    pub conns: u64,
    pub role: Role,
    /// Bytes each connection may have queued at the same moment (a broadcast).
    pub buffered: u64,
}

impl Target {
    /// A proxy holds the client's socket and one upstream socket per connection.
    pub fn sockets_per_conn(&self) -> u64 {
        match self.role {
            Role::Server | Role::Client => 1,
            Role::Proxy => 2,
        }
    }

    pub fn sockets(&self) -> u64 {
        self.conns.saturating_mul(self.sockets_per_conn())
    }
}

/// The memory math printed under the recommendations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Math {
    pub sockets_per_conn: u64,
    pub sockets: u64,
    pub kernel_bytes_per_socket: u64,
    pub kernel_bytes_per_conn: u64,
    pub kernel_bytes_total: u64,
    pub buffered_bytes_total: u64,
    pub buffered_pages: u64,
    /// Recommended tcp_mem in pages: min pressure max.
    pub tcp_mem: [u64; 3],
    /// The kernel's own tcp_mem on this RAM (estimate).
    pub tcp_mem_default: [u64; 3],
    /// RAM left for connections after keeping a quarter for everything else.
    pub usable_bytes: u64,
    /// Connections this RAM holds when idle (kernel memory only).
    pub capacity_idle: u64,
    /// Connections this RAM holds when each also has `buffered` bytes queued.
    pub capacity_busy: u64,
    pub fds_total: u64,
    pub nofile: u64,
    /// Descriptors each of `cpus` worker processes holds (c1m serve's default worker count).
    pub fds_per_worker: u64,
    /// Client/proxy: source addresses needed per destination at the recommended port range.
    pub source_ips_per_destination: Option<u64>,
    pub time_wait_bytes_at_cap: u64,
    pub keepalive_probes_default: u64,
    pub keepalive_probes_notes: u64,
}

/// One entry's recommendation.
#[derive(Debug, Clone, Serialize)]
pub struct Rec {
    pub key: &'static str,
    /// The value c1m recommends; `None` when the entry does not apply (role, conntrack).
    pub value: Option<String>,
    /// The least the target needs; `value` is this raised to the kernel's own default. The
    /// check compares against `need`, so a live default a little below c1m's estimate of it is
    /// not reported as low.
    pub need: Option<String>,
    /// The numbers behind it, e.g. `≥ nofile 1048576; kernel default 1048576`.
    pub basis: String,
    #[serde(skip)]
    pub param: &'static Param,
}

/// Everything `c1m tune` prints, checks and applies.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub host: Host,
    pub target: Target,
    pub math: Math,
    /// Every entry c1m sizes (verdict recommend / never-lower), in table order.
    pub recs: Vec<Rec>,
    pub warnings: Vec<String>,
}

impl Plan {
    /// The recommendation for `key`, when the key applies.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.recs
            .iter()
            .find(|r| r.key == key)
            .and_then(|r| r.value.as_deref())
    }

    /// The least the target needs for `key`.
    pub fn need(&self, key: &str) -> Option<&str> {
        self.recs
            .iter()
            .find(|r| r.key == key)
            .and_then(|r| r.need.as_deref())
    }
}

fn pow2(n: u64) -> u64 {
    n.max(1).checked_next_power_of_two().unwrap_or(u64::MAX)
}

fn headroom(n: u64) -> u64 {
    n.saturating_add(n / 4)
}

/// The kernel's tcp_mem shape from a pressure value: min = pressure/4*3, max = 2*min
/// (`tcp_init_mem`, integer arithmetic as the kernel does it).
pub fn tcp_mem_shape(pressure: u64) -> [u64; 3] {
    let min = pressure / 4 * 3;
    [min, pressure, min * 2]
}

/// TCP established hash slots the kernel allocates for this RAM.
pub fn ehash_slots(host: &Host) -> u64 {
    pow2(host.mem_bytes.div_ceil(EHASH_BYTES_PER_SLOT)).min(EHASH_MAX_SLOTS)
}

/// The kernel's default for an entry on this host, estimated from RAM and page size.
pub fn kernel_default(p: &Param, host: &Host) -> Option<String> {
    let one = |v: u64| Some(v.to_string());
    match p.default {
        KernelDefault::Unknown => None,
        KernelDefault::Fixed(s) => Some(s.to_string()),
        KernelDefault::EhashHalf => one(ehash_slots(host) / 2),
        KernelDefault::EhashSynBacklog => one((ehash_slots(host) / 128).max(128)),
        KernelDefault::FileMax => one((host.mem_bytes / 1024 / 10).max(8192)),
        KernelDefault::TcpMem => {
            let [a, b, c] = tcp_mem_default(host);
            Some(format!("{a} {b} {c}"))
        }
        KernelDefault::EpollWatches => one(host.mem_bytes / 25 / EPOLL_WATCH_BYTES),
        KernelDefault::Conntrack => one((host.mem_bytes / 16384).clamp(1024, 262_144)),
    }
}

/// The kernel's tcp_mem: limit = free buffer pages / 16 (about RAM pages / 16), at least 128.
pub fn tcp_mem_default(host: &Host) -> [u64; 3] {
    tcp_mem_shape((host.mem_bytes / host.page_size / 16).max(128))
}

fn default_num(p: &Param, host: &Host) -> u64 {
    kernel_default(p, host)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Per-process RLIMIT_NOFILE: the next power of two at or above every descriptor of the
/// target plus a reserve, so even a single-process server fits; at most what nr_open allows.
pub fn nofile(target: &Target) -> u64 {
    pow2(target.sockets().saturating_add(FD_RESERVE)).min(NR_OPEN_MAX)
}

/// tcp_mem in pages: pressure covers every socket's buffered bytes at once, in the kernel's
/// shape, never below the kernel's own.
pub fn tcp_mem(host: &Host, target: &Target) -> [u64; 3] {
    let kd = tcp_mem_default(host);
    tcp_mem_shape(tcp_mem_need(host, target).max(kd[1]))
}

/// Pages every socket's buffered bytes take at once: the least pressure value the target needs.
pub fn tcp_mem_need(host: &Host, target: &Target) -> u64 {
    target
        .sockets()
        .saturating_mul(target.buffered)
        .div_ceil(host.page_size)
}

/// Connections that may arrive at once on one listener in a reconnect storm: 1/100 of the
/// target as a power of two, at most 65535. What somaxconn and tcp_max_syn_backlog need.
pub fn storm(target: &Target) -> u64 {
    pow2(target.conns.div_ceil(STORM_DIVISOR)).min(SOMAXCONN_MAX)
}

/// somaxconn: the storm, never below the kernel default since 5.4.
pub fn somaxconn(target: &Target) -> u64 {
    storm(target).max(SOMAXCONN_MIN)
}

fn recommend(p: &'static Param, host: &Host, target: &Target) -> Rec {
    let kd = default_num(p, host);
    let sockets = target.sockets();
    // `need` is what the target requires; the value is it raised to the kernel default.
    let rec = |need: u64, basis: String| Rec {
        key: p.key,
        value: Some(need.max(kd).to_string()),
        need: Some(need.to_string()),
        basis,
        param: p,
    };
    let none = |basis: String| Rec {
        key: p.key,
        value: None,
        need: None,
        basis,
        param: p,
    };
    let exact = |v: String, basis: String| Rec {
        key: p.key,
        value: Some(v.clone()),
        need: Some(v),
        basis,
        param: p,
    };
    if !p.applies_to(target.role) {
        return none(format!("not for role {}", target.role.name()));
    }
    match p.rule {
        Rule::None => none(String::new()),
        Rule::Fixed(v) => exact(
            v.to_string(),
            format!("kernel default {}", kernel_default(p, host).unwrap_or_default()),
        ),
        Rule::Nofile => {
            let n = nofile(target);
            rec(n, format!("{sockets} descriptors + {FD_RESERVE} reserve, next power of two"))
        }
        Rule::NrOpen => {
            let n = nofile(target);
            rec(n, format!("≥ nofile {n}; kernel default {kd}"))
        }
        Rule::FileMax => rec(
            headroom(sockets),
            format!("{sockets} descriptors + 25 %; kernel default ≈ {kd}"),
        ),
        Rule::EpollWatches => rec(
            headroom(sockets),
            format!("{sockets} sockets + 25 %; kernel default ≈ {kd}"),
        ),
        Rule::TcpMem => {
            let [a, b, c] = tcp_mem(host, target);
            let [na, nb, nc] = tcp_mem_shape(tcp_mem_need(host, target));
            let [da, db, dc] = tcp_mem_default(host);
            Rec {
                key: p.key,
                value: Some(format!("{a} {b} {c}")),
                need: Some(format!("{na} {nb} {nc}")),
                basis: format!(
                    "pressure = max({sockets} × {} B / {} B pages, kernel {db}); default ≈ {da} {db} {dc}",
                    target.buffered, host.page_size
                ),
                param: p,
            }
        }
        Rule::Somaxconn => rec(
            storm(target),
            format!(
                "{} conns / {STORM_DIVISOR} at once, power of two in {SOMAXCONN_MIN}..{SOMAXCONN_MAX}",
                target.conns
            ),
        ),
        Rule::SynBacklog => {
            let s = storm(target);
            rec(s, format!("the same storm as somaxconn, {s}; kernel default ≈ {kd}"))
        }
        Rule::PortRange => exact(
            format!("{} {}", PORT_RANGE.0, PORT_RANGE.1),
            format!("{} ports per source IP and destination", port_count()),
        ),
        Rule::MaxOrphans => {
            let v = pow2(sockets.div_ceil(4));
            rec(
                v,
                format!(
                    "{sockets} sockets / 4, power of two; kernel default ≈ {kd}; worst case {} B each",
                    ORPHAN_MAX_BYTES
                ),
            )
        }
        Rule::MaxTwBuckets => {
            let v = pow2(sockets);
            rec(
                v,
                format!("one per socket, power of two; kernel default ≈ {kd}; ~{TIME_WAIT_BYTES} B each"),
            )
        }
        Rule::ConntrackMax => {
            if !host.conntrack_loaded {
                return none("conntrack not loaded: nothing to size".to_string());
            }
            rec(
                headroom(sockets),
                format!("{sockets} connections + 25 %; kernel default ≈ {kd}"),
            )
        }
    }
}

fn port_count() -> u64 {
    PORT_RANGE.1 - PORT_RANGE.0 + 1
}

/// Computes the memory math.
pub fn math(host: &Host, target: &Target) -> Math {
    let spc = target.sockets_per_conn();
    let sockets = target.sockets();
    let per_conn = spc * KERNEL_BYTES_PER_SOCKET;
    let buffered_total = sockets.saturating_mul(target.buffered);
    let usable = host.mem_bytes - host.mem_bytes / 4;
    let tw_cap = PARAMS
        .iter()
        .find(|p| p.rule == Rule::MaxTwBuckets)
        .map(|p| recommend(p, host, target))
        .and_then(|r| r.value)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let nofile = nofile(target);
    Math {
        sockets_per_conn: spc,
        sockets,
        kernel_bytes_per_socket: KERNEL_BYTES_PER_SOCKET,
        kernel_bytes_per_conn: per_conn,
        kernel_bytes_total: sockets.saturating_mul(KERNEL_BYTES_PER_SOCKET),
        buffered_bytes_total: buffered_total,
        buffered_pages: buffered_total.div_ceil(host.page_size),
        tcp_mem: tcp_mem(host, target),
        tcp_mem_default: tcp_mem_default(host),
        usable_bytes: usable,
        capacity_idle: usable / per_conn,
        capacity_busy: usable / (spc * (KERNEL_BYTES_PER_SOCKET + target.buffered)),
        fds_total: sockets,
        nofile,
        fds_per_worker: sockets.div_ceil(host.cpus.max(1)),
        source_ips_per_destination: match target.role {
            Role::Server => None,
            Role::Client | Role::Proxy => Some(target.conns.div_ceil(port_count())),
        },
        time_wait_bytes_at_cap: tw_cap.saturating_mul(TIME_WAIT_BYTES),
        keepalive_probes_default: sockets / DEFAULT_KEEPALIVE_SECS,
        keepalive_probes_notes: sockets / NOTES_KEEPALIVE_SECS,
    }
}

/// Builds the plan: a recommendation for every entry c1m writes, the math, and warnings when
/// the target does not fit.
pub fn plan(host: Host, target: Target) -> Plan {
    let recs: Vec<Rec> = PARAMS
        .iter()
        .filter(|p| p.verdict.writes())
        .map(|p| recommend(p, &host, &target))
        .collect();
    let m = math(&host, &target);
    let mut warnings = Vec::new();
    if target.conns > m.capacity_idle {
        warnings.push(format!(
            "{} connections do not fit: this RAM holds about {} idle connections ({} B of kernel \
             memory each, keeping a quarter of RAM for everything else)",
            target.conns, m.capacity_idle, m.kernel_bytes_per_conn
        ));
    } else if target.conns > m.capacity_busy {
        warnings.push(format!(
            "{} connections fit idle but not with {} B buffered on each at once (about {} do); \
             lower --buffered or add RAM",
            target.conns, target.buffered, m.capacity_busy
        ));
    }
    if target.sockets().saturating_add(FD_RESERVE) > NR_OPEN_MAX {
        warnings.push(format!(
            "no process can hold {} descriptors (fs.nr_open tops out at {NR_OPEN_MAX}): spread the \
             connections over several processes",
            target.sockets()
        ));
    }
    let tcp_max_bytes = m.tcp_mem[2].saturating_mul(host.page_size);
    if tcp_max_bytes.saturating_add(m.kernel_bytes_total) > host.mem_bytes {
        warnings.push(format!(
            "tcp_mem max ({} pages) plus socket memory exceeds RAM: under a full broadcast TCP \
             could take all memory",
            m.tcp_mem[2]
        ));
    }
    Plan {
        host,
        target,
        math: m,
        recs,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn host(mem: u64) -> Host {
        Host {
            mem_bytes: mem,
            cpus: 2,
            page_size: 4096,
            conntrack_loaded: true,
        }
    }

    fn target(conns: u64, role: Role) -> Target {
        Target {
            conns,
            role,
            buffered: 4096,
        }
    }

    #[test]
    fn kernel_shape_matches_live_kernel() {
        // A live 6.18 box printed 287898 383866 575796 for limit 383866.
        assert_eq!(tcp_mem_shape(383_866), [287_898, 383_866, 575_796]);
    }

    #[test]
    fn one_million_on_24_gib_server() {
        let h = host(24 * GIB);
        let t = target(1_000_000, Role::Server);
        let p = plan(h, t);
        // 24 GiB = 6291456 pages; kernel limit 6291456/16 = 393216.
        assert_eq!(p.math.tcp_mem_default, [294_912, 393_216, 589_824]);
        // 1e6 sockets × 4096 B / 4096 B = 1e6 pages of pressure; min 750000; max 1500000.
        assert_eq!(p.value("net.ipv4.tcp_mem"), Some("750000 1000000 1500000"));
        // 1e6 + 1024 = 1001024 → 2^20.
        assert_eq!(p.value("limits.nofile"), Some("1048576"));
        assert_eq!(p.value("systemd.LimitNOFILE"), Some("1048576"));
        assert_eq!(p.value("fs.nr_open"), Some("1048576"));
        // 25769803776 / 10240 = 2516582 > 1.25e6.
        assert_eq!(p.value("fs.file-max"), Some("2516582"));
        // 25769803776 / 25 / 160 = 6442450.
        assert_eq!(p.value("fs.epoll.max_user_watches"), Some("6442450"));
        // 1e6 / 100 = 10000 → 16384.
        assert_eq!(p.value("net.core.somaxconn"), Some("16384"));
        assert_eq!(p.value("net.ipv4.tcp_max_syn_backlog"), Some("16384"));
        // ehash: 24 GiB / 128 KiB = 196608 → 262144 slots; default orphans 131072.
        // 1e6/4 = 250000 → 262144.
        assert_eq!(p.value("net.ipv4.tcp_max_orphans"), Some("262144"));
        assert_eq!(p.value("net.ipv4.tcp_max_tw_buckets"), Some("1048576"));
        assert_eq!(p.value("net.netfilter.nf_conntrack_max"), Some("1250000"));
        assert_eq!(p.value("net.ipv4.tcp_slow_start_after_idle"), Some("0"));
        assert_eq!(p.value("net.ipv4.tcp_syncookies"), Some("1"));
        // Server: no port range, no tw_reuse.
        assert_eq!(p.value("net.ipv4.ip_local_port_range"), None);
        assert_eq!(p.value("net.ipv4.tcp_tw_reuse"), None);
        // Usable = 24 GiB × 3/4 = 19327352832; / 4700 = 4112202; / 8796 = 2197288.
        assert_eq!(p.math.usable_bytes, 19_327_352_832);
        assert_eq!(p.math.capacity_idle, 4_112_202);
        assert_eq!(p.math.capacity_busy, 2_197_288);
        assert_eq!(p.math.kernel_bytes_total, 4_700_000_000);
        assert_eq!(p.math.fds_per_worker, 500_000);
        assert_eq!(p.math.source_ips_per_destination, None);
        assert_eq!(p.math.keepalive_probes_notes, 33_333);
        assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    }

    #[test]
    fn one_million_on_24_gib_client() {
        let p = plan(host(24 * GIB), target(1_000_000, Role::Client));
        assert_eq!(p.value("net.ipv4.ip_local_port_range"), Some("10000 65535"));
        assert_eq!(p.value("net.ipv4.tcp_tw_reuse"), Some("1"));
        // No listener: somaxconn, syn backlog and syncookies do not apply.
        assert_eq!(p.value("net.core.somaxconn"), None);
        assert_eq!(p.value("net.ipv4.tcp_max_syn_backlog"), None);
        assert_eq!(p.value("net.ipv4.tcp_syncookies"), None);
        // 1e6 / 55536 ports = 18.006 → 19 source IPs per destination.
        assert_eq!(p.math.source_ips_per_destination, Some(19));
        assert_eq!(p.value("net.ipv4.tcp_mem"), Some("750000 1000000 1500000"));
    }

    #[test]
    fn proxy_doubles_sockets() {
        let p = plan(host(24 * GIB), target(1_000_000, Role::Proxy));
        assert_eq!(p.math.sockets, 2_000_000);
        // 2000000 + 1024 → 2^21; nr_open must follow it above the default.
        assert_eq!(p.value("limits.nofile"), Some("2097152"));
        assert_eq!(p.value("fs.nr_open"), Some("2097152"));
        // 2e6 pages of pressure: 1500000 2000000 3000000.
        assert_eq!(p.value("net.ipv4.tcp_mem"), Some("1500000 2000000 3000000"));
        // 2e6 + 25 % = 2.5e6 is below the 2516582 default.
        assert_eq!(p.value("fs.file-max"), Some("2516582"));
        // Capacity per proxied connection: 19327352832 / 9400 = 2056101.
        assert_eq!(p.math.capacity_idle, 2_056_101);
        assert!(p.value("net.ipv4.ip_local_port_range").is_some());
        assert!(p.value("net.core.somaxconn").is_some());
    }

    #[test]
    fn small_box_never_below_kernel_defaults_and_warns() {
        // 2 GiB, 10000 connections: every sized value stays at the kernel default.
        let h = host(2 * GIB);
        let p = plan(h, target(10_000, Role::Server));
        // 524288 pages / 16 = 32768.
        assert_eq!(p.value("net.ipv4.tcp_mem"), Some("24576 32768 49152"));
        assert_eq!(p.value("net.core.somaxconn"), Some("4096"));
        // 10000 / 100 = 100 → 128 arriving at once; the defaults cover it (syn backlog on
        // 2 GiB: max(128, 16384 slots / 128) = 128).
        assert_eq!(p.need("net.core.somaxconn"), Some("128"));
        assert_eq!(p.value("net.ipv4.tcp_max_syn_backlog"), Some("128"));
        // ehash 2 GiB / 128 KiB = 16384 slots: default orphans 8192 > 10000/4 → 4096.
        assert_eq!(p.value("net.ipv4.tcp_max_orphans"), Some("8192"));
        // What the target itself needs stays below the defaults, so a live default passes.
        assert_eq!(p.need("net.ipv4.tcp_max_orphans"), Some("4096"));
        assert_eq!(p.need("net.ipv4.tcp_mem"), Some("7500 10000 15000"));
        assert_eq!(p.need("fs.file-max"), Some("12500"));
        assert_eq!(p.value("fs.nr_open"), Some("1048576"));
        // 10000 + 1024 → 16384.
        assert_eq!(p.value("limits.nofile"), Some("16384"));
        assert!(p.warnings.is_empty());

        // 1M connections on 2 GiB: 1.5 GiB usable / 4700 B = 342683 idle connections.
        let p = plan(h, target(1_000_000, Role::Server));
        assert_eq!(p.math.capacity_idle, 342_683);
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    }

    #[test]
    fn buffered_bytes_drive_tcp_mem() {
        let mut t = target(1_000_000, Role::Server);
        t.buffered = 16 * 1024;
        // 1e6 × 16384 B / 4096 B = 4e6 pages; min 3e6, max 6e6 (22.9 GiB: warns on 24 GiB
        // together with 4.4 GiB of sockets).
        let p = plan(host(24 * GIB), t);
        assert_eq!(p.value("net.ipv4.tcp_mem"), Some("3000000 4000000 6000000"));
        // 19327352832 / (4700 + 16384) = 916683 connections with 16 KiB queued each.
        assert_eq!(p.math.capacity_busy, 916_683);
        assert_eq!(p.warnings.len(), 2, "{:?}", p.warnings);
    }

    #[test]
    fn nofile_stops_at_nr_open_max() {
        let p = plan(host(1 << 50), target(3_000_000_000, Role::Server));
        assert_eq!(p.value("limits.nofile"), Some("2147483584"));
        assert_eq!(p.value("fs.nr_open"), Some("2147483584"));
        assert!(p.warnings.iter().any(|w| w.contains("no process can hold")));
    }

    #[test]
    fn somaxconn_clamps() {
        assert_eq!(somaxconn(&target(100, Role::Server)), 4096);
        assert_eq!(somaxconn(&target(10_000_000, Role::Server)), 65535);
    }

    #[test]
    fn page_size_scales_tcp_mem() {
        let mut h = host(24 * GIB);
        h.page_size = 65536;
        // 393216 pages of 64 KiB / 16 = 24576; need 1e6 × 4096 / 65536 = 62500 pages.
        assert_eq!(tcp_mem_default(&h), [18432, 24576, 36864]);
        assert_eq!(
            tcp_mem(&h, &target(1_000_000, Role::Server)),
            [46875, 62500, 93750]
        );
    }

    #[test]
    fn conntrack_only_when_loaded() {
        let mut h = host(24 * GIB);
        h.conntrack_loaded = false;
        let p = plan(h, target(1_000_000, Role::Server));
        assert_eq!(p.value("net.netfilter.nf_conntrack_max"), None);
    }
}
