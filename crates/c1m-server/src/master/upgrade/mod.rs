//! Live binary upgrade, master side (docs/upgrade.md has the protocol and its failure modes).
//!
//! Old master, on SIGUSR2: starts the binary now at the path it was started from, in a process
//! group of its own, with the same arguments, a control socket (`C1M_UPGRADE_FD`) and its port
//! reservations (`C1M_UPGRADE_RESERVED`); hello and format check; freezes publishing (503 +
//! Retry-After) and the workers; sends the hub (ids, history, interest); tells each worker to
//! hand its listeners and connections to the new worker of the same index; once every worker
//! reports all sent, commits (new master first, then the workers) and exits when its workers
//! have. Any failure before the commit, or the timeout, aborts: the new processes are told,
//! and killed with their whole group when they do not go (a hung binary, or whatever it
//! started, would otherwise keep the port reservations it inherited); the old workers thaw and
//! serve on, publishing resumes.
//!
//! The old master's side is a state machine ([`Run`]) stepped by the master's own loop: the
//! control socket is non-blocking and registered with the loop's poll, so while the new binary
//! starts (or hangs) publishes, joins, `/status` and `/healthz` are answered as usual, and
//! the systemd watchdog is fed. Everything is bounded by `--upgrade-timeout`.
//!
//! New master ([`take_over`]): answers the hello (refusing another format), takes the hub and
//! the port reservations (kept, and passed on again at its own upgrade), starts its workers
//! in hand-over mode, and serves once the old master commits.

mod control;
mod take_over;

use super::Master;
use crate::ipc::ToWorker;
use anyhow::{bail, Context};
use c1m_proto::handover::{Control, HubState, FORMAT_VERSION};
use control::Ctl;
use mio::{Interest, Token};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
pub use take_over::take_over;

/// The control socket's descriptor number in the new master.
pub const ENV_UPGRADE_FD: &str = "C1M_UPGRADE_FD";
/// The old master's port reservations, passed on (`h=SOCK,CLAIM;t=…;a=…`).
pub const ENV_UPGRADE_RESERVED: &str = "C1M_UPGRADE_RESERVED";
/// Test hook (serve_upgrade's version test): the format version the old master announces.
pub const ENV_TEST_FORMAT: &str = "C1M_TEST_HANDOVER_FORMAT";
/// Largest control message accepted (the hub is bounded by --history-max-bytes).
const MAX_CONTROL: usize = 1 << 31;
/// The control socket's token in the master's poll.
pub(super) const CONTROL: Token = Token(usize::MAX - 2);
/// How long a new binary that was told to abort may take to exit before it is killed.
const ABORT_GRACE: Duration = Duration::from_secs(2);

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
    /// Publishing is paused and the workers were told to freeze (from the new binary's
    /// `Accept` until the process exits or the upgrade fails).
    pub frozen: bool,
    pub prepared: Vec<bool>,
    pub sent: Vec<Option<u64>>,
    pub failed: Option<String>,
}

/// Where an upgrade in progress stands (old master).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Hello sent; waiting for the new binary's `Accept`.
    Hello,
    /// Workers told to freeze; waiting for every `HandOverPrepared`.
    Freezing,
    /// Hub sent; waiting for `HubTaken`.
    Hub,
    /// Workers told to hand over; waiting for every `HandOverSent`.
    Sending,
}

/// An upgrade in progress (old master), stepped by the master's loop.
pub struct Run {
    started: Instant,
    deadline: Instant,
    child: Child,
    ctl: Ctl,
    step: Step,
}

impl Run {
    /// Nothing to do until more arrives, unless the new master is gone.
    fn waiting(&mut self) -> anyhow::Result<Option<u64>> {
        if let Some(status) = self.child.try_wait().context("checking the new master")? {
            bail!("the new master exited ({status})");
        }
        Ok(None)
    }

    /// The new master's next answer (what it sent before exiting is still read first).
    fn receive(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        self.ctl.receive().map_err(|e| match self.child.try_wait() {
            Ok(Some(status)) => anyhow::anyhow!("the new master exited ({status})"),
            _ => e,
        })
    }
}

