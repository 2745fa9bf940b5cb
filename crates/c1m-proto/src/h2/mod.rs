//! HTTP/2 (RFC 9113) and HPACK (RFC 7541), server side, sans I/O: bytes in, events and bytes
//! out. The event loop owns the socket, the timers and the mapping of streams onto
//! subscriptions; this module owns the wire.
//!
//! # Layout
//! - [`frame`]: typed frames from a byte slice, typed errors with the RFC code and scope;
//!   encoders into a caller's `Vec`.
//! - [`hpack`]: header block decoder (dynamic table, limits) and a stateless encoder;
//!   `huffman` and `hpack_tables` hold the code and the static table.
//! - [`Connection`] (`conn`: frames in; `conn_headers`: header blocks; `conn_send`: frames out;
//!   `request`: pseudo-header rules): the connection state machine: preface, SETTINGS, stream
//!   states, flow control. [`Config`] is what it advertises, [`Limits`] its caps against abuse,
//!   [`Counters`] the named count of each breach.
//!
//! # How an event loop uses it
//!
//! ```
//! use c1m_proto::h2::{frame, hpack, Config, Connection, ErrorCode, Event, Limits};
//! let mut conn = Connection::new(Config::default(), Limits::default()); // our SETTINGS queued
//! let mut kept: Vec<u8> = Vec::new(); // a partial frame, only while there is one
//! let mut events = Vec::new();
//! # let mut read = frame::PREFACE.to_vec();
//! # frame::write_settings(&mut read, &[]);
//! # let mut block = Vec::new();
//! # for (n, v) in [(":method", "GET"), (":scheme", "https"), (":path", "/sub/a"), (":authority", "h")] {
//! #     hpack::encode_field(&mut block, n.as_bytes(), v.as_bytes());
//! # }
//! # frame::write_headers(&mut read, 1, &block, true, 16_384);
//! // On readable: the kept tail, then what was read; keep what was not used.
//! kept.extend_from_slice(&read);
//! let used = conn.receive(&kept, &mut events);
//! kept.drain(..used);
//! for ev in events.drain(..) {
//!     match ev {
//!         Event::Request { stream, request, .. } if request.path.as_deref() == Some("/sub/a") => {
//!             conn.send_headers(stream, 200, &[("content-type", b"text/event-stream")], false).unwrap();
//!             // A refused send (Err(Full)) means a slow consumer: reset the stream or close.
//!             conn.send_data(stream, b"data: hello\n\n", false).unwrap();
//!         }
//!         Event::Request { stream, .. } => conn.reset(stream, ErrorCode::REFUSED_STREAM),
//!         _ => {} // body data, resets, GOAWAY; ConnectionError: write the output, then close
//!     }
//! }
//! // On writable (and after every receive): write conn.output(), then say how much went.
//! let written = conn.output().len();
//! conn.advance(written);
//! // Every second, from the timer wheel: a new window for the reset rate.
//! conn.tick();
//! // For /metrics: per-worker sums of conn.take_counters().
//! assert!(!conn.is_done() && conn.open_streams() == 1);
//! ```
//!
//! # Crate or own code
//! Searched docs.rs; the budget is ≤ 1 KB per idle connection with one SSE stream, ≤ 256 B per
//! further idle stream, inside c1m's own mio loop (no runtime, no task per connection):
//! - `h2`: runs as a tokio task over AsyncRead/AsyncWrite with `bytes` buffers; no sans-I/O core.
//! - `hpack` (0.3, 2015): allocates a `Vec` per decoded string; no header-list cap; unmaintained.
//! - `fluke-hpack` / `loona-hpack` (its forks): same decoder, still no list cap (a bomb is decoded
//!   in full before the caller can refuse it); loona-hpack pulls `tracing` and `thiserror`.
//! - `httlib-hpack`: decodes into owned `Vec`s per field with no cap; its `httlib-huffman`
//!   (writes into a caller's `Vec`, the fit we wanted) checks the padding's value but not its
//!   length, so zero-bit padding (not an EOS prefix, RFC 7541 §5.2) is accepted.
//! - `hpack_codec`, `http2parse`: last released 2019 and 2016; frames only or no limits.
//! - `loona-h2`: frame parser tied to the loona/buffet stack.
//!
//! So the codec is here (≈ the size of one of those crates): frames, HPACK with a compile-time
//! canonical Huffman table, and the state machine, all fuzzed (`fuzz/`, `tests/h2_stress.rs`)
//! and cross-checked against python-h2 (`tests/h2_python.rs`).
//!
//! # Memory
//! Advertised SETTINGS_HEADER_TABLE_SIZE is 0 by default: the decoder's dynamic table then holds
//! nothing once the client has seen it, so an idle connection pays nothing for HPACK. A push
//! gateway gets one request per subscription, so the compression a table would buy across
//! requests is worth less than its bytes held on every idle connection (4096 is the RFC default).
//! Until the client acknowledges our SETTINGS it may use 4096 (RFC 9113 §6.5.3); the table is
//! evicted and freed at the acknowledgement. The encoder keeps no table (RFC 7541 §2.3.2).
//!
//! Fixed state of a [`Connection`]: the struct, 224 bytes on x86_64 (configuration, limits,
//! counters, windows, the HPACK decoder with an empty table, and empty `Vec`s for the output and
//! the streams: a drained output buffer is freed, and an unfinished header block is a `Box` that
//! exists only between HEADERS and its last CONTINUATION). Each open stream is one [`Stream`]
//! (32 bytes, asserted at compile time) in the stream table, which grows one slot at a time
//! (doubling held 4 slots for a subscriber's one stream), plus DATA it holds (boxed) only
//! while the peer's window is shut. Measured by the test
//! `an_idle_sse_stream_fits_1_kb_and_each_further_one_256_bytes` (struct +
//! [`Connection::heap_bytes`], output drained): one idle SSE stream 256 bytes, twenty
//! 864 bytes, so 32 bytes per further stream; allocator overhead and TLS are not counted. The
//! server's whole figure (this, its stream slots and side records) is measured by
//! `bench/h2-memory.sh`.

