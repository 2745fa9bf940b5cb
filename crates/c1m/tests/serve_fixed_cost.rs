//! A worker's fixed cost, paid 50-odd times by `c1m serve`: its mappings of the `c1m` binary
//! hold no dirty page beyond the pointer tables a PIE relocates (BENCHMARKS.md "Linked as PIE:
//! the fixed cost"), it hands back the heap a burst of subscribers used once they are gone,
//! and it starts with a small heap (no clap command tree, no tracing span registry, no malloc
//! tcache in a worker).

use crate::common;

use std::time::{Duration, Instant};

#[test]
fn a_worker_dirties_only_the_relocated_tables_of_the_binary() {
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
    // PIE: each process relocates the binary's pointer tables; with .data/.bss that is 260 kB
    // measured (the cost BENCHMARKS.md "Linked as PIE: the fixed cost" states). Much more
    // would mean something else writes into the image, paid by every one of 50-odd workers.
    eprintln!("worker's dirty pages of the binary: {dirty_kb} kB");
    assert!(
        dirty_kb <= 384,
        "worker has {dirty_kb} kB of dirty binary pages"
    );
}

/// Resident kB of a process's `[heap]` mapping (smaps `Rss:`).
fn heap_rss_kb(pid: u32) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut in_heap = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            in_heap = line.ends_with("[heap]");
        } else if in_heap && line.starts_with("Rss:") {
            return line.split_whitespace().nth(1).unwrap().parse().unwrap();
        }
    }
    panic!("worker {pid} has no [heap] mapping");
}

#[test]
fn an_idle_worker_starts_with_a_small_heap() {
    // Each of the ~53 workers of a 1M box pays its idle heap: 116-120 kB before (clap's
    // command tree parsed and freed, tracing-subscriber's 32 KiB span table, chunks parked in
    // glibc's tcache that malloc_trim cannot give back), 28 kB after, at serve's 1M plan.
    let server = common::Server::start(&["--workers", "1"]);
    let worker = server.worker_pids()[0];
    // The worker trims its heap once right before its loop starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut heap = heap_rss_kb(worker);
    while heap > 64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        heap = heap_rss_kb(worker);
    }
    assert!(heap <= 64, "an idle worker's heap is {heap} kB resident");
}

#[test]
fn a_worker_gives_back_the_heap_a_burst_of_subscribers_used() {
    // 8,000 SSE subscribers in about a second leave behind, once they are gone, their
    // head-timeout wheel entries and the outgrown copies of the channel's member list: freed,
    // but resident unless the worker trims its heap (seen before the trim: +128 and +132 kB
    // for good; with it: +16 kB).
    let server = common::Server::start(&["--workers", "1", "--head-timeout", "2s"]);
    let worker = server.worker_pids()[0];
    std::thread::sleep(Duration::from_millis(500));
    let idle = heap_rss_kb(worker);
    let addr = server.http.to_string();
    let (_, report, _) = common::run_bench(&[
        &format!("http://{addr}/sub/burst"),
        "--proto",
        "sse",
        "--conns",
        "8000",
        "--rate",
        "8000",
        "--hold",
        "3s",
    ]);
    // A few may fail on a loaded box; the burst is what matters (8,000 left +100 to +132 kB).
    let held = report["result"]["online_at_end"].as_u64().unwrap();
    assert!(held >= 7000, "only {held} of 8,000 held");
    // The last head timeouts fire 2 s after the ramp; the worker trims at most 5 s later.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut after = heap_rss_kb(worker);
    while after > idle + 48 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        after = heap_rss_kb(worker);
    }
    assert!(
        after <= idle + 48,
        "worker heap {idle} kB idle, {after} kB after 8,000 subscribers came and went"
    );
}
