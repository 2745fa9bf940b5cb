//! `/status` (JSON) and `/metrics` (Prometheus text): one [`Report`] gathered from the workers'
//! latest figures and the master's own, rendered two ways so the two never disagree.
//! Counters stay monotonic across worker restarts: what a dead worker had counted is kept in
//! its slot's `retired` figures and added in (Prometheus treats a falling `_total` as a reset).
//! Gathering is cheap: memory comes from the sampler's cache, not from /proc.

use super::Master;
use crate::broker::BrokerStats;
use crate::histogram::Latencies;
use crate::ipc::Refused;
use crate::ipc::TlsStats;
use crate::ipc::WorkerStats;
use c1m_sys::mem::ProcessMemory;
use serde_json::json;
use std::fmt::Write;

/// Per-worker gauges for `/metrics` (label `worker`) and the dashboard.
pub struct WorkerGauges {
    pub index: usize,
    pub connections: u64,
    pub unsent_bytes: u64,
    pub rss_bytes: u64,
}

pub struct Report {
    pid: u32,
    uptime_s: u64,
    workers: Vec<(usize, u32, u64, u64, bool)>, // index, pid, connections, restarts, answering
    /// The worker that alone serves the admin listener (`--admin-listen`).
    control_worker: Option<usize>,
    sse: u64,
    ws: u64,
    longpoll: u64,
    tcp: u64,
    other: u64,
    with_user: u64,
    memory: ProcessMemory,
    processes: u64,
    published: u64,
    delivered: u64,
    dropped: u64,
    client_ignored: u64,
    refused: Refused,
    restarts: u64,
    channels: usize,
    publish_refused: u64,
    history_bytes: usize,
    /// Presence: (channels, members, bytes) and the counters.
    presence: (usize, usize, usize),
    presence_counters: super::presence::Counters,
    tls: Option<TlsStats>,
    h2: crate::ipc::H2Stats,
    /// WebSocket streams over HTTP/2 open now (a gauge, beside the `h2` counters).
    ws_http2: u64,
    proxy: crate::ipc::ProxyStats,
    proxy_in_flight: u64,
    publish_moves: crate::ipc::PublishMoveStats,
    broker: BrokerStats,
    pub(super) latency: Latencies,
    pub(super) gauges: Vec<WorkerGauges>,
    pub(super) subscribes: u64,
    heartbeats_sent: u64,
    heartbeats_skipped: u64,
    upgrades: super::upgrade::Counters,
    /// `--io` as asked, and each worker's send path (index, report).
    io_mode: crate::config::IoMode,
    io: Vec<(usize, Option<crate::ipc::IoReport>)>,
    webhooks: Option<std::sync::Arc<super::webhooks::Stats>>,
    /// Each configured channel namespace with its resolved options.
    namespaces: serde_json::Value,
    /// Accept steering (`crate::steering`): null when off.
    steering: serde_json::Value,
}