/// A new binary whose upgrade failed: told to abort, killed (with its process group) if it is
/// still there at `kill_at`, and reaped.
pub struct Leftover {
    child: Child,
    kill_at: Instant,
}

impl Master {
    /// SIGUSR2: starts an upgrade; the loop steps it ([`Master::advance_upgrade`]).
    pub(super) fn upgrade(&mut self) {
        if self.upgrading.is_some() || self.handover.is_some() || self.shutdown_deadline.is_some() {
            tracing::warn!("upgrade: already upgrading or shutting down; SIGUSR2 ignored");
            return;
        }
        self.upgrades.attempted += 1;
        let started = Instant::now();
        let deadline = started + self.cfg.upgrade_timeout;
        tracing::info!(exe = %self.exe.display(), timeout = ?self.cfg.upgrade_timeout, "upgrade: starting");
        let n = self.slots.len();
        self.handover = Some(Progress {
            frozen: false,
            prepared: vec![false; n],
            sent: vec![None; n],
            failed: None,
        });
        let mut run = match self.start_upgrade(started, deadline) {
            Ok(run) => run,
            Err(e) => return self.upgrade_failed(e, None, false),
        };
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
        match run.ctl.send(&hello) {
            Ok(()) => self.upgrading = Some(run),
            Err(e) => self.upgrade_failed(e, Some(run), false),
        }
    }

