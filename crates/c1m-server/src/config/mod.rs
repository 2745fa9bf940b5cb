//! `c1m serve` configuration: command-line flags (clap, with `C1M_*` environment variables)
//! over a TOML file (`--config`) over the embedded defaults. [`Config`] is the resolved result;
//! the master hands it to each worker as JSON.
//!
//! # Layout
//! - `model`: [`Config`], its value types and its one `Default`, the only place a default is
//!   written.
//! - `args`: [`ServeArgs`], the clap flags; their help shows the defaults from `model`.
//! - `layering`: defaults, then the file, then environment and flags, into one [`Config`].
//! - `checks`: what a configuration must satisfy (start, reload, `--check-config`); the only
//!   part that asks other modules for their limits.
//! - [`namespaces`]: options per channel-name prefix, resolved once against the globals.
//! - [`report`]: `--check-config`, `--print-config` and docs/CONFIG.md.
//!
//! The log settings' types ([`LogFormat`], the level filter) belong to the log module; the
//! configuration uses them, and the logger never sees a [`Config`].

mod args;
mod checks;
mod layering;
mod model;
pub mod namespaces;
pub mod report;

pub use args::ServeArgs;
pub use model::{AuthMode, Config, IoMode, LogFormat, NamespaceOptions, UringSetup, Workers};
pub use namespaces::{Namespaces, Resolved};
