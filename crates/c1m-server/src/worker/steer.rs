//! This worker's side of accept steering (`crate::steering`): the master names the CPU whose
//! new connections this worker takes first (or none); the worker sets SO_INCOMING_CPU on its
//! public listeners, and gives the CPU up once it holds its fill mark.

use super::Worker;
use crate::ipc::ToMaster;
use std::os::fd::AsRawFd;

impl Worker {
    /// The master's steering for this worker.
    pub(super) fn steer(&mut self, cpu: Option<u32>) {
        if let Err(e) = self.set_listener_cpu(cpu) {
            tracing::warn!(error = %e, ?cpu, "setting SO_INCOMING_CPU on the listeners failed");
        }
        self.steered = cpu;
        self.give_up_cpu_if_full();
    }

    /// After each admitted connection: at the fill mark, the CPU goes back to the master.
    pub(super) fn give_up_cpu_if_full(&mut self) {
        let Some(cpu) = self.steered else { return };
        if self.conns.len() < crate::steering::fill_mark(self.max_conns) {
            return;
        }
        if let Err(e) = self.set_listener_cpu(None) {
            tracing::warn!(error = %e, "clearing SO_INCOMING_CPU on the listeners failed");
        }
        self.steered = None;
        self.send_to_master(ToMaster::SteerFull {
            cpu,
            conns: self.conns.len() as u64,
        });
    }

    fn set_listener_cpu(&self, cpu: Option<u32>) -> std::io::Result<()> {
        for l in [&self.http_listener, &self.tcp_listener]
            .into_iter()
            .flatten()
        {
            c1m_sys::sockopt::set_incoming_cpu(l, cpu)?;
        }
        Ok(())
    }
}

/// A listener handed over by a predecessor keeps the predecessor's steering: this worker
/// starts unsteered until its master says otherwise.
pub(super) fn clear_inherited(listener: &impl AsRawFd) {
    if let Err(e) = c1m_sys::sockopt::set_incoming_cpu(listener, None) {
        tracing::warn!(error = %e, "clearing SO_INCOMING_CPU on a handed-over listener failed");
    }
}
