//! One client connection: a small struct in the worker's slab. An idle subscriber owns no
//! buffer: `inbuf` exists only while a request head or command line is half-read, and `out`
//! only while the socket refuses writes (uWebSockets' cork habit). Queued data is shared
//! (`Rc`) with every other subscriber of the same message. On a TLS connection the byte paths
//! go through `tls_session` (which keeps that connection's TLS state beside, not in, `Conn`).

use super::tls_session;
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::rc::Rc;

/// What a connection is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reading an HTTP request head (new, or keep-alive between requests).
    Http,
    /// Raw TCP port: reading the `SUB` line.
    TcpCommand,
    /// Waiting for the master to assign a publish id.
    Publishing,
    /// Waiting for the master's status figures.
    Status,
    /// Subscribed; waiting for the master's join answer (replay) before going live.
    SseJoining,
    PollJoining,
    TcpJoining,
    /// WebSocket: the 101 is sent; frames start once the join answer arrives.
    WsJoining,
    /// Live streams.
    Sse,
    PollWaiting,
    TcpStream,
    Ws,
    /// Response written or error sent: close once `out` drains.
    Closing,
}

impl Kind {
    /// Every kind, in the order of its hand-over code (docs/upgrade.md): the index is the code.
    const ALL: [Kind; 13] = [
        Kind::Http,
        Kind::TcpCommand,
        Kind::Publishing,
        Kind::Status,
        Kind::SseJoining,
        Kind::PollJoining,
        Kind::TcpJoining,
        Kind::WsJoining,
        Kind::Sse,
        Kind::PollWaiting,
        Kind::TcpStream,
        Kind::Ws,
        Kind::Closing,
    ];

    /// This kind's code in a hand-over record.
    pub fn code(self) -> u8 {
        Kind::ALL.iter().position(|&k| k == self).expect("listed") as u8
    }

    /// The kind a hand-over record's code names; None for a code this binary does not know.
    pub fn from_code(code: u8) -> Option<Kind> {
        Kind::ALL.get(code as usize).copied()
    }

    /// Subscribed and waiting for (more of) the master's join answer.
    pub fn is_joining(self) -> bool {
        matches!(
            self,
            Kind::SseJoining | Kind::PollJoining | Kind::TcpJoining | Kind::WsJoining
        )
    }

