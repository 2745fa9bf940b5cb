//! The figures each worker pushes to the master (counters by protocol and cause, TLS, the
//! send path, latency histograms) and how they cross the link: field by field BY NAME, as a
//! named record ([`c1m_proto::codec`]). Each struct's fields are listed once, in a macro that
//! declares the struct and derives from the same list the `/status` keys, the sum across
//! workers and the wire encoding; the reader ignores names it does not know and leaves missing
//! ones at zero, so a field added, removed or reordered on one side cannot shift the others.

use crate::histogram::{Histogram, Latencies, BOUNDS_US, BUCKETS};
use c1m_proto::codec::{Field, Fields, RecordWriter, Result};

/// A value that can be one named field of a record.
pub(super) trait Wire: Sized {
    fn put(&self, name: &str, r: &mut RecordWriter);
    fn get(field: &Field) -> Result<Self>;
}

impl Wire for u64 {
    fn put(&self, name: &str, r: &mut RecordWriter) {
        r.u64(name, *self);
    }
    fn get(field: &Field) -> Result<u64> {
        field.u64()
    }
}

impl Wire for u32 {
    fn put(&self, name: &str, r: &mut RecordWriter) {
        r.u64(name, u64::from(*self));
    }
    fn get(field: &Field) -> Result<u32> {
        field.u32()
    }
}

impl Wire for bool {
    fn put(&self, name: &str, r: &mut RecordWriter) {
        r.bool(name, *self);
    }
    fn get(field: &Field) -> Result<bool> {
        field.bool()
    }
}

impl Wire for String {
    fn put(&self, name: &str, r: &mut RecordWriter) {
        r.str(name, self);
    }
    fn get(field: &Field) -> Result<String> {
        field.string()
    }
}

/// Declares a struct and encodes it as a named record from its one field list.
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $ty, )*
        }

        impl $name {
            /// Its fields as (name, value) pairs of a record.
            pub(super) fn write_fields(&self, r: &mut RecordWriter) {
                $( Wire::put(&self.$field, stringify!($field), r); )*
            }

            /// Reads what [`Self::write_fields`] wrote, by name: unknown names are skipped,
            /// missing ones keep their default.
            pub(super) fn read_fields(fields: Fields) -> Result<$name> {
                let mut out = $name::default();
                fields.for_each(|field| {
                    match field.name {
                        $( stringify!($field) => out.$field = Wire::get(&field)?, )*
                        _ => {}
                    }
                    Ok(())
                })?;
                Ok(out)
            }
        }

        impl Wire for $name {
            fn put(&self, name: &str, r: &mut RecordWriter) {
                r.record(name, |r| self.write_fields(r));
            }
            fn get(field: &Field) -> Result<$name> {
                $name::read_fields(field.record()?)
            }
        }
    };
}

