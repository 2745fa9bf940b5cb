//! The fan-out send path, chosen once at start (`--io`): `Direct` is one write() per socket
//! (what every epoll server does); `Uring` collects a fan-out's sends and hands them to the
//! kernel in batches of `--uring-entries` through one `io_uring_enter` each
//! (c1m_sys::uring::SendRing). Readiness stays on mio either way: a send the socket did not
//! take whole is queued in the connection's `OutQueue` and flushed on EPOLLOUT as before.
//!
//! The batch is always sent and reaped before the worker touches another connection (the
//! fan-out loop flushes when the batch is full and at its end), so a queued send can never be
//! overtaken and the shared bytes (held here as `Rc` clones) outlive their completions.

use crate::config::{Config, IoMode};
use crate::ipc::IoReport;
use anyhow::bail;
use c1m_sys::uring::SendRing;
use std::os::fd::RawFd;
use std::rc::Rc;

pub enum Sender {
    Direct,
    Uring(Box<UringBatch>),
}

/// A fan-out's pending io_uring sends: (socket, bytes) with the slab index of its connection.
pub struct UringBatch {
    ring: SendRing,
    pub batch: Vec<(RawFd, Rc<[u8]>)>,
    pub idxs: Vec<u32>,
    pub results: Vec<i32>,
    capacity: usize,
    pub sends: u64,
    pub queued: u64,
}

impl Sender {
    /// The path `--io` asks for. `auto` falls back to `Direct` (reason returned for /status and
    /// logged); explicit `uring` fails with the kernel's reason.
    pub fn from_config(cfg: &Config) -> anyhow::Result<(Sender, String)> {
        if cfg.io == IoMode::Epoll {
            return Ok((Sender::Direct, String::new()));
        }
        match SendRing::new(cfg.uring_setup.ring(cfg.uring_entries)) {
            Ok(ring) => Ok((
                Sender::Uring(Box::new(UringBatch {
                    ring,
                    batch: Vec::new(),
                    idxs: Vec::new(),
                    results: Vec::new(),
                    capacity: cfg.uring_entries as usize,
                    sends: 0,
                    queued: 0,
                })),
                String::new(),
            )),
            Err(e) if cfg.io == IoMode::Auto => {
                let reason = format!("io_uring_setup: {e}");
                tracing::warn!(reason = %reason, "--io auto: io_uring refused, using epoll + write()");
                Ok((Sender::Direct, reason))
            }
            Err(e) => {
                bail!("--io uring: the kernel refused io_uring ({e}); use --io auto or epoll")
            }
        }
    }

    /// The io_uring batch, when this worker sends through io_uring.
    pub fn uring(&mut self) -> Option<&mut UringBatch> {
        match self {
            Sender::Direct => None,
            Sender::Uring(u) => Some(u),
        }
    }

    pub fn report(&self, fallback_reason: &str) -> IoReport {
        match self {
            Sender::Direct => IoReport {
                fallback_reason: fallback_reason.to_string(),
                ..IoReport::default()
            },
            Sender::Uring(u) => IoReport {
                uring: true,
                fallback_reason: String::new(),
                uring_submits: u.ring.submits,
                uring_sends: u.sends,
                uring_queued: u.queued,
            },
        }
    }
}

impl UringBatch {
    /// Adds one send; true when the batch is full and must be sent before the next push.
    pub fn push(&mut self, idx: usize, fd: RawFd, data: &Rc<[u8]>) -> bool {
        self.batch.push((fd, data.clone()));
        self.idxs.push(idx as u32);
        self.batch.len() >= self.capacity
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Sends the batch (one `io_uring_enter` per ring-full) and fills `results`. On a ring
    /// failure the sends that did not complete read `-ECANCELED`.
    pub fn send(&mut self) -> std::io::Result<()> {
        self.sends += self.batch.len() as u64;
        self.ring.send_all(&self.batch, &mut self.results)
    }
}
