//! The calculator: turns the host (RAM, CPUs, page size, conntrack loaded) and the target
//! (connections, role, expected buffered bytes) into a value for every table entry whose
//! [`Rule`] says c1m sizes it, plus the memory math shown to the user.
//!
//! Owns: the sizing formulas and the estimates of the kernel's own defaults; the memory
//! budget (tcp_mem and its cap, what fits in RAM) is in `tune::memory`. It reads nothing
//! from disk (the caller builds [`Host`] from a `Root`), so every formula is unit-testable with
//! hand-computed figures.

pub use super::memory::{
    buffered_within_cap, memory_verdict, socket_slab_bytes, table_cap, tcp_mem, tcp_mem_cap,
    tcp_mem_capped, tcp_mem_default, tcp_mem_need, tcp_mem_shape, usable_bytes, MemVerdict,
    RESERVE_DIVISOR, TABLE_RAM_PCT, TCP_MEM_RAM_PCT,
};
pub use super::slab::ObjSizes;
use super::units::human_bytes;
use crate::params::{KernelDefault, Param, Role, Rule, PARAMS};
use c1m_proto::ports;
use serde::Serialize;

/// Descriptors a process needs besides its connections (listeners, logs, pipes, libraries).
pub const FD_RESERVE: u64 = 1024;
/// The most fs.nr_open can be on 64-bit kernels (`sysctl_nr_open_max`: INT_MAX rounded down to
/// a multiple of BITS_PER_LONG), so the most descriptors one process can ever hold.
pub const NR_OPEN_MAX: u64 = 2_147_483_584;
/// Queued data an orphan may still hold (ip-sysctl.rst tcp_max_orphans: "up to ~64K").
pub const ORPHAN_MAX_BYTES: u64 = 64 * 1024;
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
    /// Kernel memory per object: this kernel's /proc/slabinfo when readable, else measured.
    pub obj: ObjSizes,
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
    /// The most tcp_mem's max may be on this box: [`TCP_MEM_RAM_PCT`] of MemTotal, less what
    /// the target's socket slab leaves, never below the kernel's own max.
    pub tcp_mem_cap: u64,
    /// Kernel memory the target needs at once: socket slab plus every buffered byte.
    pub kernel_bytes_needed: u64,
    /// Whether that fits in RAM less the reserve (a quarter for everything else).
    pub fits: bool,
    /// Whether full buffers would want a tcp_mem max above [`Math::tcp_mem_cap`], so memory
    /// pressure starts before every socket has its bytes queued (the memory may still fit).
    pub tcp_mem_capped: bool,
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
    /// Client/proxy: connections one (source, destination) pair carries at the recommended
    /// port range: under the connect() cliff at half the range (`c1m_proto::ports`).
    pub conns_per_source: Option<u64>,
    /// Client/proxy: source addresses needed per destination at that rate.
    pub source_ips_per_destination: Option<u64>,
    pub time_wait_bytes_at_cap: u64,
    pub keepalive_probes_default: u64,
    pub keepalive_probes_notes: u64,
}

/// A computed sentence in English and Chinese (`--lang zh`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Said {
    pub en: String,
    pub zh: String,
}

impl From<crate::params::Text> for Said {
    fn from(t: crate::params::Text) -> Said {
        Said::new(t.en.into(), t.zh.into())
    }
}

impl From<(&str, &str)> for Said {
    fn from((en, zh): (&str, &str)) -> Said {
        Said::new(en.into(), zh.into())
    }
}

impl From<(String, String)> for Said {
    fn from((en, zh): (String, String)) -> Said {
        Said::new(en, zh)
    }
}

impl Said {
    pub fn new(en: String, zh: String) -> Said {
        Said { en, zh }
    }

    pub fn get(&self, lang: crate::params::Lang) -> &str {
        match lang {
            crate::params::Lang::Zh if !self.zh.is_empty() => &self.zh,
            _ => &self.en,
        }
    }
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
    pub basis: Said,
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
    pub warnings: Vec<Said>,
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
        KernelDefault::EpollWatches => one(host.mem_bytes / 25 / host.obj.epoll_watch.max(1)),
        KernelDefault::Conntrack => one(conntrack_buckets_default(host.mem_bytes)),
    }
}

