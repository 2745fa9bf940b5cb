//! The `c1m serve` command line: [`ServeArgs`], one flag per configuration key (each also read
//! from `C1M_<NAME>` in the environment), plus the flags that steer the command itself
//! (`--config`, `--check-config`, `--print-config`).
//!
//! Every flag is optional here, so that a flag left out lets the file or the default through
//! (`layering`). The `[default: …]` each key's help ends with is not written in this file: it
//! is generated from [`Config::default`] ([`help_default`]), so `--help` and docs/CONFIG.md
//! cannot drift from the defaults the server uses.

use super::namespaces::NamespaceFlag;
use super::{AuthMode, Config, IoMode, LogFormat, UringSetup, Workers};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `c1m serve` flags. Every flag also reads `C1M_<NAME>` from the environment.
#[derive(Args, Debug, Default)]
// Each key's help ends with its default, taken from `Config::default()` (see `help_default`).
#[command(mut_args = with_help_default)]
#[command(after_help = "Examples:
  c1m serve                                   # every key at its default (see --print-config)
  c1m serve --listen 127.0.0.1:9000 --workers 4 --max-conns 50000
  c1m serve --tcp-listen 0.0.0.0:9001 --sse-heartbeat 15s --history-size 1000
  C1M_PUBLISH_KEY=secret c1m serve            # publishing needs `Authorization: Bearer secret`
  c1m serve --config /etc/c1m/serve.toml      # TOML keys are the flag names with underscores
  c1m serve --ws-ping-interval 30s --ws-pong-timeout 10s --ws-origins https://app.example

Subscribe:  curl -N -H 'Accept: text/event-stream' http://127.0.0.1:8080/sub/news
            new WebSocket('ws://127.0.0.1:8080/sub/news')   (JSON with ids; ?format=plain: bare payloads, no resume)