impl Report {
    pub fn gather(m: &Master) -> Report {
        let mut r = Report {
            pid: std::process::id(),
            uptime_s: m.started.elapsed().as_secs(),
            workers: Vec::new(),
            control_worker: m.control_slot(),
            sse: 0,
            ws: 0,
            longpoll: 0,
            tcp: 0,
            other: 0,
            with_user: 0,
            memory: ProcessMemory::default(),
            processes: 0,
            published: m.published,
            delivered: 0,
            dropped: 0,
            client_ignored: 0,
            refused: Refused::default(),
            restarts: m.restarts,
            channels: 0,
            publish_refused: m.publish_refused,
            history_bytes: 0,
            presence: m.presence.totals(),
            presence_counters: m.presence.counters,
            broker: {
                let mut b = m.broker.stats();
                b.unreadable_messages += m.api.unreadable_control;
                b
            },
            upgrades: m.upgrades,
            tls: m.cfg.tls_cert.is_some().then(TlsStats::default),
            h2: crate::ipc::H2Stats::default(),
            ws_http2: 0,
            proxy: crate::ipc::ProxyStats::default(),
            proxy_in_flight: 0,
            publish_moves: crate::ipc::PublishMoveStats::default(),
            latency: Latencies::default(),
            gauges: Vec::new(),
            subscribes: 0,
            heartbeats_sent: 0,
            heartbeats_skipped: 0,
            webhooks: m.webhooks.as_ref().map(|w| std::sync::Arc::clone(&w.stats)),
            io_mode: m.cfg.io,
            io: m.slots.iter().map(|s| s.io.clone()).enumerate().collect(),
            namespaces: crate::config::Namespaces::new(&m.cfg).status_json(),
            steering: m.steering.as_ref().map_or(serde_json::Value::Null, |s| {
                json!({
                    "cpus": s.view().iter().map(|(cpu, worker)| json!({"cpu": cpu, "worker": worker}))
                        .collect::<Vec<_>>(),
                    "moves": s.moves,
                    "taken_from_silent": s.silent,
                    "mark": s.limits().0,
                    "quantum": s.limits().1,
                })
            }),
        };
        r.channels = r.broker.channels;
        r.history_bytes = r.broker.history_bytes;
        for (i, slot) in m.slots.iter().enumerate() {
            let s = &slot.stats;
            let (pid, answering) = super::health::liveness(slot);
            let conns = s.connections();
            r.workers.push((i, pid, conns, slot.restarts, answering));
            r.gauges.push(WorkerGauges {
                index: i,
                connections: conns,
                unsent_bytes: s.unsent_bytes,
                rss_bytes: s.rss_bytes,
            });
            r.latency.add(&s.latency);
            r.latency.add(&slot.retired.latency);
            r.subscribes += s.subscribes + slot.retired.subscribes;
            r.heartbeats_sent += s.heartbeats_sent + slot.retired.heartbeats_sent;
            r.heartbeats_skipped += s.heartbeats_skipped + slot.retired.heartbeats_skipped;
            r.sse += s.conns_sse;
            r.ws += s.conns_ws;
            r.ws_http2 += s.conns_ws_http2;
            r.longpoll += s.conns_longpoll;
            r.tcp += s.conns_tcp;
            r.other += s.conns_other;
            r.with_user += s.conns_with_user;
            r.delivered += s.delivered;
            r.dropped += s.dropped;
            r.client_ignored += s.client_ignored;
            r.refused.add(&s.refused);
            let old = &slot.retired;
            r.delivered += old.delivered;
            r.dropped += old.dropped;
            r.client_ignored += old.client_ignored;
            r.refused.add(&old.refused);
            if let Some(tls) = &mut r.tls {
                tls.add(&s.tls);
                tls.add(&old.tls);
            }
            r.h2.add(&s.h2);
            r.h2.add(&old.h2);
            r.proxy.add(&s.proxy);
            r.proxy.add(&old.proxy);
            r.proxy_in_flight += s.proxy_in_flight;
            r.publish_moves.add(&s.publish_moves);
            r.publish_moves.add(&old.publish_moves);
        }
        let pids = r.workers.iter().map(|w| w.1).filter(|&p| p != 0).collect();
        (r.memory, r.processes) = m.memory.latest(pids);
        r
    }

    pub(super) fn total(&self) -> u64 {
        self.sse + self.ws + self.longpoll + self.tcp + self.other
    }

    /// `/status` `http2`: the counters, and the WebSocket streams open now.
    fn http2_json(&self) -> serde_json::Value {
        let mut map: serde_json::Map<String, serde_json::Value> = self
            .h2
            .fields()
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        map.insert("websocket_streams_open".into(), json!(self.ws_http2));
        serde_json::Value::Object(map)
    }

    /// `/status` `tls`: the counters and the mean handshake time; null when TLS is off.
    fn tls_json(&self) -> serde_json::Value {
        let Some(tls) = &self.tls else {
            return serde_json::Value::Null;
        };
        let mut map: serde_json::Map<String, serde_json::Value> = tls
            .fields()
            .iter()
            .filter(|(k, _)| *k != "handshake_micros")
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let mean_us = tls
            .handshake_micros
            .checked_div(tls.handshakes)
            .unwrap_or(0);
        map.insert("handshake_mean_us".into(), json!(mean_us));
        serde_json::Value::Object(map)
    }

