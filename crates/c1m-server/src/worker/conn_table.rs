//! The worker's connection table: every connection and everything kept about it. It owns
//! - the slab of [`Conn`]s: a token is slot index + generation, so an event for a reused slot
//!   is recognised as stale and dropped (nginx's instance bit);
//! - the sparse side maps, keyed by token, for what only a few connections hold at a time
//!   (a chunked replay, a chunked request body, CORS headers owed, a publish awaiting its
//!   ack, a dashboard stream, the user a token named): kept out of `Conn` so an idle
//!   anonymous subscriber pays nothing for them;
//! - the TLS sessions, by slot, lent with the connection ([`ConnMut`]) to its byte paths;
//! - the HTTP/2 codecs and streams (`h2_streams`), lent the same way to a stream's slot.
//!
//! [`ConnTable::remove`] is the one way out: it drops all of a connection's state at once, so
//! no map keeps an entry for a connection that is gone.

use super::conn::{Conn, ConnMut, H2_STREAM};
use super::h2_streams::H2State;
use super::tls_session;
use c1m_proto::chunked::Progress;
use slab::Slab;
use std::collections::HashMap;
use std::net::IpAddr;
use std::rc::Rc;

/// Generations count up to here, then start over at 1 (0 is never a live generation, and
/// tokens stay below the listener and link tokens at the top of the range).
const LAST_GENERATION: u32 = 0x7fff_fff0;

/// A connection's token: its slot in the low 32 bits, its generation in the high ones.
pub fn token_of(idx: usize, generation: u32) -> u64 {
    (u64::from(generation) << 32) | idx as u64
}

/// A token's slot and generation.
pub fn slot_of(token: u64) -> (usize, u32) {
    ((token & 0xffff_ffff) as usize, (token >> 32) as u32)
}

pub struct ConnTable {
    slab: Slab<Conn>,
    next_generation: u32,
    /// Connections in the middle of a chunked replay: `Some(id)` = ask for the chunk after
    /// `id` once the socket has taken the last one; `None` = asked, waiting.
    pub replays: HashMap<u64, Option<u64>>,
    /// Connections in the middle of a chunked request body: where the decoder stopped, so the
    /// next read resumes there instead of rescanning every chunk.
    pub chunked_bodies: HashMap<u64, Progress>,
    /// Connections whose next answer carries CORS headers (a subscribe or publish from an
    /// allowed Origin, until its response head is written).
    pub cors_pending: HashMap<u64, Rc<str>>,
    /// Publish requests waiting for the master's answer: when each was parsed (monotonic µs),
    /// for the publish-ack histogram.
    pub publish_started: HashMap<u64, u64>,
    /// Peer addresses of connections that published or called the API, asked of the socket
    /// once ([`ConnTable::peer_ip`]): the publish rule needs it for every request, and a
    /// keep-alive publisher would pay a `getpeername` per publish. Kept here rather than in
    /// [`Conn`], which every idle subscriber pays for.
    peer_ips: HashMap<u64, IpAddr>,
    /// `/dashboard/events` streams, at most `dashboard::MAX_VIEWERS`.
    pub dashboards: Vec<u64>,
    /// The TLS sessions and the configurations new ones start from.
    pub tls: tls_session::Sessions,
    /// Connections that showed a token with a `sub`: whose they are ([`ConnTable::set_user`]).
    users: HashMap<u64, Rc<str>>,
    /// The same, by user: each user's connections, for the server API's calls by user id.
    by_user: HashMap<Rc<str>, Vec<u64>>,
    /// HTTP/2 connections and their streams (empty unless a client speaks HTTP/2).
    pub h2: H2State,
}