/// nf_conntrack's default hash buckets (and max, factor one) for this RAM, as
/// `nf_conntrack_init_start` computes it: one 8-byte bucket head per 16 KiB of RAM up to
/// 1 GiB, 65536 from 1 to 4 GiB, 262144 above, at least 1024.
pub fn conntrack_buckets_default(mem_bytes: u64) -> u64 {
    const GIB: u64 = 1 << 30;
    if mem_bytes > 4 * GIB {
        262_144
    } else if mem_bytes > GIB {
        65_536
    } else {
        (mem_bytes / 16384 / 8).max(1024)
    }
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

/// Connections that may arrive at once on one listener in a reconnect storm: 1/100 of the
/// target as a power of two, at most 65535. What somaxconn and the listen backlog need
/// (tcp_max_syn_backlog bounds nothing while syncookies are on).
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
    let rec = |need: u64, basis: Said| Rec {
        key: p.key,
        value: Some(need.max(kd).to_string()),
        need: Some(need.to_string()),
        basis,
        param: p,
    };
    let none = |basis: Said| Rec {
        key: p.key,
        value: None,
        need: None,
        basis,
        param: p,
    };
    let exact = |v: String, basis: Said| Rec {
        key: p.key,
        value: Some(v.clone()),
        need: Some(v),
        basis,
        param: p,
    };
    if !p.applies_to(target.role) {
        let r = target.role.name();
        return none(Said::new(
            format!("not for role {r}"),
            format!("不适用于角色 {r}"),
        ));
    }
    let pct = TABLE_RAM_PCT;
    match p.rule {
        Rule::None => none(Said::default()),
        Rule::Fixed(v) => {
            let d = kernel_default(p, host).unwrap_or_default();
            exact(
                v.to_string(),
                Said::new(format!("kernel default {d}"), format!("内核默认 {d}")),
            )
        }
        Rule::Nofile => rec(
            nofile(target),
            Said::new(
                format!("{sockets} descriptors + {FD_RESERVE} reserve, next power of two"),
                format!("{sockets} 个描述符 + {FD_RESERVE} 个预留，向上取 2 的幂"),
            ),
        ),
        Rule::NrOpen => {
            let n = nofile(target);
            rec(
                n,
                Said::new(
                    format!("≥ nofile {n}; kernel default {kd}"),
                    format!("≥ nofile {n}；内核默认 {kd}"),
                ),
            )
        }
        Rule::FileMax => rec(
            headroom(sockets),
            Said::new(
                format!("{sockets} descriptors + 25 %; kernel default ≈ {kd}"),
                format!("{sockets} 个描述符 + 25%；内核默认 ≈ {kd}"),
            ),
        ),
        Rule::EpollWatches => {
            let each = host.obj.epoll_watch;
            rec(
                table_cap(host, headroom(sockets), each, 0),
                Said::new(
                    format!("{sockets} sockets + 25 %, at most {pct} % of RAM at {each} B each; kernel default ≈ {kd}"),
                    format!("{sockets} 个 socket + 25%，每个 {each} B，最多占内存的 {pct}%；内核默认 ≈ {kd}"),
                ),
            )
        }
        Rule::TcpMem => {
            let [a, b, c] = tcp_mem(host, target);
            let cap = tcp_mem_cap(host, target);
            // What the target needs, but never more than the box has: a check must not ask
            // for a max the RAM cannot back.
            let need = tcp_mem_shape(tcp_mem_need(host, target));
            let [na, nb, nc] = if need[2] <= cap { need } else { [a, b, c] };
            let [da, db, dc] = tcp_mem_default(host);
            let (buf, page) = (target.buffered, host.page_size);
            let capb = human_bytes(cap.saturating_mul(page));
            let share = TCP_MEM_RAM_PCT;
            Rec {
                key: p.key,
                value: Some(format!("{a} {b} {c}")),
                need: Some(format!("{na} {nb} {nc}")),
                basis: Said::new(
                    format!(
                        "pressure = max({sockets} × {buf} B / {page} B pages, kernel {db}); max ≤ {cap} pages \
                         ({capb} = {share} % of RAM less socket slab); default ≈ {da} {db} {dc}"
                    ),
                    format!(
                        "pressure = max（{sockets} × {buf} B / {page} B 每页，内核 {db}）；max ≤ {cap} 页\
                         （{capb} = 内存的 {share}% 减去 socket slab）；默认 ≈ {da} {db} {dc}"
                    ),
                ),
                param: p,
            }
        }
        Rule::Somaxconn => {
            let c = target.conns;
            rec(
                storm(target),
                Said::new(
                    format!("{c} conns / {STORM_DIVISOR} at once, power of two in {SOMAXCONN_MIN}..{SOMAXCONN_MAX}"),
                    format!("{c} 个连接的 1/{STORM_DIVISOR} 同时到达，取 {SOMAXCONN_MIN}..{SOMAXCONN_MAX} 内的 2 的幂"),
                ),
            )
        }
        Rule::PortRange => {
            let (n, per) = (port_count(), ports::per_pair(port_count()));
            exact(
                format!("{} {}", PORT_RANGE.0, PORT_RANGE.1),
                Said::new(
                    format!("{n} ports; plan {per} connections per source address and destination (under the connect() cliff at half)"),
                    format!("{n} 个端口；每个（源地址，目的地址）按 {per} 个连接规划（低于一半处的 connect() 性能悬崖）"),
                ),
            )
        }
        Rule::MaxOrphans => {
            // A quarter closing at once, counted ×4 under the kernel's penalty: one per
            // socket, as much as the RAM share allows.
            let each = host.obj.per_socket();
            rec(
                table_cap(host, pow2(sockets), each, 0),
                Said::new(
                    format!("{sockets} sockets / 4 closing at once × 4 (the kernel's orphan penalty), power of two, at most {pct} % of RAM at {each} B each; kernel default ≈ {kd}"),
                    format!("{sockets} 个 socket 的 1/4 同时关闭 × 4（内核的孤儿惩罚），取 2 的幂，每个 {each} B，最多占内存的 {pct}%；内核默认 ≈ {kd}"),
                ),
            )
        }
        Rule::MaxTwBuckets => {
            let each = host.obj.time_wait;
            rec(
                table_cap(host, pow2(sockets), each, 0),
                Said::new(
                    format!("one per socket, power of two, at most {pct} % of RAM at {each} B each; kernel default ≈ {kd}"),
                    format!("每个 socket 一个，取 2 的幂，每个 {each} B，最多占内存的 {pct}%；内核默认 ≈ {kd}"),
                ),
            )
        }
        Rule::ConntrackMax | Rule::ConntrackBuckets => {
            if !host.conntrack_loaded {
                return none(Said::new(
                    "conntrack not loaded: nothing to size".into(),
                    "未加载 conntrack：无需设置".into(),
                ));
            }
            let each = host.obj.conntrack;
            rec(
                conntrack_max(host, target),
                Said::new(
                    format!("{sockets} connections + 25 %, at most {pct} % of RAM at {each} B each; buckets = max (the kernel's factor of one); kernel default ≈ {kd}"),
                    format!("{sockets} 个连接 + 25%，每项 {each} B，最多占内存的 {pct}%；桶数 = 上限（与内核的 1 倍比例相同）；内核默认 ≈ {kd}"),
                ),
            )
        }
    }
}

