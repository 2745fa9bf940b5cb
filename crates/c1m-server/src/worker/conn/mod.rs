//! One client connection's state: a 32-byte struct in the worker's slab (the per-connection
//! memory budget is the product). An idle single-channel subscriber owns no buffer and no heap
//! block: half-read input, the queue of bytes a blocked socket owes (uWebSockets' cork habit),
//! a WebSocket message in progress and a list of several channels live in one side box that
//! exists only while one of them does; callers reach them through `Conn`'s methods, never the
//! layout. Queued data is shared (`Rc`) with every other subscriber of the same message.
//!
//! Files: `kind` (what the connection is doing), `io` (the byte paths: reads, sends and
//! flushes, through TLS when the connection has a session).

mod input;
mod io;
mod kind;

pub use input::Input;
pub use io::{ConnMut, Sent};
pub use kind::{Kind, Protocol};
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::rc::Rc;

/// Channel memberships, 8 bytes inline: one (local channel index, position in that channel's
/// member list) pair, or a marker that says "none" or "several, listed in the side box".
/// Channel indices are slab keys of this worker's channels, far below the two markers (each
/// channel costs tens of bytes, so 2^32 - 2 of them cannot exist).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Subs {
    chan: u32,
    pos: u32,
}

impl Subs {
    /// `chan` of a connection in no channel.
    const NONE: u32 = u32::MAX;
    /// `chan` of a connection in several: they are listed in `Side::subs`.
    const MANY: u32 = u32::MAX - 1;
}

/// Iterator over the memberships a connection gave up ([`Conn::take_subs`]).
pub type TakenSubs =
    std::iter::Chain<std::option::IntoIter<(u32, u32)>, std::vec::IntoIter<(u32, u32)>>;

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
pub const WS_MAY_PUBLISH: u8 = 64;
/// Already counted as a slow consumer (closed for falling behind): the end of its linger
/// must not count it a second time.
pub const COUNTED_SLOW: u8 = 128;

/// `Conn::edge` bits (auth, CORS, the admin listener, heartbeat skipping; `flags` has no bit
/// left).
/// The connection came in on `--admin-listen`.
pub const ADMIN: u8 = 1;
/// The stream's `deadline` is its token's expiry (it ends with `event: expired` / close 4001).
pub const EXPIRES: u8 = 2;
/// Bytes were handed to this connection since the heartbeat sweep's last visit: set by every
/// send ([`ConnMut::send_shared`], [`ConnMut::send_owned`], [`ConnMut::batch_sent`]), taken by the
/// sweep ([`Conn::take_wrote`]), which then skips the heartbeat: the stream is not idle.
pub const WROTE: u8 = 4;
/// The heartbeat sweep's previous visit (half an interval ago) found the stream sent nothing:
/// the next visit that finds it silent too writes the heartbeat (heartbeats.rs).
pub const QUIET: u8 = 8;
/// The slot is an HTTP/2 request stream (`h2_streams`): its bytes go through its connection's
/// codec, its socket is a duplicate of the connection's that is never read or written.
pub const H2_STREAM: u8 = 16;
/// The pending status query is a server API call: a master that does not answer in time gets
/// it the API's JSON error, not the plain text of `/status`.
pub const API_CALL: u8 = 32;
/// A WebSocket client publish waits for the publish proxy: the connection's later frames wait
/// unread (in order) until the answer.
pub const PROXY_PENDING: u8 = 64;

/// Everything a connection holds only while it is doing something an idle subscriber does
/// not: half-read input, bytes the socket refused, a WebSocket message in progress, or
/// memberships of several channels. One box, made when first needed and freed as soon as it
/// is empty again ([`Conn::tidy`]), so an idle single-channel subscriber owns no heap block.
#[derive(Default)]
struct Side {
    /// Input read but not yet used (a half-read request head or command line, pipelined
    /// requests, a WebSocket frame tail); empty = none.
    inbuf: Input,
    /// Bytes a blocked socket still owes.
    out: Option<OutQueue>,
    /// A WebSocket message in progress (boxed again: rarer than the rest, and 56 bytes).
    ws: Option<Box<WsMessage>>,
    /// Every membership when there are several (`Subs::MANY`).
    subs: Vec<(u32, u32)>,
}

