//! A worker's connection I/O: writing queued output, reading until the socket would block,
//! and feeding bytes to the protocol parser with the per-connection tail kept only while a
//! unit is cut by a read boundary; plus what one received message does to the accounting.

use super::{State, Worker};
use crate::delivery::{Arrival, ConnDelivery, DeliveryTotals};
use crate::errors::io_kind;
use crate::hist::record;
use crate::payload::{self, now_us};
use crate::proto::{self, Ctx, Event, Phase, Proto};
use crate::publish_log::PublishLog;
use crate::storm::{self, StormTotals};
use crate::tls::TlsIo;
use hdrhistogram::Histogram;
use std::io::{self, Read, Write};

impl Worker {
    /// Writes pending output; false when the connection ended.
    pub(super) fn flush(&mut self, key: usize) -> bool {
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        let tls_pending = c.tls.as_ref().is_some_and(|t| t.wants_write());
        if c.out.is_empty() && !tls_pending {
            return true;
        }
        let Some(sock) = c.stream.as_mut() else {
            return false;
        };
        let mut s = TlsIo {
            sock,
            tls: c.tls.as_deref_mut(),
        };
        let mut out = c.out.take();
        let mut done = 0;
        let res = loop {
            if done == out.len() {
                // Nothing (more) of ours: only the TLS session's own bytes may be waiting.
                break s.push();
            }
            match s.write(&out[done..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        // Keep only what the socket did not take; nothing at all when it took everything.
        out.drain(..done);
        c.out.put(out);
        match res {
            Ok(()) => true,
            Err(e) => {
                self.end(key, Some(io_kind(&e)));
                false
            }
        }
    }

    pub(super) fn read(&mut self, key: usize) {
        loop {
            let Some(c) = self.conns.get_mut(key) else {
                return;
            };
            let Some(sock) = c.stream.as_mut() else {
                return;
            };
            let mut s = TlsIo {
                sock,
                tls: c.tls.as_deref_mut(),
            };
            match s.read(&mut self.scratch) {
                Ok(0) => {
                    let kind = if c.state == State::Online {
                        "EOF (server closed)"
                    } else {
                        "EOF before subscribed"
                    };
                    self.end(key, Some(kind.to_string()));
                    return;
                }
                Ok(n) => {
                    if !self.consume(key, n) {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.end(key, Some(io_kind(&e)));
                    return;
                }
            }
        }
    }

    /// Parses `n` fresh bytes in the scratch buffer for connection `key`; false if it ended.
    fn consume(&mut self, key: usize, n: usize) -> bool {
        if self.cfg.h2_streams > 0 {
            return self.h2_consume(key, n);
        }
        let proto = self.cfg.proto;
        let channels = self.cfg.channels.max(1);
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        let accept = if proto == Proto::Ws && c.phase == Phase::Head {
            proto::ws_accept(&proto::ws_key(
                u64::from(c.gen) ^ ((self.cfg.index as u64) << 40),
            ))
        } else {
            String::new()
        };
        let ctx = Ctx {
            wire: proto.wire(),
            ws_accept: &accept,
        };
        let mut pending = c.pending.take();
        let from_pending = !pending.is_empty();
        if from_pending {
            pending.extend_from_slice(&self.scratch[..n]);
        }
        let my_ch = c.global % channels;
        let ours = Ours {
            channel: my_ch,
            run_start_us: self.cfg.run_start_us,
            live_from_us: 0,
        };
        let mut online = false;
        let mut closed = false;
        let mut repoll: Option<Option<u64>> = None;
        let mut pong: Option<Vec<u8>> = None;
        let t = &mut self.r.delivery;
        let dh = &mut self.delivery_h;
        let delivery = &mut c.delivery;
        let last_id = &mut c.last_id;
        let mut storm = StormConn {
            flags: &mut c.storm,
            resub_wall_us: self.wall_epoch_us + u64::from(c.resub_ms) * 1000,
            publishes: self
                .publishes
                .get(my_ch as usize)
                .map_or(&[], PublishLog::recent),
            restart_us: super::open::back_reference_us(
                &self.cfg,
                self.storm_ref_us,
                self.wall_epoch_us,
                c.resub_ms,
            ),
            totals: &mut self.r.storm,
            back_h: &mut self.storm_back_h,
            caught_up_h: &mut self.storm_caught_up_h,
        };
        let mut on = |ev: Event<'_>| match ev {
            Event::Online => {
                online = true;
                // At once: a resume's gap and replay often come in the same read as the head.
                storm.on_online();
            }
            Event::Message { id, data } => {
                let ours = Ours {
                    live_from_us: storm.live_from_us(),
                    ..ours
                };
                if let Some(arrived) = on_message(delivery, last_id, ours, id, data, t, dh) {
                    storm.on_message(arrived);
                }
            }
            Event::Gap => {
                t.server_gaps += 1;
                storm.on_gap();
            }
            Event::PollDone { last_id: l } => repoll = Some(l),
            Event::Ping(p) => pong = Some(proto::ws_client_frame(10, p, [0x5a, 0x17, 0x3c, 0x99])),
            Event::Closed => closed = true,
        };
        let data: &[u8] = if from_pending {
            &pending
        } else {
            &self.scratch[..n]
        };
        let result = proto::parse(&ctx, &mut c.phase, data, &mut on);
        let consumed = match result {
            Ok(used) => used,
            Err(e) => {
                self.end(key, Some(e.0));
                return false;
            }
        };
        // Keep only the unparsed tail, and free it when there is none.
        if from_pending {
            pending.drain(..consumed);
            if pending.len() > proto::MAX_PENDING {
                self.end(key, Some("answer too large".into()));
                return false;
            }
        } else if consumed < n {
            pending = self.scratch[consumed..n].to_vec();
        }
        c.pending.put(pending);
        if let Some(p) = pong {
            c.out.extend(&p);
        }
        if online {
            c.state = State::Online;
            let now = self.mono_us();
            self.went_online(key, now);
        }
        if let Some(l) = repoll {
            let Some(c) = self.conns.get_mut(key) else {
                return false;
            };
            if let Some(id) = l {
                c.last_id = c.last_id.max(id);
            }
            if c.last_id != 0 && c.delivery.window_start_us == 0 {
                c.delivery.window_start_us = now_us();
            }
            let last = (c.last_id != 0).then_some(c.last_id);
            let (gen, global) = (c.gen, c.global);
            let req = self.request(global, my_ch, last, gen);
            if let Some(c) = self.conns.get_mut(key) {
                c.out.extend(&req);
            }
        }
        if closed {
            self.end(key, Some("server closed the stream".into()));
            return false;
        }
        self.flush(key)
    }
}

/// What makes a stamped message this connection's: its channel, and a send time within
/// this run.
#[derive(Clone, Copy)]
pub(super) struct Ours {
    pub(super) channel: u32,
    pub(super) run_start_us: u64,
    /// Latency counts only for messages sent from here on (a storm's back connection: what
    /// was sent before its resubscription arrives by replay and would add the outage).
    pub(super) live_from_us: u64,
}

/// A reconnect storm's view of one connection while its input is parsed (see
/// [`crate::storm`]): a back connection's replayed messages, its catch-up and its gap.
struct StormConn<'a> {
    flags: &'a mut u8,
    /// Wall-clock µs (rounded down to the ms) when the reconnection's subscribe request was
    /// sent: a message acknowledged before it can only arrive by a replay.
    resub_wall_us: u64,
    /// The channel's recently acknowledged publishes (sent µs, ack µs) in send order.
    publishes: &'a [(u64, u64)],
    restart_us: u64,
    totals: &'a mut StormTotals,
    back_h: &'a mut Histogram<u64>,
    caught_up_h: &'a mut Histogram<u64>,
}

impl StormConn<'_> {
    /// Back and not caught up yet: messages sent before the resubscription are replays.
    fn live_from_us(&self) -> u64 {
        if *self.flags & storm::BACK != 0 {
            self.resub_wall_us
        } else {
            0
        }
    }

    fn on_online(&mut self) {
        if *self.flags & storm::DROPPED != 0 {
            let now = now_us();
            *self.flags = storm::BACK | (*self.flags & storm::NO_ID);
            self.totals.back += 1;
            record(self.back_h, now.saturating_sub(self.restart_us));
        }
    }

    fn on_message(&mut self, (arrival, sent_us): (Arrival, u64)) {
        if *self.flags & storm::BACK == 0 {
            return;
        }
        if sent_us < self.resub_wall_us {
            // Replayed only if the server had ordered it before the request went out; one
            // stamped before but ordered after may have been delivered live (or is unknown
            // yet: acknowledgements reach the worker after the coordinator, so not counted).
            let i = self.publishes.partition_point(|&(s, _)| s < sent_us);
            let acked_before = matches!(self.publishes.get(i),
                Some(&(s, ack)) if s == sent_us && ack < self.resub_wall_us);
            let resumed = *self.flags & storm::NO_ID == 0;
            if arrival == Arrival::Fresh && acked_before && resumed {
                self.totals.replayed += 1;
                if *self.flags & storm::REPLAY_COUNTED == 0 {
                    *self.flags |= storm::REPLAY_COUNTED;
                    self.totals.resumed_with_replay += 1;
                }
            }
        } else {
            // Sent after the resubscription: whatever the server replays comes before it.
            *self.flags &= !storm::BACK;
            self.totals.caught_up += 1;
            record(self.caught_up_h, now_us().saturating_sub(self.restart_us));
        }
    }

    fn on_gap(&mut self) {
        if *self.flags & storm::BACK != 0 && *self.flags & storm::GAP_COUNTED == 0 {
            *self.flags |= storm::GAP_COUNTED;
            self.totals.gapped += 1;
        }
    }
}

/// Accounts one received message; for a stamped message of this connection's channel and run,
/// how it arrived and when it was sent.
pub(super) fn on_message(
    d: &mut ConnDelivery,
    last_id: &mut u64,
    ours: Ours,
    id: Option<u64>,
    data: &[u8],
    t: &mut DeliveryTotals,
    dh: &mut Histogram<u64>,
) -> Option<(Arrival, u64)> {
    let Some(stamp) = payload::decode(data) else {
        t.foreign += 1;
        if let Some(id) = id {
            *last_id = (*last_id).max(id);
        }
        return None;
    };
    if stamp.sent_us < ours.run_start_us {
        t.stale += 1;
        return None;
    }
    if stamp.channel != ours.channel {
        t.wrong_channel += 1;
        return None;
    }
    let arrival = d.on_message(stamp.seq, stamp.sent_us, t);
    // Latency of due messages only: one sent before this session's window (a server's history
    // replay to a new subscriber, or a resume after an outage) would add the time it waited
    // for the subscriber to exist.
    let due = d.window_start_us != 0
        && stamp.sent_us >= d.window_start_us
        && stamp.sent_us >= ours.live_from_us;
    if arrival != Arrival::Duplicate && due {
        record(dh, now_us().saturating_sub(stamp.sent_us));
    }
    if let Some(id) = id {
        if arrival == Arrival::Fresh && *last_id != 0 && id <= *last_id {
            t.id_regressions += 1;
        }
        *last_id = (*last_id).max(id);
    }
    Some((arrival, stamp.sent_us))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hist::new_hist;

    fn ours(channel: u32, run_start_us: u64) -> Ours {
        Ours {
            channel,
            run_start_us,
            live_from_us: 0,
        }
    }

    #[test]
    fn message_accounting() {
        let mut d = ConnDelivery {
            window_start_us: 1,
            ..Default::default()
        };
        let mut t = DeliveryTotals::default();
        let mut h = new_hist();
        let mut last = 0;
        let p = |seq, ch| {
            payload::encode(
                payload::Stamp {
                    channel: ch,
                    seq,
                    sent_us: now_us(),
                },
                0,
            )
        };
        on_message(
            &mut d,
            &mut last,
            ours(2, 0),
            Some(10),
            &p(1, 2),
            &mut t,
            &mut h,
        );
        on_message(
            &mut d,
            &mut last,
            ours(2, 0),
            Some(9),
            &p(2, 2),
            &mut t,
            &mut h,
        );
        on_message(
            &mut d,
            &mut last,
            ours(2, 0),
            Some(11),
            &p(2, 2),
            &mut t,
            &mut h,
        );
        on_message(
            &mut d,
            &mut last,
            ours(2, 0),
            Some(12),
            &p(3, 1),
            &mut t,
            &mut h,
        );
        on_message(
            &mut d,
            &mut last,
            ours(2, 0),
            None,
            b"hello",
            &mut t,
            &mut h,
        );
        assert_eq!(last, 11);
        assert_eq!(t.id_regressions, 1);
        assert_eq!(t.duplicates, 1);
        assert_eq!(t.wrong_channel, 1);
        assert_eq!(t.foreign, 1);
        assert_eq!(h.len(), 2);
    }

    /// An earlier run's messages replayed by the server (nchan's default for a new subscriber
    /// is its channel's whole history) are stale: they must not advance the sequence, or this
    /// run's own messages with the same sequences count as duplicates and go missing (seen
    /// against nchan: 0 of 400 delivered, 1,150 duplicates).
    #[test]
    fn replayed_history_is_stale_not_duplicates() {
        let mut d = ConnDelivery {
            window_start_us: 1_000,
            ..Default::default()
        };
        let (mut t, mut h, mut last) = (DeliveryTotals::default(), new_hist(), 0);
        let p = |seq, sent_us| {
            payload::encode(
                payload::Stamp {
                    channel: 0,
                    seq,
                    sent_us,
                },
                0,
            )
        };
        for seq in 1..=3 {
            on_message(
                &mut d,
                &mut last,
                ours(0, 500),
                None,
                &p(seq, 100),
                &mut t,
                &mut h,
            );
        }
        for seq in 1..=3 {
            on_message(
                &mut d,
                &mut last,
                ours(0, 500),
                None,
                &p(seq, 2_000),
                &mut t,
                &mut h,
            );
        }
        assert_eq!(t.stale, 3);
        assert_eq!((t.duplicates, t.received_in_window), (0, 3));
        let mut log = PublishLog::default();
        for _ in 0..3 {
            log.push(2_000, 2_001);
        }
        d.close_session(&log, None, &mut t);
        assert_eq!((t.expected, t.missing), (3, 0));
    }
}
