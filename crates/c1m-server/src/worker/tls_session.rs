//! TLS byte paths: handshake, decryption on read, encryption on write, for connections accepted
//! on a TLS listener. Owns the per-connection TLS state and the TLS counters.
//!
//! Memory is the point. rustls' unbuffered API (`UnbufferedServerConnection`) keeps no I/O
//! buffers of its own: this module owns them and frees each one as soon as it is empty.
//! - `incoming` (ciphertext) exists only while a record is half-received;
//! - `plain` (decrypted bytes not yet taken by the request parser) only until it is taken;
//! - `outgoing` (ciphertext) only while the socket refuses writes. Messages stay shared
//!   plaintext (`Rc`) in the connection's queue until the socket can take them: each one is
//!   encrypted into this connection's buffer just before it is written, at most
//!   [`ENCRYPT_AT_ONCE`] bytes ahead of the socket.
//!
//! An idle TLS subscriber thus holds the rustls connection state (keys, sequence numbers,
//! handshake leftovers) and this struct, nothing else.
//!
//! Where the state lives: `Conn` must stay 32 B and has no spare flag bit, so the sessions
//! are a side table in the worker's connection table (`ConnTable`), indexed by slab slot and
//! dropped by `ConnTable::remove` with the rest of the connection's state. The byte paths reach
//! a connection's session through the [`TlsIo`] handle the table lends with the connection. A
//! connection without a session is plaintext.

use crate::histogram::Histogram;
use crate::ipc::TlsStats;
use crate::tls::Configs;
use mio::net::TcpStream;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use std::io::{self, Read, Write};
use std::time::Instant;

/// Most plaintext encrypted ahead of the socket per write: bounds the ciphertext a blocked
/// connection holds on top of its shared plaintext queue.
pub const ENCRYPT_AT_ONCE: usize = 64 * 1024;
/// Socket reads go through a stack buffer this large (a TLS record is at most 16 KiB + 256 B).
const READ_CHUNK: usize = 17 * 1024;

/// One TLS connection's state: the rustls session and the buffers it needs right now.
pub struct Session {
    tls: UnbufferedServerConnection,
    incoming: Vec<u8>,
    plain: Vec<u8>,
    plain_taken: usize,
    outgoing: Vec<u8>,
    outgoing_sent: usize,
    /// When the handshake started; `None` once it is done (or failed).
    handshake_started: Option<Instant>,
    /// The peer sent close_notify or closed its side: reads return end-of-file.
    peer_closed: bool,
    /// The raw TCP listener's connection (a plaintext client gets `ERR`, not an HTTP answer).
    raw_tcp: bool,
}

/// The TLS counters (totals since the worker started).
#[derive(Default)]
struct Counters {
    stats: TlsStats,
    /// Completed handshakes' durations (`c1m_tls_handshake_seconds`).
    handshakes: Histogram,
}

/// Every TLS session of one worker, by slab slot, and the configurations new ones start from.
#[derive(Default)]
pub struct Sessions {
    configs: Option<Configs>,
    by_slot: Vec<Option<Box<Session>>>,
    counters: Counters,
}

/// One connection's TLS session, lent with the connection for its byte paths.
pub struct TlsIo<'a> {
    session: &'a mut Session,
    counters: &'a mut Counters,
}

impl Sessions {
    /// Sets (or, after a certificate reload, replaces) the configurations new connections use.
    pub fn set_configs(&mut self, configs: Option<Configs>) {
        self.configs = configs;
    }

    /// TLS is on for this worker's listeners.
    pub fn enabled(&self) -> bool {
        self.configs.is_some()
    }

    /// The counters for `/status` (totals since the worker started).
    pub fn stats(&self) -> TlsStats {
        self.counters.stats
    }

    /// The handshake-time histogram (totals since the worker started).
    pub fn handshake_histogram(&self) -> Histogram {
        self.counters.handshakes
    }

    /// Starts a TLS session for the connection about to take slab slot `slot`.
    pub fn begin(&mut self, slot: usize, raw_tcp: bool) -> io::Result<()> {
        let Some(configs) = &self.configs else {
            return Ok(());
        };
        let config = if raw_tcp { &configs.tcp } else { &configs.http };
        let tls = UnbufferedServerConnection::new(config.clone()).map_err(io::Error::other)?;
        if self.by_slot.len() <= slot {
            self.by_slot.resize_with(slot + 1, || None);
        }
        self.by_slot[slot] = Some(Box::new(Session {
            tls,
            incoming: Vec::new(),
            plain: Vec::new(),
            plain_taken: 0,
            outgoing: Vec::new(),
            outgoing_sent: 0,
            handshake_started: Some(Instant::now()),
            peer_closed: false,
            raw_tcp,
        }));
        Ok(())
    }