/// A [`wire_struct!`] of u64 counters, with the (status key, value) list `/status` and
/// `/metrics` print and the sum across workers.
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident : u64, )*
        }
    ) => {
        wire_struct! {
            $(#[$meta])*
            #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
            pub struct $name {
                $( $(#[$fmeta])* pub $field: u64, )*
            }
        }

        impl $name {
            pub const COUNT: usize = [$(stringify!($field)),*].len();

            /// (status key, value) pairs in the order declared: the one list `/status`,
            /// `/metrics` and the wire use.
            pub fn fields(&self) -> [(&'static str, u64); $name::COUNT] {
                [$( (stringify!($field), self.$field), )*]
            }

            pub fn add(&mut self, other: &$name) {
                $( self.$field += other.$field; )*
            }
        }
    };
}

wire_struct! {
    /// Per-worker counters pushed to the master with every stats report.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct WorkerStats {
        pub pid: u32,
        pub conns_sse: u64,
        pub conns_ws: u64,
        pub conns_longpoll: u64,
        pub conns_tcp: u64,
        pub conns_other: u64,
        /// Connections whose token named a user (`sub`), of the ones above.
        pub conns_with_user: u64,
        /// WebSocket streams over HTTP/2 open now, of `conns_ws`.
        pub conns_ws_http2: u64,
        pub delivered: u64,
        pub dropped: u64,
        /// WebSocket client data messages ignored (client publish off).
        pub client_ignored: u64,
        pub refused: Refused,
        pub tls: TlsStats,
        /// Subscriptions taken (one per channel a connection joins), for the dashboard's rate.
        pub subscribes: u64,
        /// Bytes queued in this worker's connections that their sockets have not taken yet.
        pub unsent_bytes: u64,
        /// This worker's resident memory (/proc/self/statm), for the per-worker gauge.
        pub rss_bytes: u64,
        /// Open `/dashboard/events` streams: the master builds snapshots only while some exist.
        pub dashboard_viewers: u64,
        /// SSE heartbeats written, and skipped because the stream was sent other bytes within
        /// the interval (or has bytes queued). `/status` `heartbeats`.
        pub heartbeats_sent: u64,
        pub heartbeats_skipped: u64,
        pub latency: Latencies,
        pub h2: H2Stats,
        pub proxy: ProxyStats,
        /// Backend proxy calls unanswered now (a gauge).
        pub proxy_in_flight: u64,
        pub publish_moves: PublishMoveStats,
    }
}

impl WorkerStats {
    /// Every client connection the worker holds, by whatever protocol.
    pub fn connections(&self) -> u64 {
        self.conns_sse + self.conns_ws + self.conns_longpoll + self.conns_tcp + self.conns_other
    }
}

counters! {
    /// Publish connections on the public listener passed from a subscriber worker to the
    /// control worker (`worker::publish_move`), `/status` key `publish_moves`: `moved` (sent),
    /// `received` (taken by the control worker), and the ones served where they arrived:
    /// `kept_unreachable` (the control worker not listening yet, or gone), `kept_busy` (its
    /// queue full), `kept_large` (more read ahead than one packet carries); and
    /// `dropped_unreadable`: a packet on the control worker's inbox that is not one connection
    /// record with one descriptor (a bug in a sibling worker: its descriptors are closed).
    pub struct PublishMoveStats {
        pub moved: u64,
        pub received: u64,
        pub kept_unreachable: u64,
        pub kept_busy: u64,
        pub kept_large: u64,
        pub dropped_unreadable: u64,
    }
}

counters! {
    /// Backend proxy calls of one worker by kind and outcome (`/status` key `proxy`):
    /// `allow` (the backend let it through), `deny` (it refused), `timeout` (no answer within
    /// `proxy_timeout`), `error` (connection refused, a non-2xx status, an answer that is not
    /// the documented JSON), `busy` (not made: `proxy_max_in_flight` calls were unanswered).
    pub struct ProxyStats {
        pub connect_allow: u64,
        pub connect_deny: u64,
        pub connect_timeout: u64,
        pub connect_error: u64,
        pub connect_busy: u64,
        pub subscribe_allow: u64,
        pub subscribe_deny: u64,
        pub subscribe_timeout: u64,
        pub subscribe_error: u64,
        pub subscribe_busy: u64,
        pub publish_allow: u64,
        pub publish_deny: u64,
        pub publish_timeout: u64,
        pub publish_error: u64,
        pub publish_busy: u64,
        pub refresh_allow: u64,
        pub refresh_deny: u64,
        pub refresh_timeout: u64,
        pub refresh_error: u64,
        pub refresh_busy: u64,
    }
}

counters! {
    /// HTTP/2 counters of one worker (`/status` key `http2`): connections and streams served,
    /// and each hardening limit's breaches (the codec's counters, summed).
    pub struct H2Stats {
        /// Connections that spoke HTTP/2 (ALPN h2 or h2c prior knowledge).
        pub connections: u64,
        /// Request streams served.
        pub streams: u64,
        /// Streams reset because their DATA could not be queued (a slow consumer).
        pub slow_streams: u64,
        /// WebSocket streams opened by an extended CONNECT (RFC 8441).
        pub websocket_streams: u64,
        /// CONNECT requests refused (no `:protocol`, another protocol, a path with no
        /// WebSocket).
        pub connect_refused: u64,
        /// GOAWAY(ENHANCE_YOUR_CALM): too many peer resets per second (rapid reset).
        pub rapid_reset: u64,
        /// GOAWAY(ENHANCE_YOUR_CALM): a header block over the byte or CONTINUATION cap.
        pub continuation_flood: u64,
        /// GOAWAY(ENHANCE_YOUR_CALM): too many control frames queued (SETTINGS/PING floods).
        pub control_flood: u64,
        /// Requests answered 431: the decoded header list passed the cap (HPACK bombs).
        pub header_list_too_large: u64,
        /// Streams refused over SETTINGS_MAX_CONCURRENT_STREAMS.
        pub refused_streams: u64,
        /// Requests reset as malformed.
        pub malformed_requests: u64,
        /// Connection errors sent (GOAWAY with an error code), the ones above included.
        pub connection_errors: u64,
        /// Stream errors sent (RST_STREAM), refused and malformed included.
        pub stream_errors: u64,
        /// Sends refused because a connection's output bound was reached.
        pub output_full: u64,
    }
}

counters! {
    /// TLS handshake counters of one worker (all zero without `--tls-cert`). `/status` key `tls`.
    pub struct TlsStats {
        /// Handshakes completed.
        pub handshakes: u64,
        /// Their summed duration (first byte accepted to handshake done), for the mean.
        pub handshake_micros: u64,
        /// Handshakes rustls refused (no common version or cipher, bad message); an alert was
        /// sent.
        pub handshake_failed: u64,
        /// Handshakes not done within `--head-timeout`: closed.
        pub handshake_timeout: u64,
        /// Clients that left before their handshake was done (health checks that only connect).
        pub handshake_abandoned: u64,
        /// Plaintext clients on a TLS port: told so (HTTP 400 / `ERR`) and closed.
        pub plaintext_refused: u64,
    }
}

counters! {
    /// Connections refused or closed for cause, by cause. The names are the `/status` keys.
    pub struct Refused {
        pub max_conns: u64,
        pub fd_limit: u64,
        pub head_too_large: u64,
        pub head_timeout: u64,
        pub bad_request: u64,
        pub not_found: u64,
        pub method: u64,
        pub slow_consumer: u64,
        pub forbidden: u64,
        pub payload_too_large: u64,
        /// WebSockets closed for a protocol error (1002, 1007, 1009).
        pub ws_protocol: u64,
        /// WebSockets closed because a ping went unanswered.
        pub ws_pong_timeout: u64,
        /// WebSockets closed (1003) for sending data with client publish off.
        pub ws_client_data: u64,
        /// Publishes or subscribes refused (503 + Retry-After, WebSocket 1013) because an
        /// internal queue is full: a worker that must deliver is behind, or the master is.
        pub busy: u64,
        /// Connections the kernel dropped as dead: keepalive probes or sent data unanswered.
        pub dead_peer: u64,
        /// Connections refused (429) because their source address held `--max-conns-per-ip`.
        pub per_ip_conns: u64,
        /// Connections refused (429) because their source address passed
        /// `--max-new-conns-per-ip-per-sec`.
        pub per_ip_rate: u64,
        /// Subscribes or JWT publishes refused (401): no token, or one that does not verify.
        pub unauthorized: u64,
        /// Held streams ended because their token expired (SSE `event: expired`, close 4001).
        pub expired: u64,
        /// Publishes refused (503 + Retry-After, WebSocket 1013) because the cluster broker
        /// could not take them: Redis unreachable, or refusing writes (out of memory).
        pub broker_unavailable: u64,
        /// Subscribes refused (503 + Retry-After, WebSocket 1013, raw TCP ERR) because the
        /// channel had its namespace's `max_subscribers` on this worker.
        pub max_subscribers: u64,
        /// Server API calls answered 503 (JSON) because the master had not answered within
        /// 3 s (e.g. Redis not answering a `history` or `presence` question).
        pub api_timeouts: u64,
        /// Subscribes or WebSocket client publishes refused because a backend proxy did not
        /// answer in time (504, WebSocket 1013) or failed (502, WebSocket 1011), raw TCP `ERR`.
        pub proxy_failed: u64,
    }
}

wire_struct! {
    /// Which send path one worker uses, and its io_uring counters. `/status` key `io`; sent
    /// with every stats push as its own message.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct IoReport {
        /// The worker sends fan-outs through io_uring (false: epoll + write()).
        pub uring: bool,
        /// Why io_uring is not used under `--io auto` (the kernel's refusal); empty otherwise.
        pub fallback_reason: String,
        /// `io_uring_enter` calls made for fan-out sends.
        pub uring_submits: u64,
        /// Sends submitted through io_uring.
        pub uring_sends: u64,
        /// io_uring sends the socket did not take whole (short or EAGAIN): the rest was queued.
        pub uring_queued: u64,
    }
}

/// A histogram's field names: each bucket by its upper bound in µs (`le_10` … `le_inf`), so a
/// bucket added on one side leaves the others where they are, and `sum_us`.
fn bucket_name(i: usize) -> String {
    match BOUNDS_US.get(i) {
        Some(bound) => format!("le_{bound}"),
        None => "le_inf".to_string(),
    }
}

fn bucket_index(name: &str) -> Option<usize> {
    match name.strip_prefix("le_")? {
        "inf" => Some(BUCKETS - 1),
        bound => BOUNDS_US.binary_search(&bound.parse().ok()?).ok(),
    }
}

impl Wire for Histogram {
    fn put(&self, name: &str, r: &mut RecordWriter) {
        r.record(name, |r| {
            for (i, count) in self.counts.iter().enumerate() {
                r.u64(&bucket_name(i), *count);
            }
            r.u64("sum_us", self.sum_us);
        });
    }
    fn get(field: &Field) -> Result<Histogram> {
        let mut h = Histogram::default();
        field.record()?.for_each(|f| {
            if f.name == "sum_us" {
                h.sum_us = f.u64()?;
            } else if let Some(i) = bucket_index(f.name) {
                h.counts[i] = f.u64()?;
            }
            Ok(())
        })?;
        Ok(h)
    }
}

/// By the names [`Latencies::fields`] gives them (`/metrics` names too).
impl Wire for Latencies {
    fn put(&self, name: &str, r: &mut RecordWriter) {
        r.record(name, |r| {
            for (name, _, h) in self.fields() {
                h.put(name, r);
            }
        });
    }
    fn get(field: &Field) -> Result<Latencies> {
        let mut out = Latencies::default();
        let names = out.fields().map(|(name, _, _)| name);
        field.record()?.for_each(|f| {
            if let Some(i) = names.iter().position(|n| *n == f.name) {
                *out.fields_mut()[i] = Histogram::get(&f)?;
            }
            Ok(())
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use c1m_proto::codec::{Reader, Writer};

    fn decode(bytes: &[u8]) -> Refused {
        Refused::read_fields(Reader::new(bytes, "test").record("r").unwrap()).unwrap()
    }

    /// Every counter set to a different value (its position), so a shift would show.
    fn numbered() -> Refused {
        let mut w = Writer::new();
        w.record(|r| {
            for (i, (name, _)) in Refused::default().fields().iter().enumerate() {
                r.u64(name, i as u64 + 1);
            }
        });
        let all = decode(&w.into_bytes());
        assert!(all
            .fields()
            .iter()
            .enumerate()
            .all(|(i, (_, v))| *v == i as u64 + 1));
        all
    }

    #[test]
    fn a_field_missing_or_added_on_one_side_does_not_shift_the_others() {
        let all = numbered();
        for (missing, _) in all.fields() {
            // The sender's list lacks `missing` and has a field this binary does not know,
            // ahead of the rest.
            let mut w = Writer::new();
            w.record(|r| {
                r.u64("a_counter_from_a_newer_binary", 99);
                r.str("a_string_from_a_newer_binary", "x");
                for (name, v) in all.fields() {
                    if name != missing {
                        r.u64(name, v);
                    }
                }
            });
            let got = decode(&w.into_bytes());
            for ((name, want), (_, have)) in all.fields().iter().zip(got.fields()) {
                if *name == missing {
                    assert_eq!(have, 0, "{name}: a missing field reads as zero");
                } else {
                    assert_eq!(have, *want, "{name} shifted when {missing} was missing");
                }
            }
        }
    }

    #[test]
    fn histograms_cross_by_bucket_bound() {
        let mut l = Latencies::default();
        l.fan_out.record(3);
        l.tls_handshake.record(20_000_000);
        l.publish_ack.record(26);
        let mut w = Writer::new();
        w.record(|r| l.put("latency", r));
        let bytes = w.into_bytes();
        let mut outer = Reader::new(&bytes, "test").record("outer").unwrap();
        let field = outer.next_field().unwrap().unwrap();
        assert_eq!(Latencies::get(&field).unwrap(), l);
        assert_eq!(bucket_index("le_10"), Some(0));
        assert_eq!(bucket_index("le_inf"), Some(BUCKETS - 1));
        assert_eq!(bucket_index("le_11"), None);
        for i in 0..BUCKETS {
            assert_eq!(bucket_index(&bucket_name(i)), Some(i));
        }
    }

    #[test]
    fn a_field_of_the_wrong_kind_is_an_error_naming_it() {
        let mut w = Writer::new();
        w.record(|r| {
            r.str("busy", "lots");
        });
        let bytes = w.into_bytes();
        let err = Refused::read_fields(Reader::new(&bytes, "ipc").record("r").unwrap())
            .unwrap_err()
            .to_string();
        assert_eq!(err, "ipc: truncated or bad field busy (not a number)");
    }
}
