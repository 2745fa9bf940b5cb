//! Gathers what the checks judge: two counter samples an interval apart, the listeners and
//! outgoing-port use (sock_diag live, /proc/net/tcp under a fake root), every process's fd
//! use against its RLIMIT_NOFILE, and the kernel log before and after.
//!
//! Split into [`Ctx::begin`] and [`Pending::finish`] so tests can change a fake tree between
//! the two samples and see a counter rise.

use super::kmsg::{self, Record};
use super::recommend::plan_for;
use super::sample::{read_rel, sysctl_nums, Sample};
use crate::params::Role;
use crate::root::Root;
use crate::sockets::source::{self, SockRow};
use crate::tune::calc::{Host, Plan};
use anyhow::{Context, Result};
use c1m_sys::sock_diag::{StateMask, TcpState};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// A listening socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub local: SocketAddr,
    /// Connections waiting to be accepted now.
    pub queued: u32,
    /// The backlog in force (min of listen()'s argument and somaxconn); None when the source
    /// (/proc/net/tcp) does not say.
    pub backlog: Option<u32>,
}

/// How many local ports one source address uses towards one destination. With
/// IP_BIND_ADDRESS_NO_PORT (or a plain connect()) a port is taken per 4-tuple, so this pair
/// is the budget; whether its TIME-WAIT sockets count depends on tcp_tw_reuse (the check
/// decides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortUse {
    pub source: IpAddr,
    pub dest: SocketAddr,
    /// Sockets in every state but TIME-WAIT (and listening).
    pub used: u64,
    /// TIME-WAIT sockets of the pair.
    pub time_wait: u64,
}

/// One process's descriptors against its soft limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcFd {
    pub pid: u32,
    pub comm: String,
    pub open: u64,
    pub soft: u64,
    pub hard: u64,
}

/// Everything the checks read.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub root: Root,
    pub live: bool,
    pub target_conns: Option<u64>,
    /// What the box does; role-specific recommendations are judged for it.
    pub role: Role,
    pub interval: Duration,
    pub before: Sample,
    pub after: Sample,
    /// None when sockets could not be listed (reported by the checks as skipped).
    pub listeners: Option<Vec<Listener>>,
    /// Why sockets could not be listed.
    pub sockets_error: Option<String>,
    /// Outgoing port use per (source, destination), largest first; None when unknown.
    pub port_use: Option<Vec<PortUse>>,
    pub procs: Vec<ProcFd>,
    /// Kernel log records present at the start and at the end of the interval.
    pub log_before: Option<Vec<Record>>,
    pub log_after: Option<Vec<Record>>,
    /// The tune plan for `target_conns` (the recommendations checks compare against).
    pub plan: Option<Plan>,
    /// Why there is no plan although a target was given.
    pub plan_error: Option<String>,
    /// RAM, CPUs, page size and object sizes of the box (None when meminfo is unreadable).
    pub host: Option<Host>,
    /// RX ring (current, maximum) per interface, from `ethtool -g` on a live box.
    pub rings: BTreeMap<String, (u64, u64)>,
}

/// The first half of a [`Ctx`]: taken at the start of the interval.
pub struct Pending {
    root: Root,
    started: Instant,
    before: Sample,
    log_before: Option<Vec<Record>>,
}

impl Ctx {
    /// Takes the first sample now.
    pub fn begin(root: &Root) -> Result<Pending> {
        let live = root.is_live();
        Ok(Pending {
            root: root.clone(),
            started: Instant::now(),
            before: Sample::read(root)?,
            log_before: kmsg::read_log(root, live),
        })
    }

    /// begin, sleep `interval`, finish.
    pub fn collect(
        root: &Root,
        target_conns: Option<u64>,
        role: Role,
        interval: Duration,
    ) -> Result<Ctx> {
        let p = Ctx::begin(root)?;
        std::thread::sleep(interval);
        p.finish_as(target_conns, role)
    }

    /// A sysctl under this root.
    pub fn sysctl_nums(&self, key: &str) -> Result<Vec<u64>> {
        sysctl_nums(&self.root, key)
    }

    /// A one-value sysctl under this root.
    pub fn sysctl_u64(&self, key: &str) -> Result<u64> {
        super::sample::sysctl_u64(&self.root, key)
    }
}

impl Pending {
    /// Takes the second sample and everything else, for a server.
    pub fn finish(self, target_conns: Option<u64>) -> Result<Ctx> {
        self.finish_as(target_conns, Role::Server)
    }

