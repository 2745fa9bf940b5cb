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

use super::{Master, Plan};
use crate::config::{Config, ServeArgs};
use crate::ipc::ToWorker;
use anyhow::{bail, Context};
use c1m_proto::handover::{Control, HubState, FORMAT_VERSION};
use mio::{Interest, Token};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
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

/// The old master's end of the control socket: non-blocking, length-prefixed frames (the
/// same framing as [`write_msg`] / [`read_msg`] on the new master's blocking end).
struct Ctl {
    stream: mio::net::UnixStream,
    out: Vec<u8>,
    out_pos: usize,
    inbuf: Vec<u8>,
    closed: bool,
}

impl Ctl {
    fn send(&mut self, msg: &Control) -> anyhow::Result<()> {
        let body = msg.encode();
        self.out
            .extend_from_slice(&(body.len() as u32).to_le_bytes());
        self.out.extend_from_slice(&body);
        self.flush()
    }

    /// Writes what the socket takes now; the loop calls again when it is writable.
    fn flush(&mut self) -> anyhow::Result<()> {
        while self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => bail!("writing to the new master: it closed the control socket"),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("writing to the new master"),
            }
        }
        self.out.clear();
        self.out_pos = 0;
        Ok(())
    }

    fn pending(&self) -> bool {
        self.out_pos < self.out.len()
    }

    /// The next whole message from the new master, if one has arrived.
    fn receive(&mut self) -> anyhow::Result<Option<Vec<u8>>> {
        let mut buf = [0u8; 4096];
        while !self.closed {
            match self.stream.read(&mut buf) {
                Ok(0) => self.closed = true,
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the new master"),
            }
        }
        if self.inbuf.len() >= 4 {
            let len = u32::from_le_bytes(self.inbuf[..4].try_into().expect("4 bytes")) as usize;
            if len > MAX_CONTROL {
                bail!("control message of {len} bytes refused");
            }
            if self.inbuf.len() >= 4 + len {
                let body = self.inbuf[4..4 + len].to_vec();
                self.inbuf.drain(..4 + len);
                return Ok(Some(body));
            }
        }
        if self.closed {
            bail!("the new master closed the control socket");
        }
        Ok(None)
    }
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
            ctl: Ctl {
                stream,
                out: Vec::new(),
                out_pos: 0,
                inbuf: Vec::new(),
                closed: false,
            },
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
            ToMaster::HandOverSent { conns } => p.sent[i] = Some(conns),
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
    let reservations = crate::listener::adopt_reserved(
        &std::env::var(ENV_UPGRADE_RESERVED).unwrap_or_default(),
        &cfg,
    )?;
    // The key files as they are now (the old master's bytes do not travel): a bad one
    // refuses the upgrade, and the old master serves on with its own.
    let secrets = match crate::secrets::Secrets::read(&cfg) {
        Ok(secrets) => secrets,
        Err(e) => {
            let reason = format!("{e:#}");
            tracing::error!(error = %reason, "upgrade refused: the key files do not load");
            let _ = write_msg(&mut ctl, &Control::Refuse { reason });
            return Ok(1);
        }
    };
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
    let mut master = match start_workers(cfg, plan, secrets, *hub, from) {
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
    // Held from here, and passed on again at this master's own upgrade.
    master.set_reservations(reservations);
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
    secrets: crate::secrets::Secrets,
    hub: HubState,
    from: super::HandoverFrom,
) -> anyhow::Result<Master> {
    let mut master = Master::build(cfg, plan, secrets)?;
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
