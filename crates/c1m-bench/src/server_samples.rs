//! The server's own figures over a run (`--server-every`): a thread reads c1m's `/status` at a
//! fixed interval, so a long run (a soak) shows whether the server's memory, history and
//! connection count stay flat while connections churn. The thread owns its HTTP client; the
//! coordinator's loop never waits on the server.

use crate::http::{fetch_status, ServerStatus, StatusSource};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One reading of the server's `/status`, `t_s` seconds after the sampler started.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServerSample {
    pub t_s: f64,
    #[serde(flatten)]
    pub status: ServerStatus,
}

/// Samples until `stop` is set; the thread's result is every sample taken (a reading the
/// server did not answer in time is left out, and counted).
pub fn spawn(
    src: StatusSource,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> JoinHandle<(Vec<ServerSample>, u64)> {
    std::thread::spawn(move || {
        let t0 = Instant::now();
        let (mut samples, mut unanswered) = (Vec::new(), 0u64);
        let mut next = t0;
        while !stop.load(Ordering::SeqCst) {
            if Instant::now() >= next {
                next += every;
                match fetch_status(&src) {
                    Some(status) => samples.push(ServerSample {
                        t_s: t0.elapsed().as_secs_f64(),
                        status,
                    }),
                    None => unanswered += 1,
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (samples, unanswered)
    })
}