impl ConnTable {
    /// A table whose slab has room for `slots` connections before it grows.
    pub fn with_capacity(slots: usize) -> ConnTable {
        ConnTable {
            slab: Slab::with_capacity(slots),
            next_generation: 1,
            replays: HashMap::new(),
            chunked_bodies: HashMap::new(),
            cors_pending: HashMap::new(),
            publish_started: HashMap::new(),
            peer_ips: HashMap::new(),
            dashboards: Vec::new(),
            tls: tls_session::Sessions::default(),
            users: HashMap::new(),
            by_user: HashMap::new(),
            h2: H2State::default(),
        }
    }

    /// The connection `token` belongs to `user` (its token's `sub`). A connection has one user
    /// for its life: a later call (a keep-alive connection's next long-poll) with another
    /// user moves it.
    pub fn set_user(&mut self, token: u64, user: &str) {
        if self.users.get(&token).is_some_and(|u| &**u == user) {
            return;
        }
        self.forget_user(token);
        let user: Rc<str> = match self.by_user.get_key_value(user) {
            Some((shared, _)) => Rc::clone(shared),
            None => Rc::from(user),
        };
        self.by_user
            .entry(Rc::clone(&user))
            .or_default()
            .push(token);
        self.users.insert(token, user);
    }

    /// The user of the connection `token`, if its token named one.
    pub fn user_of(&self, token: u64) -> Option<&str> {
        self.users.get(&token).map(|u| &**u)
    }

    /// The tokens of `user`'s connections (a snapshot: acting on them may close some).
    pub fn tokens_of_user(&self, user: &str) -> Vec<u64> {
        self.by_user.get(user).cloned().unwrap_or_default()
    }

    /// How many connections have a user, and how many distinct users they belong to.
    pub fn user_counts(&self) -> (usize, usize) {
        (self.users.len(), self.by_user.len())
    }

    fn forget_user(&mut self, token: u64) {
        let Some(user) = self.users.remove(&token) else {
            return;
        };
        if let Some(tokens) = self.by_user.get_mut(&user) {
            tokens.retain(|&t| t != token);
            if tokens.is_empty() {
                self.by_user.remove(&user);
            }
        }
    }

    /// The peer address of the connection in slot `idx`, from the socket the first time and
    /// from memory after; None when the socket cannot say (it is already gone).
    pub fn peer_ip(&mut self, idx: usize) -> Option<IpAddr> {
        let conn = self.slab.get(idx)?;
        let token = token_of(idx, conn.generation);
        if let Some(&ip) = self.peer_ips.get(&token) {
            return Some(ip);
        }
        let ip = conn.stream.peer_addr().ok()?.ip();
        self.peer_ips.insert(token, ip);
        Some(ip)
    }

    /// The generation for the next new connection.
    pub fn next_generation(&mut self) -> u32 {
        let generation = self.next_generation;
        self.next_generation = if generation >= LAST_GENERATION {
            1
        } else {
            generation + 1
        };
        generation
    }

    /// The generation the next connection gets (not taken).
    pub fn peek_next_generation(&self) -> u32 {
        self.next_generation
    }

    /// A live upgrade's new worker counts on from its predecessor's `next` generation.
    pub fn continue_generations(&mut self, next: u64) {
        if let Ok(next) = u32::try_from(next) {
            if (1..=LAST_GENERATION).contains(&next) && next > self.next_generation {
                self.next_generation = next;
            }
        }
    }

    /// The slot the next [`ConnTable::insert`] fills (a TLS session is started for it first).
    pub fn vacant_slot(&self) -> usize {
        self.slab.vacant_key()
    }

