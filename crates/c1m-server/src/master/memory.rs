//! Memory figures for `/status` and `/metrics`, sampled off the request path. Reading
//! smaps_rollup makes the kernel walk each process's page tables (~4 ms for a few processes
//! holding many connections), and doing that per request let 16 pollers raise publish p50 from
//! 0.28 ms to 59 ms. A thread refreshes a cached total every [`REFRESH`]; a request only copies
//! it. The one exception is a changed set of workers (start, restart): that request samples at
//! once, so the figures never describe processes that are gone or miss new ones.

use c1m_sys::mem::{process_memory, ProcessMemory};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the memory total is re-read.
pub const REFRESH: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Shared {
    /// The worker pids the cached total covers (plus the master).
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
                let mut s = lock(&theirs);
                // The workers changed during this round: the request that saw it stored newer
                // figures.
                if s.worker_pids == pids {
                    (s.total, s.processes) = (total, processes);
                }
                drop(s);
                std::thread::sleep(REFRESH);
            })
            .map_err(|e| anyhow::anyhow!("starting the memory sampler thread: {e}"))?;
        Ok(Sampler { shared })
    }

    /// The latest total (at most [`REFRESH`] old) for the master and `worker_pids`, and how
    /// many processes it covers.
    pub fn latest(&self, worker_pids: Vec<u32>) -> (ProcessMemory, u64) {
        {
            let s = lock(&self.shared);
            if s.worker_pids == worker_pids {
                return (s.total, s.processes);
            }
        }
        // The workers changed since the last round (rare): sample now, without the lock.
        let (total, processes) = sample(&worker_pids);
        let mut s = lock(&self.shared);
        (s.worker_pids, s.total, s.processes) = (worker_pids, total, processes);
        (total, processes)
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
            total.private_bytes += mem.private_bytes;
            processes += 1;
        }
    }
    (total, processes)
}
