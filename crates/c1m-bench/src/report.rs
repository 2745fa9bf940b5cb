//! What a run tells its user: the live progress line, the final text summary, the JSON report
//! (`--report`) and the exit code.

use crate::hist::{percentiles, Percentiles};
use crate::human::{fmt_us, thousands};
use crate::run::{Run, Totals};
use serde_json::json;

pub fn progress_line(run: &Run, t: &Totals, rate: f64, elapsed: f64) -> String {
    let errors: u64 = t.errors.values().sum();
    let mut line = format!(
        "{:>6.1}s  online {} / {} · {}/s · connecting {} · errors {}",
        elapsed,
        thousands(t.online),
        thousands(run.args.conns),
        thousands(rate.round() as u64),
        thousands(t.connecting),
        thousands(errors)
    );
    if !run.connect_h.is_empty() {
        line.push_str(&format!(
            " · connect p99 {}",
            fmt_us(run.connect_h.value_at_quantile(0.99))
        ));
    }
    if run.publishing {
        line.push_str(&format!(" · published {}", thousands(run.published)));
        if !run.delivery_h.is_empty() {
            line.push_str(&format!(
                " · delivered {} · delivery p99 {}",
                thousands(t.delivery.received),
                fmt_us(run.delivery_h.value_at_quantile(0.99))
            ));
        }
    }
    line
}

fn pct_line(name: &str, p: &Percentiles) -> String {
    if p.count == 0 {
        return format!("{name:<10} (none)");
    }
    format!(
        "{name:<10} p50 {} · p90 {} · p99 {} · p99.9 {} · max {}  ({} samples)",
        fmt_us(p.p50_us),
        fmt_us(p.p90_us),
        fmt_us(p.p99_us),
        fmt_us(p.p999_us),
        fmt_us(p.max_us),
        thousands(p.count)
    )
}

/// Bench's own memory: summed PSS growth of the workers and the coordinator over the
/// connections held at the end.
fn bench_memory(run: &Run) -> (u64, u64, Option<f64>) {
    let (mut start, mut end) = run.coordinator_pss;
    let mut held = 0u64;
    for r in run.latest.iter().filter(|r| r.last) {
        start += r.pss_start;
        end += r.pss_now;
        held += r.online;
    }
    let per = (held > 0 && end > 0).then(|| end.saturating_sub(start) as f64 / held as f64);
    (start, end, per)
}

/// The verdict behind exit code 0: the run held its full --hold, every connection came online,
/// nothing failed, and (when publishing) every due message arrived exactly once.
pub fn success(run: &Run, t: &Totals) -> bool {
    let all_online = run.peak_online >= run.args.conns;
    let no_errors = t.errors.is_empty() && run.publish_errors.is_empty();
    let delivered = !run.publishing || (run.published > 0 && t.delivery.delivered_to_all());
    // An interrupted run, or one cut by --duration, did not do what was asked; nor did one
    // that lost an agent (its connections were not held to the end).
    let completed = run.stop_reason == "hold complete"
        && run.fleet.as_ref().is_none_or(|f| f.lost().count() == 0);
    if let Some(storm) = crate::scenario::storm_figures(run, t) {
        // A restart makes connection and publish errors (closed streams, refused reconnects,
        // publishes during the outage): they are reported, and the storm's own verdict (all
        // back and caught up, nothing lost, duplicated or gapped) replaces "no errors".
        return all_online && storm.all_back() && delivered && completed;
    }
    all_online && no_errors && delivered && completed
}