    /// Tokens for connections handed over by a live upgrade, in order: each the token it had
    /// (`wanted`) when that is a real token whose slot is free here and near the slab's size,
    /// else a free slot with the next generation. Nothing is inserted yet
    /// ([`ConnTable::insert_placed`] does); later generations start past every one used.
    pub fn place(&mut self, wanted: &[Option<u64>]) -> Vec<u64> {
        // A slot far past anything the old worker can have held would make the slab that big.
        let limit = self.slab.capacity().max(self.slab.len() + wanted.len()) * 2 + 1024;
        let mut taken: std::collections::HashSet<usize> =
            self.slab.iter().map(|(i, _)| i).collect();
        let mut kept = vec![false; wanted.len()];
        for (i, w) in wanted.iter().enumerate() {
            if let Some(token) = *w {
                let (idx, generation) = slot_of(token);
                if (1..=LAST_GENERATION).contains(&generation) && idx < limit && taken.insert(idx) {
                    kept[i] = true;
                    if generation >= self.next_generation {
                        self.next_generation = if generation >= LAST_GENERATION {
                            1
                        } else {
                            generation + 1
                        };
                    }
                }
            }
        }
        let mut free = 0usize;
        wanted
            .iter()
            .zip(kept)
            .map(|(w, kept)| match (w, kept) {
                (Some(token), true) => *token,
                _ => {
                    while taken.contains(&free) {
                        free += 1;
                    }
                    taken.insert(free);
                    token_of(free, self.next_generation())
                }
            })
            .collect()
    }

    /// Inserts connections at the slots [`ConnTable::place`] chose (the slab is rebuilt once
    /// around them, keeping its capacity).
    pub fn insert_placed(&mut self, conns: Vec<(usize, Conn)>) {
        if conns.is_empty() {
            return;
        }
        let capacity = self.slab.capacity();
        let old = std::mem::take(&mut self.slab);
        self.slab = old.into_iter().chain(conns).collect();
        self.slab.reserve(capacity.saturating_sub(self.slab.len()));
    }

    /// Adds a connection; returns its slot.
    pub fn insert(&mut self, conn: Conn) -> usize {
        self.slab.insert(conn)
    }

    /// Removes a connection and everything kept about it (side-map entries, TLS session: an
    /// established one says close_notify first). The caller gets the connection back to
    /// leave its channels and deregister its socket; dropping it closes the socket.
    pub fn remove(&mut self, idx: usize) -> Option<Conn> {
        let mut conn = self.slab.try_remove(idx)?;
        let token = token_of(idx, conn.generation);
        // Each map is empty for almost every connection: a hash is only computed when not.
        if !self.replays.is_empty() {
            self.replays.remove(&token);
        }
        if !self.chunked_bodies.is_empty() {
            self.chunked_bodies.remove(&token);
        }
        if !self.cors_pending.is_empty() {
            self.cors_pending.remove(&token);
        }
        if !self.publish_started.is_empty() {
            self.publish_started.remove(&token);
        }
        if !self.peer_ips.is_empty() {
            self.peer_ips.remove(&token);
        }
        if !self.dashboards.is_empty() {
            self.dashboards.retain(|&t| t != token);
        }
        if !self.users.is_empty() {
            self.forget_user(token);
        }
        if !self.h2.is_empty() {
            self.h2.remove(token);
        }
        self.tls.end(idx, &mut conn.stream);
        Some(conn)
    }

    /// Writes what the HTTP/2 connection in `idx` has in its codec's output (TLS ciphertext
    /// owed goes first). Ok(true) when all is written; Ok(false): the socket is full, the
    /// writable event resumes.
    pub fn write_h2(&mut self, idx: usize) -> std::io::Result<bool> {
        let Some(conn) = self.slab.get_mut(idx) else {
            return Ok(true);
        };
        let token = token_of(idx, conn.generation);
        let Some(p) = self.h2.parents.get_mut(&token) else {
            return Ok(true);
        };
        p.dirty = false;
        self.h2.codec.add(&p.conn.take_counters());
        let mut io = ConnMut::new(conn, self.tls.io(idx));
        if !io.flush_tls()? {
            return Ok(false);
        }
        while !p.conn.output().is_empty() {
            let len = p.conn.output().len();
            let n = io.write_now(p.conn.output())?;
            p.conn.advance(n);
            if n < len || io.owes_tls() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    pub fn get(&self, idx: usize) -> Option<&Conn> {
        self.slab.get(idx)
    }

    /// The connection in `idx` with its TLS session, for reading and sending.
    pub fn get_mut(&mut self, idx: usize) -> Option<ConnMut<'_>> {
        let conn = self.slab.get_mut(idx)?;
        if conn.edge & H2_STREAM != 0 {
            let token = token_of(idx, conn.generation);
            return Some(ConnMut::stream(conn, self.h2.io(token)));
        }
        Some(ConnMut::new(conn, self.tls.io(idx)))
    }

    /// [`ConnTable::get_mut`] for a slot known to be live (panics otherwise, like indexing).
    pub fn at(&mut self, idx: usize) -> ConnMut<'_> {
        self.get_mut(idx).expect("live connection slot")
    }

