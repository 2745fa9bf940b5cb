//! Config files under the root: sysctl.conf and sysctl.d (lines that set obsolete or harmful
//! keys, or that are read after c1m's drop-in and would undo it at boot), pam_limits nofile
//! for every domain, a named systemd unit's LimitNOFILE=, systemd's DefaultLimitNOFILE=, and
//! any of those above fs.nr_open (critical: logins refused, units failing).
//!
//! Owns: parsing those files' syntax. c1m reads them and never edits them.

use super::calc::{Plan, Said};
use super::check::{lookup_exact, Row, SYSCTL_DROPIN};
use super::render::unit_name;
use super::status::{compare, is_harmful, Status};
use crate::nofile;
use crate::params::{Lang, Param, Verdict};
use crate::root::{normalize_value, Root};
use anyhow::Result;
use std::path::Path;

/// pam_limits nofile, every domain: one row per domain that has nofile lines (`*` always,
/// judged against the recommendation: a user's own line wins over `*` for that user). A
/// domain with a line above fs.nr_open is critical (that login would be refused): that is
/// its one verdict, never "ok" beside a critical for the same lines.
pub(super) fn check_limits(root: &Root, plan: &Plan, p: &'static Param) -> Result<Vec<Row>> {
    let rec: Option<u64> = plan.value(p.key).and_then(|v| v.parse().ok());
    let lines = nofile::pam_lines(root)?;
    let nr_open = live_nr_open(root)?;
    let mut domains: Vec<&str> = vec!["*"];
    for l in &lines {
        if !domains.contains(&l.domain.as_str()) {
            domains.push(&l.domain);
        }
    }
    let show = |v: Option<u64>| match v {
        // Unset: the inherited default applies ("-", like other empty columns).
        None => "-".to_string(),
        Some(u64::MAX) => "unlimited".to_string(),
        Some(v) => v.to_string(),
    };
    let mut rows = Vec::new();
    for d in domains {
        let mine: Vec<&nofile::Line> = lines.iter().filter(|l| l.domain == d).collect();
        let soft = mine.iter().rev().find_map(|l| l.soft);
        let hard = mine.iter().rev().find_map(|l| l.hard);
        let live = (soft.is_some() || hard.is_some())
            .then(|| format!("soft {} hard {}", show(soft), show(hard)));
        let ok = rec.is_some_and(|r| soft.unwrap_or(0) >= r && hard.unwrap_or(0) >= r);
        let note: (String, String) = match d {
            "*" => (
                "login sessions (pam_limits) for `*`; root needs its own lines".into(),
                "`*` 的登录会话（pam_limits）；root 需要单独的行".into(),
            ),
            "root" => (
                "login sessions of root (`*` does not match root)".into(),
                "root 的登录会话（`*` 不匹配 root）".into(),
            ),
            g if g.starts_with('@') => (
                format!("logins of group {g}: wins over `*` for its members"),
                format!("组 {g} 的登录：对其成员优先于 `*`"),
            ),
            u => (
                format!("logins of {u}: a user's own line wins over @group and `*`"),
                format!("{u} 的登录：用户自己的行优先于 @组 和 `*`"),
            ),
        };
        let mut r = Row::new(p, if ok { Status::Ok } else { Status::Low }, live, note);
        r.recommended = rec.map(|v| v.to_string());
        r.source = mine.last().map(|l| l.at());
        if let Some(c) = above_nr_open(&mine, nr_open) {
            c.apply(&mut r);
        }
        rows.push(r);
    }
    Ok(rows)
}

/// The live fs.nr_open, when readable.
fn live_nr_open(root: &Root) -> Result<Option<u64>> {
    Ok(root
        .read_sysctl("fs.nr_open")?
        .and_then(|v| v.trim().parse::<u64>().ok()))
}

/// The critical verdict on the lines that set one limit (a pam domain, a unit, the manager
/// default) when any is above fs.nr_open: the reason first, every such line, both fixes.
struct AboveNrOpen {
    note: Said,
    /// The first line above nr_open (`FILE:LINE`).
    source: String,
}

impl AboveNrOpen {
    /// Makes `r` critical with this reason: the worst verdict wins the row.
    fn apply(self, r: &mut Row) {
        r.status = Status::Critical;
        r.note = self.note.en;
        r.note_zh = self.note.zh;
        r.source = Some(self.source);
    }
}

fn above_nr_open(lines: &[&nofile::Line], nr_open: Option<u64>) -> Option<AboveNrOpen> {
    let nr_open = nr_open?;
    let bad: Vec<&nofile::Line> = lines.iter().copied().filter(|l| l.above(nr_open)).collect();
    let worst = *bad.iter().max_by_key(|l| l.largest())?;
    let v = worst.largest().unwrap_or(0);
    let setting = worst.setting(v);
    let whom = worst.whom();
    let at: Vec<String> = bad.iter().map(|l| l.at()).collect();
    let at = at.join(", ");
    let [raise, lower] = nofile::fix_above_all(&bad, nr_open);
    let (one, one_zh) = if bad.len() == 1 {
        ("the line", "这一行")
    } else {
        ("the lines", "这些行")
    };
    Some(AboveNrOpen {
        note: Said::new(
            format!(
                "{setting} for {whom} is above fs.nr_open {nr_open} ({at}): {}. Fix: {raise}; or lower {one}: {lower}",
                worst.effect(),
            ),
            format!(
                "{whom} 的 {setting} 超过 fs.nr_open {nr_open}（{at}）：{}。修复：{raise}；或者调低{one_zh}：{lower}",
                worst.effect_zh(),
            ),
        ),
        source: bad[0].at(),
    })
}

