//! Where Redis is and how to talk to it: the parsed `--broker` URL (`redis://` or `rediss://`,
//! optional `user:password@`; `redis+cluster://` / `rediss+cluster://` with a list of seed
//! nodes for Redis Cluster; `redis+sentinel://` with a list of Sentinels and a master name),
//! the `--broker-ca` trust for TLS, and the URL as it may be shown (password replaced) in
//! logs, errors, `--print-config` and `/status`.

use anyhow::{bail, Context};
use rustls::pki_types::ServerName;
use std::path::Path;
use std::sync::Arc;

/// Everything both connections need. `Debug` shows the redacted URL only.
#[derive(Clone)]
pub struct Target {
    /// The command connection's client (the `redis` crate: AUTH, SELECT and TLS built in).
    pub client: redis::Client,
    /// `host:port`, for logs.
    pub addr: String,
    pub db: i64,
    /// AUTH for the hand-made pub/sub connection (the same as the command connection's).
    pub username: Option<String>,
    pub password: Option<String>,
    /// TLS for the pub/sub connection (`rediss://`): the same trust as the command connection.
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// The URL with its password replaced, safe to print.
    pub shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Target({})", self.shown)
    }
}

/// `url` with the password (if any) replaced by `***`: the only form of a broker URL that may
/// be logged or printed.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{path}")
        }
        None => url.to_string(),
    }
}

/// A Redis Cluster URL: its seed nodes, and how to reach any node the cluster names (same
/// credentials and TLS trust as the seeds).
#[derive(Clone)]
pub struct ClusterTarget {
    pub seeds: Vec<Target>,
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// `user:password@` as written in the URL, or empty.
    userinfo: String,
    /// `--broker-ca`'s PEM, read once at start (nodes named later are reached with it).
    ca_pem: Option<Vec<u8>>,
    /// The URL with its password replaced, safe to print.
    pub shown: String,
}

impl std::fmt::Debug for ClusterTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterTarget({})", self.shown)
    }
}

impl ClusterTarget {
    /// How to reach the master that serves `key`'s slot now, asked of the seeds in turn
    /// (`CLUSTER SLOTS`): for a helper that keeps all its keys on one slot (a hash tag) and
    /// asks again after any error, so a failover or a moved slot costs it one retry.
    pub fn owner_of(&self, key: &[u8]) -> anyhow::Result<Target> {
        let slot = super::slots::key_slot(key);
        let mut last_error = anyhow::anyhow!("no seed node");
        for seed in &self.seeds {
            let owner = seed
                .client
                .get_connection_with_timeout(std::time::Duration::from_secs(2))
                .and_then(|mut c| {
                    redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query::<redis::Value>(&mut c)
                });
            match owner {
                Ok(v) => match super::slots::SlotMap::from_cluster_slots(&v, &seed.addr)
                    .as_ref()
                    .and_then(|map| map.owner(slot))
                {
                    Some(addr) => return self.node(addr),
                    None => {
                        last_error = anyhow::anyhow!("{}: slot {slot} has no master", seed.addr)
                    }
                },
                Err(e) => last_error = anyhow::Error::new(e).context(seed.addr.clone()),
            }
        }
        Err(last_error.context(format!(
            "finding the master of slot {slot} in {}",
            self.shown
        )))
    }

    /// How to reach the node `addr` (`host:port`, as `CLUSTER SLOTS` or `MOVED` named it).
    pub fn node(&self, addr: &str) -> anyhow::Result<Target> {
        from_url(
            &format!("{}://{}{addr}", self.scheme, self.userinfo),
            self.ca_pem.as_deref(),
        )
    }
}

