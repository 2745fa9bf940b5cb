//! `c1m serve` configuration: command-line flags (clap, with `C1M_*` environment variables)
//! over a TOML file (`--config`) over the embedded defaults. [`Config`] is the resolved result;
//! the master hands it to each worker as JSON.

use anyhow::{bail, Context};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Largest `max_payload`: a message crosses the master-worker link in one frame, which must
/// stay well under the link's frame limit (channel names and ids ride along).
pub const MAX_PAYLOAD_LIMIT: usize = crate::ipc::MAX_FRAME / 2;
/// Most channels one subscription may name: the ipc join frame carries them in one list.
pub const MAX_CHANNELS_PER_SUB: usize = crate::ipc::MAX_CHANNELS;

/// Worker count: a number, or `auto` (enough processes for `max_conns` under the fd limit,
/// at least one per CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Workers {
    Auto,
    #[serde(untagged)]
    Count(usize),
}

impl std::str::FromStr for Workers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(Workers::Auto);
        }
        match s.parse::<usize>() {
            Ok(n) if n > 0 => Ok(Workers::Count(n)),
            _ => Err(format!("expected a positive number or `auto`, got {s:?}")),
        }
    }
}

/// A count in TOML: an integer, or a string in the forms `--max-conns` takes (`"250K"`,
/// `"1M"`, `"1_000_000"`), so the file accepts what the flag does.
fn count_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct CountVisitor;
    impl serde::de::Visitor<'_> for CountVisitor {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a count: a whole number or a string such as \"250K\" or \"1M\"")
        }
        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<u64, E> {
            Ok(n)
        }
        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<u64, E> {
            u64::try_from(n).map_err(|_| E::custom(format!("a count cannot be negative: {n}")))
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<u64, E> {
            c1m_proto::count::parse_count(s).map_err(E::custom)
        }
    }
    d.deserialize_any(CountVisitor)
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-11-23T13:40:00.123456Z  INFO worker{n=0 pid=123}: message key=value`
    Text,
    /// One JSON object per line: timestamp, level, fields (message and values), span.
    Json,
}

/// The resolved configuration. Field docs are the TOML keys' docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP listen address (SSE, WebSocket, long-poll, publish, status).
    pub listen: SocketAddr,
    /// Optional raw TCP line-protocol listen address.
    pub tcp_listen: Option<SocketAddr>,
    pub workers: Workers,
    /// Connections the whole server holds before refusing new ones. Each worker enforces its
    /// share plus 5 % (SO_REUSEPORT spreads unevenly), so with several workers the total may
    /// pass it by up to 5 %. A number or the forms the flag takes (`"50K"`, `"1.5M"`).
    #[serde(deserialize_with = "count_or_text")]
    pub max_conns: u64,
    pub max_channels_per_sub: usize,
    /// Messages kept per channel for resume.
    pub history_size: usize,
    #[serde(with = "humantime_serde")]
    pub history_age: Duration,
    /// Bytes of history kept over all channels; past it the oldest message anywhere goes first.
    pub history_max_bytes: usize,
    /// Largest publish body in bytes (larger gets 413).
    pub max_payload: usize,
    /// Bearer key required to publish; without it only loopback peers may publish.
    pub publish_key: Option<String>,
    #[serde(with = "humantime_serde")]
    pub poll_timeout: Duration,
    /// SSE heartbeat comment interval; none = off.
    #[serde(with = "humantime_serde")]
    pub sse_heartbeat: Option<Duration>,
    /// Time a client has to send a complete request head (slowloris guard).
    #[serde(with = "humantime_serde")]
    pub head_timeout: Duration,
    /// Unsent bytes a subscriber may owe before it is disconnected as a slow reader (checked
    /// before each send, so one message or replay chunk may take it past the figure).
    pub max_unsent: usize,
    /// How long shutdown waits for streams to end before exiting anyway.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// listen() backlog (the kernel caps it at net.core.somaxconn).
    pub backlog: i32,
    /// Nice steps the subscriber workers add to their own CPU priority, so the master and the
    /// control worker go first on a saturated box.
    pub worker_nice: i32,
    /// WebSocket Origin allow-list (comma-separated); none = any Origin.
    pub ws_origins: Option<String>,
    /// Largest WebSocket message a client may send (larger: close 1009).
    pub ws_max_message: usize,
    /// Server ping interval for WebSockets; none = off.
    #[serde(with = "humantime_serde")]
    pub ws_ping_interval: Option<Duration>,
    /// A WebSocket that has not answered a ping within this time is closed.
    #[serde(with = "humantime_serde")]
    pub ws_pong_timeout: Duration,
    /// Client data messages are published to the connection's channel.
    pub ws_client_publish: bool,
    /// Without client publish, client data messages close the connection (1003) instead of
    /// being ignored.
    pub ws_close_on_client_data: bool,
    /// Idle time before TCP keepalive probes start on accepted sockets; none (or 0) = off.
    #[serde(with = "humantime_serde")]
    pub tcp_keepalive: Option<Duration>,
    /// Time between unanswered keepalive probes.
    #[serde(with = "humantime_serde")]
    pub tcp_keepalive_interval: Duration,
    /// Unanswered probes before the kernel drops the connection.
    pub tcp_keepalive_count: u32,
    /// TCP_USER_TIMEOUT: how long written data may stay unacknowledged before the kernel
    /// drops the connection; none = keepalive idle + interval × count, 0 = off.
    #[serde(with = "humantime_serde")]
    pub tcp_user_timeout: Option<Duration>,
    /// Connections one source address (IPv6: one /64) may hold over all workers; none = off.
    pub max_conns_per_ip: Option<u32>,
    /// New connections one source address may open per second (a burst of that many, then
    /// one per 1/N s); none = off.
    pub max_new_conns_per_ip_per_sec: Option<u32>,
    /// Apply the per-IP limits to loopback peers too (exempt by default: local proxies and
    /// tests connect from there).
    pub per_ip_limit_loopback: bool,
    // ---- logs ----
    pub log_format: LogFormat,
    /// A level (error, warn, info, debug, trace) or a tracing filter (`info,c1m_server=debug`).
    pub log_level: String,
    // ---- auth, CORS and the admin listener (issue #11) ------------------------------------
    /// Who may subscribe: `off` (anyone), `optional` (a token, when given, must be valid and
    /// grant the channels), `required` (every subscriber shows a token).
    pub auth: AuthMode,
    /// JWT verification key: an HS256/384/512 secret (the file's bytes, ≥ 32), an RSA, EC or
    /// Ed25519 public key in PEM, or a JWKS (`{"keys": [...]}`). Also lets publishers show a
    /// JWT with a `publish` claim.
    pub jwt_key: Option<PathBuf>,
    /// Cookie that may carry the subscriber's token (besides `Authorization: Bearer`,
    /// `?token=` and the WebSocket subprotocol `c1m.token.<JWT>`), honoured only on requests
    /// without an Origin or from an Origin in `cors_origins`; none = cookies not read.
    pub auth_cookie: Option<String>,
    /// Origins allowed to use the server from a browser (comma-separated, or `*`): CORS for
    /// subscribe and publish, and the WebSocket Origin check (one allow-list with
    /// `ws_origins`); none = no CORS headers.
    pub cors_origins: Option<String>,
    /// Separate listener for `/status`, `/metrics`, `/healthz` (and `/pub` with
    /// `admin_publish`); the public listener then answers 404 for them.
    pub admin_listen: Option<SocketAddr>,
    /// With `admin_listen`: publishing moves to the admin listener too.
    pub admin_publish: bool,
    /// With `admin_listen` and `tls_cert`: the admin listener speaks TLS too (default: plain
    /// HTTP, what monitoring and load-balancer health checks on a private address expect).
    pub admin_tls: bool,
    // ---- TLS (issue #11) ----
    /// PEM certificate chain (leaf first) served on the HTTP and raw TCP listeners; with
    /// `tls_key`, turns TLS on for both. Re-read on SIGHUP (new handshakes get the new one).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
    // --- cluster broker (issue #10) ---
    /// Cluster broker URL (`redis://HOST:PORT[/DB]`, `redis+cluster://H1:P1,…`); none = the
    /// in-process hub (one box).
    pub broker: Option<String>,
    // --- cluster broker: TLS trust (issue #10, redis5) ---
    /// PEM CA certificate(s) trusted for a `rediss://` broker; none = the system's roots.
    pub broker_ca: Option<PathBuf>,
    // ---- live binary upgrade (issue #15) ----
    /// How long a live upgrade (SIGUSR2) may take from start to commit before it is aborted
    /// and the old processes serve on.
    #[serde(with = "humantime_serde")]
    pub upgrade_timeout: Duration,
    // ---- I/O path: fan-out sends through io_uring (issue #16) ----
    /// How fan-out sends reach the sockets: `epoll` (one write() per socket, the default),
    /// `auto` (io_uring when the kernel allows it, else epoll with the reason logged), or
    /// `uring` (refuse to start without it).
    pub io: IoMode,
    /// io_uring send ring: sends per `io_uring_enter` (a power of two, 1..=32768).
    pub uring_entries: u32,
    /// io_uring setup flags for the send ring (see docs/CONFIG.md `uring_setup`).
    pub uring_setup: UringSetup,
}

