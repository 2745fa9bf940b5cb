//! The connection state machine, receive side: preface, SETTINGS, streams, flow control on what
//! the peer sends, and the hardening limits. The send side (responses, DATA queued for the peer's
//! window, the output buffer) is in `conn_send`.
//!
//! Streams are idle (id above the last one opened), open, half-closed (one side sent
//! END_STREAM) or closed (gone from the table). Closed streams leave nothing behind: a frame for
//! one is answered from its id alone (at or below the last opened id means closed).

use super::frame::{self, setting, Frame, HEADER_LEN, MAX_WINDOW, PREFACE};
use super::hpack;
use super::request::Request;
use super::{Config, Counters, ErrorCode, H2Error, Limits, Scope};

/// What the peer did, for the event loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A valid request head opened `stream`; `end_stream`: no body follows.
    Request {
        stream: u32,
        request: Request,
        end_stream: bool,
    },
    /// Request body bytes (empty with `end_stream` when trailers ended the body).
    Data {
        stream: u32,
        data: Vec<u8>,
        end_stream: bool,
    },
    /// The peer reset the stream.
    Reset { stream: u32, code: ErrorCode },
    /// This side reset the stream (already queued): stop serving it.
    StreamError(H2Error),
    /// The peer will open no stream above `last_stream`.
    GoAway { last_stream: u32, code: ErrorCode },
    /// This side sent GOAWAY for this error; write out the output, then close.
    ConnectionError(H2Error),
}

/// One open or half-closed stream.
#[derive(Debug)]
pub struct Stream {
    pub(crate) id: u32,
    pub(crate) send_window: i32,
    pub(crate) recv_window: i32,
    pub(crate) flags: u8,
    /// Request body bytes still announced by content-length (`NO_LENGTH`: none announced).
    pub(crate) content_left: u32,
    /// DATA waiting for the peer's window.
    pub(crate) pending: Pending,
}

const _: () = assert!(std::mem::size_of::<Stream>() <= 32);

/// A stream's DATA held back by flow control: one pointer while empty (the common case for an
/// idle subscriber), a boxed buffer only while the peer's window is shut.
#[derive(Debug, Default)]
// The box is the point: an inline `Vec` costs every stream 24 bytes, a boxed one 8 while empty.
#[allow(clippy::box_collection)]
pub(crate) struct Pending(Option<Box<Vec<u8>>>);

impl Pending {
    pub(crate) fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |v| v.len())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_ref().map_or(&[], |v| &v[..])
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.0
            .get_or_insert_with(Box::default)
            .extend_from_slice(data);
    }

    /// Drops the first `n` bytes; an emptied buffer is freed.
    pub(crate) fn consume(&mut self, n: usize) {
        if let Some(v) = &mut self.0 {
            v.drain(..n);
            if v.is_empty() {
                self.0 = None;
            }
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |v| std::mem::size_of::<Vec<u8>>() + v.capacity())
    }
}

/// `Stream::content_left` when the request has no content-length (or one past 4 GiB, which
/// no request body limit of the server comes near).
pub(crate) const NO_LENGTH: u32 = u32::MAX;

pub(crate) const REMOTE_CLOSED: u8 = 1;
pub(crate) const LOCAL_CLOSED: u8 = 2;
pub(crate) const HEADERS_SENT: u8 = 4;
pub(crate) const PENDING_END: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Preface,
    FirstSettings,
    Open,
    Closed,
}

/// A header block still waiting for CONTINUATION frames; boxed so an idle connection pays a
/// pointer for it.
#[derive(Debug)]
pub(crate) struct OpenBlock {
    pub(crate) stream: u32,
    pub(crate) end_stream: bool,
    pub(crate) frames: u16,
    pub(crate) bytes: Vec<u8>,
}

/// One HTTP/2 connection, server side. See the module doc for how an event loop drives it.
#[derive(Debug)]
pub struct Connection {
    pub(crate) config: Config,
    pub(crate) limits: Limits,
    pub(crate) hpack: hpack::Decoder,
    pub(crate) streams: Vec<Stream>,
    pub(crate) out: Vec<u8>,
    pub(crate) block: Option<Box<OpenBlock>>,
    pub(crate) counters: Counters,
    pub(crate) phase: Phase,
    pub(crate) settings_acked: bool,
    pub(crate) goaway_sent: bool,
    pub(crate) peer_max_frame: u32,
    pub(crate) peer_initial_window: i32,
    pub(crate) send_window: i32,
    pub(crate) recv_window: i32,
    pub(crate) last_stream: u32,
    /// The last stream this side reset (0: none). Frames the peer sent on it before it saw the
    /// RST_STREAM are ignored, as RFC 9113 §5.1 asks, instead of each drawing a STREAM_CLOSED
    /// reset (a body's in-flight DATA after a 413 would count toward a control flood). One
    /// id covers the common case of one early answer at a time; for any other closed stream
    /// the frames are answered as closed, which is also allowed.
    pub(crate) reset_sent: u32,
    pub(crate) queued: u32,
    pub(crate) resets: u16,
    pub(crate) pending_control: u16,
}

