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
//!
//! # How an event loop uses it
//!
//! ```
//! use c1m_proto::ws::{close, encode, handshake, Decoder, Event, Limits, MAX_BUFFERED};
//! # let mut sent: Vec<Vec<u8>> = Vec::new(); // stands in for the socket's write path
//! # let mut write = |b: &[u8]| sent.push(b.to_vec());
//! // On the upgrade request (head parsed by httparse): answer, then speak frames.
//! let head = [("Host", &b"h"[..]), ("Upgrade", b"websocket"), ("Connection", b"Upgrade"),
//!             ("Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="), ("Sec-WebSocket-Version", b"13")];
//! match handshake::validate("GET", "/sub/news", 1, head, &handshake::OriginPolicy::Any) {
//!     Ok(accept) => write(&accept.response),
//!     Err(reject) => write(&reject.response), // then close; count reject.reason
//! }
//! let limits = Limits::default(); // per worker: max message, server role
//! let mut dec = Decoder::default(); // per connection: 24 bytes, no buffer
//! let mut kept: Vec<u8> = Vec::new(); // per connection, exists only while non-empty
//! let mut scratch = vec![0u8; 64 * 1024]; // per worker
//!
//! // On readable: the kept tail goes first, then read after it until WouldBlock.
//! # let mut client = Vec::new();
//! # encode::write_masked(&mut client, 0x9, true, b"hi", [1, 2, 3, 4]);
//! # encode::write_masked(&mut client, 0x8, true, &1000u16.to_be_bytes(), [5, 6, 7, 8]);
//! # let mut read = |buf: &mut [u8]| { buf[..client.len()].copy_from_slice(&client); client.len() };
//! scratch[..kept.len()].copy_from_slice(&kept);
//! let end = kept.len() + read(&mut scratch[kept.len()..]);
//! let mut pos = 0;
//! loop {
//!     let d = match dec.decode(&mut scratch[pos..end], &limits) {
//!         Ok(d) => d,
//!         Err(e) => { write(encode::close(Some(e.close_code()), e.reason()).as_bytes()); break } // flush, close
//!     };
//!     let buf = &scratch[pos..end];
//!     match d.event {
//!         Some(Event::Ping(r)) => write(encode::pong(&buf[r]).as_bytes()),
//!         Some(Event::Close { code, .. }) => write(encode::close_reply(code).as_bytes()), // flush, close
//!         Some(Event::Pong(_)) => {} // peer alive: reset the pong timer
//!         Some(Event::Data { .. }) => {} // ignored and counted, unless --ws-client-publish
//!         None => {}
//!     }
//!     if d.consumed == 0 { break }
//!     pos += d.consumed;
//! }
//! kept = scratch[pos..end].to_vec(); // usually empty; never over MAX_BUFFERED bytes
//! assert!(kept.len() <= MAX_BUFFERED);
//!
//! // On publish: encode once, share the bytes with every subscriber's queue.
//! let frame: std::sync::Arc<[u8]> = encode::message_frame(b"payload").into();
//! // On shutdown (SIGTERM): 1001 to every WebSocket.
//! write(encode::close(Some(close::GOING_AWAY), "server shutting down").as_bytes());
//! # assert_eq!(sent[1], b"\x8A\x02hi");
//! # assert_eq!(sent[2], b"\x88\x02\x03\xE8");
//! # assert!(dec.is_done() && kept.is_empty() && frame[0] == 0x81);
//! ```

pub mod close;
pub mod encode;
pub mod frame;
pub mod handshake;
mod utf8;

#[cfg(test)]
mod frame_tests;

pub use close::CloseCode;
pub use frame::{
    decode, DataKind, Decoded, Decoder, Event, Limits, Masking, WsError, MAX_BUFFERED,
};
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
