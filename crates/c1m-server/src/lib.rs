//! The push gateway (`c1m serve`).
//!
//! # Layout
//! - [`config`]: flags, environment and TOML resolved into one `Config`.
//! - `master`: supervises workers and is the in-node hub (`hub`) that assigns ids, keeps
//!   history and routes each publish to the workers with subscribers.
//! - `worker`: one process per SO_REUSEPORT listener, one edge-triggered loop over a slab of
//!   small connection structs. All client traffic is here.
//! - `ipc` / `link`: the framed Unix-socket protocol between them.
//! - `tls`: certificate loading for `--tls-cert` (the TLS byte paths are in the worker).
//!
//! Must not touch: raw syscalls (they live in `c1m-sys`) or wire-format details (`c1m-proto`).

mod auth;
mod broker;
mod growing_read;
/// Redis Cluster's hash slot of a key: public so the cluster tests can check it against a live
/// `CLUSTER KEYSLOT`.
#[doc(hidden)]
pub use broker::redis::key_slot as redis_cluster_key_slot;
pub mod config;
pub mod config_report;
// Public because `ipc::WorkerStats` (public for the fuzz harness) carries histograms.
#[doc(hidden)]
pub mod histogram;
mod hub;
// Public only so the fuzz harness (crates/c1m-server/fuzz) can reach the codec.
mod ip_table;
#[doc(hidden)]
pub mod ipc;
mod link;
mod listener;
mod log;
mod master;
mod secrets;
mod tls;
mod upgrade_cli;
mod worker;

use anyhow::Context;
pub use config::{Config, ServeArgs};
pub use upgrade_cli::UpgradeArgs;

/// Version and git commit of the binary, set once by `main` (the commit is stamped by the `c1m`
/// crate's build script, which this library cannot see); `c1m_build_info` reports them.
static BUILD_INFO: std::sync::OnceLock<(&'static str, &'static str)> = std::sync::OnceLock::new();

/// Records the binary's version and commit for `/metrics` (`c1m_build_info`).
pub fn set_build_info(version: &'static str, commit: &'static str) {
    let _ = BUILD_INFO.set((version, commit));
}

fn build_info() -> (&'static str, &'static str) {
    BUILD_INFO.get().copied().unwrap_or(("unknown", "unknown"))
}

/// Entry point of `c1m serve`. `matches` (the parsed command line) tells `--print-config`
/// which values came from flags and which from the environment.
pub fn run(args: ServeArgs, matches: Option<&clap::ArgMatches>) -> anyhow::Result<u8> {
    if args.check_config {
        let problems = config_report::check(&args);
        for p in &problems {
            eprintln!("c1m: config: {p}");
        }
        if problems.is_empty() {
            println!("c1m: config is valid");
            return Ok(0);
        }
        return Ok(2);
    }
    let mut cfg = args.resolve()?;
    if args.print_config {
        print!("{}", config_report::print(&args, &cfg, matches));
        return Ok(0);
    }
    log::init(&cfg);
    let _span = tracing::info_span!("master", pid = std::process::id()).entered();
    if let Ok(fd) = std::env::var(master::ENV_UPGRADE_FD) {
        // Started by a running master for a live upgrade: take over instead of starting.
        let fd = fd.parse().context("upgrade descriptor")?;
        return master::take_over(args, cfg, fd);
    }
    // The key files are read once, here: a bad one stops the start with its reason, and the
    // workers get these bytes from the master (also when one is restarted later).
    let secrets = secrets::Secrets::read(&cfg)?;
    let limit = c1m_sys::rlimit::raise_nofile_to_hard()?;
    let cpus = c1m_sys::process::available_cpus();
    let plan = master::plan(cfg.workers, cfg.max_conns, limit.hard, cpus);
    let workers_why = master::workers_reason(cfg.workers, cfg.max_conns, limit.hard, cpus, &plan);
    // Bound but never listening: resolves port 0 and keeps the ports ours across restarts.
    // Exclusive: no second instance (or other program) shares the ports through SO_REUSEPORT.
    let http_reservation = listener::reserve_exclusive(cfg.listen)?;
    cfg.listen = http_reservation.addr;
    let tcp_reservation = match cfg.tcp_listen {
        Some(addr) => Some(listener::reserve_exclusive(addr)?),
        None => None,
    };
    cfg.tcp_listen = tcp_reservation.as_ref().map(|r| r.addr);
    let admin_reservation = match cfg.admin_listen {
        Some(addr) => Some(listener::reserve_exclusive(addr)?),
        None => None,
    };
    cfg.admin_listen = admin_reservation.as_ref().map(|r| r.addr);
    let mut master = master::Master::new(cfg.clone(), plan, secrets)?;
    master.set_reload_source(args);
    // The master holds the reservations from here (and passes them on at a live upgrade).
    let mut reserved = vec![('h', http_reservation)];
    reserved.extend(tcp_reservation.map(|r| ('t', r)));
    reserved.extend(admin_reservation.map(|r| ('a', r)));
    master.set_reservations(reserved);
    let tcp = cfg
        .tcp_listen
        .map(|a| format!(", tcp {a}"))
        .unwrap_or_default();
    let tls = if cfg.tls_cert.is_some() {
        "; TLS on http and tcp"
    } else {
        ""
    };

    // The admin address goes last, after the fields tools already parse.
    let admin = cfg
        .admin_listen
        .map(|a| format!("; admin http {a}"))
        .unwrap_or_default();
    // The workers' reason goes after the fields tools parse, and before the admin address,
    // which stays last.
    println!(
        "c1m serve: listening on http {}{tcp}; {} workers x {} connections (fd limit {}); workers {workers_why}{tls}{admin}",
        cfg.listen, plan.workers, plan.per_worker, limit.hard
    );
    tracing::info!(
        http = %cfg.listen,
        tcp = %cfg.tcp_listen.map_or("off".to_string(), |a| a.to_string()),
        workers = plan.workers,
        per_worker = plan.per_worker,
        fd_limit = limit.hard,
        "listening"
    );
    tracing::info!(
        workers = plan.workers,
        cpus,
        fd_limit = limit.hard,
        max_conns = cfg.max_conns,
        "workers {workers_why}"
    );
    master.run()?;
    drop(master);
    tracing::info!("stopped");
    Ok(0)
}

/// Entry point of `c1m upgrade PID` (live binary upgrade; docs/upgrade.md).
pub fn run_upgrade(args: UpgradeArgs) -> anyhow::Result<u8> {
    upgrade_cli::run(args)
}

/// Entry point of the hidden `c1m __serve-worker`.
pub fn run_worker_from_env() -> anyhow::Result<u8> {
    worker::run_from_env()
}
