//! HTTP/2 connections (`--http2`): one socket carrying `--streams-per-conn` SSE streams, each
//! a subscriber with its own channel, resume id, delivery window and unparsed tail. The frames
//! are read by [`c1m_proto::client::h2::Session`]; each stream's DATA goes through the same SSE
//! parser and delivery accounting as an HTTP/1.1 subscriber's body.
//!
//! The socket's slot keeps the connection-level state (state, timers, output, a partial
//! frame); the streams live in [`H2Conn`], boxed, so an HTTP/1.1 run pays one pointer for it.
//! The streams survive a reconnect (`--reconnect`): their ids restart at 1 on the new socket,
//! and each asks to resume after its last id.

use super::conn::{Conn, Spill, State};
use super::conn_io::{on_message, Ours};
use super::Worker;
use crate::delivery::{ConnDelivery, DeliveryTotals};
use crate::payload::now_us;
use crate::proto::{self, Ctx, Event, Phase, Wire};
use crate::publish_log::PublishLog;
use crate::template::expand;
use c1m_proto::client::h2::{self as client, H2Event, Session};
use c1m_proto::h2::ErrorCode;

/// The HTTP/2 side of one bench connection.
pub(super) struct H2Conn {
    /// The frame session of the current socket (a new one per attempt).
    session: Option<Session>,
    subs: Vec<Sub>,
}

/// One SSE stream: subscriber `global × N + index`.
#[derive(Default)]
struct Sub {
    /// Answered 200 on the current socket.
    confirmed: bool,
    /// DATA bytes since this stream's window was last topped up.
    received: u32,
    last_id: u64,
    delivery: ConnDelivery,
    /// Unparsed SSE tail; empty while idle.
    pending: Spill,
}

/// Stream id of the `i`-th stream on a socket (client streams are odd, in opening order).
fn stream_id(i: usize) -> u32 {
    2 * i as u32 + 1
}

fn index_of(stream: u32) -> Option<usize> {
    (stream % 2 == 1).then_some((stream / 2) as usize)
}

impl Worker {
    /// The first bytes of an HTTP/2 attempt on `key`: the preface and one request per stream.
    pub(super) fn h2_requests(&mut self, key: usize) -> Vec<u8> {
        let n = self.cfg.h2_streams as usize;
        let scheme = if self.cfg.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let Some(c) = self.conns.get_mut(key) else {
            return Vec::new();
        };
        let h2 = c.h2.get_or_insert_with(|| {
            Box::new(H2Conn {
                session: None,
                subs: (0..n).map(|_| Sub::default()).collect(),
            })
        });
        let mut out = Vec::with_capacity(64 + n * 96);
        h2.session = Some(client::start(&mut out));
        let channels = self.cfg.channels.max(1);
        for (i, sub) in h2.subs.iter_mut().enumerate() {
            sub.confirmed = false;
            sub.received = 0;
            sub.pending.clear();
            let global = u64::from(c.global) * n as u64 + i as u64;
            let name = self.cfg.channel_name((global % u64::from(channels)) as u32);
            let index = global.to_string();
            let vars = [("ch", name.as_str()), ("i", index.as_str())];
            let path = expand(&self.cfg.path_template, &vars);
            let headers = client::header_pairs(&expand(&self.cfg.header_template, &vars));
            let last_id = (sub.last_id != 0).then_some(sub.last_id);
            client::request(
                &mut out,
                stream_id(i),
                scheme,
                &self.cfg.host,
                &path,
                last_id,
                &headers,
            );
        }
        out
    }

    /// Parses `n` fresh bytes in the scratch buffer for HTTP/2 connection `key`; false if it
    /// ended.
    pub(super) fn h2_consume(&mut self, key: usize, n: usize) -> bool {
        let streams = u64::from(self.cfg.h2_streams);
        let channels = u64::from(self.cfg.channels.max(1));
        let run_start_us = self.cfg.run_start_us;
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        if let Some(t) = c.tls.as_deref() {
            if t.alpn_protocol() != Some(&b"h2"[..]) {
                self.end(key, Some("server did not choose h2 (ALPN)".into()));
                return false;
            }
        }
        let Some(h2) = c.h2.as_deref_mut() else {
            return false;
        };
        let Some(session) = h2.session.as_mut() else {
            return false;
        };
        let subs = &mut h2.subs;
        let mut input = c.pending.take();
        let from_pending = !input.is_empty();
        if from_pending {
            input.extend_from_slice(&self.scratch[..n]);
        }
        let data: &[u8] = if from_pending {
            &input
        } else {
            &self.scratch[..n]
        };
        let base = u64::from(c.global) * streams;
        let mut out = c.out.take();
        let mut updates = Vec::new();
        let mut failed: Option<String> = None;
        let mut confirmed = 0usize;
        let t = &mut self.r.delivery;
        let dh = &mut self.delivery_h;
        let result = session.receive(data, &mut out, &mut |ev: H2Event<'_>| {
            if failed.is_some() {
                return;
            }
            let stream = match ev {
                H2Event::Response { stream, .. }
                | H2Event::Data { stream, .. }
                | H2Event::Reset { stream, .. } => stream,
                H2Event::GoAway { code, .. } => {
                    if code != ErrorCode::NO_ERROR {
                        failed = Some(format!("h2 GOAWAY {code}"));
                    }
                    return;
                }
            };
            let Some(i) = index_of(stream).filter(|&i| i < subs.len()) else {
                failed = Some("h2 frame on a stream bench did not open".into());
                return;
            };
            let sub = &mut subs[i];
            match ev {
                H2Event::Response {
                    status: 200,
                    end_stream: false,
                    ..
                } if !sub.confirmed => {
                    sub.confirmed = true;
                    sub.delivery.window_start_us = now_us();
                    confirmed += 1;
                }
                H2Event::Response { status, .. } if status != 200 => {
                    failed = Some(format!("HTTP {status}"));
                }
                H2Event::Response { .. } => failed = Some("h2 unexpected response head".into()),
                H2Event::Reset { code, .. } => failed = Some(format!("h2 stream reset {code}")),
                H2Event::Data {
                    data,
                    flow_len,
                    end_stream,
                    ..
                } => {
                    client::stream_consumed(&mut updates, stream, &mut sub.received, flow_len);
                    let ours = Ours {
                        channel: ((base + i as u64) % channels) as u32,
                        run_start_us,
                        live_from_us: 0,
                    };
                    if let Err(e) = sse_body(sub, data, ours, t, dh) {
                        failed = Some(e);
                    } else if end_stream {
                        failed = Some("h2 stream ended by server".into());
                    }
                }
                H2Event::GoAway { .. } => {}
            }
        });
        out.extend_from_slice(&updates);
        c.out.put(out);
        let used = match result {
            Ok(used) => used,
            Err(e) => {
                self.end(key, Some(e.0));
                return false;
            }
        };
        if from_pending {
            input.drain(..used);
        } else {
            input = data[used..].to_vec();
        }
        if input.len() > proto::MAX_PENDING {
            self.end(key, Some("h2 frame too large".into()));
            return false;
        }
        c.pending.put(input);
        if let Some(kind) = failed {
            self.end(key, Some(kind));
            return false;
        }
        let all = confirmed > 0 && h2.subs.iter().all(|s| s.confirmed);
        if all && c.state == State::Subscribing {
            c.state = State::Online;
            let now = self.mono_us();
            self.went_online(key, now);
        }
        self.flush(key)
    }
}

