//! Frames to the peer (RFC 6455 5.2): server frames are unmasked.
//!
//! Publishing is fan-out, so a data frame is built once per message ([`message_frame`],
//! [`envelope_frame`]) as one `Vec` of exact size that the server turns into an `Arc<[u8]>`
//! and queues for every subscriber. Control frames (ping, pong, close) are tiny and per
//! connection, so they are built in a fixed array ([`ControlFrame`]) with no heap at all.
//! Client-side (masked) frames for the load generator are at the end.

use super::close::CloseCode;
use super::frame::DataKind;
use super::opcode;

/// Largest control frame payload (RFC 6455 5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// Size of the header of an unmasked frame carrying `len` payload bytes.
pub fn header_len(len: usize) -> usize {
    match len {
        0..=125 => 2,
        126..=0xFFFF => 4,
        _ => 10,
    }
}

/// Appends an unmasked frame header, using the shortest length form (RFC 6455 5.2).
pub fn write_header(out: &mut Vec<u8>, op: u8, fin: bool, len: usize) {
    let b0 = if fin { 0x80 } else { 0 } | (op & 0x0F);
    match len {
        0..=125 => out.extend_from_slice(&[b0, len as u8]),
        126..=0xFFFF => {
            out.extend_from_slice(&[b0, 126]);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.extend_from_slice(&[b0, 127]);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
}

/// A whole unmasked data frame (FIN set) in a Vec of exact size.
pub fn data_frame(kind: DataKind, payload: &[u8]) -> Vec<u8> {
    let op = match kind {
        DataKind::Text => opcode::TEXT,
        DataKind::Binary => opcode::BINARY,
    };
    let mut out = Vec::with_capacity(header_len(payload.len()) + payload.len());
    write_header(&mut out, op, true, payload.len());
    out.extend_from_slice(payload);
    out
}

/// Text when the payload is UTF-8 (a text frame MUST be, RFC 6455 5.6), binary otherwise.
pub fn kind_for(payload: &[u8]) -> DataKind {
    if std::str::from_utf8(payload).is_ok() {
        DataKind::Text
    } else {
        DataKind::Binary
    }
}

/// A published payload as one frame, text or binary by [`kind_for`].
pub fn message_frame(payload: &[u8]) -> Vec<u8> {
    data_frame(kind_for(payload), payload)
}

/// `{"channel":…,"id":…,"data":…}`, the envelope every WebSocket subscriber gets unless it asks
/// for `?format=plain`: it carries the id a client resumes from. JSON strings must be Unicode, so
/// a payload that is not UTF-8 travels as `"data_base64"` (standard alphabet, padded) instead of
/// `"data"`: lossless, and the client can tell which one it got (docs/PROTOCOL.md).
pub fn envelope_json(channel: &str, id: u64, data: &[u8]) -> Vec<u8> {
    use base64::Engine;
    let mut out = Vec::with_capacity(channel.len() + data.len() * 4 / 3 + 56);
    out.extend_from_slice(b"{\"channel\":");
    push_json_str(&mut out, channel);
    out.extend_from_slice(b",\"id\":");
    out.extend_from_slice(id.to_string().as_bytes());
    match std::str::from_utf8(data) {
        Ok(text) => {
            out.extend_from_slice(b",\"data\":");
            push_json_str(&mut out, text);
        }
        Err(_) => {
            out.extend_from_slice(b",\"data_base64\":\"");
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(data)
                    .as_bytes(),
            );
            out.push(b'"');
        }
    }
    out.push(b'}');
    out
}

/// [`envelope_json`] as a text frame.
pub fn envelope_frame(channel: &str, id: u64, data: &[u8]) -> Vec<u8> {
    data_frame(DataKind::Text, &envelope_json(channel, id, data))
}

/// serde_json does the escaping (control characters, quotes, backslashes).
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    // Serializing a &str into a Vec cannot fail; fall back to an empty string regardless.
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(b"\"\"");
    }
}

/// A control frame built on the stack: at most 2 + 4 + 125 bytes, no heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlFrame {
    bytes: [u8; 2 + 4 + MAX_CONTROL_PAYLOAD],
    len: u8,
}

