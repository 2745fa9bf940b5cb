//! Turning arguments into a plan: the target (URL, protocol, channels), durations, source
//! addresses and how connections, rate and addresses are split over worker processes.

use anyhow::{bail, Context};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Parses `250ms`, `10s`, `2m`, `1h`, or a bare number of seconds (`1.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration {s:?} (use e.g. 500ms, 10s, 2m)"))?;
    if !(0.0..=1e7).contains(&v) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(v * mult))
}

/// A parsed `http://host:port/sub/{ch}` (or `ws://…`, `tcp://host:port`) target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub addr: SocketAddr,
    pub host_header: String,
    /// Request path with `{ch}` (channel name) and `{i}` (connection index) placeholders,
    /// query included: `/sub/{ch}` for the plain `http://host/sub/news` form.
    pub path_template: String,
    /// Channel base name: the URL's last segment (`news`), or `bench` for a template URL.
    pub channel_base: String,
    pub http: bool,
    /// The URL said `ws://` or `wss://` (WebSocket is then the default protocol).
    pub ws_scheme: bool,
    /// The URL said `https://` or `wss://`: every connection speaks TLS.
    pub tls: bool,
}

/// Parses a target URL: a plain `http://host:port/prefix/CHANNEL` (channel = last segment), or
/// a template with `{ch}`/`{i}` anywhere in path and query (`http://host/sub?id={ch}`);
/// `https://` and `wss://` are the same over TLS.
pub fn parse_url(url: &str) -> anyhow::Result<Target> {
    let (scheme, rest) = url.split_once("://").with_context(|| {
        format!("URL {url:?} has no scheme (http://, https://, ws://, wss:// or tcp://)")
    })?;
    let (http, tls) = match scheme {
        "http" | "ws" => (true, false),
        "https" | "wss" => (true, true),
        "tcp" => (false, false),
        other => bail!("URL scheme {other:?} not supported (http, https, ws, wss or tcp)"),
    };
    let (authority, addr) = parse_authority_default(rest, if tls { 443 } else { 80 })?;
    let path = rest.find('/').map(|i| &rest[i..]).unwrap_or("/");
    let (path_template, channel_base) = if path.contains('{') {
        crate::template::check("URL", path, &["ch", "i"])?;
        if path.contains([' ', '\r', '\n']) {
            bail!("URL path {path:?} contains a space or line break");
        }
        (path.to_string(), "bench".to_string())
    } else {
        let path = path.split('?').next().unwrap_or("/");
        match path.rfind('/') {
            Some(i) if i + 1 < path.len() => {
                (format!("{}{{ch}}", &path[..=i]), path[i + 1..].to_string())
            }
            _ => ("/sub/{ch}".to_string(), "bench".to_string()),
        }
    };
    if !channel_base
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
    {
        bail!("channel name {channel_base:?} must be [A-Za-z0-9_.:-]");
    }
    Ok(Target {
        addr,
        host_header: authority.to_string(),
        path_template,
        channel_base,
        http,
        ws_scheme: scheme == "ws" || scheme == "wss",
        tls,
    })
}

/// The `host[:port]` part of `rest` (what follows `scheme://`), resolved (port 80 by default).
pub fn parse_authority(rest: &str) -> anyhow::Result<(&str, SocketAddr)> {
    parse_authority_default(rest, 80)
}

/// [`parse_authority`] with another default port (443 for TLS).
pub fn parse_authority_default(rest: &str, port: u16) -> anyhow::Result<(&str, SocketAddr)> {
    let authority = rest.find('/').map(|i| &rest[..i]).unwrap_or(rest);
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(h, _)| !h.ends_with(':'))
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:{port}")
    };
    let addr = with_port
        .to_socket_addrs()
        .with_context(|| format!("resolve {authority:?}"))?
        .next()
        .with_context(|| format!("{authority:?} resolves to no address"))?;
    Ok((authority, addr))
}

/// Parses `--source`: comma-separated addresses, ranges `A-B` and CIDRs `A/n` (network and
/// broadcast addresses of prefixes up to /30 are left out). At most 1<<20 addresses.
pub fn parse_sources(spec: &str) -> anyhow::Result<Vec<IpAddr>> {
    const MAX: u64 = 1 << 20;
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some((a, b)) = item.split_once('-') {
            let a: Ipv4Addr = a
                .trim()
                .parse()
                .with_context(|| format!("bad address in {item:?}"))?;
            let b: Ipv4Addr = b
                .trim()
                .parse()
                .with_context(|| format!("bad address in {item:?}"))?;
            let (a, b) = (u32::from(a), u32::from(b));
            if b < a || u64::from(b - a) >= MAX {
                bail!("bad source range {item:?}");
            }
            out.extend((a..=b).map(|v| IpAddr::V4(Ipv4Addr::from(v))));
        } else if let Some((a, n)) = item.split_once('/') {
            let a: Ipv4Addr = a
                .parse()
                .with_context(|| format!("bad address in {item:?}"))?;
            let n: u32 = n
                .parse()
                .with_context(|| format!("bad prefix in {item:?}"))?;
            if !(12..=32).contains(&n) {
                bail!("CIDR {item:?}: prefix must be /12../32");
            }
            let size = 1u64 << (32 - n);
            let base = u32::from(a) & (u32::MAX.checked_shl(32 - n).unwrap_or(0));
            let (lo, hi) = if n <= 30 { (1, size - 1) } else { (0, size) };
            out.extend((lo..hi).map(|i| IpAddr::V4(Ipv4Addr::from(base + i as u32))));
        } else {
            out.push(
                item.parse()
                    .with_context(|| format!("bad source address {item:?}"))?,
            );
        }
        if out.len() as u64 > MAX {
            bail!("--source names more than {MAX} addresses");
        }
    }
    if out.is_empty() {
        bail!("--source is empty");
    }
    Ok(out)
}

