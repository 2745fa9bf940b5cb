//! Publishes on the public listener are answered by the control worker: a subscriber worker
//! that reads the head of a `POST /pub/…` or `POST /api/…` on a plain HTTP/1.1 connection
//! passes the connection (its descriptor, and the bytes read so far as a live upgrade's
//! [`ConnRecord`]) to the control worker over a SEQPACKET socket, and forgets it. The control
//! worker has no subscribers and runs at the master's priority while `--worker-nice` lowers
//! the subscriber workers', so a publish is read and acknowledged at once even while every
//! subscriber worker is busy delivering a fan-out (BENCHMARKS.md "publish acks on default
//! flags"). Later requests on the connection go to the control worker too (it owns it now).
//!
//! A connection stays where it arrived, counted as `kept_*`, when the control worker cannot
//! take it now: not listening yet or gone (`unreachable`: asked again after 100 ms), its
//! queue full (`busy`), or more bytes read than one packet carries (`large`). TLS and HTTP/2
//! connections always stay (their session state does not travel).

use super::accept::{refuse_at_accept, MAX_CONNS_ANSWER};
use super::conn::{Kind, CONTINUE_SENT, H2_STREAM};
use super::{token_of, Worker};
use c1m_proto::handover::{self, ConnRecord, Pair};
use c1m_sys::fd_passing;
use mio::net::TcpStream;
use mio::{Interest, Token};
use socket2::Socket;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long a subscriber worker serves publishes itself after the control worker could not
/// be reached (a start-up race, or the control worker restarting): a refused connect costs
/// one system call, so it is tried again soon.
const RETRY_AFTER: Duration = Duration::from_millis(100);
/// Most bytes read ahead of the move that one packet carries (the record's other fields
/// take well under the rest of [`handover::MAX_PACKET`]).
const MAX_CARRIED: usize = handover::MAX_PACKET - 4096;
/// Subscriber workers' sockets the control worker reads, at most (one per worker).
const MAX_PEERS: usize = 4096;
/// The control worker's socket for the subscriber workers' moves.
pub(super) const INBOX: Token = Token(usize::MAX - 7);
/// Tokens of the subscriber workers' sockets on the control worker: `PEER_BASE - i`.
const PEER_BASE: usize = usize::MAX - 16;

/// The abstract socket name of the control worker of master `master_pid`.
pub fn inbox_name(master_pid: u32) -> String {
    format!("c1m-publish-{master_pid}")
}

/// Whether `token` is one of the control worker's peer sockets.
pub(super) fn is_peer(token: Token) -> bool {
    (PEER_BASE - MAX_PEERS..=PEER_BASE).contains(&token.0)
}

/// One side of the moves: a subscriber worker sends, the control worker receives.
pub(super) enum PublishMoves {
    Sender {
        name: String,
        to_control: Option<Socket>,
        retry_at: Option<Instant>,
    },
    Receiver {
        master_pid: u32,
        inbox: Socket,
        peers: Vec<Option<Socket>>,
        /// One packet's room, reused by every read of the peers.
        packet: Vec<u8>,
    },
}

impl PublishMoves {
    /// The control worker listens on its inbox (registered with `poll`); a subscriber worker
    /// connects on its first move.
    pub(super) fn new(
        master_pid: u32,
        control: bool,
        poll: &mio::Poll,
    ) -> anyhow::Result<PublishMoves> {
        use anyhow::Context;
        let name = inbox_name(master_pid);
        if !control {
            return Ok(PublishMoves::Sender {
                name,
                to_control: None,
                retry_at: None,
            });
        }
        let inbox = fd_passing::listen_abstract(&name, Duration::from_millis(1))
            .with_context(|| format!("the control worker's publish inbox {name}"))?;
        inbox.set_nonblocking(true)?;
        poll.registry().register(
            &mut mio::unix::SourceFd(&inbox.as_raw_fd()),
            INBOX,
            Interest::READABLE,
        )?;
        Ok(PublishMoves::Receiver {
            master_pid,
            inbox,
            peers: Vec::new(),
            packet: vec![0u8; handover::MAX_PACKET],
        })
    }
}

/// Connects a subscriber worker to the control worker's inbox unless it is connected, or a
/// try failed less than [`RETRY_AFTER`] ago. True when connected.
fn connect_to_control(
    name: &str,
    to_control: &mut Option<Socket>,
    retry_at: &mut Option<Instant>,
    now: Instant,
) -> bool {
    if to_control.is_some() {
        return true;
    }
    if retry_at.is_some_and(|t| now < t) {
        return false;
    }
    match fd_passing::connect_abstract(name).and_then(|s| {
        s.set_nonblocking(true)?;
        Ok(s)
    }) {
        Ok(s) => {
            *to_control = Some(s);
            true
        }
        Err(e) => {
            tracing::debug!(error = %e, "control worker not reachable; publishes served here for now");
            *retry_at = Some(now + RETRY_AFTER);
            false
        }
    }
}