    /// Drops a connection's TLS state (called before its socket is closed). An established
    /// session says goodbye with close_notify when the socket takes it at once, so the client
    /// can tell the end from a truncation. A handshake that never finished (and was not
    /// counted as failed or timed out) is counted as abandoned.
    /// Whether the connection in `slot` speaks TLS.
    pub fn has_session(&self, slot: usize) -> bool {
        self.by_slot.get(slot).is_some_and(Option::is_some)
    }

    pub fn end(&mut self, slot: usize, stream: &mut TcpStream) {
        let Some(mut session) = self.by_slot.get_mut(slot).and_then(Option::take) else {
            return;
        };
        if session.handshake_started.is_some() {
            self.counters.stats.handshake_abandoned += 1;
        } else {
            session.close_notify(stream);
        }
    }

    /// The connection's handshake is still under way (a timeout then counts as a TLS handshake
    /// timeout, not as a slow request head). Marks it as counted so `end` does not count it
    /// again.
    pub fn count_handshake_timeout(&mut self, slot: usize) -> bool {
        self.io(slot).is_some_and(|t| {
            if t.session.handshake_started.take().is_some() {
                t.counters.stats.handshake_timeout += 1;
                true
            } else {
                false
            }
        })
    }

    /// Whether the connection in `slot` negotiated HTTP/2 by ALPN.
    pub fn negotiated_h2(&self, slot: usize) -> bool {
        self.by_slot
            .get(slot)
            .and_then(Option::as_deref)
            .and_then(|s| s.tls.alpn_protocol())
            == Some(crate::tls::ALPN_H2)
    }

    /// The session of the connection in `slot`, if it has one.
    pub fn io(&mut self, slot: usize) -> Option<TlsIo<'_>> {
        let session = self.by_slot.get_mut(slot)?.as_deref_mut()?;
        Some(TlsIo {
            session,
            counters: &mut self.counters,
        })
    }
}

impl TlsIo<'_> {
    /// Ciphertext is waiting for the socket: the connection must keep its write queue (and
    /// wait for writability) even if all of its plaintext was taken.
    pub fn owes_bytes(&self) -> bool {
        self.session.outgoing_sent < self.session.outgoing.len()
    }

    /// Reads plaintext: like `Read::read` on the socket (Ok(0) = end of stream, WouldBlock =
    /// nothing now), with TLS in between.
    pub fn read(&mut self, stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        self.session.read(stream, buf, self.counters)
    }

    /// Writes plaintext: encrypts up to [`ENCRYPT_AT_ONCE`] bytes and writes them out. Returns
    /// the plaintext bytes taken (Ok(0) when the socket is still blocked on earlier ciphertext
    /// or the handshake is not done).
    pub fn write(&mut self, stream: &mut TcpStream, data: &[u8]) -> io::Result<usize> {
        self.session.write(stream, data, self.counters)
    }

    /// Writes ciphertext still owed. Ok(true) when nothing is left.
    pub fn flush(&mut self, stream: &mut TcpStream) -> io::Result<bool> {
        self.session.flush_outgoing(stream)
    }
}

