//! The live upgrade's hand-over wire format (docs/upgrade.md): what the old master tells the
//! new one ([`Control`]: hello, hub state, commit), what an old worker sends its successor
//! beside the file descriptors ([`Pair`]: listener kinds, batches of [`ConnRecord`]), and the
//! acknowledgements. No I/O here: the sockets and SCM_RIGHTS are in `c1m-sys::fd_passing` and
//! `c1m-server`. The primitives are [`crate::codec`]'s, shared with the master ↔ worker link.
//!
//! Unlike that link, two different binaries speak this format, so it is versioned:
//! [`FORMAT_VERSION`] is the first field of [`Control::Hello`] and of [`Pair::Hello`] and is
//! checked before anything else is decoded: a binary that reads a different format refuses
//! the hand-over instead of misreading it. Decoding never panics: a short or malformed message
//! is an `Err` naming what was bad.

mod control;
mod pair;
mod record;

pub use control::{ChannelHistory, Control, HubState};
pub use pair::{Pair, LISTENER_ADMIN, LISTENER_HTTP, LISTENER_TCP};
pub use record::ConnRecord;

use crate::codec::{Reader, Result};

/// Bumped whenever any message or record below changes shape.
pub const FORMAT_VERSION: u32 = 1;

/// Largest message on a worker pair socket (SOCK_SEQPACKET keeps each one whole; this stays
/// well under the default socket buffer). Longer data (a batch of records) is split into parts.
pub const MAX_PACKET: usize = 60 * 1024;

/// Descriptors handed over per batch (one sendmsg carries ≤ 253).
pub const FDS_PER_BATCH: usize = 200;

/// How decode errors name this format.
const SCOPE: &str = "hand-over";

/// The hand-over format version; another one is refused (the old master serves on).
fn format_version(r: &mut Reader) -> Result<u32> {
    let format = r.u32("format")?;
    if format != FORMAT_VERSION {
        return Err(r.bad(format!(
            "format version {format} (this binary reads {FORMAT_VERSION})"
        )));
    }
    Ok(format)
}

/// The format version a `Control::Hello` or `Pair::Hello` announces, read before the rest so
/// a mismatch is reported as such (not as a garbled message).
pub fn hello_format(msg: &[u8]) -> Option<u32> {
    // Both conversations open with tag 1, so one peek serves either.
    const _: () = assert!(control::Tag::Hello as u8 == pair::Tag::Hello as u8);
    match msg {
        [tag, a, b, c, d, ..] if *tag == control::Tag::Hello as u8 => {
            Some(u32::from_le_bytes([*a, *b, *c, *d]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
