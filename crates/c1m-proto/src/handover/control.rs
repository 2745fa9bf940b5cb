//! The old master ↔ new master conversation of a live upgrade (a Unix stream; each message is
//! preceded by a u32 length): hello and its answer, the frozen hub, commit or abort. The hub's
//! history travels whole here because the old master must not take a publish until the new one
//! holds every id it handed out.

use super::{format_version, SCOPE};
use crate::codec::{Reader, Result, Writer};

crate::wire_tags! {
    /// The first byte of every control message.
    pub(super) enum Tag {
        Hello = 1,
        Accept = 2,
        Refuse = 3,
        Hub = 4,
        HubTaken = 5,
        Commit = 6,
        Abort = 7,
    }
}

/// Old master ↔ new master (a Unix stream; each message is preceded by a u32 length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Old → new, first: the format, the old master's pid and its worker count (the new one
    /// runs as many, paired by index) and the addresses it serves (port 0 already resolved).
    Hello {
        format: u32,
        old_pid: u32,
        workers: u32,
        listen: String,
        tcp_listen: Option<String>,
        admin_listen: Option<String>,
        /// The last of the `workers` is the control worker (it alone serves the admin
        /// listener). Sent as one trailing byte only when true, so a binary from before the
        /// control worker still reads every hello that does not have one.
        control_worker: bool,
    },
    /// New → old: format understood; this binary's pid and version.
    Accept { pid: u32, version: String },
    /// New → old: the hand-over cannot go on (format mismatch, bad configuration); why.
    Refuse { reason: String },
    /// Old → new: the hub, frozen (no publish is taken until the new master has it).
    Hub(Box<HubState>),
    /// New → old: hub taken, new workers started.
    HubTaken,
    /// Old → new: every connection is handed over; the new generation serves from now on.
    Commit,
    /// Old → new: the hand-over is off; the old generation keeps serving, the new one exits.
    Abort { reason: String },
}