/// One stream's DATA through the SSE parser into its delivery accounting.
fn sse_body(
    sub: &mut Sub,
    data: &[u8],
    ours: Ours,
    t: &mut DeliveryTotals,
    dh: &mut hdrhistogram::Histogram<u64>,
) -> Result<(), String> {
    let mut buf = sub.pending.take();
    let from_pending = !buf.is_empty();
    if from_pending {
        buf.extend_from_slice(data);
    }
    let bytes: &[u8] = if from_pending { &buf } else { data };
    let ctx = Ctx {
        wire: Wire::Sse,
        ws_accept: "",
    };
    let mut phase = Phase::Body;
    let mut closed = false;
    let (delivery, last_id) = (&mut sub.delivery, &mut sub.last_id);
    let used = proto::parse(&ctx, &mut phase, bytes, &mut |ev: Event<'_>| match ev {
        Event::Message { id, data } => {
            on_message(delivery, last_id, ours, id, data, t, dh);
        }
        Event::Gap => t.server_gaps += 1,
        Event::Closed => closed = true,
        _ => {}
    })
    .map_err(|e| e.0)?;
    if closed {
        return Err("server closed the stream".into());
    }
    let tail = bytes[used..].to_vec();
    if tail.len() > proto::MAX_PENDING {
        return Err("answer too large".into());
    }
    sub.pending.put(tail);
    Ok(())
}

impl Conn {
    /// Settles the delivery windows of this connection's subscribers: its own (HTTP/1.1) or
    /// each stream's (HTTP/2). `closed_at`: when the connection ended (None: the run ended).
    pub(super) fn settle(
        &mut self,
        publishes: &[PublishLog],
        channels: u32,
        closed_at: Option<u64>,
        t: &mut DeliveryTotals,
    ) {
        self.for_each_window(publishes, channels, |d, log| {
            d.close_session(log, closed_at, t)
        });
    }

    /// Pins the windows of this connection's subscribers that opened before `cutoff_us`.
    pub(super) fn pin_windows(&mut self, publishes: &[PublishLog], channels: u32, cutoff_us: u64) {
        self.for_each_window(publishes, channels, |d, log| d.pin_window(log, cutoff_us));
    }

    /// Calls `f` with each subscriber's delivery state (its own, or each HTTP/2 stream's) and
    /// its channel's publish log.
    fn for_each_window(
        &mut self,
        publishes: &[PublishLog],
        channels: u32,
        mut f: impl FnMut(&mut ConnDelivery, &PublishLog),
    ) {
        let channels = u64::from(channels.max(1));
        match self.h2.as_deref_mut() {
            None => {
                let ch = (u64::from(self.global) % channels) as usize;
                if let Some(log) = publishes.get(ch) {
                    f(&mut self.delivery, log);
                }
            }
            Some(h2) => {
                let base = u64::from(self.global) * h2.subs.len() as u64;
                for (i, sub) in h2.subs.iter_mut().enumerate() {
                    let ch = ((base + i as u64) % channels) as usize;
                    if let Some(log) = publishes.get(ch) {
                        f(&mut sub.delivery, log);
                    }
                }
            }
        }
    }

    /// The socket ended: its HTTP/2 session goes (the streams stay for a reconnect).
    /// `new_client`: the next attempt is a new client (churn): no resume, new windows.
    pub(super) fn h2_ended(&mut self, new_client: bool) {
        if let Some(h2) = self.h2.as_deref_mut() {
            h2.session = None;
            for sub in &mut h2.subs {
                sub.confirmed = false;
                sub.pending.clear();
                if new_client {
                    sub.last_id = 0;
                    sub.delivery = ConnDelivery::default();
                }
            }
        }
    }
}
