//! Live configuration: the master re-reads its file on SIGHUP and sends the result; the worker
//! swaps it in. Limits are read from `cfg` at each use, so the next request, publish or timer
//! sees the new values; nothing already connected is dropped. (Keys that need a restart were
//! kept at their old values by the master.)

use super::Worker;
use crate::config::Config;
use c1m_proto::ws::handshake::OriginPolicy;
use std::time::{Duration, Instant};

impl Worker {
    pub(super) fn reconfigure(&mut self, json: &str) {
        match serde_json::from_str::<Config>(json) {
            Ok(cfg) => {
                self.ws_policy = origin_policy(&cfg);
                reload_tls(&cfg);
                self.cfg = cfg;
            }
            Err(e) => eprintln!(
                "c1m worker {}: new configuration unreadable, keeping the old one: {e}",
                std::process::id()
            ),
        }
    }
}

/// Re-reads the certificate files (SIGHUP): the next handshakes use them; established
/// connections keep their session. Unreadable files keep the running certificate.
fn reload_tls(cfg: &Config) {
    let (Some(cert), Some(key)) = (&cfg.tls_cert, &cfg.tls_key) else {
        return;
    };
    if !super::tls_session::enabled() {
        return; // turning TLS on needs a restart (the master keeps it off)
    }
    match crate::tls::load(cert, key) {
        Ok(configs) => super::tls_session::set_configs(Some(configs)),
        Err(e) => eprintln!(
            "c1m worker {}: TLS certificate not reloaded, keeping the running one: {e:#}",
            std::process::id()
        ),
    }
}

pub(super) fn origin_policy(cfg: &Config) -> OriginPolicy {
    match &cfg.ws_origins {
        // Non-browser clients send no Origin; the allow-list guards browsers, which always do.
        Some(list) => OriginPolicy::from_list(list, true),
        None => OriginPolicy::Any,
    }
}

/// The next time a periodic job (heartbeat, ping) runs after a configuration change: off when
/// its interval is off, never later than one new interval from now.
pub(super) fn reschedule(
    at: Option<Instant>,
    every: Option<Duration>,
    now: Instant,
) -> Option<Instant> {
    let every = every?;
    Some(at.map_or(now + every, |t| t.min(now + every)))
}
