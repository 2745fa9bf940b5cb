//! Server-Sent Events encoding (WHATWG HTML "server-sent events"): `id:` and `data:` lines, one
//! `data:` line per payload line, an optional `event:` line naming the channel.

/// The response head that opens an SSE stream. The body is close-delimited (not chunked).
pub const RESPONSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\nX-Accel-Buffering: no\r\n\r\n";

/// A heartbeat comment; keeps proxies from timing out an idle stream.
pub const HEARTBEAT: &[u8] = b":\n\n";

/// Sent to every stream when the server shuts down.
pub const SHUTDOWN: &[u8] = b"event: shutdown\ndata: \n\n";

/// Sent to a stream whose token expired, just before the server closes it: the client
/// subscribes again with a new token and its last id (`?last_id=` or `Last-Event-ID`).
pub const EXPIRED: &[u8] = b"event: expired\ndata: token expired\n\n";

/// Encodes one message. `event` is the channel name when the stream has several channels.
/// Payload lines split on `\n`, `\r\n` or `\r` (the line ends SSE itself recognises), so a
/// multi-line payload cannot end the event early or inject fields.
pub fn encode_message(event: Option<&str>, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 48);
    if let Some(ev) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(ev.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"id: ");
    out.extend_from_slice(id.to_string().as_bytes());
    out.push(b'\n');
    for line in split_lines(payload) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// Encodes a named event without an id (the dashboard's `event: snapshot`); data lines split
/// as in [`encode_message`].
pub fn encode_event(event: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + event.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.as_bytes());
    out.push(b'\n');
    for line in split_lines(data) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// Encodes a gap notice: messages with ids in `(after, through]` on `channel` are lost.
pub fn encode_gap(channel: &str, after: u64, through: u64) -> Vec<u8> {
    format!("event: gap\ndata: {{\"channel\":\"{channel}\",\"after\":{after},\"through\":{through}}}\n\n").into_bytes()
}

fn split_lines(payload: &[u8]) -> Vec<&[u8]> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < payload.len() {
        match payload[i] {
            b'\n' => {
                lines.push(&payload[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&payload[start..i]);
                if payload.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    lines.push(&payload[start..]);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_line() {
        assert_eq!(encode_message(None, 7, b"hi"), b"id: 7\ndata: hi\n\n");
    }

    #[test]
    fn multi_line_and_event() {
        assert_eq!(
            encode_message(Some("news"), 9, b"a\nb\r\nc\rd"),
            b"event: news\nid: 9\ndata: a\ndata: b\ndata: c\ndata: d\n\n".to_vec()
        );
        assert_eq!(encode_message(None, 1, b""), b"id: 1\ndata: \n\n");
        assert_eq!(
            encode_message(None, 1, b"x\n"),
            b"id: 1\ndata: x\ndata: \n\n"
        );
    }

    #[test]
    fn gap() {
        assert_eq!(
            encode_gap("n", 1, 5),
            b"event: gap\ndata: {\"channel\":\"n\",\"after\":1,\"through\":5}\n\n".to_vec()
        );
    }
}
