//! The connection state machine, header blocks: HEADERS and CONTINUATION reassembled under the
//! byte and frame caps, decoded with HPACK, and turned into a new request, trailers, a refusal
//! (over the stream limit), a 431 (header list over the cap) or a reset (malformed).

use super::conn::{Connection, Pending, Stream, NO_LENGTH, REMOTE_CLOSED};
use super::frame;
use super::hpack::{self, HpackError};
use super::request::Builder;
use super::{ErrorCode, Event, H2Error};

impl Connection {
    pub(crate) fn on_continuation(
        &mut self,
        stream: u32,
        end_headers: bool,
        part: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<(), H2Error> {
        let Some(b) = self.block.as_mut().filter(|b| b.stream == stream) else {
            return Err(H2Error::connection(
                ErrorCode::PROTOCOL_ERROR,
                "CONTINUATION without a header block",
            ));
        };
        b.frames += 1;
        if b.bytes.len() + part.len() > self.limits.max_header_block as usize
            || b.frames > self.limits.max_continuations + 1
        {
            self.counters.continuation_flood += 1;
            return Err(H2Error::connection(
                ErrorCode::ENHANCE_YOUR_CALM,
                "header block over the cap",
            ));
        }
        b.bytes.extend_from_slice(part);
        if !end_headers {
            return Ok(());
        }
        let b = self.block.take().expect("checked above");
        self.on_block(b.stream, b.end_stream, &b.bytes, events)
    }

    /// A whole header block: a new request, trailers, or one to decode and drop (refused).
    pub(crate) fn on_block(
        &mut self,
        stream: u32,
        end_stream: bool,
        block: &[u8],
        events: &mut Vec<Event>,
    ) -> Result<(), H2Error> {
        if block.len() > self.limits.max_header_block as usize {
            self.counters.continuation_flood += 1;
            return Err(H2Error::connection(
                ErrorCode::ENHANCE_YOUR_CALM,
                "header block over the cap",
            ));
        }
        let existing = self.find(stream);
        let trailers = existing.is_some();
        let mut b = if trailers {
            Builder::trailers()
        } else {
            Builder::default()
        };
        let max_list = self.config.max_header_list_size as usize;
        let decoded = self.hpack.decode(block, max_list, |n, v| b.field(n, v));
        match decoded {
            Ok(()) | Err(HpackError::ListTooLarge) => {}
            Err(_) => {
                return Err(H2Error::connection(
                    ErrorCode::COMPRESSION_ERROR,
                    "undecodable header block",
                ))
            }
        }
        if let Some(i) = existing {
            if self.streams[i].flags & REMOTE_CLOSED != 0 {
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::STREAM_CLOSED,
                    "HEADERS after END_STREAM",
                ));
            }
            if !end_stream {
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::PROTOCOL_ERROR,
                    "trailers without END_STREAM",
                ));
            }
            let left = self.streams[i].content_left;
            if decoded.is_err() || b.finish(false).is_err() || (left != NO_LENGTH && left != 0) {
                self.counters.malformed_requests += 1;
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::PROTOCOL_ERROR,
                    "malformed trailers",
                ));
            }
            events.push(Event::Data {
                stream,
                data: Vec::new(),
                end_stream: true,
            });
            self.close_remote(i);
            return Ok(());
        }
        if stream & 1 == 0 {
            return Err(H2Error::connection(
                ErrorCode::PROTOCOL_ERROR,
                "even stream id from a client",
            ));
        }
        if stream <= self.last_stream {
            if stream == self.reset_sent {
                // Trailers sent before the peer saw this side's RST_STREAM (decoded above,
                // so the HPACK state stays in step).
                return Ok(());
            }
            // The last one opened is known closed; anything lower was never opened here.
            let (code, why) = if stream == self.last_stream {
                (ErrorCode::STREAM_CLOSED, "HEADERS on a closed stream")
            } else {
                (
                    ErrorCode::PROTOCOL_ERROR,
                    "stream id lower than one already opened",
                )
            };
            return Err(H2Error::connection(code, why));
        }
        self.last_stream = stream;
        if self.goaway_sent {
            return Ok(());
        }
        if self.streams.len() >= self.config.max_concurrent_streams as usize {
            self.counters.refused_streams += 1;
            return Err(H2Error::stream(
                stream,
                ErrorCode::REFUSED_STREAM,
                "over SETTINGS_MAX_CONCURRENT_STREAMS",
            ));
        }
        if decoded == Err(HpackError::ListTooLarge) {
            self.counters.header_list_too_large += 1;
            let mut block = Vec::new();
            hpack::encode_response(&mut block, 431, []);
            frame::write_headers(&mut self.out, stream, &block, true, self.peer_max_frame);
            if !end_stream {
                frame::write_rst_stream(&mut self.out, stream, ErrorCode::NO_ERROR);
                self.reset_sent = stream;
            }
            return self.control_queued();
        }
        match b.finish(self.config.enable_connect_protocol) {
            Ok(request) => {
                let content_left = match request.content_length {
                    Some(n) if end_stream && n > 0 => {
                        self.counters.malformed_requests += 1;
                        return Err(H2Error::stream(
                            stream,
                            ErrorCode::PROTOCOL_ERROR,
                            "content-length without a body",
                        ));
                    }
                    Some(n) => u32::try_from(n).unwrap_or(NO_LENGTH),
                    None => NO_LENGTH,
                };
                let recv_window = self.stream_recv_initial();
                // Grown one at a time: a doubling table held 4 slots (128 bytes) for the one
                // stream of a typical subscriber connection. At most max_concurrent_streams
                // reallocations of a small table over a connection's life.
                self.streams.reserve_exact(1);
                self.streams.push(Stream {
                    id: stream,
                    send_window: self.peer_initial_window,
                    recv_window,
                    flags: if end_stream { REMOTE_CLOSED } else { 0 },
                    content_left,
                    pending: Pending::default(),
                });
                events.push(Event::Request {
                    stream,
                    request,
                    end_stream,
                });
                Ok(())
            }
            Err(why) => {
                self.counters.malformed_requests += 1;
                Err(H2Error::stream(stream, ErrorCode::PROTOCOL_ERROR, why))
            }
        }
    }
}
