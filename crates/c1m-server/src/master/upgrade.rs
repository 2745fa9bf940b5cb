//! Live binary upgrade, master side (docs/upgrade.md has the protocol and its failure modes).
//!
//! Old master, on SIGUSR2: starts the binary now at the path it was started from, with the
//! same arguments and a control socket (`C1M_UPGRADE_FD`); hello and format check; freezes
//! publishing (503 + Retry-After) and the workers; sends the hub (ids, history, interest);
//! tells each worker to hand its listeners and connections to the new worker of the same
//! index; once every worker reports all sent, commits (new master first, then the workers) and
//! exits when its workers have. Any failure before the commit, or the timeout, aborts: the new
//! processes are told (or killed), the old workers thaw and serve on, publishing resumes.
//!
//! New master ([`take_over`]): answers the hello (refusing another format), takes the hub,
//! starts its workers in hand-over mode, and serves once the old master commits.
//!
//! The master waits for the steps synchronously, still answering its workers' frames (status,
//! joins) in between; everything is bounded by `--upgrade-timeout`.

use super::{Master, Plan};
use crate::config::{Config, ServeArgs};
use crate::ipc::ToWorker;
use anyhow::{bail, Context};
use c1m_proto::handover::{Control, HubState, FORMAT_VERSION};
use mio::{Events, Token};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The control socket's descriptor number in the new master.
pub const ENV_UPGRADE_FD: &str = "C1M_UPGRADE_FD";
/// The old master's port reservations, passed on (`h=SOCK,CLAIM;t=…;a=…`).
pub const ENV_UPGRADE_RESERVED: &str = "C1M_UPGRADE_RESERVED";
/// Test hook (serve_upgrade's version test): the format version the old master announces.
pub const ENV_TEST_FORMAT: &str = "C1M_TEST_HANDOVER_FORMAT";
/// Largest control message accepted (the hub is bounded by --history-max-bytes).
const MAX_CONTROL: usize = 1 << 31;

/// Upgrade outcomes, carried from each master generation to the next (`/status` `upgrades`,
/// `/metrics` `c1m_upgrades_*_total`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub attempted: u64,
    pub completed: u64,
    pub failed: u64,
}

/// The old master's view of a hand-over in progress, fed by its workers' frames.
pub struct Progress {
    pub prepared: Vec<bool>,
    pub sent: Vec<Option<u64>>,
    pub failed: Option<String>,
}

/// What a failed attempt must clean up.
#[derive(Default)]
struct Attempt {
    child: Option<Child>,
    ctl: Option<UnixStream>,
}

fn write_msg(s: &mut UnixStream, msg: &Control) -> anyhow::Result<()> {
    let body = msg.encode();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    s.write_all(&frame).context("writing to the other master")
}

fn read_msg(s: &mut UnixStream) -> anyhow::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .context("reading from the other master (gone or too slow)")?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_CONTROL {
        bail!("control message of {len} bytes refused");
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .context("reading from the other master (gone or too slow)")?;
    Ok(body)
}

fn bound(s: &UnixStream, deadline: Instant) -> anyhow::Result<()> {
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    s.set_write_timeout(Some(left))?;
    Ok(())
}

impl Master {
    /// SIGUSR2.
    pub(super) fn upgrade(&mut self) {
        if self.handover.is_some() || self.shutdown_deadline.is_some() {
            tracing::warn!("upgrade: already upgrading or shutting down; SIGUSR2 ignored");
            return;
        }
        self.upgrades.attempted += 1;
        let started = Instant::now();
        let deadline = started + self.cfg.upgrade_timeout;
        tracing::info!(exe = %self.exe.display(), timeout = ?self.cfg.upgrade_timeout, "upgrade: starting");
        let mut attempt = Attempt::default();
        match self.hand_over(deadline, &mut attempt) {
            Ok(conns) => {
                self.upgrades.completed += 1;
                let new_pid = attempt.child.as_ref().map_or(0, |c| c.id());
                tracing::info!(
                    conns,
                    new_master = new_pid,
                    took_ms = started.elapsed().as_millis() as u64,
                    "upgrade: committed; the old master exits once its workers have"
                );
                // Under systemd (Type=notify) the new master becomes the service's main process.
                if let Some(n) = &self.notifier {
                    n.send(&format!("MAINPID={new_pid}"));
                }
                // No restart from here; the loop ends when the old workers are gone.
                self.shutdown_deadline = Some(Instant::now() + Duration::from_secs(10));
                // The new master is on its own (re-parented when we exit); not waited for.
                drop(attempt);
            }
            Err(e) => self.upgrade_failed(e, attempt),
        }
    }

