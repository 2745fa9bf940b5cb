//! Live upgrade, worker side (docs/upgrade.md): the old worker freezes (no accepts, no client
//! input, no timers or heartbeats), sends its listeners and every connection — descriptor plus a
//! [`ConnRecord`] — to the new worker of the same index over a SEQPACKET socket, and waits for
//! the master's commit or abort; the new worker receives them, rebuilds its slab and channel
//! lists, and serves once the old one says commit. Until then neither side writes to a client,
//! so whichever way it ends, every byte goes out exactly once.

use super::conn::{Conn, Kind, WsMessage, H2_STREAM};
use super::conn_events::ReadUntil;
use super::{token_of, Worker, ADMIN_LISTENER, HTTP_LISTENER, TCP_LISTENER};
use crate::ipc::ToMaster;
use anyhow::{bail, Context};
use c1m_proto::handover::{self, ConnRecord, Pair};
use c1m_sys::fd_passing;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Token};
use socket2::Socket;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Set in a worker the new master starts: the abstract socket name of its predecessor.
pub const ENV_HANDOVER: &str = "C1M_WORKER_HANDOVER";
/// How long the new worker may take to connect and receive (ms).
pub const ENV_HANDOVER_TIMEOUT: &str = "C1M_WORKER_HANDOVER_TIMEOUT_MS";
/// Test hook (serve_upgrade's crash test): a file holding a number N; while it exists, a new
/// worker aborts once it has received N connections, i.e. mid-hand-over.
pub const ENV_TEST_CRASH_FILE: &str = "C1M_TEST_UPGRADE_CRASH_FILE";

/// The abstract socket on which old worker `i` of master `old_master` hands over.
pub fn handover_name(old_master: u32, i: usize) -> String {
    format!("c1m-handover-{old_master}-{i}")
}

/// Where a frozen worker is in the hand-over.
#[derive(Default)]
pub struct HandOver {
    /// Accepts, client input, timers and heartbeats are stopped.
    pub frozen: bool,
    /// Everything went to the new worker: not a byte more to any client from here; the pair
    /// socket waits for the commit or abort to pass on.
    pub sent: Option<Socket>,
    /// Master frames read while waiting for the new worker to connect (handled afterwards,
    /// in order).
    pub stashed: Vec<crate::ipc::ToWorker>,
}

/// What a new worker received from its predecessor.
pub struct Taken {
    pub listeners: Vec<(u8, OwnedFd)>,
    pub conns: Vec<(ConnRecord, OwnedFd)>,
    /// The old worker's next connection generation (None from a binary that does not send it).
    pub next_generation: Option<u64>,
    pub pair: Socket,
}

fn recv(pair: &Socket, buf: &mut [u8]) -> anyhow::Result<(Pair, Vec<OwnedFd>)> {
    let (n, fds) =
        fd_passing::recv_with_fds(pair, buf).context("receiving from the other worker")?;
    if n == 0 {
        bail!("the other worker closed the hand-over socket");
    }
    let msg = Pair::decode(&buf[..n]).context("hand-over message")?;
    Ok((msg, fds))
}

fn send(pair: &Socket, msg: &Pair, fds: &[RawFd]) -> anyhow::Result<()> {
    fd_passing::send_with_fds(pair, &msg.encode(), fds).context("sending to the other worker")
}

impl Worker {
    /// `HandOverPrepare`: stop everything that would read from or write to a client of our
    /// own accord; answers and messages the master still owes are delivered (they are on the
    /// link before its `HandOverGo`).
    pub(super) fn handover_prepare(&mut self) {
        // Messages already queued for local subscribers go out (or into their connections'
        // unsent bytes, which travel) before anything is frozen: the new worker never sees
        // this worker's fan-out queue.
        self.finish_fan_outs();
        // Publishes the subscriber workers passed before they froze are served first.
        self.drain_moves();
        tracing::info!(conns = self.conns.len(), "upgrade: worker frozen");
        // Presence changes are requests too: on the link before `HandOverPrepared`.
        self.flush_presence();
        self.handover.frozen = true;
        self.send_to_master(ToMaster::HandOverPrepared);
    }

