//! The master's loop, read top to bottom in named phases: wait for events, handle them
//! (signals, the broker's wake-ups, worker links), resume paused reads, step a live upgrade,
//! the once-a-second tick (broker expiry, refusal log, dashboard), reap exited workers, then
//! either finish a shutdown or restart the workers that are due.

use super::{status, upgrade, Master};
use crate::ipc::ToWorker;
use mio::{Events, Interest, Token};
use std::time::{Duration, Instant};

const SIGNALS: Token = Token(usize::MAX);
/// The broker's threads have answers or messages.
pub(super) const BROKER: Token = Token(usize::MAX - 1);
/// The longest the loop sleeps: the tick, restarts and upgrade steps need it to turn.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
const TICK: Duration = Duration::from_secs(1);
/// Least history freed (as charged) that hands freed heap back to the kernel.
const TRIM_AFTER_FREED: u64 = 8 << 20;

impl Master {
    /// Runs until every worker has stopped after SIGTERM/SIGINT (or a committed upgrade).
    pub fn run(&mut self) -> anyhow::Result<()> {
        self.release_start_up_memory();
        let mut signals = signal_hook_mio::v1_0::Signals::new([
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGCHLD,
            libc::SIGHUP,
            libc::SIGUSR2,
        ])?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let mut events = Events::with_capacity(256);
        let mut next_tick = Instant::now();
        loop {
            self.flush_links();
            self.poll_events(&mut events)?;
            self.handle_events(&events, &mut signals);
            self.resume_paused_reads();
            self.step_live_upgrade();
            let now = Instant::now();
            self.api_expire(now);
            self.notify_systemd(now);
            if now >= next_tick {
                self.tick(now);
                next_tick = now + TICK;
            }
            if let Some(deadline) = self.shutdown_deadline {
                if self.finish_shutdown(now, deadline) {
                    return Ok(());
                }
                continue;
            }
            self.restart_due_workers(now);
        }
    }

    /// As each worker does before serving: start-up's heap and deep stack go back.
    fn release_start_up_memory(&self) {
        let released = c1m_sys::mem::release_idle_memory();
        tracing::debug!(
            stack_bytes = released.stack_bytes,
            heap_trimmed = released.heap_trimmed,
            "idle start-up memory released"
        );
    }