impl Side {
    fn is_empty(&self) -> bool {
        self.inbuf.is_empty() && self.out.is_none() && self.ws.is_none() && self.subs.is_empty()
    }
}

/// One connection, 32 bytes (pinned by a compile-time assertion below; BENCHMARKS.md's
/// per-subscriber table counts on it). The fields an idle subscriber needs are inline; the
/// rest is in the [`Side`] box, reached only through the methods below.
pub struct Conn {
    pub stream: TcpStream,
    pub generation: u32,
    pub kind: Kind,
    pub keep_alive: bool,
    pub flags: u8,
    /// [`ADMIN`], [`EXPIRES`].
    pub edge: u8,
    /// Timer-wheel tick at which this connection's current wait ends (0 = none).
    pub deadline: u32,
    subs: Subs,
    side: Option<Box<Side>>,
}

// The per-connection memory budget: a slab slot is exactly one `Conn`.
const _: () = assert!(std::mem::size_of::<Conn>() == 32);

impl Conn {
    pub fn new(stream: TcpStream, generation: u32, kind: Kind) -> Conn {
        Conn {
            stream,
            generation,
            kind,
            keep_alive: true,
            flags: 0,
            edge: 0,
            deadline: 0,
            subs: Subs {
                chan: Subs::NONE,
                pos: 0,
            },
            side: None,
        }
    }

    fn side_mut(&mut self) -> &mut Side {
        self.side.get_or_insert_with(Box::default)
    }

    /// Frees the side box once nothing is left in it.
    fn tidy(&mut self) {
        if self.side.as_ref().is_some_and(|s| s.is_empty()) {
            self.side = None;
        }
    }

    // ---- output queue ----

    /// Whether bytes (or TLS ciphertext) wait for the socket to become writable.
    pub fn has_out(&self) -> bool {
        self.side.as_ref().is_some_and(|s| s.out.is_some())
    }

    /// The queue of bytes the socket still owes, if any.
    pub fn out(&self) -> Option<&OutQueue> {
        self.side.as_ref().and_then(|s| s.out.as_ref())
    }

    /// Bytes queued and not yet taken by the socket.
    pub fn unsent_bytes(&self) -> usize {
        self.out().map_or(0, |q| q.bytes)
    }

    /// Replaces what the socket owes (a live upgrade's hand-over); empty = nothing.
    pub fn set_unsent(&mut self, bytes: Vec<u8>) {
        if bytes.is_empty() {
            if let Some(s) = &mut self.side {
                s.out = None;
            }
            return self.tidy();
        }
        self.side_mut().out = Some(OutQueue::from_unsent(bytes));
    }

    fn queue(&mut self) -> &mut OutQueue {
        self.side_mut().out.get_or_insert_with(OutQueue::default)
    }

    // ---- input ----

    /// Whether part of a request (or frame) has arrived and waits for the rest.
    pub fn has_inbuf(&self) -> bool {
        self.side.as_ref().is_some_and(|s| !s.inbuf.is_empty())
    }

    /// Takes the input kept from earlier reads (None when there is none).
    pub fn take_inbuf(&mut self) -> Option<Input> {
        let s = self.side.as_mut()?;
        if s.inbuf.is_empty() {
            return None;
        }
        let input = std::mem::take(&mut s.inbuf);
        self.tidy();
        Some(input)
    }

    /// The input kept from earlier reads, read-only (a hand-over copies it).
    pub fn inbuf(&self) -> &[u8] {
        self.side.as_ref().map_or(&[], |s| s.inbuf.unused())
    }

    /// Keeps what is unused of `input` for the next event to continue from (replacing what
    /// was kept), without copying it unless its buffer is mostly spare room.
    pub fn keep_inbuf(&mut self, input: Input) {
        if input.is_empty() {
            if let Some(s) = &mut self.side {
                s.inbuf = Input::default();
            }
            return self.tidy();
        }
        self.side_mut().inbuf = input.trimmed();
    }

    /// Keeps a copy of `bytes` for the next read to continue from (replacing what was kept).
    pub fn set_inbuf(&mut self, bytes: &[u8]) {
        self.keep_inbuf(Input::copied(bytes));
    }

