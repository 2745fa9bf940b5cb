//! `c1m tune --check`: the live value of every table entry against the plan, and the sysctl
//! and limits config files under the root that would undo it at boot or still set obsolete
//! and harmful keys.
//!
//! Owns: walking the table and producing one [`Row`] per key (live sysctls here, config files
//! in `conf`, value comparisons in `status`). `apply` reuses the rows: a row's `target` is what
//! it writes.

pub use super::status::{compare, is_harmful, target, Status};

use super::calc::{MemVerdict, Plan, Said};
use super::conf::{check_limits, check_systemd, check_systemd_default, scan_sysctl_configs};
use crate::params::{lookup, Kind, Param, Verdict, PARAMS};
use crate::root::Root;
use anyhow::Result;
use serde::Serialize;

/// Where `--apply` writes the sysctl drop-in; config files sorting after it override it.
pub const SYSCTL_DROPIN: &str = "/etc/sysctl.d/90-c1m.conf";
/// Where `--apply` writes the pam_limits drop-in.
pub const LIMITS_DROPIN: &str = "/etc/security/limits.d/90-c1m.conf";

/// One line of the check.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub key: &'static str,
    pub status: Status,
    pub live: Option<String>,
    pub recommended: Option<String>,
    /// What `--apply` writes for this key (live rows only).
    pub target: Option<String>,
    pub note: String,
    /// The note in Chinese (`--lang zh`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note_zh: String,
    /// `FILE:LINE` for rows found in config files.
    pub source: Option<String>,
}

/// Checks every table entry against the live tree and the config files. `service` names the
/// systemd unit whose LimitNOFILE= is checked; without it that row is information only.
pub fn check(root: &Root, plan: &Plan, service: Option<&str>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for p in PARAMS {
        match (p.kind, p.key) {
            (Kind::Limits, _) => rows.extend(check_limits(root, plan, p)?),
            (_, "systemd.DefaultLimitNOFILE") => {
                rows.extend(check_systemd_default(root, p, service)?)
            }
            _ => rows.extend(check_entry(root, plan, p, service)?),
        }
    }
    if let Some(p) = lookup_exact("limits.nofile") {
        rows.extend(check_self_nofile(root, plan, p)?);
    }
    rows.extend(scan_sysctl_configs(root, plan)?);
    // The memory math's verdict is a row of its own (nothing for --apply to write): a
    // finding when the target does not fit, a warning when only tcp_mem's cap bites.
    let m = &plan.math;
    if let Some((verdict, msg)) = super::calc::memory_verdict(&plan.host, &plan.target, m) {
        let human = super::units::human_bytes;
        let (status, live, recommended) = match verdict {
            MemVerdict::DoesNotFit => (
                Status::DoesNotFit,
                format!("{} usable", human(m.usable_bytes)),
                format!("{} needed", human(m.kernel_bytes_needed)),
            ),
            MemVerdict::TcpMemCapped => (
                Status::TcpMemCapped,
                format!(
                    "{} pressure",
                    human(m.tcp_mem[1].saturating_mul(plan.host.page_size))
                ),
                format!("{} queued", human(m.buffered_bytes_total)),
            ),
        };
        rows.push(Row {
            key: "memory.target",
            status,
            live: Some(live),
            recommended: Some(recommended),
            target: None,
            note: msg.en,
            note_zh: msg.zh,
            source: None,
        });
    }
    Ok(rows)
}

impl Row {
    /// A row for a table entry, before recommended/target/source are filled in.
    pub fn new(p: &Param, status: Status, live: Option<String>, note: impl Into<Said>) -> Row {
        let note = note.into();
        Row {
            key: p.key,
            status,
            live,
            recommended: None,
            target: None,
            note: note.en,
            note_zh: note.zh,
            source: None,
        }
    }
}

fn check_entry(
    root: &Root,
    plan: &Plan,
    p: &'static Param,
    service: Option<&str>,
) -> Result<Option<Row>> {
    match (p.kind, service) {
        (Kind::Sysctl, _) => check_sysctl(root, plan, p),
        (Kind::Limits, _) => Ok(None),
        (Kind::Systemd, Some(unit)) => check_systemd(root, plan, p, unit).map(Some),
        (Kind::Systemd, None) => Ok(plan.value(p.key).map(|v| {
            let mut r = Row::new(
                p,
                Status::Info,
                None,
                (
                    format!(
                        "services need LimitNOFILE={v} in a unit drop-in (--service NAME writes it)"
                    ),
                    format!("服务需要在单元 drop-in 里写 LimitNOFILE={v}（--service NAME 会写入）"),
                ),
            );
            r.recommended = Some(v.to_string());
            r
        })),
        (Kind::Other, _) => Ok(None),
    }
}

