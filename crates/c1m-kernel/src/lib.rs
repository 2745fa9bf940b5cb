//! Kernel readiness: the parameter knowledge base and `tune` (compute, check, apply, revert,
//! explain), the `doctor` check registry, and the `sockets` / `top` views.
//!
//! Owns: every fact about sysctls and limits, and every reading of /proc, /sys and /etc done on
//! behalf of those commands (always under a `--root` so tests run against a fake tree).
//! Must not touch: sockets of its own beyond netlink queries (those live in `c1m-sys`).

pub mod params;
pub mod root;
pub mod tune;

pub use tune::{run_tune, TuneArgs};

use clap::Args;

/// `c1m doctor` arguments.
#[derive(Args, Debug)]
pub struct DoctorArgs {}
/// `c1m sockets` arguments.
#[derive(Args, Debug)]
pub struct SocketsArgs {}
/// `c1m top` arguments.
#[derive(Args, Debug)]
pub struct TopArgs {}

pub fn run_doctor(_: DoctorArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m doctor is not built yet")
}
pub fn run_sockets(_: SocketsArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m sockets is not built yet")
}
pub fn run_top(_: TopArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m top is not built yet")
}
