//! Where socket rows come from: netlink sock_diag on the live box (root `/`), or the
//! /proc/net/tcp and tcp6 files of a fake tree (any other root). Both yield the same
//! [`SockRow`]s through a callback, so nothing has to hold a million of them.
//!
//! The /proc parser is also the reference `c1m sockets` is tested against.

use crate::root::Root;
use anyhow::{Context, Result};
use c1m_sys::sock_diag::{self, Shard, StateMask, TcpState};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One TCP socket as both sources see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SockRow {
    /// Kernel state number (see [`TcpState`]).
    pub state: u8,
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Listener: accept queue length. Others: unread bytes.
    pub rqueue: u32,
    /// Listener: backlog (netlink only; /proc shows 0). Others: unsent bytes.
    pub wqueue: u32,
}

/// Calls `f` for every TCP socket (both families) whose state is in `states`.
pub fn for_each(root: &Root, states: StateMask, mut f: impl FnMut(&SockRow)) -> Result<()> {
    if root.is_live() {
        sock_diag::dump_tcp_all(states, None, |m| f(&row(m))).context("sock_diag dump")?;
        return Ok(());
    }
    for rel in ["proc/net/tcp", "proc/net/tcp6"] {
        let path = root.path(rel);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        parse_proc_net_tcp(&text, |row| {
            if states.0 & (1u32 << (row.state & 31)) != 0 {
                f(row)
            }
        })
        .with_context(|| format!("parsing {}", path.display()))?;
    }
    Ok(())
}

/// Where to split the table between two dump threads: the middle of the ephemeral port range,
/// since one end of nearly every connection has a port spread over it.
fn shard_mid(root: &Root) -> u16 {
    match crate::doctor::sample::sysctl_nums(root, "net.ipv4.ip_local_port_range").as_deref() {
        Ok([lo, hi]) if hi >= lo && *hi <= 65535 => ((lo + hi) / 2) as u16,
        _ => 32768,
    }
}

/// Counts sockets per kernel state number, streaming (netlink on the live box; with
/// `parallel`, the connection table and the bind table are walked by two threads).
pub fn count_states(root: &Root, states: StateMask, parallel: bool) -> Result<[u64; 16]> {
    if root.is_live() {
        let counts = if parallel {
            sock_diag::count_tcp_states_parallel(states)
        } else {
            sock_diag::count_tcp_states(states)
        };
        return counts.context("sock_diag dump");
    }
    let mut counts = [0u64; 16];
    for_each(root, states, |r| counts[(r.state & 15) as usize] += 1)?;
    Ok(counts)
}

/// Folds every TCP socket whose state is in `states` into accumulators made by `init`: on the
/// live box with `parallel`, two threads each fold half the table (see [`sock_diag::Shard`])
/// and both accumulators are returned; otherwise there is one.
pub fn fold<T: Send>(
    root: &Root,
    states: StateMask,
    parallel: bool,
    init: impl Fn() -> T + Sync,
    f: impl Fn(&mut T, &SockRow) + Sync,
) -> Result<Vec<T>> {
    if !root.is_live() || !parallel {
        let mut acc = init();
        for_each(root, states, |r| f(&mut acc, r))?;
        return Ok(vec![acc]);
    }
    let mid = shard_mid(root);
    let run = |shard: Shard| -> Result<T> {
        let mut acc = init();
        sock_diag::dump_tcp_all(states, Some(shard), |m| f(&mut acc, &row(m)))
            .with_context(|| format!("sock_diag dump ({shard:?})"))?;
        Ok(acc)
    };
    let (a, b) = std::thread::scope(|s| {
        let other = s.spawn(|| run(Shard::Cross { mid }));
        (run(Shard::Same { mid }), other.join())
    });
    let b = b.map_err(|_| anyhow::anyhow!("sock_diag shard thread panicked"))?;
    Ok(vec![a?, b?])
}

fn row(m: &sock_diag::DiagMsg<'_>) -> SockRow {
    SockRow {
        state: m.state_raw(),
        local: m.local(),
        remote: m.remote(),
        rqueue: m.rqueue(),
        wqueue: m.wqueue(),
    }
}

/// Parses the text of /proc/net/tcp or tcp6, calling `f` per socket line.
pub fn parse_proc_net_tcp(text: &str, mut f: impl FnMut(&SockRow)) -> Result<()> {
    for (i, line) in text.lines().enumerate().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().take(5).collect();
        if cols.len() < 5 {
            continue;
        }
        let bad = || format!("line {}: {line:?}", i + 1);
        let local = parse_hex_addr(cols[1]).with_context(bad)?;
        let remote = parse_hex_addr(cols[2]).with_context(bad)?;
        let state = u8::from_str_radix(cols[3], 16).with_context(bad)?;
        let (tx, rx) = cols[4].split_once(':').with_context(bad)?;
        f(&SockRow {
            state,
            local,
            remote,
            rqueue: u32::from_str_radix(rx, 16).with_context(bad)?,
            wqueue: u32::from_str_radix(tx, 16).with_context(bad)?,
        });
    }
    Ok(())
}

/// `0100007F:1F90` (v4) or 32 hex digits + port (v6). The kernel prints each 32-bit word of
/// the address as it sits in memory, read as a native integer, so `to_ne_bytes` undoes it.
fn parse_hex_addr(s: &str) -> Result<SocketAddr> {
    let (addr, port) = s.split_once(':').context("no ':' in address")?;
    let port = u16::from_str_radix(port, 16).context("port")?;
    let word = |i: usize| -> Result<[u8; 4]> {
        let w = addr.get(i * 8..i * 8 + 8).context("short address")?;
        Ok(u32::from_str_radix(w, 16).context("address")?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        n => anyhow::bail!("address of {n} hex digits"),
    };
    Ok(SocketAddr::new(ip, port))
}

/// The display name of a kernel state number.
pub fn state_name(n: u8) -> String {
    TcpState::from_u8(n)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("STATE-{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v4_and_v6_lines() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 1 1\n";
        let mut rows = vec![];
        parse_proc_net_tcp(v4, |r| rows.push(*r)).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(rows[0].state, TcpState::Listen as u8);
        assert_eq!(rows[0].rqueue, 3);
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue\n   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        rows.clear();
        parse_proc_net_tcp(v6, |r| rows.push(*r)).unwrap();
        assert_eq!(rows[0].local, "[::1]:80".parse().unwrap());
        assert!(parse_proc_net_tcp("h\n 0: zz:1 00:0 01 0:0\n", |_| {}).is_err());
    }
}
