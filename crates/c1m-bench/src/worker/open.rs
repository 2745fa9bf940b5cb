//! Opening connections: the open-model ramp schedule and due reconnects, the socket (source
//! address, IP_BIND_ADDRESS_NO_PORT, per-socket port range), the non-blocking connect and its
//! completion, the subscribe request, and the moment a connection counts as online.

use super::conn::{Conn, Spill, State};
use super::Worker;
use crate::delivery::ConnDelivery;
use crate::errors::{bump, io_kind};
use crate::hist::record;
use crate::payload::now_us;
use crate::proto::{self, Phase, Proto};
use crate::storm;
use crate::template::expand;
use mio::net::TcpStream;
use mio::{Interest, Token};
use socket2::{Domain, Socket, Type};
use std::cmp::Reverse;
use std::io;
use std::net::SocketAddr;

impl Worker {
    /// Starts first attempts that are due by the open-model schedule, and reconnects.
    pub(super) fn start_due(&mut self) {
        let now = self.mono_us();
        while self.next < self.cfg.conns && self.inflight < self.cfg.max_inflight {
            let due = if self.cfg.rate > 0.0 {
                (self.next as f64 * 1e6 / self.cfg.rate) as u64
            } else {
                now
            };
            if due > now {
                break;
            }
            let global = (self.cfg.first_conn + self.next) as u32;
            self.next += 1;
            self.first_unresolved += 1;
            let key = self.conns.insert(Conn {
                stream: None,
                tls: None,
                gen: 0,
                global,
                state: State::Backoff,
                phase: Phase::Head,
                attempts: 0,
                first: true,
                due_us: due,
                last_id: 0,
                delivery: ConnDelivery::default(),
                storm: 0,
                resub_ms: 0,
                pending: Spill::default(),
                out: Spill::default(),
                h2: None,
            });
            self.start(key, due);
        }
        while self.inflight < self.cfg.max_inflight {
            match self.backoff.peek() {
                Some(Reverse((due, _, _))) if *due <= now => {}
                _ => break,
            }
            let Some(Reverse((due, key, gen))) = self.backoff.pop() else {
                break;
            };
            if matches!(self.conns.get(key), Some(c) if c.gen == gen && c.state == State::Backoff) {
                self.start(key, due);
            }
        }
    }

    pub(super) fn open_socket(&mut self, global: u32) -> io::Result<TcpStream> {
        let dst = self.cfg.dst;
        let sock = Socket::new(
            Domain::for_address(dst),
            Type::STREAM.nonblocking().cloexec(),
            None,
        )?;
        // Per-socket port range (IPv4; the coordinator enables it only where the kernel has
        // it, so a failure here is unexpected and counted once).
        if let (Some((lo, hi)), true) = (self.cfg.port_range, dst.is_ipv4()) {
            if let Err(e) = c1m_sys::sockopt::set_local_port_range(&sock, lo, hi) {
                if !self.port_range_warned {
                    self.port_range_warned = true;
                    bump(
                        &mut self.r.errors,
                        &format!("IP_LOCAL_PORT_RANGE failed ({})", io_kind(&e)),
                    );
                }
            }
        }
        if !self.cfg.sources.is_empty() {
            let src = self.cfg.sources[global as usize % self.cfg.sources.len()];
            // The option lives at the IP level but also applies to IPv6 binds; an IPv6
            // socket that refuses it still works, just with a port picked at bind time.
            let no_port = c1m_sys::sockopt::set_bind_address_no_port(&sock);
            if src.is_ipv4() {
                no_port?;
            }
            sock.bind(&SocketAddr::new(src, 0).into())?;
        }
        match sock.connect(&dst.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        Ok(TcpStream::from_std(sock.into()))
    }

    pub(super) fn start(&mut self, key: usize, due: u64) {
        self.gen = self.gen.wrapping_add(1);
        let gen = self.gen;
        self.r.attempts += 1;
        let global = match self.conns.get(key) {
            Some(c) => c.global,
            None => return,
        };
        let opened = self.open_socket(global).and_then(|mut s| {
            let token = Token(key | ((gen as usize) << 32));
            self.poll
                .registry()
                .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                .map(|()| s)
        });
        // The session's first flight (ClientHello) goes out with the request once connected.
        let opened = opened.and_then(|s| match &self.tls {
            Some(t) => t.connect().map(|session| (s, Some(Box::new(session)))),
            None => Ok((s, None)),
        });
        match opened {
            Ok((s, tls)) => {
                let Some(c) = self.conns.get_mut(key) else {
                    return;
                };
                c.stream = Some(s);
                c.tls = tls;
                c.gen = gen;
                c.state = State::Connecting;
                c.phase = Phase::Head;
                c.due_us = due;
                c.pending.clear();
                c.out.clear();
                self.inflight += 1;
                self.r.connecting += 1;
                let deadline = self.mono_us() + self.cfg.connect_timeout_ms * 1000;
                self.timeouts.push_back((deadline, key, gen));
            }
            Err(e) => {
                if let Some(c) = self.conns.get_mut(key) {
                    c.gen = gen;
                    c.state = State::Connecting;
                }
                self.inflight += 1;
                self.r.connecting += 1;
                self.end(key, Some(io_kind(&e)));
            }
        }
    }

    /// Completes a non-blocking connect; false when the connection is gone or still connecting.
    /// A connecting TCP socket turns writable only once the handshake finished or failed, and
    /// SO_ERROR tells which; so a writable event needs no getpeername() (one syscall less per
    /// connection). Any other event (e.g. a bare readable) is checked with getpeername().
    pub(super) fn finish_connect(&mut self, key: usize, writable: bool) -> bool {
        let Some(c) = self.conns.get_mut(key) else {
            return false;
        };
        let Some(s) = c.stream.as_ref() else {
            return false;
        };
        match s.take_error() {
            Ok(Some(e)) | Err(e) => {
                self.end(key, Some(io_kind(&e)));
                return false;
            }
            Ok(None) => {}
        }
        if !writable {
            match s.peer_addr() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return false,
                Err(e) => {
                    self.end(key, Some(io_kind(&e)));
                    return false;
                }
            }
        }
        let now = self.epoch.elapsed().as_micros() as u64;
        record(&mut self.connect_h, now.saturating_sub(c.due_us));
        self.r.connected += 1;
        let proto = self.cfg.proto;
        match proto {
            Proto::Connect => {
                c.state = State::Online;
                self.went_online(key, now);
            }
            _ => {
                let ch = c.global % self.cfg.channels.max(1);
                let last_id = (c.last_id != 0).then_some(c.last_id);
                if c.storm & storm::DROPPED != 0 {
                    c.resub_ms = (now / 1000).min(u64::from(u32::MAX)) as u32;
                    if last_id.is_none() {
                        // Nothing to resume from: counted, so the report can say so.
                        self.r.storm.reconnects_without_id += 1;
                        c.storm |= storm::NO_ID;
                    } else {
                        c.storm &= !storm::NO_ID;
                    }
                }
                let (gen, global) = (c.gen, c.global);
                let req = if self.cfg.h2_streams > 0 {
                    self.h2_requests(key)
                } else {
                    self.request(global, ch, last_id, gen)
                };
                let Some(c) = self.conns.get_mut(key) else {
                    return false;
                };
                c.out.put(req);
                if proto == Proto::Poll {
                    c.state = State::Online;
                    self.went_online(key, now);
                } else {
                    c.state = State::Subscribing;
                }
                return self.flush(key);
            }
        }
        true
    }

