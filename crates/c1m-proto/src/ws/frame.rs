//! Streaming decoder for WebSocket frames from the peer (RFC 6455 5).
//!
//! Memory is the point. A million mostly-idle connections cannot each own a read buffer, so
//! the per-connection state ([`Decoder`]) is a 24-byte `Copy` struct and the bytes stay in the
//! caller's buffer (a per-worker scratch buffer), unmasked in place. Data frame payloads are
//! streamed: once a data frame's header has been seen the decoder remembers how much payload
//! is left and its masking key, and hands out each piece as it arrives. So the only bytes a
//! caller ever has to keep between reads are an incomplete header or an incomplete control
//! frame: at most [`MAX_BUFFERED`] bytes, kept only while that partial frame exists. Between
//! messages the state is all zeros ([`Decoder::is_idle`]), so a server may even store it only
//! for connections that are mid-message.
//!
//! One call yields at most one [`Event`]; call again with the unconsumed rest until
//! `consumed == 0`. Every protocol violation is an error carrying the close code to send; after
//! an error or a Close event the decoder discards whatever follows.

use std::ops::Range;

use super::close::{self, CloseCode};
use super::opcode;
use super::utf8::Utf8State;

/// The most bytes a caller keeps between reads: a masked control frame with the largest
/// allowed payload (2 header + 4 mask + 125). An incomplete header (≤ 13 bytes) is smaller.
pub const MAX_BUFFERED: usize = 2 + 4 + 125;

/// Whether frames from the peer must be masked (RFC 6455 5.1: a server MUST close on an
/// unmasked client frame; a client MUST close on a masked server frame).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Masking {
    /// We are the server; the peer is a client.
    Required,
    /// We are the client (the load generator); the peer is a server.
    Forbidden,
}

/// Decoder settings; shared by all connections of a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest data message (sum of its frames' payloads) accepted; more → close 1009.
    pub max_message: u64,
    pub masking: Masking,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message: 64 * 1024,
            masking: Masking::Required,
        }
    }
}

/// The data opcode a message started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataKind {
    Text,
    Binary,
}

/// Something the peer said. Ranges index the buffer passed to that [`Decoder::decode`] call
/// and hold unmasked bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A piece of a data message. `fin` marks the message's last piece. Text pieces are
    /// validated UTF-8 so far, but a later piece may still fail (error 1007): treat the message
    /// as good only once `fin` arrives. A piece may split a codepoint.
    Data {
        kind: DataKind,
        payload: Range<usize>,
        fin: bool,
    },
    /// Answer with a Pong carrying the same payload (RFC 6455 5.5.2).
    Ping(Range<usize>),
    Pong(Range<usize>),
    /// The peer started or answered the closing handshake. `code` is None for an empty Close
    /// (the API-level 1005); `reason` is valid UTF-8. Reply with a Close (usually echoing the
    /// code) and close the TCP connection (RFC 6455 5.5.1, 7.1.5).
    Close {
        code: Option<CloseCode>,
        reason: Range<usize>,
    },
}

/// Outcome of one [`Decoder::decode`] call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Bytes from the start of the buffer that are done with. `0` means the rest is an
    /// incomplete header or control frame (keep it, ≤ [`MAX_BUFFERED`] bytes) or nothing.
    pub consumed: usize,
    pub event: Option<Event>,
}

/// A protocol violation by the peer: fail the connection with [`WsError::close_code`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsError {
    /// RFC 6455 5.1: a client frame without a mask.
    Unmasked,
    /// RFC 6455 5.1: a server frame with a mask (client role).
    Masked,
    /// RFC 6455 5.2: RSV1-3 set though no extension was negotiated.
    ReservedBits,
    /// RFC 6455 5.2: opcode 0x3-0x7 or 0xB-0xF.
    ReservedOpcode(u8),
    /// RFC 6455 5.5: control frame payload over 125 bytes.
    ControlTooLong,
    /// RFC 6455 5.5: control frame without FIN.
    ControlFragmented,
    /// RFC 6455 5.4: continuation frame with no message in progress.
    ContinuationWithoutStart,
    /// RFC 6455 5.4: new text/binary frame while a fragmented message is in progress.
    DataDuringFragmentedMessage,
    /// RFC 6455 5.2: 64-bit payload length with the most significant bit set.
    LengthOverflow,
    /// RFC 6455 5.5.1: a Close payload of exactly one byte.
    CloseTooShort,
    /// RFC 6455 7.4: a close code that must not be sent.
    InvalidCloseCode(CloseCode),
    /// RFC 6455 8.1: text message (or close reason) that is not UTF-8.
    InvalidUtf8,
    /// RFC 6455 7.4.1 (1009): data message larger than [`Limits::max_message`].
    MessageTooBig,
}

