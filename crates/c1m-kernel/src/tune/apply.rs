//! `c1m tune --apply` and `--revert`.
//!
//! Apply writes the drop-ins (/etc/sysctl.d/90-c1m.conf, /etc/security/limits.d/90-c1m.conf,
//! and the systemd unit drop-in when `--service` names a unit), writes the live values under
//! /proc/sys, and first saves what it is about to overwrite in a state file
//! (/var/lib/c1m/tune-revert.json), so a crash halfway can still be reverted. It never edits
//! /etc/sysctl.conf and never lowers a value (it writes the check's *target*).
//!
//! Order: sysctls in table order (fs.nr_open first), then the sysctl drop-in, then the limits
//! and systemd drop-ins, because a nofile above the live nr_open locks logins out.
//!
//! Revert restores the saved bytes exactly, in reverse order, removes (or restores) the
//! drop-ins and deletes the state file.

use super::calc::{Plan, Said};
use super::check::{check, Row, Status, LIMITS_DROPIN, SYSCTL_DROPIN};
use super::render::{limits_dropin, sysctl_dropin, systemd_dropin, systemd_path, SysctlLine};
use crate::params::{lookup, Kind, Lang};
use crate::root::Root;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Where apply saves the previous values.
pub const STATE_FILE: &str = "/var/lib/c1m/tune-revert.json";

/// What apply overwrote, in the order it wrote it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub sysctls: Vec<SavedSysctl>,
    pub files: Vec<SavedFile>,
}

/// A sysctl's exact bytes before apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedSysctl {
    pub key: String,
    pub previous: String,
}

/// A file's content before apply; `None` when apply created it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFile {
    pub path: String,
    pub previous: Option<String>,
}

/// Options shared by apply and revert.
#[derive(Debug, Clone, Default)]
pub struct Opts {
    pub dry_run: bool,
    pub lang: Lang,
    /// systemd unit to write the LimitNOFILE= drop-in for.
    pub service: Option<String>,
}

/// The outcome: lines to print and the exit code.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub lines: Vec<String>,
    pub code: u8,
}

fn load_state(root: &Root) -> Result<Option<State>> {
    match root.read_opt(STATE_FILE)? {
        None => Ok(None),
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("parsing {STATE_FILE}")),
    }
}

fn save_state(root: &Root, state: &State) -> Result<()> {
    let text = serde_json::to_string_pretty(state).context("encoding revert state")?;
    root.write_atomic(STATE_FILE, text.as_bytes())
        .context("saving revert state")
}

/// Rows of the live tree (not config-file findings) that have a value to write.
fn live_rows(rows: &[Row]) -> impl Iterator<Item = &Row> {
    rows.iter()
        .filter(|r| r.source.is_none() && r.target.is_some())
}