fn check_sysctl(root: &Root, plan: &Plan, p: &'static Param) -> Result<Option<Row>> {
    let live = root.read_sysctl(p.key)?;
    let host = &plan.host;
    if p.verdict.writes() {
        let Some(rec) = plan.recs.iter().find(|r| r.key == p.key) else {
            return Ok(None);
        };
        let (Some(rec_v), Some(need)) = (rec.value.clone(), rec.need.clone()) else {
            // Not for this role: nothing to say. Conntrack not loaded: say so.
            if p.applies_to(plan.target.role) && live.is_none() {
                return Ok(Some(Row::new(p, Status::Missing, None, rec.basis.clone())));
            }
            return Ok(None);
        };
        let Some(live_v) = live else {
            let mut r = Row::new(
                p,
                Status::Missing,
                None,
                ("kernel lacks this key; skipped", "内核没有这个键；跳过"),
            );
            r.recommended = Some(rec_v);
            return Ok(Some(r));
        };
        let status = if is_harmful(p, &live_v, host) {
            Status::Harmful
        } else {
            compare(p, &live_v, &need, host)
        };
        let note: Said = match status {
            Status::Harmful => p.danger.into(),
            Status::High if p.unit == crate::params::Unit::Pages => {
                let pct = super::calc::TCP_MEM_RAM_PCT;
                (
                    format!("max above {pct}% of RAM: memory pressure would start only after the OOM killer"),
                    format!("max 超过内存的 {pct}%：内存压力模式要到 OOM killer 之后才会开始"),
                )
                    .into()
            }
            _ => p.why.into(),
        };
        let tgt = target(p, &live_v, &rec_v, status);
        let mut r = Row::new(p, status, Some(live_v), note);
        r.recommended = Some(rec_v);
        r.target = Some(tgt);
        return Ok(Some(r));
    }
    let Some(live_v) = live else {
        return Ok(None);
    };
    match p.verdict {
        Verdict::Harmful | Verdict::Obsolete => {
            let bad = is_harmful(p, &live_v, host);
            let status = match (bad, p.verdict) {
                (false, _) => Status::Ok,
                (true, Verdict::Obsolete) => Status::Obsolete,
                (true, _) => Status::Harmful,
            };
            let note = if bad { p.danger } else { p.why };
            let mut r = Row::new(p, status, Some(live_v), note);
            if bad {
                r.target = p.fix.map(str::to_string);
                r.recommended = p.fix.map(str::to_string);
            }
            Ok(Some(r))
        }
        Verdict::Inform => Ok(Some(Row::new(p, Status::Info, Some(live_v), p.why))),
        _ => Ok(None),
    }
}

/// This process's own RLIMIT_NOFILE (the shell that ran c1m): information, since new logins
/// and restarted services get the configured limits.
fn check_self_nofile(root: &Root, plan: &Plan, p: &'static Param) -> Result<Option<Row>> {
    if !root.exists("/proc/self/limits") {
        return Ok(None);
    }
    let n = root.self_nofile()?;
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let mut r = Row::new(
        p,
        Status::Info,
        Some(format!("soft {} hard {}", show(n.soft), show(n.hard))),
        (
            "this session's limit; new logins get limits.d, services LimitNOFILE=",
            "本会话的限制；新登录按 limits.d，服务按 LimitNOFILE=",
        ),
    );
    r.recommended = plan.value(p.key).map(str::to_string);
    r.source = Some("/proc/self/limits".to_string());
    Ok(Some(r))
}

/// Config files name keys exactly; the short forms `explain` accepts would misfire here.
pub(super) fn lookup_exact(key: &str) -> Option<&'static Param> {
    lookup(key).filter(|p| p.key.eq_ignore_ascii_case(key))
}

/// Exit code of a check: 1 when any row asks for a change.
pub fn exit_code(rows: &[Row]) -> u8 {
    u8::from(rows.iter().any(|r| r.status.needs_change()))
}