impl Worker {
    /// Subscriber worker: connects to the control worker ahead of the first publish (each
    /// stats beat until it is), so the socket is there from start-up and a worker's descriptor
    /// count does not move with its first publish.
    pub(super) fn connect_to_control_early(&mut self, now: Instant) {
        if let PublishMoves::Sender {
            name,
            to_control,
            retry_at,
        } = &mut self.publish_moves
        {
            connect_to_control(name, to_control, retry_at, now);
        }
    }

    /// Subscriber worker: passes the connection in `idx`, whose request starting at `data`
    /// is a publish or an API call, to the control worker. True when it went (the connection
    /// is no longer this worker's; `data` is consumed); false to serve it here.
    pub(super) fn move_publish(&mut self, idx: usize, data: &[u8]) -> bool {
        let PublishMoves::Sender {
            name,
            to_control,
            retry_at,
        } = &mut self.publish_moves
        else {
            return false;
        };
        let conn = &self.conns[idx];
        let token = token_of(idx, conn.generation);
        if conn.kind != Kind::Http
            || conn.edge & H2_STREAM != 0
            || conn.has_out()
            || conn.flags & CONTINUE_SENT != 0
            || self.conns.tls.has_session(idx)
            || self.conns.chunked_bodies.contains_key(&token)
            || self.handover.frozen
        {
            return false;
        }
        if data.len() > MAX_CARRIED {
            self.counters.moves.kept_large += 1;
            return false;
        }
        let now = Instant::now();
        if !connect_to_control(name, to_control, retry_at, now) {
            self.counters.moves.kept_unreachable += 1;
            return false;
        }
        let record = ConnRecord {
            kind: Kind::Http.code(),
            keep_alive: conn.keep_alive,
            flags: conn.flags,
            edge: conn.edge,
            inbuf: data.to_vec(),
            ..ConnRecord::default()
        };
        let packet = Pair::Part {
            last: true,
            data: ConnRecord::encode_batch_with(&[record], None),
        }
        .encode();
        let socket = to_control.as_ref().expect("connected above");
        // The per-address place is given back before the control worker can take it: held by
        // both for a moment, a client at its limit would be refused its own connection.
        if let Some(limits) = &mut self.ip_limits {
            limits.release_held(idx);
        }
        let sent = fd_passing::send_with_fds(socket, &packet, &[conn.stream.as_raw_fd()]);
        if let Err(e) = sent {
            if e.kind() == std::io::ErrorKind::WouldBlock {
                self.counters.moves.kept_busy += 1;
            } else {
                tracing::debug!(error = %e, "passing a publish to the control worker failed; served here");
                *to_control = None;
                *retry_at = Some(now + RETRY_AFTER);
                self.counters.moves.kept_unreachable += 1;
            }
            self.hold_place_again(idx);
            return false;
        }
        // The control worker holds its own copy of the socket: this worker's registration and
        // descriptor go, the connection stays open. Not a close: no webhook, no close count.
        self.counters.moves.moved += 1;
        self.forget_moved(idx);
        true
    }

    /// Takes the per-address place back for a connection that stayed (its move failed). Should
    /// another connection have taken it meanwhile, this one is served without (one over the
    /// limit until it closes) rather than refused after it was admitted.
    fn hold_place_again(&mut self, idx: usize) {
        let Some(limits) = &mut self.ip_limits else {
            return;
        };
        if let Ok(Ok(slot)) = self.conns[idx]
            .stream
            .peer_addr()
            .map(|peer| limits.admit_moved(peer.ip()))
        {
            limits.hold(idx, slot);
        }
    }

    /// Drops a connection that now lives in another worker. Deregistered first: an epoll
    /// registration outlives this descriptor while another process keeps the socket open.
    fn forget_moved(&mut self, idx: usize) {
        let Some(mut conn) = self.conns.remove(idx) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
    }

