//! Presence over the link: a worker's member changes (worker → master, one frame per loop
//! turn, however many subscribers joined in it) and the join/leave events the master hands
//! back to the workers with subscribers on the channel (one frame per worker per batch).

use c1m_proto::codec::{Reader, Result, Writer};

/// Encoded bytes of presence entries one frame carries at most before the next frame starts:
/// far below [`super::MAX_FRAME`] even with the largest user and info.
pub const FRAME_BUDGET: usize = 1024 * 1024;

/// One member change a worker reports. The member is (this worker, `token`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PresenceChange {
    /// The connection `token` subscribed to `channel`. `quiet`: it is not new (a connection
    /// received in a live upgrade), so no join event goes out for it.
    Join {
        channel: String,
        token: u64,
        user: Option<String>,
        info: Option<String>,
        quiet: bool,
    },
    /// The connection `token` left `channel` (it closed).
    Leave { channel: String, token: u64 },
}

impl PresenceChange {
    /// About what this change adds to a frame.
    pub fn size(&self) -> usize {
        match self {
            PresenceChange::Join {
                channel,
                user,
                info,
                ..
            } => {
                24 + channel.len()
                    + user.as_ref().map_or(0, String::len)
                    + info.as_ref().map_or(0, String::len)
            }
            PresenceChange::Leave { channel, .. } => 16 + channel.len(),
        }
    }

    pub(super) fn write(&self, w: &mut Writer) {
        match self {
            PresenceChange::Join {
                channel,
                token,
                user,
                info,
                quiet,
            } => {
                w.u8(1)
                    .str(channel)
                    .u64(*token)
                    .opt_str(user.as_deref())
                    .opt_str(info.as_deref())
                    .bool(*quiet);
            }
            PresenceChange::Leave { channel, token } => {
                w.u8(0).str(channel).u64(*token);
            }
        }
    }

    pub(super) fn read(r: &mut Reader) -> Result<PresenceChange> {
        Ok(match r.u8("presence change")? {
            0 => PresenceChange::Leave {
                channel: r.string("channel")?,
                token: r.u64("token")?,
            },
            1 => PresenceChange::Join {
                channel: r.string("channel")?,
                token: r.u64("token")?,
                user: r.opt_string("user")?,
                info: r.opt_string("info")?,
                quiet: r.bool("quiet")?,
            },
            t => return Err(r.bad(format!("presence change kind {t}"))),
        })
    }
}

/// One join or leave event for a channel's subscribers: `json` is the event's object
/// (`crate::presence::event_json`), encoded per protocol by the worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresenceEvent {
    pub join: bool,
    pub channel: String,
    pub json: String,
}

impl PresenceEvent {
    pub fn size(&self) -> usize {
        16 + self.channel.len() + self.json.len()
    }

    pub(super) fn write(&self, w: &mut Writer) {
        w.bool(self.join).str(&self.channel).str(&self.json);
    }

    pub(super) fn read(r: &mut Reader) -> Result<PresenceEvent> {
        Ok(PresenceEvent {
            join: r.bool("join")?,
            channel: r.string("channel")?,
            json: r.string("event")?,
        })
    }
}

/// Splits `items` into runs of at most [`FRAME_BUDGET`] bytes (by `size`), each one frame.
pub fn batches<T>(items: Vec<T>, size: impl Fn(&T) -> usize) -> Vec<Vec<T>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut bytes = 0;
    for item in items {
        let n = size(&item);
        if !current.is_empty() && bytes + n > FRAME_BUDGET {
            out.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += n;
        current.push(item);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_stay_under_the_budget() {
        let items: Vec<usize> = vec![FRAME_BUDGET / 2; 5];
        let b = batches(items, |&n| n);
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
        assert!(batches(Vec::<usize>::new(), |&n| n).is_empty());
    }
}
