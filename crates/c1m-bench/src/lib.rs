//! The load generator: opens, holds and measures many connections from many source addresses.
//!
//! Owns: bench worker processes, their epoll loops and connection arenas, the ramp, publishing,
//! latency histograms and the report. Must not touch: server internals (it talks to servers
//! only over sockets).
//!
//! # Layout
//! - [`coordinator`]: the `c1m bench` process: plans, spawns workers (re-executing itself as
//!   `c1m __bench-worker`), publishes, merges reports, prints progress, writes the report.
//! - [`worker`]: one worker process, a mio loop over a slab of connections; [`procs`]:
//!   starting, commanding and reaping local worker processes (for the coordinator and agents).
//! - [`fleet`]: several load boxes as one generator: `c1m bench-agent` on each box, and the
//!   coordinator's links to them (`--agents`).
//! - [`proto`]: which protocol a run speaks; the request bytes and parsers it uses live in
//!   `c1m_proto::client` beside the server halves.
//! - [`delivery`]: loss / duplicate / reorder accounting and the "delivered to all?" verdict.
//! - [`run`]: the state of one run (plan, merged totals, timeline, the coordinator's messages)
//!   that the coordinator fills and [`report`], [`plot`] and [`scenario`] read; [`human`]:
//!   numbers and durations as text. Neither imports the coordinator, so nothing but this
//!   entry does.
//! - [`plan`], [`wire`], [`payload`], [`hist`], [`errors`], [`http`], [`publish`], [`env`],
//!   [`report`], [`plot`], [`template`], [`tls`]: the pieces those use.
//! - [`scenario`]: named run shapes (`--scenario fanout|channels|churn|reconnect-storm`) and
//!   their report sections; [`storm`]: the reconnect storm's measures; [`server_samples`]:
//!   the server's `/status` read over the run.

pub mod coordinator;
pub mod delivery;
pub mod env;
pub mod errors;
pub mod fleet;
pub mod hist;
pub mod http;
pub mod human;
pub mod payload;
pub mod plan;
pub mod plot;
pub mod procs;
pub mod proto;
pub mod publish;
pub mod publish_log;
pub mod report;
pub mod run;
pub mod scenario;
pub mod server_samples;
pub mod storm;
pub mod template;
pub mod tls;
pub mod wire;
pub mod worker;

use clap::Args;
use plan::parse_duration;

/// `--publish-timeout`'s default (also what a worker assumes when its config has none).
pub const DEFAULT_PUBLISH_TIMEOUT: &str = "30s";
use std::path::PathBuf;
use std::time::Duration;

/// `c1m bench` arguments. The options live behind a Box so that the CLI's subcommand enum stays
/// small (clippy's large_enum_variant); reading `args.conns` works through Deref.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(flatten)]
    pub opts: Box<BenchOptions>,
}

impl std::ops::Deref for BenchArgs {
    type Target = BenchOptions;
    fn deref(&self) -> &BenchOptions {
        &self.opts
    }
}

impl BenchOptions {
    /// The protocol: as given, else ws for a ws:// URL, else sse.
    pub fn proto(&self) -> proto::Proto {
        self.proto.unwrap_or(
            if self.url.starts_with("ws://") || self.url.starts_with("wss://") {
                proto::Proto::Ws
            } else {
                proto::Proto::Sse
            },
        )
    }
}

impl std::ops::DerefMut for BenchArgs {
    fn deref_mut(&mut self) -> &mut BenchOptions {
        &mut self.opts
    }
}

/// All `c1m bench` options.
///
/// Channels: with `--channels 1` subscribers use the URL's channel (`/sub/news` → `news`); with
/// `--channels K` (K > 1) connection i subscribes to `news-{i mod K}` (news-0 … news-K-1) and
/// the publisher posts to each of them.
#[derive(Args, Debug, Clone)]
#[command(after_help = "Examples:
  c1m bench http://127.0.0.1:8080/sub/news --conns 1000000 --rate 40000 --hold 60s \\
      --publish-every 1s --report out.json --plot out.svg
  c1m bench http://127.0.0.1:8080/sub/news --proto ws --channels 100 --publish-rate 500
  c1m bench http://127.0.0.1:8080/sub/news --proto tcp --tcp 127.0.0.1:9001
  c1m bench https://push.example.com/sub/news --proto ws --ca ca.pem --conns 10000
  c1m bench http://127.0.0.1:8080/sub/news --http2 --streams-per-conn 20 --conns 10000
  c1m bench tcp://127.0.0.1:9000 --proto connect --conns 100000 --rate 0
  c1m bench http://198.51.100.5:8080/sub/a --source 198.51.100.10-198.51.100.29 --reconnect
  c1m bench 'http://127.0.0.1:8081/sub/{ch}' --channels 100 --publish-every 1s \\
      --publish-url 'http://127.0.0.1:8081/pub/{ch}'          (nchan)
  c1m bench http://127.0.0.1:8080/sub/news --scenario reconnect-storm --conns 10000 \\
      --hold 20s --restart-after 5s --restart-cmd 'systemctl restart c1m'

