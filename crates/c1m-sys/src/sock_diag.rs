//! Netlink sock_diag (NETLINK_SOCK_DIAG, `inet_diag_req_v2`): the kernel's own socket dump, the
//! one `ss` uses. Unlike /proc/net/tcp it filters by state in the kernel (`idiag_states`) and
//! hands out fixed-size binary records, so counting a million sockets takes well under a second.
//!
//! Owns: the request encoding and the record decoding for TCP over AF_INET and AF_INET6.
//! Records are handed to a callback one at a time, borrowed from the receive buffer, so a
//! caller that only counts never holds a million of them.
//!
//! No `unsafe` here: socket2 owns the descriptor and the records are decoded from bytes.

use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// `SOCK_DIAG_BY_FAMILY` from linux/sock_diag.h.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `TCPDIAG_GETSOCK` (linux/inet_diag.h): the original request, `struct inet_diag_req`, which
/// carries no family and so dumps TCP over both IPv4 and IPv6 in one walk.
const TCPDIAG_GETSOCK: u16 = 18;
/// Size of `struct inet_diag_req` (the `TCPDIAG_GETSOCK` request).
const REQ_COMPAT_LEN: usize = 60;
/// Size of `struct nlmsghdr`.
const NLMSG_HDR: usize = 16;
/// Size of `struct inet_diag_req_v2`.
const REQ_V2_LEN: usize = 56;
/// Size of `struct inet_diag_msg` (attributes may follow; we ask for none).
const DIAG_MSG_LEN: usize = 72;
/// The kernel fills at most ~32 KiB per dump message batch; a larger buffer never truncates.
const RECV_BUF: usize = 256 * 1024;
/// NLM_F_DUMP_INTR: the table changed while being dumped (still a usable snapshot for counts).
const NLM_F_DUMP_INTR: u16 = 0x10;

/// TCP states as the kernel numbers them (include/net/tcp_states.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum TcpState {
    Established = 1,
    SynSent = 2,
    SynRecv = 3,
    FinWait1 = 4,
    FinWait2 = 5,
    TimeWait = 6,
    Close = 7,
    CloseWait = 8,
    LastAck = 9,
    Listen = 10,
    Closing = 11,
    NewSynRecv = 12,
}

impl TcpState {
    /// Every state, in kernel order.
    pub const ALL: [TcpState; 12] = [
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait1,
        TcpState::FinWait2,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Closing,
        TcpState::NewSynRecv,
    ];

    /// The state for a kernel state number.
    pub fn from_u8(n: u8) -> Option<TcpState> {
        TcpState::ALL.get((n as usize).wrapping_sub(1)).copied()
    }

    /// The name `ss` prints for this state.
    pub fn name(self) -> &'static str {
        match self {
            TcpState::Established => "ESTAB",
            TcpState::SynSent => "SYN-SENT",
            TcpState::SynRecv => "SYN-RECV",
            TcpState::FinWait1 => "FIN-WAIT-1",
            TcpState::FinWait2 => "FIN-WAIT-2",
            TcpState::TimeWait => "TIME-WAIT",
            TcpState::Close => "UNCONN",
            TcpState::CloseWait => "CLOSE-WAIT",
            TcpState::LastAck => "LAST-ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Closing => "CLOSING",
            TcpState::NewSynRecv => "NEW-SYN-RECV",
        }
    }

    /// Parses an `ss`-style name (case-insensitive; `established`, `time-wait`, `tw` also work).
    pub fn parse(s: &str) -> Option<TcpState> {
        let norm = s.to_ascii_uppercase().replace('_', "-");
        let alias = match norm.as_str() {
            "ESTABLISHED" => "ESTAB",
            "TW" | "TIMEWAIT" => "TIME-WAIT",
            "CLOSE" => "UNCONN",
            other => other,
        };
        TcpState::ALL.into_iter().find(|st| st.name() == alias)
    }

    /// This state's bit in an `idiag_states` mask.
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// A set of TCP states, as the kernel-side `idiag_states` filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateMask(pub u32);

impl StateMask {
    /// Every state (request sockets included: the kernel adds NEW_SYN_RECV for SYN_RECV).
    pub const ALL: StateMask = StateMask(u32::MAX);

    /// A mask of the given states.
    pub fn of(states: &[TcpState]) -> StateMask {
        StateMask(states.iter().fold(0, |m, s| m | s.bit()))
    }
}