/// nf_conntrack_max (and buckets, equal to it) for the target.
pub fn conntrack_max(host: &Host, target: &Target) -> u64 {
    table_cap(host, headroom(target.sockets()), host.obj.conntrack, 0)
}

fn port_count() -> u64 {
    PORT_RANGE.1 - PORT_RANGE.0 + 1
}

/// Computes the memory math.
pub fn math(host: &Host, target: &Target) -> Math {
    let spc = target.sockets_per_conn();
    let sockets = target.sockets();
    let per_socket = host.obj.per_socket();
    let per_conn = spc * per_socket;
    let buffered_total = sockets.saturating_mul(target.buffered);
    let usable = usable_bytes(host);
    let slab = socket_slab_bytes(host, target);
    let needed = slab.saturating_add(buffered_total);
    let tw_cap = PARAMS
        .iter()
        .find(|p| p.rule == Rule::MaxTwBuckets)
        .map(|p| recommend(p, host, target))
        .and_then(|r| r.value)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let nofile = nofile(target);
    let per_source = ports::per_pair(port_count());
    let outgoing = !matches!(target.role, Role::Server);
    Math {
        sockets_per_conn: spc,
        sockets,
        kernel_bytes_per_socket: per_socket,
        kernel_bytes_per_conn: per_conn,
        kernel_bytes_total: slab,
        buffered_bytes_total: buffered_total,
        buffered_pages: buffered_total.div_ceil(host.page_size),
        tcp_mem: tcp_mem(host, target),
        tcp_mem_cap: tcp_mem_cap(host, target),
        kernel_bytes_needed: needed,
        fits: needed <= usable,
        tcp_mem_capped: tcp_mem_capped(host, target),
        tcp_mem_default: tcp_mem_default(host),
        usable_bytes: usable,
        capacity_idle: usable / per_conn.max(1),
        capacity_busy: usable / (spc * (per_socket + target.buffered)).max(1),
        fds_total: sockets,
        nofile,
        fds_per_worker: sockets.div_ceil(host.cpus.max(1)),
        conns_per_source: outgoing.then_some(per_source),
        source_ips_per_destination: outgoing
            .then(|| ports::sources_needed(target.conns, port_count())),
        time_wait_bytes_at_cap: tw_cap.saturating_mul(host.obj.time_wait),
        keepalive_probes_default: sockets / DEFAULT_KEEPALIVE_SECS,
        keepalive_probes_notes: sockets / NOTES_KEEPALIVE_SECS,
    }
}

/// Builds the plan: a recommendation for every entry c1m writes, the math, and warnings when
/// the target does not fit or its buffers would meet tcp_mem's cap.
pub fn plan(host: Host, target: Target) -> Plan {
    let recs: Vec<Rec> = PARAMS
        .iter()
        .filter(|p| p.verdict.writes())
        .map(|p| recommend(p, &host, &target))
        .collect();
    let m = math(&host, &target);
    let mut warnings: Vec<Said> = memory_verdict(&host, &target, &m)
        .map(|(_, s)| s)
        .into_iter()
        .collect();
    if target.sockets().saturating_add(FD_RESERVE) > NR_OPEN_MAX {
        let n = target.sockets();
        warnings.push(Said::new(
            format!(
                "no process can hold {n} descriptors (fs.nr_open tops out at {NR_OPEN_MAX}): \
                 spread the connections over several processes"
            ),
            format!(
                "没有进程能持有 {n} 个描述符（fs.nr_open 最多 {NR_OPEN_MAX}）：把连接分散到多个进程"
            ),
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
#[path = "calc_tests.rs"]
mod tests;