Publish:    curl -d 'hello' http://127.0.0.1:8080/pub/news
Protocol:   docs/PROTOCOL.md")]
pub struct ServeArgs {
    /// Check the configuration (file, environment and flags together) and exit: 0 when it is
    /// valid, 2 with every problem listed.
    #[arg(long)]
    pub check_config: bool,
    /// Print the effective configuration as TOML, each key with where its value came from
    /// (default, file, env, flag), and exit.
    #[arg(long)]
    pub print_config: bool,
    /// TOML configuration file; flags and environment override its values. SIGHUP re-reads it
    /// and applies the keys that can change live (see docs/PROTOCOL.md, Lifecycle).
    #[arg(long, env = "C1M_CONFIG")]
    pub config: Option<PathBuf>,
    /// HTTP listen address.
    #[arg(long, env = "C1M_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Raw TCP line-protocol listen address.
    #[arg(long, env = "C1M_TCP_LISTEN")]
    pub tcp_listen: Option<SocketAddr>,
    /// Worker processes: N or `auto`.
    #[arg(long, env = "C1M_WORKERS")]
    pub workers: Option<Workers>,
    /// Connections held before new ones are refused (1000000, 1M, 250K); each worker takes its share + 5 %.
    #[arg(long, env = "C1M_MAX_CONNS", value_parser = c1m_proto::count::parse_count)]
    pub max_conns: Option<u64>,
    /// Channels one subscription may name.
    #[arg(long, env = "C1M_MAX_CHANNELS_PER_SUB")]
    pub max_channels_per_sub: Option<usize>,
    /// Messages kept per channel for resume.
    #[arg(long, env = "C1M_HISTORY_SIZE")]
    pub history_size: Option<usize>,
    /// Longest a message stays in history.
    #[arg(long, env = "C1M_HISTORY_AGE", value_parser = humantime::parse_duration)]
    pub history_age: Option<Duration>,
    /// Bytes of history over all channels, each channel's and message's own cost included; the oldest message anywhere is dropped first.
    #[arg(long, env = "C1M_HISTORY_MAX_BYTES")]
    pub history_max_bytes: Option<usize>,
    /// Largest publish body in bytes (after chunked decoding; larger → 413), at most 8388608.
    #[arg(long, env = "C1M_MAX_PAYLOAD")]
    pub max_payload: Option<usize>,
    /// Largest server API request body in bytes (POST /api/{call}; larger → 413).
    #[arg(long, env = "C1M_API_MAX_BODY")]
    pub api_max_body: Option<usize>,
    /// Bearer key required to publish (HTTP and WebSocket client publish).
    #[arg(long, env = "C1M_PUBLISH_KEY", hide_env_values = true)]
    pub publish_key: Option<String>,
    /// Long-poll wait before an empty 204.
    #[arg(long, env = "C1M_POLL_TIMEOUT", value_parser = humantime::parse_duration)]
    pub poll_timeout: Option<Duration>,
    /// SSE heartbeat comment interval, e.g. 15s; 0 = off.
    #[arg(long, env = "C1M_SSE_HEARTBEAT", value_parser = humantime::parse_duration)]
    pub sse_heartbeat: Option<Duration>,
    /// Time allowed to send a complete request head.
    #[arg(long, env = "C1M_HEAD_TIMEOUT", value_parser = humantime::parse_duration)]
    pub head_timeout: Option<Duration>,
    /// How long a served keep-alive connection may wait idle for its next request; once that
    /// request starts, --head-timeout bounds its head.
    #[arg(long, env = "C1M_KEEPALIVE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub keepalive_timeout: Option<Duration>,
    /// Unsent bytes per subscriber before it is disconnected as a slow reader (WebSocket: close
    /// 4008).
    #[arg(long, env = "C1M_MAX_UNSENT")]
    pub max_unsent: Option<usize>,
    /// On SIGTERM/SIGINT, how long clients get to read what is queued for them and their
    /// goodbye before they are closed.
    #[arg(long, env = "C1M_GRACE", value_parser = humantime::parse_duration)]
    pub grace: Option<Duration>,
    /// listen() backlog, capped by net.core.somaxconn.
    #[arg(long, env = "C1M_BACKLOG")]
    pub backlog: Option<i32>,
    /// Lower the subscriber workers' CPU priority by N nice steps (0-19), so that on a
    /// saturated box the master and the control worker (publish acks, /status) run before
    /// fan-out work; 0 runs them all at one priority.
    #[arg(long, env = "C1M_WORKER_NICE", value_parser = clap::value_parser!(i32).range(0..=19))]
    pub worker_nice: Option<i32>,
    /// WebSocket Origins allowed, comma-separated (others get 403); the same list as
    /// --cors-origins, which sets it too.
    #[arg(long, env = "C1M_WS_ORIGINS")]
    pub ws_origins: Option<String>,
    /// Largest WebSocket message from a client in bytes; larger closes with 1009.
    #[arg(long, env = "C1M_WS_MAX_MESSAGE")]
    pub ws_max_message: Option<usize>,
    /// WebSocket ping interval, e.g. 15s; 0 = off.
    #[arg(long, env = "C1M_WS_PING_INTERVAL", value_parser = humantime::parse_duration)]
    pub ws_ping_interval: Option<Duration>,
    /// Close a WebSocket whose pong is this late; must be below the ping interval.
    #[arg(long, env = "C1M_WS_PONG_TIMEOUT", value_parser = humantime::parse_duration)]
    pub ws_pong_timeout: Option<Duration>,
    /// Publish WebSocket client messages to the connection's channel, under the publish rule:
    /// with --publish-key the upgrade must carry `Authorization: Bearer KEY` or subprotocol
    /// `c1m.publish-key.KEY`, else loopback peers only; others are closed with 1008. Off:
    /// client messages are ignored and counted.
    #[arg(long, env = "C1M_WS_CLIENT_PUBLISH", num_args = 0..=1, default_missing_value = "true")]
    pub ws_client_publish: Option<bool>,
    /// Close (1003) a WebSocket that sends data when client publish is off (otherwise the data
    /// is ignored).
    #[arg(long, env = "C1M_WS_CLOSE_ON_CLIENT_DATA", num_args = 0..=1, default_missing_value = "true")]
    pub ws_close_on_client_data: Option<bool>,
    /// Idle time before TCP keepalive probes start on client sockets; 0 = off.
    #[arg(long, env = "C1M_TCP_KEEPALIVE", value_parser = humantime::parse_duration)]
    pub tcp_keepalive: Option<Duration>,
    /// Time between unanswered keepalive probes.
    #[arg(long, env = "C1M_TCP_KEEPALIVE_INTERVAL", value_parser = humantime::parse_duration)]
    pub tcp_keepalive_interval: Option<Duration>,
    /// Unanswered keepalive probes before a client is dropped as dead.
    #[arg(long, env = "C1M_TCP_KEEPALIVE_COUNT")]
    pub tcp_keepalive_count: Option<u32>,
    /// Longest written data may stay unacknowledged before a client is dropped as dead;
    /// 0 = off.
    #[arg(long, env = "C1M_TCP_USER_TIMEOUT", value_parser = humantime::parse_duration)]
    pub tcp_user_timeout: Option<Duration>,
    /// Connections one source address (IPv6: one /64) may hold over all workers; more get 429
    /// with Retry-After (raw TCP: ERR), counted as refused.per_ip_conns. Loopback is exempt
    /// unless --per-ip-limit-loopback.
    #[arg(long, env = "C1M_MAX_CONNS_PER_IP")]
    pub max_conns_per_ip: Option<u32>,
    /// New connections one source address may open per second: a burst of N, then one per 1/N
    /// s; more get 429 with Retry-After (raw TCP: ERR), counted as refused.per_ip_rate.
    #[arg(long, env = "C1M_MAX_NEW_CONNS_PER_IP_PER_SEC")]
    pub max_new_conns_per_ip_per_sec: Option<u32>,
    /// Apply the per-IP limits to loopback peers too (otherwise loopback is exempt).
    #[arg(long, env = "C1M_PER_IP_LIMIT_LOOPBACK", num_args = 0..=1, default_missing_value = "true")]
    pub per_ip_limit_loopback: Option<bool>,
    // ---- logs ----
    /// Log line format on stderr: text or json (one object per line; the start-up line on
    /// stdout is then a JSON event too).
    #[arg(long, env = "C1M_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// `info,c1m_server::worker=debug`. At info: one line per lifecycle event, never one per
    /// message or connection; refusals are summed in one warning per 10 s.
    #[arg(long, env = "C1M_LOG_LEVEL")]
    pub log_level: Option<String>,
    // ---- auth, CORS and the admin listener ----
    /// Subscriber auth: off, optional (a token that is shown must be valid) or required. No
    /// or bad token: 401 (refused.unauthorized); channel not in the token's `channels`: 403
    /// (refused.forbidden); a held stream whose token expires ends with SSE `event: expired`
    /// or WebSocket close 4001 (refused.expired).
    #[arg(long, env = "C1M_AUTH", value_enum)]
    pub auth: Option<AuthMode>,
    /// JWT key file: an HMAC secret (HS256/384/512, at least 32 bytes), an RSA/EC/Ed25519
    /// public key in PEM, or a JWKS; tokens need `exp`, and `channels` (subscribe) or
    /// `publish` (publish) with `*` segment wildcards. Re-read on SIGHUP.
    #[arg(long, env = "C1M_JWT_KEY")]
    pub jwt_key: Option<PathBuf>,
    /// Cookie that may carry the subscriber's JWT (also read: Authorization: Bearer,
    /// ?token=, WebSocket subprotocol c1m.token.JWT). Honoured only on requests without an
    /// Origin or from an Origin listed in --cors-origins (others: 403), so another site's page
    /// cannot subscribe with the visitor's cookie; refused with --cors-origins '*'.
    #[arg(long, env = "C1M_AUTH_COOKIE")]
    pub auth_cookie: Option<String>,
    /// Browser origins allowed (comma-separated, or `*`): CORS headers and OPTIONS preflight
    /// for /sub and /pub, and the WebSocket Origin check (shares the list with --ws-origins).
    /// A list allows credentials (cookies); `*` does not.
    #[arg(long, env = "C1M_CORS_ORIGINS")]
    pub cors_origins: Option<String>,
    /// Admin listener (e.g. 127.0.0.1:9180) for /status, /metrics, /healthz; the public
    /// listener then answers 404 for them.
    #[arg(long, env = "C1M_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// With --admin-listen: /pub is served only on the admin listener (public: 404); off: /pub
    /// stays on --listen.
    #[arg(long, env = "C1M_ADMIN_PUBLISH", num_args = 0..=1, default_missing_value = "true")]
    pub admin_publish: Option<bool>,
    /// With --admin-listen and --tls-cert: the admin listener speaks TLS too (https://); off:
    /// plain HTTP, for scrapers and health checks on a private address.
    #[arg(long, env = "C1M_ADMIN_TLS", num_args = 0..=1, default_missing_value = "true")]
    pub admin_tls: Option<bool>,
    /// Turns HTTP/2 off: TLS offers ALPN http/1.1 only, and a plaintext connection opening
    /// with the HTTP/2 preface (h2c prior knowledge) is refused as a bad HTTP/1.1 request.
    #[arg(long, env = "C1M_NO_HTTP2", num_args = 0..=1, default_missing_value = "true")]
    pub no_http2: Option<bool>,
    // ---- TLS ----
    /// PEM certificate chain (leaf first): TLS (rustls; ALPN h2 and http/1.1 on the HTTP
    /// port) on the HTTP and raw TCP listeners (the admin listener stays plain HTTP unless
    /// --admin-tls); needs --tls-key. SIGHUP re-reads both files: new handshakes
    /// get the new certificate, established connections stay. A plaintext client on a TLS port
    /// gets 400 (raw TCP: ERR) and is closed; a handshake not done within --head-timeout is
    /// closed; /status `tls` counts both.
    #[arg(long, env = "C1M_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "C1M_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Keep each channel's member set (user from the token's `sub`, connection id, the
    /// token's `info` claim): SSE, WebSocket and TCP streams are members while subscribed;
    /// `GET /channels/{ch}/presence` lists them (docs/PROTOCOL.md, Presence).
    #[arg(long, env = "C1M_PRESENCE", num_args = 0..=1, default_missing_value = "true")]
    pub presence: Option<bool>,
    /// Send `join` and `leave` events to a channel's subscribers as members come and go
    /// (needs --presence).
    #[arg(long, env = "C1M_JOIN_LEAVE", num_args = 0..=1, default_missing_value = "true")]
    pub join_leave: Option<bool>,
    /// Members kept per channel; a join past it is left out of presence and counted (the
    /// subscription itself works).
    #[arg(long, env = "C1M_PRESENCE_MAX_MEMBERS")]
    pub presence_max_members: Option<u32>,
    /// Bytes of presence member sets over all channels; a join past it is left out of
    /// presence and counted.
    #[arg(long, env = "C1M_PRESENCE_MAX_BYTES")]
    pub presence_max_bytes: Option<usize>,
    // ---- cluster broker ----
    /// Share ids, history and delivery with other `c1m serve` nodes through Redis:
    /// redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss://… for TLS (`redis://:PASSWORD@…`
    /// for `requirepass`, `USER:PASSWORD` for an ACL user; the password is never printed);
    /// for Redis Cluster (7+) redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,… (seed
    /// nodes; rediss+cluster:// for TLS), where a multi-channel subscription cannot resume from
    /// a last id (400); for one Redis with Sentinel
    /// redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTERNAME (the Sentinels, asked
    /// for the master on every reconnection; the credentials are the master's, database 0, no
    /// TLS). Publishes get 503 + Retry-After while Redis is unreachable; subscribers stay connected
    /// and get what they missed (or a gap event) when it is back. A password or certificate
    /// Redis refuses at start is an error (exit 2); refused later, it is logged and counted
    /// (`broker.auth_failures`) while the node retries.
    #[arg(long, env = "C1M_BROKER")]
    pub broker: Option<String>,
    /// PEM file of the CA(s) that signed the rediss:// broker's certificate (a private CA);
    /// both Redis connections check the certificate against it and the host name in the URL.
    #[arg(long, env = "C1M_BROKER_CA")]
    pub broker_ca: Option<PathBuf>,
    // ---- lifecycle webhooks ----
    /// POST connection and channel lifecycle events (connect, disconnect with its reason,
    /// subscribe, unsubscribe, channel_occupied, channel_vacated) to this http:// or https://
    /// URL (https: the server's certificate is checked against the system's CA roots, or
    /// --webhook-ca-file, and the host name in the URL), batched
    /// (at most 500 events or 1 MiB per POST), each event with a unique id, retried with
    /// exponential backoff (0.1 s doubling to 5 s) until the backend answers 2xx; needs
    /// --webhook-spool. See docs/PROTOCOL.md, "Lifecycle webhooks".
    #[arg(long, env = "C1M_WEBHOOK_URL", requires = "webhook_spool")]
    pub webhook_url: Option<String>,
    /// File holding the secret that signs each webhook POST: header `X-C1m-Signature:
    /// sha256=HEX`, the HMAC-SHA256 of the body under the file's bytes (a trailing newline is
    /// not part of the secret).
    #[arg(long, env = "C1M_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// PEM file of the CA(s) that signed an https:// webhook backend's certificate (a private
    /// CA): trusted instead of the system's roots.
    #[arg(long, env = "C1M_WEBHOOK_CA_FILE")]
    pub webhook_ca_file: Option<PathBuf>,
    /// Directory of the webhook spool: events are written here before they are sent and removed
    /// once the backend answered 2xx, so they survive a backend outage, a restart and a live
    /// upgrade (the new master takes the same directory).
    #[arg(long, env = "C1M_WEBHOOK_SPOOL")]
    pub webhook_spool: Option<PathBuf>,
    /// Bytes the webhook spool may hold; past it the oldest events are dropped, logged and
    /// counted (c1m_webhook_spool_dropped_total).
    #[arg(long, env = "C1M_WEBHOOK_SPOOL_MAX_BYTES")]
    pub webhook_spool_max_bytes: Option<u64>,
    /// How long a channel stays empty on this node before `channel_vacated` is sent (a
    /// subscriber that reconnects within it makes no vacate/occupy pair).
    #[arg(long, env = "C1M_WEBHOOK_VACATE_DELAY", value_parser = humantime::parse_duration)]
    pub webhook_vacate_delay: Option<Duration>,
    // ---- backend proxies ----
    /// Connect proxy: before a subscriber is let in (SSE, long-poll, WebSocket after its 101,
    /// raw TCP; every subscribe request), POST its connection id, transport, remote address,
    /// the channels asked for and the --proxy-headers to this http:// URL. The answer lets it
    /// in (and may name its user, add channels, give presence info and an expiry) or refuses
    /// it (HTTP 403, WebSocket close 4403, TCP ERR). A timeout refuses with 504 / close 1013, a
    /// failed call with 502 / close 1011. See docs/PROTOCOL.md, "Backend proxies".
    #[arg(long, env = "C1M_PROXY_CONNECT_URL")]
    pub proxy_connect_url: Option<String>,
    /// Subscribe proxy: POST each channel of a subscribe (in namespaces whose proxy_subscribe
    /// is on, the default once this is set) to this http:// URL; the answer allows or refuses
    /// the channel for this connection.
    #[arg(long, env = "C1M_PROXY_SUBSCRIBE_URL")]
    pub proxy_subscribe_url: Option<String>,
    /// Publish proxy: POST each WebSocket client publish (in namespaces whose proxy_publish is
    /// on, the default once this is set) to this http:// URL; the answer allows it, replaces
    /// its data or refuses it (close 4403). The connection's later messages wait meanwhile.
    #[arg(long, env = "C1M_PROXY_PUBLISH_URL")]
    pub proxy_publish_url: Option<String>,
    /// Refresh proxy: when an expiring held stream (JWT exp, or the connect proxy's expire_at)
    /// reaches its expiry, POST it to this http:// URL; the answer extends it or lets it end.
    /// A failed call is retried 5 s later, and the stream ends after 3 failures in a row.
    #[arg(long, env = "C1M_PROXY_REFRESH_URL")]
    pub proxy_refresh_url: Option<String>,
    /// Longest one proxy call may take, its wait in the worker's queue included.
    #[arg(long, env = "C1M_PROXY_TIMEOUT", value_parser = humantime::parse_duration)]
    pub proxy_timeout: Option<Duration>,
    /// Proxy calls one worker process may have unanswered; one more is refused at once (HTTP
    /// 503, WebSocket close 1013, TCP ERR busy) and counted (c1m_proxy_busy_total).
    #[arg(long, env = "C1M_PROXY_MAX_IN_FLIGHT")]
    pub proxy_max_in_flight: Option<u32>,
    /// Request headers the connect and subscribe proxies are sent, comma separated (e.g.
    /// Cookie,Authorization); others are not forwarded.
    #[arg(long, env = "C1M_PROXY_HEADERS")]
    pub proxy_headers: Option<String>,
    // ---- live binary upgrade ----
    /// Live upgrade (`kill -USR2 MASTER` or `c1m upgrade MASTER`): the master starts the
    /// binary now at its path, hands it the listeners, every connection and the hub, and
    /// exits; clients notice nothing. This bounds the whole hand-over: past it the upgrade is
    /// aborted, counted in c1m_upgrades_failed_total, and the old processes serve on (see
    /// docs/upgrade.md).
    #[arg(long, env = "C1M_UPGRADE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub upgrade_timeout: Option<Duration>,
    // ---- I/O path: fan-out sends through io_uring ----
    /// Fan-out send path: `auto` probes io_uring at start and uses it when the kernel allows it
    /// (else epoll + one write() per socket, with the reason logged); `epoll` never uses
    /// io_uring; `uring` refuses to start without it. Readiness (accept, reads, EPOLLOUT) is
    /// epoll either way. /status `io` and /metrics `c1m_worker_io_uring` say which path each
    /// worker uses. io_uring is opt-in: it has not measured faster here (BENCHMARKS.md).
    #[arg(long, env = "C1M_IO", value_enum)]
    pub io: Option<IoMode>,
    /// io_uring send ring size: sends per io_uring_enter, a power of two 1..=32768. The ring is
    /// fixed memory per worker, ~100 B per entry (SQE, two CQEs, index): 1024 entries ≈ 100 KB
    /// per worker, and one io_uring_enter per 1024 sends already makes the syscall's share
    /// negligible next to the sends themselves.
    #[arg(long, env = "C1M_URING_ENTRIES")]
    pub uring_entries: Option<u32>,
    /// io_uring_setup flags of the send ring: plain (none), coop (SINGLE_ISSUER|COOP_TASKRUN),
    /// defer (SINGLE_ISSUER|DEFER_TASKRUN).
    #[arg(long, env = "C1M_URING_SETUP", value_enum)]
    pub uring_setup: Option<UringSetup>,
    // ---- channel namespaces ----
    /// Options for one channel namespace, NAME:key=value (repeatable, or comma-separated). The
    /// namespace of a channel is its name up to the first `:` (`chat:room1` is in `chat`);
    /// names are [A-Za-z0-9_-]. Keys: history_size, history_age, history_max_bytes (per
    /// channel), presence, join_leave, client_publish (WebSocket client publish, else
    /// --ws-client-publish), auth_required (subscribing needs a valid token even when --auth
    /// lets anonymous subscribers in), max_subscribers (per channel per node, split among the
    /// workers; more get 503 + Retry-After, WebSocket close 1013, counted as
    /// refused.max_subscribers). Unset keys inherit the global value; the TOML file takes the same keys in [namespaces.NAME]
    /// tables, and the flags apply on top of them. Applied live on SIGHUP.
    #[arg(
        long = "namespace",
        env = "C1M_NAMESPACE",
        value_name = "NAME:KEY=VALUE",
        value_delimiter = ','
    )]
    pub namespaces: Vec<NamespaceFlag>,
}

