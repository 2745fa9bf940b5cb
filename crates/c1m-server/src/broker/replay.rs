//! What a resume is answered with, the same for every broker: [`Replay`] entries in a
//! [`ReplayChunk`] (gaps, then messages up to a byte budget) and the one gap rule,
//! [`gap_through`]. They sit in the seam rather than in a backend so that the in-process hub
//! and Redis (one node or a cluster) cannot drift apart on when a subscriber is told it missed
//! something. The ipc link carries the entries to the worker and imports them from here, so
//! the broker depends on no link type.

/// One entry of a resume answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// Messages with ids in `(after, through]` on `channel` are gone from history.
    Gap {
        channel: String,
        after: u64,
        through: u64,
    },
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
    },
}

/// One answer to a resume: gaps first, then messages in id order up to a byte budget.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReplayChunk {
    pub items: Vec<Replay>,
    /// History holds more after the last message here: ask again from its id.
    pub more: bool,
}

/// The one gap rule, used by every broker: the highest id a resume from `after` on one channel
/// missed, or None when it missed nothing.
///
/// - `lost_through`: the highest id of this channel that history had and no longer holds
///   (0: it never lost any).
/// - `origin`: the first id of this history (the hub's start, or the epoch of a broker's data
///   set, or of one channel under Redis Cluster). Ids below it were issued by an earlier run
///   whose messages are gone, so a resume from one of them has a gap up to `origin - 1`. A
///   resume from 0 ("from the beginning") is not from an earlier run: it gets everything held,
///   with a gap only for what was lost.
/// - `newest`: the newest id handed out. A resume from above it names an id this history never
///   issued (a clock stepped back, another server's id): what it missed cannot be known, so it
///   is told so rather than replayed nothing silently.
pub fn gap_through(after: u64, lost_through: u64, origin: u64, newest: u64) -> Option<u64> {
    let earlier_run = if after > 0 {
        origin.saturating_sub(1)
    } else {
        0
    };
    let through = lost_through.max(earlier_run);
    if after < through {
        Some(through)
    } else if after > newest {
        Some(newest)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_through_is_one_rule() {
        // (after, lost through, origin, newest) -> through
        assert_eq!(gap_through(0, 0, 500, 510), None);
        assert_eq!(gap_through(0, 505, 500, 510), Some(505));
        assert_eq!(gap_through(505, 505, 500, 510), None);
        assert_eq!(gap_through(120, 0, 500, 510), Some(499));
        assert_eq!(gap_through(499, 0, 500, 510), None);
        assert_eq!(gap_through(900, 0, 500, 510), Some(510));
    }
}