/// The system's ephemeral port range (net.ipv4.ip_local_port_range).
pub fn system_port_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().filter_map(|w| w.parse().ok());
            Some((it.next()?, it.next()?))
        })
        .unwrap_or((32768, 60999))
}

/// Default cap of connections per (source, destination) pair: the rule `c1m tune` and
/// `c1m doctor` use too ([`c1m_proto::ports::per_pair`]): 45 % of the ephemeral port range,
/// under the connect() cliff at half of it (measured: bench/connect-cliff.sh), with or without
/// IP_LOCAL_PORT_RANGE on every socket (`c1m_proto::ports`); at most 50,000.
pub fn default_per_source(range: (u16, u16)) -> u64 {
    let size = u64::from(range.1.saturating_sub(range.0)) + 1;
    c1m_proto::ports::per_pair(size)
}

/// Whether this kernel has IP_LOCAL_PORT_RANGE (Linux 6.3+), probed on a throwaway socket.
pub fn port_range_sockopt_supported() -> bool {
    let range = system_port_range();
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map(|s| c1m_sys::sockopt::set_local_port_range(&s, range.0, range.1).is_ok())
        .unwrap_or(false)
}

/// Automatic loopback sources: 127.0.0.2, 127.0.0.3, … (skipping the destination), enough
/// to keep every pair under `per_source`.
pub fn auto_loopback_sources(conns: u64, per_source: u64, dst: IpAddr) -> Vec<IpAddr> {
    let n = conns.div_ceil(per_source.max(1)).max(1);
    let mut out = Vec::new();
    let mut v = u32::from(Ipv4Addr::new(127, 0, 0, 2));
    while (out.len() as u64) < n && v < u32::from(Ipv4Addr::new(127, 255, 255, 255)) {
        let ip = IpAddr::V4(Ipv4Addr::from(v));
        if ip != dst {
            out.push(ip);
        }
        v += 1;
    }
    out
}

/// Worker count: enough processes that none needs more descriptors than `per_worker_fds`,
/// and at least one per CPU (never more than connections).
pub fn worker_count(conns: u64, cpus: usize, per_worker_fds: u64) -> usize {
    let by_fd = conns.div_ceil(per_worker_fds.max(1));
    (by_fd.max((cpus as u64).min(conns)).max(1)) as usize
}

/// Splits `total` into `parts` near-equal shares: (first index, count) each.
pub fn split(total: u64, parts: usize) -> Vec<(u64, u64)> {
    let parts = parts.max(1) as u64;
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..parts {
        let n = total / parts + u64::from(i < total % parts);
        out.push((start, n));
        start += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:8080/sub/news").unwrap();
        assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(
            (t.path_template.as_str(), t.channel_base.as_str()),
            ("/sub/{ch}", "news")
        );
        assert_eq!(t.host_header, "127.0.0.1:8080");
        let t = parse_url("tcp://127.0.0.1:9").unwrap();
        assert!(!t.http);
        assert_eq!(t.channel_base, "bench");
        assert_eq!(parse_url("http://[::1]:81/sub/a").unwrap().addr.port(), 81);
        let t = parse_url("https://127.0.0.1/sub/a").unwrap();
        assert!(t.tls && t.http && !t.ws_scheme);
        assert_eq!(t.addr.port(), 443);
        let t = parse_url("wss://127.0.0.1:8443/sub/a").unwrap();
        assert!(t.tls && t.ws_scheme);
        assert!(parse_url("ftp://x/sub/a").is_err());
        assert!(parse_url("http://127.0.0.1:1/sub/a b").is_err());
        let t = parse_url("ws://127.0.0.1:8080/s?id={ch}&c={i}").unwrap();
        assert!(t.ws_scheme && t.http);
        assert_eq!(t.path_template, "/s?id={ch}&c={i}");
        assert_eq!(t.channel_base, "bench");
        assert!(parse_url("http://127.0.0.1:1/sub/{chan}").is_err());
    }

    #[test]
    fn sources() {
        let s = parse_sources("127.0.0.2-127.0.0.4,127.0.1.1").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(parse_sources("127.0.0.0/30").unwrap().len(), 2);
        assert_eq!(parse_sources("127.0.0.8/31").unwrap().len(), 2);
        assert!(parse_sources("127.0.0.5-127.0.0.1").is_err());
        let dst: IpAddr = "127.0.0.3".parse().unwrap();
        let auto = auto_loopback_sources(120_000, 50_000, dst);
        assert_eq!(auto.len(), 3);
        assert!(!auto.contains(&dst));
    }

    #[test]
    fn splitting() {
        assert_eq!(split(10, 3), vec![(0, 4), (4, 3), (7, 3)]);
        assert_eq!(worker_count(1_000_000, 2, 19_900), 51);
        assert_eq!(worker_count(5, 2, 19_900), 2);
        assert_eq!(worker_count(1, 8, 19_900), 1);
        assert_eq!(default_per_source((32768, 60999)), 12_704);
        assert_eq!(default_per_source((1024, 65535)), 29_030);
    }
}
