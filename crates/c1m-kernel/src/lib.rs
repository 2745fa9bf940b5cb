//! Kernel readiness: the parameter knowledge base and `tune` (compute, check, apply, revert,
//! explain), the `doctor` check registry, and the `sockets` / `top` views.
//!
//! Owns: every fact about sysctls and limits, and every reading of /proc, /sys and /etc done on
//! behalf of those commands (always under a `--root` so tests run against a fake tree).
//! Must not touch: sockets of its own beyond netlink queries (those live in `c1m-sys`).

pub mod doctor;
pub mod nofile;
pub mod params;
pub mod root;
pub mod sockets;
pub mod top;
pub mod tune;

pub use doctor::{run_doctor, DoctorArgs};
pub use sockets::{run_sockets, SocketsArgs};
pub use top::{run_top, TopArgs};
pub use tune::{run_tune, TuneArgs};
