//! `c1m sockets` on real loopback sockets: 12,000 sockets (6,000 connections, both ends in this
//! process), some half-closed to get FIN-WAIT-2 / CLOSE-WAIT, counted through netlink and
//! checked against an independent count of /proc/net/tcp and tcp6.
//!
//! Both ends use an address of the test's own in 127/8 and only sockets whose remote address
//! is that one are compared, so other programs' sockets cannot make the counts differ.

use c1m_kernel::sockets::{count, By, SocketsArgs};
use socket2::{Domain, Socket, Type};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

const CONNS: usize = 6_000;
const HALF_CLOSED: usize = 500;

/// Counts /proc/net/tcp{,6} lines by (state, remote address) without sharing any code
/// with c1m.
fn proc_counts() -> HashMap<(u8, String), u64> {
    let mut m = HashMap::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines().skip(1) {
            let c: Vec<&str> = line.split_whitespace().collect();
            let st = u8::from_str_radix(c[3], 16).unwrap();
            let raddr = c[2].split(':').next().unwrap();
            let ip = if raddr.len() == 8 {
                let b = u32::from_str_radix(raddr, 16).unwrap().to_ne_bytes();
                Ipv4Addr::from(b).to_string()
            } else {
                raddr.to_string()
            };
            *m.entry((st, ip)).or_insert(0) += 1;
        }
    }
    m
}

fn args(by: By, state: &[&str], threads: u8) -> SocketsArgs {
    SocketsArgs {
        by,
        state: state.iter().map(|s| s.to_string()).collect(),
        json: false,
        limit: 0,
        threads: Some(threads),
        root: PathBuf::from("/"),
    }
}

/// The count of one group, asserting the one-pass and the two-thread dumps agree.
fn group(by: By, state: &[&str], key: &str) -> u64 {
    let n = |threads| {
        let c = count(&args(by, state, threads)).unwrap();
        c.groups
            .iter()
            .find(|g| g.key == key)
            .map_or(0, |g| g.count)
    };
    let (one, two) = (n(1), n(2));
    assert_eq!(one, two, "{by:?} {state:?} {key}: 1 thread vs 2");
    two
}

#[test]
fn counts_match_proc_net_tcp_on_12k_sockets() {
    let lim = c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    assert!(
        lim.soft as usize > 2 * CONNS + 100,
        "this test needs {} descriptors, RLIMIT_NOFILE is {lim:?}",
        2 * CONNS + 100
    );
    // An address of its own in 127/8, so other programs' sockets never fall in its groups.
    let pid = std::process::id();
    let ip = Ipv4Addr::new(127, 77, (pid >> 8) as u8, (pid as u8).max(1));
    let l = TcpListener::bind((ip, 0)).unwrap();
    let dest = l.local_addr().unwrap();
    let mut clients = Vec::with_capacity(CONNS);
    let mut servers = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::new(ip.into(), 0).into()).unwrap();
        s.connect(&dest.into()).unwrap();
        clients.push(TcpStream::from(s));
        servers.push(l.accept().unwrap().0);
    }
    // Half-close some: the client sends FIN (FIN-WAIT-2), the server end sits in CLOSE-WAIT.
    for c in &clients[..HALF_CLOSED] {
        c.shutdown(Shutdown::Write).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));

    let key = ip.to_string();
    let t = Instant::now();
    let all = group(By::Raddr, &[], &key);
    let netlink_time = t.elapsed();
    let estab = group(By::Raddr, &["estab"], &key);
    let close_wait = group(By::Raddr, &["close-wait"], &key);
    let fin_wait2 = group(By::Raddr, &["fin-wait-2"], &key);
    let port = dest.port().to_string();
    let listen_here = group(By::Lport, &["listen"], &port);
    let p = proc_counts();
    let proc_sum = |st: Option<u8>| -> u64 {
        p.iter()
            .filter(|((s, a), _)| *a == key && st.is_none_or(|st| st == *s))
            .map(|(_, v)| v)
            .sum()
    };

    // netlink and /proc agree...
    assert_eq!(all, proc_sum(None));
    assert_eq!(estab, proc_sum(Some(0x01)));
    assert_eq!(close_wait, proc_sum(Some(0x08)));
    assert_eq!(fin_wait2, proc_sum(Some(0x05)));
    // ...and on the figures this test built (both ends have this address as remote).
    assert_eq!(all, 2 * CONNS as u64);
    assert_eq!(estab, 2 * (CONNS - HALF_CLOSED) as u64);
    assert_eq!(close_wait, HALF_CLOSED as u64);
    assert_eq!(fin_wait2, HALF_CLOSED as u64);
    assert!(listen_here >= 1);
    // By state: the totals are at least what this test holds (other programs add to them).
    let by_state = count(&args(By::State, &[], 2)).unwrap();
    // And the automatic choice agrees with the explicit ones.
    let auto = SocketsArgs {
        threads: None,
        ..args(By::Raddr, &[], 1)
    };
    let auto_all = count(&auto).unwrap();
    let auto_ours = auto_all
        .groups
        .iter()
        .find(|g| g.key == key)
        .map(|g| g.count);
    assert_eq!(auto_ours, Some(2 * CONNS as u64));
    assert!(by_state.total > 2 * CONNS as u64);
    // By state on the live box takes ESTAB from /proc/net/snmp CurrEstab: it must equal what a
    // full dump of established sockets counts (retried: other programs may open or close
    // sockets between the two readings).
    let mut last = (0, 0);
    let agree = (0..5).any(|_| {
        let counter = count(&args(By::State, &["estab"], 1)).unwrap().total;
        let dumped = count(&args(By::Raddr, &["estab"], 1)).unwrap().total;
        last = (counter, dumped);
        counter == dumped
    });
    assert!(agree, "CurrEstab-based count vs dumped ESTAB: {last:?}");
    assert!(last.0 >= 2 * (CONNS - HALF_CLOSED) as u64);
    eprintln!("netlink count of all sockets by raddr (1 and 2 threads): {netlink_time:?}");
    drop(servers);
    drop(clients);
}