    /// Drops kept input and any WebSocket message in progress (the connection is closing).
    pub fn discard_input(&mut self) {
        if let Some(s) = &mut self.side {
            s.inbuf = Input::default();
            s.ws = None;
        }
        self.tidy();
    }

    // ---- WebSocket message in progress ----

    /// Takes the WebSocket decoder state (a fresh one when none was kept).
    pub fn take_ws(&mut self) -> Box<WsMessage> {
        let ws = self.side.as_mut().and_then(|s| s.ws.take());
        self.tidy();
        ws.unwrap_or_default()
    }

    /// Keeps the WebSocket decoder state for the next read; an idle one is not kept.
    pub fn set_ws(&mut self, state: Box<WsMessage>) {
        if state.decoder.is_idle() && state.data.is_empty() {
            return;
        }
        self.side_mut().ws = Some(state);
    }

    /// The kept WebSocket state, if any (a hand-over copies it).
    pub fn ws(&self) -> Option<&WsMessage> {
        self.side.as_ref().and_then(|s| s.ws.as_deref())
    }

    // ---- channel memberships ----

    /// Records a membership: `pos` in channel `chan`'s member list.
    pub fn add_sub(&mut self, chan: u32, pos: u32) {
        match self.subs.chan {
            Subs::NONE => self.subs = Subs { chan, pos },
            Subs::MANY => self.side_mut().subs.push((chan, pos)),
            first => {
                let first = (first, self.subs.pos);
                self.subs.chan = Subs::MANY;
                self.side_mut().subs = vec![first, (chan, pos)];
            }
        }
    }

    /// Subscribed to more than one channel (SSE events then name their channel).
    pub fn is_multi(&self) -> bool {
        self.subs.chan == Subs::MANY
    }

    /// The local channel indices this connection is subscribed to.
    pub fn channel_indices(&self) -> Vec<u32> {
        match self.subs.chan {
            Subs::NONE => Vec::new(),
            Subs::MANY => self
                .side
                .as_ref()
                .map_or_else(Vec::new, |s| s.subs.iter().map(|&(c, _)| c).collect()),
            one => vec![one],
        }
    }

    /// Records that this connection moved to `pos` in `chan`'s member list.
    pub fn set_sub_pos(&mut self, chan: u32, pos: u32) {
        if self.subs.chan == chan {
            self.subs.pos = pos;
        } else if let Some(e) = self
            .side
            .as_mut()
            .and_then(|s| s.subs.iter_mut().find(|(c, _)| *c == chan))
        {
            e.1 = pos;
        }
    }

    /// Gives up the membership of channel `chan`, returning its position to leave (None when
    /// not a member). A connection that was in several channels keeps naming the channel of
    /// each event (`is_multi` stays true), so its client's parsing does not change midway.
    pub fn remove_sub(&mut self, chan: u32) -> Option<u32> {
        match self.subs.chan {
            Subs::NONE => None,
            Subs::MANY => {
                let side = self.side.as_mut()?;
                let at = side.subs.iter().position(|&(c, _)| c == chan)?;
                let (_, pos) = side.subs.swap_remove(at);
                if side.subs.is_empty() {
                    self.subs = Subs {
                        chan: Subs::NONE,
                        pos: 0,
                    };
                    self.tidy();
                }
                Some(pos)
            }
            one if one == chan => {
                let pos = self.subs.pos;
                self.subs = Subs {
                    chan: Subs::NONE,
                    pos: 0,
                };
                Some(pos)
            }
            _ => None,
        }
    }

    /// Gives up every membership, returning the (channel, position) pairs to leave.
    pub fn take_subs(&mut self) -> TakenSubs {
        let subs = std::mem::replace(
            &mut self.subs,
            Subs {
                chan: Subs::NONE,
                pos: 0,
            },
        );
        match subs.chan {
            Subs::NONE => None.into_iter().chain(Vec::new()),
            Subs::MANY => {
                let many = self
                    .side
                    .as_mut()
                    .map(|s| std::mem::take(&mut s.subs))
                    .unwrap_or_default();
                self.tidy();
                None.into_iter().chain(many)
            }
            chan => Some((chan, subs.pos)).into_iter().chain(Vec::new()),
        }
    }