    /// Control worker: takes the subscriber workers that connect to the inbox (children of
    /// this worker's master only: anyone on the host can connect to an abstract name).
    pub(super) fn accept_movers(&mut self) {
        let PublishMoves::Receiver {
            master_pid,
            inbox,
            peers,
            ..
        } = &mut self.publish_moves
        else {
            return;
        };
        loop {
            let socket = match inbox.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting on the publish inbox failed");
                    return;
                }
            };
            let peer = fd_passing::peer_pid(&socket).ok();
            let parent = peer.and_then(fd_passing::parent_of);
            if parent != Some(*master_pid) {
                tracing::warn!(
                    ?peer,
                    ?parent,
                    "publish inbox: a process that is not a sibling worker connected; closed"
                );
                continue;
            }
            let slot = match peers.iter().position(Option::is_none) {
                Some(i) => i,
                None if peers.len() < MAX_PEERS => {
                    peers.push(None);
                    peers.len() - 1
                }
                None => {
                    tracing::warn!("publish inbox: too many peers; closed");
                    continue;
                }
            };
            if socket.set_nonblocking(true).is_err()
                || self
                    .poll
                    .registry()
                    .register(
                        &mut mio::unix::SourceFd(&socket.as_raw_fd()),
                        Token(PEER_BASE - slot),
                        Interest::READABLE,
                    )
                    .is_err()
            {
                continue;
            }
            peers[slot] = Some(socket);
        }
    }

    /// Control worker: every connection a subscriber worker has passed on `token`'s socket
    /// joins this worker and its request is served. A peer that closed (a worker that exited)
    /// is forgotten.
    pub(super) fn receive_moves(&mut self, token: Token) {
        let slot = PEER_BASE - token.0;
        loop {
            let PublishMoves::Receiver { peers, packet, .. } = &mut self.publish_moves else {
                return;
            };
            let Some(Some(socket)) = peers.get(slot) else {
                return;
            };
            let (n, mut fds) = match fd_passing::recv_with_fds(socket, packet) {
                Ok(got) => got,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::debug!(error = %e, "publish inbox peer failed; dropped");
                    (0, Vec::new())
                }
            };
            if n == 0 {
                if let Some(socket) = peers[slot].take() {
                    let _ = self
                        .poll
                        .registry()
                        .deregister(&mut mio::unix::SourceFd(&socket.as_raw_fd()));
                }
                return;
            }
            let record = match Pair::decode(&packet[..n]) {
                Ok(Pair::Part { last: true, data }) => ConnRecord::decode_batch_with(&data)
                    .ok()
                    .and_then(|(mut r, _)| (r.len() == 1).then(|| r.remove(0))),
                _ => None,
            };
            match (record, fds.pop(), fds.is_empty()) {
                (Some(record), Some(fd), true) => self.adopt_moved(record, fd),
                // Not what a sibling sends: its descriptors close, the peer stays.
                _ => {
                    self.counters.moves.dropped_unreadable += 1;
                    tracing::warn!("publish inbox: unreadable move dropped");
                }
            }
        }
    }

    /// Control worker: a passed connection gets a slot, its request head timer, and its
    /// request read (it waited in the record's input bytes).
    fn adopt_moved(&mut self, record: ConnRecord, fd: OwnedFd) {
        let stream = TcpStream::from_std(std::net::TcpStream::from(fd));
        if self.conns.len() >= self.max_conns {
            self.counters.refused.max_conns += 1;
            return refuse_at_accept(stream, MAX_CONNS_ANSWER);
        }
        // The per-address count moves with the connection (the sender gave its share back), so
        // passing connections here never lifts `--max-conns-per-ip`.
        let ip_slot = match (&self.ip_limits, stream.peer_addr()) {
            (None, _) => 0,
            (Some(limits), Ok(peer)) => match limits.admit_moved(peer.ip()) {
                Ok(slot) => slot,
                Err(refusal) => {
                    self.counters.refused.per_ip_conns += 1;
                    return refuse_at_accept(stream, &refusal.response(false));
                }
            },
            (Some(_), Err(_)) => return, // gone already
        };
        let generation = self.conns.next_generation();
        let idx = self.conns.vacant_slot();
        let mut conn = super::conn::Conn::new(stream, generation, Kind::Http);
        conn.keep_alive = record.keep_alive;
        conn.flags = record.flags;
        conn.edge = record.edge;
        conn.set_inbuf(&record.inbuf);
        if !self.register_new(&mut conn, token_of(idx, generation), ip_slot) {
            return;
        }
        self.conns.insert(conn);
        if let Some(limits) = &mut self.ip_limits {
            limits.hold(idx, ip_slot);
        }
        self.counters.moves.received += 1;
        self.arm_head_timer(idx);
        // A frozen control worker (live upgrade) hands the unread request over with the rest.
        if !self.handover.frozen {
            self.resume_input(idx);
        }
    }

    /// Control worker: reads every peer socket now (before a live upgrade freezes: what the
    /// subscriber workers passed before they froze is served, or travels, not lost).
    pub(super) fn drain_moves(&mut self) {
        self.accept_movers();
        let tokens: Vec<Token> = match &self.publish_moves {
            PublishMoves::Receiver { peers, .. } => (0..peers.len())
                .filter(|&i| peers[i].is_some())
                .map(|i| Token(PEER_BASE - i))
                .collect(),
            PublishMoves::Sender { .. } => return,
        };
        for token in tokens {
            self.receive_moves(token);
        }
    }
}
