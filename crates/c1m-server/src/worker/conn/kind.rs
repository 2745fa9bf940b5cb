//! What a connection is doing ([`Kind`]) and the `/status` protocol bucket it counts in.
//! A kind's position in [`Kind::ALL`] is its code in a live upgrade's hand-over record, so the
//! list only ever grows at the end.

/// What a connection is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reading an HTTP request head (new, or keep-alive between requests).
    Http,
    /// Raw TCP port: reading the `SUB` line.
    TcpCommand,
    /// Waiting for the master to assign a publish id.
    Publishing,
    /// Waiting for the master's status figures.
    Status,
    /// Subscribed; waiting for the master's join answer (replay) before going live.
    SseJoining,
    PollJoining,
    TcpJoining,
    /// WebSocket: the 101 is sent; frames start once the join answer arrives.
    WsJoining,
    /// Live streams.
    Sse,
    PollWaiting,
    TcpStream,
    Ws,
    /// Response written or error sent: close once `out` drains.
    Closing,
    /// An HTTP/2 connection: its input goes to its codec, its streams are slots of their own.
    H2,
    /// Subscribing, waiting for a backend proxy's answer (connect or subscribe) before the
    /// join; the WebSocket's 101 is already sent.
    SseProxying,
    PollProxying,
    TcpProxying,
    WsProxying,
}

impl Kind {
    /// Every kind, in the order of its hand-over code (docs/upgrade.md): the index is the code.
    pub(super) const ALL: [Kind; 18] = [
        Kind::Http,
        Kind::TcpCommand,
        Kind::Publishing,
        Kind::Status,
        Kind::SseJoining,
        Kind::PollJoining,
        Kind::TcpJoining,
        Kind::WsJoining,
        Kind::Sse,
        Kind::PollWaiting,
        Kind::TcpStream,
        Kind::Ws,
        Kind::Closing,
        Kind::H2,
        Kind::SseProxying,
        Kind::PollProxying,
        Kind::TcpProxying,
        Kind::WsProxying,
    ];

    /// This kind's code in a hand-over record.
    pub fn code(self) -> u8 {
        Kind::ALL.iter().position(|&k| k == self).expect("listed") as u8
    }

    /// The kind a hand-over record's code names; None for a code this binary does not know.
    pub fn from_code(code: u8) -> Option<Kind> {
        Kind::ALL.get(code as usize).copied()
    }

    /// Subscribed and waiting for (more of) the master's join answer.
    pub fn is_joining(self) -> bool {
        matches!(
            self,
            Kind::SseJoining | Kind::PollJoining | Kind::TcpJoining | Kind::WsJoining
        )
    }

    /// Waiting for a backend proxy before subscribing.
    pub fn is_proxying(self) -> bool {
        matches!(
            self,
            Kind::SseProxying | Kind::PollProxying | Kind::TcpProxying | Kind::WsProxying
        )
    }

    /// The `/status` protocol bucket this connection counts in.
    pub fn protocol(self) -> Protocol {
        match self {
            Kind::SseJoining | Kind::Sse | Kind::SseProxying => Protocol::Sse,
            Kind::PollJoining | Kind::PollWaiting | Kind::PollProxying => Protocol::LongPoll,
            Kind::TcpJoining | Kind::TcpStream | Kind::TcpCommand | Kind::TcpProxying => {
                Protocol::Tcp
            }
            Kind::WsJoining | Kind::Ws | Kind::WsProxying => Protocol::WebSocket,
            _ => Protocol::Other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Sse,
    LongPoll,
    Tcp,
    WebSocket,
    Other,
}