    /// `/status` `io`: `--io` as asked and, per worker, the path it uses and its io_uring counters.
    fn io_json(&self) -> serde_json::Value {
        let count = |uring: bool| {
            self.io
                .iter()
                .filter(|(_, r)| r.as_ref().is_some_and(|r| r.uring == uring))
                .count()
        };
        json!({
            "mode": self.io_mode,
            "uring_workers": count(true),
            "epoll_workers": count(false),
            "workers": self.io.iter().map(|(index, r)| match r {
                // Started, not reported yet.
                None => json!({"index": index, "path": null}),
                Some(r) => json!({
                    "index": index,
                    "path": if r.uring { "uring" } else { "epoll" },
                    "fallback_reason": (!r.fallback_reason.is_empty()).then_some(&r.fallback_reason),
                    "uring_submits": r.uring_submits,
                    "uring_sends": r.uring_sends,
                    "uring_queued": r.uring_queued,
                }),
            }).collect::<Vec<_>>(),
        })
    }

    pub fn json(&self) -> String {
        json!({
            "pid": self.pid,
            "uptime_s": self.uptime_s,
            "workers": self.workers.iter().map(|(index, pid, connections, restarts, answering)| json!({
                "index": index, "pid": pid, "connections": connections, "restarts": restarts,
                "answering": answering,
                "role": if self.control_worker == Some(*index) { "control" } else { "subscribers" },
            })).collect::<Vec<_>>(),
            "connections": {
                "total": self.total(), "sse": self.sse, "websocket": self.ws,
                "longpoll": self.longpoll, "tcp": self.tcp, "other": self.other,
                "with_user": self.with_user,
            },
            "memory": {
                "rss_bytes": self.memory.rss_bytes, "pss_bytes": self.memory.pss_bytes,
                "processes": self.processes,
            },
            "messages": {
                "published": self.published, "delivered": self.delivered, "dropped": self.dropped,
                "client_ignored": self.client_ignored, "publish_refused": self.publish_refused,
            },
            "history_bytes": self.history_bytes,
            "presence": {
                "channels": self.presence.0, "members": self.presence.1, "bytes": self.presence.2,
                "joins": self.presence_counters.joins, "leaves": self.presence_counters.leaves,
                "events": self.presence_counters.events,
                "refused": {
                    "channel_full": self.presence_counters.refused_channel_full,
                    "bytes_full": self.presence_counters.refused_bytes_full,
                },
            },
            "refused": counts_json(&self.refused.fields()),
            "worker_restarts": self.restarts,
            "channels": self.channels,
            "tls": self.tls_json(),
            "proxy": {
                "in_flight": self.proxy_in_flight,
                "calls": counts_json(&self.proxy.fields()),
            },
            "http2": self.http2_json(),
            "publish_moves": counts_json(&self.publish_moves.fields()),
            "broker": {
                "kind": self.broker.kind, "connected": self.broker.connected,
                "reconnects": self.broker.reconnects,
                "publish_unavailable": self.broker.publish_unavailable,
                "join_unavailable": self.broker.join_unavailable,
                "live_gaps": self.broker.live_gaps, "in_flight": self.broker.in_flight,
                "connect_failures": self.broker.connect_failures,
                "auth_failures": self.broker.auth_failures,
                "idempotent_replays": self.broker.idempotent_replays,
                "pubsub_dead_links": self.broker.pubsub_dead_links,
                "unreadable_messages": self.broker.unreadable_messages,
                "resubscribes": self.broker.resubscribes,
            },
            "subscribes": self.subscribes,
            "heartbeats": {"sent": self.heartbeats_sent, "skipped": self.heartbeats_skipped},
            "version": crate::build_info().0,
            "commit": crate::build_info().1,
            "upgrades": {
                "attempted": self.upgrades.attempted, "completed": self.upgrades.completed,
                "failed": self.upgrades.failed,
            },
            "io": self.io_json(),
            "webhooks": self.webhooks.as_ref().map(|w| w.json()),
            "namespaces": self.namespaces,
            "steering": self.steering,
            "latency": serde_json::Value::Object(
                self.latency
                    .fields()
                    .iter()
                    .map(|(name, _, h)| (name.trim_end_matches("_seconds").to_string(), h.summary_json()))
                    .collect(),
            ),
        })
        .to_string()
    }

    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, rows: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP c1m_{name} {help}\n# TYPE c1m_{name} {kind}");
            for (labels, value) in rows {
                let _ = writeln!(out, "c1m_{name}{labels} {value}");
            }
        };
        metric(
            "connections",
            "gauge",
            "Open client connections by protocol.",
            &[
                ("{proto=\"sse\"}", self.sse),
                ("{proto=\"websocket\"}", self.ws),
                ("{proto=\"longpoll\"}", self.longpoll),
                ("{proto=\"tcp\"}", self.tcp),
                ("{proto=\"other\"}", self.other),
            ],
        );
        metric(
            "connections_with_user",
            "gauge",
            "Open client connections whose token named a user (its sub).",
            &[("", self.with_user)],
        );
        metric(
            "messages_published_total",
            "counter",
            "Messages published.",
            &[("", self.published)],
        );
        metric(
            "messages_delivered_total",
            "counter",
            "Message deliveries to subscribers.",
            &[("", self.delivered)],
        );
        metric(
            "messages_dropped_total",
            "counter",
            "Messages that could not be delivered.",
            &[("", self.dropped)],
        );
        let refused = labelled("reason", &self.refused.fields());
        let refused: Vec<(&str, u64)> = refused.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        metric(
            "refused_total",
            "counter",
            "Connections or requests refused, by reason.",
            &refused,
        );
        metric(
            "publish_refused_total",
            "counter",
            "Publishes refused (503) because a worker that must deliver them is behind.",
            &[("", self.publish_refused)],
        );
        metric(
            "history_bytes",
            "gauge",
            "Bytes of message history held for resume.",
            &[("", self.history_bytes as u64)],
        );
        metric(
            "presence_members",
            "gauge",
            "Presence members (connections in presence-enabled channels) on this node.",
            &[("", self.presence.1 as u64)],
        );
        metric(
            "presence_bytes",
            "gauge",
            "Bytes of presence member sets, counted against --presence-max-bytes.",
            &[("", self.presence.2 as u64)],
        );
        metric(
            "presence_changes_total",
            "counter",
            "Presence joins and leaves applied.",
            &[
                ("{change=\"join\"}", self.presence_counters.joins),
                ("{change=\"leave\"}", self.presence_counters.leaves),
            ],
        );
        metric(
            "presence_refused_total",
            "counter",
            "Joins left out of presence (the subscription still works), by the cap reached.",
            &[
                (
                    "{reason=\"channel_full\"}",
                    self.presence_counters.refused_channel_full,
                ),
                (
                    "{reason=\"bytes_full\"}",
                    self.presence_counters.refused_bytes_full,
                ),
            ],
        );
        metric(
            "presence_events_total",
            "counter",
            "Join and leave events sent to subscribers' workers.",
            &[("", self.presence_counters.events)],
        );
        metric(
            "memory_rss_bytes",
            "gauge",
            "RSS summed over all c1m processes.",
            &[("", self.memory.rss_bytes)],
        );
        metric(
            "memory_pss_bytes",
            "gauge",
            "PSS summed over all c1m processes.",
            &[("", self.memory.pss_bytes)],
        );
        metric(
            "worker_restarts_total",
            "counter",
            "Workers restarted after dying.",
            &[("", self.restarts)],
        );
        metric(
            "channels",
            "gauge",
            "Channels with history.",
            &[("", self.channels as u64)],
        );
        let b = &self.broker;
        metric(
            "broker_connected",
            "gauge",
            "1 when the broker can be reached (always 1 for the in-process hub).",
            &[("", u64::from(b.connected))],
        );
        metric(
            "broker_reconnects_total",
            "counter",
            "Times the broker connection was made again after a loss.",
            &[("", b.reconnects)],
        );
        metric(
            "broker_unavailable_total",
            "counter",
            "Requests refused (503 / WebSocket 1013) because the broker was unreachable.",
            &[
                ("{op=\"publish\"}", b.publish_unavailable),
                ("{op=\"subscribe\"}", b.join_unavailable),
            ],
        );
        metric(
            "broker_live_gaps_total",
            "counter",
            "Gap events sent to live subscribers after a broker outage lost messages.",
            &[("", b.live_gaps)],
        );
        metric(
            "broker_connect_failures_total",
            "counter",
            "Failed attempts to (re)connect to the broker; reason=\"refused\": wrong password \
             or user, no ACL permission, untrusted TLS certificate (logged; an operator must act).",
            &[
                ("{reason=\"refused\"}", b.auth_failures),
                (
                    "{reason=\"unreachable\"}",
                    b.connect_failures.saturating_sub(b.auth_failures),
                ),
            ],
        );
        metric(
            "broker_pubsub_dead_links_total",
            "counter",
            "Broker pub/sub connections dropped because they went silent (PING unanswered): \
             each is made again and its channels caught up.",
            &[("", b.pubsub_dead_links)],
        );
        metric(
            "broker_unreadable_messages_total",
            "counter",
            "Messages from other nodes this build could not read (channel messages, join/leave \
             events, control messages), logged and ignored: a node of another c1m version or \
             another program publishing on c1m's names.",
            &[("", b.unreadable_messages)],
        );
        metric(
            "broker_resubscribes_total",
            "counter",
            "Channels subscribed again on the broker after their live subscription was lost \
             (connection lost or dead, Redis Cluster slot moved), each caught up from history.",
            &[("", b.resubscribes)],
        );
        metric(
            "idempotent_replays_total",
            "counter",
            "Publishes that repeated an Idempotency-Key on their channel: answered with the first \
             publish's id, stored and delivered once.",
            &[("", b.idempotent_replays)],
        );
        metric(
            "broker_in_flight",
            "gauge",
            "Requests sent to the broker and not answered yet.",
            &[("", b.in_flight)],
        );
        metric(
            "subscribes_total",
            "counter",
            "Subscriptions taken (one per channel a connection joins).",
            &[("", self.subscribes)],
        );
        metric(
            "heartbeats_sent_total",
            "counter",
            "SSE heartbeat comments written.",
            &[("", self.heartbeats_sent)],
        );
        metric(
            "heartbeats_skipped_total",
            "counter",
            "SSE heartbeats not written: the stream was sent other bytes within the interval.",
            &[("", self.heartbeats_skipped)],
        );
        let u = &self.upgrades;
        metric(
            "upgrades_attempted_total",
            "counter",
            "Live binary upgrades started (SIGUSR2), over all generations of the master.",
            &[("", u.attempted)],
        );
        metric(
            "upgrades_completed_total",
            "counter",
            "Live binary upgrades that handed every connection over.",
            &[("", u.completed)],
        );
        metric(
            "upgrades_failed_total",
            "counter",
            "Live binary upgrades aborted (the old processes served on).",
            &[("", u.failed)],
        );
        let (version, commit) = crate::build_info();
        let build = format!(
            "{{version=\"{}\",commit=\"{}\"}}",
            label_value(version),
            label_value(commit)
        );
        metric(
            "build_info",
            "gauge",
            "Always 1; the labels say which build is running.",
            &[(build.as_str(), 1)],
        );
        let per_worker = |f: fn(&WorkerGauges) -> u64| -> Vec<(String, u64)> {
            self.gauges
                .iter()
                .map(|g| (format!("{{worker=\"{}\"}}", g.index), f(g)))
                .collect()
        };
        for (name, help, rows) in [
            (
                "worker_connections",
                "Open client connections of one worker.",
                per_worker(|g| g.connections),
            ),
            (
                "worker_unsent_bytes",
                "Bytes queued in one worker's connections that their sockets have not taken.",
                per_worker(|g| g.unsent_bytes),
            ),
            (
                "worker_memory_rss_bytes",
                "Resident memory of one worker process.",
                per_worker(|g| g.rss_bytes),
            ),
        ] {
            let rows: Vec<(&str, u64)> = rows.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            metric(name, "gauge", help, &rows);
        }
        // I/O path: which workers send through io_uring, and how much.
        let io_rows = |f: fn(&crate::ipc::IoReport) -> u64| -> Vec<(String, u64)> {
            self.io
                .iter()
                .filter_map(|(i, r)| Some((format!("{{worker=\"{i}\"}}"), f(r.as_ref()?))))
                .collect()
        };
        for (name, kind, help, rows) in [
            (
                "worker_io_uring",
                "gauge",
                "1 when the worker sends fan-outs through io_uring, 0 for epoll + write().",
                io_rows(|r| u64::from(r.uring)),
            ),
            (
                "uring_submits_total",
                "counter",
                "io_uring_enter calls made for fan-out sends.",
                io_rows(|r| r.uring_submits),
            ),
            (
                "uring_sends_total",
                "counter",
                "Fan-out sends submitted through io_uring.",
                io_rows(|r| r.uring_sends),
            ),
            (
                "uring_queued_total",
                "counter",
                "io_uring sends the socket did not take whole; the rest waits for EPOLLOUT.",
                io_rows(|r| r.uring_queued),
            ),
        ] {
            let rows: Vec<(&str, u64)> = rows.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            metric(name, kind, help, &rows);
        }
        let h = &self.h2;
        for (name, help, value) in [
            (
                "http2_connections_total",
                "Connections that spoke HTTP/2 (ALPN h2 or h2c prior knowledge).",
                h.connections,
            ),
            (
                "http2_streams_total",
                "HTTP/2 request streams served, each as the same HTTP/1.1 request would be.",
                h.streams,
            ),
            (
                "http2_slow_streams_total",
                "HTTP/2 streams reset because their DATA could not be queued (slow consumer).",
                h.slow_streams,
            ),
            (
                "http2_websocket_streams_total",
                "WebSocket streams opened over HTTP/2 (extended CONNECT, RFC 8441).",
                h.websocket_streams,
            ),
            (
                "http2_connect_refused_total",
                "HTTP/2 CONNECT requests refused (no :protocol, not websocket, or no WebSocket on the path).",
                h.connect_refused,
            ),
            (
                "http2_output_full_total",
                "HTTP/2 sends refused because the connection's output bound was reached.",
                h.output_full,
            ),
        ] {
            metric(name, "counter", help, &[("", value)]);
        }
        metric(
            "http2_websocket_streams",
            "gauge",
            "WebSocket streams over HTTP/2 open now (also counted in connections{proto=\"websocket\"}).",
            &[("", self.ws_http2)],
        );
        metric(
            "http2_connection_errors_total",
            "counter",
            "HTTP/2 GOAWAY frames sent with an error code, by cause (other: any protocol error).",
            &[
                ("{cause=\"rapid_reset\"}", h.rapid_reset),
                ("{cause=\"continuation_flood\"}", h.continuation_flood),
                ("{cause=\"control_flood\"}", h.control_flood),
                (
                    "{cause=\"other\"}",
                    h.connection_errors
                        .saturating_sub(h.rapid_reset + h.continuation_flood + h.control_flood),
                ),
            ],
        );
        metric(
            "http2_stream_errors_total",
            "counter",
            "HTTP/2 streams refused or reset by the server, by cause (other: any stream error).",
            &[
                ("{cause=\"header_list_too_large\"}", h.header_list_too_large),
                ("{cause=\"refused\"}", h.refused_streams),
                ("{cause=\"malformed\"}", h.malformed_requests),
                (
                    "{cause=\"other\"}",
                    h.stream_errors
                        .saturating_sub(h.refused_streams + h.malformed_requests),
                ),
            ],
        );
        let p = &self.proxy;
        let mut calls: Vec<(String, u64)> = Vec::new();
        for (kind, counts) in [
            (
                "connect",
                [
                    p.connect_allow,
                    p.connect_deny,
                    p.connect_timeout,
                    p.connect_error,
                ],
            ),
            (
                "subscribe",
                [
                    p.subscribe_allow,
                    p.subscribe_deny,
                    p.subscribe_timeout,
                    p.subscribe_error,
                ],
            ),
            (
                "publish",
                [
                    p.publish_allow,
                    p.publish_deny,
                    p.publish_timeout,
                    p.publish_error,
                ],
            ),
            (
                "refresh",
                [
                    p.refresh_allow,
                    p.refresh_deny,
                    p.refresh_timeout,
                    p.refresh_error,
                ],
            ),
        ] {
            for (outcome, n) in ["allow", "deny", "timeout", "error"]
                .into_iter()
                .zip(counts)
            {
                calls.push((format!("{{kind=\"{kind}\",outcome=\"{outcome}\"}}"), n));
            }
        }
        let rows: Vec<(&str, u64)> = calls.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        metric(
            "proxy_requests_total",
            "counter",
            "Backend proxy calls by kind and outcome: allow, deny (the backend refused), timeout (no answer within proxy_timeout), error (connection failed, non-2xx status, or an answer that is not the documented JSON).",
            &rows,
        );
        metric(
            "proxy_busy_total",
            "counter",
            "Backend proxy calls not made because the worker had proxy_max_in_flight calls unanswered (the request got 503 / WebSocket close 1013 / TCP ERR).",
            &[
                ("{kind=\"connect\"}", p.connect_busy),
                ("{kind=\"subscribe\"}", p.subscribe_busy),
                ("{kind=\"publish\"}", p.publish_busy),
                ("{kind=\"refresh\"}", p.refresh_busy),
            ],
        );
        metric(
            "proxy_in_flight",
            "gauge",
            "Backend proxy calls made and not answered yet, over all workers.",
            &[("", self.proxy_in_flight)],
        );
        let moves = labelled("outcome", &self.publish_moves.fields());
        metric(
            "publish_moves_total",
            "counter",
            "Publish connections on the public listener by what became of them: moved (passed by a subscriber worker to the control worker), received (taken by the control worker), or kept where they arrived: kept_unreachable (control worker not listening), kept_busy (its queue full), kept_large (too much read ahead to pass); dropped_unreadable (a packet on the control worker's inbox that was not one connection: a bug).",
            &moves.iter().map(|(k, v)| (k.as_str(), *v)).collect::<Vec<_>>(),
        );
        if let Some(tls) = &self.tls {
            metric(
                "tls_handshakes_total",
                "counter",
                "TLS handshakes by outcome.",
                &[
                    ("{result=\"done\"}", tls.handshakes),
                    ("{result=\"failed\"}", tls.handshake_failed),
                    ("{result=\"timeout\"}", tls.handshake_timeout),
                    ("{result=\"abandoned\"}", tls.handshake_abandoned),
                    ("{result=\"plaintext\"}", tls.plaintext_refused),
                ],
            );
            metric(
                "tls_handshake_seconds_total",
                "counter",
                "Time spent in completed TLS handshakes (first byte to done), summed.",
                &[],
            );
            let _ = writeln!(
                out,
                "c1m_tls_handshake_seconds_total {:.6}",
                tls.handshake_micros as f64 / 1e6
            );
        }
        for (name, help, h) in self.latency.fields() {
            if name == "tls_handshake_seconds" && self.tls.is_none() {
                continue;
            }
            h.prometheus(&mut out, name, help);
        }
        if let Some(w) = &self.webhooks {
            w.prometheus(&mut out);
        }
        out
    }
}

