//! Which protocol a run speaks, as the command line and the worker config name it. The request
//! bytes and stream parsers themselves live with the server halves in [`c1m_proto::client`]
//! (one home per wire format); this module only re-exports them for the worker.

pub use c1m_proto::client::{
    parse, parse_u64, subscribe_request, ws_accept, ws_client_frame, ws_key, Ctx, Event, Phase,
    ProtoError, SubscribeRequest, Wire, MAX_PENDING,
};
use serde::{Deserialize, Serialize};

/// Which protocol a run speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// Server-sent events: `GET /sub/{ch}` with `Accept: text/event-stream`.
    Sse,
    /// WebSocket: upgrade handshake, then frames.
    Ws,
    /// HTTP long-poll loop with `last_id` (c1m's JSON answers).
    Poll,
    /// Raw TCP line protocol (`SUB ch`), address from `--tcp`.
    Tcp,
    /// Plain TCP connect and hold; works against any listener.
    Connect,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::Sse => "sse",
            Proto::Ws => "ws",
            Proto::Poll => "poll",
            Proto::Tcp => "tcp",
            Proto::Connect => "connect",
        }
    }

    /// The parser family in c1m-proto.
    pub fn wire(self) -> Wire {
        match self {
            Proto::Sse => Wire::Sse,
            Proto::Ws => Wire::Ws,
            Proto::Poll => Wire::Poll,
            Proto::Tcp => Wire::Tcp,
            Proto::Connect => Wire::Connect,
        }
    }
}
