//! The push gateway (`c1m serve`).
//!
//! # Layout
//! - [`config`]: flags, environment and TOML resolved into one `Config`, and the reports on it
//!   (`--check-config`, `--print-config`).
//! - `master`: supervises workers and is the in-node hub (`hub`) that assigns ids, keeps
//!   history and routes each publish to the workers with subscribers.
//! - `worker`: one process per SO_REUSEPORT listener, one edge-triggered loop over a slab of
//!   small connection structs. All client traffic is here.
//! - `ipc` / `link`: the framed Unix-socket protocol between them.
//! - `tls`: certificate loading for `--tls-cert` (the TLS byte paths are in the worker).
//!
//! Must not touch: raw syscalls (they live in `c1m-sys`) or wire-format details (`c1m-proto`).

mod api;
mod auth;
mod broker;
pub mod conn_id;
mod growing_read;
/// Redis Cluster's hash slot of a key: public so the cluster tests can check it against a live
/// `CLUSTER KEYSLOT`.
#[doc(hidden)]
pub use broker::redis::key_slot as redis_cluster_key_slot;
pub mod config;
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
mod presence;
mod proxy;
mod secrets;
mod steering;
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
        let problems = config::report::check(&args);
        for p in &problems {
            eprintln!("c1m: config: {p}");
        }
        if problems.is_empty() {
            println!("c1m: config is valid");
            return Ok(0);
        }
        return Ok(2);
    }
    let cfg = args.resolve()?;
    if args.print_config {
        print!("{}", config::report::print(&args, &cfg, matches));
        return Ok(0);
    }
    log::init(cfg.log_format, &cfg.log_level);
    let _span = tracing::info_span!("master", pid = std::process::id()).entered();
    let json = cfg.log_format == config::LogFormat::Json;
    match serve(args, cfg, matches) {
        // In JSON mode every line the process writes is JSON, its last words too.
        Err(e) if json => {
            tracing::error!(error = %format!("{e:#}"), "c1m serve stopped by an error");
            Ok(2)
        }
        result => result,
    }
}

/// The master's life after the logs are set up: start (or take over at a live upgrade), serve,
/// stop.
fn serve(
    args: ServeArgs,
    mut cfg: Config,
    matches: Option<&clap::ArgMatches>,
) -> anyhow::Result<u8> {
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
    let workers_from = match cfg.workers {
        config::Workers::Count(_) => {
            match config::report::source_of(&args, "workers", matches).as_str() {
                "file" => " (from the --config file)".to_string(),
                from => format!(" (from {from})"),
            }
        }
        config::Workers::Auto => String::new(),
    };
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
    let banner = Banner {
        http: cfg.listen,
        tcp: cfg.tcp_listen,
        admin: cfg.admin_listen,
        workers: plan.workers,
        per_worker: plan.per_worker,
        fd_limit: limit.hard,
        workers_why: format!("{workers_why}{workers_from}"),
        tls: tls_listeners(&cfg),
        admin_tls: cfg.admin_tls,
    };
    banner.print(cfg.log_format);
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
        "workers {}",
        banner.workers_why
    );
    if let Some(short) = master::capacity_shortfall(&plan, cfg.max_conns, limit.hard) {
        tracing::warn!(
            max_conns = cfg.max_conns,
            fd_limit = limit.hard,
            "{short}: connections past that are refused; raise the fd limit (c1m tune) or use \
             --workers auto"
        );
    }
    if !cfg.namespaces.is_empty() {
        let names: Vec<&str> = cfg.namespaces.keys().map(String::as_str).collect();
        tracing::info!(namespaces = %names.join(", "), "channel namespaces configured");
    }
    if let Some(why) = open_publish_warning(&cfg) {
        tracing::warn!("{why}");
    }
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

/// The start-up line: the addresses tools (and the tests) read, the plan and its reason. Text
/// mode prints it as a line of its own on stdout (`c1m serve: listening on http ADDR…`); JSON
/// mode prints one JSON log event instead, with the addresses as fields, so a collector that
/// merges stdout and stderr gets nothing but JSON.
struct Banner {
    http: std::net::SocketAddr,
    tcp: Option<std::net::SocketAddr>,
    admin: Option<std::net::SocketAddr>,
    workers: usize,
    per_worker: u64,
    fd_limit: u64,
    workers_why: String,
    /// The listeners that speak TLS (`http`, `tcp`, `admin`), in that order.
    tls: Vec<&'static str>,
    admin_tls: bool,
}