impl ControlFrame {
    /// Builds an unmasked control frame; a payload over 125 bytes is cut to 125.
    fn new(op: u8, parts: &[&[u8]]) -> ControlFrame {
        let mut f = ControlFrame {
            bytes: [0; 2 + 4 + MAX_CONTROL_PAYLOAD],
            len: 2,
        };
        let mut n = 0;
        for part in parts {
            let take = part.len().min(MAX_CONTROL_PAYLOAD - n);
            f.bytes[2 + n..2 + n + take].copy_from_slice(&part[..take]);
            n += take;
        }
        f.bytes[0] = 0x80 | op;
        f.bytes[1] = n as u8;
        f.len = 2 + n as u8;
        f
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl AsRef<[u8]> for ControlFrame {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// A Ping; a payload over 125 bytes is cut to 125.
pub fn ping(payload: &[u8]) -> ControlFrame {
    ControlFrame::new(opcode::PING, &[payload])
}

/// A Pong; answer a Ping with its payload (RFC 6455 5.5.3).
pub fn pong(payload: &[u8]) -> ControlFrame {
    ControlFrame::new(opcode::PONG, &[payload])
}

/// A Close frame. `None` sends an empty body (no code, no reason). The reason is cut at a
/// character boundary to fit 123 bytes, so the frame stays a valid control frame.
pub fn close(code: Option<CloseCode>, reason: &str) -> ControlFrame {
    let Some(code) = code else {
        return ControlFrame::new(opcode::CLOSE, &[]);
    };
    let mut cut = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    ControlFrame::new(
        opcode::CLOSE,
        &[&code.to_be_bytes(), &reason.as_bytes()[..cut]],
    )
}

/// Our answer to a peer's Close: echo its code (RFC 6455 5.5.1), or an empty Close to an
/// empty one.
pub fn close_reply(code: Option<CloseCode>) -> ControlFrame {
    close(code, "")
}

/// Client side (the load generator): appends a masked frame (RFC 6455 5.3). `mask` should
/// come from a fresh unpredictable source per frame; any key decodes correctly.
pub fn write_masked(out: &mut Vec<u8>, op: u8, fin: bool, payload: &[u8], mask: [u8; 4]) {
    let start = out.len();
    write_header(out, op, fin, payload.len());
    if let Some(b1) = out.get_mut(start + 1) {
        *b1 |= 0x80;
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, k)| b ^ k));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6455_5_2_length_forms_are_minimal() {
        for (len, hdr) in [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10)] {
            let f = data_frame(DataKind::Binary, &vec![7; len]);
            assert_eq!(f.len(), hdr + len);
            assert_eq!(f[0], 0x82);
            match hdr {
                2 => assert_eq!(usize::from(f[1]), len),
                4 => assert_eq!(
                    (f[1], usize::from(u16::from_be_bytes([f[2], f[3]]))),
                    (126, len)
                ),
                _ => {
                    assert_eq!(f[1], 127);
                    assert_eq!(u64::from_be_bytes(f[2..10].try_into().unwrap()), len as u64);
                }
            }
        }
    }

    #[test]
    fn rfc6455_5_6_text_only_for_utf8() {
        assert_eq!(message_frame(b"hi"), b"\x81\x02hi");
        assert_eq!(message_frame(&[0xFF, 0x00]), b"\x82\x02\xFF\x00");
        assert_eq!(message_frame("é".as_bytes())[0], 0x81);
    }

    #[test]
    fn envelope_escapes_and_carries_binary_as_base64() {
        let j = envelope_json("news", 17, b"a\"b\\c\n\x01");
        let v: serde_json::Value = serde_json::from_slice(&j).unwrap();
        assert_eq!(v["channel"], "news");
        assert_eq!(v["id"], 17);
        assert_eq!(v["data"], "a\"b\\c\n\u{1}");
        // Not UTF-8: lossless base64 under its own key, never a lossy "data".
        let j = envelope_json("c", u64::MAX, &[0x66, 0xFF]);
        let v: serde_json::Value = serde_json::from_slice(&j).unwrap();
        assert_eq!(v["data_base64"], "Zv8=");
        assert!(v.get("data").is_none());
        assert_eq!(v["id"], u64::MAX);
        let f = envelope_frame("c", 1, b"x");
        assert_eq!(f[0], 0x81);
        assert_eq!(&f[2..], br#"{"channel":"c","id":1,"data":"x"}"#);
    }

    #[test]
    fn rfc6455_5_5_control_frames() {
        assert_eq!(ping(b"abc").as_bytes(), b"\x89\x03abc");
        assert_eq!(pong(b"").as_bytes(), b"\x8A\x00");
        let long = pong(&[1; 300]);
        assert_eq!(long.as_bytes().len(), 127);
        assert_eq!(long.as_bytes()[1], 125);
    }

    #[test]
    fn rfc6455_5_5_1_close_frames() {
        assert_eq!(close(None, "ignored").as_bytes(), b"\x88\x00");
        assert_eq!(close(Some(1000), "bye").as_bytes(), b"\x88\x05\x03\xE8bye");
        assert_eq!(close_reply(Some(1001)).as_bytes(), b"\x88\x02\x03\xE9");
        // 62 two-byte chars = 124 bytes: cut to 61 chars (122 bytes), never mid-char.
        let reason = "é".repeat(62);
        let f = close(Some(1000), &reason);
        assert_eq!(f.as_bytes()[1], 2 + 122);
        assert!(std::str::from_utf8(&f.as_bytes()[4..]).is_ok());
    }

    #[test]
    fn rfc6455_5_3_client_masking() {
        let mut out = Vec::new();
        write_masked(
            &mut out,
            opcode::TEXT,
            true,
            b"Hello",
            [0x37, 0xFA, 0x21, 0x3D],
        );
        // The RFC 6455 5.7 example: a masked "Hello".
        assert_eq!(
            out,
            [0x81, 0x85, 0x37, 0xFA, 0x21, 0x3D, 0x7F, 0x9F, 0x4D, 0x51, 0x58]
        );
    }
}
