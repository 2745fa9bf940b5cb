//! The old worker ↔ new worker conversation of a live upgrade (SOCK_SEQPACKET: one message
//! per packet): hello, the listeners, batches of connection records split into parts that fit
//! a packet, and the acknowledgements. The records themselves are in [`super::record`].

use super::{format_version, MAX_PACKET, SCOPE};
use crate::codec::{Reader, Result, Writer};

crate::wire_tags! {
    /// The first byte of every pair message.
    pub(super) enum Tag {
        Hello = 1,
        Listeners = 2,
        Part = 3,
        End = 4,
        Received = 5,
        Commit = 6,
        Abort = 7,
    }
}

/// Old worker ↔ new worker (SOCK_SEQPACKET: one message per packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pair {
    /// New → old, first.
    Hello { format: u32 },
    /// Old → new: the listening sockets, one kind byte per attached descriptor
    /// ([`LISTENER_HTTP`], [`LISTENER_TCP`], [`LISTENER_ADMIN`]).
    Listeners { kinds: Vec<u8> },
    /// Old → new: part of a batch of connection records. The batch's descriptors ride on its
    /// first part, in record order; `last` closes the batch.
    Part { last: bool, data: Vec<u8> },
    /// Old → new: all batches sent; `conns` records in total.
    End { conns: u64 },
    /// New → old: all records rebuilt; nothing is touched until `Commit`.
    Received { conns: u64 },
    /// Old → new: serve them (the old worker exits next).
    Commit,
    /// Old → new: hand-over off; drop the copies without touching the connections.
    Abort,
}

pub const LISTENER_HTTP: u8 = 1;
pub const LISTENER_TCP: u8 = 2;
pub const LISTENER_ADMIN: u8 = 3;

impl Pair {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Pair::Hello { format } => {
                let mut w = Writer::tag(Tag::Hello as u8);
                w.u32(*format);
                w.into_bytes()
            }
            Pair::Listeners { kinds } => {
                let mut w = Writer::tag(Tag::Listeners as u8);
                w.bytes(kinds);
                w.into_bytes()
            }
            Pair::Part { last, data } => {
                let mut w = Writer::tag(Tag::Part as u8);
                w.bool(*last).bytes(data);
                w.into_bytes()
            }
            Pair::End { conns } => {
                let mut w = Writer::tag(Tag::End as u8);
                w.u64(*conns);
                w.into_bytes()
            }
            Pair::Received { conns } => {
                let mut w = Writer::tag(Tag::Received as u8);
                w.u64(*conns);
                w.into_bytes()
            }
            Pair::Commit => vec![Tag::Commit as u8],
            Pair::Abort => vec![Tag::Abort as u8],
        }
    }

    pub fn decode(msg: &[u8]) -> Result<Pair> {
        let mut r = Reader::new(msg, SCOPE);
        let tag = r.u8("tag")?;
        let out = match Tag::try_from(tag).map_err(|_| r.bad(format!("pair tag {tag}")))? {
            Tag::Hello => {
                let format = format_version(&mut r)?;
                Pair::Hello { format }
            }
            Tag::Listeners => Pair::Listeners {
                kinds: r.bytes("listener kinds")?,
            },
            Tag::Part => Pair::Part {
                last: r.bool("last")?,
                data: r.bytes("part")?,
            },
            Tag::End => Pair::End {
                conns: r.u64("count")?,
            },
            Tag::Received => Pair::Received {
                conns: r.u64("count")?,
            },
            Tag::Commit => Pair::Commit,
            Tag::Abort => Pair::Abort,
        };
        r.end("pair message")?;
        Ok(out)
    }

    /// Splits an encoded batch into parts that each fit a packet.
    pub fn parts(batch: &[u8]) -> Vec<Pair> {
        let room = MAX_PACKET - 16;
        let mut parts: Vec<Pair> = batch
            .chunks(room)
            .map(|c| Pair::Part {
                last: false,
                data: c.to_vec(),
            })
            .collect();
        if parts.is_empty() {
            parts.push(Pair::Part {
                last: false,
                data: Vec::new(),
            });
        }
        if let Some(Pair::Part { last, .. }) = parts.last_mut() {
            *last = true;
        }
        parts
    }
}
