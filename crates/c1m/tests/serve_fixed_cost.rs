//! The `c1m` executable is linked at a fixed address (not PIE), so `c1m serve`'s 50-odd
//! exec'd worker processes share its pointer tables as clean file pages instead of each
//! relocating ~200 KiB of them (issue 16, BENCHMARKS.md "Issue 16 (branch lean)"). Checked on
//! the ELF header, then on a running worker: its mappings of the binary hold no dirty page
//! beyond `.data`/`.bss`.

use crate::common;

use std::time::{Duration, Instant};

/// ELF `e_type`: 2 = ET_EXEC (fixed address), 3 = ET_DYN (PIE).
fn elf_type(path: &str) -> u16 {
    let bytes = std::fs::read(path).expect("reading the c1m binary");
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    u16::from_le_bytes([bytes[16], bytes[17]])
}

#[test]
fn c1m_is_not_position_independent() {
    assert_eq!(
        elf_type(env!("CARGO_BIN_EXE_c1m")),
        2,
        "c1m is linked as PIE"
    );
}

#[test]
fn a_worker_keeps_the_binary_pages_clean() {
    // A binary cargo has just linked sits in the page cache as dirty pages until writeback
    // (~30 s), and smaps counts those as the worker's Private_Dirty: flush it first, or the
    // test fails right after a build whatever the link mode (seen: 292 kB).
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_c1m")).unwrap();
    std::fs::File::open(&exe).unwrap().sync_all().unwrap();
    let server = common::Server::start(&["--workers", "1"]);
    // The worker is the master's child; wait (bounded) until it has mapped the binary.
    let deadline = Instant::now() + Duration::from_secs(10);
    let dirty_kb = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", server.child.id()))
                .unwrap_or_default();
        if let Some(worker) = children.split_whitespace().next() {
            if let Ok(smaps) = std::fs::read_to_string(format!("/proc/{worker}/smaps")) {
                let mut in_exe = false;
                let mut dirty = 0u64;
                for line in smaps.lines() {
                    let first = line.split_whitespace().next().unwrap_or("");
                    if first.contains('-') && !first.ends_with(':') {
                        in_exe = line.ends_with(exe.to_str().unwrap());
                    } else if in_exe && line.starts_with("Private_Dirty:") {
                        dirty += line
                            .split_whitespace()
                            .nth(1)
                            .unwrap()
                            .parse::<u64>()
                            .unwrap();
                    }
                }
                if smaps.contains(exe.to_str().unwrap()) {
                    break dirty;
                }
            }
        }
        assert!(Instant::now() < deadline, "no worker mapped the binary");
        std::thread::sleep(Duration::from_millis(100));
    };
    // PIE: ~210 kB of relocated pointer tables per process. Fixed address: .data only.
    assert!(
        dirty_kb <= 64,
        "worker has {dirty_kb} kB of dirty binary pages"
    );
}