impl WsError {
    /// The status code to put in our Close frame.
    pub fn close_code(self) -> CloseCode {
        match self {
            WsError::InvalidUtf8 => close::INVALID_PAYLOAD,
            WsError::MessageTooBig => close::MESSAGE_TOO_BIG,
            _ => close::PROTOCOL_ERROR,
        }
    }

    /// A short reason for the Close frame and logs (≤ 123 bytes, ASCII).
    pub fn reason(self) -> &'static str {
        match self {
            WsError::Unmasked => "client frame not masked",
            WsError::Masked => "server frame masked",
            WsError::ReservedBits => "reserved bits set",
            WsError::ReservedOpcode(_) => "reserved opcode",
            WsError::ControlTooLong => "control frame too long",
            WsError::ControlFragmented => "control frame fragmented",
            WsError::ContinuationWithoutStart => "continuation without start",
            WsError::DataDuringFragmentedMessage => "data frame inside fragmented message",
            WsError::LengthOverflow => "payload length too large",
            WsError::CloseTooShort => "close payload of one byte",
            WsError::InvalidCloseCode(_) => "invalid close code",
            WsError::InvalidUtf8 => "invalid utf-8",
            WsError::MessageTooBig => "message too big",
        }
    }
}

impl std::fmt::Display for WsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.reason(), self.close_code())
    }
}

impl std::error::Error for WsError {}

/// `msg` values: which message is in progress.
const MSG_NONE: u8 = 0;
const MSG_TEXT: u8 = 1;
const MSG_BINARY: u8 = 2;

/// `frame` values: where we are inside a data frame.
const FRAME_NONE: u8 = 0;
const FRAME_MORE: u8 = 1;
const FRAME_FIN: u8 = 2;

/// Per-connection decoder state: 24 bytes, `Copy`, no heap. `Default` is a fresh connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decoder {
    /// Payload bytes of the current data frame not yet handed out.
    frame_left: u64,
    /// Payload bytes of the current message announced so far (for the 1009 check).
    msg_len: u64,
    /// The current data frame's masking key, rotated so `mask[0]` applies to the next byte.
    mask: [u8; 4],
    utf8: Utf8State,
    msg: u8,
    frame: u8,
    /// Set after a Close event or an error: input is discarded from then on.
    done: bool,
}

/// Free-function form of [`Decoder::decode`].
pub fn decode(state: &mut Decoder, buf: &mut [u8], limits: &Limits) -> Result<Decoded, WsError> {
    state.decode(buf, limits)
}

impl Decoder {
    /// Bytes in [`Decoder::to_bytes`].
    pub const STATE_LEN: usize = 24;

