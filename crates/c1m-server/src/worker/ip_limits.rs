//! Per-source-address admission (`--max-conns-per-ip`, `--max-new-conns-per-ip-per-sec`):
//! judged at accept, against the table all workers share (`crate::ip_table`), and the place a
//! connection's count is given back when it closes. Loopback peers are exempt unless
//! `--per-ip-limit-loopback` (local proxies and health checks connect from there).

use crate::config::Config;
use crate::ip_table::IpTable;
use anyhow::Context;
use std::net::IpAddr;

/// Names the inherited table: `fd,workers` (see `IpTable::env_value`).
pub const ENV_IP_TABLE: &str = "C1M_WORKER_IP_TABLE";

/// Why a new connection is turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The address already holds its limit of connections.
    Conns,
    /// The address opened connections too fast; one is allowed again after this many seconds.
    Rate { retry_after_s: u64 },
}

impl Refusal {
    pub fn retry_after_s(self) -> u64 {
        match self {
            Refusal::Conns => 1,
            Refusal::Rate { retry_after_s } => retry_after_s,
        }
    }

    /// The answer written before closing: HTTP 429 with Retry-After, or an ERR line on the raw
    /// TCP port.
    pub fn response(self, raw_tcp: bool) -> Vec<u8> {
        let why = match self {
            Refusal::Conns => "too many connections from your address",
            Refusal::Rate { .. } => "new connections from your address are too frequent",
        };
        if raw_tcp {
            return c1m_proto::line::encode_err(why);
        }
        c1m_proto::http::response(
            429,
            "text/plain; charset=utf-8",
            &format!("Retry-After: {}\r\n", self.retry_after_s()),
            format!("{why}\n").as_bytes(),
            false,
        )
    }
}

pub struct IpLimits {
    table: IpTable,
    /// What each connection holds in the table, by slab index (bucket + 1; 0 = nothing).
    /// Here, not in `Conn`, so connections pay nothing for it while the limits are off; with
    /// them on it is the 4 bytes per slot it was inside `Conn`.
    held: Vec<u32>,
    worker: usize,
    max_conns: Option<u32>,
    max_rate: Option<u32>,
    loopback: bool,
}

impl IpLimits {
    /// The limits of this worker, if any are on (the master then passed the table down).
    pub fn from_env(cfg: &Config, worker: usize) -> anyhow::Result<Option<IpLimits>> {
        if !cfg.per_ip_limits() {
            return Ok(None);
        }
        let env = std::env::var(ENV_IP_TABLE)
            .with_context(|| format!("{ENV_IP_TABLE} not set but per-IP limits are on"))?;
        Ok(Some(IpLimits {
            table: IpTable::open_inherited(&env)?,
            held: Vec::new(),
            worker,
            max_conns: cfg.max_conns_per_ip,
            max_rate: cfg.max_new_conns_per_ip_per_sec,
            loopback: cfg.per_ip_limit_loopback,
        }))
    }

    /// Admits a connection from `ip`: Ok(slot to give back on close, 0 = nothing held).
    pub fn admit(&self, ip: IpAddr) -> Result<u32, Refusal> {
        self.admit_counting(ip, true)
    }

    /// Admits again a connection already accepted: one another worker passed here
    /// (`publish_move`), or one whose pass failed. It counts against `--max-conns-per-ip` in
    /// this worker's column from now on; its accept was already charged to the rate.
    pub fn admit_moved(&self, ip: IpAddr) -> Result<u32, Refusal> {
        self.admit_counting(ip, false)
    }

    fn admit_counting(&self, ip: IpAddr, rate: bool) -> Result<u32, Refusal> {
        if !self.loopback && ip.to_canonical().is_loopback() {
            return Ok(0);
        }
        let bucket = self.table.bucket(ip);
        let held = match self.max_conns {
            Some(max) if !self.table.try_hold(bucket, self.worker, max) => {
                return Err(Refusal::Conns)
            }
            Some(_) => true,
            None => false,
        };
        if let Some(per_sec) = self.max_rate.filter(|_| rate) {
            let now = c1m_sys::shm::monotonic_micros();
            if let Err(wait_us) = self.table.try_rate(bucket, per_sec, now) {
                if held {
                    self.table.release(bucket, self.worker);
                }
                return Err(Refusal::Rate {
                    retry_after_s: wait_us.div_ceil(1_000_000).max(1),
                });
            }
        }
        Ok(if held { bucket as u32 + 1 } else { 0 })
    }

    /// Records `slot` (from `admit`) as held by the connection in slab slot `idx`.
    pub fn hold(&mut self, idx: usize, slot: u32) {
        if slot == 0 && idx >= self.held.len() {
            return;
        }
        if idx >= self.held.len() {
            self.held.resize(idx + 1, 0);
        }
        self.held[idx] = slot;
    }

    /// Gives back what the connection in slab slot `idx` holds (it is closing).
    pub fn release_held(&mut self, idx: usize) {
        if let Some(slot) = self.held.get_mut(idx) {
            let slot = std::mem::take(slot);
            self.release(slot);
        }
    }

    /// Gives back what `admit` counted for a connection that is closing.
    pub fn release(&self, slot: u32) {
        if slot != 0 {
            self.table.release(slot as usize - 1, self.worker);
        }
    }
}
