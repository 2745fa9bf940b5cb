//! NIC receive drops and ring overruns during the interval: sysfs statistics for every
//! interface, driver counters from `ethtool -S` where ethtool is installed.

use super::{over, skipped};
use crate::doctor::{Ctx, Finding, Status};

pub fn nic_drops(ctx: &Ctx) -> Finding {
    const N: &str = "net.nic-drops";
    if ctx.after.nic.is_empty() {
        return skipped(N, "no network interface besides lo under /sys/class/net");
    }
    let mut f = Finding::new(N, Status::Pass, String::new());
    let mut rising = Vec::new();
    for (iface, now) in &ctx.after.nic {
        let before = ctx.before.nic.get(iface);
        for (k, v) in now {
            let d = v.saturating_sub(before.and_then(|b| b.get(k)).copied().unwrap_or(*v));
            if d > 0 {
                rising.push(format!("{iface} {k} +{d}"));
                f = f.detail(format!("{iface}: {k} +{d} (total {v})"));
            }
        }
    }
    if rising.is_empty() {
        f.summary = format!(
            "no receive drops {} on {}",
            over(ctx),
            ctx.after.nic.keys().cloned().collect::<Vec<_>>().join(", ")
        );
        return f;
    }
    f.status = Status::Fail;
    f.summary = format!("receive drops {}: {}", over(ctx), rising.join(", "));
    let mut ifaces: Vec<&str> = rising
        .iter()
        .filter_map(|r| r.split_whitespace().next())
        .collect();
    ifaces.dedup();
    for iface in ifaces {
        match ctx.rings.get(iface) {
            Some(&(cur, max)) if cur < max => {
                f = f.fix(format!(
                    "ethtool -G {iface} rx {max}  # RX ring {cur} of {max}"
                ));
            }
            Some(&(cur, _)) => {
                f = f.fix(format!(
                    "ethtool -L {iface} combined $(nproc)  # RX ring already at its maximum {cur}: spread the load over more queues"
                ));
            }
            None => {
                f = f.fix(format!(
                    "ethtool -g {iface} && ethtool -G {iface} rx \"$(ethtool -g {iface} | awk '/^RX:/{{print $2; exit}}')\"  # raise the RX ring to its pre-set maximum"
                ));
            }
        }
    }
    f
}