    /// `HandOverGo`: hand everything to the new worker. On failure the worker serves on.
    pub(super) fn handover_go(&mut self, name: &str, new_master: u32, timeout: Duration) {
        let started = Instant::now();
        // Anything the master sent between Prepare and Go goes out; publishes passed since the
        // freeze travel with the rest, their requests unread.
        self.finish_fan_outs();
        self.drain_moves();
        match self.send_everything(name, new_master, timeout) {
            Ok((pair, conns)) => {
                tracing::info!(
                    conns,
                    took_ms = started.elapsed().as_millis() as u64,
                    "upgrade: connections handed over; waiting for commit"
                );
                self.handover.sent = Some(pair);
                // Closes noted this turn reach the master before it hears the rest moved.
                self.flush_lifecycle();
                self.send_to_master(ToMaster::HandOverSent {
                    conns: conns as u64,
                });
            }
            Err(e) => {
                let reason = format!("{e:#}");
                tracing::error!(error = %reason, "upgrade: hand-over failed; serving on");
                self.send_to_master(ToMaster::HandOverFailed { reason });
                self.handover_resume();
            }
        }
    }

    fn send_everything(
        &mut self,
        name: &str,
        new_master: u32,
        timeout: Duration,
    ) -> anyhow::Result<(Socket, usize)> {
        let deadline = Instant::now() + timeout;
        // Accept in short slices: between them the master may have called the upgrade off
        // (the new master or another worker failed), and this worker must thaw at once.
        let listener = fd_passing::listen_abstract(name, Duration::from_millis(50))
            .context("hand-over socket")?;
        let (pair, _) = loop {
            match listener.accept() {
                Ok(p) => break p,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e).context("waiting for the new worker to connect"),
            }
            if self.abort_requested()? {
                bail!("called off by the master");
            }
            if Instant::now() >= deadline {
                bail!("timed out waiting for the new worker to connect");
            }
        };
        // Anyone on the host could connect to an abstract name: only a child of the new master
        // gets our connections.
        let peer = fd_passing::peer_pid(&pair)?;
        let parent = fd_passing::parent_of(peer);
        if parent != Some(new_master) {
            bail!("hand-over peer pid {peer} is not a child of the new master {new_master} (parent {parent:?})");
        }
        let left = deadline.saturating_duration_since(Instant::now());
        pair.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
        pair.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
        let mut buf = vec![0u8; handover::MAX_PACKET];
        match recv(&pair, &mut buf)? {
            (Pair::Hello { .. }, _) => {}
            (other, _) => bail!("expected the new worker's hello, got {other:?}"),
        }
        let mut kinds = Vec::new();
        let mut fds = Vec::new();
        for (kind, l) in [
            (handover::LISTENER_HTTP, &self.http_listener),
            (handover::LISTENER_TCP, &self.tcp_listener),
            (handover::LISTENER_ADMIN, &self.admin_listener),
        ] {
            if let Some(l) = l {
                kinds.push(kind);
                fds.push(l.as_raw_fd());
            }
        }
        send(&pair, &Pair::Listeners { kinds }, &fds)?;
        // HTTP/2 connections and their streams are not handed over (the record has no place
        // for a codec's state): they end with this worker and their clients reconnect.
        let idxs: Vec<usize> = self
            .conns
            .slots()
            .into_iter()
            .filter(|&i| self.conns[i].kind != Kind::H2 && self.conns[i].edge & H2_STREAM == 0)
            .collect();
        // At least one batch, even an empty one: it carries the generation count on.
        let batches: Vec<&[usize]> = if idxs.is_empty() {
            vec![&idxs[..]]
        } else {
            idxs.chunks(handover::FDS_PER_BATCH).collect()
        };
        let next_generation = Some(u64::from(self.conns.peek_next_generation()));
        for batch in batches {
            let records = batch
                .iter()
                .map(|&i| self.record_of(i))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let fds: Vec<RawFd> = batch
                .iter()
                .map(|&i| self.conns[i].stream.as_raw_fd())
                .collect();
            let bytes = ConnRecord::encode_batch_with(&records, next_generation);
            for (n, part) in Pair::parts(&bytes).iter().enumerate() {
                send(&pair, part, if n == 0 { &fds } else { &[] })?;
            }
        }
        send(
            &pair,
            &Pair::End {
                conns: idxs.len() as u64,
            },
            &[],
        )?;
        match recv(&pair, &mut buf)? {
            (Pair::Received { conns }, _) if conns == idxs.len() as u64 => {}
            (other, _) => bail!(
                "expected the new worker to confirm {} connections, got {other:?}",
                idxs.len()
            ),
        }
        Ok((pair, idxs.len()))
    }

    /// Reads what the master sent meanwhile: true when it is `HandOverAbort` (other frames are
    /// kept for later, in order).
    fn abort_requested(&mut self) -> anyhow::Result<bool> {
        let mut frames = Vec::new();
        let open = self
            .link
            .read_frames(|f| frames.push(crate::ipc::ToWorker::decode(f)))?;
        let mut abort = false;
        for frame in frames {
            match frame.context("bad frame from master")? {
                crate::ipc::ToWorker::HandOverAbort => abort = true,
                other => self.handover.stashed.push(other),
            }
        }
        if !open {
            bail!("the master closed the link");
        }
        Ok(abort)
    }

    /// One connection's state for its successor.
    fn record_of(&self, idx: usize) -> anyhow::Result<ConnRecord> {
        let conn = &self.conns[idx];
        let token = token_of(idx, conn.generation);
        let timer_ms = match conn.deadline {
            0 => 0,
            d => (u64::from(d.saturating_sub(self.wheel.now())) * super::timers::TICK_MS).max(1),
        };
        let replay_after = match self.conns.replays.get(&token) {
            None => None,
            Some(Some(after)) => Some(*after),
            Some(None) => bail!("a replay chunk is still on its way from the master"),
        };
        Ok(ConnRecord {
            kind: conn.kind.code(),
            keep_alive: conn.keep_alive,
            flags: conn.flags,
            edge: conn.edge,
            timer_ms,
            channels: conn
                .channel_indices()
                .into_iter()
                .filter_map(|c| self.channels.get(c).map(|ch| ch.name.to_string()))
                .collect(),
            inbuf: conn.inbuf().to_vec(),
            out: conn.out().map(|q| q.unsent()).unwrap_or_default(),
            replay_after,
            cors: self.conns.cors_pending.get(&token).map(|c| c.to_string()),
            dashboard: self.conns.dashboards.contains(&token),
            ws_decoder: conn.ws().map(|w| w.decoder.to_bytes()),
            ws_data: conn.ws().map(|w| w.data.clone()).unwrap_or_default(),
            user: self.conns.user_of(token).map(str::to_string),
            info: self.presence.info_of(token).map(str::to_string),
            token: Some(token),
        })
    }

    /// `HandOverCommit`: the new worker serves from now on. Tell it, then leave without
    /// touching a connection (our descriptors close with the process; the new worker's copies
    /// keep every connection open).
    pub(super) fn handover_commit(&mut self) {
        let Some(pair) = self.handover.sent.take() else {
            tracing::warn!("upgrade: commit without a finished hand-over; ignored");
            return;
        };
        if let Err(e) = send(&pair, &Pair::Commit, &[]) {
            // The new worker is gone after taking everything: nothing here can bring the
            // connections back (ours are the same sockets); say so.
            tracing::error!(error = %format!("{e:#}"), "upgrade: passing the commit on failed");
        }
        tracing::info!("upgrade: committed; old worker exits");
        self.h2_part_for_upgrade();
        // What was not handed over (HTTP/2 connections and their streams) ends with this
        // process: the master hears of each close before the link goes.
        for idx in self.conns.slots() {
            let conn = &self.conns[idx];
            if conn.kind == Kind::H2 || conn.edge & H2_STREAM != 0 {
                let token = token_of(idx, conn.generation);
                self.note_close_reason(idx, crate::ipc::CloseReason::ServerShutdown);
                self.report_closed(token);
            }
        }
        self.flush_lifecycle();
        let _ = self.link.flush();
        std::process::exit(0);
    }

    /// `HandOverAbort` (or a failure here): the new worker drops its copies; we serve on.
    pub(super) fn handover_abort(&mut self) {
        let sent = self.handover.sent.take();
        if let Some(pair) = &sent {
            let _ = send(pair, &Pair::Abort, &[]);
        }
        if self.handover.frozen {
            tracing::warn!("upgrade: aborted; serving on");
            self.handover_resume();
        }
        if sent.is_some() {
            // The master forgot these connections when they were sent: it hears of them again.
            self.report_all_resumed();
        }
    }

    /// Back to normal after a freeze. Edge-triggered events that came while frozen were
    /// skipped, so every connection is read and flushed once and the listeners drained.
    fn handover_resume(&mut self) {
        let stashed = std::mem::take(&mut self.handover.stashed);
        self.handover = HandOver {
            stashed,
            ..HandOver::default()
        };
        let tokens: Vec<u64> = self
            .conns
            .iter()
            .map(|(i, c)| token_of(i, c.generation))
            .collect();
        for token in tokens {
            self.on_conn_event(token, true, true, ReadUntil::WouldBlock);
        }
        let waiting: Vec<u64> = self
            .conns
            .replays
            .iter()
            .filter(|(_, after)| after.is_some())
            .map(|(t, _)| *t)
            .collect();
        for token in waiting {
            if let Some((idx, conn)) = self.conns.by_token(token) {
                if !conn.has_out() {
                    self.continue_replay(idx);
                }
            }
        }
        for which in [HTTP_LISTENER, TCP_LISTENER, ADMIN_LISTENER] {
            self.accept_all(which);
        }
    }

    /// New worker: rebuilds the received connections in the slab, channel lists and timer
    /// wheel, registered with epoll (which reports what is already readable or writable).
    /// Nothing is written before the loop starts.
    pub(super) fn restore(
        &mut self,
        conns: Vec<(ConnRecord, OwnedFd)>,
        next_generation: Option<u64>,
    ) -> anyhow::Result<()> {
        // New connections count on from the old worker's generations, and each handed-over
        // one goes back into the slot and generation it had: an id never changes hands.
        if let Some(g) = next_generation {
            self.conns.continue_generations(g);
        }
        let wanted: Vec<Option<u64>> = conns.iter().map(|(rec, _)| rec.token).collect();
        let tokens = self.conns.place(&wanted);
        let mut placed = Vec::with_capacity(conns.len());
        let mut rest = Vec::with_capacity(conns.len());
        for ((mut rec, fd), token) in conns.into_iter().zip(tokens) {
            let kind = Kind::from_code(rec.kind)
                .with_context(|| format!("unknown connection kind {}", rec.kind))?;
            let stream = TcpStream::from_std(std::net::TcpStream::from(fd));
            let (idx, generation) = super::conn_table::slot_of(token);
            let mut conn = Conn::new(stream, generation, kind);
            conn.keep_alive = rec.keep_alive;
            conn.flags = rec.flags;
            conn.edge = rec.edge;
            conn.set_inbuf(&rec.inbuf);
            conn.set_unsent(std::mem::take(&mut rec.out));
            if let Some(state) = rec.ws_decoder.take() {
                let decoder = c1m_proto::ws::frame::Decoder::from_bytes(&state)
                    .context("WebSocket decoder state")?;
                conn.set_ws(Box::new(WsMessage {
                    decoder,
                    data: std::mem::take(&mut rec.ws_data),
                }));
            }
            self.poll
                .registry()
                .register(
                    &mut conn.stream,
                    Token(token as usize),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .context("registering a handed-over connection")?;
            placed.push((idx, conn));
            rest.push((rec, idx, token, kind));
        }
        self.conns.insert_placed(placed);
        for (rec, idx, token, kind) in rest {
            let held_stream = matches!(
                kind,
                Kind::Sse
                    | Kind::SseJoining
                    | Kind::Ws
                    | Kind::WsJoining
                    | Kind::TcpStream
                    | Kind::TcpJoining
            );
            for name in &rec.channels {
                let (chan, pos) = self.channels.join(name, idx as u32);
                self.conns[idx].add_sub(chan, pos);
                // The new master took the old one's interest table: it knows we hold these.
                self.channels.mark_known(name);
                if held_stream {
                    // Members already: the new master rebuilds its sets from these reports
                    // without telling anyone they joined.
                    let name = std::rc::Rc::clone(&self.channels.get(chan).expect("joined").name);
                    self.presence_join(token, &name, true);
                }
            }
            if let Some(info) = &rec.info {
                self.presence_info(token, info);
            }
            if rec.timer_ms > 0 {
                self.arm_timer(idx, Duration::from_millis(rec.timer_ms));
            }
            if let Some(after) = rec.replay_after {
                self.conns.replays.insert(token, Some(after));
            }
            if let Some(cors) = rec.cors {
                self.conns
                    .cors_pending
                    .insert(token, std::rc::Rc::from(cors));
            }
            if rec.dashboard {
                self.conns.dashboards.push(token);
            }
            if let Some(user) = &rec.user {
                self.conns.set_user(token, user);
            }
        }
        Ok(())
    }

    /// New worker, once committed: what was waiting on the old master goes on here (the next
    /// replay chunk is asked of the new master; a request the old master never answered is
    /// told to retry).
    pub(super) fn after_takeover(&mut self) {
        // This master's generation never heard of them: recorded without a `connect` webhook.
        self.report_all_resumed();
        let idxs = self.conns.slots();
        for idx in idxs {
            let Some(conn) = self.conns.get(idx) else {
                continue;
            };
            let token = token_of(idx, conn.generation);
            match conn.kind {
                Kind::Publishing | Kind::Status => {
                    self.conns[idx].kind = Kind::Http;
                    self.refuse_busy(idx, 1);
                    self.resume_input(idx);
                }
                // A request read before the freeze and not served yet (a publish passed to the
                // control worker as it froze, a pipelined one): epoll has nothing new to say.
                Kind::Http if !conn.inbuf().is_empty() && !conn.has_out() => self.resume_input(idx),
                _ if kind_waits_on_proxy(conn) => self.proxy_after_takeover(idx),
                _ if !conn.has_out()
                    && self.conns.replays.get(&token).is_some_and(Option::is_some) =>
                {
                    self.continue_replay(idx)
                }
                _ => {}
            }
        }
    }
}