impl Session {
    fn read(
        &mut self,
        stream: &mut TcpStream,
        buf: &mut [u8],
        counters: &mut Counters,
    ) -> io::Result<usize> {
        loop {
            if self.plain_taken < self.plain.len() {
                let n = buf.len().min(self.plain.len() - self.plain_taken);
                buf[..n].copy_from_slice(&self.plain[self.plain_taken..self.plain_taken + n]);
                self.plain_taken += n;
                if self.plain_taken == self.plain.len() {
                    self.plain = Vec::new();
                    self.plain_taken = 0;
                }
                return Ok(n);
            }
            if self.peer_closed {
                return Ok(0);
            }
            let mut chunk = [0u8; READ_CHUNK];
            let n = match stream.read(&mut chunk) {
                Ok(0) => {
                    self.peer_closed = true;
                    return Ok(0);
                }
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            if self.handshake_started.is_some()
                && self.incoming.is_empty()
                && !looks_like_tls(chunk[0])
            {
                self.refuse_plaintext(stream, counters);
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "plaintext on a TLS port",
                ));
            }
            self.incoming.extend_from_slice(&chunk[..n]);
            self.process(stream, counters)?;
            if self.incoming.is_empty() {
                self.incoming = Vec::new();
            }
            // Decrypted bytes are served at the top of the loop; a handshake reads on until
            // the socket has nothing more (edge-triggered readiness).
        }
    }

    /// Runs rustls over the received ciphertext until it needs more: decrypts every whole
    /// record into `plain`, and sends what the handshake (or a post-handshake message) wants.
    fn process(&mut self, stream: &mut TcpStream, counters: &mut Counters) -> io::Result<()> {
        loop {
            let UnbufferedStatus { discard, state } =
                self.tls.process_tls_records(&mut self.incoming);
            let state = match state {
                Ok(state) => state,
                Err(e) => {
                    drop(self.incoming.drain(..discard));
                    self.fail(stream, counters);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
            };
            let mut more = true;
            match state {
                ConnectionState::ReadTraffic(mut records) => {
                    while let Some(record) = records.next_record() {
                        let record =
                            record.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                        self.plain.extend_from_slice(record.payload);
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut self.outgoing, |out| {
                        encode.encode(out).map_err(Grow::from)
                    })?;
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    // Handed to the socket now or, if it is full, on its next writable event.
                    transmit.done();
                    self.flush_outgoing(stream)?;
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    self.peer_closed = true;
                    more = false;
                }
                ConnectionState::WriteTraffic(_) => {
                    if let Some(started) = self.handshake_started.take() {
                        let micros = started.elapsed().as_micros() as u64;
                        counters.stats.handshakes += 1;
                        counters.stats.handshake_micros += micros;
                        counters.handshakes.record(micros);
                    }
                    more = false;
                }
                ConnectionState::BlockedHandshake => more = false,
                _ => {
                    // Early data is not enabled; nothing else is expected.
                    self.fail(stream, counters);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "unexpected TLS state",
                    ));
                }
            }
            drop(self.incoming.drain(..discard));
            if !more {
                return Ok(());
            }
        }
    }

    fn write(
        &mut self,
        stream: &mut TcpStream,
        data: &[u8],
        counters: &mut Counters,
    ) -> io::Result<usize> {
        if !self.flush_outgoing(stream)? || data.is_empty() {
            return Ok(0);
        }
        let take = data.len().min(ENCRYPT_AT_ONCE);
        loop {
            let UnbufferedStatus { discard, state } =
                self.tls.process_tls_records(&mut self.incoming);
            let state = state.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let taken = match state {
                ConnectionState::WriteTraffic(mut traffic) => {
                    encode_into(&mut self.outgoing, |out| {
                        traffic.encrypt(&data[..take], out).map_err(|e| match e {
                            EncryptError::InsufficientSize(s) => Grow::To(s.required_size),
                            // Sequence numbers ran out (2^64 records): the connection must end.
                            e => Grow::Fail(e.to_string()),
                        })
                    })?;
                    Some(take)
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    encode_into(&mut self.outgoing, |out| {
                        encode.encode(out).map_err(Grow::from)
                    })?;
                    None
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    None
                }
                ConnectionState::ReadTraffic(mut records) => {
                    // Only whole records are ever left unprocessed by `read`; kept for the
                    // parser all the same.
                    while let Some(record) = records.next_record() {
                        let record =
                            record.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                        self.plain.extend_from_slice(record.payload);
                    }
                    None
                }
                ConnectionState::PeerClosed => None,
                ConnectionState::BlockedHandshake => Some(0),
                ConnectionState::Closed => return Err(io::ErrorKind::BrokenPipe.into()),
                _ => {
                    self.fail(stream, counters);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "unexpected TLS state",
                    ));
                }
            };
            drop(self.incoming.drain(..discard));
            if let Some(taken) = taken {
                self.flush_outgoing(stream)?;
                return Ok(taken);
            }
        }
    }

    /// Writes `outgoing` until done or WouldBlock; frees it once sent. Ok(true) = all sent.
    fn flush_outgoing(&mut self, stream: &mut TcpStream) -> io::Result<bool> {
        while self.outgoing_sent < self.outgoing.len() {
            match stream.write(&self.outgoing[self.outgoing_sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.outgoing_sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.outgoing = Vec::new();
        self.outgoing_sent = 0;
        Ok(true)
    }

    /// Best effort: the socket is closed right after, whatever happens here.
    fn close_notify(&mut self, stream: &mut TcpStream) {
        if self.peer_closed || !matches!(self.flush_outgoing(stream), Ok(true)) {
            return;
        }
        // The same buffer rustls has seen (see `fail`); bytes it has not finished with stay.
        let UnbufferedStatus { state, .. } = self.tls.process_tls_records(&mut self.incoming);
        if let Ok(ConnectionState::WriteTraffic(mut traffic)) = state {
            let queued = encode_into(&mut self.outgoing, |out| {
                traffic.queue_close_notify(out).map_err(|e| match e {
                    EncryptError::InsufficientSize(s) => Grow::To(s.required_size),
                    e => Grow::Fail(e.to_string()),
                })
            });
            if queued.is_ok() {
                let _ = self.flush_outgoing(stream);
            }
        }
    }

    /// A handshake or record error: rustls has queued an alert saying why; it is sent (best
    /// effort, the connection is closed next) and the failure counted.
    fn fail(&mut self, stream: &mut TcpStream, counters: &mut Counters) {
        if self.handshake_started.take().is_some() {
            counters.stats.handshake_failed += 1;
        }
        // rustls keeps its place in the buffer it was given (a half-joined handshake message):
        // it must be handed the same bytes again, never a fresh or empty slice, or it indexes
        // past the end (it panicked on exactly that: serve_tls's garbage-handshake case).
        for _ in 0..4 {
            let UnbufferedStatus { discard, state } =
                self.tls.process_tls_records(&mut self.incoming);
            let go_on = match state {
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    encode_into(&mut self.outgoing, |out| {
                        encode.encode(out).map_err(Grow::from)
                    })
                    .is_ok()
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    true
                }
                _ => false,
            };
            drop(self.incoming.drain(..discard));
            if !go_on {
                break;
            }
        }
        let _ = self.flush_outgoing(stream);
    }

    /// The client sent plaintext to a TLS port: it gets a plaintext answer saying so (what
    /// nginx does), then the connection closes.
    fn refuse_plaintext(&mut self, stream: &mut TcpStream, counters: &mut Counters) {
        self.handshake_started = None;
        counters.stats.plaintext_refused += 1;
        let answer: &[u8] = if self.raw_tcp {
            b"ERR this port speaks TLS\n"
        } else {
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 47\r\nConnection: close\r\n\r\nplain HTTP request sent to a TLS (https) port\r\n"
        };
        // The rest of the request is read first (without waiting): closing with unread input
        // makes the kernel send a reset, which can destroy the answer before it is read.
        let mut sink = [0u8; 4096];
        for _ in 0..4 {
            match stream.read(&mut sink) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        let _ = stream.write(answer);
        let _ = stream.shutdown(std::net::Shutdown::Write);
    }
}

/// A TLS record starts with its content type: 22 (handshake) for a ClientHello; 20..=24 are the
/// types TLS defines. Plaintext HTTP or a line command starts with a printable letter.
fn looks_like_tls(first: u8) -> bool {
    (20..=24).contains(&first)
}

/// What an encoder needs when it could not write: more room, or nothing more can be done.
enum Grow {
    To(usize),
    Fail(String),
}

impl From<EncodeError> for Grow {
    fn from(e: EncodeError) -> Grow {
        match e {
            EncodeError::InsufficientSize(s) => Grow::To(s.required_size),
            e => Grow::Fail(e.to_string()),
        }
    }
}

/// Appends what `encode` writes to `out`, growing it to the size rustls asks for.
fn encode_into(
    out: &mut Vec<u8>,
    mut encode: impl FnMut(&mut [u8]) -> Result<usize, Grow>,
) -> io::Result<()> {
    let start = out.len();
    let mut room = 1024;
    loop {
        out.resize(start + room, 0);
        match encode(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(Grow::To(required)) if required > room => room = required,
            Err(Grow::To(required)) => {
                out.truncate(start);
                return Err(io::Error::other(format!(
                    "TLS encoder asked for {required} bytes again"
                )));
            }
            Err(Grow::Fail(why)) => {
                out.truncate(start);
                return Err(io::Error::other(why));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_record_types_and_plaintext_first_bytes_are_told_apart() {
        assert!(looks_like_tls(22)); // handshake: a ClientHello
        for b in b"GPOSUH" {
            assert!(!looks_like_tls(*b), "{}", *b as char); // GET, POST, OPTIONS, SUB, ...
        }
    }

    #[test]
    fn encoder_output_grows_to_the_size_asked_and_appends() {
        let mut out = b"ab".to_vec();
        let mut calls = 0;
        encode_into(&mut out, |buf| {
            calls += 1;
            if buf.len() < 3000 {
                return Err(Grow::To(3000));
            }
            buf[..3].copy_from_slice(b"xyz");
            Ok(3)
        })
        .unwrap();
        assert_eq!((out.as_slice(), calls), (&b"abxyz"[..], 2));
        // An encoder that asks for the room it already had fails instead of looping.
        let err = encode_into(&mut out, |_| Err(Grow::To(1))).unwrap_err();
        assert!(err.to_string().contains("again"), "{err}");
        assert_eq!(out, b"abxyz");
    }
}
