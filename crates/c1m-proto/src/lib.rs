//! Wire formats, no I/O, both halves: the server encoders and request parsers below, and the
//! client side ([`client`]: subscribe requests and stream parsers) that `c1m bench` uses.
//! HTTP/1.1 request heads, HTTP/2 frames, HPACK and connection state ([`h2`]), SSE, WebSocket frames and handshake,
//! long-poll bodies, the raw TCP line protocol, and connection counts as written on the command
//! line ([`count`]) and the ephemeral-port budget per (source, destination) ([`ports`]). Shared by `c1m-server` and `c1m-bench`.
//! The gateway's internal binary formats share one codec ([`codec`]): the master ↔ worker
//! link and the versioned live-upgrade hand-over ([`handover`]).
//! Everything here is pure and fuzzable: bytes in, values or bytes out. docs/PROTOCOL.md is the
//! contract these functions implement.

pub mod channel;
pub mod chunked;
pub mod client;
pub mod codec;
pub mod count;
pub mod h2;
pub mod handover;
pub mod http;
pub mod http_framing;
pub mod idempotency;
pub mod line;
pub mod longpoll;
pub mod ports;
pub mod sse;
pub mod token;
pub mod ws;
