//! One message of every kind in each direction, with the stats filled in: the codec's
//! round-trip test and the seeds of the fuzz harness (crates/c1m-server/fuzz) share them, so a
//! new message kind added here is fuzzed without more work.

use super::{
    IoReport, PresenceChange, PresenceEvent, Refused, TlsStats, ToMaster, ToWorker, WorkerStats,
};
use crate::broker::Replay;
use crate::histogram::Latencies;

/// Valid messages of every kind: (worker → master, master → worker).
#[doc(hidden)]
pub fn examples() -> (Vec<ToMaster>, Vec<ToWorker>) {
    let to_master = vec![
        ToMaster::Publish {
            req: 9,
            channel: "a".into(),
            payload: b"x\ny".to_vec(),
        },
        ToMaster::PublishKeyed {
            req: 9,
            channel: "a".into(),
            payload: b"x".to_vec(),
            key: "order-17".into(),
        },
        ToMaster::Join {
            req: 1,
            channels: vec!["a".into(), "b".into()],
            after: Some(5),
        },
        ToMaster::Join {
            req: 2,
            channels: vec!["a".into()],
            after: None,
        },
        ToMaster::Leave {
            channel: "a".into(),
        },
        ToMaster::SteerFull {
            cpu: 1,
            conns: 1_238,
        },
        ToMaster::Listeners {
            fds: vec![19_991, 19_992],
        },
        ToMaster::Lifecycle {
            reports: vec![
                super::ConnReport::Opened {
                    token: (3 << 32) | 7,
                    user: Some("ann".into()),
                    channels: vec!["a".into(), "b".into()],
                    resumed: false,
                },
                super::ConnReport::Opened {
                    token: 8,
                    user: None,
                    channels: vec!["c".into()],
                    resumed: true,
                },
                super::ConnReport::Closed {
                    token: 8,
                    reason: super::CloseReason::SlowConsumer,
                },
            ],
        },
        ToMaster::Stats(Box::new(WorkerStats {
            pid: 4,
            conns_sse: 3,
            delivered: 8,
            refused: Refused {
                forbidden: 2,
                ..Default::default()
            },
            tls: TlsStats {
                handshakes: 5,
                plaintext_refused: 1,
                ..Default::default()
            },
            subscribes: 6,
            unsent_bytes: 7,
            rss_bytes: 4096,
            dashboard_viewers: 1,
            heartbeats_sent: 11,
            heartbeats_skipped: 12,
            latency: {
                let mut l = Latencies::default();
                l.publish_to_write.record(120);
                l.fan_out.record(3);
                l.publish_ack.record(900);
                l.tls_handshake.record(20_000_000);
                l
            },
            ..Default::default()
        })),
        ToMaster::StatusQuery {
            req: 3,
            metrics: true,
        },
        ToMaster::HealthQuery { req: 4 },
        ToMaster::Io(IoReport {
            uring: false,
            fallback_reason: "io_uring_setup: Operation not permitted".into(),
            uring_submits: 2,
            uring_sends: 9000,
            uring_queued: 3,
        }),
        ToMaster::Counts {
            counts: vec![("a".into(), 3), ("b".into(), 0)],
        },
        ToMaster::ChannelInfo {
            req: 6,
            channel: "a".into(),
        },
        ToMaster::Api {
            req: 7,
            call: "publish".into(),
            body: br#"{"channel":"a","data":"x"}"#.to_vec(),
            ndjson: false,
        },
        ToMaster::ApiRefused {
            call: "batch".into(),
        },
        ToMaster::ApiActed { op: 3, count: 2 },
        ToMaster::Presence {
            changes: vec![
                PresenceChange::Join {
                    channel: "room".into(),
                    token: 0x1_0000_0002,
                    user: Some("ann".into()),
                    info: Some("{\"name\":\"Ann\"}".into()),
                    quiet: false,
                },
                PresenceChange::Join {
                    channel: "room".into(),
                    token: 3,
                    user: None,
                    info: None,
                    quiet: true,
                },
                PresenceChange::Leave {
                    channel: "room".into(),
                    token: 3,
                },
            ],
        },
        ToMaster::PresenceQuery {
            req: 8,
            channel: "room".into(),
        },
        ToMaster::HandOverPrepared,
        ToMaster::HandOverSent { conns: 12 },
        ToMaster::HandOverFailed {
            reason: "new worker gone".into(),
        },
    ];
    let to_worker = vec![
        ToWorker::Message {
            channel: "a".into(),
            id: 7,
            payload: vec![0, 1, 255],
            published_us: 123_456,
        },
        ToWorker::Published {
            req: 1,
            channel: "a".into(),
            id: 2,
        },
        ToWorker::Joined {
            req: 1,
            current_id: 10,
            channels: vec!["a".into()],
            replay: vec![
                Replay::Gap {
                    channel: "a".into(),
                    after: 1,
                    through: 3,
                },
                Replay::Message {
                    channel: "a".into(),
                    id: 4,
                    payload: b"p".to_vec(),
                },
            ],
            more: true,
        },
        ToWorker::Status {
            req: 5,
            body: "{}".into(),
            metrics: false,
        },
        ToWorker::Health {
            req: 5,
            problem: None,
        },
        ToWorker::Health {
            req: 6,
            problem: Some("worker 1 is not running (restarting)".into()),
        },
        ToWorker::Shutdown,
        ToWorker::PublishRefused {
            req: 3,
            retry_after_s: 1,
            broker: "redis is not reachable".into(),
        },
        ToWorker::Steer {
            cpu: Some(0),
            until: 1_238,
        },
        ToWorker::Steer {
            cpu: None,
            until: 0,
        },
        ToWorker::Reconfigure {
            json: "{\"max_payload\":5}".into(),
        },
        ToWorker::Secrets(crate::secrets::Secrets {
            tls_cert: Some(b"cert".to_vec()),
            tls_key: None,
            jwt_key: Some(Vec::new()),
        }),
        ToWorker::JoinRefused {
            req: 4,
            retry_after_s: 1,
        },
        ToWorker::Gap {
            channel: "a".into(),
            after: 5,
            through: 9,
        },
        ToWorker::Dashboard {
            json: "{\"connections\":1}".into(),
        },
        ToWorker::ApiAnswer {
            req: 7,
            status: 400,
            body: r#"{"error":{"code":400,"message":"x"}}"#.into(),
        },
        ToWorker::ApiAct {
            op: 3,
            act: super::UserAct {
                target: super::Target::User("ann".into()),
                action: super::Action::Disconnect { reconnect: true },
            },
        },
        ToWorker::ApiAct {
            op: 4,
            act: super::UserAct {
                target: super::Target::Conn(0x1_0000_0002),
                action: super::Action::Unsubscribe {
                    channel: "room".into(),
                },
            },
        },
        ToWorker::ApiAct {
            op: 5,
            act: super::UserAct {
                target: super::Target::User("bob".into()),
                action: super::Action::Subscribe {
                    channel: "news".into(),
                },
            },
        },
        ToWorker::PresenceEvents {
            events: vec![
                PresenceEvent {
                    join: true,
                    channel: "room".into(),
                    json: "{\"channel\":\"room\",\"user\":\"ann\",\"conn\":\"0-2\"}".into(),
                },
                PresenceEvent {
                    join: false,
                    channel: "room".into(),
                    json: "{}".into(),
                },
            ],
        },
        ToWorker::HandOverPrepare,
        ToWorker::HandOverGo {
            name: "c1m-handover-1-0".into(),
            new_master_pid: 77,
            timeout_ms: 5000,
        },
        ToWorker::HandOverCommit,
        ToWorker::HandOverAbort,
    ];
    (to_master, to_worker)
}
