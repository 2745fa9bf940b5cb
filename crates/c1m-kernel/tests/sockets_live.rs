//! `c1m sockets` on real loopback sockets: 12,000 sockets (6,000 connections, both ends in this
//! process), some half-closed to get FIN-WAIT-2 / CLOSE-WAIT, counted through netlink and
//! checked against an independent count of /proc/net/tcp and tcp6.
//!
//! Only sockets on this test's own listening port are compared, so other programs' sockets
//! coming and going between the two reads cannot make the counts differ.

use c1m_kernel::sockets::{count, By, SocketsArgs};
use std::collections::HashMap;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

const CONNS: usize = 6_000;
const HALF_CLOSED: usize = 500;

/// Counts /proc/net/tcp{,6} lines by (state hex, local port, remote port) without sharing
/// any code with c1m.
fn proc_counts() -> HashMap<(u8, u16, u16), u64> {
    let mut m = HashMap::new();
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines().skip(1) {
            let c: Vec<&str> = line.split_whitespace().collect();
            let port = |s: &str| u16::from_str_radix(s.rsplit(':').next().unwrap(), 16).unwrap();
            let st = u8::from_str_radix(c[3], 16).unwrap();
            *m.entry((st, port(c[1]), port(c[2]))).or_insert(0) += 1;
        }
    }
    m
}

fn args(by: By, state: &[&str]) -> SocketsArgs {
    SocketsArgs {
        by,
        state: state.iter().map(|s| s.to_string()).collect(),
        json: false,
        limit: 0,
        root: PathBuf::from("/"),
    }
}

fn group(by: By, state: &[&str], key: u16) -> u64 {
    let c = count(&args(by, state)).unwrap();
    c.groups
        .iter()
        .find(|g| g.key == key.to_string())
        .map_or(0, |g| g.count)
}

#[test]
fn counts_match_proc_net_tcp_on_12k_sockets() {
    let lim = c1m_sys::rlimit::raise_nofile_to_hard().unwrap();
    assert!(
        lim.soft as usize > 2 * CONNS + 100,
        "this test needs {} descriptors, RLIMIT_NOFILE is {lim:?}",
        2 * CONNS + 100
    );
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut clients = Vec::with_capacity(CONNS);
    let mut servers = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        clients.push(TcpStream::connect(("127.0.0.1", port)).unwrap());
        servers.push(l.accept().unwrap().0);
    }
    // Half-close some: the client sends FIN (FIN-WAIT-2), the server end sits in CLOSE-WAIT.
    for c in &clients[..HALF_CLOSED] {
        c.shutdown(Shutdown::Write).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(300));

    let t = Instant::now();
    let lport_all = group(By::Lport, &[], port);
    let netlink_time = t.elapsed();
    let dport_all = group(By::Dport, &[], port);
    let estab_server = group(By::Lport, &["estab"], port);
    let close_wait = group(By::Lport, &["close-wait"], port);
    let fin_wait2 = group(By::Dport, &["fin-wait-2"], port);
    let listen = group(By::Lport, &["listen"], port);
    let p = proc_counts();
    let proc_sum = |f: &dyn Fn(&(u8, u16, u16)) -> bool| -> u64 {
        p.iter().filter(|(k, _)| f(k)).map(|(_, v)| v).sum()
    };

    assert_eq!(lport_all, proc_sum(&|k| k.1 == port));
    assert_eq!(dport_all, proc_sum(&|k| k.2 == port));
    assert_eq!(estab_server, proc_sum(&|k| k.0 == 0x01 && k.1 == port));
    assert_eq!(close_wait, proc_sum(&|k| k.0 == 0x08 && k.1 == port));
    assert_eq!(fin_wait2, proc_sum(&|k| k.0 == 0x05 && k.2 == port));
    assert_eq!(listen, proc_sum(&|k| k.0 == 0x0A && k.1 == port));
    // And the figures are the ones this test built.
    assert_eq!(lport_all, CONNS as u64 + 1);
    assert_eq!(dport_all, CONNS as u64);
    assert_eq!(close_wait, HALF_CLOSED as u64);
    assert_eq!(fin_wait2, HALF_CLOSED as u64);
    assert_eq!(estab_server, (CONNS - HALF_CLOSED) as u64);
    assert_eq!(listen, 1);
    // By state: the totals are at least what this test holds (other programs add to them).
    let by_state = count(&args(By::State, &[])).unwrap();
    assert!(by_state.total > 2 * CONNS as u64);
    eprintln!("netlink count of all sockets by lport: {netlink_time:?}");
    drop(servers);
    drop(clients);
}