/// A Redis behind Sentinel: where the Sentinels are, the master's name, and how to reach
/// whichever Redis they name as master (the URL's credentials; the Sentinels are asked
/// without them).
#[derive(Clone)]
pub struct SentinelTarget {
    /// The Sentinels, as the `redis` crate's Sentinel client takes them (`redis://H:P`).
    sentinels: Vec<String>,
    pub master_name: String,
    /// `user:password@` as written in the URL, or empty.
    userinfo: String,
    /// The URL with its password replaced, safe to print.
    pub shown: String,
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SentinelTarget({})", self.shown)
    }
}

impl SentinelTarget {
    /// Asks the Sentinels (the first that answers) for the master's address, and checks that
    /// Redis there says it is a master (`ROLE`): a Sentinel that has not yet seen a failover
    /// cannot send writes to a replica. Called for every (re)connection, so a failover is
    /// followed on the next one.
    pub fn resolve(&self) -> anyhow::Result<Target> {
        let mut sentinel = redis::sentinel::Sentinel::build(self.sentinels.clone())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("--broker {}: the Sentinel list", self.shown))?;
        let found = sentinel.master_for(&self.master_name, None);
        let client = found.map_err(|e| anyhow::anyhow!("{e}")).with_context(|| {
            format!(
                "--broker {}: no Sentinel named a reachable master {:?}",
                self.shown, self.master_name
            )
        })?;
        let addr = match client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            other => bail!("--broker {}: the Sentinels named {other}", self.shown),
        };
        from_url(&format!("redis://{}{addr}", self.userinfo), None)
            .with_context(|| format!("--broker {}: master {addr}", self.shown))
    }
}

/// True for a `redis+sentinel://` URL.
pub fn is_sentinel(url: &str) -> bool {
    url.starts_with("redis+sentinel://")
}

/// Parses `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTERNAME`.
pub fn parse_sentinel(url: &str, ca: Option<&Path>) -> anyhow::Result<SentinelTarget> {
    let shown = redact(url);
    let expected = "expected redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTERNAME";
    if ca.is_some() {
        bail!("--broker {shown:?}: --broker-ca is not supported with Sentinel (no TLS)");
    }
    let Some(rest) = url.strip_prefix("redis+sentinel://") else {
        bail!("--broker {shown:?}: {expected}");
    };
    let (authority, name) = match rest.split_once('/') {
        Some((a, n)) => (a, n.strip_suffix('/').unwrap_or(n)),
        None => bail!("--broker {shown:?}: no master name; {expected}"),
    };
    if name.is_empty() || name.contains(['/', '?', '#', '@', ':', ',']) {
        bail!("--broker {shown:?}: {name:?} is not a master name; {expected}");
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), authority),
    };
    let mut sentinels = Vec::new();
    for host in hosts.split(',') {
        let port = host.rsplit_once(':').and_then(|(h, p)| {
            (!h.is_empty()).then_some(())?;
            p.parse::<u16>().ok()
        });
        if port.is_none() {
            bail!("--broker {shown:?}: Sentinel {host:?} is not HOST:PORT; {expected}");
        }
        sentinels.push(format!("redis://{host}"));
    }
    let target = SentinelTarget {
        sentinels,
        master_name: name.to_string(),
        userinfo,
        shown,
    };
    // The credentials must make a valid URL for the master, whichever address it has.
    from_url(&format!("redis://{}127.0.0.1:1", target.userinfo), None)
        .with_context(|| format!("--broker {:?}: {expected}", target.shown))?;
    Ok(target)
}

/// True for a `redis+cluster://` or `rediss+cluster://` URL.
pub fn is_cluster(url: &str) -> bool {
    url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
}

