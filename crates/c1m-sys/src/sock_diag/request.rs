//! Encoding the dump request: the netlink header, `inet_diag_req_v2` (one family) or the older
//! `inet_diag_req` (both families in one walk), and the optional port filter program that
//! splits the table into two [`Shard`]s. Bytes only; sending is the parent's job.

use super::state::StateMask;

/// `SOCK_DIAG_BY_FAMILY` from linux/sock_diag.h.
pub(super) const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `TCPDIAG_GETSOCK` (linux/inet_diag.h): the original request, `struct inet_diag_req`, which
/// carries no family and so dumps TCP over both IPv4 and IPv6 in one walk.
const TCPDIAG_GETSOCK: u16 = 18;
/// Size of `struct inet_diag_req` (the `TCPDIAG_GETSOCK` request).
const REQ_COMPAT_LEN: usize = 60;
/// Size of `struct nlmsghdr`.
pub(super) const NLMSG_HDR: usize = 16;
/// Size of `struct inet_diag_req_v2`.
const REQ_V2_LEN: usize = 56;

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
    pub(super) fn raw(self) -> u8 {
        match self {
            Family::V4 => libc::AF_INET as u8,
            Family::V6 => libc::AF_INET6 as u8,
            Family::Both => libc::AF_UNSPEC as u8,
        }
    }

    /// The netlink message type of the request (and of the records answering it).
    pub(super) fn msg_type(self) -> u16 {
        match self {
            Family::Both => TCPDIAG_GETSOCK,
            _ => SOCK_DIAG_BY_FAMILY,
        }
    }
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

pub(super) fn encode_request(
    family: Family,
    states: StateMask,
    seq: u32,
    shard: Option<Shard>,
) -> Vec<u8> {
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
