//! Worker → master messages: publishes, subscriptions joined and left, the periodic stats
//! push, `/status` and `/channels` queries, and the worker's side of a live upgrade. Each tag
//! number is written once, in [`Tag`]; `encode` and `decode` both go through it.

use super::presence::PresenceChange;
use super::stats::{IoReport, WorkerStats};
use super::{frame, reader, MAX_CHANNELS};
use c1m_proto::codec::{Reader, Result};
use std::io;

c1m_proto::wire_tags! {
    /// The first byte of every worker → master frame.
    enum Tag {
        Publish = 1,
        Join = 2,
        Leave = 3,
        SteerFull = 8,
        Listeners = 9,
        Stats = 4,
        StatusQuery = 5,
        HealthQuery = 10,
        Counts = 6,
        ChannelInfo = 7,
        HandOverPrepared = 24,
        HandOverSent = 25,
        HandOverFailed = 26,
        Io = 30,
        PublishKeyed = 60,
        Api = 40,
        ApiRefused = 41,
        ApiActed = 42,
        Lifecycle = 70,
        Presence = 72,
        PresenceQuery = 73,
    }
}

/// Worker → master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToMaster {
    Publish {
        req: u64,
        channel: String,
        payload: Vec<u8>,
    },
    /// Register this worker's interest in `channels` and answer with what followed `after`.
    Join {
        req: u64,
        channels: Vec<String>,
        after: Option<u64>,
    },
    /// This worker has no subscribers left on `channel`.
    Leave {
        channel: String,
    },
    /// This worker took its quantum of `cpu`'s new connections (`crate::steering`) and
    /// stopped taking them first; it holds `conns`.
    SteerFull {
        cpu: u32,
        conns: u64,
    },
    /// The descriptor numbers of this worker's public listeners (sent once, at start): the
    /// master takes a steered worker's preference back itself when that worker stops
    /// answering (`master::steer`).
    Listeners {
        fds: Vec<u32>,
    },
    /// Boxed: the figures are several times larger than any other message.
    Stats(Box<WorkerStats>),
    StatusQuery {
        req: u64,
        metrics: bool,
    },
    /// `/healthz`: answered with a `Health` frame (a verdict, not the whole status).
    HealthQuery {
        req: u64,
    },
    /// This worker's subscriber count on each channel whose count changed since its last
    /// report (0: none left). Sent with the stats; feeds `GET /channels/{ch}`.
    Counts {
        counts: Vec<(String, u32)>,
    },
    /// `GET /channels/{ch}`: answered with a `Status` frame carrying the JSON body.
    ChannelInfo {
        req: u64,
        channel: String,
    },
    /// A publish with an `Idempotency-Key`: a retry with the same key on the same channel is
    /// answered with the first one's id and stored and delivered once.
    PublishKeyed {
        req: u64,
        channel: String,
        payload: Vec<u8>,
        key: String,
    },
    /// Connections opened and closed in one loop turn (only while webhooks are on).
    Lifecycle {
        reports: Vec<super::ConnReport>,
    },
    /// `POST /api/{call}`: the request body as it came (JSON, or NDJSON for a batch), checked
    /// and carried out by the master, answered with `ApiAnswer`.
    Api {
        req: u64,
        call: String,
        body: Vec<u8>,
        ndjson: bool,
    },
    /// An API request the worker refused before the master saw it (method, size, publish
    /// rule): counted as an error of `call`.
    ApiRefused {
        call: String,
    },
    /// The answer to `ToWorker::ApiAct` number `op`: how many connections it touched here.
    ApiActed {
        op: u64,
        count: u64,
    },
    /// Members that joined or left presence-enabled channels during one loop turn (a frame
    /// holds at most `presence::FRAME_BUDGET` bytes of them; a larger turn sends more).
    Presence {
        changes: Vec<PresenceChange>,
    },
    /// `GET /channels/{ch}/presence`: answered with a `Status` frame carrying the JSON body.
    PresenceQuery {
        req: u64,
        channel: String,
    },
    // ---- live upgrade (docs/upgrade.md) ----
    /// Input and accepts are stopped and every request this worker made is on the link before
    /// this frame: the master's answers to them come before `HandOverGo`.
    HandOverPrepared,
    /// Every connection (`conns`) and listener went to the new worker, which has them all; this
    /// worker touches none of them any more and waits for commit or abort.
    HandOverSent {
        conns: u64,
    },
    /// The hand-over from this worker failed (the new worker died, refused, or timed out); it
    /// serves on as before.
    HandOverFailed {
        reason: String,
    },
    /// The worker's send path and io_uring counters, sent with each stats push.
    Io(IoReport),
}

