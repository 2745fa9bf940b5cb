//! The push gateway (`c1m serve`).
use clap::Args;

/// `c1m serve` arguments.
#[derive(Args, Debug)]
pub struct ServeArgs {}

pub fn run(_: ServeArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m serve is not built yet")
}
pub fn run_worker_from_env() -> anyhow::Result<u8> {
    anyhow::bail!("c1m serve is not built yet")
}
