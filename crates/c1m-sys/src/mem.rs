//! Memory of a process as the kernel accounts it: RSS and PSS from /proc/PID/smaps_rollup
//! (PSS divides shared pages among their sharers, so summing it over processes is honest).

use std::io;

/// Resident and proportional set size of one process, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
}

/// Reads /proc/PID/smaps_rollup.
pub fn process_memory(pid: u32) -> io::Result<ProcessMemory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    Ok(parse_smaps_rollup(&text))
}

/// This process's resident set from /proc/self/status `VmRSS` (kB): the kernel's running
/// counter, cheap enough for every stats report (smaps_rollup walks the page tables).
pub fn own_rss_bytes() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/status")?;
    parse_vm_rss(&text).ok_or_else(|| io::Error::other("no VmRSS line in /proc/self/status"))
}

/// The `VmRSS:` line of /proc/PID/status, in bytes.
pub fn parse_vm_rss(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Parses the `Rss:` and `Pss:` lines (kB) of smaps_rollup text.
pub fn parse_smaps_rollup(text: &str) -> ProcessMemory {
    let mut mem = ProcessMemory::default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Ok(kb) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "Rss:" => mem.rss_bytes = kb * 1024,
            "Pss:" => mem.pss_bytes = kb * 1024,
            _ => {}
        }
    }
    mem
}

#[cfg(test)]
mod tests {
    #[test]
    fn vm_rss_is_read_in_bytes() {
        let text = "Name:\tc1m\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t1\n";
        assert_eq!(super::parse_vm_rss(text), Some(1234 * 1024));
        assert_eq!(super::parse_vm_rss("Name: x\n"), None);
        assert!(super::own_rss_bytes().unwrap() > 0);
    }
    use super::*;

    #[test]
    fn parses_rollup_fields() {
        let text = "55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:                1234 kB\nPss:                 800 kB\nPss_Anon:            600 kB\n";
        assert_eq!(
            parse_smaps_rollup(text),
            ProcessMemory {
                rss_bytes: 1234 * 1024,
                pss_bytes: 800 * 1024
            }
        );
    }

    #[test]
    fn reads_own_process() {
        let mem = process_memory(std::process::id()).unwrap();
        assert!(mem.rss_bytes > 0 && mem.pss_bytes > 0 && mem.pss_bytes <= mem.rss_bytes);
    }
}
