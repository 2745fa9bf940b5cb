//! The parameter knowledge base: one table ([`PARAMS`]) with an entry per sysctl, limit or
//! knob the field notes (../shared/seeds/) touch, plus those they missed. The calculator,
//! `--check`, `--apply`, `--revert` and `explain` all read this table and nothing else, so a
//! fact lives in exactly one place.
//!
//! Owns: the types of an entry and the lookup by key. The entries themselves are in
//! [`table`]; how a [`Rule`] turns RAM, CPUs, role and target connections into a value is in
//! `tune::calc` (the table names the rule, the calculator implements it).

mod table;

pub use table::PARAMS;

use serde::Serialize;

/// What the box does with its connections; decides which keys apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Accepts connections (the push gateway).
    Server,
    /// Opens connections (a load generator).
    Client,
    /// Accepts and opens one upstream connection per client connection.
    Proxy,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Proxy => "proxy",
        }
    }
}

/// Where the setting lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A file under /proc/sys, persisted in /etc/sysctl.d/.
    Sysctl,
    /// A pam_limits line in /etc/security/limits.d/ (login sessions only).
    Limits,
    /// A systemd unit setting (services do not read limits.d).
    Systemd,
    /// Set with another tool (ip route, ethtool); c1m only explains it.
    Other,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sysctl => "sysctl",
            Kind::Limits => "pam limits",
            Kind::Systemd => "systemd",
            Kind::Other => "other tool",
        }
    }
}

/// c1m's verdict on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// c1m sizes and writes it.
    Recommend,
    /// c1m raises it when needed and never writes a value below the kernel's own.
    NeverLower,
    /// Setting it (to the value the field notes use) hurts; c1m refuses and repairs it.
    Harmful,
    /// The kernel removed it; c1m refuses and warns when a config file still sets it.
    Obsolete,
    /// Shown with sizing notes, not written.
    Inform,
    /// No bearing on holding connections; leave the kernel default.
    Ignore,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Recommend => "recommend",
            Verdict::NeverLower => "never-lower",
            Verdict::Harmful => "harmful",
            Verdict::Obsolete => "obsolete",
            Verdict::Inform => "inform",
            Verdict::Ignore => "ignore",
        }
    }

    /// Whether c1m writes a value for this key.
    pub fn writes(self) -> bool {
        matches!(self, Verdict::Recommend | Verdict::NeverLower)
    }
}

/// Unit of the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    /// File descriptors.
    Descriptors,
    /// Pages of the kernel's base page size (three values: min pressure max).
    Pages,
    /// Bytes (three values for tcp_rmem/tcp_wmem: min default max).
    Bytes,
    Seconds,
    /// A switch (0/1/2 with documented meanings).
    Switch,
    /// A port range (low high).
    Ports,
    /// Sockets or pending connections.
    Sockets,
    /// Table entries (conntrack, epoll watches).
    Entries,
    /// Packets (per-CPU queues).
    Packets,
    /// Segments (TCP congestion window).
    Segments,
    /// A count or a flag that is not about networking.
    Other,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Descriptors => "descriptors",
            Unit::Pages => "pages",
            Unit::Bytes => "bytes",
            Unit::Seconds => "seconds",
            Unit::Switch => "switch",
            Unit::Ports => "ports",
            Unit::Sockets => "sockets",
            Unit::Entries => "entries",
            Unit::Packets => "packets",
            Unit::Segments => "segments",
            Unit::Other => "other",
        }
    }
}

/// How c1m computes the recommended value (implemented in `tune::calc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// Nothing to compute.
    None,
    /// A fixed value for every box.
    Fixed(&'static str),
    /// Per-process RLIMIT_NOFILE: next power of two ≥ descriptors + reserve.
    Nofile,
    /// fs.nr_open ≥ nofile, never below the kernel default.
    NrOpen,
    /// fs.file-max ≥ total descriptors + 25 %, never below the kernel default.
    FileMax,
    /// tcp_mem from connections × buffered bytes, kernel shape, never below the default.
    TcpMem,
    /// somaxconn for reconnect storms.
    Somaxconn,
    /// Widened ephemeral port range.
    PortRange,
    /// tcp_max_orphans from sockets.
    MaxOrphans,
    /// tcp_max_tw_buckets from sockets.
    MaxTwBuckets,
    /// nf_conntrack_max from sockets, only when conntrack is loaded.
    ConntrackMax,
    /// nf_conntrack_buckets = nf_conntrack_max (the kernel's own factor of one), with it.
    ConntrackBuckets,
    /// epoll max_user_watches from sockets.
    EpollWatches,
}

/// How `--check` compares the live value with the recommended one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Compare {
    /// Higher is fine (element-wise for triples, on the last value for tcp_mem's max).
    AtLeast,
    /// Must equal.
    Exact,
    /// The live range must contain the recommended one.
    WiderRange,
    /// Not compared (informational and ignored keys).
    None,
}

/// When a live or configured value is harmful.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Harm {
    Never,
    /// Harmful when the value equals this.
    Equals(&'static str),
    /// Harmful when the value is anything but this.
    NotEquals(&'static str),
    /// Harmful when below half the kernel's own default (someone lowered it, e.g. 5000).
    BelowHalfDefault,
}

/// How the kernel computes the default (estimated by `tune::calc` from RAM and page size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelDefault {
    /// Not estimated (read the live value).
    Unknown,
    /// A constant.
    Fixed(&'static str),
    /// Half the TCP established hash size (tcp_max_orphans, tcp_max_tw_buckets).
    EhashHalf,
    /// max(128, ehash entries / 128).
    EhashSynBacklog,
    /// 10 % of RAM in KiB (one file per KiB), at least 8192.
    FileMax,
    /// nr_free_buffer_pages / 16 as pressure, 3/4 of it as min, twice min as max.
    TcpMem,
    /// 4 % of low memory / the per-watch cost.
    EpollWatches,
    /// Hash buckets from RAM (`nf_conntrack_init_start`): RAM/131072 up to 1 GiB, 65536 up
    /// to 4 GiB, 262144 above, at least 1024; max = buckets.
    Conntrack,
}

/// English text and its Chinese rendering (`--lang zh`); an empty `zh` falls back to English.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Text {
    pub en: &'static str,
    pub zh: &'static str,
}

