//! The master's side of accept steering (`crate::steering`): which subscriber worker takes
//! each CPU's new connections first, handed on as workers fill, report, die and come back.

use super::Master;
use crate::config::Config;
use crate::ipc::ToWorker;

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
            let s = &slot.stats;
            (slot.listening && slot.child.is_some()).then_some(
                s.conns_sse + s.conns_ws + s.conns_longpoll + s.conns_tcp + s.conns_other,
            )
        });
        for (worker, cpu) in sent {
            tracing::debug!(worker, cpu, "steering the CPU's new connections");
            self.send(worker, ToWorker::Steer { cpu: Some(cpu) }.encode());
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
                self.send(w, ToWorker::Steer { cpu: None }.encode());
            }
        }
        tracing::info!("SIGHUP: accept steering off (a namespace sets max_subscribers)");
    }

    /// Worker `i` reached its fill mark on `cpu`.
    pub(super) fn on_steer_full(&mut self, i: usize, cpu: u32, conns: u64) {
        tracing::debug!(
            worker = i,
            cpu,
            conns,
            "steered worker full; handing its CPU on"
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
