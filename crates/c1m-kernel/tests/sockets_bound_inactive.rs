//! `c1m sockets` by state counts bound-but-unconnected sockets (UNCONN) on the live box,
//! with one dump thread and with two (one per kernel table), in both families, and counts
//! the same connections with both: the one-walk dump of both families and the bind-table
//! shortcut must not lose any socket.

use c1m_kernel::sockets::{count, By, SocketsArgs};
use socket2::{Domain, Socket, Type};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;

const BOUND: usize = 50;

fn by_state(threads: u8) -> std::collections::HashMap<String, u64> {
    let c = count(&SocketsArgs {
        by: By::State,
        state: vec![],
        json: false,
        limit: 0,
        threads: Some(threads),
        root: PathBuf::from("/"),
    })
    .unwrap();
    c.groups.into_iter().map(|g| (g.key, g.count)).collect()
}

#[test]
fn bound_only_sockets_of_both_families_are_counted() {
    let mut held = Vec::new();
    for i in 0..BOUND {
        let (domain, addr) = if i % 2 == 0 {
            (Domain::IPV4, "127.0.0.1:0")
        } else {
            (Domain::IPV6, "[::1]:0")
        };
        let s = Socket::new(domain, Type::STREAM, None).unwrap();
        s.bind(&addr.parse::<SocketAddr>().unwrap().into()).unwrap();
        held.push(s);
    }
    let l6 = TcpListener::bind("[::1]:0").unwrap();
    let c6 = TcpStream::connect(l6.local_addr().unwrap()).unwrap();
    let a6 = l6.accept().unwrap();
    for threads in [1, 2] {
        let per = by_state(threads);
        let unconn = per.get("UNCONN").copied().unwrap_or(0);
        // Other programs may hold bound sockets too, never fewer than ours.
        assert!(
            unconn >= BOUND as u64,
            "threads {threads}: UNCONN {unconn} < {BOUND} bound sockets held: {per:?}"
        );
        assert!(per.get("ESTAB").copied().unwrap_or(0) >= 2, "{per:?}");
        assert!(per.get("LISTEN").copied().unwrap_or(0) >= 1, "{per:?}");
    }
    drop((held, c6, a6));
}