    /// The whole decoder state (a live upgrade hands a connection that is mid-message to the
    /// next process, which goes on decoding where this one stopped).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::STATE_LEN);
        out.extend_from_slice(&self.frame_left.to_le_bytes());
        out.extend_from_slice(&self.msg_len.to_le_bytes());
        out.extend_from_slice(&self.mask);
        out.extend_from_slice(&[
            self.utf8.to_byte(),
            self.msg,
            self.frame,
            u8::from(self.done),
        ]);
        out
    }

    /// The inverse of [`Decoder::to_bytes`]; None for bytes no decoder state has.
    pub fn from_bytes(b: &[u8]) -> Option<Decoder> {
        if b.len() != Self::STATE_LEN || b[21] > MSG_BINARY || b[22] > FRAME_FIN || b[23] > 1 {
            return None;
        }
        Some(Decoder {
            frame_left: u64::from_le_bytes(b[0..8].try_into().ok()?),
            msg_len: u64::from_le_bytes(b[8..16].try_into().ok()?),
            mask: b[16..20].try_into().ok()?,
            utf8: Utf8State::from_byte(b[20])?,
            msg: b[21],
            frame: b[22],
            done: b[23] == 1,
        })
    }

    /// True while a data message has started but its last frame has not arrived.
    pub fn in_message(&self) -> bool {
        self.msg != MSG_NONE
    }

    /// True between frames and outside any message: the state equals `Decoder::default()`,
    /// so a caller that stores decoders only for connections that are mid-message (e.g. in an
    /// `Option<Box<Decoder>>`) may drop this one and start afresh on the next read.
    pub fn is_idle(&self) -> bool {
        *self == Decoder::default()
    }

    /// True once a Close was received or an error returned; later input is discarded.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes at most one event from the front of `buf`, unmasking payload bytes in place.
    pub fn decode(&mut self, buf: &mut [u8], limits: &Limits) -> Result<Decoded, WsError> {
        if self.done {
            return Ok(Decoded {
                consumed: buf.len(),
                event: None,
            });
        }
        let out = if self.frame != FRAME_NONE {
            self.payload_piece(buf, 0)
        } else {
            self.start_frame(buf, limits)
        };
        if out.is_err() {
            self.done = true;
        }
        out
    }

    /// Parses a frame header at the front of `buf`, and for a control frame its payload too.
    fn start_frame(&mut self, buf: &mut [u8], limits: &Limits) -> Result<Decoded, WsError> {
        const NEED_MORE: Decoded = Decoded {
            consumed: 0,
            event: None,
        };
        let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else {
            return Ok(NEED_MORE);
        };
        // Every check that the first two bytes allow comes before waiting for the rest, so a
        // bad peer is failed as early as possible.
        let fin = b0 & 0x80 != 0;
        let op = b0 & 0x0F;
        if b0 & 0x70 != 0 {
            return Err(WsError::ReservedBits);
        }
        let masked = b1 & 0x80 != 0;
        match (limits.masking, masked) {
            (Masking::Required, false) => return Err(WsError::Unmasked),
            (Masking::Forbidden, true) => return Err(WsError::Masked),
            _ => {}
        }
        let len7 = b1 & 0x7F;
        let control = match op {
            opcode::CLOSE | opcode::PING | opcode::PONG => true,
            opcode::CONTINUATION | opcode::TEXT | opcode::BINARY => false,
            other => return Err(WsError::ReservedOpcode(other)),
        };
        if control {
            if !fin {
                return Err(WsError::ControlFragmented);
            }
            // Also rejects a control length in the 16/64-bit forms (126, 127).
            if len7 > 125 {
                return Err(WsError::ControlTooLong);
            }
        } else if op == opcode::CONTINUATION && self.msg == MSG_NONE {
            return Err(WsError::ContinuationWithoutStart);
        } else if op != opcode::CONTINUATION && self.msg != MSG_NONE {
            return Err(WsError::DataDuringFragmentedMessage);
        }

        let ext = match len7 {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask_at = 2 + ext;
        let header_len = mask_at + if masked { 4 } else { 0 };
        let Some(header) = buf.get(..header_len) else {
            return Ok(NEED_MORE);
        };
        // A longer-than-needed length encoding is accepted: "minimal" binds the sender and
        // rejecting it buys nothing.
        let len = match ext {
            2 => u64::from(u16::from_be_bytes([header[2], header[3]])),
            8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&header[2..10]);
                u64::from_be_bytes(b)
            }
            _ => u64::from(len7),
        };
        if len >> 63 != 0 {
            return Err(WsError::LengthOverflow);
        }
        let mut mask = [0u8; 4];
        if masked {
            mask.copy_from_slice(&header[mask_at..header_len]);
        }

        if control {
            // len ≤ 125 here, so the cast is exact.
            let end = header_len + len as usize;
            let Some(payload) = buf.get_mut(header_len..end) else {
                return Ok(NEED_MORE);
            };
            unmask(payload, mask);
            let range = header_len..end;
            let event = match op {
                opcode::PING => Event::Ping(range),
                opcode::PONG => Event::Pong(range),
                _ => {
                    let ev = close_event(payload, header_len)?;
                    self.done = true;
                    ev
                }
            };
            return Ok(Decoded {
                consumed: end,
                event: Some(event),
            });
        }

        // Data frame: check the message limit on the announced length, before any payload.
        let msg_len = self.msg_len.saturating_add(len);
        if msg_len > limits.max_message {
            return Err(WsError::MessageTooBig);
        }
        self.msg_len = msg_len;
        match op {
            opcode::TEXT => {
                self.msg = MSG_TEXT;
                self.utf8 = Utf8State::default();
            }
            opcode::BINARY => self.msg = MSG_BINARY,
            _ => {}
        }
        self.frame = if fin { FRAME_FIN } else { FRAME_MORE };
        self.frame_left = len;
        self.mask = mask;
        let rest = buf.get_mut(header_len..).unwrap_or_default();
        let mut piece = self.payload_piece(rest, header_len)?;
        piece.consumed += header_len;
        Ok(piece)
    }

    /// Hands out the next piece of the current data frame's payload from the front of `buf`.
    /// `offset` is where `buf` starts in the caller's buffer (for the event's range).
    fn payload_piece(&mut self, buf: &mut [u8], offset: usize) -> Result<Decoded, WsError> {
        let n = usize::try_from(self.frame_left)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let frame_ends = n as u64 == self.frame_left;
        let piece = buf.get_mut(..n).unwrap_or_default();
        // An empty piece that does not end the frame tells the caller nothing.
        if n == 0 && !frame_ends {
            return Ok(Decoded {
                consumed: 0,
                event: None,
            });
        }
        unmask(piece, self.mask);
        self.mask.rotate_left(n % 4);
        self.frame_left -= n as u64;
        let kind = if self.msg == MSG_TEXT {
            DataKind::Text
        } else {
            DataKind::Binary
        };
        let msg_ends = frame_ends && self.frame == FRAME_FIN;
        if kind == DataKind::Text
            && (!self.utf8.feed(piece) || (msg_ends && !self.utf8.is_complete()))
        {
            return Err(WsError::InvalidUtf8);
        }
        // Back to all-zero state between messages, so `is_idle` holds and a caller may drop
        // the state (Option<Box<Decoder>>) while the peer is quiet.
        if frame_ends {
            self.frame = FRAME_NONE;
            self.mask = [0; 4];
        }
        if msg_ends {
            self.msg = MSG_NONE;
            self.msg_len = 0;
            self.utf8 = Utf8State::default();
        }
        // A non-final empty frame (or its empty tail) carries nothing worth an event.
        let event = (n > 0 || msg_ends).then(|| Event::Data {
            kind,
            payload: offset..offset + n,
            fin: msg_ends,
        });
        Ok(Decoded { consumed: n, event })
    }
}