/// Address family to dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
    /// Both families in one walk of the kernel's tables. The v2 request names one family and
    /// the kernel walks the whole (shared) TCP hash for each, skipping the other family's
    /// sockets, so two v2 dumps walk it twice. The older `TCPDIAG_GETSOCK` request has no
    /// family (the kernel sets `AF_UNSPEC`) and returns both in one walk.
    Both,
}

impl Family {
    fn raw(self) -> u8 {
        match self {
            Family::V4 => libc::AF_INET as u8,
            Family::V6 => libc::AF_INET6 as u8,
            Family::Both => libc::AF_UNSPEC as u8,
        }
    }

    /// The netlink message type of the request (and of the records answering it).
    fn msg_type(self) -> u16 {
        match self {
            Family::Both => TCPDIAG_GETSOCK,
            _ => SOCK_DIAG_BY_FAMILY,
        }
    }
}

/// One socket record, borrowed from the receive buffer (`struct inet_diag_msg`).
#[derive(Clone, Copy)]
pub struct DiagMsg<'a> {
    raw: &'a [u8],
}

impl<'a> DiagMsg<'a> {
    fn u32_at(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.raw[off..off + 4].try_into().expect("4 bytes"))
    }

    /// The kernel's state number (see [`TcpState`]).
    pub fn state_raw(&self) -> u8 {
        self.raw[1]
    }

    /// The state, if the kernel reported a known one.
    pub fn state(&self) -> Option<TcpState> {
        TcpState::from_u8(self.state_raw())
    }

    fn is_v6(&self) -> bool {
        self.raw[0] == libc::AF_INET6 as u8
    }

    fn addr(&self, off: usize) -> IpAddr {
        if self.is_v6() {
            let b: [u8; 16] = self.raw[off..off + 16].try_into().expect("16 bytes");
            IpAddr::V6(Ipv6Addr::from(b))
        } else {
            let b: [u8; 4] = self.raw[off..off + 4].try_into().expect("4 bytes");
            IpAddr::V4(Ipv4Addr::from(b))
        }
    }

    /// Local port (host order).
    pub fn local_port(&self) -> u16 {
        u16::from_be_bytes([self.raw[4], self.raw[5]])
    }

    /// Remote port (host order).
    pub fn remote_port(&self) -> u16 {
        u16::from_be_bytes([self.raw[6], self.raw[7]])
    }

    /// Local address.
    pub fn local_ip(&self) -> IpAddr {
        self.addr(8)
    }

    /// Remote address.
    pub fn remote_ip(&self) -> IpAddr {
        self.addr(24)
    }

    /// Local address and port.
    pub fn local(&self) -> SocketAddr {
        SocketAddr::new(self.local_ip(), self.local_port())
    }

    /// Remote address and port.
    pub fn remote(&self) -> SocketAddr {
        SocketAddr::new(self.remote_ip(), self.remote_port())
    }

    /// For a listener: connections waiting in the accept queue. Otherwise: unread bytes.
    pub fn rqueue(&self) -> u32 {
        self.u32_at(56)
    }

    /// For a listener: its backlog (already capped by somaxconn). Otherwise: unsent bytes.
    pub fn wqueue(&self) -> u32 {
        self.u32_at(60)
    }

    /// Owner uid.
    pub fn uid(&self) -> u32 {
        self.u32_at(64)
    }

    /// Socket inode (0 for TIME_WAIT and request sockets, which have no file).
    pub fn inode(&self) -> u32 {
        self.u32_at(68)
    }
}

/// What a dump saw besides the records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DumpStats {
    /// Records handed to the callback.
    pub records: u64,
    /// The kernel said the table changed during the dump (counts are then approximate).
    pub interrupted: bool,
}

/// `INET_DIAG_REQ_BYTECODE`: the request attribute carrying a filter program.
const INET_DIAG_REQ_BYTECODE: u16 = 1;
/// Filter opcodes (linux/inet_diag.h).
const BC_JMP: u8 = 1;
const BC_S_GE: u8 = 2;
const BC_D_GE: u8 = 4;
const BC_D_LE: u8 = 5;

/// One half of the socket table, chosen in the kernel by a filter on ports, so two threads
/// can each dump (and pay the kernel's per-record cost for) about half the sockets.
///
/// With `mid` in the middle of the ephemeral range: a socket whose local and remote ports sit
/// on the same side of `mid` is in [`Shard::Same`], the others in [`Shard::Cross`]. Every
/// socket is in exactly one. A connection has one fixed port (the service) and one ephemeral
/// port spread over the range, so each end of it lands in either shard about equally often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shard {
    Same { mid: u16 },
    Cross { mid: u16 },
}

