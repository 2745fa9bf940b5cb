//! The worker's event loop, one turn read top to bottom in named phases (nginx's
//! `ngx_process_events_and_timers`, redis' `aeProcessEvents`): wait for readiness, handle it,
//! deliver a slice of the queued fan-outs, then the timed work (timers, paused accepts,
//! heartbeat and ping sweeps, figures for the master, heap trimming, the end of a shutdown).
//! Each phase is a short method; what the loop keeps between turns is [`Turn`].

use super::conn_events::ReadUntil;
use super::publish_move;
use super::sweep;
use super::timers;
use super::{
    Worker, ADMIN_LISTENER, HTTP_LISTENER, MASTER_LINK, PROXY_WAKER, SIGNALS, STATS_EVERY,
    TCP_LISTENER,
};
use mio::{Events, Interest};
use signal_hook_mio::v1_0::Signals;
use std::io;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// How often an idle worker hands freed heap pages back (`c1m_sys::mem::trim_heap`): a ramp
/// leaves its head-timeout entries and outgrown member-list copies behind as freed but resident
/// heap, ~8 B per subscriber at 15K per worker. Skipped while a fan-out is queued, so it never
/// runs inside one.
const TRIM_EVERY: Duration = Duration::from_secs(5);

/// Whether the loop goes on (`Break`: the worker exits cleanly).
type Flow = ControlFlow<()>;

/// What the loop keeps from one turn to the next: the readiness buffer, the signal source,
/// and when each periodic job is next due.
struct Turn {
    events: Events,
    signals: Signals,
    tick: Duration,
    next_tick: Instant,
    next_stats: Instant,
    next_trim: Instant,
    heartbeats: sweep::Periodic,
    pings: sweep::PingRounds,
}

impl Worker {
    pub(super) fn run(&mut self) -> anyhow::Result<()> {
        let mut turn = self.start_loop()?;
        loop {
            self.poll_events(&mut turn)?;
            if self.handle_events(&mut turn).is_break() || self.advance_fan_outs().is_break() {
                self.flush_lifecycle();
                let _ = self.link.flush();
                return Ok(());
            }
            self.proxy_answers();
            self.h2_turn();
            let now = Instant::now();
            if self.handover.frozen {
                // No timer, heartbeat or ping touches a client while frozen; they run late
                // after an abort, or in the new worker (which got each timer's remaining time).
                self.report_stats(&mut turn, now)?;
                continue;
            }
            self.expire_timers(&mut turn, now);
            self.resume_accepts(now);
            self.run_sweeps(&mut turn, now);
            self.h2_turn();
            self.report_stats(&mut turn, now)?;
            self.trim_memory(&mut turn, now);
            // Before-sleep batching: this turn's opens and closes in one frame.
            self.flush_lifecycle();
            if self.finish_shutdown(now)?.is_break() {
                return Ok(());
            }
        }
    }

    /// Hands start-up memory back and registers the signals the worker handles.
    fn start_loop(&mut self) -> anyhow::Result<Turn> {
        // Start-up's heap and deep stack are not needed again: hand them back (the fixed cost
        // of ~50 processes).
        let released = c1m_sys::mem::release_idle_memory();
        tracing::debug!(
            stack_bytes = released.stack_bytes,
            heap_trimmed = released.heap_trimmed,
            "idle start-up memory released"
        );
        // SIGHUP is the master's (reload); a terminal hangup reaching the whole process group
        // must not kill the workers, so it is caught here and ignored.
        let mut signals = Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
        self.poll
            .registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let tick = Duration::from_millis(timers::TICK_MS);
        let now = Instant::now();
        Ok(Turn {
            events: Events::with_capacity(1024),
            signals,
            tick,
            next_tick: now + tick,
            next_stats: now,
            next_trim: now + TRIM_EVERY,
            heartbeats: sweep::Periodic::default(),
            pings: sweep::PingRounds::default(),
        })
    }

