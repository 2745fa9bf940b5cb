//! Admission at the listeners: accept until the backlog is empty, refuse what is over a limit
//! (max connections, per-IP limits) with an answer the client can read, back off after a
//! descriptor shortage instead of spinning, and give each admitted connection its slot, its
//! epoll registration, its TLS session and its request-head timer.

use super::conn::{self, Conn, Kind};
use super::ip_limits;
use super::{token_of, Worker, ADMIN_LISTENER, HTTP_LISTENER, TCP_LISTENER};
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::io::{self, Read};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The answer to an HTTP connection over `--max-conns` (a worker's share of it).
pub(super) const MAX_CONNS_ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 26\r\nConnection: close\r\n\r\nserver at max connections\n";

/// How long accept() pauses after EMFILE/ENFILE (no busy spin; existing connections go on).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

impl Worker {
    pub(super) fn accept_all(&mut self, which: Token) {
        if self.accept_paused_until.is_some()
            || self.shutdown_deadline.is_some()
            || self.handover.frozen
        {
            return;
        }
        loop {
            let listener = match which {
                HTTP_LISTENER => self.http_listener.as_ref(),
                ADMIN_LISTENER => self.admin_listener.as_ref(),
                _ => self.tcp_listener.as_ref(),
            };
            let Some(listener) = listener else { return };
            match listener.accept() {
                Ok((stream, peer)) => {
                    self.admit(stream, peer, which == TCP_LISTENER, which == ADMIN_LISTENER)
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if is_fd_exhaustion(&e) => {
                    // The backlog keeps the waiting connections; retry after a pause instead of
                    // spinning on an edge that will not fire again.
                    self.counters.refused.fd_limit += 1;
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
                Err(e)
                    if e.kind() == io::ErrorKind::Interrupted
                        || e.kind() == io::ErrorKind::ConnectionAborted => {}
                Err(e) => {
                    if let Some(held_back) = self.accept_errors.allow(Instant::now()) {
                        tracing::warn!(error = %e, held_back, "accept failed; pausing accepts");
                    }
                    self.accept_paused_until = Some(Instant::now() + ACCEPT_BACKOFF);
                    return;
                }
            }
        }
    }

    pub(super) fn admit(
        &mut self,
        mut stream: TcpStream,
        peer: SocketAddr,
        raw_tcp: bool,
        admin: bool,
    ) {
        // The admin listener stays plain HTTP unless --admin-tls: scrapers and health checks
        // on a private address speak http://.
        let tls = self.conns.tls.enabled() && (!admin || self.cfg.admin_tls);
        if self.conns.len() >= self.max_conns {
            self.counters.refused.max_conns += 1;
            let msg: &[u8] = if raw_tcp {
                b"ERR server at max connections\n"
            } else {
                MAX_CONNS_ANSWER
            };
            // A TLS client would take plaintext for a broken record: it is only closed.
            if !tls {
                let _ = io::Write::write(&mut stream, msg);
            }
            return;
        }
        // The admin listener is for monitoring and the application's publishers, not the
        // public: a scraper polling /metrics must never get the per-IP 429.
        let ip_limits = self.ip_limits.as_ref().filter(|_| !admin);
        let ip_slot = match ip_limits.map(|l| l.admit(peer.ip())) {
            None => 0,
            Some(Ok(slot)) => slot,
            Some(Err(refusal)) => {
                let r = &mut self.counters.refused;
                match refusal {
                    ip_limits::Refusal::Conns => r.per_ip_conns += 1,
                    ip_limits::Refusal::Rate { .. } => r.per_ip_rate += 1,
                }
                if tls {
                    return; // closed: a plaintext answer means nothing to a TLS client
                }
                return refuse_at_accept(stream, &refusal.response(raw_tcp));
            }
        };
        let generation = self.conns.next_generation();
        let kind = if raw_tcp {
            Kind::TcpCommand
        } else {
            Kind::Http
        };
        let idx = self.conns.vacant_slot();
        let token = token_of(idx, generation);
        // Keepalive and TCP_USER_TIMEOUT come from the listener (see `keepalive`).
        let mut conn = Conn::new(stream, generation, kind);
        if admin {
            conn.edge |= conn::ADMIN;
        }
        if !self.register_new(&mut conn, token, ip_slot) {
            return;
        }
        if let Err(e) = tls.then(|| self.conns.tls.begin(idx, raw_tcp)).transpose() {
            if let Some(held_back) = self.socket_errors.allow(Instant::now()) {
                tracing::warn!(error = %e, held_back, "starting a TLS session failed");
            }
            let _ = self.poll.registry().deregister(&mut conn.stream);
            if let Some(limits) = &self.ip_limits {
                limits.release(ip_slot);
            }
            return;
        }
        self.conns.insert(conn);
        if let Some(limits) = &mut self.ip_limits {
            limits.hold(idx, ip_slot);
        }
        // On a TLS port this also bounds the handshake.
        self.arm_head_timer(idx);
        self.give_up_cpu_if_full();
    }

    /// Registers a new connection's socket under `token` for readiness; on failure (logged)
    /// the per-address place `ip_slot` is given back and false returned: the socket closes
    /// with `conn`.
    pub(super) fn register_new(&mut self, conn: &mut Conn, token: u64, ip_slot: u32) -> bool {
        let Err(e) = self.poll.registry().register(
            &mut conn.stream,
            Token(token as usize),
            Interest::READABLE | Interest::WRITABLE,
        ) else {
            return true;
        };
        if let Some(held_back) = self.socket_errors.allow(Instant::now()) {
            tracing::warn!(error = %e, held_back, "registering a connection failed");
        }
        if let Some(limits) = &self.ip_limits {
            limits.release(ip_slot);
        }
        false
    }
}

/// Answers a connection refused before it got a slot, then closes it. What the client already
/// sent is read first (once, without waiting): closing with unread input makes the kernel send
/// a reset, which can destroy the answer before the client reads it.
pub(super) fn refuse_at_accept(mut stream: TcpStream, answer: &[u8]) {
    let mut sink = [0u8; 4096];
    for _ in 0..4 {
        match stream.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    let _ = io::Write::write(&mut stream, answer);
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}
