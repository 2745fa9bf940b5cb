//! `c1m top`: a live view of sockets by state, TCP counter rates, TCP memory, file handles and
//! the doctor's current findings.
//!
//! Owns: the refresh loop. On a terminal it draws with ratatui over crossterm (plain escape
//! codes, so it works over ssh) and quits on `q`, Esc or Ctrl-C; when stdout is not a terminal
//! it prints one plain line per interval, at most `--count` of them. The figures come from
//! [`model`], the drawing from [`tui`].

pub mod model;
mod tui;

use crate::doctor::parse_duration;
use crate::root::Root;
use anyhow::Result;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// `c1m top` arguments.
#[derive(Args, Debug, Clone)]
pub struct TopArgs {
    /// Refresh interval (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Stop after this many refreshes (default: until `q`, or forever when not a terminal).
    #[arg(long)]
    pub count: Option<u64>,
    /// Print plain lines even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Target connection count handed to the doctor's checks (1000000, 250K, 1M, 1.5M).
    #[arg(long, value_parser = crate::tune::units::parse_count)]
    pub conns: Option<u64>,
    /// How often the doctor's checks are re-run (they walk every process's descriptors).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub doctor_every: Duration,
    /// Root of the tree to read; `/` is the live box.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

/// `c1m top`.
pub fn run_top(args: TopArgs) -> Result<u8> {
    let interval = args.interval.max(Duration::from_millis(100));
    let mut m = model::Model::new(Root::new(args.root.clone()), args.conns, args.doctor_every);
    if args.plain || !std::io::stdout().is_terminal() {
        return plain(&mut m, interval, args.count);
    }
    tui::run(&mut m, interval, args.count)
}

fn plain(m: &mut model::Model, interval: Duration, count: Option<u64>) -> Result<u8> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let mut n = 0u64;
    loop {
        let v = m.tick()?;
        // A closed pipe (`c1m top | head`) ends the run quietly.
        if writeln!(out, "{}", model::plain_line(&v))
            .and_then(|_| out.flush())
            .is_err()
        {
            return Ok(0);
        }
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(0);
        }
        std::thread::sleep(interval);
    }
}
