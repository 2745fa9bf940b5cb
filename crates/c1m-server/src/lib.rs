//! The push gateway (`c1m serve`).
//!
//! # Layout
//! - [`config`]: flags, environment and TOML resolved into one `Config`.
//! - `master`: supervises workers and is the in-node hub (`hub`) that assigns ids, keeps
//!   history and routes each publish to the workers with subscribers.
//! - `worker`: one process per SO_REUSEPORT listener, one edge-triggered loop over a slab of
//!   small connection structs. All client traffic is here.
//! - `ipc` / `link`: the framed Unix-socket protocol between them.
//!
//! Must not touch: raw syscalls (they live in `c1m-sys`) or wire-format details (`c1m-proto`).

mod broker;
pub mod config;
mod hub;
// Public only so the fuzz harness (crates/c1m-server/fuzz) can reach the codec.
mod ip_table;
#[doc(hidden)]
pub mod ipc;
mod link;
mod listener;
mod master;
mod worker;

pub use config::{Config, ServeArgs};

/// Entry point of `c1m serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<u8> {
    let mut cfg = args.resolve()?;
    let limit = c1m_sys::rlimit::raise_nofile_to_hard()?;
    let plan = master::plan(
        cfg.workers,
        cfg.max_conns,
        limit.hard,
        c1m_sys::process::available_cpus(),
    );
    // Bound but never listening: resolves port 0 and keeps the ports ours across restarts.
    // Exclusive: no second instance (or other program) shares the ports through SO_REUSEPORT.
    let http_reservation = listener::reserve_exclusive(cfg.listen)?;
    cfg.listen = http_reservation.addr;
    let tcp_reservation = match cfg.tcp_listen {
        Some(addr) => Some(listener::reserve_exclusive(addr)?),
        None => None,
    };
    cfg.tcp_listen = tcp_reservation.as_ref().map(|r| r.addr);
    let mut master = master::Master::new(cfg.clone(), plan)?;
    master.set_reload_source(args);
    let tcp = cfg
        .tcp_listen
        .map(|a| format!(", tcp {a}"))
        .unwrap_or_default();
    println!(
        "c1m serve: listening on http {}{tcp}; {} workers x {} connections (fd limit {})",
        cfg.listen, plan.workers, plan.per_worker, limit.hard
    );
    master.run()?;
    drop((http_reservation, tcp_reservation));
    eprintln!("c1m: stopped");
    Ok(0)
}

/// Entry point of the hidden `c1m __serve-worker`.
pub fn run_worker_from_env() -> anyhow::Result<u8> {
    worker::run_from_env()
}
