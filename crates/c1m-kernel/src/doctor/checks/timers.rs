//! TCP timers that decide how long dead or closing connections hold memory: keepalive
//! (time, intvl, probes), tcp_retries2 (and TCP_USER_TIMEOUT per socket), tcp_orphan_retries,
//! and tcp_notsent_lowat (how much unsent data a slow reader may pile up).

use super::skipped;
use crate::doctor::{Ctx, Finding, Status};

/// RFC 1122 4.2.3.5: at least 100 s before giving up on data in flight; 8 retries ≈ 102 s.
pub const RETRIES2_MIN: u64 = 8;
/// Keepalive probes per second across the target above which the probes are a load.
pub const PROBES_PER_SEC_MAX: u64 = 10_000;
/// Below this tcp_notsent_lowat a writer wakes for every few hundred bytes.
pub const NOTSENT_LOWAT_MIN: u64 = 4096;

/// Seconds before a retransmitting connection is dropped after `retries` (RTO from 200 ms,
/// doubling, capped at 120 s: net/ipv4/tcp_timer.c retransmits_timed_out()).
pub fn retries_secs(retries: u64) -> f64 {
    let mut t = 0.0;
    let mut rto = 0.2f64;
    for _ in 0..=retries.min(64) {
        t += rto;
        rto = (rto * 2.0).min(120.0);
    }
    t
}

pub fn dead_peers(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.dead-peers";
    let get = |k: &str| ctx.sysctl_u64(k).ok();
    let (Some(time), Some(intvl), Some(probes), Some(r2)) = (
        get("net.ipv4.tcp_keepalive_time"),
        get("net.ipv4.tcp_keepalive_intvl"),
        get("net.ipv4.tcp_keepalive_probes"),
        get("net.ipv4.tcp_retries2"),
    ) else {
        return skipped(N, "tcp_keepalive_* or tcp_retries2 not readable");
    };
    let mut f = Finding::new(
        N,
        Status::Pass,
        format!(
            "an idle dead peer is found after {} s (keepalive {time} + {intvl} × {probes}, SO_KEEPALIVE sockets only); one with data in flight after ~{:.0} s (tcp_retries2 {r2}); TCP_USER_TIMEOUT bounds both per socket, c1m serve pings its own clients",
            time + intvl * probes,
            retries_secs(r2)
        ),
    );
    if r2 < RETRIES2_MIN {
        f.status = Status::Warn;
        f.summary.push_str(&format!(
            "; tcp_retries2 {r2} gives up after {:.0} s, below RFC 1122's 100 s: a short outage kills healthy connections",
            retries_secs(r2)
        ));
        f = f.fix(format!("sysctl -w net.ipv4.tcp_retries2={RETRIES2_MIN}  # and set TCP_USER_TIMEOUT on the sockets that need faster detection"));
    }
    if let Some(conns) = ctx.target_conns {
        let rate = conns / time.max(1);
        if rate > PROBES_PER_SEC_MAX {
            f.status = f.status.max(Status::Warn);
            f.summary.push_str(&format!(
                "; {conns} SO_KEEPALIVE sockets at {time} s send {rate} probes/s"
            ));
            f = f.fix(format!(
                "sysctl -w net.ipv4.tcp_keepalive_time={}  # at most {PROBES_PER_SEC_MAX} probes/s",
                conns.div_ceil(PROBES_PER_SEC_MAX)
            ));
        }
    }
    f
}

pub fn orphan_retries(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.orphan-retries";
    let Ok(r) = ctx.sysctl_u64("net.ipv4.tcp_orphan_retries") else {
        return skipped(N, "net.ipv4.tcp_orphan_retries not readable");
    };
    // 0 means 8 for a peer that still answers (tcp_timer.c tcp_orphan_retries()).
    let eff = if r == 0 { 8 } else { r };
    let mut f = Finding::new(
        N,
        Status::Pass,
        format!(
            "tcp_orphan_retries {r}: an orphan retransmits {eff} times, ~{:.0} s, before it is killed",
            retries_secs(eff)
        ),
    );
    let orphans = ctx.after.sockstat.get("TCP.orphan").copied().unwrap_or(0);
    let max = ctx
        .sysctl_u64("net.ipv4.tcp_max_orphans")
        .unwrap_or(u64::MAX);
    if eff > 3 && orphans.saturating_mul(4) >= max {
        f.status = Status::Warn;
        f.summary.push_str(&format!(
            "; {orphans} orphans crowd tcp_max_orphans {max} (penalty ×4 reaches it)"
        ));
        f = f.fix("sysctl -w net.ipv4.tcp_orphan_retries=3  # orphans give up after ~3 s");
    }
    f
}

pub fn notsent_lowat(ctx: &Ctx) -> Finding {
    const N: &str = "tcp.notsent-lowat";
    let Ok(v) = ctx.sysctl_u64("net.ipv4.tcp_notsent_lowat") else {
        return skipped(N, "net.ipv4.tcp_notsent_lowat not readable");
    };
    if v < NOTSENT_LOWAT_MIN {
        return Finding::new(
            N,
            Status::Warn,
            format!("tcp_notsent_lowat {v}: writers wake for every few hundred unsent bytes; sys CPU grows with connections written to"),
        )
        .fix("sysctl -w net.ipv4.tcp_notsent_lowat=16384");
    }
    let shown = if v >= u64::from(u32::MAX) {
        "unlimited".to_string()
    } else {
        format!("{v} B")
    };
    Finding::new(
        N,
        Status::Pass,
        format!("tcp_notsent_lowat {shown}: a slow reader's unsent data may fill its send buffer (TCP_NOTSENT_LOWAT per socket bounds it)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_times() {
        // 15 retries: 0.2 × (2^10 - 1) = 204.6 s, then 6 × 120 s = 924.6 s.
        assert!(
            (retries_secs(15) - 924.6).abs() < 0.1,
            "{}",
            retries_secs(15)
        );
        assert!((retries_secs(8) - 102.2).abs() < 0.1, "{}", retries_secs(8));
    }
}