pub fn json_report(run: &Run) -> serde_json::Value {
    let t = run.totals();
    let (pss_start, pss_end, per_conn) = bench_memory(run);
    let server = run.server_peak.map(|peak| {
        let per_conn_total =
            (peak.connections > 0).then(|| peak.pss_bytes as f64 / peak.connections as f64);
        let per_conn_delta = run.server_before.and_then(|b| {
            let dc = peak.connections.saturating_sub(b.connections);
            (dc > 0).then(|| peak.pss_bytes.saturating_sub(b.pss_bytes) as f64 / dc as f64)
        });
        json!({
            "baseline": run.server_before,
            "peak": peak,
            "pss_bytes_per_connection": per_conn_total,
            "pss_delta_bytes_per_connection": per_conn_delta,
        })
    });
    let d = &t.delivery;
    json!({
        "tool": "c1m bench",
        "version": env!("CARGO_PKG_VERSION"),
        "started_utc": run.started_utc,
        "command": run.command,
        "target": {
            "url": run.args.url,
            "proto": run.args.proto().name(),
            "destination": run.dst.to_string(),
            "channels": run.args.channels,
        },
        "plan": {
            "conns": run.args.conns,
            "rate": run.args.rate,
            "workers": run.workers,
            "source_addresses": run.sources.len(),
            "sources_first": run.sources.first().map(|s| s.to_string()),
            "sources_last": run.sources.last().map(|s| s.to_string()),
            "per_source_max": run.per_source,
            "port_range_per_socket": run.port_range.map(|(lo, hi)| format!("{lo}-{hi}")),
            "max_inflight_per_worker": run.args.max_inflight,
            "connect_timeout_s": run.args.connect_timeout.as_secs_f64(),
            "hold_s": run.args.hold.as_secs_f64(),
            "duration_s": run.args.duration.map(|d| d.as_secs_f64()),
            "reconnect": run.args.reconnect,
            "publish_every_s": run.args.publish_every.map(|d| d.as_secs_f64()),
            "publish_rate": run.args.publish_rate,
            "payload_size": run.args.payload_size,
            "publishers": run.args.publishers,
            "publish_from_start": run.args.publish_from_start,
            "publish_url": run.args.publish_url,
            "publish_cmd": run.args.publish_cmd,
        },
        "result": {
            "success": success(run, &t),
            "stop_reason": run.stop_reason,
            "elapsed_s": run.elapsed_secs,
            "ramp_s": run.ramp_secs,
            "open_rate_avg": run.ramp_secs.map(|s| t.subscribed as f64 / s.max(1e-3)),
            "peak_online": run.peak_online,
            "online_at_end": t.online,
            "attempts": t.attempts,
            "connected": t.connected,
            "subscribed": t.subscribed,
            "closed": t.closed,
            "churned": t.churned,
            "online_min_during_hold": run.hold_online_min,
            "notes": run.notes,
        },
        "errors": t.errors,
        "errors_total": t.errors.values().sum::<u64>(),
        "latency_us": {
            "connect": percentiles(&run.connect_h),
            "subscribe": percentiles(&run.subscribe_h),
            "delivery": percentiles(&run.delivery_h),
            "publish_ack": percentiles(&run.publish_h),
        },
        "publishing": {
            "published": run.published,
            "errors": run.publish_errors,
        },
        "delivery": {
            "delivered_to_all": run.publishing && run.published > 0 && d.delivered_to_all(),
            "totals": d,
        },
        "memory": {
            "bench": {
                "pss_start_bytes": pss_start,
                "pss_end_bytes": pss_end,
                "coordinator_pss_start_bytes": run.coordinator_pss.0,
                "coordinator_pss_end_bytes": run.coordinator_pss.1,
                "pss_delta_bytes_per_connection": per_conn,
            },
            "server": server,
        },
        "scenario": run.args.scenario.map(|s| s.json(run, &t)),
        "publishing_rate_per_s": crate::scenario::publish_rate(run),
        "fleet": crate::fleet::report::json(run),
        "timeline": run.timeline,
        "server_timeline": run.server_timeline,
        "server_readings_unanswered": run.server_unanswered,
        "environment": crate::env::environment(),
    })
}

