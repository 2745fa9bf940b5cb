//! `c1m tune --check`: the live value of every table entry against the plan, and the sysctl
//! and limits config files under the root that would undo it at boot or still set obsolete
//! and harmful keys.
//!
//! Owns: the status of a key (ok / low / high / harmful / obsolete / missing / info), the value
//! comparisons, and the value `--apply` should write (the *target*: the recommendation, but
//! never lower than a live value that is already higher). `apply` reuses the rows.

use super::calc::{kernel_default, Host, Plan};
use super::units::parse_numbers;
use crate::params::{lookup, Compare, Harm, Kind, Param, Verdict, PARAMS};
use crate::root::{normalize_value, Root};
use anyhow::Result;
use serde::Serialize;
use std::path::Path;

/// Where `--apply` writes the sysctl drop-in; config files sorting after it override it.
pub const SYSCTL_DROPIN: &str = "/etc/sysctl.d/90-c1m.conf";
/// Where `--apply` writes the pam_limits drop-in.
pub const LIMITS_DROPIN: &str = "/etc/security/limits.d/90-c1m.conf";

/// A key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Low,
    High,
    Harmful,
    Obsolete,
    /// The kernel lacks the key (or the module is not loaded): skipped, not a failure.
    Missing,
    /// Shown for information; never a finding.
    Info,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Low => "low",
            Status::High => "high",
            Status::Harmful => "harmful",
            Status::Obsolete => "obsolete",
            Status::Missing => "missing",
            Status::Info => "info",
        }
    }

    /// Whether this status asks for a change (exit 1).
    pub fn needs_change(self) -> bool {
        matches!(
            self,
            Status::Low | Status::High | Status::Harmful | Status::Obsolete
        )
    }
}

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
    /// `FILE:LINE` for rows found in config files.
    pub source: Option<String>,
}

/// Whether a value is harmful for this entry.
pub fn is_harmful(p: &Param, value: &str, host: &Host) -> bool {
    let v = normalize_value(value);
    match p.harm {
        Harm::Never => false,
        Harm::Equals(s) => v == s,
        Harm::NotEquals(s) => v != s,
        Harm::BelowHalfDefault => {
            let kd = kernel_default(p, host).and_then(|d| parse_numbers(&d));
            match (parse_numbers(&v), kd) {
                (Some(l), Some(d)) => l[0] < d[0] / 2,
                _ => false,
            }
        }
    }
}

/// Compares a (non-harmful) value with the recommendation.
pub fn compare(p: &Param, value: &str, rec: &str, host: &Host) -> Status {
    let (l, r) = match (parse_numbers(value), parse_numbers(rec)) {
        (Some(l), Some(r)) => (l, r),
        _ => {
            return if normalize_value(value) == normalize_value(rec) {
                Status::Ok
            } else {
                Status::Low
            }
        }
    };
    match p.compare {
        Compare::None => Status::Info,
        Compare::Exact if l == r => Status::Ok,
        Compare::Exact if l < r => Status::Low,
        Compare::Exact => Status::High,
        Compare::AtLeast => {
            if l.len() != r.len() || l.iter().zip(&r).any(|(a, b)| a < b) {
                Status::Low
            } else if p.unit == crate::params::Unit::Pages
                && l.last()
                    .copied()
                    .unwrap_or(0)
                    .saturating_mul(host.page_size)
                    > host.mem_bytes
            {
                // A tcp_mem max above RAM lets TCP buffers starve every process.
                Status::High
            } else {
                Status::Ok
            }
        }
        Compare::WiderRange => match (l.as_slice(), r.as_slice()) {
            ([llo, lhi], [rlo, rhi]) if llo <= rlo && lhi >= rhi => Status::Ok,
            _ => Status::Low,
        },
    }
}

