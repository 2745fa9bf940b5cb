//! The per-source-address table behind `--max-conns-per-ip` and
//! `--max-new-conns-per-ip-per-sec`, shared by all workers: SO_REUSEPORT spreads one address's
//! connections over every worker, so only a count all of them see is a per-address count.
//!
//! The master creates it (shared memory, `c1m_sys::shm`) before the first worker and passes the
//! descriptor down; every worker maps the same pages. Addresses are hashed (with a seed drawn
//! at start, so nobody can aim collisions at someone else's bucket) into [`BUCKETS`] buckets;
//! two addresses that share a bucket share its limits, which can only make them stricter. With
//! 65,536 buckets and 1,000 active addresses about 1.5 % of addresses share a bucket with
//! another, and sharing matters only when their combined use nears the limit.
//!
//! Layout, fixed size whatever the number of connections:
//! - a header (magic, seed, workers, buckets);
//! - per bucket, one u64: the GCRA "theoretical arrival time" of the rate limit, in
//!   `CLOCK_MONOTONIC` microseconds (one clock for all processes);
//! - per bucket, one u32 per worker: the connections that worker holds from the bucket. Per
//!   worker, so the master can zero a dead worker's column before its replacement starts (its
//!   connections died with it) without touching what the others hold.
//!
//! Costs: 8 B + 4 B × workers per bucket: 1 MiB with 2 workers, 14 MiB of address space with
//! 53 (pages are allocated only when an address hashes into them).

use anyhow::{bail, Context};
use c1m_sys::shm::SharedMemory;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const BUCKETS: usize = 65_536;
const MAGIC: u64 = 0x6331_6d5f_6970_7431; // "c1m_ipt1"
const HEADER: usize = 64;
const SECOND_US: u64 = 1_000_000;

pub struct IpTable {
    mem: SharedMemory,
    workers: usize,
    seed: u64,
}

impl IpTable {
    /// A fresh, all-zero table for `workers` workers (master side).
    pub fn create(workers: usize) -> anyhow::Result<IpTable> {
        let mem = SharedMemory::create("c1m-ip-table", size(workers))
            .context("creating the per-IP limit table (memfd)")?;
        // A random seed without a new dependency: std's RandomState is seeded from the OS.
        let seed = std::collections::hash_map::RandomState::new().hash_one(MAGIC);
        let header = mem.u64s(0, 4);
        header[1].store(seed, Ordering::Relaxed);
        header[2].store(workers as u64, Ordering::Relaxed);
        header[3].store(BUCKETS as u64, Ordering::Relaxed);
        header[0].store(MAGIC, Ordering::Release);
        Ok(IpTable { mem, workers, seed })
    }

    /// The table a worker inherited: `env` is [`IpTable::env_value`] of the master's.
    pub fn open_inherited(env: &str) -> anyhow::Result<IpTable> {
        let (fd, workers) = env
            .split_once(',')
            .with_context(|| format!("bad per-IP table reference {env:?}"))?;
        let fd: i32 = fd.parse().context("per-IP table fd")?;
        let workers: usize = workers.parse().context("per-IP table workers")?;
        let mem = SharedMemory::open_inherited(fd, size(workers))
            .context("mapping the per-IP limit table")?;
        let header = mem.u64s(0, 4);
        if header[0].load(Ordering::Acquire) != MAGIC
            || header[2].load(Ordering::Relaxed) != workers as u64
            || header[3].load(Ordering::Relaxed) != BUCKETS as u64
        {
            bail!("the per-IP limit table's header does not match this build");
        }
        let seed = header[1].load(Ordering::Relaxed);
        Ok(IpTable { mem, workers, seed })
    }

    /// What a worker needs to open this table: its inherited descriptor and the worker count.
    pub fn env_value(&self) -> String {
        format!("{},{}", self.mem.fd().as_raw_fd(), self.workers)
    }

    pub fn fd(&self) -> &std::os::fd::OwnedFd {
        self.mem.fd()
    }

    /// The bucket of a source address. IPv4 seen through a dual-stack listener counts as IPv4;
    /// IPv6 counts per /64, since one host usually owns a whole /64.
    pub fn bucket(&self, ip: IpAddr) -> usize {
        let mut h = std::hash::DefaultHasher::new();
        self.seed.hash(&mut h);
        match ip.to_canonical() {
            IpAddr::V4(v4) => v4.octets().hash(&mut h),
            IpAddr::V6(v6) => v6.octets()[..8].hash(&mut h),
        }
        (h.finish() as usize) % BUCKETS
    }

    /// Counts a connection of `worker` from `bucket` unless that makes more than `max` over all
    /// workers. Counts first, then sums: two workers racing for the last place may both be
    /// refused, but the total never passes `max`.
    pub fn try_hold(&self, bucket: usize, worker: usize, max: u32) -> bool {
        let row = self.row(bucket);
        row[worker].fetch_add(1, Ordering::AcqRel);
        let total: u64 = row
            .iter()
            .map(|c| u64::from(c.load(Ordering::Acquire)))
            .sum();
        if total > u64::from(max) {
            self.release(bucket, worker);
            return false;
        }
        true
    }

