//! HTTP/2 frames (RFC 9113 §4, §6): a decoder from a byte slice to typed frames that borrow the
//! payload, and encoders that append to a caller's `Vec`.
//!
//! The decoder checks everything a frame can be checked for on its own (lengths, stream-0 rules,
//! padding, setting values) and returns an [`H2Error`] carrying the RFC error code and whether it
//! is a connection or a stream error. It reads the 9-byte header first, so a frame longer than
//! the advertised SETTINGS_MAX_FRAME_SIZE is refused before its payload is buffered. What needs
//! connection state (stream states, windows, CONTINUATION sequencing) is in `conn`.

use super::{ErrorCode, H2Error};

/// What a client sends first (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Length of the fixed frame header.
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE's initial value and its lower bound.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// SETTINGS_MAX_FRAME_SIZE's upper bound (2^24 - 1).
pub const MAX_MAX_FRAME_SIZE: u32 = 16_777_215;
/// Largest flow-control window (2^31 - 1).
pub const MAX_WINDOW: u32 = 0x7fff_ffff;

/// Frame types (RFC 9113 §6). Others are ignored by receivers (§4.1, §5.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Data = 0,
    Headers = 1,
    Priority = 2,
    RstStream = 3,
    Settings = 4,
    PushPromise = 5,
    Ping = 6,
    GoAway = 7,
    WindowUpdate = 8,
    Continuation = 9,
}

/// Frame flags by name (RFC 9113 §6). END_STREAM and ACK share a bit.
pub mod flags {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// Setting identifiers (RFC 9113 §6.5.2, RFC 8441 §3).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
}

/// The deprecated priority fields of HEADERS and PRIORITY, parsed only to check them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    pub exclusive: bool,
    pub depends_on: u32,
    pub weight: u8,
}

/// One decoded frame; byte fields borrow from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// `flow_len` is the whole payload, padding included: what flow control counts.
    Data {
        stream: u32,
        end_stream: bool,
        data: &'a [u8],
        flow_len: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
        block: &'a [u8],
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: ErrorCode,
    },
    /// `settings` holds whole 6-byte entries, already checked; read them with [`settings`].
    Settings {
        ack: bool,
        settings: &'a [u8],
    },
    PushPromise {
        stream: u32,
        promised: u32,
        block: &'a [u8],
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: ErrorCode,
        debug: &'a [u8],
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: &'a [u8],
    },
    /// A frame type this codec does not know: skipped, but a receiver must see it to check
    /// that it did not interrupt a header block.
    Unknown {
        kind: u8,
        stream: u32,
    },
}

/// The fixed header of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

/// Reads a frame header, if 9 bytes are there.
pub fn head(buf: &[u8]) -> Option<Head> {
    let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    Some(Head {
        len: u32::from_be_bytes([0, h[0], h[1], h[2]]),
        kind: h[3],
        flags: h[4],
        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
    })
}

/// Iterates the `(identifier, value)` pairs of a SETTINGS payload from [`Frame::Settings`].
pub fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(6).map(|s| {
        (
            u16::from_be_bytes([s[0], s[1]]),
            u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
        )
    })
}

fn conn(code: ErrorCode, reason: &'static str) -> H2Error {
    H2Error::connection(code, reason)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Strips the Pad Length byte and the padding (RFC 9113 §6.1, §6.2).
fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], H2Error> {
    if flags & flags::PADDED == 0 {
        return Ok(payload);
    }
    let (&pad, rest) = payload.split_first().ok_or(conn(
        ErrorCode::FRAME_SIZE_ERROR,
        "padded frame without a pad length",
    ))?;
    let keep = rest.len().checked_sub(pad as usize).ok_or(conn(
        ErrorCode::PROTOCOL_ERROR,
        "padding as long as the payload or longer",
    ))?;
    Ok(&rest[..keep])
}

