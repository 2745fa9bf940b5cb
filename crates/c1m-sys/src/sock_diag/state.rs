//! What a TCP socket's state is in the kernel's numbering, its `ss` name, and the state sets
//! (`idiag_states` masks) a dump filters by. Plain values: no netlink here.

/// TCP states as the kernel numbers them (include/net/tcp_states.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TcpState {
    Established = 1,
    SynSent = 2,
    SynRecv = 3,
    FinWait1 = 4,
    FinWait2 = 5,
    TimeWait = 6,
    Close = 7,
    CloseWait = 8,
    LastAck = 9,
    Listen = 10,
    Closing = 11,
    NewSynRecv = 12,
}

impl TcpState {
    /// Every state, in kernel order.
    pub const ALL: [TcpState; 12] = [
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait1,
        TcpState::FinWait2,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Closing,
        TcpState::NewSynRecv,
    ];

    /// The state for a kernel state number.
    pub fn from_u8(n: u8) -> Option<TcpState> {
        TcpState::ALL.get((n as usize).wrapping_sub(1)).copied()
    }

    /// The name `ss` prints for this state.
    pub fn name(self) -> &'static str {
        match self {
            TcpState::Established => "ESTAB",
            TcpState::SynSent => "SYN-SENT",
            TcpState::SynRecv => "SYN-RECV",
            TcpState::FinWait1 => "FIN-WAIT-1",
            TcpState::FinWait2 => "FIN-WAIT-2",
            TcpState::TimeWait => "TIME-WAIT",
            TcpState::Close => "UNCONN",
            TcpState::CloseWait => "CLOSE-WAIT",
            TcpState::LastAck => "LAST-ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Closing => "CLOSING",
            TcpState::NewSynRecv => "NEW-SYN-RECV",
        }
    }

    /// Parses an `ss`-style name (case-insensitive; `established`, `time-wait`, `tw` also work).
    pub fn parse(s: &str) -> Option<TcpState> {
        let norm = s.to_ascii_uppercase().replace('_', "-");
        let alias = match norm.as_str() {
            "ESTABLISHED" => "ESTAB",
            "TW" | "TIMEWAIT" => "TIME-WAIT",
            "CLOSE" => "UNCONN",
            other => other,
        };
        TcpState::ALL.into_iter().find(|st| st.name() == alias)
    }

    /// This state's bit in an `idiag_states` mask.
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of TCP states, as the kernel-side `idiag_states` filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateMask(pub u32);

impl StateMask {
    /// Every state (request sockets included: the kernel adds NEW_SYN_RECV for SYN_RECV).
    pub const ALL: StateMask = StateMask(u32::MAX);

    /// A mask of the given states.
    pub fn of(states: &[TcpState]) -> StateMask {
        StateMask(states.iter().fold(0, |m, s| m | s.bit()))
    }
}

/// `TCPF_BOUND_INACTIVE` (Linux 6.7+): not a socket state but a request bit for sockets that
/// are bound and neither listening nor connected (they are reported as CLOSE). Asking for it
/// makes the kernel walk its bind table, every bound socket, on top of the connection table.
pub const BOUND_INACTIVE: StateMask = StateMask(1 << 13);
