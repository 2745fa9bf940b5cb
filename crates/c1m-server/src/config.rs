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
    /// pass it by up to 5 %.
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
    // --- cluster broker (issue #10) ---
    /// Cluster broker URL (`redis://HOST:PORT[/DB]`); none = the in-process hub (one box).
    pub broker: Option<String>,
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
            // On by default: a heartbeat every 30 s keeps the stream under the 60 s idle
            // timeout common to proxies and load balancers (nginx, ALB) and makes a dead peer's
            // unacknowledged bytes trip TCP_USER_TIMEOUT; 30 s costs one small write per stream.
            sse_heartbeat: Some(Duration::from_secs(30)),
            head_timeout: Duration::from_secs(10),
            max_unsent: 1024 * 1024,
            grace: Duration::from_secs(5),
            backlog: 65535,
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
            broker: None,
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
    /// Bytes of history over all channels; the oldest message anywhere is dropped first [default: 134217728].
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
    /// WebSocket Origins allowed, comma-separated (others get 403) [default: any].
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
    // --- cluster broker (issue #10) ---
    /// Share ids, history and delivery with other `c1m serve` nodes through Redis:
    /// redis://HOST:PORT[/DB]. Publishes get 503 + Retry-After while Redis is unreachable;
    /// subscribers stay connected and get what they missed (or a gap event) when it is back
    /// [default: none, the in-process hub].
    #[arg(long, env = "C1M_BROKER")]
    pub broker: Option<String>,
}

impl ServeArgs {
    /// Defaults, then the TOML file, then flags/environment.
    pub fn resolve(&self) -> anyhow::Result<Config> {
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
            broker
        );
        c.normalize_off_values();
        c.validate()?;
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

    /// The checks every configuration passes, at start and at each reload (SIGHUP).
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if let Some(url) = &self.broker {
            crate::broker::redis::RedisTarget::parse(url)?;
        }
        if self.max_conns == 0 {
            bail!("--max-conns must be at least 1");
        }
        if self.max_channels_per_sub == 0 {
            bail!("--max-channels-per-sub must be at least 1");
        }
        if self.history_size == 0 {
            bail!("--history-size must be at least 1 (resume needs history)");
        }
        if self.max_channels_per_sub > MAX_CHANNELS_PER_SUB {
            bail!("--max-channels-per-sub must be at most {MAX_CHANNELS_PER_SUB}");
        }
        if self.max_payload > MAX_PAYLOAD_LIMIT {
            bail!(
                "--max-payload {} is over the largest supported payload ({MAX_PAYLOAD_LIMIT} bytes): \
                 every message crosses the master-worker link in one frame",
                self.max_payload
            );
        }
        if self.history_max_bytes < self.max_payload + crate::hub::STORED_OVERHEAD {
            bail!(
                "--history-max-bytes {} cannot hold one message of --max-payload {}; \
                 raise it to at least {}",
                self.history_max_bytes,
                self.max_payload,
                self.max_payload + crate::hub::STORED_OVERHEAD
            );
        }
        if self
            .sse_heartbeat
            .is_some_and(|d| d < Duration::from_millis(100))
        {
            bail!("--sse-heartbeat must be at least 100ms");
        }
        if let Some(every) = self.ws_ping_interval {
            if every < Duration::from_millis(100) || self.ws_pong_timeout >= every {
                bail!(
                    "--ws-ping-interval must be at least 100ms and longer than --ws-pong-timeout"
                );
            }
        }
        if self.ws_max_message == 0 {
            bail!("--ws-max-message must be at least 1");
        }
        if self.publish_key.as_deref() == Some("") {
            bail!("--publish-key must not be empty");
        }
        // The kernel takes these in whole seconds (TCP_KEEPIDLE ≤ 32767, TCP_KEEPCNT ≤ 127).
        let secs = |d: Duration| (1..=32767).contains(&d.as_secs());
        if self.tcp_keepalive.is_some_and(|d| !secs(d)) || !secs(self.tcp_keepalive_interval) {
            bail!("--tcp-keepalive and --tcp-keepalive-interval must be 1s..32767s (or 0 = off)");
        }
        if !(1..=127).contains(&self.tcp_keepalive_count) {
            bail!("--tcp-keepalive-count must be 1..127");
        }
        if self.max_conns_per_ip == Some(0) {
            bail!("--max-conns-per-ip must be at least 1 (leave it out to turn the limit off)");
        }
        if !matches!(
            self.max_new_conns_per_ip_per_sec,
            None | Some(1..=1_000_000)
        ) {
            bail!("--max-new-conns-per-ip-per-sec must be between 1 and 1000000");
        }
        Ok(())
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
}
