//! Turning `c1m bench` arguments into a run: validation, target and destination, per-socket
//! port range, sources and the per-pair cap, worker count, the default run bound, and one
//! [`WorkerConfig`] per worker.

use crate::errors::ErrorCounts;
use crate::hist::new_hist;
use crate::http::StatusSource;
use crate::plan;
use crate::proto::Proto;
use crate::publish::PublishTarget;
use crate::run::Run;
use crate::template;
use crate::tls::{Tls, TlsTarget};
use crate::wire::{WorkerConfig, WorkerReport};
use crate::BenchArgs;
use anyhow::{bail, Context};
use std::net::ToSocketAddrs;
use std::time::Duration;

/// With `fleet` (a run on agents) the checks that depend on the box that holds the
/// connections (sources, ports, fds, worker count) are left to the split among agents and to
/// the agents themselves, and the one config returned covers the whole run as the template.
pub(super) fn plan_run(
    args: BenchArgs,
    hard_nofile: u64,
    fleet: bool,
) -> anyhow::Result<(Run, Vec<WorkerConfig>)> {
    if args.conns == 0 {
        bail!("--conns must be at least 1");
    }
    if args.channels == 0 {
        bail!("--channels must be at least 1");
    }
    if args.conns > u64::from(u32::MAX) {
        bail!("--conns above {} is not supported", u32::MAX);
    }
    if !(args.rate >= 0.0 && args.rate.is_finite()) {
        bail!("--rate must be ≥ 0");
    }
    let mut args = args;
    if let Some(s) = args.scenario {
        s.apply(&mut args)?;
    }
    if args.scenario != Some(crate::scenario::Scenario::ReconnectStorm)
        && (args.restart_cmd.is_some() || args.restart_after.is_some())
    {
        bail!("--restart-cmd and --restart-after belong to --scenario reconnect-storm");
    }
    let target = plan::parse_url(&args.url)?;
    let proto = args.proto();
    let target_tls = tls_for(&args, target.tls, &target.host_header)?;
    let header_template = subscribe_headers(&args)?;
    let dst = match proto {
        Proto::Tcp => {
            let spec = args
                .tcp
                .as_deref()
                .context("--proto tcp needs --tcp ADDR (the line-protocol listener)")?;
            spec.to_socket_addrs()
                .with_context(|| format!("resolve --tcp {spec:?}"))?
                .next()
                .with_context(|| format!("--tcp {spec:?} resolves to no address"))?
        }
        Proto::Sse | Proto::Ws | Proto::Poll if !target.http => {
            bail!("--proto {} needs an http:// or https:// URL", proto.name())
        }
        _ => target.addr,
    };
    if args.http2 {
        if proto != Proto::Sse {
            bail!(
                "--http2 carries SSE streams only (not --proto {})",
                proto.name()
            );
        }
        if !(1..=100).contains(&args.streams_per_conn) {
            bail!("--streams-per-conn must be between 1 and 100");
        }
        if args.scenario == Some(crate::scenario::Scenario::ReconnectStorm) || args.churn_resume {
            bail!("--http2 does not support resuming clients (reconnect-storm, --churn-resume)");
        }
        if args.conns.saturating_mul(u64::from(args.streams_per_conn)) > u64::from(u32::MAX) {
            bail!(
                "--conns × --streams-per-conn above {} is not supported",
                u32::MAX
            );
        }
    }
    let publishing = args.publish_every.is_some() || args.publish_rate.is_some();
    if publishing && (proto == Proto::Connect || !target.http) {
        bail!("publishing needs an http:// URL and a subscribing protocol (not connect)");
    }
    if target.tls && matches!(proto, Proto::Tcp | Proto::Connect) {
        bail!(
            "--proto {} does not speak TLS (only sse, ws and poll do)",
            proto.name()
        );
    }
    let publish_target = publish_target(&args, &target, &target_tls)?;
    let status_source = status_source(&args, &target, &target_tls)?;
    let tls_anywhere = target.tls
        || [&args.publish_url, &args.status_url]
            .iter()
            .any(|u| u.as_deref().is_some_and(|u| u.starts_with("https://")));
    if args.ca.is_some() && !tls_anywhere {
        bail!("--ca is for https:// and wss:// URLs; none is given");
    }
    if let Some(r) = args.publish_rate {
        if !(r > 0.0 && r <= 1e6) {
            bail!("--publish-rate must be in (0, 1e6]");
        }
    }
    if !(args.churn_rate >= 0.0 && args.churn_rate.is_finite()) {
        bail!("--churn-rate must be ≥ 0");
    }
    if args.churn_rate > 0.0 && proto == Proto::Connect {
        bail!("--churn-rate needs a subscribing protocol (not connect)");
    }
    if args.publish_every.is_some_and(|d| d.is_zero()) {
        bail!("--publish-every must be > 0");
    }
    // IP_LOCAL_PORT_RANGE on every socket where the kernel has it (6.3+), by default with the
    // system's own range: besides clamping, a socket with a per-socket range makes connect()
    // search ports one by one instead of "one parity first" (measured here: 25,000
    // connections per pair open at ~66K/s with it, ~1.3K/s without).
    let sockopt = plan::port_range_sockopt_supported();
    let port_range = match args.port_range.as_deref() {
        Some("off") => None,
        Some(s) => {
            let (lo, hi) = s
                .split_once('-')
                .and_then(|(a, b)| {
                    Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
                })
                .filter(|(lo, hi)| lo < hi)
                .with_context(|| format!("bad --port-range {s:?} (want LO-HI or off)"))?;
            if !sockopt && !fleet {
                bail!(
                    "--port-range needs IP_LOCAL_PORT_RANGE (Linux 6.3+), which this kernel lacks"
                );
            }
            Some((lo, hi))
        }
        None if sockopt => Some(plan::system_port_range()),
        None => None,
    };
    let range = port_range.unwrap_or_else(plan::system_port_range);
    let per_source = args
        .per_source
        .unwrap_or_else(|| plan::default_per_source(range))
        .max(1);
    let sources = match &args.source {
        Some(spec) => plan::parse_sources(spec)?,
        None if dst.ip().is_loopback() && dst.is_ipv4() && !fleet => {
            plan::auto_loopback_sources(args.conns, per_source, dst.ip())
        }
        None => Vec::new(),
    };
    if let Some(bad) = sources.iter().find(|s| s.is_ipv4() != dst.is_ipv4()) {
        bail!("source address {bad} and destination {dst} are of different IP families");
    }
    let capacity = per_source * (sources.len().max(1) as u64);
    if args.conns > capacity && !fleet {
        bail!(
            "{} connections need more than {} source address(es) at {per_source} per (source, destination); \
             add addresses with --source or raise --per-source",
            args.conns,
            sources.len().max(1)
        );
    }
    let per_worker_fds = hard_nofile.saturating_sub(64).max(16);
    let workers = match args.workers {
        Some(0) => bail!("--workers must be at least 1"),
        _ if fleet => 1,
        Some(n) => {
            if args.conns.div_ceil(n as u64) > per_worker_fds {
                bail!(
                    "{n} workers would hold {} connections each, above the fd limit ({hard_nofile})",
                    args.conns.div_ceil(n as u64)
                );
            }
            n.min(args.conns as usize)
        }
        None => plan::worker_count(
            args.conns,
            c1m_sys::process::available_cpus(),
            per_worker_fds,
        ),
    };
    let ramp_est = if args.rate > 0.0 {
        args.conns as f64 / args.rate
    } else {
        args.conns as f64 / 20_000.0
    };
    // try_from: an absurdly low --rate must not overflow a Duration; a year is bound enough.
    let duration = args.duration.unwrap_or_else(|| {
        Duration::try_from_secs_f64(2.0 * ramp_est + 30.0)
            .unwrap_or(Duration::from_secs(365 * 86_400))
            .saturating_add(args.connect_timeout)
            .saturating_add(args.hold)
    });
    args.duration = Some(duration);
    let parent_pid = std::process::id();
    let run_start_us = crate::payload::now_us();
    let configs = plan::split(args.conns, workers)
        .into_iter()
        .enumerate()
        .map(|(i, (first, n))| WorkerConfig {
            index: i,
            parent_pid,
            proto,
            dst,
            host: target.host_header.clone(),
            path_template: target.path_template.clone(),
            header_template: header_template.clone(),
            channel_base: target.channel_base.clone(),
            channels: args.channels,
            first_conn: first,
            conns: n,
            rate: args.rate * n as f64 / args.conns as f64,
            max_inflight: args.max_inflight.max(1),
            connect_timeout_ms: args.connect_timeout.as_millis() as u64,
            reconnect: args.reconnect.then(|| {
                (
                    args.reconnect_min.as_millis().max(1) as u64,
                    args.reconnect_max.as_millis().max(1) as u64,
                )
            }),
            sources: sources.clone(),
            port_range,
            tick_ms: 250,
            run_start_us,
            churn_rate: args.churn_rate * n as f64 / args.conns as f64,
            storm: args.scenario == Some(crate::scenario::Scenario::ReconnectStorm),
            churn_resume: args.churn_resume,
            max_runtime_ms: (duration + Duration::from_secs(30)).as_millis() as u64,
            publish_timeout_ms: args.publish_timeout.as_millis() as u64,
            nice: args.load_nice,
            tls: target_tls.as_ref().map(|t| TlsTarget {
                alpn_h2: args.http2,
                ..t.target.clone()
            }),
            h2_streams: if args.http2 { args.streams_per_conn } else { 0 },
        })
        .collect();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let run = Run {
        target,
        dst,
        workers,
        sources,
        per_source,
        port_range,
        started_utc: crate::env::now_utc(),
        command,
        latest: (0..workers)
            .map(|i| WorkerReport {
                index: i,
                ..Default::default()
            })
            .collect(),
        finals: vec![false; workers],
        connect_h: new_hist(),
        subscribe_h: new_hist(),
        resume_caught_up_h: new_hist(),
        delivery_h: new_hist(),
        publish_h: new_hist(),
        published: 0,
        publish_errors: ErrorCounts::new(),
        timeline: Vec::new(),
        peak_online: 0,
        hold_online_min: None,
        ramp_secs: None,
        elapsed_secs: 0.0,
        stop_reason: String::new(),
        status_source,
        server_before: None,
        server_timeline: Vec::new(),
        server_unanswered: 0,
        server_peak: None,
        publishing,
        publish_target,
        publish_window: (None, None),
        coordinator_pss: (0, 0),
        notes: Vec::new(),
        storm: args.restart_after.map(crate::storm::StormRun::new),
        fleet: None,
        args,
    };
    Ok((run, configs))
}