/// Output language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

impl Text {
    pub fn get(&self, lang: Lang) -> &'static str {
        match lang {
            Lang::Zh if !self.zh.is_empty() => self.zh,
            _ => self.en,
        }
    }
}

/// One entry of the knowledge base.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Param {
    /// `net.ipv4.tcp_mem`, or `limits.nofile`, `systemd.LimitNOFILE`, `route.initcwnd`.
    pub key: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub verdict: Verdict,
    /// Roles the recommendation applies to; empty means every role.
    pub roles: &'static [Role],
    pub rule: Rule,
    pub compare: Compare,
    pub harm: Harm,
    pub default: KernelDefault,
    /// The safe value `--apply` writes when the live value is harmful (harm-only keys).
    pub fix: Option<&'static str>,
    /// The sysctl is per network namespace and writable there: a container with its own
    /// network (`docker run --sysctl`) sets its own value. Every other key is host-wide and is
    /// set on the host.
    pub netns: bool,
    /// Kernel (or systemd) version that added the key, when it matters.
    pub added: Option<&'static str>,
    /// Kernel version that removed the key.
    pub removed: Option<&'static str>,
    /// What the kernel really does with it today.
    pub meaning: Text,
    /// How the kernel computes its default.
    pub kernel_default: Text,
    /// How c1m sizes it.
    pub sizing: Text,
    /// What goes wrong when it is set badly.
    pub danger: Text,
    /// The one-line why printed next to the value.
    pub why: Text,
    /// What the field notes set it to, and which note.
    pub seeds: &'static str,
    /// Where every number above comes from: kernel file and function, commit, documentation
    /// page, or the measurement command (`tune explain KEY` prints it).
    pub source: &'static str,
}

impl Param {
    /// Whether the recommendation applies to `role`.
    pub fn applies_to(&self, role: Role) -> bool {
        self.roles.is_empty() || self.roles.contains(&role)
    }
}

/// Finds an entry by key. Accepts `net.ipv4.tcp_mem`, `net/ipv4/tcp_mem`, the last part alone
/// (`tcp_mem`) when unambiguous, and any case.
pub fn lookup(key: &str) -> Option<&'static Param> {
    let want = key
        .trim()
        .trim_matches('/')
        .replace('/', ".")
        .to_ascii_lowercase();
    if let Some(p) = PARAMS.iter().find(|p| p.key.to_ascii_lowercase() == want) {
        return Some(p);
    }
    let mut tail = PARAMS
        .iter()
        .filter(|p| p.key.rsplit('.').next().map(str::to_ascii_lowercase) == Some(want.clone()));
    match (tail.next(), tail.next()) {
        (Some(p), None) => Some(p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_unique() {
        let mut seen = HashSet::new();
        for p in PARAMS {
            assert!(seen.insert(p.key), "duplicate key {}", p.key);
        }
    }

    #[test]
    fn entries_are_consistent() {
        for p in PARAMS {
            assert!(!p.meaning.en.is_empty(), "{} has no meaning", p.key);
            assert!(!p.why.en.is_empty(), "{} has no why", p.key);
            // Every threshold says where it comes from.
            assert!(!p.source.is_empty(), "{} has no source", p.key);
            // The field notes are Chinese: every entry explains itself in Chinese too.
            assert!(!p.meaning.zh.is_empty(), "{} has no zh meaning", p.key);
            assert!(!p.why.zh.is_empty(), "{} has no zh why", p.key);
            if !p.sizing.en.is_empty() && p.verdict.writes() {
                assert!(!p.sizing.zh.is_empty(), "{} has no zh sizing", p.key);
            }
            if p.verdict.writes() {
                assert_ne!(p.rule, Rule::None, "{} is written but has no rule", p.key);
                assert_ne!(
                    p.compare,
                    Compare::None,
                    "{} is written but not compared",
                    p.key
                );
            }
            if p.verdict == Verdict::Obsolete {
                assert!(p.removed.is_some(), "{} obsolete without a version", p.key);
            }
            if matches!(p.verdict, Verdict::Harmful | Verdict::Obsolete) {
                assert_eq!(p.rule, Rule::None, "{} is refused yet has a rule", p.key);
            }
            if p.harm == Harm::BelowHalfDefault {
                assert!(
                    !matches!(p.default, KernelDefault::Unknown),
                    "{} needs a default estimate",
                    p.key
                );
            }
            if p.kind == Kind::Sysctl {
                crate::root::sysctl_rel_path(p.key).unwrap();
            }
        }
    }

    #[test]
    fn lookup_forms() {
        assert_eq!(lookup("net.ipv4.tcp_mem").unwrap().key, "net.ipv4.tcp_mem");
        assert_eq!(lookup("net/ipv4/tcp_mem").unwrap().key, "net.ipv4.tcp_mem");
        assert_eq!(
            lookup("tcp_tw_recycle").unwrap().key,
            "net.ipv4.tcp_tw_recycle"
        );
        assert_eq!(lookup("limitnofile").unwrap().key, "systemd.LimitNOFILE");
        assert!(lookup("no_such_key").is_none());
    }
}