/// systemd's DefaultLimitNOFILE=: information (c1m gives the one service its own
/// LimitNOFILE=), critical when above fs.nr_open; plus a critical row for every other unit
/// whose LimitNOFILE= is above it (`service`, the unit `--service` names, has its own row).
pub(super) fn check_systemd_default(
    root: &Root,
    p: &'static Param,
    service: Option<&str>,
) -> Result<Vec<Row>> {
    let lines = nofile::systemd_lines(root)?;
    let nr_open = live_nr_open(root)?;
    let defaults: Vec<&nofile::Line> = lines
        .iter()
        .filter(|l| l.origin == nofile::Origin::Default)
        .collect();
    let default = defaults.last();
    let mut r = Row::new(
        p,
        Status::Info,
        default.map(|l| {
            format!(
                "soft {} hard {}",
                l.soft.map_or("-".into(), |v| v.to_string()),
                l.hard.map_or("-".into(), |v| v.to_string())
            )
        }),
        (
            "systemd's default for units without LimitNOFILE= (soft 1024, hard 524288 when unset)",
            "systemd 给未设置 LimitNOFILE= 的单元的默认值（未设置时软 1024，硬 524288）",
        ),
    );
    r.source = default.map(|l| l.at());
    if let Some(c) = above_nr_open(&defaults, nr_open) {
        c.apply(&mut r);
    }
    let mut rows = vec![r];
    let unit_key = lookup_exact("systemd.LimitNOFILE").unwrap_or(p);
    let named = service.map(unit_name);
    let mut units: Vec<&str> = Vec::new();
    for l in lines.iter().filter(|l| l.origin == nofile::Origin::Unit) {
        if !units.contains(&l.domain.as_str()) && named.as_deref() != Some(l.domain.as_str()) {
            units.push(&l.domain);
        }
    }
    for u in units {
        let mine: Vec<&nofile::Line> = lines
            .iter()
            .filter(|l| l.origin == nofile::Origin::Unit && l.domain == u)
            .collect();
        if let Some(c) = above_nr_open(&mine, nr_open) {
            let mut r = Row::new(unit_key, Status::Critical, None, Said::default());
            r.live = mine
                .iter()
                .filter_map(|l| l.largest())
                .max()
                .map(|v| v.to_string());
            c.apply(&mut r);
            rows.push(r);
        }
    }
    Ok(rows)
}

/// The unit's LimitNOFILE= from its drop-ins (and the unit file under /etc), last one wins.
pub(super) fn check_systemd(
    root: &Root,
    plan: &Plan,
    p: &'static Param,
    service: &str,
) -> Result<Row> {
    let rec: Option<u64> = plan.value(p.key).and_then(|v| v.parse().ok());
    let unit_dir = Path::new(&super::render::systemd_path(service))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let unit_file = unit_dir.with_extension("");
    let mut files = vec![unit_file];
    files.extend(root.list_dir(&unit_dir)?);
    let (mut value, mut source) = (None, None);
    for f in &files {
        let Some(text) = root.read_opt(f)? else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if let Some(v) = line.trim().strip_prefix("LimitNOFILE=") {
                value = Some(v.trim().to_string());
                source = Some(format!("{}:{}", f.display(), i + 1));
            }
        }
    }
    // `N`, `soft:hard` or `infinity`: both halves must reach the recommendation.
    let enough = |v: &str| {
        v.split(':')
            .all(|x| x == "infinity" || x.parse::<u64>().is_ok_and(|n| rec.is_some_and(|r| n >= r)))
    };
    let ok = value.as_deref().is_some_and(enough);
    let mut r = Row::new(
        p,
        if ok { Status::Ok } else { Status::Low },
        value,
        (
            format!("LimitNOFILE= of {service}; services do not read limits.d"),
            format!("{service} 的 LimitNOFILE=；服务不读 limits.d"),
        ),
    );
    r.recommended = rec.map(|v| v.to_string());
    r.source = source;
    let unit = unit_name(service);
    let lines = nofile::systemd_lines(root)?;
    let mine: Vec<&nofile::Line> = lines
        .iter()
        .filter(|l| l.origin == nofile::Origin::Unit && l.domain == unit)
        .collect();
    if let Some(c) = above_nr_open(&mine, live_nr_open(root)?) {
        c.apply(&mut r);
    }
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
pub(super) fn scan_sysctl_configs(root: &Root, plan: &Plan) -> Result<Vec<Row>> {
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
            let mut note = (String::new(), String::new());
            if p.verdict == Verdict::Obsolete {
                status = Some(Status::Obsolete);
                let r = p.removed.unwrap_or("?");
                note = (
                    format!("removed in {r}; delete this line: {}", p.danger.en),
                    format!("已在 {r} 删除；删掉这一行：{}", p.danger.get(Lang::Zh)),
                );
            } else if is_harmful(p, &cl.value, &plan.host) {
                status = Some(Status::Harmful);
                note = (
                    format!("delete this line: {}", p.danger.en),
                    format!("删掉这一行：{}", p.danger.get(Lang::Zh)),
                );
            } else if let (true, Some(need)) = (after && p.verdict.writes(), plan.need(p.key)) {
                let s = compare(p, &cl.value, need, &plan.host);
                if s.needs_change() {
                    status = Some(s);
                    note = (
                        format!("read after {SYSCTL_DROPIN}, so at boot it overrides c1m's value (needs {need})"),
                        format!("在 {SYSCTL_DROPIN} 之后读取，启动时会覆盖 c1m 的值（需要 {need}）"),
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
                    note: note.0,
                    note_zh: note.1,
                    source,
                });
            }
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

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