/// Decodes one frame from the front of `buf`: `Ok(None)` until the whole frame is there, else
/// the frame and the bytes it used. `max_frame_size` is the SETTINGS_MAX_FRAME_SIZE this side
/// advertised. On a stream error the frame's length is `HEADER_LEN + head(buf).len`.
pub fn decode(buf: &[u8], max_frame_size: u32) -> Result<Option<(Frame<'_>, usize)>, H2Error> {
    let Some(h) = head(buf) else { return Ok(None) };
    if h.len > max_frame_size {
        return Err(conn(
            ErrorCode::FRAME_SIZE_ERROR,
            "frame longer than SETTINGS_MAX_FRAME_SIZE",
        ));
    }
    let total = HEADER_LEN + h.len as usize;
    let Some(p) = buf.get(HEADER_LEN..total) else {
        return Ok(None);
    };
    let (stream, f) = (h.stream, h.flags);
    let needs_stream = |what: &'static str| {
        if stream == 0 {
            Err(conn(ErrorCode::PROTOCOL_ERROR, what))
        } else {
            Ok(())
        }
    };
    let needs_zero = |what: &'static str| {
        if stream != 0 {
            Err(conn(ErrorCode::PROTOCOL_ERROR, what))
        } else {
            Ok(())
        }
    };
    let frame = match h.kind {
        0 => {
            needs_stream("DATA on stream 0")?;
            let data = unpad(f, p)?;
            Frame::Data {
                stream,
                end_stream: f & flags::END_STREAM != 0,
                data,
                flow_len: h.len,
            }
        }
        1 => {
            needs_stream("HEADERS on stream 0")?;
            let mut block = unpad(f, p)?;
            let mut priority = None;
            if f & flags::PRIORITY != 0 {
                if block.len() < 5 {
                    return Err(conn(
                        ErrorCode::FRAME_SIZE_ERROR,
                        "HEADERS too short for priority",
                    ));
                }
                let prio = read_priority(block);
                if prio.depends_on == stream {
                    // A connection error, not the stream error §5.3.1 allows: the header block
                    // would otherwise go undecoded and HPACK state out of step.
                    return Err(conn(ErrorCode::PROTOCOL_ERROR, "stream depends on itself"));
                }
                priority = Some(prio);
                block = &block[5..];
            }
            Frame::Headers {
                stream,
                end_stream: f & flags::END_STREAM != 0,
                end_headers: f & flags::END_HEADERS != 0,
                priority,
                block,
            }
        }
        2 => {
            needs_stream("PRIORITY on stream 0")?;
            if p.len() != 5 {
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::FRAME_SIZE_ERROR,
                    "PRIORITY not 5 bytes",
                ));
            }
            let priority = read_priority(p);
            if priority.depends_on == stream {
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::PROTOCOL_ERROR,
                    "stream depends on itself",
                ));
            }
            Frame::Priority { stream, priority }
        }
        3 => {
            needs_stream("RST_STREAM on stream 0")?;
            if p.len() != 4 {
                return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "RST_STREAM not 4 bytes"));
            }
            Frame::RstStream {
                stream,
                code: ErrorCode(u32_at(p, 0)),
            }
        }
        4 => {
            needs_zero("SETTINGS on a stream")?;
            let ack = f & flags::ACK != 0;
            if ack && !p.is_empty() {
                return Err(conn(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "SETTINGS ack with a payload",
                ));
            }
            if p.len() % 6 != 0 {
                return Err(conn(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "SETTINGS length not a multiple of 6",
                ));
            }
            for (id, value) in settings(p) {
                check_setting(id, value)?;
            }
            Frame::Settings { ack, settings: p }
        }
        5 => {
            needs_stream("PUSH_PROMISE on stream 0")?;
            let rest = unpad(f, p)?;
            if rest.len() < 4 {
                return Err(conn(ErrorCode::FRAME_SIZE_ERROR, "PUSH_PROMISE too short"));
            }
            Frame::PushPromise {
                stream,
                promised: u32_at(rest, 0) & 0x7fff_ffff,
                block: &rest[4..],
            }
        }
        6 => {
            needs_zero("PING on a stream")?;
            let data: [u8; 8] = p
                .try_into()
                .map_err(|_| conn(ErrorCode::FRAME_SIZE_ERROR, "PING not 8 bytes"))?;
            Frame::Ping {
                ack: f & flags::ACK != 0,
                data,
            }
        }
        7 => {
            needs_zero("GOAWAY on a stream")?;
            if p.len() < 8 {
                return Err(conn(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "GOAWAY shorter than 8 bytes",
                ));
            }
            Frame::GoAway {
                last_stream: u32_at(p, 0) & 0x7fff_ffff,
                code: ErrorCode(u32_at(p, 4)),
                debug: &p[8..],
            }
        }
        8 => {
            if p.len() != 4 {
                return Err(conn(
                    ErrorCode::FRAME_SIZE_ERROR,
                    "WINDOW_UPDATE not 4 bytes",
                ));
            }
            let increment = u32_at(p, 0) & 0x7fff_ffff;
            if increment == 0 {
                let e = (ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE of 0");
                return Err(if stream == 0 {
                    conn(e.0, e.1)
                } else {
                    H2Error::stream(stream, e.0, e.1)
                });
            }
            Frame::WindowUpdate { stream, increment }
        }
        9 => {
            needs_stream("CONTINUATION on stream 0")?;
            Frame::Continuation {
                stream,
                end_headers: f & flags::END_HEADERS != 0,
                block: p,
            }
        }
        kind => Frame::Unknown { kind, stream },
    };
    Ok(Some((frame, total)))
}

