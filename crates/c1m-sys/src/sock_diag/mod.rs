//! Netlink sock_diag (NETLINK_SOCK_DIAG, `inet_diag_req_v2`): the kernel's own socket dump, the
//! one `ss` uses. Unlike /proc/net/tcp it filters by state in the kernel (`idiag_states`) and
//! hands out fixed-size binary records, so counting a million sockets takes well under a second.
//!
//! Owns: the request encoding and the record decoding for TCP over AF_INET and AF_INET6.
//! Records are handed to a callback one at a time, borrowed from the receive buffer, so a
//! caller that only counts never holds a million of them.
//!
//! No `unsafe` here: socket2 owns the descriptor and the records are decoded from bytes.
//!
//! This file sends the request and walks the answer (dumps, counts, the two-thread count);
//! [`state`] holds the TCP states and masks, `request` the request bytes and shard filter,
//! `record` the decoding of one record.

mod record;
mod request;
mod state;

pub use record::DiagMsg;
pub use request::{Family, Shard};
pub use state::{StateMask, TcpState, BOUND_INACTIVE};

use record::DIAG_MSG_LEN;
use request::{encode_request, NLMSG_HDR};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{self, Read};

/// The kernel fills at most ~32 KiB per dump message batch; a larger buffer never truncates.
const RECV_BUF: usize = 256 * 1024;
/// NLM_F_DUMP_INTR: the table changed while being dumped (still a usable snapshot for counts).
const NLM_F_DUMP_INTR: u16 = 0x10;

/// What a dump saw besides the records.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DumpStats {
    /// Records handed to the callback.
    pub records: u64,
    /// The kernel said the table changed during the dump (counts are then approximate).
    pub interrupted: bool,
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
                    f(&DiagMsg::new(payload));
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
    use super::request::SOCK_DIAG_BY_FAMILY;
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};

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