/// The value `--apply` writes: the recommendation, except that a live value already at or
/// above it (element-wise) is kept, so c1m never lowers anything.
pub fn target(p: &Param, live: &str, rec: &str, status: Status) -> String {
    if status == Status::Ok && p.compare != Compare::Exact {
        return normalize_value(live);
    }
    if p.compare == Compare::AtLeast && status == Status::Low {
        if let (Some(l), Some(r)) = (parse_numbers(live), parse_numbers(rec)) {
            if l.len() == r.len() {
                let m: Vec<String> = l
                    .iter()
                    .zip(&r)
                    .map(|(a, b)| a.max(b).to_string())
                    .collect();
                return m.join(" ");
            }
        }
    }
    rec.to_string()
}

/// Checks every table entry against the live tree and the config files.
pub fn check(root: &Root, plan: &Plan) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for p in PARAMS {
        if let Some(row) = check_entry(root, plan, p)? {
            rows.push(row);
        }
    }
    rows.extend(scan_sysctl_configs(root, plan)?);
    Ok(rows)
}

fn row(p: &Param, status: Status, live: Option<String>, note: impl Into<String>) -> Row {
    Row {
        key: p.key,
        status,
        live,
        recommended: None,
        target: None,
        note: note.into(),
        source: None,
    }
}

fn check_entry(root: &Root, plan: &Plan, p: &'static Param) -> Result<Option<Row>> {
    match p.kind {
        Kind::Sysctl => check_sysctl(root, plan, p),
        Kind::Limits => check_limits(root, plan, p).map(Some),
        Kind::Systemd => Ok(plan.value(p.key).map(|v| {
            let mut r = row(
                p,
                Status::Info,
                None,
                format!(
                    "services need LimitNOFILE={v} in a unit drop-in (--service NAME writes it)"
                ),
            );
            r.recommended = Some(v.to_string());
            r
        })),
        Kind::Other => Ok(None),
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
                return Ok(Some(row(p, Status::Missing, None, rec.basis.clone())));
            }
            return Ok(None);
        };
        let Some(live_v) = live else {
            let mut r = row(p, Status::Missing, None, "kernel lacks this key; skipped");
            r.recommended = Some(rec_v);
            return Ok(Some(r));
        };
        let status = if is_harmful(p, &live_v, host) {
            Status::Harmful
        } else {
            compare(p, &live_v, &need, host)
        };
        let note = match status {
            Status::Harmful => p.danger.en.to_string(),
            Status::High if p.unit == crate::params::Unit::Pages => {
                "max above RAM: TCP buffers could starve processes".to_string()
            }
            _ => p.why.en.to_string(),
        };
        let tgt = target(p, &live_v, &rec_v, status);
        let mut r = row(p, status, Some(live_v), note);
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
            let note = if bad { p.danger.en } else { p.why.en };
            let mut r = row(p, status, Some(live_v), note);
            if bad {
                r.target = p.fix.map(str::to_string);
                r.recommended = p.fix.map(str::to_string);
            }
            Ok(Some(r))
        }
        Verdict::Inform => Ok(Some(row(p, Status::Info, Some(live_v), p.why.en))),
        _ => Ok(None),
    }
}