fn read_priority(b: &[u8]) -> Priority {
    let dep = u32_at(b, 0);
    Priority {
        exclusive: dep & 0x8000_0000 != 0,
        depends_on: dep & 0x7fff_ffff,
        weight: b[4],
    }
}

/// The value rules of RFC 9113 §6.5.2 and RFC 8441 §3; unknown identifiers are ignored.
fn check_setting(id: u16, value: u32) -> Result<(), H2Error> {
    match id {
        setting::ENABLE_PUSH | setting::ENABLE_CONNECT_PROTOCOL if value > 1 => Err(conn(
            ErrorCode::PROTOCOL_ERROR,
            "boolean setting not 0 or 1",
        )),
        setting::INITIAL_WINDOW_SIZE if value > MAX_WINDOW => Err(conn(
            ErrorCode::FLOW_CONTROL_ERROR,
            "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
        )),
        setting::MAX_FRAME_SIZE
            if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) =>
        {
            Err(conn(
                ErrorCode::PROTOCOL_ERROR,
                "SETTINGS_MAX_FRAME_SIZE out of range",
            ))
        }
        _ => Ok(()),
    }
}

/// Appends a frame header.
pub fn write_head(out: &mut Vec<u8>, len: usize, kind: Kind, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    let len = (len as u32).to_be_bytes();
    out.extend_from_slice(&[len[1], len[2], len[3], kind as u8, flags]);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
}

/// Appends one DATA frame; `data` must fit the peer's SETTINGS_MAX_FRAME_SIZE.
pub fn write_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    write_head(
        out,
        data.len(),
        Kind::Data,
        if end_stream { flags::END_STREAM } else { 0 },
        stream,
    );
    out.extend_from_slice(data);
}

/// Appends a header block as HEADERS plus as many CONTINUATION frames as `max_frame_size`
/// requires.
pub fn write_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let max = max_frame_size.max(DEFAULT_MAX_FRAME_SIZE) as usize;
    let mut chunks = block.chunks(max).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let mut f = if end_stream { flags::END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        f |= flags::END_HEADERS;
    }
    write_head(out, first.len(), Kind::Headers, f, stream);
    out.extend_from_slice(first);
    while let Some(chunk) = chunks.next() {
        let f = if chunks.peek().is_none() {
            flags::END_HEADERS
        } else {
            0
        };
        write_head(out, chunk.len(), Kind::Continuation, f, stream);
        out.extend_from_slice(chunk);
    }
}

/// Appends a SETTINGS frame with these entries.
pub fn write_settings(out: &mut Vec<u8>, entries: &[(u16, u32)]) {
    write_head(out, entries.len() * 6, Kind::Settings, 0, 0);
    for (id, value) in entries {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends a SETTINGS acknowledgement.
pub fn write_settings_ack(out: &mut Vec<u8>) {
    write_head(out, 0, Kind::Settings, flags::ACK, 0);
}

/// Appends a PING (or its ACK, which echoes the data).
pub fn write_ping(out: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    write_head(out, 8, Kind::Ping, if ack { flags::ACK } else { 0 }, 0);
    out.extend_from_slice(&data);
}

/// Appends a RST_STREAM.
pub fn write_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    write_head(out, 4, Kind::RstStream, 0, stream);
    out.extend_from_slice(&code.0.to_be_bytes());
}

/// Appends a GOAWAY; `debug` is opaque diagnostic text for the peer.
pub fn write_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    write_head(out, 8 + debug.len(), Kind::GoAway, 0, 0);
    out.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(&code.0.to_be_bytes());
    out.extend_from_slice(debug);
}

/// Appends a WINDOW_UPDATE (stream 0: the connection window).
pub fn write_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    write_head(out, 4, Kind::WindowUpdate, 0, stream);
    out.extend_from_slice(&(increment & 0x7fff_ffff).to_be_bytes());
}
