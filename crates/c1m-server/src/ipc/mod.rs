//! Master ↔ worker messages over a Unix stream socket: a 4-byte little-endian length, then a
//! tag byte and the fields, in [`c1m_proto::codec`]'s encoding (the one the live-upgrade
//! hand-over uses too). Hand-rolled rather than serde+bincode: the messages are few and flat,
//! and publish payloads pass through without re-encoding.
//!
//! Both ends are the same binary, so this format carries no version; the per-worker stats
//! are nonetheless sent by field name ([`stats`]), so a counter added to one struct cannot
//! shift the others' values. Files by direction: [`to_master`], [`to_worker`]; what the stats
//! are and how they cross in [`stats`]; test and fuzz seeds in [`examples`]. The hub's resume
//! answer ([`Replay`]) is the broker's (`crate::broker`), which builds it.

mod examples;
mod lifecycle;
mod presence;
mod stats;
mod to_master;
mod to_worker;
mod user_act;

pub use crate::broker::Replay;
pub use examples::examples;
pub use lifecycle::{CloseReason, ConnReport, MAX_REPORTS};
pub use presence::{batches, PresenceChange, PresenceEvent};
pub use stats::{H2Stats, IoReport, ProxyStats, PublishMoveStats, Refused, TlsStats, WorkerStats};
pub use to_master::ToMaster;
pub use to_worker::ToWorker;
pub use user_act::{Action, Target, UserAct};

use c1m_proto::codec::{Reader, Writer};

/// Largest frame either side accepts (a payload is ≤ max_payload; status JSON is small).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Most channels one join names (the subscription limit is validated against it at start).
pub const MAX_CHANNELS: usize = 1024;

/// A frame with tag `tag` whose fields `fill` writes.
fn frame(tag: u8, fill: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::frame(tag);
    fill(&mut w);
    w.into_frame()
}

/// A reader over one frame body whose errors say they are about the ipc link.
fn reader(body: &[u8]) -> Reader<'_> {
    Reader::new(body, "ipc")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - 4);
        &frame[4..]
    }

    #[test]
    fn round_trips() {
        let (to_master, to_worker) = examples();
        for m in to_master {
            assert_eq!(ToMaster::decode(body(&m.encode())).unwrap(), m);
        }
        for m in to_worker {
            assert_eq!(ToWorker::decode(body(&m.encode())).unwrap(), m);
        }
    }

    #[test]
    fn lifecycle_reports_refuse_unknown_kinds_and_reasons() {
        let m = ToMaster::Lifecycle {
            reports: vec![ConnReport::Closed {
                token: 5,
                reason: CloseReason::Timeout,
            }],
        };
        let frame = m.encode();
        let mut bad = frame[4..].to_vec();
        *bad.last_mut().unwrap() = 99; // the reason byte
        assert!(ToMaster::decode(&bad).is_err());
        let mut bad = frame[4..].to_vec();
        bad[5] = 9; // the report kind, after tag and count
        assert!(ToMaster::decode(&bad).is_err());
        for cut in 1..frame.len() - 4 {
            assert!(ToMaster::decode(&frame[4..4 + cut]).is_err());
        }
        for reason in CloseReason::ALL {
            let m = ToMaster::Lifecycle {
                reports: vec![ConnReport::Closed { token: 1, reason }],
            };
            assert_eq!(ToMaster::decode(&m.encode()[4..]).unwrap(), m);
        }
    }

    #[test]
    fn truncated_frames_are_errors_not_panics() {
        let frame = ToWorker::Message {
            channel: "abc".into(),
            id: 7,
            payload: vec![1; 10],
            published_us: 1,
        }
        .encode();
        for cut in 4..frame.len() - 1 {
            assert!(ToWorker::decode(&frame[4..cut]).is_err());
        }
    }
}
