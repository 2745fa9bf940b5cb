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

/// A condition the kernel reports in its log. Each has its own cause and its own fix: the
/// field notes (seeds 000-002) read "too many of orphaned sockets" as a tcp_mem message, which
/// it was only on kernels before 3.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Condition {
    /// Orphans (closed by their process, still finishing) over tcp_max_orphans.
    Orphans,
    /// TCP's queued data over tcp_mem[2].
    TcpMem,
    /// A listener's SYN queue overflowed.
    SynFlood,
    /// The conntrack table is full.
    ConntrackFull,
    /// fs.file-max reached.
    FileMax,
    /// The OOM killer ran.
    OomKill,
}

/// The exact wordings, with where each comes from. Matched as substrings of the message
/// text (the `TCP: ` prefix is pr_fmt's and varies).
pub const KNOWN: &[(&str, Condition, &str)] = &[
    (
        "too many orphaned sockets",
        Condition::Orphans,
        "net/ipv4/tcp.c tcp_check_oom() (Linux ≥ 3.1)",
    ),
    (
        "too many of orphaned sockets",
        Condition::Orphans,
        "Linux < 3.1 tcp_close(), quoted in the field notes; those kernels printed it for a full tcp_mem too",
    ),
    (
        "out of memory -- consider tuning tcp_mem",
        Condition::TcpMem,
        "net/ipv4/tcp.c tcp_check_oom() (Linux ≥ 3.1)",
    ),
    (
        "Out of socket memory",
        Condition::TcpMem,
        "Linux < 3.1 tcp_timer.c tcp_out_of_resources()",
    ),
    (
        "Possible SYN flooding on port",
        Condition::SynFlood,
        "net/ipv4/tcp_input.c tcp_syn_flood_action()",
    ),
    (
        "table full, dropping packet",
        Condition::ConntrackFull,
        "net/netfilter/nf_conntrack_core.c __nf_conntrack_alloc()",
    ),
    (
        "file-max limit",
        Condition::FileMax,
        "fs/file_table.c alloc_empty_file(): \"VFS: file-max limit %lu reached\"",
    ),
    (
        "invoked oom-killer",
        Condition::OomKill,
        "mm/oom_kill.c dump_header()",
    ),
    (
        "Out of memory: Killed process",
        Condition::OomKill,
        "mm/oom_kill.c __oom_kill_process()",
    ),
    (
        "Memory cgroup out of memory: Killed process",
        Condition::OomKill,
        "mm/oom_kill.c __oom_kill_process() (cgroup limit)",
    ),
];

impl Condition {
    /// What the condition means, in one sentence.
    pub fn meaning(self) -> &'static str {
        match self {
            Condition::Orphans => {
                "orphaned sockets (closed by their process, still finishing) exceeded \
                 tcp_max_orphans, counted ×2 or ×4 for sockets whose peer kept its window shut \
                 or after ICMP errors; those orphans were reset (not tcp_mem: that is \"out of \
                 memory -- consider tuning tcp_mem\")"
            }
            Condition::TcpMem => {
                "TCP's queued data reached tcp_mem[2]; sockets were aborted (TCPAbortOnMemory)"
            }
            Condition::SynFlood => {
                "a listener's SYN queue (its listen backlog, capped by somaxconn) overflowed; \
                 SYN cookies answered, or SYNs were dropped when syncookies are off"
            }
            Condition::ConntrackFull => {
                "the conntrack table is full; new connections' packets are dropped"
            }
            Condition::FileMax => "the system ran out of file handles (fs.file-max)",
            Condition::OomKill => {
                "the OOM killer ran: memory ran out before TCP memory pressure (tcp_mem) or the \
                 process's own limits stopped it"
            }
        }
    }
}

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

/// The condition of the first known message `text` contains.
pub fn classify(text: &str) -> Option<Condition> {
    KNOWN
        .iter()
        .find(|(needle, _, _)| text.contains(needle))
        .map(|k| k.1)
}

/// "TCP established hash table entries: N (order: ...)" from the boot log: the ehash size the
/// kernel chose (thash_entries= or from RAM).
pub fn ehash_entries(log: &[Record]) -> Option<u64> {
    log.iter().find_map(|r| {
        let rest = r
            .text
            .split("TCP established hash table entries: ")
            .nth(1)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kmsg_and_plain_lines() {
        let r = parse_record("4,1234,5678,-;TCP: too many orphaned sockets\n", 0);
        assert_eq!(r.seq, 1234);
        assert_eq!(classify(&r.text), Some(Condition::Orphans));
        let p = parse_record("[ 1.0] nf_conntrack: table full, dropping packet", 9);
        assert_eq!(p.seq, 9);
        assert_eq!(classify(&p.text), Some(Condition::ConntrackFull));
        assert_eq!(classify("EXT4-fs mounted"), None);
        // The two TCP conditions are told apart, in today's and the notes' wordings.
        assert_eq!(
            classify("TCP: out of memory -- consider tuning tcp_mem"),
            Some(Condition::TcpMem)
        );
        assert_eq!(
            classify("TCP: too many of orphaned sockets"),
            Some(Condition::Orphans)
        );
        assert_eq!(
            classify("Out of memory: Killed process 812 (c1m) total-vm:1kB"),
            Some(Condition::OomKill)
        );
        let boot = [parse_record(
            "6,90,1,-;TCP established hash table entries: 262144 (order: 9, 2097152 bytes, linear)",
            0,
        )];
        assert_eq!(ehash_entries(&boot), Some(262_144));
    }
}