/// The default of configuration key `key` as `--help` shows it: the value in
/// [`Config::default`] as the TOML file and the flag spell it, or for a key that is unset by
/// default what the server does then ([`Config::unset_meaning`]). `None` for arguments that are
/// not configuration keys (`--config`, `--print-config`, ...).
fn help_default(key: &str) -> Option<String> {
    let defaults = Config::default();
    // JSON keeps the unset keys (as null), so it tells keys from other arguments.
    let serde_json::Value::Object(keys) = serde_json::to_value(&defaults).ok()? else {
        return None;
    };
    keys.get(key)?;
    let toml::Value::Table(values) = toml::Value::try_from(&defaults).ok()? else {
        return None;
    };
    Some(match values.get(key) {
        Some(toml::Value::String(text)) => text.clone(),
        Some(toml::Value::Table(t)) if t.is_empty() => defaults.unset_meaning(key),
        Some(value) => value.to_string(),
        None => defaults.unset_meaning(key),
    })
}

/// Ends a key's help with `[default: …]` from [`help_default`].
fn with_help_default(arg: clap::Arg) -> clap::Arg {
    let Some(default) = help_default(arg.get_id().as_str()) else {
        return arg;
    };
    let add = |help: &clap::builder::StyledStr| format!("{help} [default: {default}]");
    let help = arg.get_help().map(add);
    let long_help = arg.get_long_help().map(add);
    let arg = match help {
        Some(help) => arg.help(help),
        None => arg,
    };
    match long_help {
        Some(help) => arg.long_help(help),
        None => arg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Command, FromArgMatches};

    /// The arguments of `c1m serve` that are configuration keys, with their help as shown.
    fn key_helps() -> Vec<(String, String)> {
        let cmd = ServeArgs::augment_args(Command::new("serve"));
        cmd.get_arguments()
            .filter(|a| !["config", "check_config", "print_config"].contains(&a.get_id().as_str()))
            .map(|a| {
                let help = a.get_long_help().or(a.get_help()).unwrap().to_string();
                (a.get_id().to_string(), help)
            })
            .collect()
    }

    /// Every configuration key has a flag and every flag (but the three that steer the command)
    /// is a configuration key, so `help_default` and the layering see the same keys.
    #[test]
    fn every_config_key_has_a_flag() {
        let serde_json::Value::Object(keys) = serde_json::to_value(Config::default()).unwrap()
        else {
            panic!("Config serializes to an object");
        };
        let mut want: Vec<&String> = keys.keys().collect();
        let helps = key_helps();
        let mut have: Vec<&String> = helps.iter().map(|(k, _)| k).collect();
        want.sort();
        have.sort();
        assert_eq!(have, want);
    }

    /// The default each key's help states is `Config::default()`'s: given back as the flag, it
    /// resolves to the default value; for a key unset by default it says what the server does
    /// then. And it is stated once: no help text carries a default of its own.
    #[test]
    fn help_defaults_are_the_config_defaults() {
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        for (key, help) in key_helps() {
            assert_eq!(help.matches("[default: ").count(), 1, "{key}: {help}");
            let shown = help
                .rsplit_once("[default: ")
                .and_then(|(_, rest)| rest.strip_suffix(']'))
                .unwrap_or_else(|| panic!("{key}: help does not end with its default: {help}"));
            match defaults
                .get(&key)
                .filter(|v| v.as_table().is_none_or(|t| !t.is_empty()))
            {
                Some(value) => {
                    let flag = format!("--{}", key.replace('_', "-"));
                    let matches = ServeArgs::augment_args(Command::new("serve"))
                        .try_get_matches_from(["serve", flag.as_str(), shown])
                        .unwrap_or_else(|e| panic!("{key}: {flag} {shown}: {e}"));
                    let args = ServeArgs::from_arg_matches(&matches).unwrap();
                    let resolved = toml::Value::try_from(args.resolve().unwrap()).unwrap();
                    assert_eq!(
                        resolved.get(&key),
                        Some(value),
                        "{key}: help shows {shown:?}"
                    );
                }
                None => assert_eq!(shown, Config::default().unset_meaning(&key), "{key}"),
            }
        }
    }
}