/// `--io`: the fan-out send path. The default is `epoll`: on the loopback benchmarks so far
/// (BENCHMARKS.md, "Fan-out with io_uring") batched io_uring sends were not faster than
/// write() (the cost is the TCP send and the peer's receive, not the syscall), so `uring` and
/// `auto` are opt-in until a measurement shows them paying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// io_uring when the kernel allows it (probed at start), else epoll with the reason logged.
    Auto,
    /// One write() per socket, readiness from epoll.
    #[default]
    Epoll,
    /// Batched io_uring sends; the server refuses to start where io_uring is refused.
    Uring,
}

/// `--uring-setup`: io_uring_setup(2) flags of the send ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UringSetup {
    /// No flags.
    Plain,
    /// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN.
    #[default]
    Coop,
    /// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN.
    Defer,
}

impl UringSetup {
    pub fn ring(self, entries: u32) -> c1m_sys::uring::RingSetup {
        c1m_sys::uring::RingSetup {
            entries,
            single_issuer: self != UringSetup::Plain,
            coop_taskrun: self == UringSetup::Coop,
            defer_taskrun: self == UringSetup::Defer,
        }
    }
}

/// `--auth`: whether subscribers must show a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No token is read (the embedded default: loopback demos keep working).
    #[default]
    Off,
    /// Anonymous subscribers are let in; a token that is shown must be valid and grant the
    /// channels.
    Optional,
    /// Every subscriber shows a valid token granting its channels.
    Required,
}