/// `-H` lines and `--token` as one header template (`{ch}`, `{i}`), checked.
fn subscribe_headers(args: &BenchArgs) -> anyhow::Result<String> {
    let mut out = String::new();
    for h in &args.headers {
        template::check("-H", h, &["ch", "i"])?;
        out.push_str(&template::header_line("-H", h)?);
    }
    if let Some(t) = &args.token {
        template::check("--token", t, &["ch", "i"])?;
        out.push_str(&template::header_line(
            "--token",
            &format!("Authorization: Bearer {t}"),
        )?);
    }
    Ok(out)
}

/// The TLS client of an https:// (or wss://) address, checked now (CA file, name), or None.
fn tls_for(args: &BenchArgs, tls: bool, authority: &str) -> anyhow::Result<Option<Tls>> {
    if !tls {
        return Ok(None);
    }
    let target = TlsTarget {
        server_name: crate::tls::host_of(authority).to_string(),
        ca: args.ca.clone(),
        alpn_h2: false,
    };
    Tls::new(target).map(Some)
}

/// Where c1m's `/status` is read: `--status-url`, else `/status` on an http target.
fn status_source(
    args: &BenchArgs,
    target: &plan::Target,
    target_tls: &Option<Tls>,
) -> anyhow::Result<Option<StatusSource>> {
    let Some(url) = &args.status_url else {
        return Ok(target.http.then(|| StatusSource {
            addr: target.addr,
            host: target.host_header.clone(),
            path: "/status".to_string(),
            tls: target_tls.clone(),
        }));
    };
    let (authority, addr, path, tls) = split_http_url("--status-url", url)?;
    let tls = tls_for(args, tls, authority)?;
    let path = path.unwrap_or("/status");
    if path.contains([' ', '\r', '\n']) {
        bail!("--status-url path {path:?} contains a space or line break");
    }
    Ok(Some(StatusSource {
        addr,
        host: authority.to_string(),
        path: path.to_string(),
        tls,
    }))
}