fn op(code: u8, yes: u8, no: u16) -> [u8; 4] {
    let n = no.to_ne_bytes();
    [code, yes, n[0], n[1]]
}

/// The filter program for a shard. The kernel's auditor follows `yes` offsets from the start
/// and wants every jump target on that chain, so the program is laid out linearly and all
/// branching goes through `no`: jumping to the end accepts, past the end (+4) rejects.
///
/// ```text
/// @0  S_GE mid        yes @8   no @20      (sport >= mid ?)
/// @8  D_GE/D_LE mid   yes @16  no reject   (high sport: dport on the wanted side?)
/// @16 JMP                      no accept
/// @20 D_LE/D_GE mid   yes end  no reject   (low sport: dport on the wanted side?)
/// ```
fn shard_bytecode(shard: Shard) -> Vec<u8> {
    const LEN: u16 = 28;
    let (mid, hi_wants, lo_wants) = match shard {
        Shard::Same { mid } => (mid, BC_D_GE, BC_D_LE),
        Shard::Cross { mid } => (mid, BC_D_LE, BC_D_GE),
    };
    let mid = mid.max(1);
    // A "<= port" test against mid-1 is the "< mid" side; ">= mid" is the other.
    let port_for = |code: u8| if code == BC_D_LE { mid - 1 } else { mid };
    let mut bc = Vec::with_capacity(LEN as usize);
    bc.extend(op(BC_S_GE, 8, 20));
    bc.extend(op(0, 0, mid));
    bc.extend(op(hi_wants, 8, (LEN - 8) + 4));
    bc.extend(op(0, 0, port_for(hi_wants)));
    bc.extend(op(BC_JMP, 4, LEN - 16));
    bc.extend(op(lo_wants, 8, (LEN - 20) + 4));
    bc.extend(op(0, 0, port_for(lo_wants)));
    debug_assert_eq!(bc.len(), LEN as usize);
    bc
}

