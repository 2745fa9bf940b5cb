//! Checks: every way a [`Config`] can contradict itself or a hard limit of the server (the
//! master-worker frame size, the hub's per-message overhead, the kernel's socket option
//! ranges), and files that must be readable (TLS). They run at start, on every reload (SIGHUP)
//! and for `--check-config`, which lists every problem instead of the first.
//!
//! This is the one part of the configuration that reaches into other modules: the limits it
//! checks against are theirs, so it asks them rather than copying their numbers.

use super::{AuthMode, Config};
use anyhow::bail;
use std::time::Duration;

/// Largest `max_payload`: a message crosses the master-worker link in one frame, which must
/// stay well under the link's frame limit (channel names and ids ride along).
pub const MAX_PAYLOAD_LIMIT: usize = crate::ipc::MAX_FRAME / 2;
/// Most channels one subscription may name: the ipc join frame carries them in one list.
pub const MAX_CHANNELS_PER_SUB: usize = crate::ipc::MAX_CHANNELS;

impl Config {
    /// The checks every configuration passes, at start and at each reload (SIGHUP): every
    /// problem found, in one error.
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        bail!("{}", problems.join("; "))
    }

    /// Every way this configuration contradicts itself or a hard limit (`--check-config` lists
    /// them all; start and reload refuse any).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        macro_rules! problem {
            ($($arg:tt)*) => { problems.push(format!($($arg)*)) };
        }
        if let Some(url) = &self.broker {
            let ca = self.broker_ca.as_deref();
            if let Err(e) = crate::broker::redis::RedisTarget::parse(url, ca) {
                problem!("{e:#}");
            }
        }
        if self.broker.is_none() && self.broker_ca.is_some() {
            problem!("--broker-ca needs --broker rediss://…");
        }
        if let Some(url) = &self.webhook_url {
            if let Err(e) = crate::master::webhooks::check_url(url) {
                problem!("--webhook-url: {e}");
            }
            if self.webhook_spool.is_none() {
                problem!("--webhook-url needs --webhook-spool DIR (events wait there until acknowledged)");
            }
            if self.webhook_ca_file.is_some() && !url.starts_with("https://") {
                problem!("--webhook-ca-file needs an https:// --webhook-url");
            } else if url.starts_with("https://") {
                if let Err(e) = crate::master::webhooks::tls_config(self.webhook_ca_file.as_deref())
                {
                    problem!("{e:#}");
                }
            }
        }
        for (flag, url) in [
            ("--proxy-connect-url", &self.proxy_connect_url),
            ("--proxy-subscribe-url", &self.proxy_subscribe_url),
            ("--proxy-publish-url", &self.proxy_publish_url),
            ("--proxy-refresh-url", &self.proxy_refresh_url),
        ] {
            if let Some(Err(e)) = url.as_deref().map(crate::master::webhooks::check_url) {
                problem!("{flag}: {e}");
            }
        }
        if self.proxy_timeout.is_zero() {
            problem!("--proxy-timeout must be more than 0");
        }
        if self.proxy_max_in_flight == 0 {
            problem!("--proxy-max-in-flight must be at least 1");
        }
        if let Some(Err(e)) = self
            .proxy_headers
            .as_deref()
            .map(crate::proxy::parse_header_list)
        {
            problem!("--proxy-headers: {e}");
        }
        if self.webhook_url.is_none()
            && (self.webhook_spool.is_some()
                || self.webhook_secret_file.is_some()
                || self.webhook_ca_file.is_some())
        {
            problem!(
                "--webhook-spool, --webhook-secret-file and --webhook-ca-file need --webhook-url"
            );
        }
        if self.webhook_spool_max_bytes < 64 * 1024 {
            problem!("--webhook-spool-max-bytes must be at least 65536 (a POST holds at most an eighth of the spool)");
        }
        if self.max_conns == 0 {
            problem!("--max-conns must be at least 1");
        }
        if self.join_leave && !self.presence {
            problem!("--join-leave needs --presence (events come from the member sets)");
        }
        if self.presence && self.presence_max_members == 0 {
            problem!("--presence-max-members must be at least 1");
        }
        if !(0..=19).contains(&self.worker_nice) {
            problem!(
                "--worker-nice must be from 0 to 19 (nice steps the workers add to their own)"
            );
        }
        if !self.uring_entries.is_power_of_two() || self.uring_entries > 32768 {
            problem!("--uring-entries must be a power of two from 1 to 32768 (the kernel's limit)");
        }
        if self.max_channels_per_sub == 0 {
            problem!("--max-channels-per-sub must be at least 1");
        }
        if self.history_size == 0 {
            problem!("--history-size must be at least 1 (resume needs history)");
        }
        if self.max_channels_per_sub > MAX_CHANNELS_PER_SUB {
            problem!("--max-channels-per-sub must be at most {MAX_CHANNELS_PER_SUB}");
        }
        if self.max_payload > MAX_PAYLOAD_LIMIT {
            problem!(
                "--max-payload {} is over the largest supported payload ({MAX_PAYLOAD_LIMIT} bytes): \
                 every message crosses the master-worker link in one frame",
                self.max_payload
            );
        }
        if self.api_max_body == 0 || self.api_max_body > MAX_PAYLOAD_LIMIT {
            problem!(
                "--api-max-body {} must be between 1 and {MAX_PAYLOAD_LIMIT} bytes: a server API \
                 request crosses the master-worker link in one frame",
                self.api_max_body
            );
        }
        // One channel of the longest name holding one message of the largest payload.
        let one = self.max_payload
            + crate::hub::STORED_OVERHEAD
            + crate::hub::CHANNEL_OVERHEAD
            + c1m_proto::channel::MAX_CHANNEL_LEN;
        if self.history_max_bytes < one {
            problem!(
                "--history-max-bytes {} cannot hold one channel with one message of \
                 --max-payload {}; raise it to at least {one}",
                self.history_max_bytes,
                self.max_payload,
            );
        }
        problems.extend(self.namespace_problems(self.max_payload + crate::hub::STORED_OVERHEAD));
        if self
            .sse_heartbeat
            .is_some_and(|d| d < Duration::from_millis(100))
        {
            problem!("--sse-heartbeat must be at least 100ms");
        }
        if let Some(every) = self.ws_ping_interval {
            if every < Duration::from_millis(100) || self.ws_pong_timeout >= every {
                problem!(
                    "--ws-ping-interval must be at least 100ms and longer than --ws-pong-timeout"
                );
            }
        }
        if self.ws_max_message == 0 {
            problem!("--ws-max-message must be at least 1");
        }
        if self.publish_key.as_deref() == Some("") {
            problem!("--publish-key must not be empty");
        }
        // The kernel takes these in whole seconds (TCP_KEEPIDLE ≤ 32767, TCP_KEEPCNT ≤ 127).
        let secs = |d: Duration| (1..=32767).contains(&d.as_secs());
        if self.tcp_keepalive.is_some_and(|d| !secs(d)) || !secs(self.tcp_keepalive_interval) {
            problem!(
                "--tcp-keepalive and --tcp-keepalive-interval must be 1s..32767s (or 0 = off)"
            );
        }
        if !(1..=127).contains(&self.tcp_keepalive_count) {
            problem!("--tcp-keepalive-count must be 1..127");
        }
        if self.max_conns_per_ip == Some(0) {
            problem!("--max-conns-per-ip must be at least 1 (leave it out to turn the limit off)");
        }
        if !matches!(
            self.max_new_conns_per_ip_per_sec,
            None | Some(1..=1_000_000)
        ) {
            problem!("--max-new-conns-per-ip-per-sec must be between 1 and 1000000");
        }
        if let Err(e) = crate::log::filter(&self.log_level) {
            problem!("--log-level {:?}: {e}", self.log_level);
        }
        self.auth_problems(&mut problems);
        if let Err(e) = self.validate_tls() {
            problems.push(format!("{e:#}"));
        }
        problems
    }

    /// Auth, CORS and the admin listener. The key file itself is read by
    /// `crate::auth::Auth::from_config`, at start and on every reload.
    fn auth_problems(&self, problems: &mut Vec<String>) {
        macro_rules! problem {
            ($($arg:tt)*) => { problems.push(format!($($arg)*)) };
        }
        if self.auth != AuthMode::Off && self.jwt_key.is_none() {
            problem!(
                "--auth {} needs --jwt-key FILE to verify tokens",
                self.auth.flag_value()
            );
        }
        if self.auth == AuthMode::Required && self.tcp_listen.is_some() {
            problem!(
                "--auth required cannot be combined with --tcp-listen: the raw TCP line protocol \
                 carries no token, so it would let anyone subscribe"
            );
        }
        if let (Some(cors), Some(ws)) = (&self.cors_origins, &self.ws_origins) {
            if cors != ws {
                problem!(
                    "--cors-origins and --ws-origins are one allow-list; give only --cors-origins"
                );
            }
        }
        if self.auth_cookie.as_deref().is_some_and(|c| {
            c.is_empty()
                || !c
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        }) {
            problem!("--auth-cookie must be a cookie name of letters, digits and -_.");
        }
        if self.admin_publish && self.admin_listen.is_none() {
            problem!("--admin-publish needs --admin-listen");
        }
        if self.admin_tls && (self.admin_listen.is_none() || self.tls_cert.is_none()) {
            problem!("--admin-tls needs --admin-listen and --tls-cert");
        }
        if self.auth_cookie.is_some() && self.origin_list().is_some_and(|l| l.trim() == "*") {
            problem!(
                "--auth-cookie cannot be combined with --cors-origins '*': any site's page could \
                 then subscribe with the visitor's cookie; list the pages' origins instead"
            );
        }
        if self
            .admin_listen
            .is_some_and(|a| a == self.listen && a.port() != 0)
        {
            problem!("--admin-listen must differ from --listen");
        }
    }

    /// TLS needs both files, readable and matching (checked at start: exit 2; and on SIGHUP:
    /// the reload is refused and the running certificate stays).
    fn validate_tls(&self) -> anyhow::Result<()> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(()),
            (Some(cert), Some(key)) => crate::tls::load(cert, key, !self.no_http2).map(|_| ()),
            _ => bail!("--tls-cert and --tls-key go together: give both or neither"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServeArgs;
    use std::path::PathBuf;

    #[test]
    fn per_ip_limits_are_off_by_default_and_zero_is_refused() {
        let c = ServeArgs::default().resolve().unwrap();
        assert!(!c.per_ip_limits() && !c.per_ip_limit_loopback);
        for args in [
            ServeArgs {
                max_conns_per_ip: Some(0),
                ..Default::default()
            },
            ServeArgs {
                max_new_conns_per_ip_per_sec: Some(0),
                ..Default::default()
            },
        ] {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.contains("per-ip"), "{err}");
        }
        let c = ServeArgs {
            max_new_conns_per_ip_per_sec: Some(50),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(c.per_ip_limits());
    }

    #[test]
    fn limits_that_contradict_each_other_are_refused_at_start() {
        let check = |args: ServeArgs| args.resolve().map(|_| ()).map_err(|e| e.to_string());
        // A payload larger than one ipc frame could carry used to kill a worker on publish.
        let err = check(ServeArgs {
            max_payload: Some(32 * 1024 * 1024),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--max-payload"), "{err}");
        let err = check(ServeArgs {
            history_max_bytes: Some(1000),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--history-max-bytes"), "{err}");
        let err = check(ServeArgs {
            max_channels_per_sub: Some(5000),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--max-channels-per-sub"), "{err}");
        assert!(check(ServeArgs {
            max_payload: Some(MAX_PAYLOAD_LIMIT),
            ..Default::default()
        })
        .is_ok());
    }

    #[test]
    fn auth_flags_that_cannot_work_together_are_refused() {
        let check = |args: ServeArgs| args.resolve().map(|_| ()).map_err(|e| e.to_string());
        let key = Some(PathBuf::from("/any/key"));
        let err = check(ServeArgs {
            auth: Some(AuthMode::Required),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--jwt-key"), "{err}");
        let err = check(ServeArgs {
            auth: Some(AuthMode::Required),
            jwt_key: key.clone(),
            tcp_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--tcp-listen"), "{err}");
        // Optional auth lets the line protocol's anonymous subscribers in.
        assert!(check(ServeArgs {
            auth: Some(AuthMode::Optional),
            jwt_key: key,
            tcp_listen: Some("127.0.0.1:0".parse().unwrap()),
            ..Default::default()
        })
        .is_ok());
        let err = check(ServeArgs {
            cors_origins: Some("https://a.example".into()),
            ws_origins: Some("https://b.example".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("one allow-list"), "{err}");
        let err = check(ServeArgs {
            admin_publish: Some(true),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--admin-listen"), "{err}");
        let err = check(ServeArgs {
            auth_cookie: Some("bad name;".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.contains("--auth-cookie"), "{err}");
        let c: Config = toml::from_str(
            "auth = \"optional\"\njwt_key = \"/k\"\nadmin_listen = \"127.0.0.1:9180\"",
        )
        .unwrap();
        assert_eq!(c.auth, AuthMode::Optional);
        // The WebSocket check follows --cors-origins; --ws-origins alone still works.
        let c = Config {
            ws_origins: Some("https://w.example".into()),
            ..Config::default()
        };
        assert_eq!(c.origin_list(), Some("https://w.example"));
    }
}
