//! placeholder
use clap::Args;
/// `c1m top` arguments.
#[derive(Args, Debug)]
pub struct TopArgs {}
pub fn run_top(_: TopArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m top is not built yet")
}
