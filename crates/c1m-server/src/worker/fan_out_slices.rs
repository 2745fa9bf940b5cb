//! Fan-out in bounded slices: a published message is queued here and delivered a slice at a
//! time, with the event loop turning between slices, so that no worker holds its loop for a
//! whole pass over its subscribers (19K sockets at 1M, tens of milliseconds on a busy box).
//! Between slices the loop answers publish acks and status replies from the master, reads
//! requests and accepts connections.
//!
//! What stays as it was:
//! - **Order.** Jobs run first in, first out and a job ends before the next one starts, so every
//!   subscriber sees messages in the order the master sent them.
//! - **Exactly once.** A job holds the tokens (slot + generation) of the members it was created
//!   for: a connection that closed and whose slot was reused gets nothing of it, and one that
//!   joined after the job was created was not a member yet (it is live from its subscription
//!   on). A join answer or gap from the master is ordered after the messages sent before it,
//!   so the queue is finished before one is applied (`finish_fan_outs`): a replay must not be
//!   followed by a message it already covers.
//! - **Bounded memory.** At most [`MAX_QUEUED_BYTES`] of queued payloads and member lists (the
//!   master link's own high-water mark): past that the worker stops reading its master link,
//!   the master's buffer for it fills, and the master refuses new publishes with 503 (the same
//!   backpressure as before the queue existed). A bound in bytes, not in jobs: with a bound of a
//!   few jobs, a worker that is behind stopped reading its link after those few, and every ack
//!   waited for a whole fan-out again (measured: serve's ack p50 250 ms at 18,000 subscribers
//!   and 10 publishes/s, bench/ack-under-fanout.sh).

use super::message::Message;
use super::Worker;
use std::collections::VecDeque;

/// Longest a slice runs before the loop turns (checked every [`CHECK_EVERY`] deliveries).
const SLICE_MICROS: u64 = 1_000;
/// Deliveries between clock checks; also the least a slice delivers.
const CHECK_EVERY: usize = 64;
/// Queued bytes above which the master link is left unread (backpressure, see module doc).
pub const MAX_QUEUED_BYTES: usize = crate::link::HIGH_WATER;
/// What a job costs besides its payload and members (the struct, the encoded-once frames are
/// not counted: at most one per wire format, shared).
const JOB_OVERHEAD: usize = 256;

/// One message on its way to this worker's subscribers of its channel.
pub struct FanOutJob {
    pub msg: Message,
    /// Member tokens (slot + generation) when the message arrived.
    pub members: Vec<u64>,
    /// Members delivered so far.
    pub next: usize,
    /// When the master handed the message out (monotonic µs), for publish_to_write.
    pub published_us: u64,
    /// When its first slice ran (0 = not yet), for the fan_out histogram (whole pass, all
    /// slices, and the work between them; not the wait in the queue).
    pub started_us: u64,
}

/// The queue, owned by the worker.
#[derive(Default)]
pub struct FanOuts {
    jobs: VecDeque<FanOutJob>,
    /// Payload and member-list bytes of the queued jobs.
    bytes: usize,
}

fn cost(job: &FanOutJob) -> usize {
    job.msg.payload.len() + job.members.len() * std::mem::size_of::<u64>() + JOB_OVERHEAD
}

impl FanOuts {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    pub fn push(&mut self, job: FanOutJob) {
        self.bytes += cost(&job);
        self.jobs.push_back(job);
    }
}

impl Worker {
    /// Runs one slice of the oldest queued fan-out: at least [`CHECK_EVERY`] deliveries, then
    /// until [`SLICE_MICROS`] have passed or the job is done.
    pub(super) fn fan_out_slice(&mut self) {
        let Some(mut job) = self.fan_outs.jobs.pop_front() else {
            return;
        };
        let slice_started = c1m_sys::shm::monotonic_micros();
        if job.started_us == 0 {
            job.started_us = slice_started;
        }
        while job.next < job.members.len() {
            let end = (job.next + CHECK_EVERY).min(job.members.len());
            for i in job.next..end {
                let token = job.members[i];
                if let Some((idx, _)) = self.conns.by_token(token) {
                    self.deliver(&job.msg, idx, job.published_us);
                }
            }
            // With `--io uring` the chunk's sends went into a batch: one submit, results
            // applied, before anything else may touch those connections.
            self.send_batch(job.published_us);
            job.next = end;
            let now = c1m_sys::shm::monotonic_micros();
            if now.saturating_sub(slice_started) >= SLICE_MICROS {
                break;
            }
        }
        if job.next < job.members.len() {
            self.fan_outs.jobs.push_front(job);
            return;
        }
        self.fan_outs.bytes -= cost(&job);
        let took = c1m_sys::shm::monotonic_micros().saturating_sub(job.started_us);
        self.counters.latency.fan_out.record(took);
    }

    /// Delivers everything queued now: before a join answer or gap (ordered after the
    /// messages the master sent before it) and before shutdown goodbyes.
    pub(super) fn finish_fan_outs(&mut self) {
        while !self.fan_outs.is_empty() {
            self.fan_out_slice();
        }
    }

    /// Too much queued: the master link is left unread until some fan-outs are done.
    pub(super) fn fan_outs_full(&self) -> bool {
        self.fan_outs.bytes >= MAX_QUEUED_BYTES
    }
}
