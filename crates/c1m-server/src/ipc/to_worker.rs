//! Master → worker messages: deliveries, answers to the worker's requests (publish ids, join
//! replays in chunks, status bodies, refusals), broadcasts (gaps, dashboard snapshots, new
//! configuration and key material) and the master's side of a live upgrade. Each tag number is
//! written once, in [`Tag`] (replay entries in [`ReplayTag`]).

use super::{frame, reader, PresenceEvent, UserAct, MAX_CHANNELS};
use crate::broker::Replay;
use crate::secrets::Secrets;
use c1m_proto::codec::{Reader, Result};
use std::io;

c1m_proto::wire_tags! {
    /// The first byte of every master → worker frame.
    enum Tag {
        Message = 1,
        Published = 2,
        Joined = 3,
        Status = 4,
        Shutdown = 5,
        Reconfigure = 6,
        Steer = 13,
        Health = 14,
        PublishRefused = 7,
        JoinRefused = 8,
        Gap = 9,
        Dashboard = 10,
        Secrets = 11,
        PresenceEvents = 12,
        HandOverPrepare = 20,
        HandOverGo = 21,
        HandOverCommit = 22,
        HandOverAbort = 23,
        ApiAnswer = 40,
        ApiAct = 41,
    }
}

c1m_proto::wire_tags! {
    /// The first byte of each entry of a join's replay.
    enum ReplayTag {
        Gap = 0,
        Message = 1,
    }
}

/// Master → worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToWorker {
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
        /// When the master received the publish (`c1m_sys::shm::monotonic_micros`, one clock
        /// for all processes): the start of the publish-to-write latency.
        published_us: u64,
    },
    Published {
        req: u64,
        channel: String,
        id: u64,
    },
    /// The answer to a join: one chunk of the replay. With `more`, history holds more after
    /// the chunk's last message; the worker asks again from there once the socket has taken
    /// this chunk (so a replay never needs a frame, or a socket queue, larger than a chunk).
    Joined {
        req: u64,
        current_id: u64,
        channels: Vec<String>,
        replay: Vec<Replay>,
        more: bool,
    },
    Status {
        req: u64,
        body: String,
        metrics: bool,
    },
    /// The answer to a health check: what is wrong with the node, or None when it all works.
    Health {
        req: u64,
        problem: Option<String>,
    },
    Shutdown,
    /// A publish was not taken: the publisher is told to retry (503 with Retry-After). Either a
    /// worker that must deliver it is behind (the master does not queue without bound), or,
    /// when `broker` is not empty, the cluster broker could not take it (`broker` says why).
    PublishRefused {
        req: u64,
        retry_after_s: u64,
        broker: String,
    },
    /// Take the new connections whose handshake runs on `cpu` (`crate::steering`) until this
    /// worker holds `until`, or, with None, stop taking them in preference to the others.
    Steer {
        cpu: Option<u32>,
        until: u64,
    },
    /// The master re-read its configuration (SIGHUP): the whole new `Config` as JSON.
    Reconfigure {
        json: String,
    },
    /// A join could not be answered (the cluster broker is unreachable): the subscriber is
    /// refused (503 + Retry-After, WebSocket 1013, TCP ERR) and comes back with its last id.
    JoinRefused {
        req: u64,
        retry_after_s: u64,
    },
    /// Live subscribers of `channel` missed `(after, through]` (the cluster broker lost it, or
    /// it left history while the broker was unreachable): they get a gap event.
    Gap {
        channel: String,
        after: u64,
        through: u64,
    },
    /// The dashboard's JSON snapshot (once a second while a worker reports viewers): the
    /// worker pushes it as one SSE event to its `/dashboard/events` streams.
    Dashboard {
        json: String,
    },
    /// The running key material (`crate::secrets`): the first frame a worker gets, and again
    /// before a `Reconfigure` that comes with new files.
    Secrets(Secrets),
    /// The answer to `ToMaster::Api`: the HTTP status and the JSON body.
    ApiAnswer {
        req: u64,
        status: u16,
        body: String,
    },
    /// A server API call on users' connections (disconnect, unsubscribe, subscribe); answered
    /// with `ToMaster::ApiActed` carrying `op`.
    ApiAct {
        op: u64,
        act: UserAct,
    },
    /// Join/leave events for this worker's subscribers of each event's channel (not stored,
    /// no id).
    PresenceEvents {
        events: Vec<PresenceEvent>,
    },
    // ---- live upgrade (docs/upgrade.md) ----
    /// Stop accepting and reading clients, answer `HandOverPrepared`.
    HandOverPrepare,
    /// Hand every connection to the new worker that connects to the abstract socket `name`
    /// (a child of `new_master_pid`, checked), within `timeout_ms`.
    HandOverGo {
        name: String,
        new_master_pid: u32,
        timeout_ms: u64,
    },
    /// The upgrade is done: tell the new worker to serve, then exit.
    HandOverCommit,
    /// The upgrade is off: tell the new worker to drop its copies, and serve on.
    HandOverAbort,
}