/// New worker: connects to its predecessor (retrying until it listens), receives the
/// listeners and every connection, confirms, and returns without touching any of them.
pub fn receive(name: &str, timeout: Duration) -> anyhow::Result<Taken> {
    let deadline = Instant::now() + timeout;
    let pair = loop {
        match fd_passing::connect_abstract(name) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                tracing::trace!(error = %e, "upgrade: predecessor not listening yet");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).context("connecting to the old worker"),
        }
    };
    let left = deadline.saturating_duration_since(Instant::now());
    pair.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    pair.set_write_timeout(Some(left.max(Duration::from_millis(1))))?;
    send(
        &pair,
        &Pair::Hello {
            format: handover::FORMAT_VERSION,
        },
        &[],
    )?;
    let crash_after = std::env::var(ENV_TEST_CRASH_FILE)
        .ok()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|n| n.trim().parse::<usize>().ok());
    let mut buf = vec![0u8; handover::MAX_PACKET];
    let listeners = match recv(&pair, &mut buf)? {
        (Pair::Listeners { kinds }, fds) if kinds.len() == fds.len() => {
            kinds.into_iter().zip(fds).collect()
        }
        (other, _) => bail!("expected listeners, got {other:?}"),
    };
    let mut conns = Vec::new();
    let mut next_generation = None;
    let mut batch = Vec::new();
    let mut batch_fds: Vec<OwnedFd> = Vec::new();
    loop {
        match recv(&pair, &mut buf)? {
            (Pair::Part { last, data }, fds) => {
                if batch.is_empty() && batch_fds.is_empty() {
                    batch_fds = fds;
                } else if !fds.is_empty() {
                    bail!("descriptors on a continuation part");
                }
                batch.extend_from_slice(&data);
                if last {
                    let (records, generation) = ConnRecord::decode_batch_with(&batch)?;
                    next_generation = next_generation.max(generation);
                    if records.len() != batch_fds.len() {
                        bail!(
                            "a batch of {} records carried {} descriptors",
                            records.len(),
                            batch_fds.len()
                        );
                    }
                    conns.extend(records.into_iter().zip(batch_fds.drain(..)));
                    batch.clear();
                    if crash_after.is_some_and(|n| conns.len() >= n) {
                        tracing::error!(received = conns.len(), "upgrade: test crash hook");
                        std::process::abort();
                    }
                }
            }
            (Pair::End { conns: n }, _) if n == conns.len() as u64 => break,
            (other, _) => bail!("expected connection records, got {other:?}"),
        }
    }
    send(
        &pair,
        &Pair::Received {
            conns: conns.len() as u64,
        },
        &[],
    )?;
    Ok(Taken {
        listeners,
        conns,
        next_generation,
        pair,
    })
}

