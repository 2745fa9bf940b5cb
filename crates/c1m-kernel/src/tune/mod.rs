//! `c1m tune`: compute, check, apply, revert and explain the sysctls, pam limits and systemd
//! LimitNOFILE a box needs to hold a target number of connections.
//!
//! Owns: the command line and the dispatch. The knowledge lives in `crate::params`, the math
//! in [`calc`], the comparisons in [`check`], the writing in [`apply`], the wording in
//! [`render`] and [`explain`]. Every reading and writing goes through a [`Root`], so
//! `--root DIR` runs the whole command against a fake tree.
//!
//! Exit codes: 0 ok, 1 findings (`--check` wants a change), 2 error.

pub mod apply;
pub mod calc;
pub mod check;
mod conf;
pub mod explain;
pub mod memory;
pub mod render;
pub mod slab;
pub mod status;
pub mod units;

use crate::params::{Lang, Role};
use crate::root::Root;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use std::fmt::Write;
use std::path::PathBuf;

/// `c1m tune` arguments.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TuneArgs {
    #[command(subcommand)]
    pub command: Option<TuneCommand>,
    /// Connections the box must hold (1000000, 1_000_000, 250K, 1M, 1.5M, 10M).
    #[arg(long, value_parser = units::parse_count)]
    pub conns: Option<u64>,
    /// What the box does: server accepts, client (load generator) connects, proxy does both.
    #[arg(long, value_enum, default_value_t = Role::Server)]
    pub role: Role,
    /// RAM to size for: auto (MemTotal under --root) or bytes (24G, 25769803776).
    #[arg(long, default_value = "auto")]
    pub mem: String,
    /// Bytes each connection may have queued at the same moment (a broadcast); auto = one page.
    #[arg(long, default_value = "auto")]
    pub buffered: String,
    /// Directory standing for / (a fake tree in tests).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Language of the explanations.
    #[arg(long, value_enum, default_value_t = Lang::En)]
    pub lang: Lang,
    /// Compare live values with the recommendation; exit 1 when anything needs changing.
    #[arg(long, conflicts_with_all = ["apply", "revert"])]
    pub check: bool,
    /// Write the drop-ins and the live values, saving the previous ones for --revert.
    #[arg(long, conflicts_with = "revert")]
    pub apply: bool,
    /// Restore exactly what --apply saved and remove its drop-ins.
    #[arg(long)]
    pub revert: bool,
    /// With --apply or --revert: show what would change, write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// systemd unit to write the LimitNOFILE= drop-in for (--apply); printed otherwise.
    #[arg(long)]
    pub service: Option<String>,
}

/// `c1m tune` subcommands.
#[derive(Subcommand, Debug)]
pub enum TuneCommand {
    /// Print the knowledge-base entry for KEY (any sysctl c1m knows, obsolete and harmful
    /// ones included), or list every key.
    Explain(ExplainArgs),
}

/// `c1m tune explain` arguments.
#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// `net.ipv4.tcp_mem`, `net/ipv4/tcp_mem` or `tcp_mem`; omit to list every key.
    pub key: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    #[arg(long, value_enum, default_value_t = Lang::En)]
    pub lang: Lang,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
    /// The sysctl.d drop-in alone (plan only).
    Sysctl,
}

/// Runs `c1m tune`, printing to stdout. Returns the exit code.
pub fn run_tune(args: TuneArgs) -> Result<u8> {
    let (out, code) = run_to_string(args)?;
    print!("{out}");
    Ok(code)
}

