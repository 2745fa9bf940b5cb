//! The memory budget: how much of MemTotal TCP's queued data (tcp_mem) and the per-socket
//! tables may take, the kernel's own tcp_mem, and the verdict with its one sentence when a
//! target does not fit the box ("1M connections need ~X GiB of kernel memory; this box has
//! Y") or fits with tcp_mem capped ("tcp_mem is capped at …, so memory pressure starts at …"),
//! shared by `tune`, `tune --check`, `--apply` and `doctor`.
//!
//! Owns: the caps and their reasons. No I/O: [`Host`] carries RAM, page size and the
//! per-object sizes read from /proc/slabinfo.

use super::calc::{Host, Math, Said, Target};
use super::units::human_bytes;

/// The most of MemTotal tcp_mem's max may reach, in percent. tcp_mem counts only queued
/// data: the sockets' own slab, the processes and the page cache must fit in the rest, and
/// memory pressure (tcp_mem[1]) must start well before the OOM killer does. The kernel's own
/// default max is 3/32 of RAM (about 9 %); c1m allows up to half for a box that exists to
/// hold connections.
pub const TCP_MEM_RAM_PCT: u64 = 50;
/// Share of RAM kept for everything but connections (processes, page cache): a quarter.
pub const RESERVE_DIVISOR: u64 = 4;
/// The most of MemTotal one table of per-socket kernel objects (TIME_WAIT sockets, epoll
/// watches, conntrack entries) may cost at its cap, in percent: a limit that lets a table
/// grow past this would let that one table take the memory the sockets need.
pub const TABLE_RAM_PCT: u64 = 12;

/// The kernel's tcp_mem shape from a pressure value: min = pressure/4*3, max = 2*min
/// (`tcp_init_mem`, integer arithmetic as the kernel does it).
pub fn tcp_mem_shape(pressure: u64) -> [u64; 3] {
    let min = pressure / 4 * 3;
    [min, pressure, min * 2]
}

/// The kernel's tcp_mem: limit = free buffer pages / 16 (about RAM pages / 16), at least 128.
pub fn tcp_mem_default(host: &Host) -> [u64; 3] {
    tcp_mem_shape((host.mem_bytes / host.page_size / 16).max(128))
}

/// tcp_mem in pages: pressure covers every socket's buffered bytes at once, in the kernel's
/// shape, never below the kernel's own; but max never above [`tcp_mem_cap`]: when the target
/// needs more, the shape is taken from the cap (max = cap, pressure = 2/3 of it) and the plan
/// says the box cannot hold the target instead of writing a max the RAM does not have.
pub fn tcp_mem(host: &Host, target: &Target) -> [u64; 3] {
    let kd = tcp_mem_default(host);
    let want = tcp_mem_shape(tcp_mem_need(host, target).max(kd[1]));
    let cap = tcp_mem_cap(host, target);
    if want[2] <= cap {
        want
    } else {
        tcp_mem_shape(cap / 3 * 2)
    }
}

/// The most tcp_mem's max may be, in pages: [`TCP_MEM_RAM_PCT`] of MemTotal, and no more
/// than RAM less the reserve less the target's socket slab; never below the kernel default.
pub fn tcp_mem_cap(host: &Host, target: &Target) -> u64 {
    let share = host.mem_bytes / 100 * TCP_MEM_RAM_PCT;
    let left = usable_bytes(host).saturating_sub(socket_slab_bytes(host, target));
    (share.min(left) / host.page_size).max(tcp_mem_default(host)[2])
}

/// Whether the target's buffered bytes need a tcp_mem max above [`tcp_mem_cap`].
pub fn tcp_mem_capped(host: &Host, target: &Target) -> bool {
    tcp_mem_shape(tcp_mem_need(host, target))[2] > tcp_mem_cap(host, target)
}

/// RAM for connections: MemTotal less a quarter for processes and page cache.
pub fn usable_bytes(host: &Host) -> u64 {
    host.mem_bytes - host.mem_bytes / RESERVE_DIVISOR
}

/// Slab the target's sockets hold while idle (socket, descriptor, epoll watch).
pub fn socket_slab_bytes(host: &Host, target: &Target) -> u64 {
    target.sockets().saturating_mul(host.obj.per_socket())
}

/// A count limit for a table of `bytes_each` objects: `want`, but no more than
/// [`TABLE_RAM_PCT`] of MemTotal can hold, and never below the kernel default `kd`.
pub fn table_cap(host: &Host, want: u64, bytes_each: u64, kd: u64) -> u64 {
    let most = host.mem_bytes / 100 * TABLE_RAM_PCT / bytes_each.max(1);
    want.min(most).max(kd)
}

/// Pages every socket's buffered bytes take at once: the least pressure value the target needs.
pub fn tcp_mem_need(host: &Host, target: &Target) -> u64 {
    target
        .sockets()
        .saturating_mul(target.buffered)
        .div_ceil(host.page_size)
}