impl ToMaster {
    /// The whole frame: length prefix, tag, fields.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ToMaster::Publish {
                req,
                channel,
                payload,
            } => frame(Tag::Publish as u8, |w| {
                w.u64(*req).str(channel).bytes(payload);
            }),
            ToMaster::Join {
                req,
                channels,
                after,
            } => frame(Tag::Join as u8, |w| {
                w.u64(*req).count(channels.len());
                for c in channels {
                    w.str(c);
                }
                w.opt_u64(*after);
            }),
            ToMaster::Leave { channel } => frame(Tag::Leave as u8, |w| {
                w.str(channel);
            }),
            ToMaster::SteerFull { cpu, conns } => frame(Tag::SteerFull as u8, |w| {
                w.u32(*cpu).u64(*conns);
            }),
            ToMaster::Listeners { fds } => frame(Tag::Listeners as u8, |w| {
                w.count(fds.len());
                for fd in fds {
                    w.u32(*fd);
                }
            }),
            ToMaster::Stats(s) => frame(Tag::Stats as u8, |w| {
                w.record(|r| s.write_fields(r));
            }),
            ToMaster::StatusQuery { req, metrics } => frame(Tag::StatusQuery as u8, |w| {
                w.u64(*req).bool(*metrics);
            }),
            ToMaster::HealthQuery { req } => frame(Tag::HealthQuery as u8, |w| {
                w.u64(*req);
            }),
            ToMaster::Counts { counts } => frame(Tag::Counts as u8, |w| {
                w.count(counts.len());
                for (channel, n) in counts {
                    w.str(channel).u32(*n);
                }
            }),
            ToMaster::ChannelInfo { req, channel } => frame(Tag::ChannelInfo as u8, |w| {
                w.u64(*req).str(channel);
            }),
            ToMaster::PublishKeyed {
                req,
                channel,
                payload,
                key,
            } => frame(Tag::PublishKeyed as u8, |w| {
                w.u64(*req).str(channel).bytes(payload).str(key);
            }),
            ToMaster::Lifecycle { reports } => frame(Tag::Lifecycle as u8, |w| {
                super::lifecycle::write(w, reports);
            }),
            ToMaster::Api {
                req,
                call,
                body,
                ndjson,
            } => frame(Tag::Api as u8, |w| {
                w.u64(*req).str(call).bytes(body).bool(*ndjson);
            }),
            ToMaster::ApiRefused { call } => frame(Tag::ApiRefused as u8, |w| {
                w.str(call);
            }),
            ToMaster::ApiActed { op, count } => frame(Tag::ApiActed as u8, |w| {
                w.u64(*op).u64(*count);
            }),
            ToMaster::Presence { changes } => frame(Tag::Presence as u8, |w| {
                w.count(changes.len());
                for c in changes {
                    c.write(w);
                }
            }),
            ToMaster::PresenceQuery { req, channel } => frame(Tag::PresenceQuery as u8, |w| {
                w.u64(*req).str(channel);
            }),
            ToMaster::HandOverPrepared => frame(Tag::HandOverPrepared as u8, |_| {}),
            ToMaster::HandOverSent { conns } => frame(Tag::HandOverSent as u8, |w| {
                w.u64(*conns);
            }),
            ToMaster::HandOverFailed { reason } => frame(Tag::HandOverFailed as u8, |w| {
                w.str(reason);
            }),
            ToMaster::Io(io) => frame(Tag::Io as u8, |w| {
                w.record(|r| io.write_fields(r));
            }),
        }
    }

    /// A frame body (the length prefix already stripped, as `Link` hands frames over).
    pub fn decode(body: &[u8]) -> io::Result<ToMaster> {
        let mut r = reader(body);
        let msg = ToMaster::read(&mut r)?;
        r.end("worker message")?;
        Ok(msg)
    }

    fn read(r: &mut Reader) -> Result<ToMaster> {
        let tag = r.u8("tag")?;
        let tag = Tag::try_from(tag).map_err(|t| r.bad(format!("worker message tag {t}")))?;
        Ok(match tag {
            Tag::Publish => ToMaster::Publish {
                req: r.u64("req")?,
                channel: r.string("channel")?,
                payload: r.bytes("payload")?,
            },
            Tag::Join => {
                let req = r.u64("req")?;
                let n = r.count(4, "channel count")?;
                if n > MAX_CHANNELS {
                    return Err(r.bad(format!("channel count {n} (at most {MAX_CHANNELS})")));
                }
                let channels = (0..n).map(|_| r.string("channel")).collect::<Result<_>>()?;
                ToMaster::Join {
                    req,
                    channels,
                    after: r.opt_u64("after")?,
                }
            }
            Tag::Leave => ToMaster::Leave {
                channel: r.string("channel")?,
            },
            Tag::SteerFull => ToMaster::SteerFull {
                cpu: r.u32("cpu")?,
                conns: r.u64("connections")?,
            },
            Tag::Listeners => {
                let n = r.count(4, "listener count")?;
                let fds = (0..n)
                    .map(|_| r.u32("listener fd"))
                    .collect::<Result<Vec<_>>>()?;
                ToMaster::Listeners { fds }
            }
            Tag::Stats => ToMaster::Stats(Box::new(WorkerStats::read_fields(r.record("stats")?)?)),
            Tag::StatusQuery => ToMaster::StatusQuery {
                req: r.u64("req")?,
                metrics: r.bool("metrics")?,
            },
            Tag::HealthQuery => ToMaster::HealthQuery { req: r.u64("req")? },
            Tag::Counts => {
                // Each entry takes at least 8 bytes (empty name, count).
                let n = r.count(8, "count entries")?;
                let mut counts = Vec::with_capacity(n);
                for _ in 0..n {
                    counts.push((r.string("channel")?, r.u32("count")?));
                }
                ToMaster::Counts { counts }
            }
            Tag::ChannelInfo => ToMaster::ChannelInfo {
                req: r.u64("req")?,
                channel: r.string("channel")?,
            },
            Tag::PublishKeyed => ToMaster::PublishKeyed {
                req: r.u64("req")?,
                channel: r.string("channel")?,
                payload: r.bytes("payload")?,
                key: r.string("idempotency key")?,
            },
            Tag::Lifecycle => ToMaster::Lifecycle {
                reports: super::lifecycle::read(r)?,
            },
            Tag::Api => ToMaster::Api {
                req: r.u64("req")?,
                call: r.string("api call")?,
                body: r.bytes("api body")?,
                ndjson: r.bool("ndjson")?,
            },
            Tag::ApiRefused => ToMaster::ApiRefused {
                call: r.string("api call")?,
            },
            Tag::ApiActed => ToMaster::ApiActed {
                op: r.u64("op")?,
                count: r.u64("count")?,
            },
            Tag::Presence => {
                // Each change takes at least 13 bytes (kind, empty channel, token).
                let n = r.count(13, "presence changes")?;
                let changes = (0..n)
                    .map(|_| PresenceChange::read(r))
                    .collect::<Result<_>>()?;
                ToMaster::Presence { changes }
            }
            Tag::PresenceQuery => ToMaster::PresenceQuery {
                req: r.u64("req")?,
                channel: r.string("channel")?,
            },
            Tag::HandOverPrepared => ToMaster::HandOverPrepared,
            Tag::HandOverSent => ToMaster::HandOverSent {
                conns: r.u64("conns")?,
            },
            Tag::HandOverFailed => ToMaster::HandOverFailed {
                reason: r.string("reason")?,
            },
            Tag::Io => ToMaster::Io(IoReport::read_fields(r.record("io report")?)?),
        })
    }
}