/// Runs `c1m tune` and returns its output instead of printing it (tests use this).
pub fn run_to_string(args: TuneArgs) -> Result<(String, u8)> {
    if let Some(TuneCommand::Explain(e)) = &args.command {
        return run_explain(e);
    }
    if args.dry_run && !(args.apply || args.revert) {
        bail!("--dry-run goes with --apply or --revert");
    }
    let root = Root::new(&args.root);
    let opts = apply::Opts {
        dry_run: args.dry_run,
        lang: args.lang,
        service: args.service.clone(),
    };
    if args.revert {
        let rep = apply::revert(&root, &opts)?;
        return Ok((rep.lines.join("\n") + "\n", rep.code));
    }
    let Some(conns) = args.conns else {
        bail!("--conns N is required (the number of connections the box must hold)");
    };
    if conns == 0 {
        bail!("--conns must be at least 1");
    }
    let host = host(&root, &args.mem)?;
    let buffered = match args.buffered.as_str() {
        "auto" => host.page_size,
        b => units::parse_bytes(b).context("--buffered")?,
    };
    let plan = calc::plan(
        host,
        calc::Target {
            conns,
            role: args.role,
            buffered,
        },
    );
    if args.check {
        let rows = check::check(&root, &plan, args.service.as_deref())?;
        let out = match args.format {
            Format::Json => serde_json::to_string_pretty(&rows).context("encoding check")? + "\n",
            Format::Text => render_check(&plan, &rows, args.lang),
            Format::Sysctl => bail!("--check prints text or json"),
        };
        return Ok((out, check::exit_code(&rows)));
    }
    if args.apply {
        let rep = apply::apply(&root, &plan, &opts)?;
        return Ok((rep.lines.join("\n") + "\n", rep.code));
    }
    let out = match args.format {
        Format::Text => render::render_text(&plan, args.lang, args.service.as_deref()),
        Format::Json => {
            let v = render::render_json(&plan, args.lang, args.service.as_deref());
            serde_json::to_string_pretty(&v).context("encoding plan")? + "\n"
        }
        Format::Sysctl => render::render_sysctl(&plan, args.lang),
    };
    Ok((out, 0))
}

/// Reads RAM (or takes `--mem`), CPUs, page size and whether conntrack is loaded.
pub fn host(root: &Root, mem: &str) -> Result<calc::Host> {
    let mem_bytes = match mem {
        "auto" => root.meminfo()?.mem_total()?,
        m => units::parse_bytes(m).context("--mem")?,
    };
    if mem_bytes == 0 {
        bail!("--mem must be more than 0 bytes");
    }
    Ok(calc::Host {
        mem_bytes,
        cpus: root.cpus_online()? as u64,
        page_size: root.page_size()?,
        conntrack_loaded: root.has_sysctl("net.netfilter.nf_conntrack_max"),
        // slabinfo is 0400: without root the measured sizes stand in.
        obj: slab::sizes(root.read_opt("/proc/slabinfo").ok().flatten().as_deref()),
    })
}

fn run_explain(e: &ExplainArgs) -> Result<(String, u8)> {
    let out = match (&e.key, e.format) {
        (None, Format::Json) => serde_json::to_string_pretty(crate::params::PARAMS)? + "\n",
        (None, _) => explain::render_list(e.lang),
        (Some(k), Format::Json) => serde_json::to_string_pretty(explain::find(k)?)? + "\n",
        (Some(k), _) => explain::render_entry(explain::find(k)?, e.lang),
    };
    Ok((out, 0))
}

fn render_check(plan: &calc::Plan, rows: &[check::Row], lang: Lang) -> String {
    let zh = lang == Lang::Zh;
    let (c, r) = (plan.target.conns, plan.target.role.name());
    let mut s = if zh {
        format!(
            "c1m tune --check：{c} 个连接，角色 {r}\n{:<9} {:<34} {:<24} {:<24} 说明\n",
            "状态", "键", "当前值", "推荐值"
        )
    } else {
        format!(
            "c1m tune --check: {c} connections, role {r}\n{:<9} {:<34} {:<24} {:<24} note\n",
            "status", "key", "live", "recommended"
        )
    };
    for r in rows {
        let note = if zh && !r.note_zh.is_empty() {
            &r.note_zh
        } else {
            &r.note
        };
        let _ = writeln!(
            s,
            "{:<9} {:<34} {:<24} {:<24} {}{}",
            r.status.name(),
            r.key,
            r.live.as_deref().unwrap_or("-"),
            r.recommended.as_deref().unwrap_or("-"),
            r.source
                .as_deref()
                .map(|f| format!("[{f}] "))
                .unwrap_or_default(),
            note
        );
    }
    let n = rows.iter().filter(|r| r.status.needs_change()).count();
    let w = rows.iter().filter(|r| r.status.is_warning()).count();
    let (warn, warn_zh) = if w > 0 {
        (format!(", {w} warning(s)"), format!("，{w} 项警告"))
    } else {
        (String::new(), String::new())
    };
    let _ = match (zh, n > 0) {
        (false, true) => writeln!(
            s,
            "{n} finding(s){warn}; `c1m tune --apply` with the same --conns/--role fixes the live ones"
        ),
        (false, false) => writeln!(s, "{n} finding(s){warn}"),
        (true, true) => writeln!(
            s,
            "{n} 项发现{warn_zh}；用相同的 --conns/--role 运行 `c1m tune --apply` 修复当前值"
        ),
        (true, false) => writeln!(s, "{n} 项发现{warn_zh}"),
    };
    s
}
