//! Memory figures for `/status` and `/metrics`, sampled off the request path. Reading
//! smaps_rollup makes the kernel walk each process's page tables (~4 ms for a few processes
//! holding many connections), and doing that per request let 16 pollers raise publish p50 from
//! 0.28 ms to 59 ms. A thread refreshes a cached total every [`REFRESH`]; a request only copies
//! it (and hands over the current worker pids for the next round).

use c1m_sys::mem::{process_memory, ProcessMemory};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the memory total is re-read.
pub const REFRESH: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Shared {
    worker_pids: Vec<u32>,
    total: ProcessMemory,
    /// Processes whose smaps_rollup was read in the last round.
    processes: u64,
}

pub struct Sampler {
    shared: Arc<Mutex<Shared>>,
}

impl Sampler {
    /// Starts the sampling thread. It lives as long as the master process (it owns nothing
    /// that needs a clean stop).
    pub fn start() -> anyhow::Result<Sampler> {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("c1m-memory".into())
            .spawn(move || loop {
                let pids = lock(&theirs).worker_pids.clone();
                let (total, processes) = sample(&pids);
                {
                    let mut s = lock(&theirs);
                    s.total = total;
                    s.processes = processes;
                }
                std::thread::sleep(REFRESH);
            })
            .map_err(|e| anyhow::anyhow!("starting the memory sampler thread: {e}"))?;
        Ok(Sampler { shared })
    }

    /// The latest total (at most [`REFRESH`] old) and how many processes it covers; `pids` are
    /// the workers the next round reads.
    pub fn latest(&self, pids: Vec<u32>) -> (ProcessMemory, u64) {
        let mut s = lock(&self.shared);
        s.worker_pids = pids;
        (s.total, s.processes)
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // Plain data: a panic elsewhere cannot leave it inconsistent.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The master and its workers, summed.
fn sample(worker_pids: &[u32]) -> (ProcessMemory, u64) {
    let mut total = ProcessMemory::default();
    let mut processes = 0;
    for pid in std::iter::once(std::process::id()).chain(worker_pids.iter().copied()) {
        if let Ok(mem) = process_memory(pid) {
            total.rss_bytes += mem.rss_bytes;
            total.pss_bytes += mem.pss_bytes;
            processes += 1;
        }
    }
    (total, processes)
}
