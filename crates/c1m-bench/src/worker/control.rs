//! The worker's link to the coordinator: command lines read from stdin (`P` acknowledged
//! publish, `R` restart reference, `S` stop), the JSON report line written to stdout each tick,
//! the trimming of the publish logs those `P` lines fill, and the final settlement and report
//! when the run ends.

use super::conn::State;
use super::Worker;
use crate::hist::take_pairs;
use crate::payload::now_us;
use crate::proto;
use crate::storm;
use anyhow::Context;
use std::io::{self, Read, Write};

/// A publish log keeps entries this much longer than a publish may wait for its answer, for
/// the coordinator's relay: by then every publish sent before a window opened is known here.
const RETAIN_PAST_PUBLISH_TIMEOUT_US: u64 = 10_000_000;

impl Worker {
    pub(super) fn read_stdin(&mut self, stdin: &mut mio::unix::pipe::Receiver) {
        let mut buf = [0u8; 8192];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => {
                    self.stop = true;
                    break;
                }
                Ok(n) => self.stdin_buf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.stop = true;
                    break;
                }
            }
        }
        let mut start = 0;
        while let Some(off) = self.stdin_buf[start..].iter().position(|&b| b == b'\n') {
            let line = &self.stdin_buf[start..start + off];
            start += off + 1;
            let mut w = line.split(|&b| b == b' ');
            match w.next() {
                Some(b"S") => self.stop = true,
                Some(b"R") => {
                    if let Some(at) = w.next().and_then(proto::parse_u64) {
                        self.storm_ref_us = Some(self.storm_ref_us.map_or(at, |r| r.min(at)));
                    }
                }
                Some(b"P") => {
                    let nums: Vec<u64> = w.filter_map(proto::parse_u64).collect();
                    if let [ch, _seq, sent, ack] = nums[..] {
                        if let Some(log) = self.publishes.get_mut(ch as usize) {
                            log.push(sent, ack);
                        }
                    }
                }
                _ => {}
            }
        }
        self.stdin_buf.drain(..start);
    }

    pub(super) fn report(&mut self, last: bool) -> anyhow::Result<()> {
        self.r.last = last;
        self.r.ramp_done = self.ramp_done();
        self.r.connect_hist = take_pairs(&mut self.connect_h);
        self.r.subscribe_hist = take_pairs(&mut self.subscribe_h);
        self.r.delivery_hist = take_pairs(&mut self.delivery_h);
        self.r.storm_back_hist = take_pairs(&mut self.storm_back_h);
        self.r.storm_caught_up_hist = take_pairs(&mut self.storm_caught_up_h);
        if last {
            if let Ok(m) = c1m_sys::mem::process_memory(std::process::id()) {
                self.r.pss_now = m.pss_bytes;
                self.r.rss_now = m.rss_bytes;
            }
        }
        let mut line = serde_json::to_vec(&self.r).context("encode report")?;
        line.push(b'\n');
        let mut out = io::stdout().lock();
        out.write_all(&line)
            .and_then(|()| out.flush())
            .context("write report to coordinator")?;
        Ok(())
    }

    /// Pins every window that opened before the retention and drops older log entries, so
    /// the logs hold only the publish rate times the retention (see [`crate::publish_log`]).
    pub(super) fn trim_publish_logs(&mut self) {
        let retain = self.cfg.publish_timeout_ms * 1000 + RETAIN_PAST_PUBLISH_TIMEOUT_US;
        let cutoff = now_us().saturating_sub(retain);
        let channels = self.cfg.channels;
        for (_, c) in self.conns.iter_mut() {
            c.pin_windows(&self.publishes, channels, cutoff);
        }
        for log in &mut self.publishes {
            log.drop_sent_before(cutoff);
        }
    }

    /// Settles every online connection's window and sends the final report. The memory figure
    /// is taken before anything is closed, so it is the footprint while holding.
    pub(super) fn finish(&mut self) -> anyhow::Result<()> {
        self.stop = true;
        let channels = self.cfg.channels.max(1);
        let settle_all = self.cfg.keeps_windows();
        for (_, c) in self.conns.iter_mut() {
            if c.storm & storm::DROPPED != 0 {
                self.r.storm.still_away += 1;
            } else if c.storm & storm::BACK != 0 {
                self.r.storm.not_caught_up += 1;
            }
            // A storm settles every window, also of connections that never came back.
            if c.state == State::Online || settle_all {
                c.settle(&self.publishes, channels, None, &mut self.r.delivery);
            }
        }
        self.report(true)
    }
}
