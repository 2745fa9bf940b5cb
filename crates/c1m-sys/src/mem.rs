//! Memory of a process as the kernel accounts it: RSS and PSS from /proc/PID/smaps_rollup
//! (PSS divides shared pages among their sharers, so summing it over processes is honest).

use std::io;

/// Resident, proportional and private set size of one process, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessMemory {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    /// Pages mapped by this process alone (Private_Clean + Private_Dirty): unlike PSS, it does
    /// not move when other processes map or unmap the same binary.
    pub private_bytes: u64,
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
            "Private_Clean:" | "Private_Dirty:" => mem.private_bytes += kb * 1024,
            _ => {}
        }
    }
    mem
}

/// What [`release_idle_memory`] gave back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Whether malloc_trim returned any heap memory to the kernel.
    pub heap_trimmed: bool,
    /// Bytes of stack address range (below the caller's frame) handed back with
    /// `MADV_DONTNEED`; the pages that were resident in it stop counting in RSS and PSS.
    pub stack_bytes: usize,
}

/// Room left untouched below the caller's frame: this function's own frame and the libc calls
/// it makes live there (a few hundred bytes; the rest is margin).
const STACK_MARGIN: usize = 16 * 1024;

/// Gives back to the kernel what start-up touched and serving will not use again: free heap
/// pages (glibc's malloc_trim) and the calling thread's stack pages below the caller's frame
/// (parsing config, building tables and reading the first frames dig deeper than the serving
/// loop does, and those pages stay resident otherwise). Call it at a shallow point right
/// before a long-running loop. A later deeper call only faults fresh zero pages back in:
/// nothing is lost, which is why this is safe at any time. It cuts a fixed cost paid in every
/// process.
#[inline(never)]
pub fn release_idle_memory() -> Released {
    let mut released = Released {
        heap_trimmed: trim_heap(),
        ..Released::default()
    };
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    let Some((low, _)) = stack_mapping_of(here) else {
        return released;
    };
    let top = here.saturating_sub(STACK_MARGIN) & !(page_size() - 1);
    if top <= low {
        return released;
    }
    // SAFETY: [low, top) is part of the private anonymous mapping that holds this function's
    // own frame (found in /proc/self/maps above), i.e. this thread's stack, and lies at least
    // STACK_MARGIN below a local of this function, so below every live frame (the stack grows
    // down), including this one and the madvise call it makes. No data lives there:
    // MADV_DONTNEED on private anonymous memory only discards the pages, and a later touch maps
    // a zero page, which is all an unused stack page is.
    let ret = unsafe { libc::madvise(low as *mut libc::c_void, top - low, libc::MADV_DONTNEED) };
    if ret == 0 {
        released.stack_bytes = top - low;
    }
    released
}

/// Hands free heap pages back to the kernel (glibc's `malloc_trim(0)`: the free top of the heap
/// and every whole page inside a free chunk, with `MADV_DONTNEED`); true when any went back.
/// Without it, memory a burst used and freed (a ramp's pending head timeouts, the outgrown
/// copies of a growing member list) stays resident for good: glibc only trims the heap's top,
/// and only above its trim threshold. Cost: one walk of the free lists, plus a page fault later
/// for each page given back and used again. A no-op (false) off glibc.
pub fn trim_heap() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: malloc_trim only walks and releases glibc's own free lists; it takes the
        // allocator's lock and has no precondition on the caller.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

/// The private, writable, anonymous mapping that holds `addr` (a thread's stack when `addr`
/// is a local): (lowest address, end), from /proc/self/maps.
fn stack_mapping_of(addr: usize) -> Option<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    mapping_of(&maps, addr)
}