impl ToWorker {
    /// A `Message` frame from borrowed parts: the master encodes each message once, straight
    /// from the broker's shared payload, for every worker it goes to.
    pub fn message_frame(channel: &str, id: u64, payload: &[u8], published_us: u64) -> Vec<u8> {
        frame(Tag::Message as u8, |w| {
            w.str(channel).u64(id).bytes(payload).u64(published_us);
        })
    }

    /// The whole frame: length prefix, tag, fields.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToWorker::Message {
                channel,
                id,
                payload,
                published_us,
            } => ToWorker::message_frame(channel, *id, payload, *published_us),
            ToWorker::Published { req, channel, id } => frame(Tag::Published as u8, |w| {
                w.u64(*req).str(channel).u64(*id);
            }),
            ToWorker::Joined {
                req,
                current_id,
                channels,
                replay,
                more,
            } => frame(Tag::Joined as u8, |w| {
                w.u64(*req).u64(*current_id).count(channels.len());
                for c in channels {
                    w.str(c);
                }
                w.count(replay.len());
                for item in replay {
                    match item {
                        Replay::Gap {
                            channel,
                            after,
                            through,
                        } => w
                            .u8(ReplayTag::Gap as u8)
                            .str(channel)
                            .u64(*after)
                            .u64(*through),
                        Replay::Message {
                            channel,
                            id,
                            payload,
                        } => w
                            .u8(ReplayTag::Message as u8)
                            .str(channel)
                            .u64(*id)
                            .bytes(payload),
                    };
                }
                w.bool(*more);
            }),
            ToWorker::Status { req, body, metrics } => frame(Tag::Status as u8, |w| {
                w.u64(*req).str(body).bool(*metrics);
            }),
            ToWorker::Health { req, problem } => frame(Tag::Health as u8, |w| {
                w.u64(*req).opt_str(problem.as_deref());
            }),
            ToWorker::Shutdown => frame(Tag::Shutdown as u8, |_| {}),
            ToWorker::PublishRefused {
                req,
                retry_after_s,
                broker,
            } => frame(Tag::PublishRefused as u8, |w| {
                w.u64(*req).u64(*retry_after_s).str(broker);
            }),
            ToWorker::Steer { cpu, until } => frame(Tag::Steer as u8, |w| {
                w.opt_u64(cpu.map(u64::from)).u64(*until);
            }),
            ToWorker::Reconfigure { json } => frame(Tag::Reconfigure as u8, |w| {
                w.str(json);
            }),
            ToWorker::JoinRefused { req, retry_after_s } => frame(Tag::JoinRefused as u8, |w| {
                w.u64(*req).u64(*retry_after_s);
            }),
            ToWorker::Gap {
                channel,
                after,
                through,
            } => frame(Tag::Gap as u8, |w| {
                w.str(channel).u64(*after).u64(*through);
            }),
            ToWorker::Dashboard { json } => frame(Tag::Dashboard as u8, |w| {
                w.str(json);
            }),
            ToWorker::Secrets(secrets) => frame(Tag::Secrets as u8, |w| {
                w.opt_bytes(secrets.tls_cert.as_deref())
                    .opt_bytes(secrets.tls_key.as_deref())
                    .opt_bytes(secrets.jwt_key.as_deref());
            }),
            ToWorker::ApiAnswer { req, status, body } => frame(Tag::ApiAnswer as u8, |w| {
                w.u64(*req).u32(u32::from(*status)).str(body);
            }),
            ToWorker::ApiAct { op, act } => frame(Tag::ApiAct as u8, |w| {
                w.u64(*op);
                act.write(w);
            }),
            ToWorker::PresenceEvents { events } => frame(Tag::PresenceEvents as u8, |w| {
                w.count(events.len());
                for e in events {
                    e.write(w);
                }
            }),
            ToWorker::HandOverPrepare => frame(Tag::HandOverPrepare as u8, |_| {}),
            ToWorker::HandOverGo {
                name,
                new_master_pid,
                timeout_ms,
            } => frame(Tag::HandOverGo as u8, |w| {
                w.str(name).u32(*new_master_pid).u64(*timeout_ms);
            }),
            ToWorker::HandOverCommit => frame(Tag::HandOverCommit as u8, |_| {}),
            ToWorker::HandOverAbort => frame(Tag::HandOverAbort as u8, |_| {}),
        }
    }

    /// A frame body (the length prefix already stripped, as `Link` hands frames over).
    pub fn decode(body: &[u8]) -> io::Result<ToWorker> {
        let mut r = reader(body);
        let msg = ToWorker::read(&mut r)?;
        r.end("master message")?;
        Ok(msg)
    }

    fn read(r: &mut Reader) -> Result<ToWorker> {
        let tag = r.u8("tag")?;
        let tag = Tag::try_from(tag).map_err(|t| r.bad(format!("master message tag {t}")))?;
        Ok(match tag {
            Tag::Message => ToWorker::Message {
                channel: r.string("channel")?,
                id: r.u64("id")?,
                payload: r.bytes("payload")?,
                published_us: r.u64("published at")?,
            },
            Tag::Published => ToWorker::Published {
                req: r.u64("req")?,
                channel: r.string("channel")?,
                id: r.u64("id")?,
            },
            Tag::Joined => {
                let req = r.u64("req")?;
                let current_id = r.u64("current id")?;
                let n = r.count(4, "channel count")?;
                if n > MAX_CHANNELS {
                    return Err(r.bad(format!("channel count {n} (at most {MAX_CHANNELS})")));
                }
                let channels = (0..n).map(|_| r.string("channel")).collect::<Result<_>>()?;
                // Each entry takes at least 17 bytes (tag, empty channel, id, empty payload).
                let n = r.count(17, "replay count")?;
                let mut replay = Vec::with_capacity(n);
                for _ in 0..n {
                    replay.push(read_replay(r)?);
                }
                ToWorker::Joined {
                    req,
                    current_id,
                    channels,
                    replay,
                    more: r.bool("more")?,
                }
            }
            Tag::Status => ToWorker::Status {
                req: r.u64("req")?,
                body: r.string("status body")?,
                metrics: r.bool("metrics")?,
            },
            Tag::Health => ToWorker::Health {
                req: r.u64("req")?,
                problem: r.opt_string("health problem")?,
            },
            Tag::Shutdown => ToWorker::Shutdown,
            Tag::PublishRefused => ToWorker::PublishRefused {
                req: r.u64("req")?,
                retry_after_s: r.u64("retry after")?,
                broker: r.string("broker reason")?,
            },
            Tag::Steer => ToWorker::Steer {
                cpu: r
                    .opt_u64("cpu")?
                    .map(|c| u32::try_from(c).unwrap_or(u32::MAX)),
                until: r.u64("until")?,
            },
            Tag::Reconfigure => ToWorker::Reconfigure {
                json: r.string("configuration")?,
            },
            Tag::JoinRefused => ToWorker::JoinRefused {
                req: r.u64("req")?,
                retry_after_s: r.u64("retry after")?,
            },
            Tag::Gap => ToWorker::Gap {
                channel: r.string("channel")?,
                after: r.u64("after")?,
                through: r.u64("through")?,
            },
            Tag::Dashboard => ToWorker::Dashboard {
                json: r.string("dashboard snapshot")?,
            },
            Tag::Secrets => ToWorker::Secrets(Secrets {
                tls_cert: r.opt_bytes("tls certificate")?,
                tls_key: r.opt_bytes("tls key")?,
                jwt_key: r.opt_bytes("jwt key")?,
            }),
            Tag::ApiAnswer => ToWorker::ApiAnswer {
                req: r.u64("req")?,
                status: u16::try_from(r.u32("status")?).map_err(|_| r.bad("api status"))?,
                body: r.string("api answer")?,
            },
            Tag::ApiAct => ToWorker::ApiAct {
                op: r.u64("op")?,
                act: UserAct::read(r)?,
            },
            Tag::PresenceEvents => {
                // Each event takes at least 9 bytes (kind, empty channel, empty event).
                let n = r.count(9, "presence events")?;
                let events = (0..n)
                    .map(|_| PresenceEvent::read(r))
                    .collect::<Result<_>>()?;
                ToWorker::PresenceEvents { events }
            }
            Tag::HandOverPrepare => ToWorker::HandOverPrepare,
            Tag::HandOverGo => ToWorker::HandOverGo {
                name: r.string("hand-over socket name")?,
                new_master_pid: r.u32("new master pid")?,
                timeout_ms: r.u64("timeout")?,
            },
            Tag::HandOverCommit => ToWorker::HandOverCommit,
            Tag::HandOverAbort => ToWorker::HandOverAbort,
        })
    }
}

fn read_replay(r: &mut Reader) -> Result<Replay> {
    let tag = r.u8("replay entry")?;
    Ok(
        match ReplayTag::try_from(tag).map_err(|t| r.bad(format!("replay entry tag {t}")))? {
            ReplayTag::Gap => Replay::Gap {
                channel: r.string("gap channel")?,
                after: r.u64("gap after")?,
                through: r.u64("gap through")?,
            },
            ReplayTag::Message => Replay::Message {
                channel: r.string("replay channel")?,
                id: r.u64("replay id")?,
                payload: r.bytes("replay payload")?,
            },
        },
    )
}
