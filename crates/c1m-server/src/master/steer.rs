//! The master's side of accept steering (`crate::steering`): which subscriber worker takes
//! each CPU's new connections first, handed on as workers fill, report, die and come back.

use super::Master;
use crate::config::Config;
use crate::ipc::ToWorker;
use std::time::Duration;

/// How long a steered worker may go without reporting (it reports every 250 ms) before the
/// master takes its CPU back.
const STEER_SILENT: Duration = Duration::from_secs(1);

/// Steering concentrates a ramp's connections on a few workers, so it stays off where a
/// limit is split among the workers on the assumption that the kernel spreads connections
/// evenly: a namespace's `max_subscribers` (`worker::namespaces::share`) would then refuse on
/// a full worker while the node still has room.
pub(super) fn allowed(cfg: &Config) -> bool {
    !crate::config::Namespaces::new(cfg).any_max_subscribers()
}

impl Master {
    /// Steers each CPU without a worker to the listening subscriber worker with the most
    /// room (called as workers report, fill up and die).
    pub(super) fn steer_free_cpus(&mut self) {
        let Some(steering) = &mut self.steering else {
            return;
        };
        let slots = &self.slots;
        let sent = steering.fill(|w| {
            let slot = slots.get(w)?;
            (slot.listening && slot.child.is_some()).then_some(slot.stats.connections())
        });
        for (worker, cpu, until) in sent {
            tracing::debug!(worker, cpu, until, "steering the CPU's new connections");
            let steer = ToWorker::Steer {
                cpu: Some(cpu),
                until,
            };
            self.send(worker, steer.encode());
        }
    }

    /// A reloaded configuration that no longer allows steering ends it: every steered worker
    /// gives its CPU back. (One that allows it again takes effect at the next start.)
    pub(super) fn steer_after_reload(&mut self) {
        if self.steering.is_none() || allowed(&self.cfg) {
            return;
        }
        let steering = self.steering.take();
        for (_, worker) in steering.iter().flat_map(|s| s.view()) {
            if let Some(w) = worker {
                self.send(
                    w,
                    ToWorker::Steer {
                        cpu: None,
                        until: 0,
                    }
                    .encode(),
                );
            }
        }
        tracing::info!("SIGHUP: accept steering off (a namespace sets max_subscribers)");
    }

    /// A steered worker that has not reported for [`STEER_SILENT`] (stuck, stopped) would
    /// take its CPU's every new connection into a queue nobody reads: the master clears the
    /// preference on that worker's listeners itself, through copies of their descriptors
    /// (pidfd_getfd), and steers the CPU elsewhere. Without access to them (a sandbox that
    /// forbids it) the CPU stays with the worker, and the failure is logged.
    pub(super) fn unsteer_silent_workers(&mut self) {
        let Some(steering) = &self.steering else {
            return;
        };
        let silent: Vec<(usize, u32)> = steering
            .view()
            .into_iter()
            .filter_map(|(cpu, w)| Some((w?, cpu)))
            .filter(|&(w, _)| self.slots[w].reported_at.elapsed() > STEER_SILENT)
            .collect();
        if silent.is_empty() {
            return;
        }
        for (w, cpu) in silent {
            let slot = &self.slots[w];
            let Some(pid) = slot.child.as_ref().map(|c| c.id()) else {
                continue;
            };
            let cleared = slot.listener_fds.iter().try_for_each(|&fd| {
                let copy = c1m_sys::process::fd_of_process(pid, fd as i32)?;
                c1m_sys::sockopt::set_incoming_cpu(&copy, None)
            });
            match cleared {
                Ok(()) => {
                    tracing::warn!(
                        worker = w,
                        cpu,
                        "steered worker silent; its CPU goes to another"
                    );
                    if let Some(steering) = &mut self.steering {
                        steering.full(w, cpu);
                        steering.silent += 1;
                    }
                }
                Err(e) => {
                    tracing::error!(worker = w, cpu, error = %e, "steered worker silent and its listeners out of reach; its CPU stays");
                }
            }
        }
        self.steer_free_cpus();
    }

    /// Worker `i` took its quantum on `cpu`.
    pub(super) fn on_steer_full(&mut self, i: usize, cpu: u32, conns: u64) {
        tracing::debug!(
            worker = i,
            cpu,
            conns,
            "steered worker took its quantum; handing its CPU on"
        );
        if let Some(steering) = &mut self.steering {
            steering.full(i, cpu);
        }
        self.steer_free_cpus();
    }

    /// Worker `i` reported its figures.
    pub(super) fn steer_reported(&mut self, i: usize) {
        if let Some(steering) = &mut self.steering {
            steering.reported(i);
        }
        self.steer_free_cpus();
    }

    /// Worker `i`'s process is gone.
    pub(super) fn steer_gone(&mut self, i: usize) {
        if let Some(steering) = &mut self.steering {
            steering.gone(i);
        }
        self.steer_free_cpus();
    }
}
