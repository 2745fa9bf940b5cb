//! This worker's side of accept steering (`crate::steering`): the master names the CPU whose
//! new connections this worker takes first (or none) and the count it takes them to; the
//! worker sets SO_INCOMING_CPU on its public listeners, and gives the CPU back at that count.

use super::Worker;
use crate::ipc::ToMaster;
use std::os::fd::AsRawFd;

impl Worker {
    /// The master's steering for this worker.
    pub(super) fn steer(&mut self, cpu: Option<u32>, until: u64) {
        if let Err(e) = self.set_listener_cpu(cpu) {
            tracing::warn!(error = %e, ?cpu, "setting SO_INCOMING_CPU on the listeners failed");
        }
        self.steered = cpu.map(|c| (c, until as usize));
        self.give_up_cpu_if_full();
    }

    /// After each admitted connection: at the count the master gave, the CPU goes back.
    pub(super) fn give_up_cpu_if_full(&mut self) {
        let Some((cpu, until)) = self.steered else {
            return;
        };
        if self.conns.len() < until {
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

    /// Tells the master which descriptors its steering is set on.
    pub(super) fn announce_listeners(&mut self) {
        let fds = self
            .public_listeners()
            .map(|l| l.as_raw_fd() as u32)
            .collect();
        self.send_to_master(ToMaster::Listeners { fds });
    }

    fn set_listener_cpu(&self, cpu: Option<u32>) -> std::io::Result<()> {
        self.public_listeners()
            .try_for_each(|l| c1m_sys::sockopt::set_incoming_cpu(l, cpu))
    }

    /// The listeners steering applies to (HTTP and raw TCP; the admin listener is not).
    fn public_listeners(&self) -> impl Iterator<Item = &mio::net::TcpListener> {
        [&self.http_listener, &self.tcp_listener]
            .into_iter()
            .flatten()
    }
}

/// A listener handed over by a predecessor keeps the predecessor's steering: this worker
/// starts unsteered until its master says otherwise.
pub(super) fn clear_inherited(listener: &impl AsRawFd) {
    if let Err(e) = c1m_sys::sockopt::set_incoming_cpu(listener, None) {
        tracing::warn!(error = %e, "clearing SO_INCOMING_CPU on a handed-over listener failed");
    }
}
