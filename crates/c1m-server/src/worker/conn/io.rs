//! A connection's byte paths: reads, sends and flushes of its queue, through its TLS session
//! when it has one. [`ConnMut`] is a connection lent by the connection table together with
//! that session, so a send cannot forget the TLS layer and the session needs no table of its
//! own keyed by descriptor.

use super::{Conn, WROTE};
use crate::worker::h2_streams::StreamIo;
use crate::worker::tls_session::TlsIo;
use mio::net::TcpStream;
use std::io::{self, Read, Write};
use std::ops::{Deref, DerefMut};
use std::rc::Rc;

/// Outcome of a send.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    Done,
    /// Unsent bytes would exceed the cap: the caller disconnects this slow reader.
    Overflow,
    /// The socket failed (peer gone).
    Failed,
}

/// A connection with its TLS session (if any), as `ConnTable::get_mut` lends it: reads and
/// writes go through the session; everything else is the [`Conn`] (through `Deref`).
pub struct ConnMut<'a> {
    conn: &'a mut Conn,
    tls: Option<TlsIo<'a>>,
    /// An HTTP/2 stream's path into its connection's codec (`h2_streams`): set for a slot
    /// marked [`super::H2_STREAM`], which never touches its socket.
    h2: Option<StreamIo<'a>>,
}

