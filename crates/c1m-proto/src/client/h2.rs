//! HTTP/2 client half for SSE subscribers (`c1m bench --http2`): one connection carrying many
//! `GET` streams. Built on the same frame codec and HPACK decoder as the server half
//! ([`crate::h2`]); no I/O here.
//!
//! Flow control is opened wide once: the client advertises the largest stream window and tops
//! the connection window up to the same, then gives bytes back in large steps
//! ([`Session::receive`] for the connection, [`stream_consumed`] for a stream), so a reader
//! that keeps up never stalls the server and a subscriber sends nothing per message.
//!
//! State per connection is the HPACK decoder (its table is emptied once the server
//! acknowledges our SETTINGS_HEADER_TABLE_SIZE of 0), a counter, and a header block only while
//! one is split across CONTINUATION frames.

use super::{perr, ProtoError};
use crate::h2::frame::{self, setting, Frame, MAX_WINDOW, PREFACE};
use crate::h2::{hpack, ErrorCode};

/// Bytes received before the matching window is topped up (half the window).
const GIVE_BACK: u32 = 1 << 30;

/// What the server sent, per frame that matters to a subscriber.
#[derive(Debug, PartialEq, Eq)]
pub enum H2Event<'a> {
    /// A response head; `end_stream`: the response has no body.
    Response {
        stream: u32,
        status: u16,
        end_stream: bool,
    },
    /// Body bytes of a stream; `flow_len` is what flow control counts (padding included).
    Data {
        stream: u32,
        data: &'a [u8],
        flow_len: u32,
        end_stream: bool,
    },
    /// The server reset a stream.
    Reset { stream: u32, code: ErrorCode },
    /// The server opens no stream above `last_stream` (NO_ERROR: it is going away gracefully).
    GoAway { last_stream: u32, code: ErrorCode },
}

/// One client connection's HTTP/2 state.
#[derive(Debug)]
pub struct Session {
    hpack: hpack::Decoder,
    /// DATA bytes received since the connection window was last topped up.
    unacked: u32,
    /// A response header block waiting for its CONTINUATION frames: (stream, end_stream, bytes).
    #[allow(clippy::type_complexity)]
    block: Option<Box<(u32, bool, Vec<u8>)>>,
}

/// Starts a connection: the preface, SETTINGS (no push, no HPACK table, the largest stream
/// window) and the connection window raised to the largest, appended to `out`.
pub fn start(out: &mut Vec<u8>) -> Session {
    out.extend_from_slice(PREFACE);
    frame::write_settings(
        out,
        &[
            (setting::ENABLE_PUSH, 0),
            (setting::HEADER_TABLE_SIZE, 0),
            (setting::INITIAL_WINDOW_SIZE, MAX_WINDOW),
        ],
    );
    frame::write_window_update(out, 0, MAX_WINDOW - 65_535);
    Session {
        hpack: hpack::Decoder::default(),
        unacked: 0,
        block: None,
    }
}

/// One subscribe request: `GET path` on `stream` (odd, increasing) with END_STREAM.
/// `headers` are extra fields (names lowercased here; connection-specific ones and `host`,
/// which `:authority` replaces, are left out).
pub fn request(
    out: &mut Vec<u8>,
    stream: u32,
    scheme: &str,
    authority: &str,
    path: &str,
    last_id: Option<u64>,
    headers: &[(String, String)],
) {
    let mut block = Vec::with_capacity(128);
    for (n, v) in [
        (":method", "GET"),
        (":scheme", scheme),
        (":authority", authority),
        (":path", path),
        ("accept", "text/event-stream"),
        ("cache-control", "no-cache"),
    ] {
        hpack::encode_field(&mut block, n.as_bytes(), v.as_bytes());
    }
    if let Some(id) = last_id {
        hpack::encode_field(&mut block, b"last-event-id", id.to_string().as_bytes());
    }
    for (n, v) in headers {
        let n = n.to_ascii_lowercase();
        if matches!(
            n.as_str(),
            "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "transfer-encoding"
                | "upgrade"
        ) {
            continue;
        }
        hpack::encode_field(&mut block, n.as_bytes(), v.as_bytes());
    }
    frame::write_headers(out, stream, &block, true, frame::DEFAULT_MAX_FRAME_SIZE);
}

