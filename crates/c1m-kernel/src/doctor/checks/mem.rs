//! Whether the target fits this box's RAM, or fits with tcp_mem capped (the tune plan's
//! memory math, worded the same as `c1m tune`), and whether the TCP established hash is
//! large enough for it (thash_entries, a boot parameter).

use super::skipped;
use crate::doctor::kmsg::ehash_entries;
use crate::doctor::{Ctx, Finding, Status};
use crate::tune::calc::{buffered_within_cap, ehash_slots, memory_verdict, MemVerdict};
use crate::tune::units::human_bytes;

/// Sockets per ehash slot above which lookups walk long chains on every packet.
pub const EHASH_MAX_PER_SLOT: u64 = 4;

pub fn target_fits(ctx: &Ctx) -> Finding {
    const N: &str = "mem.target";
    let Some(plan) = &ctx.plan else {
        if let Some(e) = &ctx.plan_error {
            return skipped(N, e.clone());
        }
        let Some(h) = ctx.host else {
            return skipped(N, "/proc/meminfo not readable");
        };
        let usable = crate::tune::calc::usable_bytes(&h);
        return Finding::new(
            N,
            Status::Pass,
            format!(
                "no --conns target; {} RAM holds about {} idle connections ({} B of kernel memory each, a quarter of RAM kept for the rest)",
                human_bytes(h.mem_bytes),
                usable / h.obj.per_socket().max(1),
                h.obj.per_socket()
            ),
        );
    };
    let m = &plan.math;
    let conns = plan.target.conns;
    match memory_verdict(&plan.host, &plan.target, m) {
        Some((MemVerdict::DoesNotFit, msg)) => Finding::new(N, Status::Fail, msg.en).fix(format!(
            "c1m tune --conns {conns} --check  # sizes every limit for what this box can hold; add RAM or spread the connections over {} boxes",
            m.kernel_bytes_needed.div_ceil(m.usable_bytes.max(1))
        )),
        // The memory fits; only a broadcast to every socket at once meets memory pressure.
        Some((MemVerdict::TcpMemCapped, msg)) => Finding::new(N, Status::Warn, msg.en).fix(format!(
            "c1m tune --conns {conns} --buffered {}  # sizes tcp_mem for what can be queued at once without pressure; or add RAM",
            buffered_within_cap(&plan.host, m)
        )),
        None => Finding::new(
            N,
            Status::Pass,
            format!(
                "{conns} connections need ~{} of kernel memory; {} usable of {} RAM",
                human_bytes(m.kernel_bytes_needed),
                human_bytes(m.usable_bytes),
                human_bytes(plan.host.mem_bytes)
            ),
        ),
    }
}

pub fn ehash(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.ehash";
    let logged = ctx.log_after.as_deref().and_then(ehash_entries);
    let (slots, how) = match (logged, ctx.host) {
        (Some(n), _) => (n, "from the boot log"),
        (None, Some(h)) => (ehash_slots(&h), "estimated from RAM"),
        (None, None) => return skipped(N, "no boot log line and no /proc/meminfo"),
    };
    let Some(conns) = ctx.target_conns else {
        return Finding::new(
            N,
            Status::Pass,
            format!("TCP established hash: {slots} slots ({how})"),
        );
    };
    let sockets = ctx.plan.as_ref().map_or(conns, |p| p.target.sockets());
    let per = sockets.div_ceil(slots.max(1));
    if per <= EHASH_MAX_PER_SLOT {
        return Finding::new(
            N,
            Status::Pass,
            format!(
                "TCP established hash: {slots} slots ({how}), {per} sockets per slot at the target"
            ),
        );
    }
    let want = sockets.max(1).next_power_of_two();
    Finding::new(
        N,
        Status::Warn,
        format!(
            "TCP established hash: {slots} slots ({how}) for {sockets} sockets = {per} per slot: every packet's lookup walks the chain; the size is fixed at boot (RAM-scaled, at most 524288 without thash_entries=)"
        ),
    )
    .fix(format!(
        "sed -i 's/^GRUB_CMDLINE_LINUX=\"/GRUB_CMDLINE_LINUX=\"thash_entries={want} /' /etc/default/grub && update-grub && reboot"
    ))
}