/// Applies the plan under `root`.
pub fn apply(root: &Root, plan: &Plan, opts: &Opts) -> Result<Report> {
    let rows = check(root, plan, opts.service.as_deref())?;
    let mut rep = Report::default();
    let verb = if opts.dry_run {
        "would change"
    } else {
        "changed"
    };

    // Sysctls to write now, and the lines the drop-in persists (everything with a target, so a
    // value already higher is pinned rather than lowered at the next boot).
    let writes: Vec<&Row> = live_rows(&rows)
        .filter(|r| r.status.needs_change())
        .collect();
    let mut lines = Vec::new();
    for r in live_rows(&rows) {
        let Some(p) = lookup(r.key) else { continue };
        let basis = plan
            .recs
            .iter()
            .find(|x| x.key == r.key)
            .map(|x| x.basis.clone())
            .unwrap_or_else(|| {
                let v = p.verdict.name();
                Said::new(format!("repairs {v}"), format!("修复 {v}"))
            });
        lines.push(SysctlLine {
            param: p,
            value: r.target.clone().unwrap_or_default(),
            basis,
        });
    }
    for r in rows.iter().filter(|r| r.status == Status::Missing) {
        rep.lines.push(format!("skip  {}: {}", r.key, r.note));
    }
    // sysctl.conf / sysctl.d lines that stay harmful or override c1m at boot. (Limits and unit
    // rows carry a source too, but c1m's own drop-ins fix those.)
    let is_sysctl = |r: &&Row| lookup(r.key).is_some_and(|p| p.kind == Kind::Sysctl);
    // A nofile above fs.nr_open in someone else's file: c1m does not edit it, but says so.
    for r in rows.iter().filter(|r| r.status == Status::Critical) {
        rep.lines.push(format!(
            "CRITICAL  {}: {}",
            r.source.as_deref().unwrap_or("?"),
            r.note
        ));
    }
    // The target does not fit, or fits with tcp_mem capped: --apply writes the capped values
    // and says so.
    for r in rows
        .iter()
        .filter(|r| matches!(r.status, Status::DoesNotFit | Status::TcpMemCapped))
    {
        rep.lines.push(format!("WARNING  {}", r.note));
    }
    for r in rows
        .iter()
        .filter(|r| r.source.is_some() && r.status.needs_change())
        .filter(is_sysctl)
    {
        rep.lines.push(format!(
            "note  {} sets {} = {} ({}): c1m never edits it; remove the line by hand",
            r.source.as_deref().unwrap_or("?"),
            r.key,
            r.live.as_deref().unwrap_or(""),
            r.status.name()
        ));
    }

    let nofile = plan.value("limits.nofile").unwrap_or("?").to_string();
    let mut files = vec![
        (
            SYSCTL_DROPIN.to_string(),
            sysctl_dropin(plan, &lines, opts.lang),
        ),
        (
            LIMITS_DROPIN.to_string(),
            limits_dropin(plan, &nofile, opts.lang),
        ),
    ];
    match &opts.service {
        Some(unit) => files.push((systemd_path(unit), systemd_dropin(plan, &nofile))),
        None => rep.lines.push(format!(
            "note  services do not read limits.d: add LimitNOFILE={nofile} in {} (or pass --service UNIT)",
            systemd_path("UNIT")
        )),
    }

    for r in &writes {
        rep.lines.push(format!(
            "set   {} {verb}: {} -> {} ({})",
            r.key,
            r.live.as_deref().unwrap_or(""),
            r.target.as_deref().unwrap_or(""),
            r.status.name()
        ));
    }
    for (path, content) in &files {
        let same = root.read_opt(path)?.as_deref() == Some(content.as_str());
        let what = match (same, opts.dry_run) {
            (true, _) => "unchanged",
            (false, true) => "would be written",
            (false, false) => "written",
        };
        rep.lines.push(format!("file  {path} {what}"));
    }
    if opts.dry_run {
        rep.lines.push("dry run: nothing written".to_string());
        return Ok(rep);
    }

    // Save before touching anything. A second apply keeps the first saved values, so revert
    // still goes back to the state before c1m.
    let mut state = load_state(root)?.unwrap_or(State {
        version: 1,
        ..State::default()
    });
    for r in &writes {
        if state.sysctls.iter().any(|s| s.key == r.key) {
            continue;
        }
        let raw = root
            .read_sysctl_raw(r.key)?
            .with_context(|| format!("sysctl {} vanished", r.key))?;
        let previous =
            String::from_utf8(raw).with_context(|| format!("sysctl {} is not text", r.key))?;
        state.sysctls.push(SavedSysctl {
            key: r.key.to_string(),
            previous,
        });
    }
    for (path, _) in &files {
        if !state.files.iter().any(|f| &f.path == path) {
            state.files.push(SavedFile {
                path: path.clone(),
                previous: root.read_opt(path)?,
            });
        }
    }
    save_state(root, &state)?;

    let mut failed = 0;
    for r in &writes {
        let value = format!("{}\n", r.target.as_deref().unwrap_or_default());
        if let Err(e) = root.write_sysctl(r.key, value.as_bytes()) {
            failed += 1;
            rep.lines.push(format!("error {e:#}"));
        }
    }
    for (path, content) in &files {
        root.write_atomic(path, content.as_bytes())?;
    }
    rep.lines.push(format!(
        "saved previous values in {STATE_FILE}; `c1m tune --revert` restores them"
    ));
    rep.lines.push(
        "note  limits.d applies to new login sessions; after a unit drop-in: systemctl daemon-reload, then restart the service"
            .to_string(),
    );
    rep.code = if failed > 0 { 2 } else { 0 };
    Ok(rep)
}

/// Restores what apply saved, exactly, and removes the drop-ins.
pub fn revert(root: &Root, opts: &Opts) -> Result<Report> {
    let mut rep = Report::default();
    let Some(state) = load_state(root)? else {
        rep.lines
            .push(format!("nothing to revert: no {STATE_FILE}"));
        return Ok(rep);
    };
    // "would be restored" in a dry run, "restored" otherwise.
    let verb = |done: &str| {
        if opts.dry_run {
            format!("would be {done}")
        } else {
            done.to_string()
        }
    };
    for f in state.files.iter().rev() {
        match &f.previous {
            Some(prev) => {
                rep.lines
                    .push(format!("file  {} {}", f.path, verb("restored")));
                if !opts.dry_run {
                    root.write_atomic(&f.path, prev.as_bytes())?;
                }
            }
            None => {
                rep.lines
                    .push(format!("file  {} {}", f.path, verb("removed")));
                if !opts.dry_run {
                    root.remove_file(&f.path)?;
                }
            }
        }
    }
    let mut failed = 0;
    for s in state.sysctls.iter().rev() {
        if !root.has_sysctl(&s.key) {
            rep.lines
                .push(format!("skip  {}: kernel lacks it now", s.key));
            continue;
        }
        rep.lines.push(format!(
            "set   {} {} to {}",
            s.key,
            verb("restored"),
            crate::root::normalize_value(&s.previous)
        ));
        if !opts.dry_run {
            if let Err(e) = root.write_sysctl(&s.key, s.previous.as_bytes()) {
                failed += 1;
                rep.lines.push(format!("error {e:#}"));
            }
        }
    }
    if opts.dry_run {
        rep.lines.push("dry run: nothing written".to_string());
    } else if failed == 0 {
        root.remove_file(STATE_FILE)?;
    } else {
        rep.lines.push(format!(
            "kept {STATE_FILE}: {failed} value(s) could not be restored"
        ));
        rep.code = 2;
    }
    Ok(rep)
}