/// pam_limits nofile as configured for `*`: limits.conf, then limits.d/*.conf in name order;
/// the last line for each of soft and hard wins.
fn check_limits(root: &Root, plan: &Plan, p: &'static Param) -> Result<Row> {
    let rec: Option<u64> = plan.value(p.key).and_then(|v| v.parse().ok());
    let mut files = vec![Path::new("/etc/security/limits.conf").to_path_buf()];
    files.extend(root.list_dir("/etc/security/limits.d")?);
    let (mut soft, mut hard) = (None, None);
    let mut source = None;
    for f in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "conf"))
    {
        let Some(text) = root.read_opt(f)? else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("");
            let w: Vec<&str> = line.split_whitespace().collect();
            if let [domain, kind, item, value] = w[..] {
                if domain != "*" || item != "nofile" {
                    continue;
                }
                let v = if value == "unlimited" || value == "infinity" {
                    Some(u64::MAX)
                } else {
                    value.parse().ok()
                };
                if matches!(kind, "soft" | "-") {
                    soft = v;
                }
                if matches!(kind, "hard" | "-") {
                    hard = v;
                }
                source = Some(format!("{}:{}", f.display(), i + 1));
            }
        }
    }
    let live = match (soft, hard) {
        (None, None) => None,
        (s, h) => Some(format!(
            "soft {} hard {}",
            s.map_or("default".into(), |v| v.to_string()),
            h.map_or("default".into(), |v| v.to_string())
        )),
    };
    let ok = rec.is_some_and(|r| soft.unwrap_or(0) >= r && hard.unwrap_or(0) >= r);
    let mut r = row(
        p,
        if ok { Status::Ok } else { Status::Low },
        live,
        "login sessions (pam_limits) for `*`; root needs its own lines",
    );
    r.recommended = rec.map(|v| v.to_string());
    r.source = source;
    Ok(r)
}

/// One `key = value` line of a sysctl config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfLine {
    pub file: String,
    pub line: usize,
    pub key: String,
    pub value: String,
}

/// Parses sysctl.conf syntax: `#`/`;` comments, optional leading `-` (ignore errors), keys
/// with `.` or `/`.
pub fn parse_sysctl_conf(file: &str, text: &str) -> Vec<ConfLine> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        let Some((k, v)) = t.split_once('=') else {
            continue;
        };
        let key = k.trim().trim_start_matches('-').trim().replace('/', ".");
        out.push(ConfLine {
            file: file.to_string(),
            line: i + 1,
            key,
            value: normalize_value(v),
        });
    }
    out
}

/// Config lines that set obsolete or harmful values, or that (being read after c1m's drop-in)
/// would put a key back below the recommendation at boot.
fn scan_sysctl_configs(root: &Root, plan: &Plan) -> Result<Vec<Row>> {
    let dropin_name = Path::new(SYSCTL_DROPIN).file_name();
    let mut files: Vec<(std::path::PathBuf, bool)> = Vec::new();
    for f in root.list_dir("/etc/sysctl.d")? {
        if f.extension().is_none_or(|e| e != "conf") || f.file_name() == dropin_name {
            continue;
        }
        let after = f.file_name() > dropin_name;
        files.push((f, after));
    }
    // procps `sysctl --system` reads /etc/sysctl.conf last.
    files.push((Path::new("/etc/sysctl.conf").to_path_buf(), true));
    let mut rows = Vec::new();
    for (f, after) in files {
        let Some(text) = root.read_opt(&f)? else {
            continue;
        };
        for cl in parse_sysctl_conf(&f.display().to_string(), &text) {
            let Some(p) = lookup_exact(&cl.key) else {
                continue;
            };
            let source = Some(format!("{}:{}", cl.file, cl.line));
            let mut status = None;
            let mut note = String::new();
            if p.verdict == Verdict::Obsolete {
                status = Some(Status::Obsolete);
                note = format!(
                    "removed in {}; delete this line: {}",
                    p.removed.unwrap_or("?"),
                    p.danger.en
                );
            } else if is_harmful(p, &cl.value, &plan.host) {
                status = Some(Status::Harmful);
                note = format!("delete this line: {}", p.danger.en);
            } else if let (true, Some(need)) = (after && p.verdict.writes(), plan.need(p.key)) {
                let s = compare(p, &cl.value, need, &plan.host);
                if s.needs_change() {
                    status = Some(s);
                    note = format!(
                        "read after {SYSCTL_DROPIN}, so at boot it overrides c1m's value (needs {need})"
                    );
                }
            }
            if let Some(status) = status {
                rows.push(Row {
                    key: p.key,
                    status,
                    live: Some(cl.value),
                    recommended: plan.value(p.key).map(str::to_string),
                    target: None,
                    note,
                    source,
                });
            }
        }
    }
    Ok(rows)
}

