//! WebSocket (RFC 6455), server side first, pure and allocation-light.
//!
//! # Layout
//! - [`handshake`]: validates an upgrade request head and builds the 101 (or the 400/403/426
//!   rejection) response bytes.
//! - [`frame`]: streaming decoder for frames from the peer. Its per-connection state is a
//!   24-byte `Copy` struct; bytes live in a caller-owned buffer and are unmasked in place, so an
//!   idle connection owns no buffer at all.
//! - [`encode`]: frames to the peer. A published message is encoded once into a `Vec` and shared
//!   by every subscriber; control frames are built in a fixed array, no heap.
//! - [`close`]: close status codes and the RFC 7.4 validity rules.
//! - `utf8`: one-byte incremental UTF-8 validator used for text messages split across frames.
//!
//! Nothing here does I/O, spawns, or panics on input: it all sits on the network path and is
//! fuzzed (`crates/c1m-proto/fuzz`).

pub mod close;
pub mod encode;
pub mod frame;
pub mod handshake;
mod utf8;

#[cfg(test)]
mod frame_tests;

pub use close::CloseCode;
pub use frame::{DataKind, Decoded, Decoder, Event, Limits, Masking, WsError, MAX_BUFFERED};
pub use utf8::Utf8State;

/// Frame opcodes (RFC 6455 5.2). 0x3-0x7 and 0xB-0xF are reserved.
pub mod opcode {
    pub const CONTINUATION: u8 = 0x0;
    pub const TEXT: u8 = 0x1;
    pub const BINARY: u8 = 0x2;
    pub const CLOSE: u8 = 0x8;
    pub const PING: u8 = 0x9;
    pub const PONG: u8 = 0xA;
}