pub(crate) const DEFAULT_WINDOW: i32 = 65_535;

impl Connection {
    /// A connection whose server preface (SETTINGS) is already in [`Connection::output`].
    pub fn new(config: Config, limits: Limits) -> Self {
        let mut c = Connection {
            config,
            limits,
            hpack: hpack::Decoder::default(),
            streams: Vec::new(),
            out: Vec::new(),
            block: None,
            counters: Counters::default(),
            phase: Phase::Preface,
            settings_acked: false,
            goaway_sent: false,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: DEFAULT_WINDOW,
            send_window: DEFAULT_WINDOW,
            recv_window: DEFAULT_WINDOW,
            last_stream: 0,
            reset_sent: 0,
            queued: 0,
            resets: 0,
            pending_control: 0,
        };
        let mut s = vec![
            (
                setting::MAX_CONCURRENT_STREAMS,
                config.max_concurrent_streams,
            ),
            (
                setting::INITIAL_WINDOW_SIZE,
                config.initial_window_size.min(MAX_WINDOW),
            ),
            (setting::MAX_HEADER_LIST_SIZE, config.max_header_list_size),
            (setting::HEADER_TABLE_SIZE, config.header_table_size),
        ];
        if config.max_frame_size != frame::DEFAULT_MAX_FRAME_SIZE {
            s.push((setting::MAX_FRAME_SIZE, config.max_frame_size));
        }
        if config.enable_connect_protocol {
            s.push((setting::ENABLE_CONNECT_PROTOCOL, 1));
        }
        frame::write_settings(&mut c.out, &s);
        c
    }

    /// Feeds bytes read from the peer; returns how many were used. The rest (an incomplete
    /// frame) must be offered again with more bytes after it. Events are appended to `events`.
    pub fn receive(&mut self, input: &[u8], events: &mut Vec<Event>) -> usize {
        let mut pos = 0;
        if self.phase == Phase::Preface {
            let n = input.len().min(PREFACE.len());
            if input[..n] != PREFACE[..n] {
                self.fail(
                    H2Error::connection(ErrorCode::PROTOCOL_ERROR, "bad client preface"),
                    events,
                );
                return input.len();
            }
            if n < PREFACE.len() {
                return 0;
            }
            pos = n;
            self.phase = Phase::FirstSettings;
        }
        while self.phase != Phase::Closed {
            let rest = &input[pos..];
            let Some(head) = frame::head(rest) else { break };
            if let Some(b) = &self.block {
                if head.kind != frame::Kind::Continuation as u8 || head.stream != b.stream {
                    let e =
                        H2Error::connection(ErrorCode::PROTOCOL_ERROR, "header block interrupted");
                    self.fail(e, events);
                    break;
                }
            }
            let result = match frame::decode(rest, self.config.max_frame_size) {
                Ok(None) => break,
                Ok(Some((f, used))) => {
                    pos += used;
                    self.on_frame(f, events)
                }
                Err(e) => {
                    pos += HEADER_LEN + head.len as usize;
                    Err(e)
                }
            };
            if let Err(e) = result {
                self.error(e, events);
            }
        }
        if self.phase == Phase::Closed {
            return input.len();
        }
        pos
    }

    /// Starts a new rate window (call it from a timer, e.g. every second): peer resets are
    /// counted per window.
    pub fn tick(&mut self) {
        self.resets = 0;
    }

    /// The counters since the last call, reset to zero.
    pub fn take_counters(&mut self) -> Counters {
        std::mem::take(&mut self.counters)
    }

    /// The stream table (open and half-closed streams).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Heap bytes this connection holds now (buffers' capacities, the stream table, queued DATA,
    /// an unfinished header block, the HPACK table's accounted size): what the server adds to
    /// `size_of::<Connection>()` for its memory figures.
    pub fn heap_bytes(&self) -> usize {
        self.out.capacity()
            + self.streams.capacity() * std::mem::size_of::<Stream>()
            + self
                .streams
                .iter()
                .map(|s| s.pending.heap_bytes())
                .sum::<usize>()
            + self
                .block
                .as_ref()
                .map_or(0, |b| std::mem::size_of::<OpenBlock>() + b.bytes.capacity())
            + self.hpack.table_size()
    }

