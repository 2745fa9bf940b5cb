//! Decoding one `struct inet_diag_msg` record: state, addresses, ports, queues, uid, inode,
//! read in place from the receive buffer so a dump never copies a record.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::state::TcpState;

/// Size of `struct inet_diag_msg` (attributes may follow; we ask for none).
pub(super) const DIAG_MSG_LEN: usize = 72;

/// One socket record, borrowed from the receive buffer (`struct inet_diag_msg`).
#[derive(Clone, Copy)]
pub struct DiagMsg<'a> {
    raw: &'a [u8],
}

impl<'a> DiagMsg<'a> {
    /// A record over `raw`, which the caller checked is at least [`DIAG_MSG_LEN`] bytes.
    pub(super) fn new(raw: &'a [u8]) -> Self {
        DiagMsg { raw }
    }

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
