//! Connection lifecycle reports (worker → master), sent only while webhooks are on: a
//! connection opened (its user and channels), or closed (why). The master keeps what is open
//! per worker, so a worker that dies without a word still yields one `disconnect` per
//! connection it held. A worker batches the reports of one loop turn into one frame.

use super::MAX_CHANNELS;
use c1m_proto::codec::{Reader, Result, Writer};

/// Most reports in one frame (a worker sends several frames when a turn made more).
pub const MAX_REPORTS: usize = 4096;

/// Why a connection ended, as the `disconnect` webhook's `reason` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The client closed it, or its socket failed.
    ClientClosed = 0,
    /// It stopped answering: a WebSocket ping, or TCP keepalive / user timeout.
    Timeout = 1,
    /// It fell more than `max_unsent` behind.
    SlowConsumer = 2,
    /// The server API disconnected it.
    Kicked = 3,
    /// Its token expired.
    Expired = 4,
    /// The server stopped (SIGTERM/SIGINT).
    ServerShutdown = 5,
    /// Its worker process died (the master says so for it).
    WorkerCrash = 6,
    /// Its node left the cluster (said by another node).
    NodeLost = 7,
}

impl CloseReason {
    pub const ALL: [CloseReason; 8] = [
        CloseReason::ClientClosed,
        CloseReason::Timeout,
        CloseReason::SlowConsumer,
        CloseReason::Kicked,
        CloseReason::Expired,
        CloseReason::ServerShutdown,
        CloseReason::WorkerCrash,
        CloseReason::NodeLost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::ClientClosed => "client_closed",
            CloseReason::Timeout => "timeout",
            CloseReason::SlowConsumer => "slow_consumer",
            CloseReason::Kicked => "kicked",
            CloseReason::Expired => "expired",
            CloseReason::ServerShutdown => "server_shutdown",
            CloseReason::WorkerCrash => "worker_crash",
            CloseReason::NodeLost => "node_lost",
        }
    }

    fn from_u8(v: u8) -> Option<CloseReason> {
        CloseReason::ALL.get(usize::from(v)).copied()
    }
}

/// One report about one connection (`token`: its slab token in the reporting worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnReport {
    /// Subscribed to `channels`; `resumed`: it was already open (a live upgrade's new worker
    /// took it over, or a hand-over was aborted), so the master records it without a
    /// `connect` webhook.
    Opened {
        token: u64,
        user: Option<String>,
        channels: Vec<String>,
        resumed: bool,
    },
    Closed {
        token: u64,
        reason: CloseReason,
    },
}

const OPENED: u8 = 1;
const CLOSED: u8 = 2;

pub(super) fn write(w: &mut Writer, reports: &[ConnReport]) {
    w.count(reports.len());
    for r in reports {
        match r {
            ConnReport::Opened {
                token,
                user,
                channels,
                resumed,
            } => {
                w.u8(OPENED).u64(*token).opt_str(user.as_deref());
                w.count(channels.len());
                for c in channels {
                    w.str(c);
                }
                w.bool(*resumed);
            }
            ConnReport::Closed { token, reason } => {
                w.u8(CLOSED).u64(*token).u8(*reason as u8);
            }
        }
    }
}

pub(super) fn read(r: &mut Reader) -> Result<Vec<ConnReport>> {
    // Each report takes at least 10 bytes (kind, token, reason).
    let n = r.count(10, "lifecycle report count")?;
    if n > MAX_REPORTS {
        return Err(r.bad(format!(
            "lifecycle report count {n} (at most {MAX_REPORTS})"
        )));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let kind = r.u8("lifecycle report kind")?;
        let token = r.u64("token")?;
        out.push(match kind {
            OPENED => {
                let user = r.opt_string("user")?;
                let k = r.count(4, "channel count")?;
                if k > MAX_CHANNELS {
                    return Err(r.bad(format!("channel count {k} (at most {MAX_CHANNELS})")));
                }
                let channels = (0..k).map(|_| r.string("channel")).collect::<Result<_>>()?;
                ConnReport::Opened {
                    token,
                    user,
                    channels,
                    resumed: r.bool("resumed")?,
                }
            }
            CLOSED => {
                let v = r.u8("close reason")?;
                let reason =
                    CloseReason::from_u8(v).ok_or_else(|| r.bad(format!("close reason {v}")))?;
                ConnReport::Closed { token, reason }
            }
            k => return Err(r.bad(format!("lifecycle report kind {k}"))),
        });
    }
    Ok(out)
}