    /// The `/status` protocol bucket this connection counts in.
    pub fn protocol(self) -> Protocol {
        match self {
            Kind::SseJoining | Kind::Sse => Protocol::Sse,
            Kind::PollJoining | Kind::PollWaiting => Protocol::LongPoll,
            Kind::TcpJoining | Kind::TcpStream | Kind::TcpCommand => Protocol::Tcp,
            Kind::WsJoining | Kind::Ws => Protocol::WebSocket,
            _ => Protocol::Other,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Sse,
    LongPoll,
    Tcp,
    WebSocket,
    Other,
}

/// Channel memberships: (local channel index, position in that channel's member list).
/// One channel is the common case and stays inline.
pub enum Subs {
    None,
    One(u32, u32),
    // A thin 8-byte pointer (not Box<[T]>'s 16) keeps Conn within the memory budget.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<(u32, u32)>>),
}

impl Subs {
    pub fn is_multi(&self) -> bool {
        matches!(self, Subs::Many(_))
    }

    pub fn push(&mut self, chan: u32, pos: u32) {
        *self = match std::mem::replace(self, Subs::None) {
            Subs::None => Subs::One(chan, pos),
            Subs::One(c, p) => Subs::Many(Box::new(vec![(c, p), (chan, pos)])),
            Subs::Many(mut v) => {
                v.push((chan, pos));
                Subs::Many(v)
            }
        }
    }

    /// The local channel indices this connection is subscribed to.
    pub fn channel_indices(&self) -> Vec<u32> {
        match self {
            Subs::None => Vec::new(),
            Subs::One(c, _) => vec![*c],
            Subs::Many(v) => v.iter().map(|(c, _)| *c).collect(),
        }
    }

    /// Records that this connection moved to `pos` in `chan`'s member list.
    pub fn set_pos(&mut self, chan: u32, pos: u32) {
        match self {
            Subs::One(c, p) if *c == chan => *p = pos,
            Subs::Many(v) => {
                if let Some(e) = v.iter_mut().find(|(c, _)| *c == chan) {
                    e.1 = pos;
                }
            }
            _ => {}
        }
    }

    pub fn take(&mut self) -> Vec<(u32, u32)> {
        match std::mem::replace(self, Subs::None) {
            Subs::None => Vec::new(),
            Subs::One(c, p) => vec![(c, p)],
            Subs::Many(v) => *v,
        }
    }
}

/// Bytes a blocked socket still owes, as shared chunks.
#[derive(Default)]
pub struct OutQueue {
    chunks: VecDeque<(Rc<[u8]>, usize)>,
    /// Bytes not yet taken by the socket (also reported as the worker's unsent bytes).
    pub bytes: usize,
}

impl OutQueue {
    /// The bytes still owed, in order (a live upgrade hands them to the next process).
    pub fn unsent(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes);
        for (chunk, offset) in &self.chunks {
            out.extend_from_slice(&chunk[*offset..]);
        }
        out
    }

    /// A queue owing `bytes` (the other half of [`OutQueue::unsent`]).
    pub fn from_unsent(bytes: Vec<u8>) -> OutQueue {
        let mut q = OutQueue {
            bytes: bytes.len(),
            ..Default::default()
        };
        q.chunks.push_back((Rc::from(bytes), 0));
        q
    }
}

/// WebSocket state that exists only while a client is mid-message (idle sockets hold none).
#[derive(Default)]
pub struct WsMessage {
    pub decoder: c1m_proto::ws::frame::Decoder,
    /// The message so far, kept only when client publish is on.
    pub data: Vec<u8>,
}

/// `Conn::flags` bits.
pub const WS_ENVELOPE: u8 = 1;
pub const WS_AWAITING_PONG: u8 = 2;
/// At least one request was answered: an idle keep-alive connection, not a silent client.
pub const SERVED: u8 = 4;
/// Reading stopped before WouldBlock because the input buffer is full and the connection cannot
/// use it yet; with edge-triggered epoll no new event comes for those bytes, so `resume_input`
/// must read on once the connection can take input again.
pub const READ_PAUSED: u8 = 8;
/// `100 Continue` was sent for the request being read (sent once per request).
pub const CONTINUE_SENT: u8 = 16;
/// The pending status query answers `/healthz`, not `/status`.
pub const HEALTH_CHECK: u8 = 32;
/// The WebSocket's upgrade passed the publish rule: its data messages may be published.
/// (64, not 8: main's READ_PAUSED, CONTINUE_SENT and HEALTH_CHECK took 8, 16 and 32.)
pub const WS_MAY_PUBLISH: u8 = 64;
/// Already counted as a slow consumer (closed for falling behind): the end of its linger
/// must not count it a second time.
pub const COUNTED_SLOW: u8 = 128;

/// `Conn::edge` bits (auth, CORS and the admin listener; `flags` has no bit left).
/// The connection came in on `--admin-listen`.
pub const ADMIN: u8 = 1;
/// The stream's `deadline` is its token's expiry (it ends with `event: expired` / close 4001).
pub const EXPIRES: u8 = 2;

/// Outcome of a send.
#[derive(Debug, PartialEq, Eq)]
pub enum Sent {
    Done,
    /// Unsent bytes would exceed the cap: the caller disconnects this slow reader.
    Overflow,
    /// The socket failed (peer gone).
    Failed,
}

pub struct Conn {
    pub stream: TcpStream,
    pub generation: u32,
    pub kind: Kind,
    pub keep_alive: bool,
    pub flags: u8,
    /// Timer-wheel tick at which this connection's current wait ends (0 = none).
    pub deadline: u32,
    pub subs: Subs,
    // A thin 8-byte pointer (not Vec's 24 bytes inline) keeps Conn within the memory budget.
    #[allow(clippy::box_collection)]
    pub inbuf: Option<Box<Vec<u8>>>,
    pub out: Option<Box<OutQueue>>,
    pub ws: Option<Box<WsMessage>>,
    /// What this connection holds in the per-IP table (bucket + 1; 0 = nothing), given back
    /// on close.
    pub ip_slot: u32,
    /// [`ADMIN`], [`EXPIRES`]: one byte that fits the padding (Conn stays 64 bytes).
    pub edge: u8,
}

impl Conn {
    pub fn new(stream: TcpStream, generation: u32, kind: Kind) -> Conn {
        Conn {
            stream,
            generation,
            kind,
            keep_alive: true,
            flags: 0,
            deadline: 0,
            subs: Subs::None,
            inbuf: None,
            out: None,
            ws: None,
            ip_slot: 0,
            edge: 0,
        }
    }

    /// Sends shared bytes: written now if the socket takes them, else queued by reference.
    /// The cap is checked before queueing: a subscriber already owing more than `max_unsent`
    /// is a slow reader and gets nothing more, while one that is keeping up can always take
    /// the next message or replay chunk whole, however large (each is bounded on its own).
    pub fn send_shared(&mut self, data: &Rc<[u8]>, max_unsent: usize) -> Sent {
        if let Some(q) = &mut self.out {
            if q.bytes > max_unsent {
                return Sent::Overflow;
            }
            q.bytes += data.len();
            q.chunks.push_back((data.clone(), 0));
            return Sent::Done;
        }
        match write_some(&mut self.stream, data) {
            Ok(n) if n == data.len() && !tls_session::owes_bytes(&self.stream) => Sent::Done,
            Ok(n) => {
                // The rest waits for writability; so does TLS ciphertext the socket refused
                // (then the queue holds a fully taken chunk until the ciphertext is out).
                let mut q = Box::<OutQueue>::default();
                q.bytes = data.len() - n;
                q.chunks.push_back((data.clone(), n));
                self.out = Some(q);
                Sent::Done
            }
            Err(_) => Sent::Failed,
        }
    }