pub fn text_summary(run: &Run) -> String {
    let t = run.totals();
    let mut s = String::new();
    let place = match &run.fleet {
        Some(f) => format!("on {} agents", f.agents.len()),
        None => format!("{} source address(es)", run.sources.len().max(1)),
    };
    s.push_str(&format!(
        "c1m bench · {} {} · {} connections · {} workers · {place}\n",
        run.args.proto().name(),
        run.args.url,
        thousands(run.args.conns),
        run.workers,
    ));
    s.push_str(&format!(
        "stopped    {} after {:.1}s\n",
        run.stop_reason, run.elapsed_secs
    ));
    let ramp = match run.ramp_secs {
        Some(r) => format!(
            " · ramp {:.2}s ({}/s)",
            r,
            thousands((t.subscribed as f64 / r.max(1e-3)).round() as u64)
        ),
        None => " · ramp not finished".into(),
    };
    s.push_str(&format!(
        "online     {} at end · peak {} / {}{}\n",
        thousands(t.online),
        thousands(run.peak_online),
        thousands(run.args.conns),
        ramp
    ));
    if t.errors.is_empty() {
        s.push_str("errors     none\n");
    } else {
        let list: Vec<String> = t
            .errors
            .iter()
            .map(|(k, v)| format!("{k} {}", thousands(*v)))
            .collect();
        s.push_str(&format!("errors     {}\n", list.join(" · ")));
    }
    s.push_str(&pct_line("connect", &percentiles(&run.connect_h)));
    s.push('\n');
    if run.args.proto() != crate::proto::Proto::Connect {
        s.push_str(&pct_line("subscribe", &percentiles(&run.subscribe_h)));
        s.push('\n');
    }
    if run.publishing {
        let perr: u64 = run.publish_errors.values().sum();
        s.push_str(&format!(
            "published  {} messages · {} failed\n",
            thousands(run.published),
            thousands(perr)
        ));
        s.push_str(&pct_line("delivery", &percentiles(&run.delivery_h)));
        s.push('\n');
        let d = &t.delivery;
        s.push_str(&format!(
            "delivered  {} of {} expected · missing {} · duplicates {} · reordered {} · server gaps {} · wrong channel {} · foreign {} · stale {}\n",
            thousands(d.received_in_window),
            thousands(d.expected),
            thousands(d.missing),
            thousands(d.duplicates),
            thousands(d.reordered),
            thousands(d.server_gaps),
            thousands(d.wrong_channel),
            thousands(d.foreign),
            thousands(d.stale),
        ));
        s.push_str(&format!(
            "verdict    delivered to all: {}\n",
            if run.published > 0 && d.delivered_to_all() {
                "yes"
            } else {
                "NO"
            }
        ));
    }
    if let Some(sc) = run.args.scenario {
        s.push_str(&sc.text(run, &t));
    }
    s.push_str(&crate::fleet::report::text(run));
    let (_, _, per) = bench_memory(run);
    if let Some(per) = per {
        s.push_str(&format!(
            "memory     bench {:.0} B per held connection (PSS growth of workers and coordinator)",
            per
        ));
        if let Some(peak) = run.server_peak {
            if peak.connections > 0 {
                s.push_str(&format!(
                    " · server {:.0} B per connection (PSS {} MiB / {} connections)",
                    peak.pss_bytes as f64 / peak.connections as f64,
                    peak.pss_bytes >> 20,
                    thousands(peak.connections)
                ));
            }
        }
        s.push('\n');
    }
    for n in &run.notes {
        s.push_str(&format!("note       {n}\n"));
    }
    s
}

/// Prints the summary, writes report and plot, returns the exit code.
pub fn finish(run: &Run) -> anyhow::Result<u8> {
    use anyhow::Context;
    print!("{}", text_summary(run));
    if let Some(path) = &run.args.report {
        let v = json_report(run);
        let text = serde_json::to_string_pretty(&v).context("encode report")?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("write report {}", path.display()))?;
    }
    if let Some(path) = &run.args.plot {
        std::fs::write(path, crate::plot::svg(run))
            .with_context(|| format!("write plot {}", path.display()))?;
    }
    Ok(if success(run, &run.totals()) { 0 } else { 1 })
}
