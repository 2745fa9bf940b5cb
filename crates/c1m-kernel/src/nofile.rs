//! Where RLIMIT_NOFILE is configured on a box: pam_limits (limits.conf and limits.d, every
//! domain: users, @groups, `*`), systemd units' `LimitNOFILE=` and the manager's
//! `DefaultLimitNOFILE=` (system.conf and system.conf.d). Shared by `c1m tune --check` and
//! `c1m doctor` so both read the same lines the same way.
//!
//! Owns: parsing those files and the rule that a value above fs.nr_open is critical. The
//! kernel refuses setrlimit(RLIMIT_NOFILE) above nr_open (fs/file.c), so such a line makes
//! pam_limits fail the session (the login is refused: seed 002 locked itself out at 2M) or
//! makes the unit fail with status 205/LIMITS. `unlimited`/`infinity` are not judged: pam
//! and systemd both map them to a value the kernel accepts.

use crate::root::Root;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// systemd as PID 1 (≥ 240) raises fs.nr_open to this at boot: it writes INT_MAX rounded
/// down to 8, the kernel refuses it (its own maximum is 2147483584), and systemd halves it.
pub const SYSTEMD_NR_OPEN: u64 = 1_073_741_816;

/// Which mechanism a line feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// pam_limits: applied when a PAM session opens (login, sshd, su with pam_limits).
    Pam,
    /// `LimitNOFILE=` of one systemd unit.
    Unit,
    /// systemd's `DefaultLimitNOFILE=`: every unit without its own LimitNOFILE=.
    Default,
}

/// One configured nofile value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Line {
    pub origin: Origin,
    pub file: PathBuf,
    pub line: usize,
    /// pam: `*`, `root`, `@group`, a user name or a uid range; systemd: the unit name or
    /// `(default)`.
    pub domain: String,
    /// Soft limit set by this line, when it sets one; `u64::MAX` for unlimited/infinity.
    pub soft: Option<u64>,
    /// Hard limit set by this line, when it sets one.
    pub hard: Option<u64>,
}

impl Line {
    /// `FILE:LINE`.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }

    /// The largest finite value the line sets (unlimited is not judged).
    pub fn largest(&self) -> Option<u64> {
        [self.soft, self.hard]
            .into_iter()
            .flatten()
            .filter(|&v| v != u64::MAX)
            .max()
    }

    /// Whether this line asks for more than fs.nr_open allows.
    pub fn above(&self, nr_open: u64) -> bool {
        self.largest().is_some_and(|v| v > nr_open)
    }

    /// The setting as its file spells it: `nofile N`, `LimitNOFILE=N`, `DefaultLimitNOFILE=N`.
    pub fn setting(&self, v: u64) -> String {
        match self.origin {
            Origin::Pam => format!("nofile {v}"),
            Origin::Unit => format!("LimitNOFILE={v}"),
            Origin::Default => format!("DefaultLimitNOFILE={v}"),
        }
    }

    /// Whom the line limits: the pam domain, the unit, or every unit (the manager's default).
    pub fn whom(&self) -> &str {
        match self.origin {
            Origin::Pam | Origin::Unit => &self.domain,
            Origin::Default => "the systemd manager",
        }
    }

    /// The same in Chinese.
    pub fn effect_zh(&self) -> &'static str {
        match self.origin {
            Origin::Pam => "pam_limits 的 setrlimit() 失败，登录被拒绝",
            Origin::Unit => "该单元无法启动（状态 205/LIMITS）",
            Origin::Default => "所有没有单独设置 LimitNOFILE= 的单元都无法启动（状态 205/LIMITS）",
        }
    }

    /// What the line means for the user, in one phrase.
    pub fn effect(&self) -> &'static str {
        match self.origin {
            Origin::Pam => "pam_limits' setrlimit() fails and the login is refused",
            Origin::Unit => "the unit fails to start (status 205/LIMITS)",
            Origin::Default => {
                "every unit without its own LimitNOFILE= fails to start (status 205/LIMITS)"
            }
        }
    }
}