    /// Waits for events, at most `POLL_TIMEOUT` (the tick and timers need the loop to turn).
    fn poll_events(&mut self, events: &mut Events) -> anyhow::Result<()> {
        match self.poll.poll(events, Some(POLL_TIMEOUT)) {
            Err(e) if e.kind() != std::io::ErrorKind::Interrupted => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn handle_events(&mut self, events: &Events, signals: &mut signal_hook_mio::v1_0::Signals) {
        for event in events.iter() {
            match event.token() {
                SIGNALS => {
                    let got: Vec<i32> = signals.pending().collect();
                    self.on_signals(got);
                }
                BROKER => self.pump(),
                // The control socket of an upgrade: stepped in `step_live_upgrade`.
                upgrade::CONTROL => {}
                Token(i) => {
                    self.on_worker_event(i, crate::link::wants_read(event), event.is_writable())
                }
            }
        }
    }

    /// Advances an upgrade in progress, ends the leftovers of failed ones, and acts on the
    /// signals held back while it ran.
    fn step_live_upgrade(&mut self) {
        self.advance_upgrade();
        self.end_leftovers(false);
        if self.upgrading.is_none() && !self.deferred_signals.is_empty() {
            let got = std::mem::take(&mut self.deferred_signals);
            if self.shutdown_deadline.is_some() {
                tracing::info!(
                    ?got,
                    "signals from during the upgrade: the new master serves now; not acted on"
                );
            } else {
                self.on_signals(got);
            }
        }
    }

    /// Once a second: the broker's expiry and retries, the refusal log, the dashboard, and a
    /// look for exited workers (SIGCHLD reaps them at once; this is the fallback, so the busy
    /// loop pays no wait4 per turn).
    fn tick(&mut self, now: Instant) {
        self.reap();
        self.unsteer_silent_workers();
        self.broker.tick(now);
        self.give_back_history_memory();
        // A mass of channels that lost their last subscriber leaves the table behind.
        if self.interest.capacity() > 4 * self.interest.len().max(1024) {
            self.interest.shrink_to(2 * self.interest.len());
        }
        if self.broker.take_presence_resync() {
            self.resync_presence();
        }
        self.pump();
        self.api_forget_stale(now);
        if let Some(w) = &mut self.webhooks {
            w.tick(now);
        }
        let refused = status::refused_totals(self);
        self.refusal_log.tick(now, &refused.fields());
        self.push_dashboard();
    }

    /// Hands freed heap pages back to the kernel once the hub freed a good part of what it
    /// holds (a mass of channels expired or was evicted): the hub frees their channels and
    /// shrinks its tables, but glibc keeps freed small blocks resident until `malloc_trim`.
    /// Checked once a tick; under steady churn the trim runs about once per quarter of the
    /// history turned over, so its walk of the free lists and the page faults after it stay
    /// rare.
    fn give_back_history_memory(&mut self) {
        let stats = self.broker.stats();
        let freed = stats.history_freed_bytes.saturating_sub(self.freed_at_trim);
        let held = stats.history_bytes as u64;
        if freed >= TRIM_AFTER_FREED && freed >= held / 4 {
            c1m_sys::mem::trim_heap();
            self.freed_at_trim = stats.history_freed_bytes;
        }
    }

    /// Shutting down: true once every worker is gone, or killed at the deadline.
    fn finish_shutdown(&mut self, now: Instant, deadline: Instant) -> bool {
        let alive = self.slots.iter().any(|s| s.child.is_some());
        if alive && now < deadline {
            return false;
        }
        if alive {
            self.kill_workers();
            self.reap();
        }
        self.end_leftovers(true);
        if let Some(w) = &mut self.webhooks {
            w.finish();
        }
        true
    }

    /// SIGUSR2 starts an upgrade (unless a stop came with it); SIGTERM/SIGINT stop and SIGHUP
    /// reloads, but not in the middle of an upgrade: they wait until it has ended.
    pub(super) fn on_signals(&mut self, got: Vec<i32>) {
        let stop = got.iter().any(|&s| s == libc::SIGTERM || s == libc::SIGINT);
        if got.contains(&libc::SIGUSR2) && !stop {
            self.upgrade();
        }
        if self.upgrading.is_some() {
            for s in got {
                if [libc::SIGTERM, libc::SIGINT, libc::SIGHUP].contains(&s)
                    && !self.deferred_signals.contains(&s)
                {
                    tracing::info!(
                        signal = s,
                        "upgrade in progress: signal handled once it ends"
                    );
                    self.deferred_signals.push(s);
                }
            }
        } else if stop {
            self.begin_shutdown();
        } else if got.contains(&libc::SIGHUP) {
            self.reload();
        }
        self.reap();
    }

    /// READY=1 once every worker listens (first time only), and the watchdog ping when due.
    pub(super) fn notify_systemd(&mut self, now: Instant) {
        let Some(notifier) = &mut self.notifier else {
            return;
        };
        notifier.tick(now);
        if !self.ready_sent
            && self.shutdown_deadline.is_none()
            && self.slots.iter().all(|s| s.listening)
        {
            let status = format!(
                "listening on {}, {} workers",
                self.cfg.listen, self.plan.workers
            );
            notifier.ready(&status, now);
            self.ready_sent = true;
        }
    }

    pub(super) fn begin_shutdown(&mut self) {
        if self.shutdown_deadline.is_some() {
            return;
        }
        tracing::info!(grace = ?self.cfg.grace, "shutting down");
        if let Some(n) = &self.notifier {
            n.send("STOPPING=1\nSTATUS=draining");
        }
        self.shutdown_deadline = Some(Instant::now() + self.cfg.grace + Duration::from_secs(1));
        for i in 0..self.slots.len() {
            self.send(i, ToWorker::Shutdown.encode());
        }
    }
}