    pub(crate) fn find(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// Sends what `e` calls for: RST_STREAM, or GOAWAY and the end of the connection.
    pub(crate) fn error(&mut self, e: H2Error, events: &mut Vec<Event>) {
        match e.scope {
            Scope::Connection => self.fail(e, events),
            Scope::Stream(id) => {
                self.counters.stream_errors += 1;
                frame::write_rst_stream(&mut self.out, id, e.code);
                if let Some(i) = self.find(id) {
                    let s = self.streams.swap_remove(i);
                    self.queued -= s.pending.len() as u32;
                }
                events.push(Event::StreamError(e));
                if let Err(e) = self.control_queued() {
                    self.fail(e, events);
                }
            }
        }
    }

    pub(crate) fn fail(&mut self, e: H2Error, events: &mut Vec<Event>) {
        if self.phase == Phase::Closed {
            return;
        }
        self.counters.connection_errors += 1;
        frame::write_goaway(&mut self.out, self.last_stream, e.code, e.reason.as_bytes());
        self.phase = Phase::Closed;
        self.streams = Vec::new();
        self.block = None;
        self.queued = 0;
        events.push(Event::ConnectionError(e));
    }

    /// One more control frame queued; too many undrained is a flood.
    pub(crate) fn control_queued(&mut self) -> Result<(), H2Error> {
        self.pending_control = self.pending_control.saturating_add(1);
        if self.pending_control > self.limits.max_pending_control {
            self.counters.control_flood += 1;
            return Err(H2Error::connection(
                ErrorCode::ENHANCE_YOUR_CALM,
                "control frame flood",
            ));
        }
        Ok(())
    }

    fn on_frame(&mut self, f: Frame<'_>, events: &mut Vec<Event>) -> Result<(), H2Error> {
        if self.phase == Phase::FirstSettings {
            if !matches!(f, Frame::Settings { ack: false, .. }) {
                return Err(H2Error::connection(
                    ErrorCode::PROTOCOL_ERROR,
                    "preface not followed by SETTINGS",
                ));
            }
            self.phase = Phase::Open;
        }
        let idle = |id: u32, last: u32| id > last;
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, data, flow_len, events),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if end_headers {
                    return self.on_block(stream, end_stream, block, events);
                }
                self.block = Some(Box::new(OpenBlock {
                    stream,
                    end_stream,
                    frames: 0,
                    bytes: Vec::new(),
                }));
                self.on_continuation(stream, false, block, events)
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => self.on_continuation(stream, end_headers, block, events),
            Frame::Priority { .. } | Frame::Unknown { .. } => Ok(()),
            Frame::RstStream { stream, code } => {
                if idle(stream, self.last_stream) {
                    return Err(H2Error::connection(
                        ErrorCode::PROTOCOL_ERROR,
                        "RST_STREAM on an idle stream",
                    ));
                }
                self.resets = self.resets.saturating_add(1);
                if self.resets > self.limits.max_resets_per_tick {
                    self.counters.rapid_reset += 1;
                    return Err(H2Error::connection(
                        ErrorCode::ENHANCE_YOUR_CALM,
                        "too many stream resets",
                    ));
                }
                if let Some(i) = self.find(stream) {
                    let s = self.streams.swap_remove(i);
                    self.queued -= s.pending.len() as u32;
                    events.push(Event::Reset { stream, code });
                }
                Ok(())
            }
            Frame::Settings { ack: true, .. } => {
                if !self.settings_acked {
                    self.settings_acked = true;
                    self.hpack.set_limit(self.config.header_table_size as usize);
                }
                Ok(())
            }
            Frame::Settings {
                ack: false,
                settings,
            } => {
                for (id, value) in frame::settings(settings) {
                    match id {
                        setting::MAX_FRAME_SIZE => self.peer_max_frame = value,
                        setting::INITIAL_WINDOW_SIZE => {
                            self.set_peer_initial_window(value as i32)?
                        }
                        _ => {}
                    }
                }
                frame::write_settings_ack(&mut self.out);
                self.control_queued()?;
                self.flush_all();
                Ok(())
            }
            Frame::PushPromise { .. } => Err(H2Error::connection(
                ErrorCode::PROTOCOL_ERROR,
                "PUSH_PROMISE from a client",
            )),
            Frame::Ping { ack, data } => {
                if !ack {
                    frame::write_ping(&mut self.out, true, data);
                    self.control_queued()?;
                }
                Ok(())
            }
            Frame::GoAway {
                last_stream, code, ..
            } => {
                events.push(Event::GoAway { last_stream, code });
                Ok(())
            }
            Frame::WindowUpdate {
                stream: 0,
                increment,
            } => {
                let w = i64::from(self.send_window) + i64::from(increment);
                if w > i64::from(MAX_WINDOW) {
                    return Err(H2Error::connection(
                        ErrorCode::FLOW_CONTROL_ERROR,
                        "connection window above 2^31-1",
                    ));
                }
                self.send_window = w as i32;
                self.flush_all();
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => {
                if idle(stream, self.last_stream) {
                    return Err(H2Error::connection(
                        ErrorCode::PROTOCOL_ERROR,
                        "WINDOW_UPDATE on an idle stream",
                    ));
                }
                let Some(i) = self.find(stream) else {
                    return Ok(());
                };
                let w = i64::from(self.streams[i].send_window) + i64::from(increment);
                if w > i64::from(MAX_WINDOW) {
                    return Err(H2Error::stream(
                        stream,
                        ErrorCode::FLOW_CONTROL_ERROR,
                        "stream window above 2^31-1",
                    ));
                }
                self.streams[i].send_window = w as i32;
                self.flush_stream(i);
                Ok(())
            }
        }
    }

