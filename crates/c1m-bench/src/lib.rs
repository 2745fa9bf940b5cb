//! The load generator: opens, holds and measures many connections from many source addresses.
//!
//! Owns: bench worker processes, their epoll loops and connection arenas, the ramp, publishing,
//! latency histograms and the report. Must not touch: server internals (it talks to servers
//! only over sockets).

use clap::Args;

/// `c1m bench` arguments.
#[derive(Args, Debug)]
pub struct BenchArgs {}

pub fn run(_: BenchArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m bench is not built yet")
}

pub fn run_worker_from_env() -> anyhow::Result<u8> {
    anyhow::bail!("c1m bench is not built yet")
}