impl AuthMode {
    /// The value as `--auth` spells it (`required`, not the enum's `Required`).
    pub fn flag_value(self) -> &'static str {
        match self {
            AuthMode::Off => "off",
            AuthMode::Optional => "optional",
            AuthMode::Required => "required",
        }
    }
}

impl Config {
    /// Some per-source-address limit is on (the master then sets up the shared table).
    pub fn per_ip_limits(&self) -> bool {
        self.max_conns_per_ip.is_some() || self.max_new_conns_per_ip_per_sec.is_some()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "0.0.0.0:8080".parse().expect("static address"),
            tcp_listen: None,
            workers: Workers::Auto,
            max_conns: 1_000_000,
            max_channels_per_sub: 16,
            history_size: 100,
            history_age: Duration::from_secs(300),
            history_max_bytes: 128 * 1024 * 1024,
            max_payload: 64 * 1024,
            publish_key: None,
            poll_timeout: Duration::from_secs(30),
            // On by default: a heartbeat every 30 s feeds the 60 s idle timeout common to
            // proxies and load balancers (nginx, ALB) and makes a dead peer's unacknowledged
            // bytes trip TCP_USER_TIMEOUT; 30 s costs one small write per silent stream. A
            // stream sent other bytes within the interval is skipped, so a stream's gap after
            // a message reaches 1.5 intervals (45 s; docs/PROTOCOL.md: the bounds).
            sse_heartbeat: Some(Duration::from_secs(30)),
            head_timeout: Duration::from_secs(10),
            max_unsent: 1024 * 1024,
            grace: Duration::from_secs(5),
            backlog: 65535,
            worker_nice: 0,
            ws_origins: None,
            ws_max_message: 64 * 1024,
            // Same 30 s as the SSE heartbeat (proxies' idle timeouts); a pong has 10 s, far
            // above any sane round trip, so only a dead or stuck peer misses it.
            ws_ping_interval: Some(Duration::from_secs(30)),
            ws_pong_timeout: Duration::from_secs(10),
            ws_client_publish: false,
            ws_close_on_client_data: false,
            // A peer that vanished (power loss, NAT dropped the mapping) sends no FIN; without
            // keepalive its socket is held forever. 60 s idle + 6 × 10 s probes = 2 min. The
            // ACKs of SSE heartbeats and WebSocket pings restart the idle clock, so probes only
            // go to quiet connections (TCP line protocol, long-poll, idle keep-alive): at most
            // 1M / 60 s ≈ 17K probes/s, each a bare ACK.
            tcp_keepalive: Some(Duration::from_secs(60)),
            tcp_keepalive_interval: Duration::from_secs(10),
            tcp_keepalive_count: 6,
            tcp_user_timeout: None,
            max_conns_per_ip: None,
            max_new_conns_per_ip_per_sec: None,
            per_ip_limit_loopback: false,
            log_format: LogFormat::Text,
            log_level: "info".to_string(),
            auth: AuthMode::Off,
            jwt_key: None,
            auth_cookie: None,
            cors_origins: None,
            admin_listen: None,
            admin_publish: false,
            admin_tls: false,
            tls_cert: None,
            tls_key: None,
            broker: None,
            broker_ca: None,
            upgrade_timeout: Duration::from_secs(30),
            io: IoMode::Epoll,
            uring_entries: 1024,
            uring_setup: UringSetup::Coop,
        }
    }
}