    /// Whether anything was sent since the last call (the heartbeat sweep's question), and
    /// starts over.
    pub fn take_wrote(&mut self) -> bool {
        let wrote = self.edge & WROTE != 0;
        self.edge &= !WROTE;
        wrote
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection over loopback (the accepted side), for the struct-level tests.
    fn conn() -> (Conn, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (Conn::new(TcpStream::from_std(server), 1, Kind::Sse), client)
    }

    #[test]
    fn idle_subscriber_is_small() {
        // ≤ 64 B per idle subscriber at 1M with the fixed cost; the struct is the bulk of it (the compile-time assertion beside `Conn` says the same).
        assert_eq!(std::mem::size_of::<Conn>(), 32);
        assert_eq!(std::mem::size_of::<Subs>(), 8);
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
        assert_eq!(Kind::from_code(Kind::ALL.len() as u8), None);
        let mut q = OutQueue::from_unsent(b"abc".to_vec());
        q.chunks.push_back((Rc::from(&b"defg"[..]), 1));
        q.chunks[0].1 = 1;
        assert_eq!(q.unsent(), b"bcefg");
    }

    #[test]
    fn subs_track_positions() {
        let (mut c, _peer) = conn();
        assert_eq!(c.take_subs().count(), 0);
        c.add_sub(3, 0);
        c.set_sub_pos(3, 5);
        assert!(
            !c.is_multi() && c.side.is_none(),
            "one channel needs no side box"
        );
        assert_eq!(c.channel_indices(), vec![3]);
        c.add_sub(4, 1);
        c.set_sub_pos(4, 9);
        c.set_sub_pos(3, 6);
        assert!(c.is_multi());
        assert_eq!(c.channel_indices(), vec![3, 4]);
        assert_eq!(c.take_subs().collect::<Vec<_>>(), vec![(3, 6), (4, 9)]);
        assert!(
            !c.is_multi() && c.side.is_none(),
            "side box freed with the list"
        );
        c.add_sub(7, 2);
        assert_eq!(c.take_subs().collect::<Vec<_>>(), vec![(7, 2)]);
        assert_eq!(c.take_subs().count(), 0);
    }

    #[test]
    fn every_send_marks_the_stream_written_until_the_sweep_takes_it() {
        let (mut c, _peer) = conn();
        let mut c = ConnMut::new(&mut c, None);
        assert!(!c.take_wrote(), "a new connection has sent nothing");
        assert_eq!(c.send_owned(b"head".to_vec(), 1 << 20), Sent::Done);
        assert!(c.take_wrote());
        assert!(!c.take_wrote(), "taken: clear until the next send");
        let data: Rc<[u8]> = Rc::from(&b"message"[..]);
        assert_eq!(c.send_shared(&data, 1 << 20), Sent::Done);
        assert!(c.take_wrote());
        assert_eq!(c.batch_sent(&data, data.len() as i32), Sent::Done);
        assert!(c.take_wrote());
        assert_eq!(c.edge, 0, "no other edge bit touched");
    }

    #[test]
    fn side_box_lives_only_while_used() {
        let (mut c, _peer) = conn();
        c.set_inbuf(b"GET / HT");
        assert!(c.has_inbuf() && c.side.is_some());
        c.add_sub(1, 0);
        c.add_sub(2, 0);
        assert_eq!(
            c.take_inbuf().as_ref().map(Input::unused),
            Some(&b"GET / HT"[..])
        );
        assert!(c.side.is_some(), "still holds the channel list");
        c.take_subs().for_each(drop);
        assert!(c.side.is_none());
        c.set_unsent(b"owed".to_vec());
        assert!(c.has_out() && c.unsent_bytes() == 4);
        assert!(
            ConnMut::new(&mut c, None).flush().unwrap(),
            "the peer's socket takes 4 bytes"
        );
        assert!(
            !c.has_out() && c.side.is_none(),
            "queue and box freed once drained"
        );
        let mut ws = c.take_ws();
        ws.data.extend_from_slice(b"part");
        c.set_ws(ws);
        assert_eq!(c.ws().map(|w| w.data.len()), Some(4));
        c.discard_input();
        assert!(c.ws().is_none() && c.side.is_none());
        let idle = c.take_ws();
        c.set_ws(idle);
        assert!(c.side.is_none(), "an idle decoder is not kept");
    }
}
