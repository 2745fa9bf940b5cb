//! `c1m upgrade PID`: the command-line way to a live upgrade (docs/upgrade.md). It checks that
//! PID is a `c1m serve` master, sends it SIGUSR2, and waits for the outcome: the old master
//! exits after a committed hand-over (exit 0, the new master's pid printed), or the new master
//! it started goes away while the old one serves on (exit 1: the upgrade failed and was rolled
//! back; the old master's log says why).

use anyhow::{bail, Context};
use std::time::{Duration, Instant};

/// `c1m upgrade` flags.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  mv c1m.new /usr/local/bin/c1m && c1m upgrade \"$(pidof -s c1m)\"   # see docs/upgrade.md
  c1m upgrade 4242 --timeout 60s

Exit codes: 0 upgraded (the old master exited), 1 the upgrade failed or did not finish in time
(the old master serves on; its log and c1m_upgrades_failed_total say why), 2 error (PID is not a
c1m serve master, or cannot be signalled).")]
pub struct UpgradeArgs {
    /// Pid of the running `c1m serve` master.
    pub pid: u32,
    /// How long to wait for the outcome; use at least the server's --upgrade-timeout
    /// [default: 60s].
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Set in a new master's environment to the pid of the master that started it, so
/// `c1m upgrade` can name it even after the old master exited (it is then no longer a child).
pub const ENV_UPGRADE_FROM: &str = "C1M_UPGRADE_FROM";

fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).to_string())
            .collect(),
    )
}

/// Still running (a zombie waiting for its parent counts as gone).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The master's child that is a new master (not one of its workers), if it started one.
fn new_master_of(pid: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .find(|&c| cmdline(c).is_some_and(|a| a.iter().any(|x| x == "serve")))
}

/// A running `c1m serve` whose environment says `pid` started it: the new master, found
/// after `pid` exited (a hand-over can finish between two polls of `new_master_of`).
fn successor_by_env(pid: u32) -> Option<u32> {
    let want = format!("{ENV_UPGRADE_FROM}={pid}");
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|&n| {
            cmdline(n).is_some_and(|a| a.iter().any(|x| x == "serve"))
                && std::fs::read(format!("/proc/{n}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == want.as_bytes()))
                && alive(n)
        })
}

pub fn run(args: UpgradeArgs) -> anyhow::Result<u8> {
    let pid = args.pid;
    let argv = cmdline(pid).with_context(|| format!("no process {pid}"))?;
    if !argv.iter().any(|a| a == "serve") {
        bail!(
            "process {pid} is not a c1m serve master: {}",
            argv.join(" ")
        );
    }
    c1m_sys::process::kill(pid, libc::SIGUSR2).with_context(|| format!("signalling {pid}"))?;
    eprintln!(
        "c1m upgrade: sent SIGUSR2 to {pid}; waiting up to {:?}",
        args.timeout
    );
    let deadline = Instant::now() + args.timeout;
    let mut successor = None;
    while Instant::now() < deadline {
        if let Some(n) = new_master_of(pid) {
            successor = Some(n);
        }
        if !alive(pid) {
            match successor.or_else(|| successor_by_env(pid)) {
                Some(n) if alive(n) => println!("c1m upgrade: done; the new master is {n}"),
                _ => println!("c1m upgrade: done; master {pid} exited"),
            }
            return Ok(0);
        }
        if successor.is_some_and(|n| !alive(n)) {
            println!("c1m upgrade: failed; master {pid} serves on (its log says why)");
            return Ok(1);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "c1m upgrade: no outcome within {:?}; master {pid} is still running",
        args.timeout
    );
    Ok(1)
}
