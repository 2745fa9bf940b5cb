//! What the master's state machine and the connection threads say to each other, the same in
//! both modes: [`Request`]s go to the command thread through one bounded queue, and
//! [`Incoming`] (answers, pushes, up/down) come back through another. Keeping this in one
//! small module lets the state machine and the transport change apart.

use redis::Value;
use std::sync::mpsc::{SyncSender, TrySendError};

/// Master → command thread.
pub enum Request {
    Publish {
        tag: u64,
        channel: String,
        payload: Vec<u8>,
        max_count: usize,
        max_age_ms: u64,
        /// `Idempotency-Key` ('' = none).
        key: String,
    },
    Replay {
        tag: u64,
        channels: Vec<String>,
        after: Option<u64>,
        cap: usize,
        max_age_ms: u64,
    },
    /// One of the small scripts with plain arguments.
    Script {
        tag: u64,
        which: Which,
        args: Vec<String>,
    },
    Subscribe(String),
    Unsubscribe(String),
    /// PUBLISH of a server API control message to every node (heard on their control links).
    Control {
        tag: u64,
        message: String,
    },
}

#[derive(Debug, Clone, Copy)]
pub enum Which {
    Presence,
    Info,
    /// Member presence (`presence`): apply changes, reap dead nodes, list a channel.
    MembersApply,
    MembersReap,
    MembersQuery,
}

impl Request {
    /// The tag its answer will carry (none for (un)subscribes: they are confirmed by pushes).
    pub fn tag(&self) -> Option<u64> {
        match self {
            Request::Publish { tag, .. }
            | Request::Replay { tag, .. }
            | Request::Script { tag, .. }
            | Request::Control { tag, .. } => Some(*tag),
            _ => None,
        }
    }
}

/// Threads → master.
pub enum Incoming {
    CommandUp,
    CommandDown,
    /// The answer to the request `tag`; `None` when it failed (connection lost, or Redis
    /// refused it).
    Answer {
        tag: u64,
        value: Option<Value>,
    },
    PubSubUp,
    PubSubDown,
    Subscribed(String),
    /// Redis Cluster: this channel's subscription ended (its slot moved, or its master's
    /// pub/sub connection was lost); it is to be subscribed again and caught up.
    Lost(String),
    Message {
        channel: String,
        id: u64,
        payload: Vec<u8>,
    },
    /// A server API control message another node published.
    Control(String),
    /// A join/leave event published by node `from`.
    Presence {
        channel: String,
        join: bool,
        from: String,
        json: String,
    },
}

/// A bounded send for the master's side: the request back when the queue is full (or the
/// command thread is gone).
pub fn try_request(tx: &SyncSender<Request>, req: Request) -> Result<(), Request> {
    match tx.try_send(req) {
        Ok(()) => Ok(()),
        Err(TrySendError::Full(r)) | Err(TrySendError::Disconnected(r)) => Err(r),
    }
}