fn limit_value(v: &str) -> Option<u64> {
    match v {
        "unlimited" | "infinity" | "-1" => Some(u64::MAX),
        _ => v.parse().ok(),
    }
}

/// Every pam_limits nofile line: limits.conf, then limits.d/*.conf in name order.
pub fn pam_lines(root: &Root) -> Result<Vec<Line>> {
    let mut files = vec![PathBuf::from("/etc/security/limits.conf")];
    files.extend(
        root.list_dir("/etc/security/limits.d")?
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "conf")),
    );
    let mut out = Vec::new();
    for f in files {
        let Some(text) = root.read_opt(&f)? else {
            continue;
        };
        for (i, raw) in text.lines().enumerate() {
            let w: Vec<&str> = raw
                .split('#')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .collect();
            let [domain, kind, item, value] = w[..] else {
                continue;
            };
            if item != "nofile" {
                continue;
            }
            let v = limit_value(value);
            out.push(Line {
                origin: Origin::Pam,
                file: f.clone(),
                line: i + 1,
                domain: domain.to_string(),
                soft: matches!(kind, "soft" | "-").then_some(v).flatten(),
                hard: matches!(kind, "hard" | "-").then_some(v).flatten(),
            });
        }
    }
    Ok(out)
}

/// `N`, `soft:hard` or `infinity` as systemd writes a limit.
fn systemd_value(v: &str) -> (Option<u64>, Option<u64>) {
    match v.split_once(':') {
        Some((s, h)) => (limit_value(s.trim()), limit_value(h.trim())),
        None => {
            let n = limit_value(v.trim());
            (n, n)
        }
    }
}

fn scan_setting(
    root: &Root,
    files: &[PathBuf],
    key: &str,
    origin: Origin,
    domain: impl Fn(&Path) -> String,
    out: &mut Vec<Line>,
) -> Result<()> {
    for f in files {
        let Some(text) = root.read_opt(f)? else {
            continue;
        };
        for (i, raw) in text.lines().enumerate() {
            let Some(v) = raw.trim().strip_prefix(key) else {
                continue;
            };
            let Some(v) = v.trim_start().strip_prefix('=') else {
                continue;
            };
            let (soft, hard) = systemd_value(v.trim());
            out.push(Line {
                origin,
                file: f.clone(),
                line: i + 1,
                domain: domain(f),
                soft,
                hard,
            });
        }
    }
    Ok(())
}

/// systemd's DefaultLimitNOFILE= (system.conf, then system.conf.d/*.conf) and every
/// LimitNOFILE= in units and drop-ins under /etc/systemd/system.
pub fn systemd_lines(root: &Root) -> Result<Vec<Line>> {
    let mut out = Vec::new();
    let mut conf = vec![PathBuf::from("/etc/systemd/system.conf")];
    conf.extend(
        root.list_dir("/etc/systemd/system.conf.d")?
            .into_iter()
            .filter(|f| f.extension().is_some_and(|e| e == "conf")),
    );
    scan_setting(
        root,
        &conf,
        "DefaultLimitNOFILE",
        Origin::Default,
        |_| "(default)".into(),
        &mut out,
    )?;
    let unit_name = |f: &PathBuf| {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.ends_with(".service") || name.ends_with(".service.d")
    };
    let mut units: Vec<PathBuf> = root
        .list_dir("/etc/systemd/system")?
        .into_iter()
        .filter(unit_name)
        .collect();
    for d in root
        .list_subdirs("/etc/systemd/system")?
        .into_iter()
        .filter(unit_name)
    {
        units.extend(
            root.list_dir(&d)?
                .into_iter()
                .filter(|f| f.extension().is_some_and(|x| x == "conf")),
        );
    }
    let unit_of = |f: &Path| {
        let dir = f
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str());
        match dir {
            Some(d) if d.ends_with(".d") => d.trim_end_matches(".d").to_string(),
            _ => f
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string(),
        }
    };
    scan_setting(root, &units, "LimitNOFILE", Origin::Unit, unit_of, &mut out)?;
    Ok(out)
}