/// Validates a Close payload (RFC 6455 5.5.1, 7.4) already unmasked; `at` is its offset in
/// the caller's buffer.
fn close_event(payload: &[u8], at: usize) -> Result<Event, WsError> {
    match payload {
        [] => Ok(Event::Close {
            code: None,
            reason: at..at,
        }),
        [_] => Err(WsError::CloseTooShort),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !close::is_valid_on_wire(code) {
                return Err(WsError::InvalidCloseCode(code));
            }
            if std::str::from_utf8(reason).is_err() {
                return Err(WsError::InvalidUtf8);
            }
            Ok(Event::Close {
                code: Some(code),
                reason: at + 2..at + payload.len(),
            })
        }
    }
}

/// XORs `bytes` with the repeating 4-byte key (RFC 6455 5.3), starting at key byte 0.
fn unmask(bytes: &mut [u8], mask: [u8; 4]) {
    if mask == [0; 4] {
        return;
    }
    // Eight bytes at a time is several times faster than bytewise and needs no unsafe; 8 is
    // a multiple of 4, so the key phase is the same at the start of the remainder.
    let [a, b, c, d] = mask;
    let key = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut chunks = bytes.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(w) ^ key).to_ne_bytes());
    }
    for (b, k) in chunks.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *b ^= k;
    }
}
