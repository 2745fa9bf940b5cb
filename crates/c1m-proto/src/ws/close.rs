//! Close status codes (RFC 6455 7.4) and which of them may appear on the wire.

/// A close status code. Constants name the ones this crate sends or checks.
pub type CloseCode = u16;

pub const NORMAL: CloseCode = 1000;
pub const GOING_AWAY: CloseCode = 1001;
pub const PROTOCOL_ERROR: CloseCode = 1002;
pub const UNSUPPORTED_DATA: CloseCode = 1003;
/// Reserved: "no status code was present". Never on the wire (RFC 6455 7.4.1).
pub const NO_STATUS: CloseCode = 1005;
/// Reserved: "closed abnormally". Never on the wire (RFC 6455 7.4.1).
pub const ABNORMAL: CloseCode = 1006;
pub const INVALID_PAYLOAD: CloseCode = 1007;
pub const POLICY_VIOLATION: CloseCode = 1008;
pub const MESSAGE_TOO_BIG: CloseCode = 1009;
pub const INTERNAL_ERROR: CloseCode = 1011;
/// IANA-registered "Try Again Later": the server is overloaded for now.
pub const TRY_AGAIN_LATER: CloseCode = 1013;
/// c1m's own (private-use range, RFC 6455 7.4.2): the subscriber fell further behind than the
/// server buffers for it. Not an error of the client's making: reconnect with `last_id` and the
/// history replay (or a gap notice) covers what it missed.
pub const SLOW_CONSUMER: CloseCode = 4008;
/// Private use (RFC 6455 7.4.2), c1m's: the connection's token expired, or a refresh token did
/// not verify. Reconnect (or refresh earlier) with a new token and the last id read.
pub const UNAUTHORIZED: CloseCode = 4001;
/// Private use, c1m's: a refresh token that does not grant the connection's channels.
pub const FORBIDDEN: CloseCode = 4003;

/// May `code` appear in a Close frame? RFC 6455 7.4.1 defines 1000-1003 and 1007-1011
/// (1004 is reserved; 1005, 1006 and 1015 are reserved for local use and MUST NOT be sent);
/// the IANA registry (7.4.2) has since added 1012-1014. 3000-3999 are registered by
/// libraries/frameworks and 4000-4999 are private use; everything else (0-999, the unassigned
/// rest of 1000-2999, and 5000+) is invalid, so a peer sending it violates the protocol.
pub fn is_valid_on_wire(code: CloseCode) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

#[cfg(test)]
mod tests {
    use super::is_valid_on_wire;

    #[test]
    fn rfc6455_7_4_close_code_ranges() {
        for ok in [
            1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014,
        ] {
            assert!(is_valid_on_wire(ok), "{ok}");
        }
        for ok in [3000, 3999, 4000, 4999] {
            assert!(is_valid_on_wire(ok), "{ok}");
        }
        for bad in [
            0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535,
        ] {
            assert!(!is_valid_on_wire(bad), "{bad}");
        }
    }
}