fn encode_request(family: Family, states: StateMask, seq: u32, shard: Option<Shard>) -> Vec<u8> {
    let bc = shard.map(shard_bytecode).unwrap_or_default();
    let attr_len = if bc.is_empty() { 0 } else { 4 + bc.len() };
    let req_len = match family {
        Family::Both => REQ_COMPAT_LEN,
        _ => REQ_V2_LEN,
    };
    let total = NLMSG_HDR + req_len + attr_len;
    let mut buf = vec![0u8; total];
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    buf[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
    buf[4..6].copy_from_slice(&family.msg_type().to_ne_bytes());
    buf[6..8].copy_from_slice(&flags.to_ne_bytes());
    buf[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: addressed to the kernel.
    let req = &mut buf[NLMSG_HDR..NLMSG_HDR + req_len];
    req[0] = family.raw();
    // The sockid stays zero: a dump ignores it. idiag_ext 0: no extra attributes, keeps
    // records small.
    match family {
        // inet_diag_req: family, src_len, dst_len, ext, sockid (48 bytes), states, dbs.
        Family::Both => req[52..56].copy_from_slice(&states.0.to_ne_bytes()),
        // inet_diag_req_v2: family, protocol, ext, pad, states, sockid.
        _ => {
            req[1] = libc::IPPROTO_TCP as u8;
            req[4..8].copy_from_slice(&states.0.to_ne_bytes());
        }
    }
    if attr_len > 0 {
        let a = &mut buf[NLMSG_HDR + req_len..];
        a[0..2].copy_from_slice(&(attr_len as u16).to_ne_bytes());
        a[2..4].copy_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        a[4..].copy_from_slice(&bc);
    }
    buf
}

/// Dumps the TCP sockets of one family whose state is in `states`, handing each record to `f`.
pub fn dump_tcp(
    family: Family,
    states: StateMask,
    f: impl FnMut(&DiagMsg<'_>),
) -> io::Result<DumpStats> {
    dump_tcp_shard(family, states, None, f)
}

/// Like [`dump_tcp`], limited to one [`Shard`] of the table when `shard` is given.
pub fn dump_tcp_shard(
    family: Family,
    states: StateMask,
    shard: Option<Shard>,
    mut f: impl FnMut(&DiagMsg<'_>),
) -> io::Result<DumpStats> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::DGRAM.cloexec(),
        Some(Protocol::from(libc::NETLINK_SOCK_DIAG)),
    )
    .map_err(|e| io::Error::new(e.kind(), format!("netlink sock_diag socket: {e}")))?;
    let seq = 0x6331_6d00 | family.raw() as u32;
    let req = encode_request(family, states, seq, shard);
    // An unaddressed send on a netlink socket goes to the kernel (portid 0).
    let sent = sock.send(&req)?;
    if sent != req.len() {
        return Err(io::Error::other("sock_diag: short netlink send"));
    }
    let mut buf = vec![0u8; RECV_BUF];
    let mut stats = DumpStats::default();
    loop {
        let n = (&sock)
            .read(&mut buf)
            .map_err(|e| io::Error::new(e.kind(), format!("sock_diag recv: {e}")))?;
        if n == 0 {
            return Err(io::Error::other(
                "sock_diag: netlink socket closed mid-dump",
            ));
        }
        if walk(&buf[..n], seq, family.msg_type(), &mut stats, &mut f)? {
            return Ok(stats);
        }
    }
}

/// Walks the netlink messages in one datagram. Returns true at NLMSG_DONE.
fn walk(
    mut data: &[u8],
    seq: u32,
    record_type: u16,
    stats: &mut DumpStats,
    f: &mut impl FnMut(&DiagMsg<'_>),
) -> io::Result<bool> {
    while data.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes(data[0..4].try_into().expect("4 bytes")) as usize;
        let ty = u16::from_ne_bytes([data[4], data[5]]);
        let flags = u16::from_ne_bytes([data[6], data[7]]);
        let mseq = u32::from_ne_bytes(data[8..12].try_into().expect("4 bytes"));
        if len < NLMSG_HDR || len > data.len() {
            return Err(io::Error::other(format!(
                "sock_diag: malformed netlink message (len {len}, {} bytes left)",
                data.len()
            )));
        }
        let payload = &data[NLMSG_HDR..len];
        if flags & NLM_F_DUMP_INTR != 0 {
            stats.interrupted = true;
        }
        if mseq == seq {
            match ty as i32 {
                libc::NLMSG_DONE => return Ok(true),
                libc::NLMSG_ERROR => {
                    let err = payload
                        .get(0..4)
                        .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                        .unwrap_or(-libc::EIO);
                    if err != 0 {
                        let os = io::Error::from_raw_os_error(-err);
                        return Err(io::Error::new(
                            os.kind(),
                            format!("sock_diag: kernel: {os}"),
                        ));
                    }
                }
                _ if ty == record_type && payload.len() >= DIAG_MSG_LEN => {
                    stats.records += 1;
                    f(&DiagMsg { raw: payload });
                }
                _ => {}
            }
        }
        let step = (len + 3) & !3;
        data = &data[step.min(data.len())..];
    }
    Ok(false)
}

/// Dumps the TCP sockets of both families whose state is in `states` (within `shard` when
/// given): one [`Family::Both`] walk, or, on a kernel that refuses that request, one walk
/// per family.
pub fn dump_tcp_all(
    states: StateMask,
    shard: Option<Shard>,
    mut f: impl FnMut(&DiagMsg<'_>),
) -> io::Result<DumpStats> {
    match dump_tcp_shard(Family::Both, states, shard, &mut f) {
        Ok(stats) => Ok(stats),
        // The refusal comes as the first answer, before any record.
        Err(e) if e.kind() != io::ErrorKind::PermissionDenied => {
            let mut stats = DumpStats::default();
            for fam in [Family::V4, Family::V6] {
                let s = dump_tcp_shard(fam, states, shard, &mut f).map_err(|e2| {
                    io::Error::new(e2.kind(), format!("{e2} (after {e} for both families)"))
                })?;
                stats.records += s.records;
                stats.interrupted |= s.interrupted;
            }
            Ok(stats)
        }
        Err(e) => Err(e),
    }
}

/// `TCPF_BOUND_INACTIVE` (Linux 6.7+): not a socket state but a request bit for sockets that
/// are bound and neither listening nor connected (they are reported as CLOSE). Asking for it
/// makes the kernel walk its bind table, every bound socket, on top of the connection table.
pub const BOUND_INACTIVE: StateMask = StateMask(1 << 13);

/// Counts TCP sockets per kernel state number (index = state) over both families, streaming.
pub fn count_tcp_states(states: StateMask) -> io::Result<[u64; 16]> {
    let mut counts = [0u64; 16];
    dump_tcp_all(states, None, |m| counts[(m.state_raw() & 15) as usize] += 1)?;
    Ok(counts)
}

/// [`count_tcp_states`] on two threads at once. The kernel's cost is the walk of its tables
/// (a record is only built for a socket in `states`), so the split is by table: one thread
/// asks for the connection and listener states, the other for [`BOUND_INACTIVE`] only, which
/// walks just the bind table. Without the bound-inactive bit there is one table to walk and
/// one thread does it.
pub fn count_tcp_states_parallel(states: StateMask) -> io::Result<[u64; 16]> {
    let hashed = StateMask(states.0 & !BOUND_INACTIVE.0);
    if states.0 & BOUND_INACTIVE.0 == 0 || hashed.0 == 0 {
        return count_tcp_states(states);
    }
    let (a, b) = std::thread::scope(|s| {
        let other = s.spawn(|| count_tcp_states(BOUND_INACTIVE));
        (count_tcp_states(hashed), other.join())
    });
    let b = b.map_err(|_| io::Error::other("sock_diag: dump thread panicked"))?;
    let (a, b) = (a?, b?);
    Ok(std::array::from_fn(|i| a[i] + b[i]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn state_names_round_trip() {
        for st in TcpState::ALL {
            assert_eq!(TcpState::parse(st.name()), Some(st));
            assert_eq!(TcpState::from_u8(st as u8), Some(st));
        }
        assert_eq!(TcpState::parse("established"), Some(TcpState::Established));
        assert_eq!(TcpState::parse("time_wait"), Some(TcpState::TimeWait));
        assert_eq!(TcpState::parse("bogus"), None);
        assert_eq!(TcpState::from_u8(0), None);
    }

    #[test]
    fn request_layout() {
        let req = encode_request(Family::V6, StateMask::of(&[TcpState::Listen]), 7, None);
        assert_eq!(req.len(), 72);
        assert_eq!(u32::from_ne_bytes(req[0..4].try_into().unwrap()), 72);
        assert_eq!(u16::from_ne_bytes([req[4], req[5]]), 20);
        assert_eq!(req[16], libc::AF_INET6 as u8);
        assert_eq!(req[17], libc::IPPROTO_TCP as u8);
        assert_eq!(u32::from_ne_bytes(req[20..24].try_into().unwrap()), 1 << 10);
    }

    #[test]
    fn sees_own_listener_and_connection() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let c = TcpStream::connect(addr).unwrap();
        let (_s, _) = l.accept().unwrap();
        let mut listener_seen = false;
        let mut estab_seen = 0;
        dump_tcp(Family::V4, StateMask::ALL, |m| {
            if m.local() == addr && m.state() == Some(TcpState::Listen) {
                listener_seen = true;
                assert!(m.wqueue() >= 1, "listener backlog reported in wqueue");
            }
            let conn = m.local() == c.local_addr().unwrap() && m.remote() == addr;
            if conn && m.state() == Some(TcpState::Established) {
                estab_seen += 1;
                assert_ne!(m.inode(), 0);
            }
        })
        .unwrap();
        assert!(listener_seen);
        assert_eq!(estab_seen, 1);
        // The kernel-side filter: asking for LISTEN only never returns an ESTABLISHED socket.
        let mut other = 0;
        dump_tcp(Family::V4, StateMask::of(&[TcpState::Listen]), |m| {
            if m.state() != Some(TcpState::Listen) {
                other += 1;
            }
        })
        .unwrap();
        assert_eq!(other, 0);
    }

    #[test]
    fn shards_partition_the_table() {
        // Connections on both sides of `mid` in every combination the filter distinguishes.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut held = Vec::new();
        for _ in 0..40 {
            let c = TcpStream::connect(addr).unwrap();
            held.push((c, l.accept().unwrap().0));
        }
        let ours = |m: &DiagMsg<'_>| m.local() == addr || m.remote() == addr;
        let collect = |shard: Option<Shard>| {
            let mut v = Vec::new();
            dump_tcp_shard(Family::V4, StateMask::ALL, shard, |m| {
                if ours(m) {
                    v.push((m.local(), m.remote(), m.state_raw()));
                }
            })
            .unwrap();
            v.sort();
            v
        };
        let all = collect(None);
        assert_eq!(all.len(), 81);
        // Split at a port between the listener's and the clients' (or at the listener's own).
        for mid in [addr.port(), addr.port().saturating_add(1), 1, 65535] {
            let same = collect(Some(Shard::Same { mid }));
            let cross = collect(Some(Shard::Cross { mid }));
            let mut union = [same.clone(), cross.clone()].concat();
            union.sort();
            assert_eq!(union, all, "mid {mid}");
            for r in &same {
                let (s, d) = (r.0.port() >= mid, r.1.port() >= mid);
                assert_eq!(s, d, "{r:?} in Same for mid {mid}");
            }
        }
        let counts = count_tcp_states_parallel(StateMask::ALL).unwrap();
        assert!(counts[TcpState::Established as usize] >= 80);
        drop(held);
    }

    /// Our sockets in a dump: local address in `ours` and the peer one of ours too (or none,
    /// for listeners and bound-only sockets), as (local, remote, state), sorted. The peer check
    /// matters: another test's TIME-WAIT socket may hold the same local port towards another
    /// peer (seen in CI: a ninth record in state 6).
    fn ours_in(
        dump: impl FnOnce(&mut dyn FnMut(&DiagMsg<'_>)),
        ours: &[SocketAddr],
    ) -> Vec<(SocketAddr, SocketAddr, u8)> {
        let mut v = Vec::new();
        dump(&mut |m: &DiagMsg<'_>| {
            let peer = m.remote();
            let peer_ours = peer.port() == 0 || ours.contains(&peer);
            if ours.contains(&m.local()) && peer_ours {
                v.push((m.local(), m.remote(), m.state_raw()));
            }
        });
        v.sort();
        v
    }

    #[test]
    fn one_walk_for_both_families_sees_what_two_do() {
        // A v4 and a v6 connection, their listeners, and a bound-only socket of each family.
        let l4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let l6 = TcpListener::bind("[::1]:0").unwrap();
        let c4 = TcpStream::connect(l4.local_addr().unwrap()).unwrap();
        let c6 = TcpStream::connect(l6.local_addr().unwrap()).unwrap();
        let _a = (l4.accept().unwrap(), l6.accept().unwrap());
        let b4 = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        b4.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let b6 = Socket::new(Domain::IPV6, Type::STREAM, None).unwrap();
        b6.bind(&"[::1]:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let bound = |s: &Socket| s.local_addr().unwrap().as_socket().unwrap();
        let ports = [
            l4.local_addr().unwrap(),
            l6.local_addr().unwrap(),
            c4.local_addr().unwrap(),
            c6.local_addr().unwrap(),
            bound(&b4),
            bound(&b6),
        ];
        let both = ours_in(
            |f| {
                dump_tcp(Family::Both, StateMask::ALL, f).unwrap();
            },
            &ports,
        );
        let per_family = ours_in(
            |f| {
                for fam in [Family::V4, Family::V6] {
                    dump_tcp(fam, StateMask::ALL, &mut *f).unwrap();
                }
            },
            &ports,
        );
        // 2 listeners, 4 connection ends, 2 bound-only sockets (reported as CLOSE).
        assert_eq!(both.len(), 8, "{both:?}");
        assert_eq!(both, per_family);
        let closed = |v: &[(SocketAddr, SocketAddr, u8)]| {
            v.iter().filter(|r| r.2 == TcpState::Close as u8).count()
        };
        assert_eq!(closed(&both), 2, "bound-only sockets: {both:?}");
        // Without the bound-inactive bit the kernel skips its bind table: no CLOSE records.
        let hashed = ours_in(
            |f| {
                dump_tcp(Family::Both, StateMask(!BOUND_INACTIVE.0), f).unwrap();
            },
            &ports,
        );
        assert_eq!(hashed.len(), 6);
        assert_eq!(closed(&hashed), 0);
        // The two-thread count (one per table) adds up to the same totals.
        let one = count_tcp_states(StateMask::ALL).unwrap();
        let two = count_tcp_states_parallel(StateMask::ALL).unwrap();
        assert!(one[TcpState::Close as usize] >= 2 && two[TcpState::Close as usize] >= 2);
        assert!(two[TcpState::Listen as usize] >= 2);
        drop((c4, c6, b4, b6));
    }

    #[test]
    fn malformed_message_is_an_error() {
        let mut stats = DumpStats::default();
        let mut bad = [0u8; 20];
        bad[0..4].copy_from_slice(&100u32.to_ne_bytes());
        assert!(walk(&bad, 1, SOCK_DIAG_BY_FAMILY, &mut stats, &mut |_| {}).is_err());
    }
}