    fn set_peer_initial_window(&mut self, value: i32) -> Result<(), H2Error> {
        let delta = i64::from(value) - i64::from(self.peer_initial_window);
        for s in &mut self.streams {
            let w = i64::from(s.send_window) + delta;
            if w > i64::from(MAX_WINDOW) || w < i64::from(i32::MIN) {
                return Err(H2Error::connection(
                    ErrorCode::FLOW_CONTROL_ERROR,
                    "stream window above 2^31-1",
                ));
            }
            s.send_window = w as i32;
        }
        self.peer_initial_window = value;
        Ok(())
    }

    fn on_data(
        &mut self,
        stream: u32,
        end_stream: bool,
        data: &[u8],
        flow_len: u32,
        events: &mut Vec<Event>,
    ) -> Result<(), H2Error> {
        if stream & 1 == 0 || stream > self.last_stream {
            return Err(H2Error::connection(
                ErrorCode::PROTOCOL_ERROR,
                "DATA on an idle stream",
            ));
        }
        let flow = flow_len as i32;
        if flow > self.recv_window {
            return Err(H2Error::connection(
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the connection window",
            ));
        }
        self.recv_window -= flow;
        if self.recv_window < DEFAULT_WINDOW / 2 {
            frame::write_window_update(
                &mut self.out,
                0,
                (DEFAULT_WINDOW - self.recv_window) as u32,
            );
            self.recv_window = DEFAULT_WINDOW;
        }
        let i = match self.find(stream) {
            Some(i) if self.streams[i].flags & REMOTE_CLOSED == 0 => i,
            None if stream == self.reset_sent => return Ok(()),
            _ => {
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::STREAM_CLOSED,
                    "DATA on a closed stream",
                ))
            }
        };
        let init = self.stream_recv_initial();
        let s = &mut self.streams[i];
        if flow > s.recv_window {
            return Err(H2Error::stream(
                stream,
                ErrorCode::FLOW_CONTROL_ERROR,
                "DATA beyond the stream window",
            ));
        }
        s.recv_window -= flow;
        if s.content_left != NO_LENGTH {
            let len = data.len() as u32;
            if len > s.content_left || (end_stream && len != s.content_left) {
                self.counters.malformed_requests += 1;
                return Err(H2Error::stream(
                    stream,
                    ErrorCode::PROTOCOL_ERROR,
                    "DATA disagrees with content-length",
                ));
            }
            s.content_left -= len;
        }
        if !end_stream && s.recv_window < init / 2 {
            frame::write_window_update(&mut self.out, stream, (init - s.recv_window) as u32);
            s.recv_window = init;
        }
        events.push(Event::Data {
            stream,
            data: data.to_vec(),
            end_stream,
        });
        if end_stream {
            self.close_remote(i);
        }
        Ok(())
    }

    pub(crate) fn stream_recv_initial(&self) -> i32 {
        let ours = self.config.initial_window_size.min(MAX_WINDOW) as i32;
        if self.settings_acked {
            ours
        } else {
            ours.max(DEFAULT_WINDOW)
        }
    }

    /// The peer sent END_STREAM; a stream closed on both sides leaves the table.
    pub(crate) fn close_remote(&mut self, i: usize) {
        self.streams[i].flags |= REMOTE_CLOSED;
        if self.streams[i].flags & LOCAL_CLOSED != 0 {
            self.streams.swap_remove(i);
        }
    }
}
