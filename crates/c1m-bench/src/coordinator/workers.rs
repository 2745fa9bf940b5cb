//! The coordinator's workers wherever they run: local processes ([`crate::procs`]) and, in a
//! run with --agents, the agents' workers behind their links. Commands reach both the same
//! way; the end of the run stops and reaps both.

use crate::fleet::link::AgentLink;
use crate::procs::{self, WorkerProc};

pub(super) struct Workers {
    pub(super) local: Vec<WorkerProc>,
    pub(super) agents: Vec<AgentLink>,
}

impl Workers {
    /// One command line to every worker (an agent relays it to each of its own).
    pub(super) fn broadcast(&mut self, line: &str) {
        procs::broadcast(&mut self.local, line);
        for a in &mut self.agents {
            a.command(line);
        }
    }

    /// The end-of-run clock probe; answers arrive as `Msg::AgentClock`.
    pub(super) fn probe_clocks(&mut self) {
        for a in &mut self.agents {
            let _ = a.ping();
        }
    }

    pub(super) fn stop(&mut self) {
        procs::stop(&mut self.local);
        for a in &mut self.agents {
            a.stop();
        }
    }

    /// Nothing outlives the run: local workers killed and waited for, agent links closed
    /// (an agent stops its workers when its coordinator goes).
    pub(super) fn reap(&mut self) {
        procs::reap(&mut self.local);
        for a in &mut self.agents {
            a.close();
        }
    }
}