/// The mapping of `maps` whose range holds `addr`, if it is a stack: the main thread's
/// `[stack]`, or a private writable anonymous mapping right above a `---p` guard page (glibc's
/// thread stacks). Any other anonymous mapping is refused: it could be heap merged with the
/// stack, and nothing below the frame may be discarded then.
fn mapping_of(maps: &str, addr: usize) -> Option<(usize, usize)> {
    let mut guard_end = None;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((low, high)) = range.split_once('-').and_then(|(l, h)| {
            Some((
                usize::from_str_radix(l, 16).ok()?,
                usize::from_str_radix(h, 16).ok()?,
            ))
        }) else {
            continue;
        };
        if (low..high).contains(&addr) {
            let inode = fields.nth(2);
            let name = fields.next();
            let anonymous_rw = perms == "rw-p" && inode == Some("0");
            let main_stack = name == Some("[stack]");
            let thread_stack = name.is_none() && guard_end == Some(low);
            return (anonymous_rw && (main_stack || thread_stack)).then_some((low, high));
        }
        guard_end = (perms == "---p").then_some(high);
    }
    None
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    }
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
        let text = "55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:                1234 kB\nPss:                 800 kB\nPss_Anon:            600 kB\nShared_Clean:        500 kB\nPrivate_Clean:       100 kB\nPrivate_Dirty:       634 kB\n";
        assert_eq!(
            parse_smaps_rollup(text),
            ProcessMemory {
                rss_bytes: 1234 * 1024,
                pss_bytes: 800 * 1024,
                private_bytes: 734 * 1024,
            }
        );
    }

    #[test]
    fn stack_mapping_is_found() {
        let maps = "55d0-55e0 r--p 00000000 08:01 1 /bin/x\n\
                    6000-7000 rw-p 00000000 00:00 0 \n\
                    7e00-7f00 ---p 00000000 00:00 0 \n\
                    7f00-7f40 rw-p 00000000 00:00 0 \n\
                    7f40-7f50 rw-p 00000000 08:01 7 /lib/libc.so\n\
                    7ffc0000-7ffc2000 rw-p 00000000 00:00 0                          [stack]\n";
        assert_eq!(mapping_of(maps, 0x7ffc1000), Some((0x7ffc0000, 0x7ffc2000)));
        assert_eq!(
            mapping_of(maps, 0x7f10),
            Some((0x7f00, 0x7f40)),
            "above a guard"
        );
        assert_eq!(
            mapping_of(maps, 0x6010),
            None,
            "anonymous, no guard below: heap"
        );
        assert_eq!(mapping_of(maps, 0x7f48), None, "file-backed");
        assert_eq!(mapping_of(maps, 0x55d8), None, "read-only");
        assert_eq!(mapping_of(maps, 0x10), None);
    }

    /// Touches about `kib` KiB of stack below the caller, so there is something to give back.
    #[inline(never)]
    fn dig(kib: usize) -> u8 {
        let mut buf = [0u8; 1024];
        std::hint::black_box(&mut buf);
        if kib == 0 {
            return buf[7];
        }
        buf[0] = kib as u8;
        buf[0].wrapping_add(dig(kib - 1))
    }

    /// Resident kB of the mapping starting at `low` (/proc/self/smaps).
    fn resident_kb(low: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{low:x}-");
        let block = smaps.split_once(&format!("\n{head}")).map_or_else(
            || smaps.strip_prefix(&head).map(str::to_string).unwrap(),
            |(_, rest)| rest.to_string(),
        );
        let line = block.lines().find(|l| l.starts_with("Rss:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn idle_stack_pages_below_the_caller_are_given_back() {
        // On a thread of its own with a known stack, so nothing else touches that mapping.
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn(|| {
                std::hint::black_box(dig(2048));
                let marker = 0u8;
                let here = std::hint::black_box(&marker) as *const u8 as usize;
                let (low, _) = stack_mapping_of(here).expect("this thread's stack mapping");
                let before = resident_kb(low);
                let released = release_idle_memory();
                let after = resident_kb(low);
                assert!(released.stack_bytes >= 2 << 20, "{released:?}");
                assert!(
                    before >= 2048 && after + 1900 <= before,
                    "{before} kB -> {after} kB"
                );
                // The stack still works (fresh zero pages come back on demand).
                std::hint::black_box(dig(1024));
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn reads_own_process() {
        let mem = process_memory(std::process::id()).unwrap();
        assert!(mem.rss_bytes > 0 && mem.pss_bytes > 0 && mem.pss_bytes <= mem.rss_bytes);
    }
}