    /// Whether a fan-out send may go through the io_uring batch: nothing is queued ahead of it
    /// (order), and the socket carries plaintext (TLS records are made by rustls in user space).
    pub fn can_batch_send(&self) -> bool {
        self.out.is_none() && !tls_session::enabled_for(&self.stream)
    }

    /// The outcome of a batched (io_uring) send of `data`: `result` is the kernel's (bytes
    /// taken, or -errno). What the socket did not take is queued exactly as `send_shared` would.
    pub fn batch_sent(&mut self, data: &Rc<[u8]>, result: i32) -> Sent {
        let taken = match result {
            n if n >= 0 => (n as usize).min(data.len()),
            n if n == -libc::EAGAIN || n == -libc::EINTR => 0,
            _ => return Sent::Failed,
        };
        if taken < data.len() {
            let q = self.out.get_or_insert_with(Box::default);
            q.bytes += data.len() - taken;
            q.chunks.push_back((data.clone(), taken));
        }
        Sent::Done
    }

    /// Sends bytes owned by this connection alone (responses, replays).
    pub fn send_owned(&mut self, data: Vec<u8>, max_unsent: usize) -> Sent {
        if self.out.is_none() {
            match write_some(&mut self.stream, &data) {
                Ok(n) if n == data.len() && !tls_session::owes_bytes(&self.stream) => {
                    return Sent::Done
                }
                Ok(n) => return self.send_shared(&Rc::from(&data[n..]), max_unsent),
                Err(_) => return Sent::Failed,
            }
        }
        self.send_shared(&Rc::from(data), max_unsent)
    }

    /// Writes queued bytes; frees the queue once empty. Ok(true) when nothing is left.
    pub fn flush(&mut self) -> io::Result<bool> {
        let Some(q) = &mut self.out else {
            return Ok(true);
        };
        while let Some((chunk, offset)) = q.chunks.front_mut() {
            let n = write_some(&mut self.stream, &chunk[*offset..])?;
            *offset += n;
            q.bytes -= n;
            if *offset < chunk.len() {
                return Ok(false);
            }
            q.chunks.pop_front();
        }
        if tls_session::flush(&mut self.stream).transpose()? == Some(false) {
            return Ok(false);
        }
        self.out = None;
        Ok(true)
    }

    /// Reads what the peer sent (decrypted on a TLS connection): `Read::read`'s contract.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match tls_session::read(&mut self.stream, buf) {
            Some(result) => result,
            None => self.stream.read(buf),
        }
    }
}

/// Writes until done or WouldBlock; returns bytes written. Errors other than WouldBlock and
/// Interrupted mean the connection is gone. On a TLS connection: plaintext bytes taken
/// (encrypted and written, or encrypted and owed: see `tls_session::owes_bytes`).
fn write_some(stream: &mut TcpStream, data: &[u8]) -> io::Result<usize> {
    let mut done = 0;
    if tls_session::enabled_for(stream) {
        while done < data.len() {
            match tls_session::write(stream, &data[done..]) {
                Some(Ok(0)) | None => break,
                Some(Ok(n)) => done += n,
                Some(Err(e)) => return Err(e),
            }
            if tls_session::owes_bytes(stream) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_subscriber_is_small() {
        // The per-connection budget is 256 B of user space; the struct is the bulk of it.
        assert!(
            std::mem::size_of::<Conn>() <= 64,
            "Conn is {} bytes",
            std::mem::size_of::<Conn>()
        );
    }

    #[test]
    fn slab_entry_adds_nothing_to_conn() {
        // slab 0.4 stores `enum Entry<T> { Vacant(usize), Occupied(T) }`; Kind's spare values
        // hold the discriminant, so a slot costs exactly a Conn (the per-connection table in
        // BENCHMARKS.md counts on it).
        #[allow(dead_code)]
        enum SlabEntry {
            Vacant(usize),
            Occupied(Conn),
        }
        eprintln!(
            "Conn {} B, slab entry {} B, Subs {} B",
            std::mem::size_of::<Conn>(),
            std::mem::size_of::<SlabEntry>(),
            std::mem::size_of::<Subs>()
        );
        assert_eq!(
            std::mem::size_of::<SlabEntry>(),
            std::mem::size_of::<Conn>()
        );
    }

    #[test]
    fn kind_codes_round_trip() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_code(k.code()), Some(k));
        }
        assert_eq!(Kind::from_code(13), None);
        let mut q = OutQueue::from_unsent(b"abc".to_vec());
        q.chunks.push_back((Rc::from(&b"defg"[..]), 1));
        q.chunks[0].1 = 1;
        assert_eq!(q.unsent(), b"bcefg");
    }

    #[test]
    fn subs_track_positions() {
        let mut s = Subs::None;
        s.push(3, 0);
        s.set_pos(3, 5);
        assert!(matches!(s, Subs::One(3, 5)));
        s.push(4, 1);
        s.set_pos(4, 9);
        assert_eq!(s.take(), vec![(3, 5), (4, 9)]);
    }
}
