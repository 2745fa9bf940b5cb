//! The configuration model: [`Config`], the resolved settings of `c1m serve`, its value types,
//! and its one [`Default`] -- the single place a default is written. `--help`, `--print-config`,
//! docs/CONFIG.md and dist/c1m.toml all show (or are tested against) this `Default`, so a
//! default changed here changes everywhere. The master hands `Config` to each worker as JSON.
//!
//! Nothing here parses flags, reads files or checks limits: that is `args`, `layering` and
//! `checks`, which keeps this module free of the server's other modules.

pub use super::namespaces::NamespaceOptions;
pub use crate::log::LogFormat;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Largest server API request body in bytes (larger gets 413).
    pub api_max_body: usize,
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
    /// How long a served keep-alive connection may wait, idle, for its next request (a
    /// publisher between publishes); once that request starts, `head_timeout` bounds its head.
    #[serde(with = "humantime_serde")]
    pub keepalive_timeout: Duration,
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
    // ---- auth, CORS and the admin listener ----
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
    /// HTTP/2 off: ALPN offers http/1.1 only and h2c prior knowledge is not recognised.
    pub no_http2: bool,
    // ---- TLS ----
    /// PEM certificate chain (leaf first) served on the HTTP and raw TCP listeners; with
    /// `tls_key`, turns TLS on for both. Re-read on SIGHUP (new handshakes get the new one).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 or SEC1).
    pub tls_key: Option<PathBuf>,
    // ---- presence ----
    /// Keep the member set (user, connection, token `info`) of each channel: held streams
    /// (SSE, WebSocket, TCP) report joining and leaving; `GET /channels/{ch}/presence` lists
    /// them.
    pub presence: bool,
    /// Send `join` / `leave` events to a channel's subscribers when a member comes or goes
    /// (needs `presence`).
    pub join_leave: bool,
    /// Members kept per channel; a join past it is left out of presence (counted), the
    /// subscription itself still works.
    pub presence_max_members: u32,
    /// Bytes of member sets over all channels (names, users, infos and per-entry cost); a
    /// join past it is left out of presence (counted).
    pub presence_max_bytes: usize,
    // ---- cluster broker ----
    /// Cluster broker URL (`redis://HOST:PORT[/DB]`, `redis+cluster://H1:P1,…`); none = the
    /// in-process hub (one box).
    pub broker: Option<String>,
    /// PEM CA certificate(s) trusted for a `rediss://` broker; none = the system's roots.
    pub broker_ca: Option<PathBuf>,
    // ---- lifecycle webhooks ----
    /// Where lifecycle events are POSTed (http:// or https://); none = no webhooks.
    pub webhook_url: Option<String>,
    /// File with the HMAC-SHA256 secret that signs each POST.
    pub webhook_secret_file: Option<PathBuf>,
    /// PEM CA certificate(s) trusted for an https:// webhook URL; none = the system's roots.
    pub webhook_ca_file: Option<PathBuf>,
    /// Spool directory: events wait here until the backend acknowledged them.
    pub webhook_spool: Option<PathBuf>,
    /// Largest spool in bytes; past it the oldest events are dropped (counted and logged).
    pub webhook_spool_max_bytes: u64,
    /// How long a channel stays empty before `channel_vacated`.
    #[serde(with = "humantime_serde")]
    pub webhook_vacate_delay: Duration,
    // ---- backend proxies ----
    /// Asked before a subscriber is let in (http://); none = no connect proxy.
    pub proxy_connect_url: Option<String>,
    /// Asked per channel of a subscribe, where the namespace's `proxy_subscribe` is on.
    pub proxy_subscribe_url: Option<String>,
    /// Asked per WebSocket client publish, where the namespace's `proxy_publish` is on.
    pub proxy_publish_url: Option<String>,
    /// Asked when an expiring held stream reaches its expiry.
    pub proxy_refresh_url: Option<String>,
    /// Longest a proxy call may take (queueing in the worker included).
    #[serde(with = "humantime_serde")]
    pub proxy_timeout: Duration,
    /// Proxy calls one worker may have waiting for an answer; past it, refused at once.
    pub proxy_max_in_flight: u32,
    /// Request headers forwarded to the connect and subscribe proxies (comma separated).
    pub proxy_headers: Option<String>,
    // ---- live binary upgrade ----
    /// How long a live upgrade (SIGUSR2) may take from start to commit before it is aborted
    /// and the old processes serve on.
    #[serde(with = "humantime_serde")]
    pub upgrade_timeout: Duration,
    // ---- I/O path: fan-out sends through io_uring ----
    /// How fan-out sends reach the sockets: `epoll` (one write() per socket, the default),
    /// `auto` (io_uring when the kernel allows it, else epoll with the reason logged), or
    /// `uring` (refuse to start without it).
    pub io: IoMode,
    /// io_uring send ring: sends per `io_uring_enter` (a power of two, 1..=32768).
    pub uring_entries: u32,
    /// io_uring setup flags for the send ring (see docs/CONFIG.md `uring_setup`).
    pub uring_setup: UringSetup,
    // ---- channel namespaces ----
    /// Options per channel-name prefix (`[namespaces.chat]` applies to `chat:*`): see
    /// `namespaces` and docs/CONFIG.md, Channel namespaces.
    pub namespaces: BTreeMap<String, NamespaceOptions>,
}