/// Refusals over every worker, live and retired (what the refusal summary log watches).
pub fn refused_totals(m: &Master) -> Refused {
    let mut total = Refused::default();
    for slot in &m.slots {
        total.add(&slot.stats.refused);
        total.add(&slot.retired.refused);
    }
    total
}

/// Folds a dead worker's last counters into its slot's retired figures (connection gauges are
/// not counters: they are not carried over).
pub fn retire(retired: &mut WorkerStats, last: &WorkerStats) {
    retired.delivered += last.delivered;
    retired.dropped += last.dropped;
    retired.client_ignored += last.client_ignored;
    retired.refused.add(&last.refused);
    retired.tls.add(&last.tls);
    retired.h2.add(&last.h2);
    retired.proxy.add(&last.proxy);
    retired.publish_moves.add(&last.publish_moves);
    retired.subscribes += last.subscribes;
    retired.heartbeats_sent += last.heartbeats_sent;
    retired.heartbeats_skipped += last.heartbeats_skipped;
    retired.latency.add(&last.latency);
}

/// A counter struct's (key, value) pairs as one JSON object (a `/status` section).
fn counts_json(fields: &[(&str, u64)]) -> serde_json::Map<String, serde_json::Value> {
    fields
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect()
}

/// A counter struct's (key, value) pairs as Prometheus rows, each key the value of `label`.
fn labelled(label: &str, fields: &[(&str, u64)]) -> Vec<(String, u64)> {
    fields
        .iter()
        .map(|(k, v)| (format!("{{{label}=\"{k}\"}}"), *v))
        .collect()
}

/// A Prometheus label value: backslash, quote and newline escaped.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
