//! A worker's per-connection record: the connection's state machine position, its socket and
//! TLS session, its delivery window and reconnect-storm flags, and the [`Spill`] buffers that
//! hold bytes only while a unit is cut or a write blocked. Kept apart because its size is the
//! per-connection memory budget (the size test in the parent module guards it).

use crate::delivery::ConnDelivery;
use crate::proto::Phase;
use mio::net::TcpStream;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// TCP connect in progress.
    Connecting,
    /// Request sent, waiting for the server's confirmation.
    Subscribing,
    Online,
    /// Waiting to reconnect.
    Backoff,
}

pub(super) struct Conn {
    pub(super) stream: Option<TcpStream>,
    /// The TLS session of an https:// / wss:// target (boxed: one pointer for plain runs).
    pub(super) tls: Option<Box<rustls::ClientConnection>>,
    pub(super) gen: u32,
    pub(super) global: u32,
    pub(super) state: State,
    pub(super) phase: Phase,
    pub(super) attempts: u8,
    /// The first attempt has not resolved yet (online or failed): the ramp is not done.
    pub(super) first: bool,
    /// Monotonic µs when this attempt was due (open model: latency counts from here).
    pub(super) due_us: u64,
    /// Highest server message id seen (0 = none); also the resume position.
    pub(super) last_id: u64,
    pub(super) delivery: ConnDelivery,
    /// Reconnect storm flags ([`crate::storm`]: DROPPED, BACK, …); 0 outside that scenario.
    pub(super) storm: u8,
    /// Reconnect storm: ms after `epoch` when the last resubscription request was sent
    /// (49 days of range; a run is bounded by --duration long before).
    pub(super) resub_ms: u32,
    /// Unparsed tail of input; empty (no allocation) while idle.
    pub(super) pending: Spill,
    /// Unwritten output; empty (no allocation) unless a write blocked.
    pub(super) out: Spill,
    /// `--http2`: the streams this socket carries (None for HTTP/1.1 and the other protocols).
    pub(super) h2: Option<Box<super::h2::H2Conn>>,
}

/// Bytes a connection must keep for a while. 8 bytes and no allocation while empty — the
/// common case for a held connection — instead of a 24-byte Vec header on every connection.
#[derive(Default)]
// A Box<Vec> is the point here: one pointer while empty, a growable buffer while in use.
#[allow(clippy::box_collection)]
pub(super) struct Spill(Option<Box<Vec<u8>>>);

impl Spill {
    pub(super) fn is_empty(&self) -> bool {
        !matches!(&self.0, Some(v) if !v.is_empty())
    }

    /// Takes the bytes out (an empty Vec when there are none).
    pub(super) fn take(&mut self) -> Vec<u8> {
        self.0.take().map(|b| *b).unwrap_or_default()
    }

    /// Stores `v`, or frees everything when it is empty. A tail is kept at its own size: the
    /// Vec it came in may have held a whole read (up to the 64 KiB scratch), and a held
    /// connection with a cut unit would otherwise keep that capacity for as long as it lives.
    pub(super) fn put(&mut self, mut v: Vec<u8>) {
        if v.capacity() > 2 * v.len() {
            v.shrink_to_fit();
        }
        self.0 = (!v.is_empty()).then(|| Box::new(v));
    }

    pub(super) fn extend(&mut self, bytes: &[u8]) {
        self.0
            .get_or_insert_with(Box::default)
            .extend_from_slice(bytes);
    }

    pub(super) fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::Spill;

    #[test]
    fn a_kept_tail_does_not_keep_the_capacity_of_the_read_it_came_in() {
        let mut read = Vec::with_capacity(64 * 1024);
        read.extend_from_slice(&[b'x'; 64 * 1024]);
        read.drain(..64 * 1024 - 10); // parsed all but a cut 10-byte unit
        let mut spill = Spill::default();
        spill.put(read);
        let kept = spill.take();
        assert_eq!(kept.len(), 10);
        assert!(
            kept.capacity() < 64,
            "a 10-byte tail keeps {} bytes",
            kept.capacity()
        );
    }
}