    /// The connection a token names, unless the token is stale (its slot was freed or reused).
    pub fn by_token(&mut self, token: u64) -> Option<(usize, ConnMut<'_>)> {
        let idx = (token & 0xffff_ffff) as usize;
        let generation = (token >> 32) as u32;
        match self.get_mut(idx) {
            Some(c) if c.generation == generation => Some((idx, c)),
            _ => None,
        }
    }

    /// The token of the connection in `idx`.
    pub fn token(&self, idx: usize) -> u64 {
        token_of(idx, self.slab[idx].generation)
    }

    pub fn contains(&self, idx: usize) -> bool {
        self.slab.contains(idx)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    pub fn iter(&self) -> slab::Iter<'_, Conn> {
        self.slab.iter()
    }

    /// Every occupied slot, in order (a snapshot: handlers may close connections meanwhile).
    pub fn slots(&self) -> Vec<usize> {
        self.slab.iter().map(|(i, _)| i).collect()
    }

    /// One past the highest occupied slot: where a periodic pass ends (sweep.rs).
    pub fn slots_end(&self) -> usize {
        self.slab.iter().next_back().map_or(0, |(idx, _)| idx + 1)
    }
}

impl std::ops::Index<usize> for ConnTable {
    type Output = Conn;
    fn index(&self, idx: usize) -> &Conn {
        &self.slab[idx]
    }
}

impl std::ops::IndexMut<usize> for ConnTable {
    fn index_mut(&mut self, idx: usize) -> &mut Conn {
        &mut self.slab[idx]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::conn::Kind;

    fn accepted(listener: &std::net::TcpListener) -> (mio::net::TcpStream, std::net::TcpStream) {
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (mio::net::TcpStream::from_std(server), client)
    }

    #[test]
    fn remove_drops_every_side_entry_and_a_stale_token_finds_nothing() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut table = ConnTable::with_capacity(4);
        let (a, _pa) = accepted(&listener);
        let (b, _pb) = accepted(&listener);
        let ga = table.next_generation();
        let ia = table.insert(Conn::new(a, ga, Kind::Http));
        let gb = table.next_generation();
        let ib = table.insert(Conn::new(b, gb, Kind::Http));
        let (ta, tb) = (token_of(ia, ga), token_of(ib, gb));
        for t in [ta, tb] {
            table.replays.insert(t, Some(1));
            table.chunked_bodies.insert(t, Progress::default());
            table.cors_pending.insert(t, Rc::from("x"));
            table.publish_started.insert(t, 1);
            table.dashboards.push(t);
        }
        table.set_user(ta, "ann");
        table.set_user(tb, "ann");
        assert_eq!(table.by_user["ann"], [ta, tb]);
        let loopback = Some(std::net::Ipv4Addr::LOCALHOST.into());
        assert_eq!(table.peer_ip(ia), loopback, "asked of the socket");
        assert_eq!(table.peer_ip(ib), loopback);
        assert_eq!(table.peer_ips.len(), 2, "kept for the next request");
        assert!(table.remove(ia).is_some());
        assert!(table.remove(ia).is_none(), "removed once");
        assert_eq!(table.replays.keys().collect::<Vec<_>>(), [&tb]);
        assert_eq!(table.chunked_bodies.len(), 1);
        assert_eq!(table.cors_pending.len(), 1);
        assert_eq!(table.publish_started.len(), 1);
        assert_eq!(table.peer_ips.keys().collect::<Vec<_>>(), [&tb]);
        assert_eq!(table.dashboards, [tb]);
        assert_eq!(table.by_user["ann"], [tb]);
        assert_eq!(table.user_of(ta), None);
        // The slot is reused with a new generation: the old token is stale.
        let (c, _pc) = accepted(&listener);
        let gc = table.next_generation();
        assert_eq!(table.insert(Conn::new(c, gc, Kind::Http)), ia);
        assert!(table.by_token(ta).is_none());
        assert!(table.by_token(token_of(ia, gc)).is_some());
        assert_eq!(table.slots(), [ia, ib]);
        assert_eq!(table.slots_end(), 2);
    }

