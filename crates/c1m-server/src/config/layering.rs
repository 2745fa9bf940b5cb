//! Layering: where each value of a [`Config`] comes from. The embedded defaults
//! ([`Config::default`]), then the TOML file given with `--config`, then the environment and
//! the flags (clap has already merged those two in [`ServeArgs`], flags winning). The result is
//! checked here too, so every caller gets a configuration that passed the same checks.

use super::{Config, ServeArgs};
use anyhow::Context;
use std::time::Duration;

impl ServeArgs {
    /// Defaults, then the TOML file, then flags/environment, checked.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        let c = self.resolve_unchecked()?;
        c.validate()?;
        Ok(c)
    }

    /// [`ServeArgs::resolve`] without the checks (`--check-config` lists every problem).
    pub fn resolve_unchecked(&self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading config file {}", path.display()))?;
                toml::from_str(&text)
                    .with_context(|| format!("parsing config file {}", path.display()))?
            }
            None => Config::default(),
        };
        macro_rules! overlay {
            ($($field:ident),*) => { $( if let Some(v) = &self.$field { c.$field = v.clone().into(); } )* };
        }
        // Every key of `Config`, in its order; `overlay_covers_every_key` keeps this complete.
        overlay!(
            listen,
            tcp_listen,
            workers,
            max_conns,
            max_channels_per_sub,
            history_size,
            history_age,
            history_max_bytes,
            max_payload,
            api_max_body,
            publish_key,
            poll_timeout,
            sse_heartbeat,
            head_timeout,
            keepalive_timeout,
            max_unsent,
            grace,
            backlog,
            worker_nice,
            ws_origins,
            ws_max_message,
            ws_ping_interval,
            ws_pong_timeout,
            ws_client_publish,
            ws_close_on_client_data,
            tcp_keepalive,
            tcp_keepalive_interval,
            tcp_keepalive_count,
            tcp_user_timeout,
            max_conns_per_ip,
            max_new_conns_per_ip_per_sec,
            per_ip_limit_loopback,
            log_format,
            log_level,
            auth,
            jwt_key,
            auth_cookie,
            cors_origins,
            admin_listen,
            admin_publish,
            admin_tls,
            no_http2,
            tls_cert,
            tls_key,
            presence,
            join_leave,
            presence_max_members,
            presence_max_bytes,
            broker,
            broker_ca,
            webhook_url,
            webhook_secret_file,
            webhook_ca_file,
            webhook_spool,
            webhook_spool_max_bytes,
            webhook_vacate_delay,
            proxy_connect_url,
            proxy_subscribe_url,
            proxy_publish_url,
            proxy_refresh_url,
            proxy_timeout,
            proxy_max_in_flight,
            proxy_headers,
            upgrade_timeout,
            io,
            uring_entries,
            uring_setup
        );
        c.apply_namespace_flags(&self.namespaces)
            .map_err(|e| anyhow::anyhow!("--namespace {e}"))?;
        c.normalize_off_values();
        Ok(c)
    }
}

impl Config {
    /// A zero interval means "off" for the features that are on by default.
    fn normalize_off_values(&mut self) {
        let off = |d: &mut Option<Duration>| {
            if d.is_some_and(|d| d.is_zero()) {
                *d = None;
            }
        };
        off(&mut self.sse_heartbeat);
        off(&mut self.ws_ping_interval);
        off(&mut self.tcp_keepalive);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Workers;

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("c1m-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("serve.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:9000\"\nworkers = 3\nhistory_age = \"10s\"\nsse_heartbeat = \"2s\"\n").unwrap();
        let args = ServeArgs {
            config: Some(path),
            max_conns: Some(10),
            ..Default::default()
        };
        let c = args.resolve().unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.workers, Workers::Count(3));
        assert_eq!(c.history_age, Duration::from_secs(10));
        assert_eq!(c.sse_heartbeat, Some(Duration::from_secs(2)));
        assert_eq!(c.max_conns, 10);
        let json = serde_json::to_string(&c).unwrap();
        let back: Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back.workers, Workers::Count(3));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