    /// Waits for readiness: until the next timer tick, not at all while a fan-out is queued,
    /// and with no timer armed until the next periodic job (`idle_wake`).
    fn poll_events(&mut self, turn: &mut Turn) -> anyhow::Result<()> {
        // The turn's presence changes, in one frame, then every frame queued this turn goes to
        // the master in one write, before waiting.
        self.flush_presence();
        if let Err(e) = self.link.flush_and_watch(self.poll.registry(), MASTER_LINK) {
            self.link_failed.get_or_insert(e);
        }
        let timeout = if self.handover.frozen {
            STATS_EVERY // timers do not advance while frozen: no zero-timeout spin
        } else if !self.fan_outs.is_empty() {
            // A fan-out in progress: only look for events that are ready, then go on with it.
            Duration::ZERO
        } else {
            let wake = self.idle_wake(turn).unwrap_or(turn.next_tick);
            wake.saturating_duration_since(Instant::now())
        };
        let polled = self.poll.poll(&mut turn.events, Some(timeout));
        self.skip_idle_ticks(turn, Instant::now());
        match polled {
            Err(e) if e.kind() != io::ErrorKind::Interrupted => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// When no timer is armed (idle streams have none), the ticks in between wake the worker
    /// for nothing: 10 a second in each of ~54 processes at the fd limit's layout. It sleeps
    /// until its next periodic job instead (figures, HTTP/2 upkeep, heap trim; the sweeps run
    /// in whatever turn comes). None: wake at the next tick (timers armed, accepts paused, a
    /// shutdown's grace running, or backend calls out, whose wait for a thread times out in
    /// `proxy_answers`).
    fn idle_wake(&self, turn: &Turn) -> Option<Instant> {
        if !self.wheel.is_empty()
            || self.accept_paused_until.is_some()
            || self.shutdown_deadline.is_some()
            || self.proxies.in_flight() > 0
        {
            return None;
        }
        let periodic = [
            Some(turn.next_stats),
            Some(turn.next_trim),
            self.conns.h2.next_tick,
        ];
        let next = periodic.into_iter().flatten().min()?;
        Some(next.max(turn.next_tick))
    }

    /// The ticks slept through with the wheel empty are counted before events are handled, so
    /// a timer armed by them runs from now (a deadline is never shortened by a long sleep).
    fn skip_idle_ticks(&mut self, turn: &mut Turn, now: Instant) {
        if !self.wheel.is_empty() || turn.next_tick > now || self.handover.frozen {
            return;
        }
        let behind = now.duration_since(turn.next_tick).as_nanos() / turn.tick.as_nanos() + 1;
        let behind = u32::try_from(behind).unwrap_or(u32::MAX);
        self.wheel.skip_idle(behind);
        turn.next_tick += turn.tick * behind;
    }

    /// Hands each ready source to its handler: listeners, the master link, signals, clients.
    fn handle_events(&mut self, turn: &mut Turn) -> Flow {
        for event in turn.events.iter() {
            match event.token() {
                // Frozen for a hand-over: client events wait (the resume, or the new worker's
                // registration, picks up what is pending).
                HTTP_LISTENER | TCP_LISTENER | ADMIN_LISTENER if self.handover.frozen => {}
                HTTP_LISTENER | TCP_LISTENER | ADMIN_LISTENER => self.accept_all(event.token()),
                MASTER_LINK => {
                    if !self.serve_master_link(crate::link::wants_read(event), event.is_writable())
                    {
                        return Flow::Break(());
                    }
                }
                // Answers are taken every turn (`proxy_answers` in `run`).
                PROXY_WAKER => {}
                // Control worker: publish connections passed by the subscriber workers (taken
                // while frozen too: they travel with the rest, see `publish_move`).
                publish_move::INBOX => self.accept_movers(),
                token if publish_move::is_peer(token) => self.receive_moves(token),
                SIGNALS => {
                    let got: Vec<i32> = turn.signals.pending().collect();
                    if got.iter().any(|&s| s == libc::SIGTERM || s == libc::SIGINT) {
                        self.begin_shutdown();
                    }
                }
                _ if self.handover.frozen => {}
                token => self.on_conn_event(
                    token.0 as u64,
                    event.is_readable(),
                    event.is_writable(),
                    ReadUntil::for_event(event),
                ),
            }
        }
        Flow::Continue(())
    }

    /// One slice of the oldest fan-out per turn, after the events that were ready; the master
    /// link is read again once the queue has room. Stops when the link failed.
    fn advance_fan_outs(&mut self) -> Flow {
        self.fan_out_slice();
        if self.link_read_paused && !self.fan_outs_full() {
            self.link_read_paused = false;
            if !self.serve_master_link(true, false) {
                return Flow::Break(());
            }
        }
        if let Some(e) = self.link_failed.take() {
            tracing::error!(error = %e, "master link failed; exiting");
            return Flow::Break(());
        }
        Flow::Continue(())
    }

    /// Advances the timer wheel a tick at a time and acts on the deadlines that passed.
    fn expire_timers(&mut self, turn: &mut Turn, now: Instant) {
        while turn.next_tick <= now {
            turn.next_tick += turn.tick;
            for token in self.wheel.advance() {
                self.on_timer(token);
            }
        }
    }

    /// Accepting again once the pause after a descriptor shortage is over.
    fn resume_accepts(&mut self, now: Instant) {
        if self.accept_paused_until.is_some_and(|t| t <= now) {
            self.accept_paused_until = None;
            self.accept_all(HTTP_LISTENER);
            self.accept_all(TCP_LISTENER);
            self.accept_all(ADMIN_LISTENER);
        }
    }

    /// Heartbeats and pings go out a slice per turn, spread over their period (sweep.rs); a
    /// reload may turn them on, off, or shorten them. Unanswered pings are judged before new
    /// ones are sent, so a new ping never hides an unanswered one. The heartbeat pass runs
    /// every half interval: a stream gets a heartbeat at the second visit in a row that finds
    /// it sent nothing (heartbeats.rs).
    fn run_sweeps(&mut self, turn: &mut Turn, now: Instant) {
        let half = self.cfg.sse_heartbeat.map(|i| i / 2);
        let (beats, pass) = turn
            .heartbeats
            .due_in_pass(half, now, || self.conns.slots_end());
        self.send_heartbeats(beats, pass);
        while let Some(slots) = turn.pings.judgement_due(self.cfg.ws_pong_timeout, now) {
            self.ws_close_unanswered(slots);
        }
        let due = turn
            .pings
            .pings_due(self.cfg.ws_ping_interval, now, || self.conns.slots_end());
        self.ws_ping(due);
    }

    /// The figures go to the master every [`STATS_EVERY`].
    fn report_stats(&mut self, turn: &mut Turn, now: Instant) -> anyhow::Result<()> {
        if turn.next_stats <= now {
            self.connect_to_control_early(now);
            self.push_stats()?;
            turn.next_stats = now + STATS_EVERY;
        }
        Ok(())
    }

    /// Freed heap pages go back to the kernel every [`TRIM_EVERY`], never inside a fan-out.
    fn trim_memory(&mut self, turn: &mut Turn, now: Instant) {
        if turn.next_trim <= now && self.fan_outs.is_empty() {
            turn.next_trim = now + TRIM_EVERY;
            c1m_sys::mem::trim_heap();
        }
    }

    /// A shutdown ends once every connection is gone or the grace period is over: the last
    /// figures go to the master and the loop stops.
    fn finish_shutdown(&mut self, now: Instant) -> anyhow::Result<Flow> {
        let Some(deadline) = self.shutdown_deadline else {
            return Ok(Flow::Continue(()));
        };
        if !self.conns.is_empty() && deadline > now {
            return Ok(Flow::Continue(()));
        }
        self.end_of_grace();
        self.flush_lifecycle();
        self.push_stats()?;
        let _ = self.link.flush();
        Ok(Flow::Break(()))
    }
}
