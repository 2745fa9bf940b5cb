//! What a [`super::Connection`] advertises ([`Config`]), the caps it enforces against abuse
//! ([`Limits`]), and the named counters of each breach ([`Counters`]) for the server's /metrics.

use super::frame;

/// What this side advertises in its SETTINGS.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub max_concurrent_streams: u32,
    /// Receive window of each stream (the connection's stays at the RFC's 65535).
    pub initial_window_size: u32,
    pub max_frame_size: u32,
    pub max_header_list_size: u32,
    /// HPACK dynamic table the peer may fill (0: none, see the module doc's Memory).
    pub header_table_size: u32,
    /// Advertise SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441 WebSocket over HTTP/2).
    pub enable_connect_protocol: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_streams: 100,
            initial_window_size: 65_535,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 16 * 1024,
            header_table_size: 0,
            enable_connect_protocol: false,
        }
    }
}

/// Caps against abuse; each breach is counted in [`Counters`].
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of one header block across HEADERS and CONTINUATION frames.
    pub max_header_block: u32,
    /// CONTINUATION frames in one header block (empty ones cost nothing in bytes).
    pub max_continuations: u16,
    /// RST_STREAM frames from the peer between two [`super::Connection::tick`] calls.
    pub max_resets_per_tick: u16,
    /// Control frames (SETTINGS/PING ACKs, RST_STREAMs) queued while the output is not drained.
    pub max_pending_control: u16,
    /// Bytes of output plus DATA waiting for the peer's window.
    pub max_output: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_block: 32 * 1024,
            max_continuations: 32,
            max_resets_per_tick: 100,
            max_pending_control: 64,
            max_output: 256 * 1024,
        }
    }
}

/// Named counters for the server's /metrics; [`super::Connection::take_counters`] hands them over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// GOAWAY(ENHANCE_YOUR_CALM) for too many peer resets per tick (CVE-2023-44487).
    pub rapid_reset: u32,
    /// GOAWAY(ENHANCE_YOUR_CALM) for a header block over the byte or frame cap.
    pub continuation_flood: u32,
    /// GOAWAY(ENHANCE_YOUR_CALM) for too many control frames queued (SETTINGS/PING floods).
    pub control_flood: u32,
    /// Requests answered 431 because the decoded header list passed the cap (HPACK bombs).
    pub header_list_too_large: u32,
    /// Streams refused over SETTINGS_MAX_CONCURRENT_STREAMS.
    pub refused_streams: u32,
    /// Requests reset as malformed.
    pub malformed_requests: u32,
    /// Connection errors sent (GOAWAY with an error code), the ones above included.
    pub connection_errors: u32,
    /// Stream errors sent (RST_STREAM), refused and malformed included.
    pub stream_errors: u32,
    /// Sends refused because the output bound was reached (a slow consumer).
    pub output_full: u32,
}

impl Counters {
    /// Adds another set (a worker summing its connections).
    pub fn add(&mut self, o: &Counters) {
        self.rapid_reset += o.rapid_reset;
        self.continuation_flood += o.continuation_flood;
        self.control_flood += o.control_flood;
        self.header_list_too_large += o.header_list_too_large;
        self.refused_streams += o.refused_streams;
        self.malformed_requests += o.malformed_requests;
        self.connection_errors += o.connection_errors;
        self.stream_errors += o.stream_errors;
        self.output_full += o.output_full;
    }
}