    fn hand_over(&mut self, deadline: Instant, att: &mut Attempt) -> anyhow::Result<u64> {
        if self.cfg.tls_cert.is_some() {
            bail!(
                "TLS sessions cannot move to another process on this kernel (no kernel TLS); \
                 restart instead (clients resume with Last-Event-ID)"
            );
        }
        if self.broker.stats().kind != "memory" {
            bail!("live upgrade needs the in-process hub; the cluster broker cannot hand over");
        }
        if self
            .slots
            .iter()
            .any(|s| s.link.is_none() || s.child.is_none())
        {
            bail!("a worker is restarting; try again");
        }
        let (ctl, theirs) = UnixStream::pair()?;
        c1m_sys::fd::set_inheritable(&theirs)?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args)
            .env(ENV_UPGRADE_FD, theirs.as_raw_fd().to_string())
            .env(
                crate::upgrade_cli::ENV_UPGRADE_FROM,
                std::process::id().to_string(),
            )
            .stdin(Stdio::null());
        if let Some(r) = &self.reserved_env {
            cmd.env(ENV_UPGRADE_RESERVED, r);
            for fd in &self.reserved_fds {
                c1m_sys::fd::set_inheritable(fd)?;
            }
        }
        let spawned = cmd.spawn();
        for fd in &self.reserved_fds {
            c1m_sys::fd::set_cloexec(fd)?;
        }
        let child = spawned.with_context(|| format!("starting {}", self.exe.display()))?;
        drop(theirs);
        let new_pid = child.id();
        att.child = Some(child);
        let ctl = att.ctl.insert(ctl);
        bound(ctl, deadline)?;
        let format = std::env::var(ENV_TEST_FORMAT)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(FORMAT_VERSION);
        let hello = Control::Hello {
            format,
            old_pid: std::process::id(),
            workers: self.slots.len() as u32,
            listen: self.cfg.listen.to_string(),
            tcp_listen: self.cfg.tcp_listen.map(|a| a.to_string()),
            admin_listen: self.cfg.admin_listen.map(|a| a.to_string()),
            control_worker: self.control_slot().is_some(),
        };
        write_msg(ctl, &hello)?;
        match Control::decode(&read_msg(ctl)?)? {
            Control::Accept { pid, version } => {
                tracing::info!(
                    new_master = pid,
                    version,
                    "upgrade: the new binary accepted"
                )
            }
            Control::Refuse { reason } => bail!("the new binary refused: {reason}"),
            other => bail!("unexpected answer to hello: {other:?}"),
        }

        // Freeze: from here no publish is taken until the new master has the hub.
        let n = self.slots.len();
        self.handover = Some(Progress {
            prepared: vec![false; n],
            sent: vec![None; n],
            failed: None,
        });
        tracing::info!("upgrade: publishing paused (503 + Retry-After); freezing the workers");
        for i in 0..n {
            self.send(i, ToWorker::HandOverPrepare.encode());
        }
        self.wait_workers(deadline, att, |p| p.prepared.iter().all(|&x| x))?;