/// Parses `redis+cluster://[USER:PASSWORD@]H1:P1,H2:P2,…` (`rediss+cluster://` for TLS). A
/// cluster has one database, so no `/DB`.
pub fn parse_cluster(url: &str, ca: Option<&Path>) -> anyhow::Result<ClusterTarget> {
    let shown = redact(url);
    let expected = "expected redis+cluster://[USER:PASSWORD@]HOST:PORT,HOST:PORT,… \
                    or rediss+cluster://…";
    let (scheme, rest) = match url.split_once("+cluster://") {
        Some(("redis", rest)) => ("redis", rest),
        Some(("rediss", rest)) => ("rediss", rest),
        _ => bail!("--broker {shown:?}: {expected}"),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') || rest.contains('#') {
        bail!(
            "--broker {shown:?}: a Redis Cluster has one database: no /DB or options; {expected}"
        );
    }
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((u, h)) => (format!("{u}@"), h),
        None => (String::new(), rest),
    };
    let mut cluster = ClusterTarget {
        seeds: Vec::new(),
        scheme,
        userinfo,
        ca_pem: read_ca(ca)?,
        shown: shown.clone(),
    };
    for host in hosts.split(',') {
        if host.is_empty() || !host.contains(':') {
            bail!("--broker {shown:?}: {host:?} is not HOST:PORT; {expected}");
        }
        let seed = cluster
            .node(host)
            .with_context(|| format!("--broker {shown:?}: seed node {host:?}"))?;
        cluster.seeds.push(seed);
    }
    Ok(cluster)
}

/// Parses `--broker` (and `--broker-ca`, which only `rediss://` may use).
pub fn parse(url: &str, ca: Option<&Path>) -> anyhow::Result<Target> {
    from_url(url, read_ca(ca)?.as_deref())
}

/// `--broker-ca`'s contents.
fn read_ca(ca: Option<&Path>) -> anyhow::Result<Option<Vec<u8>>> {
    ca.map(|path| {
        std::fs::read(path)
            .with_context(|| format!("--broker-ca {}: reading the CA file", path.display()))
    })
    .transpose()
}

/// [`parse`] with the CA's PEM already read.
fn from_url(url: &str, ca_pem: Option<&[u8]>) -> anyhow::Result<Target> {
    let shown = redact(url);
    let expected = "expected redis://[USER:PASSWORD@]HOST:PORT[/DB] or rediss://…";
    let info = redis::IntoConnectionInfo::into_connection_info(url)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("--broker {shown:?}: {expected}"))?;
    let (addr, tls) = match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => {
            if ca_pem.is_some() {
                bail!("--broker-ca needs a rediss:// (TLS) broker URL, not {shown:?}");
            }
            (format!("{host}:{port}"), None)
        }
        redis::ConnectionAddr::TcpTls {
            host,
            port,
            insecure,
            ..
        } => {
            if *insecure {
                bail!(
                    "--broker {shown:?}: #insecure (no certificate check) is not supported; \
                     trust a private CA with --broker-ca instead"
                );
            }
            let name = ServerName::try_from(host.clone()).with_context(|| {
                format!("--broker {shown:?}: {host:?} is not a TLS server name")
            })?;
            let config = tls_config(ca_pem)
                .with_context(|| format!("--broker {shown:?}: setting up TLS"))?;
            (format!("{host}:{port}"), Some((config, name)))
        }
        other => {
            bail!("--broker {shown:?}: {other} is not supported (redis:// or rediss:// over TCP)")
        }
    };
    let settings = info.redis_settings();
    let username = settings.username().map(str::to_string);
    let password = settings.password().map(str::to_string);
    let db = settings.db();
    let client = match ca_pem {
        Some(pem) => redis::Client::build_with_tls(
            info.clone(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        ),
        None => redis::Client::open(info.clone()),
    }
    .map_err(|e| anyhow::anyhow!("{e}"))
    .with_context(|| format!("--broker {shown:?}: {expected}"))?;
    Ok(Target {
        client,
        addr,
        db,
        username,
        password,
        tls,
        shown,
    })
}

