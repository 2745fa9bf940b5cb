//! What `c1m top` shows, computed once per tick and independent of how it is drawn: sockets by
//! state (sock_diag), per-second rates of the TCP counters doctor judges, TCP memory against
//! tcp_mem, file handles, and the doctor's findings (re-run every few seconds, since one run
//! walks every process's fd directory).

use crate::doctor::checks::pct;
use crate::doctor::sample::{sysctl_nums, Sample};
use crate::doctor::{run_checks, Ctx, Finding, Status};
use crate::root::Root;
use crate::sockets::source;
use anyhow::Result;
use c1m_sys::sock_diag::StateMask;
use std::time::{Duration, Instant};

/// Counters shown as per-second rates: (label, netstat/snmp key).
pub const RATES: &[(&str, &str)] = &[
    ("ActiveOpens", "Tcp.ActiveOpens"),
    ("PassiveOpens", "Tcp.PassiveOpens"),
    ("AttemptFails", "Tcp.AttemptFails"),
    ("EstabResets", "Tcp.EstabResets"),
    ("ListenOverflows", "TcpExt.ListenOverflows"),
    ("ListenDrops", "TcpExt.ListenDrops"),
    ("ReqQFullDrop", "TcpExt.TCPReqQFullDrop"),
    ("ReqQFullCookies", "TcpExt.TCPReqQFullDoCookies"),
    ("AbortOnMemory", "TcpExt.TCPAbortOnMemory"),
    ("MemoryPressures", "TcpExt.TCPMemoryPressures"),
    ("TimeWaitOverflow", "TcpExt.TCPTimeWaitOverflow"),
];

/// One frame's worth of figures.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// (state name, count), states with sockets only.
    pub states: Vec<(String, u64)>,
    pub total_sockets: u64,
    /// (label, per second) for [`RATES`] plus softnet drops and squeezes.
    pub rates: Vec<(&'static str, f64)>,
    /// sockstat TCP mem in pages and tcp_mem (min, pressure, max).
    pub tcp_mem: Option<(u64, [u64; 3])>,
    /// file-nr allocated and file-max.
    pub files: Option<(u64, u64)>,
    /// The doctor's last findings that are not a pass.
    pub findings: Vec<Finding>,
    /// When the findings were last refreshed (None before the first run completes).
    pub findings_age: Option<Duration>,
    /// Inputs that could not be read this tick.
    pub errors: Vec<String>,
}

/// Keeps the previous sample and the doctor's pending interval between ticks.
pub struct Model {
    root: Root,
    conns: Option<u64>,
    doctor_every: Duration,
    prev: Option<(Instant, Sample)>,
    pending: Option<(Instant, crate::doctor::ctx::Pending)>,
    findings: Vec<Finding>,
    findings_at: Option<Instant>,
}

impl Model {
    pub fn new(root: Root, conns: Option<u64>, doctor_every: Duration) -> Model {
        Model {
            root,
            conns,
            doctor_every,
            prev: None,
            pending: None,
            findings: Vec::new(),
            findings_at: None,
        }
    }

    /// Reads everything and returns the view; rates are over the time since the last tick.
    pub fn tick(&mut self) -> Result<View> {
        let mut v = View::default();
        let now = Instant::now();
        let sample = Sample::read(&self.root)?;
        match source::count_states(&self.root, StateMask::ALL, false) {
            Ok(per) => {
                for (n, &c) in per.iter().enumerate() {
                    if c > 0 {
                        v.states.push((source::state_name(n as u8), c));
                        v.total_sockets += c;
                    }
                }
            }
            Err(e) => v.errors.push(format!("sockets: {e:#}")),
        }
        if let Some((then, prev)) = &self.prev {
            let secs = now.duration_since(*then).as_secs_f64().max(1e-3);
            for (label, key) in RATES {
                v.rates.push((label, sample.delta(prev, key) as f64 / secs));
            }
            if let (Some(a), Some(b)) = (prev.softnet, sample.softnet) {
                v.rates.push((
                    "SoftnetDropped",
                    b.dropped.saturating_sub(a.dropped) as f64 / secs,
                ));
                v.rates.push((
                    "TimeSqueeze",
                    b.time_squeeze.saturating_sub(a.time_squeeze) as f64 / secs,
                ));
            }
        }
        if let (Some(&mem), Ok([a, b, c])) = (
            sample.sockstat.get("TCP.mem"),
            sysctl_nums(&self.root, "net.ipv4.tcp_mem").as_deref(),
        ) {
            v.tcp_mem = Some((mem, [*a, *b, *c]));
        }
        v.files = sample.file_nr;
        self.refresh_findings(now, &mut v);
        v.findings = self.findings.clone();
        v.findings_age = self.findings_at.map(|t| now.duration_since(t));
        self.prev = Some((now, sample));
        Ok(v)
    }

    fn refresh_findings(&mut self, now: Instant, v: &mut View) {
        let due = self
            .pending
            .as_ref()
            .is_none_or(|(t, _)| now.duration_since(*t) >= self.doctor_every);
        if !due {
            return;
        }
        if let Some((_, p)) = self.pending.take() {
            match p
                .finish(self.conns)
                .and_then(|ctx: Ctx| run_checks(&ctx, &[]))
            {
                Ok(all) => {
                    self.findings = all
                        .into_iter()
                        .filter(|f| f.status > Status::Skipped)
                        .collect();
                    self.findings.sort_by_key(|f| std::cmp::Reverse(f.status));
                    self.findings_at = Some(now);
                }
                Err(e) => v.errors.push(format!("doctor: {e:#}")),
            }
        }
        match Ctx::begin(&self.root) {
            Ok(p) => self.pending = Some((now, p)),
            Err(e) => v.errors.push(format!("doctor: {e:#}")),
        }
    }
}

/// `HH:MM:SSZ` of the wall clock (UTC), without a date library.
pub fn clock() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let d = secs % 86_400;
    format!("{:02}:{:02}:{:02}Z", d / 3600, d / 60 % 60, d % 60)
}

/// One plain line for a non-terminal (logs, pipes).
pub fn plain_line(v: &View) -> String {
    let mut s = clock();
    let states: Vec<String> = v
        .states
        .iter()
        .map(|(n, c)| format!("{}={c}", n.to_ascii_lowercase()))
        .collect();
    s.push_str(&format!(
        " sockets={} {}",
        v.total_sockets,
        states.join(" ")
    ));
    if let Some((mem, m)) = v.tcp_mem {
        s.push_str(&format!(
            " | tcp_mem {mem}p ({}% of pressure {})",
            pct(mem, m[1]),
            m[1]
        ));
    }
    if let Some((a, m)) = v.files {
        s.push_str(&format!(" | files {a}/{m}"));
    }
    let rising: Vec<String> = v
        .rates
        .iter()
        .filter(|(_, r)| *r > 0.0)
        .map(|(n, r)| format!("{n}={r:.0}"))
        .collect();
    if !rising.is_empty() {
        s.push_str(&format!(" | /s {}", rising.join(" ")));
    }
    if !v.findings.is_empty() {
        let f: Vec<String> = v
            .findings
            .iter()
            .map(|f| format!("{} {}", f.status.label(), f.check))
            .collect();
        s.push_str(&format!(" | {}", f.join(", ")));
    }
    for e in &v.errors {
        s.push_str(&format!(" | error: {e}"));
    }
    s
}