/// `--io`: the fan-out send path. The default is `epoll`: on the loopback benchmarks so far
/// (BENCHMARKS.md, "Fan-out with io_uring") batched io_uring sends were not faster than
/// write() (the cost is the TCP send and the peer's receive, not the syscall), so `uring` and
/// `auto` are opt-in until a measurement shows them paying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum IoMode {
    /// io_uring when the kernel allows it (probed at start), else epoll with the reason logged.
    Auto,
    /// One write() per socket, readiness from epoll.
    Epoll,
    /// Batched io_uring sends; the server refuses to start where io_uring is refused.
    Uring,
}

/// `--uring-setup`: io_uring_setup(2) flags of the send ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum UringSetup {
    /// No flags.
    Plain,
    /// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// No token is read (the embedded default: loopback demos keep working).
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
            api_max_body: crate::api::DEFAULT_MAX_BODY,
            publish_key: None,
            poll_timeout: Duration::from_secs(30),
            // On by default: a heartbeat every 30 s feeds the 60 s idle timeout common to
            // proxies and load balancers (nginx, ALB) and makes a dead peer's unacknowledged
            // bytes trip TCP_USER_TIMEOUT; 30 s costs one small write per silent stream. A
            // stream sent other bytes within the interval is skipped, so a stream's gap after
            // a message reaches 1.5 intervals (45 s; docs/PROTOCOL.md: the bounds).
            sse_heartbeat: Some(Duration::from_secs(30)),
            head_timeout: Duration::from_secs(10),
            // An idle publisher keeps its connection (and its place on the control worker)
            // between publishes a few tens of seconds apart; proxies idle out at 60 s too.
            keepalive_timeout: Duration::from_secs(60),
            max_unsent: 1024 * 1024,
            grace: Duration::from_secs(5),
            backlog: 65535,
            worker_nice: 10,
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
            no_http2: false,
            tls_cert: None,
            tls_key: None,
            presence: false,
            join_leave: false,
            // The presence answer lists every member: 10,000 members of ~100 bytes make a
            // ~1 MB answer and cost each join/leave event a fan-out to 10,000 subscribers,
            // the size where a room list is still useful. Larger channels want counts
            // (`presence_stats`), not lists.
            presence_max_members: 10_000,
            presence_max_bytes: 64 * 1024 * 1024,
            broker: None,
            broker_ca: None,
            webhook_url: None,
            webhook_secret_file: None,
            webhook_ca_file: None,
            webhook_spool: None,
            webhook_spool_max_bytes: 64 * 1024 * 1024,
            webhook_vacate_delay: Duration::from_secs(5),
            proxy_connect_url: None,
            proxy_subscribe_url: None,
            proxy_publish_url: None,
            proxy_refresh_url: None,
            proxy_timeout: Duration::from_secs(2),
            proxy_max_in_flight: 256,
            proxy_headers: None,
            upgrade_timeout: Duration::from_secs(30),
            io: IoMode::Epoll,
            uring_entries: 1024,
            uring_setup: UringSetup::Coop,
            namespaces: BTreeMap::new(),
        }
    }
}

impl Config {
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

    /// The origin allow-list shared by CORS and the WebSocket Origin check: `--cors-origins`,
    /// else `--ws-origins` (the older, WebSocket-only name of the same list).
    pub fn origin_list(&self) -> Option<&str> {
        self.cors_origins.as_deref().or(self.ws_origins.as_deref())
    }

    /// What the server does for a key that is not set: usually nothing (off), but some keys
    /// fall back to another value. `--help` states it as the key's default and
    /// `--print-config` beside an unset key, so the two say the same.
    pub fn unset_meaning(&self, key: &str) -> String {
        match key {
            "tcp_user_timeout" => match self.effective_user_timeout() {
                Some(d) => format!(
                    "keepalive idle + interval x count: {}",
                    humantime::format_duration(d)
                ),
                None => "off: keepalive is off".to_string(),
            },
            "ws_origins" if self.cors_origins.is_some() => "the cors_origins list".to_string(),
            "ws_origins" => "any origin".to_string(),
            "publish_key" => "none: loopback peers only".to_string(),
            "admin_listen" => "none: served on listen".to_string(),
            "broker" => "none: the in-process hub".to_string(),
            "broker_ca" => "the system's CA roots".to_string(),
            "webhook_secret_file" => "none: POSTs are not signed".to_string(),
            "proxy_headers" => "none: no request header is forwarded".to_string(),
            "webhook_ca_file" => "the system's CA roots".to_string(),
            "namespaces" => "none: every channel uses the global options".to_string(),
            _ => "off".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
