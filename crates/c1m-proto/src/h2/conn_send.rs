//! The connection state machine, send side: response HEADERS, DATA held back by the peer's
//! flow-control windows, RST_STREAM and GOAWAY, and the output buffer the event loop drains.
//!
//! Output and DATA waiting for a window are bounded together by `Limits::max_output`: a send
//! past it is refused with [`SendError::Full`] (counted), and the event loop treats the stream
//! or connection as a slow consumer, as it does a full socket on HTTP/1.1. [`Connection::queued`]
//! tells how much DATA a stream holds because the peer has not opened its window.

use super::conn::{Connection, Phase, HEADERS_SENT, LOCAL_CLOSED, PENDING_END, REMOTE_CLOSED};
use super::frame;
use super::hpack;
use super::ErrorCode;

/// Why a send was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No such open stream (never opened, reset, or finished).
    NoStream,
    /// HEADERS twice, DATA before HEADERS, or anything after END_STREAM.
    WrongState,
    /// The output bound is reached: the peer does not read or does not open its window.
    Full,
    /// The connection is closed or closing.
    Closed,
}

impl Connection {
    fn sendable(&self, stream: u32, extra: usize) -> Result<usize, SendError> {
        if self.phase == Phase::Closed {
            return Err(SendError::Closed);
        }
        let i = self.find(stream).ok_or(SendError::NoStream)?;
        if self.streams[i].flags & (LOCAL_CLOSED | PENDING_END) != 0 {
            return Err(SendError::WrongState);
        }
        if self.out.len() + self.queued as usize + extra > self.limits.max_output as usize {
            return Err(SendError::Full);
        }
        Ok(i)
    }

    /// Queues a response head: `:status` then `fields` (lowercase names), END_STREAM if
    /// `end_stream` (a response without body).
    pub fn send_headers(
        &mut self,
        stream: u32,
        status: u16,
        fields: &[(&str, &[u8])],
        end_stream: bool,
    ) -> Result<(), SendError> {
        let mut block = Vec::new();
        hpack::encode_response(&mut block, status, fields.iter().copied());
        let i = match self.sendable(stream, block.len() + frame::HEADER_LEN) {
            Err(SendError::Full) => {
                self.counters.output_full += 1;
                return Err(SendError::Full);
            }
            r => r?,
        };
        if self.streams[i].flags & HEADERS_SENT != 0 {
            return Err(SendError::WrongState);
        }
        frame::write_headers(
            &mut self.out,
            stream,
            &block,
            end_stream,
            self.peer_max_frame,
        );
        self.streams[i].flags |= HEADERS_SENT;
        if end_stream {
            self.close_local(i);
        }
        Ok(())
    }

    /// Queues body bytes; what the peer's windows do not allow yet waits in the stream.
    pub fn send_data(
        &mut self,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<(), SendError> {
        let i = match self.sendable(stream, data.len() + frame::HEADER_LEN) {
            Err(SendError::Full) => {
                self.counters.output_full += 1;
                return Err(SendError::Full);
            }
            r => r?,
        };
        if self.streams[i].flags & HEADERS_SENT == 0 {
            return Err(SendError::WrongState);
        }
        self.streams[i].pending.push(data);
        self.queued += data.len() as u32;
        if end_stream {
            self.streams[i].flags |= PENDING_END;
        }
        self.flush_stream(i);
        Ok(())
    }

    /// Resets a stream (e.g. its subscriber is gone or too slow) and forgets it.
    pub fn reset(&mut self, stream: u32, code: ErrorCode) {
        if self.phase == Phase::Closed {
            return;
        }
        if let Some(i) = self.find(stream) {
            let s = self.streams.swap_remove(i);
            self.queued -= s.pending.len() as u32;
            frame::write_rst_stream(&mut self.out, stream, code);
            self.reset_sent = stream;
        }
    }

    /// Sends GOAWAY: streams already open are served on, new ones are ignored. With an error
    /// code other than NO_ERROR the connection is closed at once.
    pub fn goaway(&mut self, code: ErrorCode, debug: &[u8]) {
        if self.phase == Phase::Closed || self.goaway_sent {
            return;
        }
        frame::write_goaway(&mut self.out, self.last_stream, code, debug);
        self.goaway_sent = true;
        if code != ErrorCode::NO_ERROR {
            self.phase = Phase::Closed;
            self.streams = Vec::new();
            self.queued = 0;
        }
    }

    /// Bytes to write to the socket.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// `n` bytes of [`Connection::output`] were written. A drained buffer is freed, and DATA
    /// waiting for room moves into the output.
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.out.len());
        self.out.drain(..n);
        if self.out.is_empty() {
            self.out = Vec::new();
            self.pending_control = 0;
        }
    }

    /// DATA bytes `stream` holds because the peer's windows are shut (`None`: no such stream).
    pub fn queued(&self, stream: u32) -> Option<usize> {
        self.find(stream).map(|i| self.streams[i].pending.len())
    }

    /// DATA bytes held for all streams.
    pub fn queued_total(&self) -> usize {
        self.queued as usize
    }

    /// True once a connection error or GOAWAY with an error closed it and the output is
    /// drained, or a graceful GOAWAY was sent and no stream is left: close the socket.
    pub fn is_done(&self) -> bool {
        self.out.is_empty()
            && (self.phase == Phase::Closed || (self.goaway_sent && self.streams.is_empty()))
    }

    /// The peer's connection-level send window (bytes of DATA it accepts now).
    pub fn send_window(&self) -> i32 {
        self.send_window
    }

    /// END_STREAM went out on stream `i`. When the request is still arriving (a body refused
    /// with 413 before its end), the response is complete without it, so the client is asked
    /// to stop sending it with RST_STREAM(NO_ERROR) (RFC 9113 §8.1) rather than its DATA being
    /// read, acknowledged with window updates, and dropped until it ends.
    fn close_local(&mut self, i: usize) {
        let s = &mut self.streams[i];
        s.flags |= LOCAL_CLOSED;
        if s.flags & REMOTE_CLOSED == 0 {
            frame::write_rst_stream(&mut self.out, s.id, ErrorCode::NO_ERROR);
            self.reset_sent = s.id;
        }
        self.streams.swap_remove(i);
        if self.streams.is_empty() {
            self.streams = Vec::new();
        }
    }

    pub(crate) fn flush_all(&mut self) {
        let mut i = self.streams.len();
        while i > 0 {
            i -= 1;
            if i < self.streams.len()
                && (!self.streams[i].pending.is_empty() || self.streams[i].flags & PENDING_END != 0)
            {
                self.flush_stream(i);
            }
        }
    }

    /// Moves as much of stream `i`'s DATA into the output as the windows allow. May remove the
    /// stream (when END_STREAM goes out on a stream the peer already closed).
    pub(crate) fn flush_stream(&mut self, i: usize) {
        let max_frame = self.peer_max_frame as usize;
        loop {
            let s = &mut self.streams[i];
            let window = self.send_window.min(s.send_window).max(0) as usize;
            let n = s.pending.len().min(window).min(max_frame);
            let end = s.flags & PENDING_END != 0 && n == s.pending.len();
            if n == 0 && !end {
                break;
            }
            frame::write_data(&mut self.out, s.id, &s.pending.bytes()[..n], end);
            s.pending.consume(n);
            s.send_window -= n as i32;
            self.send_window -= n as i32;
            self.queued -= n as u32;
            if end {
                s.flags &= !PENDING_END;
                self.close_local(i);
                break;
            }
            if s.pending.is_empty() {
                break;
            }
        }
    }
}