    #[test]
    fn a_user_is_listed_once_per_connection_and_forgotten_with_its_last() {
        let mut table = ConnTable::with_capacity(0);
        table.set_user(1, "ann");
        table.set_user(1, "ann");
        table.set_user(2, "ann");
        assert_eq!(table.by_user["ann"], [1, 2]);
        assert_eq!(table.user_counts(), (2, 1));
        // A keep-alive connection's next token names someone else: it moves.
        table.set_user(1, "bob");
        assert_eq!(table.by_user["ann"], [2]);
        assert_eq!(table.by_user["bob"], [1]);
        assert_eq!(table.user_of(1), Some("bob"));
        table.forget_user(2);
        assert!(!table.by_user.contains_key("ann"));
        assert_eq!(table.user_counts(), (1, 1));
    }

    #[test]
    fn handed_over_connections_keep_their_tokens_and_later_ones_do_not_collide() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut table = ConnTable::with_capacity(8);
        // Slot 5 of generation 40, slot 0 of generation 7; then a token whose slot the first
        // took, a generation 0 (no token) and none at all: those three get free slots.
        let wanted = [
            Some(token_of(5, 40)),
            Some(token_of(0, 7)),
            Some(token_of(5, 9)),
            Some(token_of(1, 0)),
            None,
        ];
        let tokens = table.place(&wanted);
        assert_eq!(tokens[..2], [token_of(5, 40), token_of(0, 7)]);
        let fresh: Vec<(usize, u32)> = tokens[2..].iter().map(|&t| slot_of(t)).collect();
        assert_eq!(
            fresh.iter().map(|s| s.0).collect::<Vec<_>>(),
            [1, 2, 3],
            "free slots, not 0 or 5"
        );
        assert!(
            fresh.iter().all(|s| s.1 > 40),
            "generations past every kept one"
        );
        let mut clients = Vec::new();
        let placed = tokens
            .iter()
            .map(|&t| {
                let (stream, client) = accepted(&listener);
                clients.push(client);
                let (idx, generation) = slot_of(t);
                (idx, Conn::new(stream, generation, Kind::Sse))
            })
            .collect();
        table.insert_placed(placed);
        for &t in &tokens {
            assert!(table.by_token(t).is_some(), "{t:x}");
        }
        assert!(table.slab.capacity() >= 8);
        // The next connection takes the gap at 4, with a generation of its own.
        let (d, _pd) = accepted(&listener);
        let g = table.next_generation();
        assert_eq!(table.insert(Conn::new(d, g, Kind::Http)), 4);
        assert!(!tokens.contains(&token_of(4, g)));
        // A slot absurdly far out is not honoured (the slab would grow to it).
        let far = table.place(&[Some(token_of(1 << 30, 3))]);
        assert!(slot_of(far[0]).0 < 1024, "{:x}", far[0]);
    }

    #[test]
    fn generations_start_over_before_the_reserved_tokens() {
        let mut table = ConnTable::with_capacity(0);
        table.next_generation = LAST_GENERATION;
        assert_eq!(table.next_generation(), LAST_GENERATION);
        assert_eq!(table.next_generation(), 1);
    }
}