/// What the memory math says about a target, when it says anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemVerdict {
    /// Socket slab plus every buffered byte is more than the RAM left for connections: no
    /// setting makes the target fit.
    DoesNotFit,
    /// The memory fits, but full buffers would want tcp_mem's max above its cap: memory
    /// pressure starts before every socket has its bytes queued. A warning, not a finding.
    TcpMemCapped,
}

/// The memory math's verdict and its sentence, the reason first, worded the same in tune,
/// `tune --check`, `--apply` and doctor. None when the target fits with full buffers.
pub fn memory_verdict(host: &Host, target: &Target, m: &Math) -> Option<(MemVerdict, Said)> {
    if !m.fits {
        return Some((MemVerdict::DoesNotFit, does_not_fit(host, target, m)));
    }
    if !m.tcp_mem_capped {
        return None;
    }
    let page = host.page_size;
    let cap = m.tcp_mem_cap;
    let capb = human_bytes(cap.saturating_mul(page));
    let pct = TCP_MEM_RAM_PCT;
    let press = human_bytes(m.tcp_mem[1].saturating_mul(page));
    let sockets = m.sockets;
    let each = target.buffered;
    let buffered = human_bytes(m.buffered_bytes_total);
    let need = human_bytes(m.kernel_bytes_needed);
    let usable = human_bytes(m.usable_bytes);
    let ram = human_bytes(host.mem_bytes);
    let most = buffered_within_cap(host, m);
    Some((
        MemVerdict::TcpMemCapped,
        Said::new(
            format!(
                "tcp_mem is capped at {cap} pages ({capb}, {pct} % of RAM less the socket slab), so \
                 memory pressure starts at {press}, before all {sockets} sockets have {each} B \
                 queued ({buffered}); the memory fits ({need} needed, {usable} usable of {ram}). \
                 Under pressure the kernel trims socket buffers and makes senders wait, so a \
                 broadcast drains slower. Full buffers stay below pressure up to {most} B per \
                 socket (--buffered)"
            ),
            format!(
                "tcp_mem 被限制在 {cap} 页（{capb}，内存的 {pct}% 减去 socket slab），所以内存压力\
                 在 {press} 时开始，早于全部 {sockets} 个 socket 各排队 {each} B（共 {buffered}）；\
                 内存本身够用（需要 {need}，可用 {usable}，共 {ram}）。压力模式下内核收缩 socket 缓冲区、\
                 让发送方等待，广播排空得慢一些。每个 socket 不超过 {most} B（--buffered）时\
                 全部缓冲不会触发压力"
            ),
        ),
    ))
}

/// The most bytes per socket the target may have queued at once before tcp_mem's capped
/// pressure value is reached.
pub fn buffered_within_cap(host: &Host, m: &Math) -> u64 {
    m.tcp_mem[1].saturating_mul(host.page_size) / m.sockets.max(1)
}

/// The finding when the target does not fit this box's RAM: "1M connections need ~X GiB of
/// kernel memory; this box has Y", then what the plan does about tcp_mem.
fn does_not_fit(plan_host: &Host, target: &Target, m: &Math) -> Said {
    let conns = target.conns;
    let need = human_bytes(m.kernel_bytes_needed);
    let slab = human_bytes(m.kernel_bytes_total);
    let per = m.kernel_bytes_per_socket;
    let buffered = human_bytes(m.buffered_bytes_total);
    let each = target.buffered;
    let ram = human_bytes(plan_host.mem_bytes);
    let usable = human_bytes(m.usable_bytes);
    let (idle, busy) = (m.capacity_idle, m.capacity_busy);
    let cap = m.tcp_mem_cap;
    let capb = human_bytes(cap.saturating_mul(plan_host.page_size));
    let (capped, capped_zh) = if m.tcp_mem_capped {
        (
            format!(
                ". tcp_mem is capped at {cap} pages ({capb}) so memory pressure starts before \
                 the OOM killer does"
            ),
            format!("。tcp_mem 被限制在 {cap} 页（{capb}），使内存压力模式先于 OOM killer 生效"),
        )
    } else {
        (String::new(), String::new())
    };
    Said::new(
        format!(
            "{conns} connections need ~{need} of kernel memory ({slab} socket slab at {per} B per \
             socket + {buffered} buffered at {each} B per socket); this box has {ram} ({usable} \
             after a quarter for everything else), enough for about {idle} idle or {busy} busy \
             connections{capped}"
        ),
        format!(
            "{conns} 个连接需要约 {need} 内核内存（socket slab {slab}，每个 socket {per} B；\
             排队数据 {buffered}，每个 socket {each} B）；这台机器只有 {ram}（留出四分之一给其他用途后\
             剩 {usable}），大约能容纳 {idle} 个空闲连接或 {busy} 个忙碌连接{capped_zh}"
        ),
    )
}
