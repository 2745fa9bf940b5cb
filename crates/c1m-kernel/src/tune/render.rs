//! Renders a plan: the text report, `--format json`, `--format sysctl`, and the contents of
//! the three files c1m recommends (sysctl.d drop-in, limits.d drop-in, systemd unit drop-in).
//! `apply` writes exactly what these functions return, so what is printed is what is written.
//!
//! Owns: wording and layout. No sizing, no I/O.

use super::calc::{Plan, Rec};
use super::units::human_bytes;
use crate::params::{Kind, Lang, Param, Verdict, PARAMS};
use serde_json::json;
use std::fmt::Write;

/// Where the systemd drop-in for `service` goes.
pub fn systemd_path(service: &str) -> String {
    let unit = if service.contains('.') {
        service.to_string()
    } else {
        format!("{service}.service")
    };
    format!("/etc/systemd/system/{unit}.d/90-c1m-limits.conf")
}

/// One `key = value` for the sysctl drop-in, with its reason.
#[derive(Debug, Clone)]
pub struct SysctlLine {
    pub param: &'static Param,
    pub value: String,
    pub basis: String,
}

/// The sysctl lines of a plan (recommendations that apply, in table order).
pub fn plan_sysctls(plan: &Plan) -> Vec<SysctlLine> {
    plan.recs
        .iter()
        .filter(|r| r.param.kind == Kind::Sysctl)
        .filter_map(|r: &Rec| {
            r.value.clone().map(|value| SysctlLine {
                param: r.param,
                value,
                basis: r.basis.clone(),
            })
        })
        .collect()
}

fn header(plan: &Plan) -> String {
    format!(
        "c1m tune --conns {} --role {} (RAM {}, {} CPUs, page {} B)",
        plan.target.conns,
        plan.target.role.name(),
        human_bytes(plan.host.mem_bytes),
        plan.host.cpus,
        plan.host.page_size
    )
}

/// /etc/sysctl.d/90-c1m.conf: each value preceded by its one-line why.
pub fn sysctl_dropin(plan: &Plan, lines: &[SysctlLine], lang: Lang) -> String {
    let mut s = format!(
        "# Written by {}.\n# Undo with `c1m tune --revert`; explain a key with `c1m tune explain KEY`.\n",
        header(plan)
    );
    for l in lines {
        let _ = write!(
            s,
            "\n# {} ({})\n{} = {}\n",
            l.param.why.get(lang),
            l.basis,
            l.param.key,
            l.value
        );
    }
    s
}

/// /etc/security/limits.d/90-c1m.conf. `*` does not match root in pam_limits, hence the
/// root lines.
pub fn limits_dropin(plan: &Plan, nofile: &str, lang: Lang) -> String {
    let why = crate::params::lookup("limits.nofile")
        .map(|p| p.why.get(lang))
        .unwrap_or_default();
    let nr_open = plan.value("fs.nr_open").unwrap_or("?");
    format!(
        "# Written by {}.\n# {why}: login sessions only (pam_limits); services need LimitNOFILE=.\n\
         # `*` does not match root, hence the root lines. fs.nr_open ({nr_open}) is raised first.\n\
         *     soft  nofile  {nofile}\n*     hard  nofile  {nofile}\n\
         root  soft  nofile  {nofile}\nroot  hard  nofile  {nofile}\n",
        header(plan)
    )
}

/// The systemd unit drop-in.
pub fn systemd_dropin(plan: &Plan, nofile: &str) -> String {
    format!(
        "# Written by {}.\n# Services do not read limits.d. Then: systemctl daemon-reload && systemctl restart UNIT\n\
         [Service]\nLimitNOFILE={nofile}\n",
        header(plan)
    )
}

/// `--format sysctl`: the drop-in file alone.
pub fn render_sysctl(plan: &Plan, lang: Lang) -> String {
    sysctl_dropin(plan, &plan_sysctls(plan), lang)
}

/// Entries c1m refuses to write, with the reason.
pub fn refused() -> impl Iterator<Item = &'static Param> {
    PARAMS
        .iter()
        .filter(|p| matches!(p.verdict, Verdict::Harmful | Verdict::Obsolete))
}