    /// Checks what cannot move, then starts the new binary with the control socket and the
    /// port reservations; its end of the control socket is registered with the loop.
    fn start_upgrade(&mut self, started: Instant, deadline: Instant) -> anyhow::Result<Run> {
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
        let (ctl, theirs) = UnixStream::pair().context("creating the control socket")?;
        c1m_sys::fd::set_inheritable(&theirs)?;
        let mut cmd = Command::new(&self.exe);
        cmd.args(&self.args)
            .env(ENV_UPGRADE_FD, theirs.as_raw_fd().to_string())
            .env(
                crate::upgrade_cli::ENV_UPGRADE_FROM,
                std::process::id().to_string(),
            )
            .stdin(Stdio::null())
            // A group of its own: on failure the new binary goes with everything it started
            // (each of which would hold the inherited reservations).
            .process_group(0);
        // Only this master's own reservations: a number it inherited names nothing now.
        let (env, fds) = crate::listener::reserved_env(&self.reservations);
        if fds.is_empty() {
            cmd.env_remove(ENV_UPGRADE_RESERVED);
        } else {
            cmd.env(ENV_UPGRADE_RESERVED, env);
        }
        for fd in &fds {
            c1m_sys::fd::set_inheritable(fd).context("passing the port reservations on")?;
        }
        let spawned = cmd.spawn();
        for fd in &fds {
            c1m_sys::fd::set_cloexec(fd).context("taking the port reservations back")?;
        }
        let child = spawned.with_context(|| format!("starting {}", self.exe.display()))?;
        drop(theirs);
        let registered = ctl
            .set_nonblocking(true)
            .map(|()| mio::net::UnixStream::from_std(ctl))
            .and_then(|mut stream| {
                self.poll
                    .registry()
                    .register(
                        &mut stream,
                        CONTROL,
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .map(|()| stream)
            });
        let stream = match registered {
            Ok(stream) => stream,
            Err(e) => {
                self.leftovers.push(Leftover {
                    child,
                    kill_at: Instant::now(),
                });
                return Err(e).context("watching the control socket");
            }
        };
        tracing::debug!(new_master = child.id(), "upgrade: the new binary started");
        Ok(Run {
            started,
            deadline,
            child,
            ctl: Ctl::new(stream),
            step: Step::Hello,
        })
    }

    /// Steps the upgrade in progress as far as it can go now (the loop calls this after
    /// every round of events); commits, or fails and cleans up.
    pub(super) fn advance_upgrade(&mut self) {
        let Some(mut run) = self.upgrading.take() else {
            return;
        };
        match self.step_upgrade(&mut run) {
            Ok(None) => self.upgrading = Some(run),
            Ok(Some(conns)) => self.upgrade_committed(run, conns),
            Err(e) => {
                let timed_out = Instant::now() >= run.deadline;
                self.upgrade_failed(e, Some(run), timed_out);
            }
        }
    }

    /// Ok(None): waiting; Ok(Some(connections)): committed.
    fn step_upgrade(&mut self, run: &mut Run) -> anyhow::Result<Option<u64>> {
        loop {
            let progress = self.handover.as_ref().context("hand-over state lost")?;
            if let Some(reason) = &progress.failed {
                bail!("{reason}");
            }
            if Instant::now() >= run.deadline {
                bail!("timed out (--upgrade-timeout)");
            }
            run.ctl.flush()?;
            match run.step {
                Step::Hello => {
                    let Some(answer) = run.receive()? else {
                        return run.waiting();
                    };
                    match Control::decode(&answer)? {
                        Control::Accept { pid, version } => tracing::info!(
                            new_master = pid,
                            version,
                            "upgrade: the new binary accepted"
                        ),
                        Control::Refuse { reason } => bail!("the new binary refused: {reason}"),
                        other => bail!("unexpected answer to hello: {other:?}"),
                    }
                    // Freeze: from here no publish is taken until the new master has the hub.
                    if let Some(p) = &mut self.handover {
                        p.frozen = true;
                    }
                    tracing::info!(
                        "upgrade: publishing paused (503 + Retry-After); freezing the workers"
                    );
                    for i in 0..self.slots.len() {
                        self.send(i, ToWorker::HandOverPrepare.encode());
                    }
                    run.step = Step::Freezing;
                }
                Step::Freezing => {
                    if !progress.prepared.iter().all(|&x| x) {
                        return run.waiting();
                    }
                    let state = self.hub_state()?;
                    run.ctl.send(&Control::Hub(Box::new(state)))?;
                    run.step = Step::Hub;
                }
                Step::Hub => {
                    let Some(answer) = run.receive()? else {
                        return run.waiting();
                    };
                    match Control::decode(&answer)? {
                        Control::HubTaken => {}
                        Control::Refuse { reason } => {
                            bail!("the new master refused the hub: {reason}")
                        }
                        other => bail!("unexpected answer to the hub: {other:?}"),
                    }
                    tracing::info!("upgrade: hub handed over; workers hand over their connections");
                    let timeout_ms = run
                        .deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64;
                    for i in 0..self.slots.len() {
                        let go = ToWorker::HandOverGo {
                            name: crate::worker::handover_name(std::process::id(), i),
                            new_master_pid: run.child.id(),
                            timeout_ms,
                        };
                        self.send(i, go.encode());
                    }
                    run.step = Step::Sending;
                }
                Step::Sending => {
                    if !progress.sent.iter().all(Option::is_some) {
                        return run.waiting();
                    }
                    let conns = progress.sent.iter().flatten().sum();
                    // Commit: the new master first (if it is gone, this fails and everything
                    // aborts), then the workers, each of which tells its successor and exits.
                    run.ctl.send(&Control::Commit)?;
                    while run.ctl.pending() {
                        if Instant::now() >= run.deadline {
                            bail!("timed out (--upgrade-timeout) sending the commit");
                        }
                        std::thread::sleep(Duration::from_millis(1));
                        run.ctl.flush()?;
                    }
                    for i in 0..self.slots.len() {
                        self.send(i, ToWorker::HandOverCommit.encode());
                    }
                    for slot in &mut self.slots {
                        if let Some(link) = &mut slot.link {
                            let _ = link.flush();
                        }
                    }
                    return Ok(Some(conns));
                }
            }
        }
    }

    /// The hub as the new master takes it: ids, history, interest and the running totals.
    fn hub_state(&mut self) -> anyhow::Result<HubState> {
        let history = self
            .broker
            .export_history(Instant::now())
            .context("the broker cannot export its history")?;
        Ok(HubState {
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
        })
    }

    fn upgrade_committed(&mut self, mut run: Run, conns: u64) {
        self.upgrades.completed += 1;
        if let Some(w) = &mut self.webhooks {
            w.upgrade_committed();
        }
        let new_pid = run.child.id();
        let _ = self.poll.registry().deregister(&mut run.ctl.stream);
        tracing::info!(
            conns,
            new_master = new_pid,
            took_ms = run.started.elapsed().as_millis() as u64,
            "upgrade: committed; the old master exits once its workers have"
        );
        // Under systemd (Type=notify) the new master becomes the service's main process.
        if let Some(n) = &self.notifier {
            n.send(&format!("MAINPID={new_pid}"));
        }
        // No restart from here; the loop ends when the old workers are gone. Publishing stays
        // paused (`handover` stays set): the hub is the new master's now.
        self.shutdown_deadline = Some(Instant::now() + Duration::from_secs(10));
        // The new master is on its own (re-parented when we exit); neither waited for nor
        // killed.
        drop(run);
    }

    /// Counts and logs the failure, tells the new master to abort and the workers to thaw;
    /// the new binary gets `ABORT_GRACE` to exit (none when it timed out: it is not
    /// answering) before its whole process group is killed ([`Master::end_leftovers`]).
    fn upgrade_failed(&mut self, e: anyhow::Error, run: Option<Run>, kill_now: bool) {
        self.upgrades.failed += 1;
        let reason = format!("{e:#}");
        tracing::error!(error = %reason, "upgrade failed; the old processes serve on");
        if self.handover.take().is_some_and(|p| p.frozen) {
            for i in 0..self.slots.len() {
                self.send(i, ToWorker::HandOverAbort.encode());
            }
        }
        let Some(mut run) = run else {
            return;
        };
        // Best effort: a new master that reads it exits by itself.
        let _ = run.ctl.send(&Control::Abort { reason });
        let _ = self.poll.registry().deregister(&mut run.ctl.stream);
        let grace = if kill_now {
            Duration::ZERO
        } else {
            ABORT_GRACE
        };
        self.leftovers.push(Leftover {
            child: run.child,
            kill_at: Instant::now() + grace,
        });
        self.end_leftovers(false);
    }

    /// Ends failed new binaries past their grace, or all of them when `all` (the master is
    /// stopping): their whole process group is killed, then the child reaped. Not reaped
    /// before: until then its pid, and so its group id, cannot name another process.
    pub(super) fn end_leftovers(&mut self, all: bool) {
        let now = Instant::now();
        self.leftovers.retain_mut(|left| {
            if !all && now < left.kill_at {
                return true;
            }
            // Also what it started: each holds the port reservations it inherited.
            let pgid = left.child.id();
            if let Err(e) = c1m_sys::process::kill_group(pgid, libc::SIGKILL) {
                tracing::warn!(pgid, error = %e, "upgrade: killing the failed new binary's process group");
            }
            let _ = left.child.kill();
            match left.child.wait() {
                Ok(status) => {
                    tracing::info!(pid = pgid, %status, "upgrade: the failed new binary is gone")
                }
                Err(e) => tracing::warn!(pid = pgid, error = %e, "upgrade: reaping the failed new binary"),
            }
            false
        });
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
            ToMaster::HandOverSent { conns } => {
                p.sent[i] = Some(conns);
                // The new generation reports them as its own once committed; an abort has
                // this worker report them again.
                if let Some(w) = &mut self.webhooks {
                    w.handed_over(i);
                }
            }
            ToMaster::HandOverFailed { reason } => {
                p.failed.get_or_insert(format!("worker {i}: {reason}"));
            }
            _ => {}
        }
    }

    /// A worker died while an upgrade runs: the upgrade fails (the others thaw).
    pub(super) fn handover_lost_worker(&mut self, i: usize) {
        if let Some(p) = &mut self.handover {
            p.failed.get_or_insert(format!("worker {i} died"));
        }
    }
}
