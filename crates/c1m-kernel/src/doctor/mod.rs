//! `c1m doctor`: a registry of named checks (redis' syscheck habit). Each check reads a
//! [`Ctx`] (two counter samples an interval apart, the sockets, processes' fd use, the kernel
//! log) and returns pass / warn / fail / skipped with the exact command that fixes it.
//!
//! Owns: the check registry, the report and the exit code (0 all pass, 1 findings, 2 error).
//! The checks live in [`checks`]; gathering their inputs in [`ctx`]; counter parsing in
//! [`sample`]. Recommended values come from the tune parameter table via [`recommend`].

pub mod checks;
pub mod ctx;
pub mod kmsg;
pub mod nic;
pub mod recommend;
pub mod sample;

pub use ctx::Ctx;

use anyhow::{Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// `c1m doctor` arguments.
#[derive(Args, Debug, Clone)]
pub struct DoctorArgs {
    /// How long to watch the counters (e.g. 5s, 500ms, 0s): rising counters are findings.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Target connection count (1000000, 1_000_000, 250K, 1M, 1.5M): fd and memory checks
    /// judge against it.
    #[arg(long, value_parser = crate::tune::units::parse_count)]
    pub conns: Option<u64>,
    /// Role the recommendations are for (server accepts, client connects, proxy does both).
    #[arg(long, value_enum, default_value_t = crate::params::Role::Server)]
    pub role: crate::params::Role,
    /// Root of the tree to read (/proc, /sys, /etc, dev/kmsg under it); `/` is the live box.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Run only these checks (comma-separated names); default all.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// List the checks and what each looks at, then exit.
    #[arg(long)]
    pub list: bool,
}

/// Parses `5s`, `500ms`, `2m` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mul_ms) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e3)
    } else {
        (s, 1e3)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (try 5s, 500ms, 1m)"))?;
    if !(0.0..=86_400_000.0).contains(&(v * mul_ms)) {
        return Err(format!("duration out of range: {s:?}"));
    }
    Ok(Duration::from_secs_f64(v * mul_ms / 1e3))
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Skipped,
    Warn,
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skipped => "skipped",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }
}

/// What one check found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub status: Status,
    /// One line: what was measured and the verdict's reason.
    pub summary: String,
    /// The exact command(s) that fix it, when there is a fix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fix: Vec<String>,
    /// Extra lines (offending processes, destinations, log lines), bounded per check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl Finding {
    pub fn new(check: &'static str, status: Status, summary: impl Into<String>) -> Finding {
        Finding {
            check,
            status,
            summary: summary.into(),
            fix: Vec::new(),
            details: Vec::new(),
        }
    }
    pub fn fix(mut self, cmd: impl Into<String>) -> Finding {
        self.fix.push(cmd.into());
        self
    }
    pub fn detail(mut self, line: impl Into<String>) -> Finding {
        self.details.push(line.into());
        self
    }
}

/// A named check.
pub struct Check {
    pub name: &'static str,
    /// What it looks at, for `--help`-like listings and the JSON report.
    pub about: &'static str,
    pub run: fn(&Ctx) -> Finding,
}

/// The report of one doctor run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub interval_ms: u128,
    pub target_conns: Option<u64>,
    pub findings: Vec<Finding>,
}

impl Report {
    /// The worst status seen.
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Pass)
    }

    /// 0 when nothing needs attention, 1 when any check warned or failed.
    pub fn exit_code(&self) -> u8 {
        match self.worst() {
            Status::Pass | Status::Skipped => 0,
            Status::Warn | Status::Fail => 1,
        }
    }
}

/// Fails on a check name the registry lacks, listing the known ones.
pub fn validate_only(only: &[String]) -> Result<()> {
    for name in only {
        if !checks::REGISTRY.iter().any(|c| c.name == name) {
            let known: Vec<_> = checks::REGISTRY.iter().map(|c| c.name).collect();
            anyhow::bail!("unknown check {name:?}; known: {}", known.join(", "));
        }
    }
    Ok(())
}

/// Runs every registered check (or those named in `only`) against `ctx`.
pub fn run_checks(ctx: &Ctx, only: &[String]) -> Result<Vec<Finding>> {
    validate_only(only)?;
    Ok(checks::REGISTRY
        .iter()
        .filter(|c| only.is_empty() || only.iter().any(|n| n == c.name))
        .map(|c| (c.run)(ctx))
        .collect())
}

/// Renders the report as text: one line per check, then fixes and details indented.
pub fn render_text(r: &Report) -> String {
    let mut out = String::new();
    for f in &r.findings {
        out.push_str(&format!(
            "{:<8} {:<22} {}\n",
            f.status.label(),
            f.check,
            f.summary
        ));
        for d in &f.details {
            out.push_str(&format!("{:<31}  {d}\n", ""));
        }
        for cmd in &f.fix {
            out.push_str(&format!("{:<31}  fix: {cmd}\n", ""));
        }
    }
    let count = |s: Status| r.findings.iter().filter(|f| f.status == s).count();
    out.push_str(&format!(
        "{} checks over {:.1}s: {} pass, {} warn, {} fail, {} skipped\n",
        r.findings.len(),
        r.interval_ms as f64 / 1e3,
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail),
        count(Status::Skipped)
    ));
    out
}

/// Gathers inputs over the interval and runs the checks.
pub fn diagnose(args: &DoctorArgs) -> Result<Report> {
    // Before the interval's wait, so a typo fails at once.
    validate_only(&args.only)?;
    let ctx = Ctx::collect(
        &crate::root::Root::new(args.root.clone()),
        args.conns,
        args.role,
        args.interval,
    )
    .context("gathering inputs")?;
    let findings = run_checks(&ctx, &args.only)?;
    Ok(Report {
        interval_ms: ctx.interval.as_millis(),
        target_conns: args.conns,
        findings,
    })
}

/// `c1m doctor`.
pub fn run_doctor(args: DoctorArgs) -> Result<u8> {
    if args.list {
        for c in checks::REGISTRY {
            println!("{:<22} {}", c.name, c.about);
        }
        return Ok(0);
    }
    let report = diagnose(&args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_text(&report));
    }
    Ok(report.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn exit_code_follows_worst() {
        let mut r = Report {
            interval_ms: 0,
            target_conns: None,
            findings: vec![Finding::new("a", Status::Skipped, "")],
        };
        assert_eq!(r.exit_code(), 0);
        r.findings.push(Finding::new("b", Status::Warn, ""));
        assert_eq!(r.exit_code(), 1);
    }
}