    /// The subscribe request of connection `global` (channel `ch`), templates expanded.
    pub(super) fn request(&self, global: u32, ch: u32, last_id: Option<u64>, gen: u32) -> Vec<u8> {
        let name = self.cfg.channel_name(ch);
        let index = global.to_string();
        let vars = [("ch", name.as_str()), ("i", index.as_str())];
        let path = expand(&self.cfg.path_template, &vars);
        let extra = expand(&self.cfg.header_template, &vars);
        let key = proto::ws_key(u64::from(gen) ^ ((self.cfg.index as u64) << 40));
        proto::subscribe_request(&proto::SubscribeRequest {
            wire: self.cfg.proto.wire(),
            host: &self.cfg.host,
            path: &path,
            channel: &name,
            last_id,
            ws_key: &key,
            extra_headers: &extra,
        })
    }

    pub(super) fn went_online(&mut self, key: usize, now_mono: u64) {
        self.inflight = self.inflight.saturating_sub(1);
        self.r.connecting = self.r.connecting.saturating_sub(1);
        self.r.online += 1;
        self.r.subscribed += 1;
        self.r.peak_online = self.r.peak_online.max(self.r.online);
        if let Some(c) = self.conns.get_mut(key) {
            if c.first {
                c.first = false;
                self.first_unresolved = self.first_unresolved.saturating_sub(1);
            }
            c.attempts = 0;
            record(&mut self.subscribe_h, now_mono.saturating_sub(c.due_us));
            // A storm keeps the first window open across reconnects (see crate::storm).
            let keep_window = self.cfg.keeps_windows() && c.delivery.window_start_us != 0;
            if self.cfg.proto != Proto::Poll && !keep_window {
                c.delivery.window_start_us = now_us();
            }
            if c.storm & storm::DROPPED != 0 {
                c.storm = storm::BACK | (c.storm & storm::NO_ID);
                self.r.storm.back += 1;
                let since = now_us().saturating_sub(back_reference_us(
                    &self.cfg,
                    self.storm_ref_us,
                    self.wall_epoch_us,
                    c.resub_ms,
                ));
                record(&mut self.storm_back_h, since);
            }
        }
    }
}

/// Where a dropped connection's "back" and "caught up" times count from: a reconnect storm's
/// restart, or (`--churn-resume`, where each client leaves on its own) its own resubscription.
pub(super) fn back_reference_us(
    cfg: &crate::wire::WorkerConfig,
    storm_ref_us: Option<u64>,
    wall_epoch_us: u64,
    resub_ms: u32,
) -> u64 {
    if cfg.storm {
        storm_ref_us.unwrap_or(0)
    } else {
        wall_epoch_us + u64::from(resub_ms) * 1000
    }
}