/// The text report.
pub fn render_text(plan: &Plan, lang: Lang, service: Option<&str>) -> String {
    let m = &plan.math;
    let t = &plan.target;
    let mut s = String::new();
    let _ = writeln!(s, "{}\n", header(plan));
    let _ = writeln!(s, "Memory math");
    let _ = writeln!(
        s,
        "  kernel memory per connection: {} socket(s) × {} B = {} B (idle sockets hold no buffers)",
        m.sockets_per_conn, m.kernel_bytes_per_socket, m.kernel_bytes_per_conn
    );
    let _ = writeln!(
        s,
        "  kernel memory for {} connections: {} (a load generator on the same box adds as much again)",
        t.conns,
        human_bytes(m.kernel_bytes_total)
    );
    let _ = writeln!(
        s,
        "  buffered at once: {} sockets × {} B = {} = {} pages of {} B",
        m.sockets,
        t.buffered,
        human_bytes(m.buffered_bytes_total),
        m.buffered_pages,
        plan.host.page_size
    );
    let pg = |v: u64| human_bytes(v.saturating_mul(plan.host.page_size));
    let [a, b, c] = m.tcp_mem;
    let [da, db, dc] = m.tcp_mem_default;
    let _ = writeln!(
        s,
        "  tcp_mem (pages): {a} {b} {c} = {} / {} / {} (kernel default ≈ {da} {db} {dc})",
        pg(a),
        pg(b),
        pg(c)
    );
    let _ = writeln!(
        s,
        "  this RAM holds: {} idle connections, {} with {} B buffered each (a quarter of RAM kept for the rest)",
        m.capacity_idle, m.capacity_busy, t.buffered
    );
    let _ = writeln!(
        s,
        "  descriptors: {} in all; nofile {} per process; {} per worker with {} workers (one per CPU)",
        m.fds_total, m.nofile, m.fds_per_worker, plan.host.cpus
    );
    if let Some(ips) = m.source_ips_per_destination {
        let _ = writeln!(
            s,
            "  source addresses per destination ip:port: {ips} (with IP_BIND_ADDRESS_NO_PORT; 127.0.0.0/8 is free on loopback)"
        );
    }
    let _ = writeln!(
        s,
        "  TIME_WAIT at the cap: {}; keepalive probes/s if every socket sets SO_KEEPALIVE: {} at {} s (default), {} at {} s (the notes)",
        human_bytes(m.time_wait_bytes_at_cap),
        m.keepalive_probes_default,
        super::calc::DEFAULT_KEEPALIVE_SECS,
        m.keepalive_probes_notes,
        super::calc::NOTES_KEEPALIVE_SECS
    );
    for w in &plan.warnings {
        let _ = writeln!(s, "  WARNING: {w}");
    }

    let _ = writeln!(
        s,
        "\n{} (order matters: nr_open first)",
        super::check::SYSCTL_DROPIN
    );
    for l in plan_sysctls(plan) {
        let _ = writeln!(
            s,
            "  {} = {}\n      # {} ({})",
            l.param.key,
            l.value,
            l.param.why.get(lang),
            l.basis
        );
    }
    let skipped: Vec<&str> = plan
        .recs
        .iter()
        .filter(|r| r.value.is_none())
        .map(|r| r.key)
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(s, "  (not for this box: {})", skipped.join(", "));
    }

    let nofile = plan.value("limits.nofile").unwrap_or("?");
    let _ = writeln!(s, "\n{}", super::check::LIMITS_DROPIN);
    for l in limits_dropin(plan, nofile, lang)
        .lines()
        .filter(|l| !l.starts_with('#'))
    {
        let _ = writeln!(s, "  {l}");
    }
    let unit = service.unwrap_or("YOUR-SERVICE");
    let _ = writeln!(
        s,
        "\n{} (services do not read limits.d)\n  [Service]\n  LimitNOFILE={nofile}",
        systemd_path(unit)
    );

    let _ = writeln!(s, "\nRefused (c1m tune explain KEY):");
    for p in refused() {
        let _ = writeln!(
            s,
            "  {:<34} {}: {}",
            p.key,
            p.verdict.name(),
            p.why.get(lang)
        );
    }
    let _ = writeln!(s, "\nInformational, not written:");
    for p in PARAMS.iter().filter(|p| p.verdict == Verdict::Inform) {
        let _ = writeln!(s, "  {:<34} {}", p.key, p.why.get(lang));
    }
    let ignored: Vec<&str> = PARAMS
        .iter()
        .filter(|p| p.verdict == Verdict::Ignore)
        .map(|p| p.key)
        .collect();
    let _ = writeln!(
        s,
        "\nIgnored (no effect on holding connections): {}",
        ignored.join(", ")
    );
    s
}

/// `--format json`: the plan, the three files and the refused keys.
pub fn render_json(plan: &Plan, lang: Lang, service: Option<&str>) -> serde_json::Value {
    let nofile = plan.value("limits.nofile").unwrap_or("?");
    let sysctls: Vec<_> = plan_sysctls(plan)
        .into_iter()
        .map(|l| {
            json!({
                "key": l.param.key,
                "value": l.value,
                "verdict": l.param.verdict.name(),
                "why": l.param.why.get(lang),
                "basis": l.basis,
            })
        })
        .collect();
    let refused: Vec<_> = refused()
        .map(|p| json!({"key": p.key, "verdict": p.verdict.name(), "why": p.why.get(lang), "removed": p.removed}))
        .collect();
    json!({
        "host": plan.host,
        "target": plan.target,
        "math": plan.math,
        "warnings": plan.warnings,
        "sysctls": sysctls,
        "nofile": nofile,
        "files": {
            super::check::SYSCTL_DROPIN: render_sysctl(plan, lang),
            super::check::LIMITS_DROPIN: limits_dropin(plan, nofile, lang),
            systemd_path(service.unwrap_or("YOUR-SERVICE")): systemd_dropin(plan, nofile),
        },
        "refused": refused,
    })
}
