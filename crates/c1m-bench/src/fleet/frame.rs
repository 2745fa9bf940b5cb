//! The coordinator ⇄ agent protocol: typed messages ([`ToAgent`], [`FromAgent`], JSON objects
//! tagged by `"type"`) in length-prefixed frames (a 4-byte big-endian length, then the JSON).
//! A frame above [`MAX_FRAME`] is refused on both ends before any of it is buffered, so a
//! peer cannot make the other side allocate without bound. The worker's own report and config
//! ([`WorkerReport`], [`WorkerConfig`]) travel inside these frames unchanged.
//!
//! The codec lives here rather than in `c1m-proto` for now: only bench speaks it.

use super::clock::ClockSample;
use super::limits::AgentLimits;
use crate::wire::{WorkerConfig, WorkerReport};
use anyhow::{bail, Context};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Protocol version; both ends must speak the same one.
pub const VERSION: u32 = 1;

/// Largest frame either end accepts: a report carries five histogram deltas (at most ~45K
/// buckets each, a few MiB of JSON at worst); a plan a few hundred worker configs.
pub const MAX_FRAME: usize = 16 << 20;

/// Coordinator → agent.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToAgent {
    /// First frame: the shared token and the protocol version.
    Hello { version: u32, token: String },
    /// Clock probe: the coordinator's wall clock when sent (µs since the epoch).
    Ping { seq: u32, coordinator_us: u64 },
    /// The agent's share of the run: one config per local worker it is to start.
    Plan { workers: Vec<WorkerConfig> },
    /// Start the workers (sent to every agent at once: the ramps begin together).
    Start,
    /// A command line for every local worker (`P …` acknowledged publish, `R …` restart).
    Command { line: String },
    /// End of the run: workers send their final reports, then the agent says `Done`.
    Stop,
}

/// Agent → coordinator.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromAgent {
    /// Answer to a good `Hello`: who the agent is and what its box can hold.
    Welcome {
        version: u32,
        host: String,
        limits: AgentLimits,
    },
    /// The agent will not go on (wrong token, busy, plan above its limits); it closes next.
    Refused { reason: String },
    /// Answer to `Ping` with the agent's clock at receipt and at send.
    Pong {
        seq: u32,
        coordinator_us: u64,
        agent_recv_us: u64,
        agent_send_us: u64,
    },
    /// The plan fits this box; warnings are limits it comes close to.
    PlanAccepted { warnings: Vec<String> },
    /// One worker's report, as the worker wrote it (global worker index).
    Report { report: Box<WorkerReport> },
    /// A worker ended (its stdout closed).
    WorkerGone { index: usize },
    /// Every worker ended after `Stop`; the agent closes the connection next.
    Done,
}

impl FromAgent {
    /// The clock sample a `Pong` makes with the coordinator's clock at its arrival.
    pub fn clock_sample(&self, arrived_us: u64) -> Option<ClockSample> {
        match *self {
            FromAgent::Pong {
                coordinator_us,
                agent_recv_us,
                agent_send_us,
                ..
            } => Some(ClockSample::from_stamps(
                coordinator_us,
                agent_recv_us,
                agent_send_us,
                arrived_us,
            )),
            _ => None,
        }
    }
}

/// Writes one message as a frame.
pub fn write_frame<W: Write, T: Serialize>(w: &mut W, msg: &T) -> anyhow::Result<()> {
    let body = serde_json::to_vec(msg).context("encode frame")?;
    if body.len() > MAX_FRAME {
        bail!("frame of {} bytes above the cap of {MAX_FRAME}", body.len());
    }
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(&body);
    w.write_all(&buf)
        .and_then(|()| w.flush())
        .context("write frame")
}

/// Largest first frame an agent reads from a peer not yet authenticated (a hello is a token
/// and a version): a stranger cannot make it allocate more than this.
pub const MAX_HELLO: usize = 4096;

/// Reads one frame; None when the peer closed cleanly between frames.
pub fn read_frame<R: Read, T: DeserializeOwned>(r: &mut R) -> anyhow::Result<Option<T>> {
    read_frame_capped(r, MAX_FRAME)
}

/// [`read_frame`] with a smaller cap (at most [`MAX_FRAME`]).
pub fn read_frame_capped<R: Read, T: DeserializeOwned>(
    r: &mut R,
    cap: usize,
) -> anyhow::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e).context("read frame length"),
    }
    let len = u32::from_be_bytes(len) as usize;
    let cap = cap.min(MAX_FRAME);
    if len > cap {
        bail!("peer sent a frame of {len} bytes, above the cap of {cap}");
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).context("read frame body")?;
    let msg = serde_json::from_slice(&body).context("decode frame")?;
    Ok(Some(msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_named_tags() {
        let mut buf = Vec::new();
        write_frame(
            &mut buf,
            &ToAgent::Command {
                line: "P 0 1 2 3".into(),
            },
        )
        .unwrap();
        write_frame(&mut buf, &ToAgent::Stop).unwrap();
        let text = String::from_utf8_lossy(&buf[4..]);
        assert!(text.contains("\"type\":\"command\""), "{text}");
        let mut r = &buf[..];
        assert!(matches!(
            read_frame::<_, ToAgent>(&mut r).unwrap(),
            Some(ToAgent::Command { line }) if line == "P 0 1 2 3"
        ));
        assert!(matches!(
            read_frame::<_, ToAgent>(&mut r).unwrap(),
            Some(ToAgent::Stop)
        ));
        assert!(read_frame::<_, ToAgent>(&mut r).unwrap().is_none());
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let mut big = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        big.extend_from_slice(b"{}");
        let err = read_frame::<_, ToAgent>(&mut &big[..]).unwrap_err();
        assert!(format!("{err:#}").contains("above the cap"), "{err:#}");
        let mut hello = Vec::new();
        let token = "t".repeat(MAX_HELLO);
        write_frame(&mut hello, &ToAgent::Hello { version: 1, token }).unwrap();
        let err = read_frame_capped::<_, ToAgent>(&mut &hello[..], MAX_HELLO).unwrap_err();
        assert!(
            format!("{err:#}").contains("above the cap of 4096"),
            "{err:#}"
        );
        let mut cut = 10u32.to_be_bytes().to_vec();
        cut.extend_from_slice(b"{\"ty");
        assert!(read_frame::<_, ToAgent>(&mut &cut[..]).is_err());
        let mut junk = 2u32.to_be_bytes().to_vec();
        junk.extend_from_slice(b"{}");
        let err = read_frame::<_, ToAgent>(&mut &junk[..]).unwrap_err();
        assert!(format!("{err:#}").contains("decode frame"), "{err:#}");
    }
}