/// `c1m serve` flags. Every flag also reads `C1M_<NAME>` from the environment.
#[derive(Args, Debug, Default)]
#[command(after_help = "Examples:
  c1m serve                                   # :8080, workers auto for 1M connections
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
    /// HTTP listen address [default: 0.0.0.0:8080].
    #[arg(long, env = "C1M_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Raw TCP line-protocol listen address [default: off].
    #[arg(long, env = "C1M_TCP_LISTEN")]
    pub tcp_listen: Option<SocketAddr>,
    /// Worker processes: N or `auto` [default: auto].
    #[arg(long, env = "C1M_WORKERS")]
    pub workers: Option<Workers>,
    /// Connections held before new ones are refused (1000000, 1M, 250K); each worker takes its share + 5 % [default: 1000000].
    #[arg(long, env = "C1M_MAX_CONNS", value_parser = c1m_proto::count::parse_count)]
    pub max_conns: Option<u64>,
    /// Channels one subscription may name [default: 16].
    #[arg(long, env = "C1M_MAX_CHANNELS_PER_SUB")]
    pub max_channels_per_sub: Option<usize>,
    /// Messages kept per channel for resume [default: 100].
    #[arg(long, env = "C1M_HISTORY_SIZE")]
    pub history_size: Option<usize>,
    /// Longest a message stays in history [default: 5m].
    #[arg(long, env = "C1M_HISTORY_AGE", value_parser = humantime::parse_duration)]
    pub history_age: Option<Duration>,
    /// Bytes of history over all channels, each channel's and message's own cost included; the oldest message anywhere is dropped first [default: 134217728].
    #[arg(long, env = "C1M_HISTORY_MAX_BYTES")]
    pub history_max_bytes: Option<usize>,
    /// Largest publish body in bytes (after chunked decoding; larger → 413), at most 8388608 [default: 65536].
    #[arg(long, env = "C1M_MAX_PAYLOAD")]
    pub max_payload: Option<usize>,
    /// Bearer key required to publish (HTTP and WebSocket client publish) [default: none,
    /// loopback peers only].
    #[arg(long, env = "C1M_PUBLISH_KEY", hide_env_values = true)]
    pub publish_key: Option<String>,
    /// Long-poll wait before an empty 204 [default: 30s].
    #[arg(long, env = "C1M_POLL_TIMEOUT", value_parser = humantime::parse_duration)]
    pub poll_timeout: Option<Duration>,
    /// SSE heartbeat comment interval, e.g. 15s; 0 = off [default: 30s].
    #[arg(long, env = "C1M_SSE_HEARTBEAT", value_parser = humantime::parse_duration)]
    pub sse_heartbeat: Option<Duration>,
    /// Time allowed to send a complete request head [default: 10s].
    #[arg(long, env = "C1M_HEAD_TIMEOUT", value_parser = humantime::parse_duration)]
    pub head_timeout: Option<Duration>,
    /// Unsent bytes per subscriber before it is disconnected as a slow reader (WebSocket: close
    /// 4008) [default: 1048576].
    #[arg(long, env = "C1M_MAX_UNSENT")]
    pub max_unsent: Option<usize>,
    /// On SIGTERM/SIGINT, how long clients get to read what is queued for them and their
    /// goodbye before they are closed [default: 5s].
    #[arg(long, env = "C1M_GRACE", value_parser = humantime::parse_duration)]
    pub grace: Option<Duration>,
    /// listen() backlog [default: 65535, capped by net.core.somaxconn].
    #[arg(long, env = "C1M_BACKLOG")]
    pub backlog: Option<i32>,
    /// Lower the subscriber workers' CPU priority by N nice steps (0-19), so that on a
    /// saturated box the master and the control worker (--admin-listen: publish acks, /status)
    /// run before fan-out work [default: 0].
    #[arg(long, env = "C1M_WORKER_NICE", value_parser = clap::value_parser!(i32).range(0..=19))]
    pub worker_nice: Option<i32>,
    /// WebSocket Origins allowed, comma-separated (others get 403); the same list as
    /// --cors-origins, which sets it too [default: any].
    #[arg(long, env = "C1M_WS_ORIGINS")]
    pub ws_origins: Option<String>,
    /// Largest WebSocket message from a client in bytes; larger closes with 1009 [default: 65536].
    #[arg(long, env = "C1M_WS_MAX_MESSAGE")]
    pub ws_max_message: Option<usize>,
    /// WebSocket ping interval, e.g. 15s; 0 = off [default: 30s].
    #[arg(long, env = "C1M_WS_PING_INTERVAL", value_parser = humantime::parse_duration)]
    pub ws_ping_interval: Option<Duration>,
    /// Close a WebSocket whose pong is this late [default: 10s; must be below the ping interval].
    #[arg(long, env = "C1M_WS_PONG_TIMEOUT", value_parser = humantime::parse_duration)]
    pub ws_pong_timeout: Option<Duration>,
    /// Publish WebSocket client messages to the connection's channel, under the publish rule:
    /// with --publish-key the upgrade must carry `Authorization: Bearer KEY` or subprotocol
    /// `c1m.publish-key.KEY`, else loopback peers only; others are closed with 1008 [default:
    /// ignored, counted].
    #[arg(long, env = "C1M_WS_CLIENT_PUBLISH", num_args = 0..=1, default_missing_value = "true")]
    pub ws_client_publish: Option<bool>,
    /// Close (1003) a WebSocket that sends data when client publish is off [default: ignore].
    #[arg(long, env = "C1M_WS_CLOSE_ON_CLIENT_DATA", num_args = 0..=1, default_missing_value = "true")]
    pub ws_close_on_client_data: Option<bool>,
    /// Idle time before TCP keepalive probes start on client sockets; 0 = off [default: 60s].
    #[arg(long, env = "C1M_TCP_KEEPALIVE", value_parser = humantime::parse_duration)]
    pub tcp_keepalive: Option<Duration>,
    /// Time between unanswered keepalive probes [default: 10s].
    #[arg(long, env = "C1M_TCP_KEEPALIVE_INTERVAL", value_parser = humantime::parse_duration)]
    pub tcp_keepalive_interval: Option<Duration>,
    /// Unanswered keepalive probes before a client is dropped as dead [default: 6].
    #[arg(long, env = "C1M_TCP_KEEPALIVE_COUNT")]
    pub tcp_keepalive_count: Option<u32>,
    /// Longest written data may stay unacknowledged before a client is dropped as dead;
    /// 0 = off [default: keepalive idle + interval x count, 2m].
    #[arg(long, env = "C1M_TCP_USER_TIMEOUT", value_parser = humantime::parse_duration)]
    pub tcp_user_timeout: Option<Duration>,
    /// Connections one source address (IPv6: one /64) may hold over all workers; more get 429
    /// with Retry-After (raw TCP: ERR), counted as refused.per_ip_conns. Loopback is exempt
    /// unless --per-ip-limit-loopback [default: off].
    #[arg(long, env = "C1M_MAX_CONNS_PER_IP")]
    pub max_conns_per_ip: Option<u32>,
    /// New connections one source address may open per second: a burst of N, then one per 1/N
    /// s; more get 429 with Retry-After (raw TCP: ERR), counted as refused.per_ip_rate
    /// [default: off].
    #[arg(long, env = "C1M_MAX_NEW_CONNS_PER_IP_PER_SEC")]
    pub max_new_conns_per_ip_per_sec: Option<u32>,
    /// Apply the per-IP limits to loopback peers too [default: loopback exempt].
    #[arg(long, env = "C1M_PER_IP_LIMIT_LOOPBACK", num_args = 0..=1, default_missing_value = "true")]
    pub per_ip_limit_loopback: Option<bool>,
    // ---- logs ----
    /// Log line format on stderr: text or json (one object per line; the start-up line on
    /// stdout is then a JSON event too) [default: text].
    #[arg(long, env = "C1M_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// `info,c1m_server::worker=debug`. At info: one line per lifecycle event, never one per
    /// message or connection; refusals are summed in one warning per 10 s [default: info].
    #[arg(long, env = "C1M_LOG_LEVEL")]
    pub log_level: Option<String>,
    // ---- auth, CORS and the admin listener (issue #11) ------------------------------------
    /// Subscriber auth: off, optional (a token that is shown must be valid) or required. No
    /// or bad token: 401 (refused.unauthorized); channel not in the token's `channels`: 403
    /// (refused.forbidden); a held stream whose token expires ends with SSE `event: expired`
    /// or WebSocket close 4001 (refused.expired) [default: off].
    #[arg(long, env = "C1M_AUTH", value_enum)]
    pub auth: Option<AuthMode>,
    /// JWT key file: an HMAC secret (HS256/384/512, at least 32 bytes), an RSA/EC/Ed25519
    /// public key in PEM, or a JWKS; tokens need `exp`, and `channels` (subscribe) or
    /// `publish` (publish) with `*` segment wildcards. Re-read on SIGHUP [default: none].
    #[arg(long, env = "C1M_JWT_KEY")]
    pub jwt_key: Option<PathBuf>,
    /// Cookie that may carry the subscriber's JWT (also read: Authorization: Bearer,
    /// ?token=, WebSocket subprotocol c1m.token.JWT). Honoured only on requests without an
    /// Origin or from an Origin listed in --cors-origins (others: 403), so another site's page
    /// cannot subscribe with the visitor's cookie; refused with --cors-origins '*' [default:
    /// none].
    #[arg(long, env = "C1M_AUTH_COOKIE")]
    pub auth_cookie: Option<String>,
    /// Browser origins allowed (comma-separated, or `*`): CORS headers and OPTIONS preflight
    /// for /sub and /pub, and the WebSocket Origin check (shares the list with --ws-origins).
    /// A list allows credentials (cookies); `*` does not [default: none].
    #[arg(long, env = "C1M_CORS_ORIGINS")]
    pub cors_origins: Option<String>,
    /// Admin listener (e.g. 127.0.0.1:9180) for /status, /metrics, /healthz; the public
    /// listener then answers 404 for them [default: none, served on --listen].
    #[arg(long, env = "C1M_ADMIN_LISTEN")]
    pub admin_listen: Option<SocketAddr>,
    /// With --admin-listen: /pub is served only on the admin listener (public: 404)
    /// [default: /pub stays on --listen].
    #[arg(long, env = "C1M_ADMIN_PUBLISH", num_args = 0..=1, default_missing_value = "true")]
    pub admin_publish: Option<bool>,
    /// With --admin-listen and --tls-cert: the admin listener speaks TLS too (https://)
    /// [default: plain HTTP, for scrapers and health checks on a private address].
    #[arg(long, env = "C1M_ADMIN_TLS", num_args = 0..=1, default_missing_value = "true")]
    pub admin_tls: Option<bool>,
    // ---- TLS (issue #11) ----
    /// PEM certificate chain (leaf first): TLS (rustls; ALPN http/1.1 on the HTTP port) on the
    /// HTTP and raw TCP listeners (the admin listener stays plain HTTP unless --admin-tls);
    /// needs --tls-key. SIGHUP re-reads both files: new handshakes
    /// get the new certificate, established connections stay. A plaintext client on a TLS port
    /// gets 400 (raw TCP: ERR) and is closed; a handshake not done within --head-timeout is
    /// closed; /status `tls` counts both [default: off].
    #[arg(long, env = "C1M_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert (PKCS#8, PKCS#1 or SEC1) [default: off].
    #[arg(long, env = "C1M_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    // --- cluster broker (issue #10) ---
    /// Share ids, history and delivery with other `c1m serve` nodes through Redis:
    /// redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss://… for TLS (`redis://:PASSWORD@…`
    /// for `requirepass`, `USER:PASSWORD` for an ACL user; the password is never printed);
    /// for Redis Cluster (7+) redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,… (seed
    /// nodes; rediss+cluster:// for TLS), where a multi-channel subscription cannot resume from
    /// a last id (400). Publishes get 503 + Retry-After while Redis is unreachable; subscribers stay connected
    /// and get what they missed (or a gap event) when it is back. A password or certificate
    /// Redis refuses at start is an error (exit 2); refused later, it is logged and counted
    /// (`broker.auth_failures`) while the node retries [default: none, the in-process hub].
    #[arg(long, env = "C1M_BROKER")]
    pub broker: Option<String>,
    // --- cluster broker: TLS trust (issue #10, redis5) ---
    /// PEM file of the CA(s) that signed the rediss:// broker's certificate (a private CA);
    /// both Redis connections check the certificate against it and the host name in the URL
    /// [default: the system's CA roots].
    #[arg(long, env = "C1M_BROKER_CA")]
    pub broker_ca: Option<PathBuf>,
    // ---- live binary upgrade (issue #15) ----
    /// Live upgrade (`kill -USR2 MASTER` or `c1m upgrade MASTER`): the master starts the
    /// binary now at its path, hands it the listeners, every connection and the hub, and
    /// exits; clients notice nothing. This bounds the whole hand-over: past it the upgrade is
    /// aborted, counted in c1m_upgrades_failed_total, and the old processes serve on (see
    /// docs/upgrade.md) [default: 30s].
    #[arg(long, env = "C1M_UPGRADE_TIMEOUT", value_parser = humantime::parse_duration)]
    pub upgrade_timeout: Option<Duration>,
    // ---- I/O path: fan-out sends through io_uring (issue #16) ----
    /// Fan-out send path: `auto` probes io_uring at start and uses it when the kernel allows it
    /// (else epoll + one write() per socket, with the reason logged); `epoll` never uses
    /// io_uring; `uring` refuses to start without it. Readiness (accept, reads, EPOLLOUT) is
    /// epoll either way. /status `io` and /metrics `c1m_worker_io_uring` say which path each
    /// worker uses. Default epoll: io_uring has not measured faster here (BENCHMARKS.md)
    /// [default: epoll].
    #[arg(long, env = "C1M_IO", value_enum)]
    pub io: Option<IoMode>,
    /// io_uring send ring size: sends per io_uring_enter, a power of two 1..=32768. The ring is
    /// fixed memory per worker, ~100 B per entry (SQE, two CQEs, index): 1024 entries ≈ 100 KB
    /// per worker, and one io_uring_enter per 1024 sends already makes the syscall's share
    /// negligible next to the sends themselves [default: 1024].
    #[arg(long, env = "C1M_URING_ENTRIES")]
    pub uring_entries: Option<u32>,
    /// io_uring_setup flags of the send ring: plain (none), coop (SINGLE_ISSUER|COOP_TASKRUN),
    /// defer (SINGLE_ISSUER|DEFER_TASKRUN) [default: coop].
    #[arg(long, env = "C1M_URING_SETUP", value_enum)]
    pub uring_setup: Option<UringSetup>,
}

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
            publish_key,
            poll_timeout,
            sse_heartbeat,
            head_timeout,
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
            tls_cert,
            tls_key,
            broker,
            broker_ca
        );
        // auth, CORS and the admin listener (issue #11)
        overlay!(
            auth,
            jwt_key,
            auth_cookie,
            cors_origins,
            admin_listen,
            admin_publish,
            admin_tls
        );
        // live binary upgrade (issue #15)
        overlay!(upgrade_timeout);
        // I/O path (issue #16)
        overlay!(io, uring_entries, uring_setup);
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

    /// TCP_USER_TIMEOUT to set: explicit (0 = off), else the keepalive's own detection time
    /// so the two agree (with keepalive off: none).
    pub fn effective_user_timeout(&self) -> Option<Duration> {
        match self.tcp_user_timeout {
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
            None => self
                .tcp_keepalive
                .map(|idle| idle + self.tcp_keepalive_interval * self.tcp_keepalive_count),
        }
    }

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
        if self.max_conns == 0 {
            problem!("--max-conns must be at least 1");
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

    /// The origin allow-list shared by CORS and the WebSocket Origin check: `--cors-origins`,
    /// else `--ws-origins` (the older, WebSocket-only name of the same list).
    pub fn origin_list(&self) -> Option<&str> {
        self.cors_origins.as_deref().or(self.ws_origins.as_deref())
    }

    /// auth, CORS and the admin listener (issue #11). The key file itself is read by
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
}