/// Config files name keys exactly; the short forms `explain` accepts would misfire here.
fn lookup_exact(key: &str) -> Option<&'static Param> {
    lookup(key).filter(|p| p.key.eq_ignore_ascii_case(key))
}

/// Exit code of a check: 1 when any row asks for a change.
pub fn exit_code(rows: &[Row]) -> u8 {
    u8::from(rows.iter().any(|r| r.status.needs_change()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            mem_bytes: 24 << 30,
            cpus: 2,
            page_size: 4096,
            conntrack_loaded: false,
        }
    }

    fn p(key: &str) -> &'static Param {
        lookup(key).unwrap()
    }

    #[test]
    fn harm_predicates() {
        let h = host();
        assert!(is_harmful(p("net.ipv4.tcp_max_tw_buckets"), "5000", &h));
        // Default on 24 GiB is 131072: 65536 is half, not below half.
        assert!(!is_harmful(p("net.ipv4.tcp_max_tw_buckets"), "65536", &h));
        assert!(is_harmful(p("net.ipv4.ip_no_pmtu_disc"), "1", &h));
        assert!(!is_harmful(p("net.ipv4.ip_no_pmtu_disc"), "0\n", &h));
        assert!(is_harmful(p("vm.swappiness"), "0", &h));
        assert!(!is_harmful(p("vm.swappiness"), "10", &h));
        assert!(is_harmful(p("net.ipv4.tcp_tw_recycle"), "1", &h));
    }

    #[test]
    fn comparisons() {
        let h = host();
        let mem = p("net.ipv4.tcp_mem");
        let rec = "750000 1000000 1500000";
        assert_eq!(compare(mem, "287898\t383866\t575796", rec, &h), Status::Low);
        assert_eq!(compare(mem, "750000 1000000 2000000", rec, &h), Status::Ok);
        // 7000000 pages × 4 KiB = 26.7 GiB > 24 GiB RAM.
        assert_eq!(
            compare(mem, "750000 1000000 7000000", rec, &h),
            Status::High
        );
        let reuse = p("net.ipv4.tcp_tw_reuse");
        assert_eq!(compare(reuse, "2", "1", &h), Status::High);
        assert_eq!(compare(reuse, "0", "1", &h), Status::Low);
        let range = p("net.ipv4.ip_local_port_range");
        assert_eq!(
            compare(range, "32768 60999", "10000 65535", &h),
            Status::Low
        );
        assert_eq!(compare(range, "1024 65535", "10000 65535", &h), Status::Ok);
    }

    #[test]
    fn target_never_lowers() {
        let mem = p("net.ipv4.tcp_mem");
        let rec = "750000 1000000 1500000";
        assert_eq!(
            target(mem, "800000 900000 2000000", rec, Status::Low),
            "800000 1000000 2000000"
        );
        let orphans = p("net.ipv4.tcp_max_orphans");
        assert_eq!(target(orphans, "4000000", "262144", Status::Ok), "4000000");
        let range = p("net.ipv4.ip_local_port_range");
        assert_eq!(
            target(range, "1024 65535", "10000 65535", Status::Ok),
            "1024 65535"
        );
        assert_eq!(
            target(range, "32768 60999", "10000 65535", Status::Low),
            "10000 65535"
        );
    }

    #[test]
    fn conf_parsing() {
        let t = "# c\n; c\nnet.ipv4.tcp_tw_recycle = 1\n-net/ipv4/tcp_mem=1 2  3\nnonsense\n";
        let v = parse_sysctl_conf("/etc/sysctl.conf", t);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].key, "net.ipv4.tcp_tw_recycle");
        assert_eq!(v[0].line, 3);
        assert_eq!(v[1].key, "net.ipv4.tcp_mem");
        assert_eq!(v[1].value, "1 2 3");
    }
}
