//! The per-agent sections of a fleet run's summary and JSON report: each agent's share,
//! limits, online and delivery figures, its own latency percentiles, its clock offset, and
//! whether it was lost (its connections then counted as "agent lost", not as lost messages).

use crate::hist::percentiles;
use crate::human::{fmt_us, thousands};
use crate::run::Run;
use serde_json::{json, Value};

pub fn json(run: &Run) -> Option<Value> {
    let fleet = run.fleet.as_ref()?;
    let agents: Vec<Value> = fleet
        .agents
        .iter()
        .map(|a| {
            let t = a.totals(&run.latest);
            json!({
                "agent": a.spec,
                "host": a.host,
                "limits": a.limits,
                "warnings": a.warnings,
                "workers": a.workers.len(),
                "first_conn": a.first_conn,
                "conns": a.conns,
                "source_addresses": a.sources.len(),
                "subscribed": t.subscribed,
                "online_at_end": t.online,
                "errors_total": t.errors,
                "delivery": t.delivery,
                "latency_us": {
                    "connect": percentiles(&a.connect_h),
                    "subscribe": percentiles(&a.subscribe_h),
                    "delivery": percentiles(&a.delivery_h),
                },
                "clock": {
                    "start": a.clock_start,
                    "end": a.clock_end,
                    "skew_bound_us": a.skew_bound_us(),
                },
                "lost": a.lost.as_ref().map(|l| json!({
                    "at_s": l.at.saturating_duration_since(fleet.t0).as_secs_f64(),
                    "reason": l.reason,
                    "connections": l.online,
                })),
            })
        })
        .collect();
    Some(json!({
        "agents": agents,
        "agents_lost": fleet.lost().count(),
        "connections_agent_lost": fleet.lost().map(|a| a.lost.as_ref().map_or(0, |l| l.online)).sum::<u64>(),
        "clock_skew_bound_us": fleet.skew_bound_us(),
    }))
}

pub fn text(run: &Run) -> String {
    let Some(fleet) = run.fleet.as_ref() else {
        return String::new();
    };
    let mut s = String::new();
    for (i, a) in fleet.agents.iter().enumerate() {
        let t = a.totals(&run.latest);
        let mut line = format!(
            "agent {i}    {} ({}) · {} workers · {} conns · subscribed {} · online at end {} · errors {}",
            a.spec,
            a.host,
            a.workers.len(),
            thousands(a.conns),
            thousands(t.subscribed),
            thousands(t.online),
            thousands(t.errors)
        );
        let c = percentiles(&a.connect_h);
        if c.count > 0 {
            line.push_str(&format!(" · connect p99 {}", fmt_us(c.p99_us)));
        }
        if run.publishing {
            let d = percentiles(&a.delivery_h);
            line.push_str(&format!(
                " · delivered {} of {} · missing {} · duplicates {} · delivery p50 {} p99 {}",
                thousands(t.delivery.received_in_window),
                thousands(t.delivery.expected),
                thousands(t.delivery.missing),
                thousands(t.delivery.duplicates),
                fmt_us(d.p50_us),
                fmt_us(d.p99_us)
            ));
        }
        line.push_str(&format!(
            " · clock offset {:+}µs (±{}µs)",
            a.clock_end.unwrap_or(a.clock_start).offset_us,
            a.skew_bound_us()
        ));
        if let Some(l) = &a.lost {
            line.push_str(&format!(
                " · LOST at {:.1}s ({}): {} connections counted as agent lost",
                l.at.saturating_duration_since(fleet.t0).as_secs_f64(),
                l.reason,
                thousands(l.online)
            ));
        }
        s.push_str(&line);
        s.push('\n');
        for w in &a.warnings {
            s.push_str(&format!("agent {i}    warning: {w}\n"));
        }
    }
    s.push_str(&format!(
        "clock      delivery latencies are each agent's clock minus the coordinator's publish stamp: off by at most {} (largest agent offset bound)\n",
        fmt_us(fleet.skew_bound_us())
    ));
    s
}