impl Config {
    /// TLS needs both files, readable and matching (checked at start: exit 2; and on SIGHUP:
    /// the reload is refused and the running certificate stays).
    fn validate_tls(&self) -> anyhow::Result<()> {
        match (&self.tls_cert, &self.tls_key) {
            (None, None) => Ok(()),
            (Some(cert), Some(key)) => crate::tls::load(cert, key).map(|_| ()),
            _ => bail!("--tls-cert and --tls-key go together: give both or neither"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// dist/c1m.toml (the packaged config) shows defaults as `# key = value` and examples of
    /// features that are off as `#   key = value`: both must stay true to `Config::default()`.
    #[test]
    fn packaged_config_shows_the_real_defaults() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/c1m.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file: Config = toml::from_str(&text).expect("dist/c1m.toml parses");
        let defaults = toml::Value::try_from(Config::default()).unwrap();
        let set = toml::Value::try_from(&file).unwrap();
        let (mut shown, mut examples) = (0, 0);
        for line in text.lines() {
            let Some(rest) = line.strip_prefix('#') else {
                // A key the file sets must keep the default too: the file documents them.
                if let Some((key, _)) = key_value(line) {
                    assert_eq!(set.get(key), defaults.get(key), "{key} set in {line:?}");
                }
                continue;
            };
            let example = rest.starts_with("   ");
            let Some((key, value)) = key_value(rest.trim_start()) else {
                continue;
            };
            if !(rest.starts_with(' ') && (example || !rest.starts_with("  "))) {
                continue;
            }
            let one: Config = toml::from_str(&format!("{key} = {value}"))
                .unwrap_or_else(|e| panic!("{line:?} is not a valid key and value: {e}"));
            let one = toml::Value::try_from(one).unwrap();
            if example {
                examples += 1;
                assert!(
                    defaults.get(key).is_none(),
                    "{line:?} is shown as an example of an off feature, but {key} defaults to {:?}",
                    defaults.get(key)
                );
                assert!(one.get(key).is_some(), "{line:?}");
            } else {
                shown += 1;
                assert_eq!(
                    one.get(key),
                    defaults.get(key),
                    "{line:?} does not show the built-in default"
                );
            }
        }
        assert!(
            shown >= 5 && examples >= 3,
            "{shown} defaults, {examples} examples"
        );
    }

    /// `key = value` where key is a configuration key (lower case and underscores).
    fn key_value(line: &str) -> Option<(&str, &str)> {
        let (key, value) = line.split_once(" = ")?;
        let is_key = !key.is_empty() && key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        is_key.then_some((key, value.trim()))
    }

    #[test]
    fn max_conns_in_toml_takes_the_forms_the_flag_takes() {
        for (text, want) in [
            ("max_conns = 50000", 50_000),
            ("max_conns = \"50K\"", 50_000),
            ("max_conns = \"1.5M\"", 1_500_000),
            ("max_conns = \"1_000_000\"", 1_000_000),
        ] {
            let c: Config = toml::from_str(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(c.max_conns, want, "{text}");
        }
        for bad in ["max_conns = \"lots\"", "max_conns = -1", "max_conns = 1.5"] {
            let err = toml::from_str::<Config>(bad).unwrap_err().to_string();
            assert!(err.contains("count"), "{bad}: {err}");
        }
        // The JSON hand-over to the workers still round-trips.
        let c: Config = toml::from_str("max_conns = \"50K\"").unwrap();
        let back: Config = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back.max_conns, 50_000);
    }

    #[test]
    fn unknown_keys_and_bad_values_fail() {
        assert!(toml::from_str::<Config>("lisen = \"x\"").is_err());
        assert!("0".parse::<Workers>().is_err());
        assert_eq!("auto".parse::<Workers>(), Ok(Workers::Auto));
    }

    #[test]
    fn item11_limits_that_contradict_each_other_are_refused_at_start() {
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