/// The pub/sub connection's TLS: the private CA when given, else the system's roots (the
/// same choice the `redis` crate makes for the command connection).
fn tls_config(ca_pem: Option<&[u8]>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    crate::tls::client_config(ca_pem, "--broker-ca")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(
            redact("redis://alice:s3cret@h:6379/2"),
            "redis://alice:***@h:6379/2"
        );
        assert_eq!(redact("rediss://:s3cret@h:6380"), "rediss://:***@h:6380");
        assert_eq!(redact("redis://h:6379/0"), "redis://h:6379/0");
        assert_eq!(redact("redis://alice@h"), "redis://alice@h");
        assert_eq!(redact("not a url"), "not a url");
        let t = parse("redis://alice:s3cret@127.0.0.1:6379/3", None).unwrap();
        assert_eq!(t.password.as_deref(), Some("s3cret"));
        assert_eq!(t.username.as_deref(), Some("alice"));
        assert_eq!(t.db, 3);
        assert!(!format!("{t:?}").contains("s3cret"));
        let e = parse("redis://:s3cret@127.0.0.1:6379/x", None).unwrap_err();
        assert!(!format!("{e:#}").contains("s3cret"), "{e:#}");
    }

    #[test]
    fn cluster_urls_name_seeds_and_hide_passwords() {
        let url = "redis+cluster://alice:s3cret@127.0.0.1:7000,127.0.0.1:7001";
        assert_eq!(
            redact(url),
            "redis+cluster://alice:***@127.0.0.1:7000,127.0.0.1:7001"
        );
        assert!(is_cluster(url) && !is_cluster("redis://h:1"));
        let c = parse_cluster(url, None).unwrap();
        assert_eq!(c.seeds.len(), 2);
        assert_eq!(c.seeds[1].addr, "127.0.0.1:7001");
        assert_eq!(c.seeds[1].password.as_deref(), Some("s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
        let n = c.node("127.0.0.1:7005").unwrap();
        assert_eq!(
            (n.addr.as_str(), n.username.as_deref()),
            ("127.0.0.1:7005", Some("alice"))
        );
        for bad in [
            "redis+cluster://:pw@127.0.0.1:7000/2",
            "redis+cluster://:pw@127.0.0.1",
            "redis+cluster://:pw@",
            "http+cluster://:pw@127.0.0.1:1",
        ] {
            let e = parse_cluster(bad, None).unwrap_err();
            assert!(!format!("{e:#}").contains("pw@"), "{e:#}");
        }
    }

    #[test]
    fn sentinel_urls_name_sentinels_and_a_master() {
        let url = "redis+sentinel://:s3cret@127.0.0.1:26379,127.0.0.1:26380/mymaster";
        assert!(is_sentinel(url) && !is_sentinel("redis://h:1"));
        let t = parse_sentinel(url, None).unwrap();
        assert_eq!(t.master_name, "mymaster");
        assert_eq!(t.sentinels.len(), 2);
        assert_eq!(
            t.shown,
            "redis+sentinel://:***@127.0.0.1:26379,127.0.0.1:26380/mymaster"
        );
        assert!(!format!("{t:?}").contains("s3cret"));
        for bad in [
            "redis+sentinel://:pw@127.0.0.1:26379",
            "redis+sentinel://:pw@127.0.0.1:26379/",
            "redis+sentinel://:pw@127.0.0.1/m",
            "redis+sentinel://:pw@127.0.0.1:26379/m/2",
            "redis+sentinel://:pw@:26379/m",
        ] {
            let e = parse_sentinel(bad, None).unwrap_err();
            assert!(!format!("{e:#}").contains("pw@"), "{e:#}");
        }
        let e = parse_sentinel("redis+sentinel://h:1/m", Some(Path::new("/x"))).unwrap_err();
        assert!(format!("{e:#}").contains("--broker-ca"), "{e:#}");
    }

    #[test]
    fn the_ca_needs_tls() {
        let e = parse("redis://127.0.0.1:6379", Some(Path::new("/nonexistent"))).unwrap_err();
        assert!(format!("{e:#}").contains("--broker-ca"), "{e:#}");
        let e = parse("rediss://127.0.0.1:6379/#insecure", None).unwrap_err();
        assert!(format!("{e:#}").contains("insecure"), "{e:#}");
    }
}
