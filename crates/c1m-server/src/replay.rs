//! What a resume answers with: the missed messages still in history, and plainly marked gaps
//! for the ones that are not. Its own module because every hub backend (memory, Redis) builds
//! these and the ipc link carries them to the worker; neither should import the other for it.

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
