//! Live configuration: the master re-reads its file (and the key files) on SIGHUP and sends
//! the result; the worker swaps it in. Limits are read from `cfg` at each use, so the next request, publish or timer
//! sees the new values; nothing already connected is dropped. (Keys that need a restart were
//! kept at their old values by the master.)

use super::Worker;
use crate::config::Config;
use c1m_proto::ws::handshake::OriginPolicy;

impl Worker {
    pub(super) fn reconfigure(&mut self, json: &str) {
        match serde_json::from_str::<Config>(json) {
            Ok(cfg) => {
                // The key material came from the master just before (it checked it loads).
                match crate::auth::Auth::new(&cfg, &self.secrets) {
                    Ok(auth) => self.auth = auth,
                    Err(e) => tracing::error!(
                        error = %format!("{e:#}"),
                        "keeping the running auth configuration"
                    ),
                }
                self.ws_policy = origin_policy(&cfg);
                // Subscribes and client publishes from now on; who is already subscribed stays.
                self.namespaces = std::sync::Arc::new(crate::config::Namespaces::new(&cfg));
                reload_tls(&mut self.conns.tls, &cfg, &self.secrets);
                self.cfg = cfg;
                self.apply_keepalive_to_listeners();
            }
            Err(e) => tracing::error!(
                error = %e,
                "new configuration unreadable, keeping the old one"
            ),
        }
    }
}

/// New certificate bytes from the master (SIGHUP): the next handshakes use them; established
/// connections keep their session. Bytes that do not load keep the running certificate.
fn reload_tls(
    tls: &mut super::tls_session::Sessions,
    cfg: &Config,
    secrets: &crate::secrets::Secrets,
) {
    if !tls.enabled() {
        return; // turning TLS on needs a restart (the master keeps it off)
    }
    match secrets.tls_configs(cfg) {
        Ok(Some(configs)) => tls.set_configs(Some(configs)),
        Ok(None) => {}
        Err(e) => tracing::error!(
            error = %format!("{e:#}"),
            "TLS certificate not reloaded, keeping the running one"
        ),
    }
}

pub(super) fn origin_policy(cfg: &Config) -> OriginPolicy {
    // One allow-list for CORS and WebSocket Origins (`--cors-origins`, or `--ws-origins`).
    match cfg.origin_list() {
        Some(list) if list.trim() == "*" => OriginPolicy::Any,
        // Non-browser clients send no Origin; the allow-list guards browsers, which always do.
        Some(list) => OriginPolicy::from_list(list, true),
        None => OriginPolicy::Any,
    }
}