/// An `http(s)://AUTHORITY[/PATH]` given to FLAG: the authority (the Host header), its
/// address, the path when there is one, and whether it is https.
fn split_http_url<'a>(
    flag: &str,
    url: &'a str,
) -> anyhow::Result<(&'a str, std::net::SocketAddr, Option<&'a str>, bool)> {
    let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
        (Some(rest), _) => (rest, false),
        (None, Some(rest)) => (rest, true),
        _ => bail!("{flag} {url:?} must start with http:// or https://"),
    };
    let (authority, addr) = plan::parse_authority_default(rest, if tls { 443 } else { 80 })?;
    Ok((authority, addr, rest.find('/').map(|i| &rest[i..]), tls))
}

/// Where publishes go: `--publish-cmd`, `--publish-url`, or c1m's `POST /pub/{ch}` on the
/// target. Templates and headers are checked here, once.
fn publish_target(
    args: &BenchArgs,
    target: &plan::Target,
    target_tls: &Option<Tls>,
) -> anyhow::Result<PublishTarget> {
    let body_template = args.publish_body.clone();
    template::check("--publish-body", &body_template, &["payload", "ch"])?;
    let batch = args.publish_batch > 1;
    if batch && (args.publish_cmd.is_some() || body_template != "{payload}") {
        bail!(
            "--publish-batch sends c1m's batch call; it takes no --publish-cmd or --publish-body"
        );
    }
    if let Some(cmd) = &args.publish_cmd {
        return Ok(PublishTarget::Cmd {
            cmd: cmd.clone(),
            body_template,
        });
    }
    let mut headers = String::new();
    for h in &args.publish_header {
        template::check("--publish-header", h, &["ch"])?;
        headers.push_str(&template::header_line("--publish-header", h)?);
    }
    if !args
        .publish_header
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("content-type:"))
    {
        headers.push_str(if batch {
            "Content-Type: application/x-ndjson\r\n"
        } else {
            "Content-Type: text/plain\r\n"
        });
    }
    if let Some(k) = &args.publish_key {
        headers.push_str(&template::header_line(
            "--publish-key",
            &format!("Authorization: Bearer {k}"),
        )?);
    }
    let method = &args.publish_method;
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        bail!("--publish-method {method:?} must be an upper-case HTTP method");
    }
    let (addr, host, path_template, tls) = match &args.publish_url {
        Some(url) => {
            let (authority, addr, path, tls) = split_http_url("--publish-url", url)?;
            let tls = tls_for(args, tls, authority)?;
            let path = path.unwrap_or("/");
            template::check("--publish-url", path, if batch { &[] } else { &["ch"] })?;
            if path.contains([' ', '\r', '\n']) {
                bail!("--publish-url path {path:?} contains a space or line break");
            }
            (addr, authority.to_string(), path.to_string(), tls)
        }
        None => (
            target.addr,
            target.host_header.clone(),
            if batch { "/api/batch" } else { "/pub/{ch}" }.to_string(),
            target_tls.clone(),
        ),
    };
    Ok(PublishTarget::Http {
        addr,
        host,
        path_template,
        method: method.clone(),
        headers,
        body_template,
        tls,
    })
}