    /// Takes the second sample and everything else; recommendations are for `role`.
    pub fn finish_as(self, target_conns: Option<u64>, role: Role) -> Result<Ctx> {
        let root = self.root;
        let live = root.is_live();
        let after = Sample::read(&root)?;
        let log_after = kmsg::read_log(&root, live);
        let (listeners, port_use, sockets_error) = match read_sockets(&root) {
            Ok((l, p)) => (Some(l), p, None),
            Err(e) => (None, None, Some(format!("{e:#}"))),
        };
        let (plan, plan_error) = match target_conns.map(|n| plan_for(&root, n, role)) {
            None => (None, None),
            Some(Ok(p)) => (Some(p), None),
            Some(Err(e)) => (None, Some(format!("{e:#}"))),
        };
        let rings = after
            .nic
            .keys()
            .filter_map(|i| Some((i.clone(), super::nic::ring(&root, i)?)))
            .collect();
        Ok(Ctx {
            host: crate::tune::host(&root, "auto").ok(),
            rings,
            plan,
            plan_error,
            procs: read_procs(&root),
            interval: self.started.elapsed(),
            root,
            live,
            target_conns,
            role,
            before: self.before,
            after,
            listeners,
            sockets_error,
            port_use,
            log_before: self.log_before,
            log_after,
        })
    }
}

/// Listeners, and outgoing port use when ip_local_port_range is readable.
fn read_sockets(root: &Root) -> Result<(Vec<Listener>, Option<Vec<PortUse>>)> {
    let live = root.is_live();
    let mut listeners = Vec::new();
    source::for_each(root, StateMask::of(&[TcpState::Listen]), |r| {
        listeners.push(Listener {
            local: r.local,
            queued: r.rqueue,
            backlog: live.then_some(r.wqueue),
        })
    })?;
    let Ok(range) = sysctl_nums(root, "net.ipv4.ip_local_port_range") else {
        return Ok((listeners, None));
    };
    let (lo, hi) = match range[..] {
        [lo, hi] => (lo as u16, hi as u16),
        _ => return Ok((listeners, None)),
    };
    // A socket whose local port is a listening port is the server side of an accepted
    // connection, not an outgoing one, even when the listener sits inside the ephemeral range.
    let listening: HashSet<u16> = listeners.iter().map(|l| l.local.port()).collect();
    let not_listen = StateMask(StateMask::ALL.0 & !TcpState::Listen.bit());
    let mut use_map: HashMap<(IpAddr, SocketAddr), (u64, u64)> = HashMap::new();
    let time_wait = TcpState::TimeWait as u8;
    source::for_each(root, not_listen, |r: &SockRow| {
        let p = r.local.port();
        if p >= lo && p <= hi && !listening.contains(&p) {
            let e = use_map.entry((r.local.ip(), r.remote)).or_default();
            if r.state == time_wait {
                e.1 += 1;
            } else {
                e.0 += 1;
            }
        }
    })?;
    let mut port_use: Vec<PortUse> = use_map
        .into_iter()
        .map(|((source, dest), (used, time_wait))| PortUse {
            source,
            dest,
            used,
            time_wait,
        })
        .collect();
    port_use.sort_by_key(|u| std::cmp::Reverse(u.used + u.time_wait));
    Ok((listeners, Some(port_use)))
}

/// Every readable /proc/PID: open descriptors and the RLIMIT_NOFILE in force.
fn read_procs(root: &Root) -> Vec<ProcFd> {
    let Ok(dir) = std::fs::read_dir(root.path("/proc")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for ent in dir.flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // Processes come and go, and some are not ours to read: skip them quietly.
        if let Ok(p) = read_proc(root, pid) {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    out
}

fn read_proc(root: &Root, pid: u32) -> Result<ProcFd> {
    let limits = read_rel(root, &format!("proc/{pid}/limits"))?;
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .context("no Max open files line")?;
    let nums: Vec<&str> = line["Max open files".len()..].split_whitespace().collect();
    let lim = |s: Option<&&str>| -> Result<u64> {
        let s = s.context("short limits line")?;
        Ok(if *s == "unlimited" {
            u64::MAX
        } else {
            s.parse()?
        })
    };
    let (soft, hard) = (lim(nums.first())?, lim(nums.get(1))?);
    let open = std::fs::read_dir(root.path(format!("/proc/{pid}/fd")))?.count() as u64;
    let comm = read_rel(root, &format!("proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Ok(ProcFd {
        pid,
        comm,
        open,
        soft,
        hard,
    })
}