    /// Gives back a connection counted by `try_hold` (never below zero: after the master has
    /// zeroed a column there is nothing left to give back).
    pub fn release(&self, bucket: usize, worker: usize) {
        let _ = self.row(bucket)[worker]
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Connections held from `bucket` over all workers.
    #[cfg(test)]
    pub fn held(&self, bucket: usize) -> u64 {
        self.row(bucket)
            .iter()
            .map(|c| u64::from(c.load(Ordering::Acquire)))
            .sum()
    }

    /// One new connection from `bucket` under a limit of `per_sec` per second (GCRA: a burst
    /// of `per_sec`, then one every 1/`per_sec` s). Err(µs until one would be allowed).
    pub fn try_rate(&self, bucket: usize, per_sec: u32, now_us: u64) -> Result<(), u64> {
        let interval = SECOND_US / u64::from(per_sec.max(1));
        let tolerance = SECOND_US.saturating_sub(interval);
        let cell = &self.rate_cells()[bucket];
        let mut stored = cell.load(Ordering::Acquire);
        loop {
            let tat = stored.max(now_us);
            if tat - now_us > tolerance {
                return Err(tat - now_us - tolerance);
            }
            match cell.compare_exchange_weak(
                stored,
                tat + interval,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(now_stored) => stored = now_stored,
            }
        }
    }

    /// Forgets what a dead worker held (master side, before its replacement starts).
    pub fn clear_worker(&self, worker: usize) {
        for bucket in 0..BUCKETS {
            let cell = &self.row(bucket)[worker];
            if cell.load(Ordering::Relaxed) != 0 {
                cell.store(0, Ordering::Release);
            }
        }
    }

    fn rate_cells(&self) -> &[AtomicU64] {
        self.mem.u64s(HEADER, BUCKETS)
    }

    fn row(&self, bucket: usize) -> &[AtomicU32] {
        let counts = HEADER + BUCKETS * 8;
        self.mem
            .u32s(counts + bucket * self.workers * 4, self.workers)
    }
}

fn size(workers: usize) -> usize {
    (HEADER + BUCKETS * 8 + BUCKETS * workers * 4).next_multiple_of(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn total_over_workers_never_passes_the_limit() {
        let t = IpTable::create(3).unwrap();
        let b = t.bucket(ip("10.1.2.3"));
        assert!(t.try_hold(b, 0, 3));
        assert!(t.try_hold(b, 1, 3));
        assert!(t.try_hold(b, 2, 3));
        assert!(!t.try_hold(b, 0, 3));
        assert_eq!(t.held(b), 3);
        t.release(b, 1);
        assert!(t.try_hold(b, 2, 3));
        // A dead worker's share goes; releases after that do not wrap below zero.
        t.clear_worker(2);
        assert_eq!(t.held(b), 1);
        t.release(b, 2);
        assert_eq!(t.held(b), 1);
    }

    #[test]
    fn a_worker_sees_the_masters_table() {
        let master = IpTable::create(2).unwrap();
        c1m_sys::fd::set_inheritable(master.fd()).unwrap();
        // What a child does with the inherited number, done here on a duplicate.
        let dup = master.fd().try_clone().unwrap();
        let env = format!("{},2", std::os::fd::IntoRawFd::into_raw_fd(dup));
        let worker = IpTable::open_inherited(&env).unwrap();
        let b = worker.bucket(ip("192.0.2.1"));
        assert_eq!(b, master.bucket(ip("192.0.2.1")), "same seed");
        assert!(worker.try_hold(b, 1, 1));
        assert!(!master.try_hold(b, 0, 1));
        assert!(IpTable::open_inherited("x").is_err());
    }

    #[test]
    fn addresses_map_as_documented() {
        let t = IpTable::create(1).unwrap();
        assert_eq!(t.bucket(ip("::ffff:10.0.0.1")), t.bucket(ip("10.0.0.1")));
        assert_eq!(
            t.bucket(ip("2001:db8:1:2::1")),
            t.bucket(ip("2001:db8:1:2:ffff::9"))
        );
        // 1,000 addresses spread over the buckets (the seed varies, so count loosely).
        let distinct: std::collections::HashSet<usize> = (0..1000u32)
            .map(|i| t.bucket(IpAddr::from(0x0a00_0000u32.wrapping_add(i).to_be_bytes())))
            .collect();
        assert!(distinct.len() > 970, "{}", distinct.len());
    }

    #[test]
    fn rate_allows_a_burst_then_one_per_interval() {
        let t = IpTable::create(1).unwrap();
        let b = 7;
        let t0 = 5_000_000;
        for _ in 0..4 {
            assert_eq!(t.try_rate(b, 4, t0), Ok(()));
        }
        let wait = t.try_rate(b, 4, t0).unwrap_err();
        assert_eq!(wait, 250_000);
        assert!(t.try_rate(b, 4, t0 + 249_999).is_err());
        assert_eq!(t.try_rate(b, 4, t0 + 250_000), Ok(()));
        // A quiet second refills the burst.
        for _ in 0..4 {
            assert_eq!(t.try_rate(b, 4, t0 + 2_000_000), Ok(()));
        }
    }
}