/// Header lines `Name: value\r\n` (bench's subscribe header template) as pairs.
pub fn header_pairs(lines: &str) -> Vec<(String, String)> {
    lines
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// A stream received `n` more DATA bytes (flow-controlled length); `received` is its count
/// since its window was last topped up. Appends the WINDOW_UPDATE when it is due.
pub fn stream_consumed(out: &mut Vec<u8>, stream: u32, received: &mut u32, n: u32) {
    *received = received.saturating_add(n);
    if *received >= GIVE_BACK {
        frame::write_window_update(out, stream, *received);
        *received = 0;
    }
}

impl Session {
    /// Parses the frames in `input`, answering SETTINGS and PING and topping up the connection
    /// window into `out`, and reports what subscribers care about through `on`. Returns the
    /// bytes used (the rest is an unfinished frame). A protocol violation by the server, or a
    /// response head that cannot be decoded, is an error (the connection is done).
    pub fn receive(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        on: &mut dyn FnMut(H2Event<'_>),
    ) -> Result<usize, ProtoError> {
        let mut pos = 0;
        loop {
            let (f, used) = match frame::decode(&input[pos..], frame::DEFAULT_MAX_FRAME_SIZE) {
                Ok(Some(x)) => x,
                Ok(None) => return Ok(pos),
                Err(e) => return Err(perr(format!("h2 {}", e.reason))),
            };
            pos += used;
            if self.block.is_some() && !matches!(f, Frame::Continuation { .. }) {
                return Err(perr("h2 header block interrupted"));
            }
            match f {
                Frame::Settings { ack: false, .. } => frame::write_settings_ack(out),
                Frame::Settings { ack: true, .. } => self.hpack.set_limit(0),
                Frame::Ping { ack: false, data } => frame::write_ping(out, true, data),
                Frame::Headers {
                    stream,
                    end_stream,
                    end_headers,
                    block,
                    ..
                } => {
                    if end_headers {
                        self.head(stream, end_stream, block, on)?;
                    } else {
                        self.block = Some(Box::new((stream, end_stream, block.to_vec())));
                    }
                }
                Frame::Continuation {
                    stream,
                    end_headers,
                    block,
                } => {
                    let Some(b) = self.block.as_mut().filter(|b| b.0 == stream) else {
                        return Err(perr("h2 CONTINUATION without a header block"));
                    };
                    b.2.extend_from_slice(block);
                    if b.2.len() > 64 * 1024 {
                        return Err(perr("h2 response head too large"));
                    }
                    if end_headers {
                        let b = self.block.take().expect("checked above");
                        self.head(b.0, b.1, &b.2, on)?;
                    }
                }
                Frame::Data {
                    stream,
                    end_stream,
                    data,
                    flow_len,
                } => {
                    self.unacked = self.unacked.saturating_add(flow_len);
                    if self.unacked >= GIVE_BACK {
                        frame::write_window_update(out, 0, self.unacked);
                        self.unacked = 0;
                    }
                    on(H2Event::Data {
                        stream,
                        data,
                        flow_len,
                        end_stream,
                    });
                }
                Frame::RstStream { stream, code } => on(H2Event::Reset { stream, code }),
                Frame::GoAway {
                    last_stream, code, ..
                } => on(H2Event::GoAway { last_stream, code }),
                Frame::PushPromise { .. } => return Err(perr("h2 PUSH_PROMISE (push is off)")),
                Frame::Ping { .. }
                | Frame::Priority { .. }
                | Frame::WindowUpdate { .. }
                | Frame::Unknown { .. } => {}
            }
        }
    }

    fn head(
        &mut self,
        stream: u32,
        end_stream: bool,
        block: &[u8],
        on: &mut dyn FnMut(H2Event<'_>),
    ) -> Result<(), ProtoError> {
        let mut status = None;
        self.hpack
            .decode(block, 64 * 1024, |n, v| {
                if n == b":status" {
                    status = super::parse_u64(v);
                }
            })
            .map_err(|e| perr(format!("h2 response head undecodable ({e:?})")))?;
        let Some(status) = status.and_then(|s| u16::try_from(s).ok()) else {
            // Trailers (no :status) end a stream the caller already knows.
            if end_stream {
                on(H2Event::Data {
                    stream,
                    data: &[],
                    flow_len: 0,
                    end_stream,
                });
            }
            return Ok(());
        };
        on(H2Event::Response {
            stream,
            status,
            end_stream,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h2::{Config, Connection, Event, Limits};

    /// The client against the server half: SETTINGS both ways, two streams, DATA, a reset.
    #[test]
    fn subscribes_two_streams_over_the_server_codec() {
        let mut to_server = Vec::new();
        let mut client = start(&mut to_server);
        let extra = header_pairs("Authorization: Bearer t\r\nHost: x\r\n");
        request(&mut to_server, 1, "http", "h", "/sub/a", None, &extra);
        request(&mut to_server, 3, "http", "h", "/sub/b", Some(7), &[]);
        let mut server = Connection::new(Config::default(), Limits::default());
        let mut ev = Vec::new();
        assert_eq!(server.receive(&to_server, &mut ev), to_server.len());
        let reqs: Vec<_> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Request {
                    stream, request, ..
                } => Some((*stream, request.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(reqs.len(), 2, "{ev:?}");
        assert_eq!(reqs[0].1.path.as_deref(), Some("/sub/a"));
        assert_eq!(reqs[0].1.header("authorization"), Some(&b"Bearer t"[..]));
        assert_eq!(reqs[0].1.header("host"), None);
        assert_eq!(reqs[1].1.header("last-event-id"), Some(&b"7"[..]));
        for s in [1, 3] {
            server
                .send_headers(s, 200, &[("content-type", b"text/event-stream")], false)
                .unwrap();
        }
        server.send_data(1, b"data: one\n\n", false).unwrap();
        server.reset(3, ErrorCode::CANCEL);
        let from_server = server.output().to_vec();
        let mut out = Vec::new();
        let mut got = Vec::new();
        let used = client
            .receive(&from_server, &mut out, &mut |e| got.push(format!("{e:?}")))
            .unwrap();
        assert_eq!(used, from_server.len());
        assert_eq!(
            got,
            [
                "Response { stream: 1, status: 200, end_stream: false }",
                "Response { stream: 3, status: 200, end_stream: false }",
                "Data { stream: 1, data: [100, 97, 116, 97, 58, 32, 111, 110, 101, 10, 10], flow_len: 11, end_stream: false }",
                "Reset { stream: 3, code: CANCEL }",
            ]
        );
        // The client acknowledged the server's SETTINGS.
        let mut ev = Vec::new();
        server.receive(&out, &mut ev);
        assert!(ev.is_empty(), "{ev:?}");
    }

    #[test]
    fn a_split_frame_waits_and_a_push_promise_is_refused() {
        let mut out = Vec::new();
        let mut client = start(&mut out);
        let mut f = Vec::new();
        frame::write_ping(&mut f, false, [1; 8]);
        let mut out = Vec::new();
        assert_eq!(client.receive(&f[..10], &mut out, &mut |_| {}), Ok(0));
        assert_eq!(client.receive(&f, &mut out, &mut |_| {}), Ok(f.len()));
        let mut ack = Vec::new();
        frame::write_ping(&mut ack, true, [1; 8]);
        assert_eq!(out, ack);
        let mut p = Vec::new();
        frame::write_head(
            &mut p,
            4,
            frame::Kind::PushPromise,
            frame::flags::END_HEADERS,
            1,
        );
        p.extend_from_slice(&2u32.to_be_bytes());
        assert!(client.receive(&p, &mut out, &mut |_| {}).is_err());
    }

    #[test]
    fn windows_are_given_back_in_large_steps() {
        let mut out = Vec::new();
        let mut received = 0;
        stream_consumed(&mut out, 1, &mut received, GIVE_BACK - 1);
        assert!(out.is_empty());
        stream_consumed(&mut out, 1, &mut received, 1);
        let mut wu = Vec::new();
        frame::write_window_update(&mut wu, 1, GIVE_BACK);
        assert_eq!((out, received), (wu, 0));
    }
}
