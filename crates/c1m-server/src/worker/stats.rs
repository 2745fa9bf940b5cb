//! The figures this worker pushes to the master every `STATS_EVERY`: connection counts by
//! protocol, unsent bytes, counters, latencies, TLS and io figures, channel counts.

use super::conn::Protocol;
use super::conn_table::ConnTable;
use super::{Counters, Worker};
use crate::ipc::{ToMaster, WorkerStats};

impl Worker {
    pub(super) fn push_stats(&mut self) -> anyhow::Result<()> {
        if self.master_congested() {
            return Ok(()); // figures are totals: the next push carries these too
        }
        let mut s = figures(&self.conns, &self.counters);
        s.dashboard_viewers = self.dashboard_viewers();
        s.proxy = self.proxies.stats;
        s.proxy_in_flight = self.proxies.in_flight() as u64;
        self.send_to_master(ToMaster::Stats(Box::new(s)));
        let io = self.sender.report(&self.io_fallback_reason);
        self.send_to_master(ToMaster::Io(io));
        let counts = self.channels.take_changed_counts();
        if !counts.is_empty() {
            self.send_to_master(ToMaster::Counts { counts });
        }
        Ok(())
    }
}

/// The worker's figures from its connections and counters (totals since it started;
/// connection counts as of now).
fn figures(conns: &ConnTable, counters: &Counters) -> WorkerStats {
    let mut s = WorkerStats {
        pid: std::process::id(),
        ..Default::default()
    };
    for (_, conn) in conns.iter() {
        s.unsent_bytes += conn.unsent_bytes() as u64;
        match conn.kind.protocol() {
            Protocol::Sse => s.conns_sse += 1,
            Protocol::WebSocket => {
                s.conns_ws += 1;
                if conn.edge & super::conn::H2_STREAM != 0 {
                    s.conns_ws_http2 += 1;
                }
            }
            Protocol::LongPoll => s.conns_longpoll += 1,
            Protocol::Tcp => s.conns_tcp += 1,
            Protocol::Other => s.conns_other += 1,
        }
    }
    s.conns_with_user = conns.user_counts().0 as u64;
    s.delivered = counters.delivered;
    s.dropped = counters.dropped;
    s.client_ignored = counters.client_ignored;
    s.refused = counters.refused;
    s.tls = conns.tls.stats();
    s.subscribes = counters.subscribes;
    s.heartbeats_sent = counters.heartbeats_sent;
    s.heartbeats_skipped = counters.heartbeats_skipped;
    s.latency = counters.latency;
    s.latency.tls_handshake = conns.tls.handshake_histogram();
    s.rss_bytes = c1m_sys::mem::own_rss_bytes().unwrap_or(0);
    s.h2 = conns.h2.stats();
    s.publish_moves = counters.moves;
    s
}
