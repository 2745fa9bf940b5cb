//! `c1m`: the command-line front end. It only parses arguments and dispatches to the library
//! crates (`c1m-server`, `c1m-bench`, `c1m-kernel`); no behaviour lives here.
//!
//! Exit codes: 0 ok, 1 findings (doctor, tune --check), 2 error.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;

/// `c1m --version`: the crate version and the git commit it was built from ("unknown" when
/// built outside a git checkout; see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("C1M_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "c1m",
    version = VERSION,
    about = "Hold a million long-lived connections on one Linux box and prove it."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the push gateway (SSE, WebSocket, long-poll, raw TCP).
    Serve(Box<c1m_server::ServeArgs>),
    /// Live binary upgrade: make a running `c1m serve` master hand its listeners, connections
    /// and hub to the binary now at its path, then exit (same as `kill -USR2 PID`).
    Upgrade(c1m_server::UpgradeArgs),
    /// Open, hold and measure many connections against a server.
    Bench(c1m_bench::BenchArgs),
    /// Load-box agent for `c1m bench --agents`: serves one coordinator at a time over TCP,
    /// authenticated by a shared token, and runs its share of the bench on this box.
    BenchAgent(c1m_bench::fleet::AgentArgs),
    /// Compute, check, apply and revert kernel and limit settings for a target connection count.
    Tune(c1m_kernel::TuneArgs),
    /// Named checks over /proc, netlink and the kernel log, each with the exact fix.
    Doctor(c1m_kernel::DoctorArgs),
    /// Count sockets by state or port through netlink sock_diag.
    Sockets(c1m_kernel::SocketsArgs),
    /// Live view of sockets, TCP counters, memory, fd use and doctor findings.
    Top(c1m_kernel::TopArgs),
}

fn main() -> ExitCode {
    c1m_server::set_build_info(env!("CARGO_PKG_VERSION"), env!("C1M_GIT_COMMIT"));
    // Worker processes (53 of them at 1M) take no arguments: building clap's command tree
    // first would cost each ~120 KiB of heap at its peak (heaptrack) for nothing (a fixed
    // cost paid in every worker). They are hidden: clap never sees them.
    if let Some(result) = run_internal(std::env::args_os().nth(1).as_deref()) {
        return exit_code(result);
    }
    // Parsed in two steps so `serve --print-config` can ask clap where each value came from.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Serve(args) => c1m_server::run(*args, matches.subcommand_matches("serve")),
        Command::Upgrade(args) => c1m_server::run_upgrade(args),
        Command::Bench(args) => c1m_bench::run(args),
        Command::BenchAgent(args) => c1m_bench::run_agent(args),
        Command::Tune(args) => c1m_kernel::run_tune(args),
        Command::Doctor(args) => c1m_kernel::run_doctor(args),
        Command::Sockets(args) => c1m_kernel::run_sockets(args),
        Command::Top(args) => c1m_kernel::run_top(args),
    };
    exit_code(result)
}

/// Runs an internal command named by the first argument without parsing anything else: `c1m
/// __serve-worker` (started by the serve master) and `c1m __bench-worker` (started by `c1m
/// bench`), configured through their environment. None for every other command.
fn run_internal(first: Option<&std::ffi::OsStr>) -> Option<anyhow::Result<u8>> {
    match first?.to_str()? {
        "__serve-worker" => Some(c1m_server::run_worker_from_env()),
        "__bench-worker" => Some(c1m_bench::run_worker_from_env()),
        _ => None,
    }
}

fn exit_code(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("c1m: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
