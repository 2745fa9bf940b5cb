//! The worker processes: started with their link, role and environment, given their key
//! material first, reaped when they exit and restarted after a short delay, with what they
//! held (interest, counts, per-IP slots) cleared.

use super::{sd_notify, status, upgrade, Master, Slot};
use crate::ipc::{ToWorker, WorkerStats};
use crate::link::Link;
use crate::worker;
use anyhow::Context;
use mio::net::UnixStream;
use mio::Token;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RESTART_DELAY: Duration = Duration::from_millis(200);

impl Master {
    pub(super) fn spawn_all(&mut self) -> anyhow::Result<()> {
        let master = self;
        for i in 0..master.slot_count() {
            master.slots.push(Slot {
                child: None,
                link: None,
                reading_paused: false,
                stats: WorkerStats::default(),
                io: None,
                retired: WorkerStats::default(),
                reported_at: Instant::now(),
                restarts: 0,
                restart_at: None,
                listening: false,
                listener_fds: Vec::new(),
            });
            master
                .spawn(i)
                .with_context(|| format!("starting worker {i}"))?;
        }
        Ok(())
    }

    /// Kills and reaps every worker (a new master whose upgrade was not committed, or a
    /// shutdown past its grace).
    pub(super) fn kill_workers(&mut self) {
        for slot in &mut self.slots {
            if let Some(child) = &mut slot.child {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    pub(super) fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let (parent, child_end) = std::os::unix::net::UnixStream::pair()?;
        c1m_sys::fd::set_inheritable(&child_end)?;
        // /proc/self/exe is this very binary even after an upgrade replaced the file on disk
        // (the path then names the new one, which must not become an old-generation worker).
        let mut command = Command::new("/proc/self/exe");
        // ps and journals show the name the master was started by, not "/proc/self/exe".
        std::os::unix::process::CommandExt::arg0(
            &mut command,
            std::env::args_os().next().unwrap_or_else(|| "c1m".into()),
        );
        if self.control_slot() == Some(i) {
            command.env(worker::ENV_ROLE, worker::ROLE_CONTROL);
        }
        if let Some(from) = self.handover_from.filter(|f| i < f.old_slots) {
            let left = from.deadline.saturating_duration_since(Instant::now());
            command
                .env(worker::ENV_HANDOVER, worker::handover_name(from.old_pid, i))
                .env(
                    worker::ENV_HANDOVER_TIMEOUT,
                    left.as_millis().max(1).to_string(),
                );
        }
        if let Some(table) = self.ip_table()? {
            // Worker i is spawned only once the previous worker i has exited (reap), so what it
            // held is gone: its column is cleared before the replacement can count again.
            table.clear_worker(i);
            command.env(worker::ENV_IP_TABLE, table.env_value());
        }
        for var in sd_notify::ENV_VARS {
            command.env_remove(var);
        }
        // A new master's own start-up variables name descriptors its workers do not have.
        command
            .env_remove(upgrade::ENV_UPGRADE_FD)
            .env_remove(upgrade::ENV_UPGRADE_RESERVED);
        let tunables = worker_malloc_tunables(std::env::var("GLIBC_TUNABLES").ok().as_deref());
        command.env("GLIBC_TUNABLES", tunables);
        let child = command
            .arg("__serve-worker")
            .env(worker::ENV_FD, child_end.as_raw_fd().to_string())
            .env(worker::ENV_INDEX, i.to_string())
            .env(worker::ENV_CONFIG, serde_json::to_string(&self.cfg)?)
            .env(worker::ENV_MASTER_PID, std::process::id().to_string())
            .env(worker::ENV_MAX_CONNS, self.plan.per_worker.to_string())
            .env(
                worker::ENV_SUBSCRIBER_WORKERS,
                self.plan.workers.to_string(),
            )
            .stdin(Stdio::null())
            .spawn()
            .context("spawning worker")?;
        drop(child_end);
        parent.set_nonblocking(true)?;
        let mut link = Link::new(UnixStream::from_std(parent));
        // The first frame: the worker waits for its key material before it serves, and a
        // master taking over in a live upgrade starts its workers before its loop runs, so this
        // one is written now rather than at the loop's flush phase.
        link.send(ToWorker::Secrets(self.secrets.clone()).encode())
            .and_then(|()| link.flush())
            .context("sending the worker its key material")?;
        link.register(self.poll.registry(), Token(i))?;
        tracing::debug!(worker = i, pid = child.id(), "worker started");
        let slot = &mut self.slots[i];
        slot.stats = WorkerStats {
            pid: child.id(),
            ..Default::default()
        };
        slot.child = Some(child);
        slot.reported_at = Instant::now();
        slot.link = Some(link);
        slot.reading_paused = false;
        slot.restart_at = None;
        slot.listening = false;
        slot.listener_fds.clear();
        Ok(())
    }

    /// The per-IP limit table, created (and made inheritable) on first use; None when no
    /// per-IP limit is on.
    pub(super) fn ip_table(&mut self) -> anyhow::Result<Option<&crate::ip_table::IpTable>> {
        if self.ip_table.is_none() && self.cfg.per_ip_limits() {
            let table = crate::ip_table::IpTable::create(self.slot_count())?;
            c1m_sys::fd::set_inheritable(table.fd()).context("passing the per-IP table on")?;
            self.ip_table = Some(table);
        }
        Ok(self.ip_table.as_ref())
    }

    /// A worker's link broke: make sure the process is gone; `reap` restarts it.
    pub(super) fn worker_gone(&mut self, i: usize) {
        self.handover_lost_worker(i);
        if let Some(mut link) = self.slots[i].link.take() {
            let _ = self.poll.registry().deregister(&mut link.stream);
        }
        if let Some(child) = &mut self.slots[i].child {
            let _ = child.kill();
        }
        self.drop_interest(i, None);
        self.steer_gone(i);
        if let Some(w) = &mut self.webhooks {
            let reason = if self.shutdown_deadline.is_some() {
                crate::ipc::CloseReason::ServerShutdown
            } else {
                crate::ipc::CloseReason::WorkerCrash
            };
            w.worker_gone(i, reason);
        }
        self.drop_worker_presence(i);
        let held: Vec<String> = self
            .counts
            .iter()
            .filter(|(_, ws)| ws.iter().any(|&(w, _)| w == i))
            .map(|(c, _)| c.clone())
            .collect();
        for channel in held {
            self.set_worker_count(i, channel, 0);
        }
    }

    /// Starts the workers whose restart delay has passed (a failed start is retried in 1 s).
    pub(super) fn restart_due_workers(&mut self, now: Instant) {
        for i in 0..self.slots.len() {
            if self.slots[i].restart_at.is_some_and(|t| t <= now) {
                if let Err(e) = self.spawn(i) {
                    tracing::error!(worker = i, error = %format!("{e:#}"), "restarting worker failed; retrying in 1 s");
                    self.slots[i].restart_at = Some(now + Duration::from_secs(1));
                }
            }
        }
    }

    /// Collects exited workers and schedules their restart.
    pub(super) fn reap(&mut self) {
        for i in 0..self.slots.len() {
            let Some(child) = &mut self.slots[i].child else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            let pid = child.id();
            self.slots[i].child = None;
            self.worker_gone(i);
            let slot = &mut self.slots[i];
            status::retire(&mut slot.retired, &slot.stats);
            slot.stats = WorkerStats::default();
            if self.shutdown_deadline.is_none() {
                self.restarts += 1;
                self.slots[i].restarts += 1;
                self.slots[i].restart_at = Some(Instant::now() + RESTART_DELAY);
                tracing::warn!(worker = i, pid, status = %status, "worker exited; restarting");
            }
        }
    }
}

/// glibc malloc settings for a worker, added to any `GLIBC_TUNABLES` the operator set (theirs
/// come last, so they win). A worker holds one big table per kind (connection slab, channel
/// member lists) that grows as subscribers arrive. glibc's default mmap threshold is dynamic:
/// freeing one mmapped block raises it to that block's size (up to 32 MiB), after which the
/// next tables grow on the brk heap and every outgrown copy stays behind as touched, unusable
/// memory. A fixed threshold keeps blocks of 64 KiB and more in mmap, where growing is an
/// mremap and freeing gives the pages back; a fixed trim threshold returns freed heap tops.
/// One arena: the worker is single-threaded. No per-thread cache (tcache): the chunks it keeps
/// count as in use, so `malloc_trim` cannot give back the pages they sit on (measured at serve's
/// 1M plan, 54 idle workers: heap 120 → 68 KiB each, Σ PSS −2.8 MiB, i.e. −3 B per connection
/// at 1M); what it saves is a few ns per malloc, and a worker mallocs per publish and per
/// connection, not per delivered message.
pub fn worker_malloc_tunables(existing: Option<&str>) -> String {
    const OURS: &str = "glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=131072:glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0";
    match existing {
        Some(theirs) if !theirs.trim().is_empty() => format!("{OURS}:{theirs}"),
        _ => OURS.to_string(),
    }
}

#[cfg(test)]
mod malloc_tests {
    use super::worker_malloc_tunables;

    #[test]
    fn operator_tunables_are_kept_and_win() {
        let ours = worker_malloc_tunables(None);
        assert!(ours.contains("glibc.malloc.mmap_threshold=65536"));
        assert!(ours.contains("glibc.malloc.tcache_count=0"));
        assert_eq!(worker_malloc_tunables(Some("  ")), ours);
        let both = worker_malloc_tunables(Some("glibc.malloc.mmap_threshold=1048576"));
        // glibc applies the tunables in order: the operator's (last) setting wins.
        assert!(both.ends_with(":glibc.malloc.mmap_threshold=1048576"));
        assert!(both.starts_with(&ours));
    }
}