impl Banner {
    fn text(&self) -> String {
        let tcp = self.tcp.map(|a| format!(", tcp {a}")).unwrap_or_default();
        let tls = match self.tls.as_slice() {
            [] => String::new(),
            [one] => format!("; TLS on {one}"),
            [init @ .., last] => format!("; TLS on {} and {last}", init.join(", ")),
        };
        // The admin address goes last, after the fields tools already parse.
        let scheme = if self.admin_tls { "https" } else { "http" };
        let admin = self
            .admin
            .map(|a| format!("; admin {scheme} {a}"))
            .unwrap_or_default();
        format!(
            "c1m serve: listening on http {}{tcp}; {} workers x {} connections (fd limit {}); workers {}{tls}{admin}",
            self.http, self.workers, self.per_worker, self.fd_limit, self.workers_why
        )
    }

    /// The same facts as one JSON object in the shape of the JSON log lines (`timestamp`,
    /// `level`, `fields` with `message`, `span`).
    fn json(&self, now: std::time::SystemTime) -> String {
        let addr = |a: Option<std::net::SocketAddr>| a.map(|a| a.to_string());
        serde_json::json!({
            "timestamp": humantime::format_rfc3339_micros(now).to_string(),
            "level": "INFO",
            "fields": {
                "message": "c1m serve: listening",
                "http": self.http.to_string(),
                "tcp": addr(self.tcp),
                "admin": addr(self.admin),
                "tls": self.tls,
                "workers": self.workers,
                "per_worker": self.per_worker,
                "fd_limit": self.fd_limit,
                "workers_reason": self.workers_why,
            },
            "span": { "name": "master", "pid": std::process::id() },
        })
        .to_string()
    }

    fn print(&self, format: config::LogFormat) {
        match format {
            config::LogFormat::Text => println!("{}", self.text()),
            config::LogFormat::Json => println!("{}", self.json(std::time::SystemTime::now())),
        }
    }
}

/// The listeners that speak TLS, by the names the banner uses.
fn tls_listeners(cfg: &Config) -> Vec<&'static str> {
    if cfg.tls_cert.is_none() {
        return Vec::new();
    }
    let mut on = vec!["http"];
    if cfg.tcp_listen.is_some() {
        on.push("tcp");
    }
    if cfg.admin_listen.is_some() && cfg.admin_tls {
        on.push("admin");
    }
    on
}

/// Publishing without `--publish-key` is allowed from loopback peers only. Behind a reverse
/// proxy on the same host every client is a loopback peer; a proxy that adds a forwarding
/// header is caught per request (`publish_rule`), one that adds none is not. A public listener
/// bound to a loopback address is the shape of that setup (nothing but a local proxy can reach
/// it), so say so at start; a publish key, or `--admin-publish`, settles it.
fn open_publish_warning(cfg: &Config) -> Option<String> {
    if cfg.publish_key.is_some() || cfg.admin_publish || !cfg.listen.ip().is_loopback() {
        return None;
    }
    Some(format!(
        "publishing needs no key from loopback peers (no --publish-key) and {} is reachable only \
         from this host: behind a proxy on this host that adds no X-Forwarded-For every client \
         is a loopback publisher; set --publish-key, or --admin-publish to publish on the \
         admin listener only",
        cfg.listen
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banner() -> Banner {
        Banner {
            http: "127.0.0.1:8080".parse().unwrap(),
            tcp: None,
            admin: Some("127.0.0.1:9180".parse().unwrap()),
            workers: 2,
            per_worker: 1050,
            fd_limit: 20000,
            workers_why: "set: 2 (from the --config file)".into(),
            tls: vec!["http"],
            admin_tls: false,
        }
    }

    #[test]
    fn the_banner_names_only_the_listeners_that_speak_tls() {
        let b = banner();
        assert_eq!(
            b.text(),
            "c1m serve: listening on http 127.0.0.1:8080; 2 workers x 1050 connections (fd limit \
             20000); workers set: 2 (from the --config file); TLS on http; admin http 127.0.0.1:9180"
        );
        let b = Banner {
            tcp: Some("127.0.0.1:8081".parse().unwrap()),
            tls: vec!["http", "tcp", "admin"],
            admin_tls: true,
            ..banner()
        };
        let text = b.text();
        assert!(
            text.ends_with("; TLS on http, tcp and admin; admin https 127.0.0.1:9180"),
            "{text}"
        );
    }

    #[test]
    fn the_json_banner_is_one_log_event_with_the_addresses_as_fields() {
        let line = banner().json(std::time::UNIX_EPOCH);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["timestamp"], "1970-01-01T00:00:00.000000Z");
        assert_eq!(v["fields"]["http"], "127.0.0.1:8080");
        assert_eq!(v["fields"]["admin"], "127.0.0.1:9180");
        assert!(v["fields"]["tcp"].is_null());
        assert!(!line.contains('\n'));
    }
}