mod config;
mod conn;
mod conn_headers;
mod conn_send;
pub mod frame;
pub mod hpack;
mod hpack_tables;
pub mod huffman;
mod request;

#[cfg(test)]
mod conn_tests;
#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod hpack_tests;

pub use config::{Config, Counters, Limits};
pub use conn::{Connection, Event, Stream};
pub use conn_send::SendError;
pub use request::Request;

use std::fmt;

/// An HTTP/2 error code (RFC 9113 §7); unknown codes from the peer are kept as numbers.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);

    /// The RFC's name, or `None` for a code it does not define.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied()
    }
}

impl fmt::Debug for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "ErrorCode({:#x})", self.0),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Whether an error ends the connection (GOAWAY) or one stream (RST_STREAM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Connection,
    Stream(u32),
}

/// A protocol error: the code sent to the peer, its scope, and what was wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H2Error {
    pub code: ErrorCode,
    pub scope: Scope,
    pub reason: &'static str,
}

impl H2Error {
    pub fn connection(code: ErrorCode, reason: &'static str) -> Self {
        H2Error {
            code,
            scope: Scope::Connection,
            reason,
        }
    }

    pub fn stream(stream: u32, code: ErrorCode, reason: &'static str) -> Self {
        H2Error {
            code,
            scope: Scope::Stream(stream),
            reason,
        }
    }
}

impl fmt::Display for H2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scope {
            Scope::Connection => write!(f, "connection error {}: {}", self.code, self.reason),
            Scope::Stream(id) => write!(f, "stream {id} error {}: {}", self.code, self.reason),
        }
    }
}

impl std::error::Error for H2Error {}