/// The pam nofile a login of `user` (member of `groups`) gets from these lines: pam_limits
/// applies a user's own lines over @group lines over `*` (which never matches root); within
/// one kind, the last line wins. (soft, hard), None where nothing is configured.
pub fn pam_effective(lines: &[Line], user: &str, groups: &[&str]) -> (Option<u64>, Option<u64>) {
    let rank = |d: &str| -> Option<u8> {
        if d == user {
            Some(3)
        } else if d.strip_prefix('@').is_some_and(|g| groups.contains(&g)) {
            Some(2)
        } else if d == "*" && user != "root" {
            Some(1)
        } else {
            None
        }
    };
    let pick = |get: fn(&Line) -> Option<u64>| {
        lines
            .iter()
            .filter(|l| l.origin == Origin::Pam)
            .filter_map(|l| Some((rank(&l.domain)?, get(l)?)))
            .fold(None, |best: Option<(u8, u64)>, (r, v)| match best {
                Some((br, _)) if br > r => best,
                _ => Some((r, v)),
            })
            .map(|(_, v)| v)
    };
    (pick(|l| l.soft), pick(|l| l.hard))
}

/// The fix for a line above nr_open: raise nr_open first (live and for the next boot), or
/// lower the line to nr_open. Both concrete commands.
pub fn fix_above(line: &Line, nr_open: u64) -> [String; 2] {
    fix_above_all(&[line], nr_open)
}

/// The fix for lines above nr_open that set one limit (a pam domain's soft and hard lines):
/// raise nr_open to the largest of them (live and for the next boot), or lower each line to
/// nr_open (one `sed -i` per file, one expression per line). Both concrete commands.
pub fn fix_above_all(lines: &[&Line], nr_open: u64) -> [String; 2] {
    let want = lines
        .iter()
        .filter_map(|l| l.largest())
        .max()
        .unwrap_or(nr_open);
    let mut files: Vec<&Path> = Vec::new();
    for l in lines {
        if !files.contains(&l.file.as_path()) {
            files.push(&l.file);
        }
    }
    let lower: Vec<String> = files
        .iter()
        .map(|f| {
            let exprs: Vec<String> = lines
                .iter()
                .filter(|l| l.file == *f)
                .map(|l| {
                    format!(
                        "-e '{}s/{}/{nr_open}/'",
                        l.line,
                        l.largest().unwrap_or(nr_open)
                    )
                })
                .collect();
            format!("sed -i {} {}", exprs.join(" "), f.display())
        })
        .collect();
    [
        format!(
            "sysctl -w fs.nr_open={want} && echo 'fs.nr_open = {want}' > /etc/sysctl.d/10-nr-open.conf"
        ),
        lower.join(" && "),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pam(domain: &str, soft: Option<u64>, hard: Option<u64>) -> Line {
        Line {
            origin: Origin::Pam,
            file: "/etc/security/limits.conf".into(),
            line: 1,
            domain: domain.into(),
            soft,
            hard,
        }
    }

    #[test]
    fn user_lines_win_over_groups_over_star() {
        let lines = [
            pam("*", Some(1000), Some(2000)),
            pam("@web", Some(3000), None),
            pam("alice", Some(4000), None),
        ];
        assert_eq!(
            pam_effective(&lines, "alice", &["web"]),
            (Some(4000), Some(2000))
        );
        assert_eq!(
            pam_effective(&lines, "bob", &["web"]),
            (Some(3000), Some(2000))
        );
        assert_eq!(
            pam_effective(&lines, "carol", &[]),
            (Some(1000), Some(2000))
        );
        // `*` never matches root.
        assert_eq!(pam_effective(&lines, "root", &[]), (None, None));
    }

    #[test]
    fn systemd_values() {
        assert_eq!(systemd_value("65536"), (Some(65536), Some(65536)));
        assert_eq!(systemd_value("1024:524288"), (Some(1024), Some(524288)));
        assert_eq!(systemd_value("infinity"), (Some(u64::MAX), Some(u64::MAX)));
        let l = pam("*", Some(u64::MAX), Some(2_000_000));
        assert!(l.above(1_048_576));
        assert!(!pam("*", Some(u64::MAX), None).above(1));
    }
}
