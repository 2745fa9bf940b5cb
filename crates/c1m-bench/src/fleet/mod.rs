//! Several load boxes as one generator. A `c1m bench-agent` runs on each load box; `c1m bench
//! --agents agent://HOST:PORT,…` connects to them, splits the run among them, starts their
//! ramps together, runs the publisher itself, and merges what their workers report exactly as
//! it merges local workers' reports (histograms bucket by bucket, counts summed).
//!
//! # Layout
//! - [`frame`]: the typed messages and their length-prefixed, size-capped frames.
//! - [`limits`]: what a box can hold (fds, ports per pair, memory) and the check of a share.
//! - [`clock`]: the NTP-style offset and round trip of one probe.
//! - [`split`]: dividing connections, rates, sources and workers among agents.
//! - [`agent`]: the agent process (listener, sessions, relaying to local workers).
//! - [`link`]: the coordinator's end of one agent connection.
//! - [`state`]: per-agent figures the coordinator keeps beside the merged run;
//!   [`report`]: their text and JSON sections.
//!
//! Agents started over SSH (`ssh://`) are not implemented: the agent is started on each box
//! by hand or by systemd.

pub mod agent;
pub mod clock;
pub mod frame;
pub mod limits;
pub mod link;
pub mod report;
pub mod split;
pub mod state;

use anyhow::{bail, Context};
use clap::Args;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `c1m bench-agent` arguments.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "Example (on each load box; the same token file on every box and on the coordinator):
  head -c 32 /dev/urandom | base64 > /etc/c1m/bench.token; chmod 600 /etc/c1m/bench.token
  c1m bench-agent --listen 0.0.0.0:7070 --token-file /etc/c1m/bench.token
and on the coordinator:
  c1m bench http://10.0.0.10:8080/sub/news --conns 60000 --publish-every 1s \\
      --agents agent://10.0.0.21:7070,agent://10.0.0.22:7070 --agent-token-file bench.token

The agent prints `c1m bench-agent: listening on ADDR` on stdout, then logs on stderr.
It serves one coordinator at a time; it runs until killed."
)]
pub struct AgentArgs {
    /// Address to listen on for the coordinator (port 0: any free port; the line on stdout
    /// says which).
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// File holding the shared token (at least 16 bytes; surrounding whitespace ignored).
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// This box's source addresses (list, range A-B or CIDR): its connections bind only these,
    /// whatever the coordinator's --source says.
    #[arg(long, value_name = "SPEC")]
    pub source: Option<String>,
}

/// Reads a shared token file: trimmed, at least 16 bytes, not readable by others (warned).
pub fn read_token(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read token file {}", path.display()))?;
    let token = text.trim().to_string();
    if token.len() < 16 {
        bail!(
            "token file {} holds {} bytes; at least 16 are needed",
            path.display(),
            token.len()
        );
    }
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "c1m: warning: token file {} is readable by group or others (chmod 600 it)",
                path.display()
            );
        }
    }
    Ok(token)
}

/// Runs `c1m bench-agent`.
pub fn run_agent(args: AgentArgs) -> anyhow::Result<u8> {
    let token = read_token(&args.token_file)?;
    let sources = match &args.source {
        Some(spec) => crate::plan::parse_sources(spec)?,
        None => Vec::new(),
    };
    let limits = limits::gather(sources)?;
    let listener =
        TcpListener::bind(&args.listen).with_context(|| format!("listen on {}", args.listen))?;
    let addr = listener.local_addr().context("listening address")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "c1m bench-agent: listening on {addr}")
        .and_then(|()| out.flush())
        .context("write banner")?;
    drop(out);
    eprintln!(
        "c1m bench-agent: fd limit {} (soft {}) · {} CPU(s) · MemAvailable {} MiB · ports \
         {}-{} ({} per source/destination) · per-socket port range {} · sources {}",
        limits.nofile_hard,
        limits.nofile_soft,
        limits.cpus,
        limits.mem_available_bytes >> 20,
        limits.port_range.0,
        limits.port_range.1,
        limits.per_pair(),
        if limits.port_range_sockopt {
            "yes"
        } else {
            "no"
        },
        if limits.sources.is_empty() {
            "the kernel's (or the coordinator's --source)".to_string()
        } else {
            format!("{} address(es)", limits.sources.len())
        }
    );
    agent::serve(Arc::new(agent::Agent::new(token, limits)), listener)
}
