//! The kernel log: reads /dev/kmsg without blocking (live) or `ROOT/dev/kmsg` as a file (fake
//! tree), and picks out the messages that mean a connection limit was hit.
//!
//! Owns: the list of known messages and what each one means. /dev/kmsg yields one record per
//! read as `prio,seq,usec,flags;text`; the sequence number tells old messages from ones that
//! appeared during the doctor's interval.

use crate::root::Root;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;

/// A message the kernel logs when a limit that matters here is hit: (needle, what it means,
/// the fix).
pub const KNOWN: &[(&str, &str, &str)] = &[
    (
        "too many orphaned sockets",
        "orphaned sockets exceeded tcp_max_orphans or tcp_mem; the kernel reset connections",
        "c1m tune --check   # raise net.ipv4.tcp_max_orphans / tcp_mem as recommended",
    ),
    (
        "out of memory -- consider tuning tcp_mem",
        "TCP hit tcp_mem[2]; sockets were aborted",
        "c1m tune --check   # size net.ipv4.tcp_mem for the target connection count",
    ),
    (
        "Possible SYN flooding on port",
        "a listener's SYN queue overflowed (syncookies sent or SYNs dropped)",
        "sysctl -w net.ipv4.tcp_max_syn_backlog=<higher>; raise net.core.somaxconn and the listen backlog",
    ),
    (
        "nf_conntrack: table full, dropping packet",
        "the conntrack table is full; new connections are dropped",
        "sysctl -w net.netfilter.nf_conntrack_max=<higher> (or exempt the port with iptables -t raw ... -j NOTRACK)",
    ),
    (
        "file-max limit",
        "the system ran out of file handles (fs.file-max)",
        "sysctl -w fs.file-max=<higher>",
    ),
];

/// One log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub seq: u64,
    pub text: String,
}

/// Parses one `prio,seq,usec,flags;text` record; a plain line (a dmesg dump) gets `fallback_seq`.
pub fn parse_record(line: &str, fallback_seq: u64) -> Record {
    if let Some((head, text)) = line.split_once(';') {
        let mut parts = head.split(',');
        if let (Some(_prio), Some(seq)) = (parts.next(), parts.next()) {
            if let Ok(seq) = seq.parse::<u64>() {
                let text = text.lines().next().unwrap_or("").to_string();
                return Record { seq, text };
            }
        }
    }
    Record {
        seq: fallback_seq,
        text: line.to_string(),
    }
}

/// Reads every record in the log. `Ok(None)` when the log cannot be read (no permission,
/// no file): the kernel-log check then says skipped.
pub fn read_log(root: &Root, live: bool) -> Option<Vec<Record>> {
    if !live {
        let text = std::fs::read_to_string(root.path("/dev/kmsg")).ok()?;
        return Some(
            text.lines()
                .enumerate()
                .map(|(i, l)| parse_record(l, i as u64 + 1))
                .collect(),
        );
    }
    let mut f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .ok()?;
    let mut out = Vec::new();
    // A record is at most ~8 KiB (a smaller buffer gets EINVAL); bound the loop anyway.
    let mut buf = vec![0u8; 16 * 1024];
    for _ in 0..1_000_000 {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let line = String::from_utf8_lossy(&buf[..n]);
                out.push(parse_record(&line, 0));
            }
            // EPIPE: records were overwritten while reading; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => break,
        }
    }
    Some(out)
}

/// The index into [`KNOWN`] of the first known message `text` contains.
pub fn classify(text: &str) -> Option<usize> {
    KNOWN
        .iter()
        .position(|(needle, _, _)| text.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kmsg_and_plain_lines() {
        let r = parse_record("4,1234,5678,-;TCP: too many orphaned sockets\n", 0);
        assert_eq!(r.seq, 1234);
        assert_eq!(classify(&r.text), Some(0));
        let p = parse_record("[ 1.0] nf_conntrack: table full, dropping packet", 9);
        assert_eq!(p.seq, 9);
        assert_eq!(classify(&p.text), Some(3));
        assert_eq!(classify("EXT4-fs mounted"), None);
    }
}