/// New worker: waits for the old worker's word. Commit, or the old worker gone (then these
/// copies are the only ones left): serve. Abort: leave without touching anything.
pub fn await_commit(pair: &Socket, timeout: Duration) -> anyhow::Result<bool> {
    pair.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    let mut buf = [0u8; 64];
    match fd_passing::recv_with_fds(pair, &mut buf) {
        Ok((0, _)) => Ok(true),
        Ok((n, _)) => match Pair::decode(&buf[..n])? {
            Pair::Commit => Ok(true),
            Pair::Abort => Ok(false),
            other => bail!("expected commit or abort, got {other:?}"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(true),
        Err(e) => Err(e).context("waiting for the commit"),
    }
}

/// The listener of `kind` handed over by the old worker, if any.
pub fn take_listener(taken: &mut Vec<(u8, OwnedFd)>, kind: u8) -> Option<TcpListener> {
    let pos = taken.iter().position(|(k, _)| *k == kind)?;
    let (_, fd) = taken.remove(pos);
    Some(TcpListener::from_std(std::net::TcpListener::from(fd)))
}

/// A connection that was waiting on a proxy call of the old worker (a parked subscribe, a
/// publish, a refresh).
fn kind_waits_on_proxy(conn: &Conn) -> bool {
    use super::conn::{EXPIRES, PROXY_PENDING};
    let live = matches!(conn.kind, Kind::Sse | Kind::Ws | Kind::TcpStream);
    conn.kind.is_proxying()
        || conn.edge & PROXY_PENDING != 0
        || (live && conn.edge & EXPIRES != 0 && conn.deadline == 0)
}