        let history = self
            .broker
            .export_history(Instant::now())
            .context("the broker cannot export its history")?;
        let state = HubState {
            last_id: history.last_id,
            forgotten_through: history.forgotten_through,
            channels: history.channels,
            lost_buckets: history.lost_buckets,
            interest: self
                .interest
                .iter()
                .map(|(c, ws)| (c.clone(), ws.iter().map(|&w| w as u32).collect()))
                .collect(),
            published: self.published,
            publish_refused: self.publish_refused,
            upgrades_attempted: self.upgrades.attempted,
            upgrades_completed: self.upgrades.completed,
            upgrades_failed: self.upgrades.failed,
        };
        let ctl = att.ctl.as_mut().expect("set above");
        bound(ctl, deadline)?;
        write_msg(ctl, &Control::Hub(Box::new(state)))?;
        match Control::decode(&read_msg(ctl)?)? {
            Control::HubTaken => {}
            Control::Refuse { reason } => bail!("the new master refused the hub: {reason}"),
            other => bail!("unexpected answer to the hub: {other:?}"),
        }
        tracing::info!("upgrade: hub handed over; workers hand over their connections");
        let timeout_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        for i in 0..n {
            let go = ToWorker::HandOverGo {
                name: crate::worker::handover_name(std::process::id(), i),
                new_master_pid: new_pid,
                timeout_ms,
            };
            self.send(i, go.encode());
        }
        self.wait_workers(deadline, att, |p| p.sent.iter().all(Option::is_some))?;
        let conns = self
            .handover
            .as_ref()
            .map_or(0, |p| p.sent.iter().flatten().sum());
        // Commit: the new master first (if it is gone, this fails and everything aborts), then
        // the workers, each of which tells its successor and exits.
        let ctl = att.ctl.as_mut().expect("set above");
        write_msg(ctl, &Control::Commit)?;
        for i in 0..n {
            self.send(i, ToWorker::HandOverCommit.encode());
        }
        for slot in &mut self.slots {
            if let Some(link) = &mut slot.link {
                let _ = link.flush();
            }
        }
        Ok(conns)
    }

    /// Runs the worker links (only) until `done` holds for the hand-over's progress; fails on
    /// a worker's failure report or death, the new master's exit, or the deadline.
    fn wait_workers(
        &mut self,
        deadline: Instant,
        att: &mut Attempt,
        done: impl Fn(&Progress) -> bool,
    ) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(256);
        loop {
            let Some(progress) = &self.handover else {
                bail!("hand-over state lost");
            };
            if let Some(reason) = &progress.failed {
                bail!("{reason}");
            }
            if done(progress) {
                return Ok(());
            }
            if let Some(status) = att.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("the new master exited ({status})");
            }
            let now = Instant::now();
            if now >= deadline {
                bail!("timed out (--upgrade-timeout)");
            }
            let wait = (deadline - now).min(Duration::from_millis(50));
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
            for event in events.iter() {
                match event.token() {
                    // Signals stay pending; `run` reads them when the upgrade returns.
                    super::SIGNALS => {}
                    super::BROKER => self.pump(),
                    Token(i) => self.on_worker_event(i, event.is_writable()),
                }
            }
        }
    }

    fn upgrade_failed(&mut self, e: anyhow::Error, mut att: Attempt) {
        self.upgrades.failed += 1;
        let reason = format!("{e:#}");
        tracing::error!(error = %reason, "upgrade failed; the old processes serve on");
        if let Some(ctl) = &mut att.ctl {
            let _ = ctl.set_write_timeout(Some(Duration::from_millis(200)));
            let _ = write_msg(ctl, &Control::Abort { reason });
        }
        if self.handover.take().is_some() {
            for i in 0..self.slots.len() {
                self.send(i, ToWorker::HandOverAbort.encode());
            }
        }
        if let Some(mut child) = att.child.take() {
            // It exits on the abort; one that does not (hung, or never read it) is killed.
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                if child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A worker's hand-over frames.
    pub(super) fn on_handover_frame(&mut self, i: usize, frame: crate::ipc::ToMaster) {
        use crate::ipc::ToMaster;
        let Some(p) = &mut self.handover else {
            tracing::warn!(
                worker = i,
                "upgrade: hand-over report with no upgrade running"
            );
            return;
        };
        match frame {
            ToMaster::HandOverPrepared => p.prepared[i] = true,
            ToMaster::HandOverSent { conns } => p.sent[i] = Some(conns),
            ToMaster::HandOverFailed { reason } => {
                p.failed.get_or_insert(format!("worker {i}: {reason}"));
            }
            _ => {}
        }
    }

    /// A worker died while a hand-over runs: the upgrade fails (the others thaw).
    pub(super) fn handover_lost_worker(&mut self, i: usize) {
        if let Some(p) = &mut self.handover {
            p.failed.get_or_insert(format!("worker {i} died"));
        }
    }
}

/// The new master: started by the old one with `C1M_UPGRADE_FD`. Returns the exit code.
pub fn take_over(args: ServeArgs, mut cfg: Config, fd: i32) -> anyhow::Result<u8> {
    let started = Instant::now();
    let mut ctl = UnixStream::from(c1m_sys::fd::adopt_inherited(fd)?);
    let deadline = Instant::now() + cfg.upgrade_timeout;
    bound(&ctl, deadline)?;
    let hello = read_msg(&mut ctl)?;
    let (old_pid, old_slots, workers) = match Control::decode(&hello) {
        Ok(Control::Hello {
            old_pid,
            workers,
            listen,
            tcp_listen,
            admin_listen,
            control_worker,
            ..
        }) => {
            cfg.listen = listen.parse().context("listen address")?;
            cfg.tcp_listen = tcp_listen.map(|a| a.parse()).transpose()?;
            cfg.admin_listen = admin_listen.map(|a| a.parse()).transpose()?;
            let slots = workers as usize;
            // The subscriber workers: all the old slots but its control worker, if it had one.
            (
                old_pid,
                slots,
                slots - usize::from(control_worker && slots > 0),
            )
        }
        Ok(other) => bail!("expected hello, got {other:?}"),
        Err(e) => {
            let reason = format!("{e}");
            tracing::error!(error = %reason, format = ?c1m_proto::handover::hello_format(&hello), "upgrade refused: this binary cannot read the old one's hand-over");
            let _ = write_msg(&mut ctl, &Control::Refuse { reason });
            return Ok(1);
        }
    };
    let _reservations = crate::listener::adopt_reserved(
        &std::env::var(ENV_UPGRADE_RESERVED).unwrap_or_default(),
        &cfg,
    )?;
    let limit = c1m_sys::rlimit::raise_nofile_to_hard()?;
    let plan = super::plan(
        crate::config::Workers::Count(workers),
        cfg.max_conns,
        limit.hard,
        c1m_sys::process::available_cpus(),
    );
    let (version, commit) = crate::build_info();
    write_msg(
        &mut ctl,
        &Control::Accept {
            pid: std::process::id(),
            version: format!("{version} (commit {commit})"),
        },
    )?;
    let hub = match Control::decode(&read_msg(&mut ctl)?)? {
        Control::Hub(h) => h,
        Control::Abort { reason } => {
            tracing::warn!(reason, "upgrade: aborted by the old master");
            return Ok(1);
        }
        other => bail!("expected the hub, got {other:?}"),
    };
    let from = super::HandoverFrom {
        old_pid,
        deadline,
        old_slots,
    };
    let mut master = match start_workers(cfg, plan, *hub, from) {
        Ok(m) => m,
        Err(e) => {
            let reason = format!("{e:#}");
            let _ = write_msg(&mut ctl, &Control::Refuse { reason });
            return Err(e);
        }
    };
    write_msg(&mut ctl, &Control::HubTaken)?;
    tracing::info!(
        old_master = old_pid,
        "upgrade: hub taken, workers taking over"
    );
    match read_msg(&mut ctl).and_then(|m| Ok(Control::decode(&m)?)) {
        Ok(Control::Commit) => {}
        answer => {
            tracing::error!(?answer, "upgrade: not committed; the new generation exits");
            master.kill_workers();
            return Ok(1);
        }
    }
    master.upgrades.completed += 1;
    master.handover_from = None;
    master.set_reload_source(args);
    tracing::info!(
        old_master = old_pid,
        took_ms = started.elapsed().as_millis() as u64,
        "upgrade: committed; this master serves"
    );
    master.run()?;
    tracing::info!("stopped");
    Ok(0)
}

fn start_workers(
    cfg: Config,
    plan: Plan,
    hub: HubState,
    from: super::HandoverFrom,
) -> anyhow::Result<Master> {
    let mut master = Master::build(cfg, plan)?;
    let slots = master.slot_count();
    let history = crate::broker::HistoryExport {
        last_id: hub.last_id,
        forgotten_through: hub.forgotten_through,
        channels: hub.channels,
        lost_buckets: hub.lost_buckets,
    };
    if !master.broker.import_history(history, Instant::now()) {
        bail!("this master's broker cannot take the hub");
    }
    for (channel, workers) in hub.interest {
        let ws = workers
            .into_iter()
            .map(|w| w as usize)
            .filter(|&w| w < slots)
            .collect();
        master.interest.insert(channel, ws);
    }
    master.published = hub.published;
    master.publish_refused = hub.publish_refused;
    master.upgrades = Counters {
        attempted: hub.upgrades_attempted,
        completed: hub.upgrades_completed,
        failed: hub.upgrades_failed,
    };
    master.handover_from = Some(from);
    master.spawn_all()?;
    Ok(master)
}