Channels: --channels K > 1 subscribes connection i to {base}-{i mod K} (news-0 .. news-K-1);
{base} is the URL's last segment, or `bench` for a URL template with {ch}.
Delivery: payloads carry the stamp `c1mb CHANNEL SEQ SENT_US`, found anywhere in a message,
so loss, duplicates, reordering and latency are measured through any envelope.
Durations: 500ms, 10s, 2m, 1h. Progress goes to stderr, the summary to stdout.
Exit codes: 0 the full --hold ran, every connection came online, no errors and (when
publishing) every expected message was delivered exactly once (reconnect-storm: errors the
restart caused are allowed, every dropped subscriber must be back, caught up and resumed by
id); 1 the run finished short of that; 2 error.")]
pub struct BenchOptions {
    /// Target: http://HOST:PORT/sub/CHANNEL (sse, ws, poll; also the publish address for tcp),
    /// a template with {ch} (channel name) and {i} (connection index) anywhere in path and
    /// query (http://HOST/sub?id={ch}, ws://HOST/ws/{ch}), or tcp://HOST:PORT for --proto connect.
    /// https:// and wss:// speak TLS (subscribers, publishes and /status alike), verified
    /// against the system's roots or --ca.
    pub url: String,
    /// PEM file of the CA(s) that the certificate of an https:// or wss:// target (and of
    /// --publish-url / --status-url) must chain to, instead of the system's roots: a test or
    /// private CA. Verification is never switched off.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Connections to open and hold (1000, 250K, 1M, 1.5M, 1_000_000).
    #[arg(long, short = 'c', default_value = "1000", value_parser = c1m_proto::count::parse_count)]
    pub conns: u64,
    /// New connections per second over all workers (open model); 0 = as fast as in-flight allows.
    #[arg(long, short = 'r', default_value_t = 10_000.0)]
    pub rate: f64,
    /// Protocol (default: ws for a ws:// URL, else sse).
    #[arg(long, short = 'p', value_enum)]
    pub proto: Option<proto::Proto>,
    /// Address of the raw TCP line-protocol listener (for --proto tcp).
    #[arg(long, value_name = "ADDR")]
    pub tcp: Option<String>,
    /// Speak HTTP/2 (sse only): each connection carries --streams-per-conn SSE streams. Over
    /// http:// it is cleartext HTTP/2 with prior knowledge (h2c), over https:// TLS with ALPN
    /// h2. --conns still counts TCP connections; a connection is online (and subscribed) once
    /// every one of its streams is answered 200, and each stream is a subscriber with its own
    /// delivery accounting (stream j of connection i is subscriber i × N + j for {i} and for
    /// --channels).
    #[arg(long)]
    pub http2: bool,
    /// SSE streams per HTTP/2 connection (with --http2), 1-100.
    #[arg(long, default_value_t = 1, value_name = "N", requires = "http2")]
    pub streams_per_conn: u32,
    /// Spread subscribers over K channels (see above for names).
    #[arg(long, default_value_t = 1)]
    pub channels: u32,
    /// How long to hold all connections once the ramp is done.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub hold: Duration,
    /// Hard bound on the whole run (default: twice the planned ramp + connect timeout + hold + 30s).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Time allowed for connect plus subscribe confirmation.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub connect_timeout: Duration,
    /// Connects in flight per worker at most. More does not open faster on a busy box, it only
    /// queues SYNs in the kernel (measured: same rate, p50 connect 1.6 ms at 16, 230 ms at 2000).
    #[arg(long, default_value_t = 256)]
    pub max_inflight: usize,
    /// Lower the CPU priority of the connection-holding worker processes by N nice steps
    /// (0-19), so the coordinator (publisher, publish-ack timing) is not starved by its own
    /// load on a saturated box; pair with `c1m serve --worker-nice` at the same N.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub load_nice: i32,
    /// Reconnect closed or failed connections with exponential backoff and jitter.
    #[arg(long)]
    pub reconnect: bool,
    /// First reconnect delay (doubles per failed attempt).
    #[arg(long, value_parser = parse_duration, default_value = "100ms")]
    pub reconnect_min: Duration,
    /// Reconnect delay cap.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub reconnect_max: Duration,
    /// Local source addresses: list, range A-B or CIDR, comma-separated. Default: for loopback
    /// targets 127.0.0.2, 127.0.0.3, … as many as --per-source requires; otherwise the kernel's.
    #[arg(long, value_name = "SPEC")]
    pub source: Option<String>,
    /// Connections per (source address, destination) at most. Default: the rule `c1m tune`
    /// and `c1m doctor` use: 45% of the port range, under the connect() cliff at half of it
    /// (bench/connect-cliff.sh), IP_LOCAL_PORT_RANGE on every socket or not (its linear scan
    /// slows with the fill as well); at most 50,000.
    #[arg(long)]
    pub per_source: Option<u64>,
    /// Per-socket ephemeral port range LO-HI (IP_LOCAL_PORT_RANGE, Linux 6.3+), or `off`.
    /// Default: the system range, on every socket, where the kernel has the option.
    #[arg(long, value_name = "LO-HI|off")]
    pub port_range: Option<String>,
    /// Worker processes (default: enough for the fd limit, at least one per CPU).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Publish one message to every channel this often during the hold.
    #[arg(long, value_parser = parse_duration)]
    pub publish_every: Option<Duration>,
    /// Or publish this many messages per second, round-robin over channels.
    #[arg(long, conflicts_with = "publish_every")]
    pub publish_rate: Option<f64>,
    /// Publish during the ramp too (by default publishing starts when the ramp is done).
    /// Connections that come online later expect only what was sent after they did.
    #[arg(long)]
    pub publish_from_start: bool,
    /// Publisher threads, each with its own connection; channels are split between them
    /// (for many channels, where one connection's round trips cannot keep up).
    #[arg(long, default_value_t = 1)]
    pub publishers: u32,
    /// Payload size in bytes (at least the stamp, ~40 bytes).
    #[arg(long, default_value_t = 0)]
    pub payload_size: usize,
    /// Stop publishing this long before the hold ends, so deliveries can land
    /// (default: 2s, or a quarter of --hold when that is shorter).
    #[arg(long, value_parser = parse_duration)]
    pub drain: Option<Duration>,
    /// How long a publish may wait for its answer; a fan-out to a million subscribers on a
    /// loaded box can take seconds. Each worker keeps an answered publish for its delivery
    /// accounting this long plus 10 s, so its memory does not grow with the run's length.
    #[arg(long, value_parser = parse_duration, default_value = DEFAULT_PUBLISH_TIMEOUT)]
    pub publish_timeout: Duration,
    /// Bearer key for `/pub` (c1m serve --publish-key).
    #[arg(long)]
    pub publish_key: Option<String>,
    /// Publish N messages per request through c1m's server API batch call (NDJSON, one answer
    /// with a result per message: each is acknowledged or refused on its own). The request
    /// goes to --publish-url if given (a path without {ch}), else to /api/batch on the target.
    /// Not with --publish-cmd or --publish-body.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub publish_batch: u32,
    /// Named run shape with its own report section: fanout (one channel, N subscribers,
    /// --publish-every default 1s), channels (--channels K, round-robin publishing as fast as
    /// acks come unless --publish-rate is given) or churn (hold N while --churn-rate of them
    /// are closed and reopened per second; default 1% of --conns per second) or
    /// reconnect-storm (the server is restarted under the subscribers, by --restart-cmd or by
    /// hand; --reconnect on, --publish-every default 200ms; reports drops, time until all are
    /// back and caught up, resumes with replay, gaps, loss and duplicates across the restart).
    #[arg(long, value_enum)]
    pub scenario: Option<scenario::Scenario>,
    /// Close this many online connections per second (picked at random, over all workers)
    /// once the ramp is done, each reopened at once as a new client (no resume; a new
    /// subscription and delivery window), or with --churn-resume as the same client resuming.
    /// Churn closes are not errors; they are counted as `churned`.
    #[arg(long, default_value_t = 0.0, value_name = "PER_SEC")]
    pub churn_rate: f64,
    /// Churned connections come back as the same client instead of a new one: they resubscribe
    /// with their last message id (`?last_id=`, or TCP's `SUB ch id`), and their delivery
    /// window stays open from their first subscription to the end of the run, so every
    /// message acknowledged while they were away must arrive by the server's replay (or be
    /// announced by a gap notice). Only clients that have received a message (and so hold an
    /// id) are picked. The report's resume section counts replays, gaps, and clients not back
    /// or not caught up at the end.
    #[arg(long)]
    pub churn_resume: bool,
    // ---- Reconnect storm (--scenario reconnect-storm) ----
    /// Reconnect storm: restart the server by running `sh -c CMD` at --restart-after into the
    /// hold (e.g. a script that kills and restarts it on the same port); exit status 0 is
    /// required. Without it bench waits for the operator to restart the server by hand.
    #[arg(long, value_name = "CMD")]
    pub restart_cmd: Option<String>,
    /// Reconnect storm: how long into the hold the restart comes (default: a third of --hold),
    /// so subscribers have received messages before it.
    #[arg(long, value_parser = parse_duration)]
    pub restart_after: Option<Duration>,
    // ---- Any server: subscribe headers, publishing to other servers ----
    /// Extra subscribe request header `Name: value` ({ch} and {i} expand); repeatable.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Bearer token template for authenticated servers: sends `Authorization: Bearer TOKEN`
    /// with each subscribe request, {ch} and {i} expanded.
    #[arg(long, value_name = "TEMPLATE")]
    pub token: Option<String>,
    /// Publish by HTTP to this URL template ({ch} expands) instead of c1m's /pub/{ch} on the
    /// target; any 2xx answer is an acknowledgement (nchan: 201/202).
    #[arg(long, value_name = "URL", conflicts_with = "publish_cmd")]
    pub publish_url: Option<String>,
    /// HTTP method of each publish.
    #[arg(long, default_value = "POST")]
    pub publish_method: String,
    /// Read the server's figures (c1m's `/status`: connections, memory) from this URL instead
    /// of `/status` on the target: `c1m serve --admin-listen` answers `/status` only there.
    #[arg(long, value_name = "URL")]
    pub status_url: Option<String>,
    /// Read the server's `/status` this often during the run (connections, RSS, PSS, history
    /// bytes, channels) into the report's `server_timeline`, for runs long enough that the
    /// server's own figures over time are the point (a soak). Off by default.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub server_every: Option<Duration>,
    /// Extra publish header `Name: value` ({ch} expands); repeatable. Default Content-Type is
    /// text/plain unless one is given here.
    #[arg(long, value_name = "NAME: VALUE")]
    pub publish_header: Vec<String>,
    /// Publish body template: {payload} is bench's stamped payload, {ch} the channel, e.g.
    /// '{"channel":"{ch}","data":"{payload}"}'. The stamp is found anywhere in what arrives.
    #[arg(long, value_name = "TEMPLATE", default_value = "{payload}")]
    pub publish_body: String,
    /// Publish by running `sh -c CMD publish CHANNEL BODY` (also in $C1M_CHANNEL, $C1M_BODY);
    /// exit status 0 is an acknowledgement. One process per message: for modest rates.
    #[arg(long, value_name = "CMD")]
    pub publish_cmd: Option<String>,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Draw online connections and latency over time as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Progress line interval.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// No progress lines, only the summary.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    // ---- Several load boxes ----
    /// Run the load on these agents instead of this box: `agent://HOST:PORT,…`, each a
    /// `c1m bench-agent` on a load box. This process splits connections, rates and --source
    /// addresses among them, starts their ramps together, publishes, and merges their reports;
    /// --workers then means workers per agent.
    #[arg(long, value_name = "LIST", requires = "agent_token_file")]
    pub agents: Option<String>,
    /// File with the token the agents were started with (--token-file).
    #[arg(long, value_name = "FILE", requires = "agents")]
    pub agent_token_file: Option<PathBuf>,
    /// How connections are divided among agents: even, or capacity (in proportion to the
    /// ports per source/destination times addresses and the free memory each reports).
    #[arg(long, value_enum, default_value = "even")]
    pub agent_split: fleet::split::SplitBy,
}

/// Runs `c1m bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<u8> {
    coordinator::run(args)
}

/// Runs `c1m bench-agent`.
pub fn run_agent(args: fleet::AgentArgs) -> anyhow::Result<u8> {
    fleet::run_agent(args)
}

/// Runs one worker (`c1m __bench-worker`, started by `c1m bench`).
pub fn run_worker_from_env() -> anyhow::Result<u8> {
    worker::run_from_env()
}