impl<'a> ConnMut<'a> {
    pub fn new(conn: &'a mut Conn, tls: Option<TlsIo<'a>>) -> ConnMut<'a> {
        ConnMut {
            conn,
            tls,
            h2: None,
        }
    }

    /// An HTTP/2 stream's slot with its byte path.
    pub fn stream(conn: &'a mut Conn, h2: StreamIo<'a>) -> ConnMut<'a> {
        ConnMut {
            conn,
            tls: None,
            h2: Some(h2),
        }
    }

    /// Writes what the socket takes of `data` now (through TLS), queueing nothing: an HTTP/2
    /// connection keeps what is left in its codec's output. Only with no queue ahead of it.
    pub fn write_now(&mut self, data: &[u8]) -> io::Result<usize> {
        write_some(&mut self.conn.stream, self.tls.as_mut(), data)
    }

    /// TLS ciphertext waits for the socket.
    pub fn owes_tls(&self) -> bool {
        self.tls.as_ref().is_some_and(TlsIo::owes_bytes)
    }

    /// Sends shared bytes: written now if the socket takes them, else queued by reference.
    /// The cap is checked before queueing: a subscriber already owing more than `max_unsent`
    /// is a slow reader and gets nothing more, while one that is keeping up can always take
    /// the next message or replay chunk whole, however large (each is bounded on its own).
    pub fn send_shared(&mut self, data: &Rc<[u8]>, max_unsent: usize) -> Sent {
        self.conn.edge |= WROTE;
        if let Some(h2) = &mut self.h2 {
            return h2.send(data, max_unsent);
        }
        if let Some(q) = self.conn.side.as_mut().and_then(|s| s.out.as_mut()) {
            if q.bytes > max_unsent {
                return Sent::Overflow;
            }
            q.bytes += data.len();
            q.chunks.push_back((data.clone(), 0));
            return Sent::Done;
        }
        match write_some(&mut self.conn.stream, self.tls.as_mut(), data) {
            Ok(n) if n == data.len() && !self.owes_tls() => Sent::Done,
            Ok(n) => {
                // The rest waits for writability; so does TLS ciphertext the socket refused
                // (then the queue holds a fully taken chunk until the ciphertext is out).
                let q = self.conn.queue();
                q.bytes = data.len() - n;
                q.chunks.push_back((data.clone(), n));
                Sent::Done
            }
            Err(_) => Sent::Failed,
        }
    }

    /// Whether a fan-out send may go through the io_uring batch: nothing is queued ahead of it
    /// (order), and the socket carries plaintext (TLS records are made by rustls in user space).
    pub fn can_batch_send(&self) -> bool {
        !self.conn.has_out() && self.tls.is_none() && self.h2.is_none()
    }

    /// The outcome of a batched (io_uring) send of `data`: `result` is the kernel's (bytes
    /// taken, or -errno). What the socket did not take is queued exactly as `send_shared` would.
    pub fn batch_sent(&mut self, data: &Rc<[u8]>, result: i32) -> Sent {
        self.conn.edge |= WROTE;
        let taken = match result {
            n if n >= 0 => (n as usize).min(data.len()),
            n if n == -libc::EAGAIN || n == -libc::EINTR => 0,
            _ => return Sent::Failed,
        };
        if taken < data.len() {
            let q = self.conn.queue();
            q.bytes += data.len() - taken;
            q.chunks.push_back((data.clone(), taken));
        }
        Sent::Done
    }

    /// Sends bytes owned by this connection alone (responses, replays).
    pub fn send_owned(&mut self, data: Vec<u8>, max_unsent: usize) -> Sent {
        self.conn.edge |= WROTE;
        if let Some(h2) = &mut self.h2 {
            return h2.send(&data, max_unsent);
        }
        if !self.conn.has_out() {
            match write_some(&mut self.conn.stream, self.tls.as_mut(), &data) {
                Ok(n) if n == data.len() && !self.owes_tls() => return Sent::Done,
                Ok(n) => return self.send_shared(&Rc::from(&data[n..]), max_unsent),
                Err(_) => return Sent::Failed,
            }
        }
        self.send_shared(&Rc::from(data), max_unsent)
    }

    /// Writes queued bytes; frees the queue once empty. Ok(true) when nothing is left.
    pub fn flush(&mut self) -> io::Result<bool> {
        let conn = &mut *self.conn;
        let Some(q) = conn.side.as_mut().and_then(|s| s.out.as_mut()) else {
            return Ok(true);
        };
        while let Some((chunk, offset)) = q.chunks.front_mut() {
            let n = write_some(&mut conn.stream, self.tls.as_mut(), &chunk[*offset..])?;
            *offset += n;
            q.bytes -= n;
            if *offset < chunk.len() {
                return Ok(false);
            }
            q.chunks.pop_front();
        }
        if !self.flush_tls()? {
            return Ok(false);
        }
        if let Some(s) = &mut self.conn.side {
            s.out = None;
        }
        self.conn.tidy();
        Ok(true)
    }

    /// Writes TLS ciphertext still owed (handshake bytes the socket refused earlier).
    /// Ok(true) when nothing is left; always so on a plaintext connection.
    pub fn flush_tls(&mut self) -> io::Result<bool> {
        match &mut self.tls {
            Some(tls) => tls.flush(&mut self.conn.stream),
            None => Ok(true),
        }
    }

    /// Whether [`Self::read`] reads the socket itself (plaintext, not an HTTP/2 stream), so
    /// a short read means the socket had no more.
    pub fn reads_socket_directly(&self) -> bool {
        self.tls.is_none() && self.h2.is_none()
    }

    /// Reads what the peer sent (decrypted on a TLS connection): `Read::read`'s contract.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.tls {
            Some(tls) => tls.read(&mut self.conn.stream, buf),
            // A stream's input comes from its connection's codec, never its socket.
            None if self.h2.is_some() => Err(io::ErrorKind::WouldBlock.into()),
            None => self.conn.stream.read(buf),
        }
    }
}

impl Deref for ConnMut<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
    }
}

impl DerefMut for ConnMut<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn
    }
}

/// Writes until done or WouldBlock; returns bytes written. Errors other than WouldBlock and
/// Interrupted mean the connection is gone. On a TLS connection: plaintext bytes taken
/// (encrypted and written, or encrypted and owed: see [`TlsIo::owes_bytes`]).
fn write_some(
    stream: &mut TcpStream,
    tls: Option<&mut TlsIo<'_>>,
    data: &[u8],
) -> io::Result<usize> {
    let mut done = 0;
    if let Some(tls) = tls {
        while done < data.len() {
            match tls.write(stream, &data[done..])? {
                0 => break,
                n => done += n,
            }
            if tls.owes_bytes() {
                break;
            }
        }
        return Ok(done);
    }
    while done < data.len() {
        match stream.write(&data[done..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
