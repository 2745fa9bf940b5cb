//! Kernel readiness: the parameter knowledge base and `tune` (compute, check, apply, revert,
//! explain), the `doctor` check registry, and the `sockets` / `top` views.
//!
//! Owns: every fact about sysctls and limits, and every reading of /proc, /sys and /etc done on
//! behalf of those commands (always under a `--root` so tests run against a fake tree).
//! Must not touch: sockets of its own beyond netlink queries (those live in `c1m-sys`).

pub mod doctor;
pub mod params;
pub mod root;
pub mod sockets;
pub mod top;

pub use doctor::{run_doctor, DoctorArgs};
pub use sockets::{run_sockets, SocketsArgs};
pub use top::{run_top, TopArgs};

use clap::Args;

/// `c1m tune` arguments.
#[derive(Args, Debug)]
pub struct TuneArgs {}
pub fn run_tune(_: TuneArgs) -> anyhow::Result<u8> {
    anyhow::bail!("c1m tune is not built yet")
}