/// The in-memory hub's ids and history, and the master's running totals that must not go
/// down across an upgrade.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubState {
    pub last_id: u64,
    pub forgotten_through: u64,
    pub channels: Vec<ChannelHistory>,
    /// Channel → indices of the workers with subscribers on it.
    pub interest: Vec<(String, Vec<u32>)>,
    pub published: u64,
    pub publish_refused: u64,
    pub upgrades_attempted: u64,
    pub upgrades_completed: u64,
    pub upgrades_failed: u64,
    /// (bucket, highest id) of the hub's buckets of forgotten channels that are not 0: what a
    /// channel the hub no longer tracks may have lost. Written only when not empty (an older
    /// binary, which reads no such field, can then still take the hub).
    pub lost_buckets: Vec<(u32, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelHistory {
    pub name: String,
    pub forgotten_through: u64,
    /// (id, age in ms, payload), oldest first.
    pub messages: Vec<(u64, u64, Vec<u8>)>,
}

impl Control {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Control::Hello {
                format,
                old_pid,
                workers,
                listen,
                tcp_listen,
                admin_listen,
                control_worker,
            } => {
                let mut w = Writer::tag(Tag::Hello as u8);
                w.u32(*format).u32(*old_pid).u32(*workers);
                w.str(listen)
                    .opt_str(tcp_listen.as_deref())
                    .opt_str(admin_listen.as_deref());
                if *control_worker {
                    w.bool(true);
                }
                w.into_bytes()
            }
            Control::Accept { pid, version } => {
                let mut w = Writer::tag(Tag::Accept as u8);
                w.u32(*pid).str(version);
                w.into_bytes()
            }
            Control::Refuse { reason } => {
                let mut w = Writer::tag(Tag::Refuse as u8);
                w.str(reason);
                w.into_bytes()
            }
            Control::Hub(h) => {
                let mut w = Writer::tag(Tag::Hub as u8);
                w.u64(h.last_id).u64(h.forgotten_through);
                w.count(h.channels.len());
                for ch in &h.channels {
                    w.str(&ch.name).u64(ch.forgotten_through);
                    w.count(ch.messages.len());
                    for (id, age, payload) in &ch.messages {
                        w.u64(*id).u64(*age).bytes(payload);
                    }
                }
                w.count(h.interest.len());
                for (name, workers) in &h.interest {
                    w.str(name).count(workers.len());
                    for i in workers {
                        w.u32(*i);
                    }
                }
                w.u64(h.published).u64(h.publish_refused);
                w.u64(h.upgrades_attempted)
                    .u64(h.upgrades_completed)
                    .u64(h.upgrades_failed);
                if !h.lost_buckets.is_empty() {
                    w.count(h.lost_buckets.len());
                    for (bucket, id) in &h.lost_buckets {
                        w.u32(*bucket).u64(*id);
                    }
                }
                w.into_bytes()
            }
            Control::HubTaken => vec![Tag::HubTaken as u8],
            Control::Commit => vec![Tag::Commit as u8],
            Control::Abort { reason } => {
                let mut w = Writer::tag(Tag::Abort as u8);
                w.str(reason);
                w.into_bytes()
            }
        }
    }

    pub fn decode(msg: &[u8]) -> Result<Control> {
        let mut r = Reader::new(msg, SCOPE);
        let tag = r.u8("tag")?;
        let out = match Tag::try_from(tag).map_err(|_| r.bad(format!("control tag {tag}")))? {
            Tag::Hello => {
                let format = format_version(&mut r)?;
                Control::Hello {
                    format,
                    old_pid: r.u32("pid")?,
                    workers: r.u32("workers")?,
                    listen: r.string("listen")?,
                    tcp_listen: r.opt_string("tcp listen")?,
                    admin_listen: r.opt_string("admin listen")?,
                    control_worker: !r.is_empty() && r.bool("control worker")?,
                }
            }
            Tag::Accept => Control::Accept {
                pid: r.u32("pid")?,
                version: r.string("version")?,
            },
            Tag::Refuse => Control::Refuse {
                reason: r.string("reason")?,
            },
            Tag::Hub => {
                let mut h = HubState {
                    last_id: r.u64("last id")?,
                    forgotten_through: r.u64("forgotten")?,
                    ..Default::default()
                };
                for _ in 0..r.count(16, "channel count")? {
                    let mut ch = ChannelHistory {
                        name: r.string("channel")?,
                        forgotten_through: r.u64("channel forgotten")?,
                        messages: Vec::new(),
                    };
                    for _ in 0..r.count(20, "message count")? {
                        ch.messages
                            .push((r.u64("id")?, r.u64("age")?, r.bytes("payload")?));
                    }
                    h.channels.push(ch);
                }
                for _ in 0..r.count(8, "interest count")? {
                    let name = r.string("interest channel")?;
                    let n = r.count(4, "interest workers")?;
                    let workers = (0..n)
                        .map(|_| r.u32("worker"))
                        .collect::<Result<Vec<_>>>()?;
                    h.interest.push((name, workers));
                }
                h.published = r.u64("published")?;
                h.publish_refused = r.u64("refused")?;
                h.upgrades_attempted = r.u64("attempted")?;
                h.upgrades_completed = r.u64("completed")?;
                h.upgrades_failed = r.u64("failed")?;
                if !r.is_empty() {
                    for _ in 0..r.count(12, "lost bucket count")? {
                        h.lost_buckets
                            .push((r.u32("lost bucket")?, r.u64("lost bucket id")?));
                    }
                }
                Control::Hub(Box::new(h))
            }
            Tag::HubTaken => Control::HubTaken,
            Tag::Commit => Control::Commit,
            Tag::Abort => Control::Abort {
                reason: r.string("reason")?,
            },
        };
        r.end("control message")?;
        Ok(out)
    }
}
