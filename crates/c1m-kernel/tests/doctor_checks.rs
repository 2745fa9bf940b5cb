//! Every doctor check against a fake /proc tree, in its passing and its failing state. The
//! tree starts healthy; each test breaks one thing (before the first sample for levels, between
//! the two samples for counters that must rise) and looks for that check's verdict and fix.

use c1m_kernel::doctor::ctx::{Ctx, Listener};
use c1m_kernel::doctor::recommend::plan_for;
use c1m_kernel::doctor::{run_checks, Finding, Status};
use c1m_kernel::params::Role;
use c1m_kernel::root::Root;
use std::fs;
use std::path::Path;
use tempfile::TempDir;

/// netstat counters, deliberately not in the kernel's order: checks must find them by name.
const NETSTAT_NAMES: &[&str] = &[
    "TCPTimeWaitOverflow",
    "SyncookiesSent",
    "ListenDrops",
    "TCPAbortOnMemory",
    "ListenOverflows",
    "TCPReqQFullDoCookies",
    "TCPMemoryPressures",
    "TCPReqQFullDrop",
];

struct Tree {
    dir: TempDir,
    netstat: Vec<u64>,
}

impl Tree {
    fn healthy() -> Tree {
        let t = Tree {
            dir: tempfile::tempdir().unwrap(),
            netstat: vec![0; NETSTAT_NAMES.len()],
        };
        t.write_netstat();
        t.put(
            "proc/net/snmp",
            "Tcp: RtoAlgorithm ActiveOpens\nTcp: 1 10\n",
        );
        t.sockstat(5, 0, 3, 100);
        t.put(
            "proc/net/softnet_stat",
            "000000ff 00000000 00000001 0\n00000100 00000000 00000000 0\n",
        );
        t.put("proc/sys/fs/file-nr", "450\t0\t100000\n");
        t.put("proc/sys/fs/nr_open", "1048576\n");
        t.put("proc/sys/net/core/somaxconn", "4096\n");
        t.put("proc/sys/net/core/netdev_max_backlog", "1000\n");
        t.put("proc/sys/net/core/netdev_budget", "300\n");
        t.put("proc/sys/net/ipv4/tcp_mem", "1000\t2000\t3000\n");
        t.put("proc/sys/net/ipv4/tcp_max_orphans", "1000\n");
        t.put("proc/sys/net/ipv4/tcp_max_tw_buckets", "1000\n");
        t.put("proc/sys/net/ipv4/tcp_max_syn_backlog", "512\n");
        t.put("proc/sys/net/ipv4/tcp_syncookies", "1\n");
        t.put("proc/sys/net/ipv4/ip_local_port_range", "32768\t60999\n");
        t.put("proc/sys/net/netfilter/nf_conntrack_count", "10\n");
        t.put("proc/sys/net/netfilter/nf_conntrack_max", "1000\n");
        t.put("proc/sys/net/netfilter/nf_conntrack_buckets", "1024\n");
        t.put("proc/sys/net/ipv4/tcp_keepalive_time", "7200\n");
        t.put("proc/sys/net/ipv4/tcp_keepalive_intvl", "75\n");
        t.put("proc/sys/net/ipv4/tcp_keepalive_probes", "9\n");
        t.put("proc/sys/net/ipv4/tcp_retries2", "15\n");
        t.put("proc/sys/net/ipv4/tcp_orphan_retries", "0\n");
        t.put("proc/sys/net/ipv4/tcp_notsent_lowat", "4294967295\n");
        t.put("proc/sys/net/ipv4/tcp_slow_start_after_idle", "0\n");
        t.put("proc/sys/net/ipv4/ip_local_reserved_ports", "\n");
        for stat in [
            "rx_dropped",
            "rx_missed_errors",
            "rx_fifo_errors",
            "rx_over_errors",
        ] {
            t.put(&format!("sys/class/net/eth0/statistics/{stat}"), "0\n");
        }
        t.put("sys/class/net/lo/statistics/rx_dropped", "5\n");
        t.tcp(&[], 8080, 10);
        t.process(1234, 10, 1024, 4096);
        // Host facts the tune plan sizes from (24 GiB, 2 CPUs, 4 KiB pages).
        t.put("proc/meminfo", "MemTotal:       25165824 kB\n");
        t.put("sys/devices/system/cpu/online", "0-1\n");
        t.put("proc/self/smaps", "KernelPageSize:        4 kB\n");
        t.put(
            "dev/kmsg",
            "6,1,100,-;Linux version 6.18\n6,2,200,-;EXT4-fs (vda): mounted\n",
        );
        t
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn put(&self, rel: &str, text: &str) {
        let p = self.root().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    fn append(&self, rel: &str, text: &str) {
        let p = self.root().join(rel);
        let mut s = fs::read_to_string(&p).unwrap();
        s.push_str(text);
        fs::write(p, s).unwrap();
    }

    fn write_netstat(&self) {
        let vals: Vec<String> = self.netstat.iter().map(|v| v.to_string()).collect();
        self.put(
            "proc/net/netstat",
            &format!(
                "TcpExt: {}\nTcpExt: {}\nIpExt: InOctets\nIpExt: 5\n",
                NETSTAT_NAMES.join(" "),
                vals.join(" ")
            ),
        );
    }

    fn bump(&mut self, name: &str, by: u64) {
        let i = NETSTAT_NAMES.iter().position(|n| *n == name).unwrap();
        self.netstat[i] += by;
        self.write_netstat();
    }

    fn sockstat(&self, inuse: u64, orphan: u64, tw: u64, mem: u64) {
        self.put(
            "proc/net/sockstat",
            &format!("sockets: used 20\nTCP: inuse {inuse} orphan {orphan} tw {tw} alloc {inuse} mem {mem}\nUDP: inuse 0 mem 0\n"),
        );
    }

    /// /proc/net/tcp with a listener on 127.0.0.1:`lport` and `n` outgoing connections from
    /// 127.0.0.1 to 127.0.0.1:`dport` starting at local port 40000, plus `extra` raw lines.
    fn tcp(&self, extra: &[String], dport: u16, n: u16) {
        let lo = "0100007F";
        let mut s = String::from("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n");
        s.push_str(&format!("   0: {lo}:{dport:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"));
        for i in 0..n {
            s.push_str(&format!(
                "   {}: {lo}:{:04X} {lo}:{dport:04X} 01 00000000:00000000 00:00000000 00000000     0        0 {} 1\n",
                i + 1,
                40000 + i,
                100 + i
            ));
        }
        for l in extra {
            s.push_str(l);
        }
        self.put("proc/net/tcp", &s);
    }

    fn process(&self, pid: u32, open: usize, soft: u64, hard: u64) {
        self.put(&format!("proc/{pid}/comm"), "server\n");
        self.put(
            &format!("proc/{pid}/limits"),
            &format!("Limit                     Soft Limit           Hard Limit           Units\nMax open files            {soft}                 {hard}                 files\n"),
        );
        let fd = self.root().join(format!("proc/{pid}/fd"));
        let _ = fs::remove_dir_all(&fd);
        fs::create_dir_all(&fd).unwrap();
        for i in 0..open {
            fs::write(fd.join(i.to_string()), "").unwrap();
        }
    }

    fn ctx(&self, conns: Option<u64>) -> Ctx {
        Ctx::begin(&Root::new(self.root()))
            .unwrap()
            .finish(conns)
            .unwrap()
    }

    /// Runs one check over a ctx taken with `between` applied between the two samples.
    fn check_rising(&mut self, name: &str, between: impl FnOnce(&mut Tree)) -> Finding {
        let p = Ctx::begin(&Root::new(self.root())).unwrap();
        between(self);
        let ctx = p.finish(None).unwrap();
        one(&ctx, name)
    }

    fn check(&self, name: &str) -> Finding {
        one(&self.ctx(None), name)
    }
}

fn one(ctx: &Ctx, name: &str) -> Finding {
    let mut f = run_checks(ctx, &[name.to_string()]).unwrap();
    assert_eq!(f.len(), 1);
    f.remove(0)
}

fn assert_status(f: &Finding, want: Status) {
    assert_eq!(f.status, want, "{f:#?}");
}

fn fixes(f: &Finding) -> String {
    f.fix.join("\n")
}

#[test]
fn healthy_tree_passes_every_check() {
    let t = Tree::healthy();
    let ctx = t.ctx(None);
    let all = run_checks(&ctx, &[]).unwrap();
    assert_eq!(all.len(), c1m_kernel::doctor::checks::REGISTRY.len());
    for f in &all {
        assert_eq!(f.status, Status::Pass, "{f:#?}");
        assert!(f.fix.is_empty(), "{f:#?}");
    }
}

#[test]
fn unknown_check_name_is_an_error() {
    let t = Tree::healthy();
    assert!(run_checks(&t.ctx(None), &["no.such".into()]).is_err());
}

#[test]
fn file_max() {
    let t = Tree::healthy();
    assert_status(&t.check("fd.file-max"), Status::Pass);
    t.put("proc/sys/fs/file-nr", "75000\t0\t100000\n");
    assert_status(&t.check("fd.file-max"), Status::Warn);
    t.put("proc/sys/fs/file-nr", "95000\t0\t100000\n");
    let f = t.check("fd.file-max");
    assert_status(&f, Status::Fail);
    assert!(fixes(&f).contains("sysctl -w fs.file-max=190000"), "{f:#?}");
    fs::remove_file(t.root().join("proc/sys/fs/file-nr")).unwrap();
    assert_status(&t.check("fd.file-max"), Status::Skipped);
}

#[test]
fn nr_open() {
    let t = Tree::healthy();
    let f = t.check("fd.nr-open");
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("1048576"));
    fs::remove_file(t.root().join("proc/sys/fs/nr_open")).unwrap();
    assert_status(&t.check("fd.nr-open"), Status::Skipped);
}

#[test]
fn process_at_its_fd_limit() {
    let t = Tree::healthy();
    assert_status(&t.check("fd.process"), Status::Pass);
    t.process(1234, 75, 100, 4096);
    assert_status(&t.check("fd.process"), Status::Warn);
    t.process(1234, 100, 100, 4096);
    let f = t.check("fd.process");
    assert_status(&f, Status::Fail);
    assert!(
        f.details[0].contains("pid 1234 (server): 100 of 100"),
        "{f:#?}"
    );
    assert_eq!(f.fix, vec!["prlimit --pid 1234 --nofile=4096:4096"]);
    // Already at the hard limit: the fix raises the hard limit too.
    t.process(1234, 100, 100, 100);
    assert!(fixes(&t.check("fd.process")).contains("--nofile=200:200"));
}

#[test]
fn somaxconn_and_full_accept_queue() {
    let t = Tree::healthy();
    let mut ctx = t.ctx(None);
    // /proc/net/tcp has the listener but not its backlog.
    assert_eq!(ctx.listeners.as_ref().unwrap().len(), 1);
    assert_status(&one(&ctx, "net.somaxconn"), Status::Pass);
    // The backlog comes from sock_diag on a live box; a fake tree injects it.
    ctx.listeners = Some(vec![Listener {
        local: "127.0.0.1:8080".parse().unwrap(),
        queued: 4096,
        backlog: Some(4096),
    }]);
    let f = one(&ctx, "net.somaxconn");
    assert_status(&f, Status::Fail);
    assert!(f.details[0].contains("127.0.0.1:8080 accept queue 4096/4096"));
    assert!(fixes(&f).contains("sysctl -w net.core.somaxconn=8192"));
    ctx.listeners.as_mut().unwrap()[0].queued = 3;
    let f = one(&ctx, "net.somaxconn");
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("1 capped at somaxconn"), "{}", f.summary);
    ctx.listeners = None;
    assert_status(&one(&ctx, "net.somaxconn"), Status::Skipped);
}

#[test]
fn accept_queue_overflow_rising() {
    let mut t = Tree::healthy();
    // Overflows since boot that are not rising now pass.
    t.bump("ListenOverflows", 500);
    let f = t.check_rising("tcp.accept-queue", |_| {});
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("500 ListenOverflows since boot"));
    let f = t.check_rising("tcp.accept-queue", |t| {
        t.bump("ListenOverflows", 7);
        t.bump("ListenDrops", 7);
    });
    assert_status(&f, Status::Fail);
    assert!(
        f.summary.contains("ListenOverflows +7, ListenDrops +7"),
        "{}",
        f.summary
    );
    assert!(fixes(&f).contains("net.core.somaxconn=8192"));
}

#[test]
fn syn_queue_drops_and_cookies() {
    let mut t = Tree::healthy();
    assert_status(&t.check_rising("tcp.syn-queue", |_| {}), Status::Pass);
    let f = t.check_rising("tcp.syn-queue", |t| t.bump("TCPReqQFullDoCookies", 3));
    assert_status(&f, Status::Warn);
    let f = t.check_rising("tcp.syn-queue", |t| t.bump("TCPReqQFullDrop", 2));
    assert_status(&f, Status::Fail);
    // With syncookies on, tcp_max_syn_backlog bounds nothing: the fix is somaxconn and the
    // listen backlog, never the syn backlog.
    assert!(
        !fixes(&f).contains("sysctl -w net.ipv4.tcp_max_syn_backlog"),
        "{f:#?}"
    );
    assert!(
        fixes(&f).contains("sysctl -w net.core.somaxconn=8192  # and restart the server with listen() backlog 8192"),
        "{f:#?}"
    );
    assert!(
        f.summary.contains("tcp_max_syn_backlog bounds nothing"),
        "{}",
        f.summary
    );
    t.put("proc/sys/net/ipv4/tcp_syncookies", "0\n");
    let f = t.check_rising("tcp.syn-queue", |t| t.bump("TCPReqQFullDrop", 2));
    assert!(fixes(&f).contains("tcp_syncookies=1"), "{f:#?}");
}

#[test]
fn tcp_memory_against_tcp_mem() {
    let mut t = Tree::healthy();
    assert_status(&t.check("tcp.memory"), Status::Pass);
    t.sockstat(5, 0, 3, 1500);
    assert_status(&t.check("tcp.memory"), Status::Warn);
    t.sockstat(5, 0, 3, 2000);
    let f = t.check("tcp.memory");
    assert_status(&f, Status::Fail);
    assert!(!f.fix.is_empty());
    t.sockstat(5, 0, 3, 100);
    let f = t.check_rising("tcp.memory", |t| t.bump("TCPAbortOnMemory", 1));
    assert_status(&f, Status::Fail);
    let f = t.check_rising("tcp.memory", |t| t.bump("TCPMemoryPressures", 1));
    assert_status(&f, Status::Warn);
}

#[test]
fn orphans_against_max() {
    let t = Tree::healthy();
    assert_status(&t.check("tcp.orphans"), Status::Pass);
    t.sockstat(5, 950, 3, 100);
    let f = t.check("tcp.orphans");
    assert_status(&f, Status::Fail);
    assert_eq!(f.fix, vec!["sysctl -w net.ipv4.tcp_max_orphans=2000"]);
}

#[test]
fn time_wait_overflow_and_fill() {
    let mut t = Tree::healthy();
    assert_status(&t.check_rising("tcp.time-wait", |_| {}), Status::Pass);
    t.sockstat(5, 0, 800, 100);
    assert_status(&t.check("tcp.time-wait"), Status::Warn);
    t.sockstat(5, 0, 3, 100);
    let f = t.check_rising("tcp.time-wait", |t| t.bump("TCPTimeWaitOverflow", 9));
    assert_status(&f, Status::Fail);
    assert!(f.summary.contains("TCPTimeWaitOverflow +9"));
    assert_eq!(f.fix, vec!["sysctl -w net.ipv4.tcp_max_tw_buckets=2000"]);
}

#[test]
fn ephemeral_ports_per_destination() {
    let t = Tree::healthy();
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("uses 10 of 28232"), "{}", f.summary);
    // Ten ports in range, ten connections to one destination: exhausted.
    t.put("proc/sys/net/ipv4/ip_local_port_range", "40000\t40009\n");
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Fail);
    assert!(
        f.summary
            .contains("127.0.0.1 -> 127.0.0.1:8080 uses 10 of 10"),
        "{}",
        f.summary
    );
    assert!(fixes(&f).contains("ip_local_port_range"));
    // Accepted sockets whose local port is a listening port are not outgoing ports.
    t.put("proc/sys/net/ipv4/ip_local_port_range", "8000\t8100\n");
    t.tcp(&[], 8080, 0);
    t.append("proc/net/tcp", "   9: 0100007F:1F90 0200007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 9 1\n");
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("no outgoing"), "{}", f.summary);
}

#[test]
fn conntrack_fill() {
    let t = Tree::healthy();
    assert_status(&t.check("net.conntrack"), Status::Pass);
    t.put("proc/sys/net/netfilter/nf_conntrack_count", "999\n");
    let f = t.check("net.conntrack");
    assert_status(&f, Status::Fail);
    // The max and the hash buckets together.
    assert_eq!(
        f.fix,
        vec![
            "sysctl -w net.netfilter.nf_conntrack_max=2000",
            "sysctl -w net.netfilter.nf_conntrack_buckets=2000"
        ]
    );
    fs::remove_dir_all(t.root().join("proc/sys/net/netfilter")).unwrap();
    assert_status(&t.check("net.conntrack"), Status::Skipped);
}

#[test]
fn softnet_drops_and_squeeze() {
    let mut t = Tree::healthy();
    assert_status(&t.check_rising("net.softnet", |_| {}), Status::Pass);
    let f = t.check_rising("net.softnet", |t| {
        t.put(
            "proc/net/softnet_stat",
            "000000ff 00000000 00000003 0\n00000100 00000000 00000000 0\n",
        )
    });
    assert_status(&f, Status::Warn);
    assert!(fixes(&f).contains("netdev_budget=600"));
    let f = t.check_rising("net.softnet", |t| {
        t.put(
            "proc/net/softnet_stat",
            "000000ff 00000010 00000003 0\n00000100 00000001 00000000 0\n",
        )
    });
    assert_status(&f, Status::Fail);
    assert!(f.summary.contains("dropped +17"), "{}", f.summary);
    assert!(fixes(&f).contains("sysctl -w net.core.netdev_max_backlog=2000"));
}

#[test]
fn kernel_log_known_messages() {
    let mut t = Tree::healthy();
    assert_status(&t.check_rising("kernel.log", |_| {}), Status::Pass);
    // Present before the interval: an old message warns.
    t.append("dev/kmsg", "4,3,300,-;TCP: too many orphaned sockets\n");
    let f = t.check_rising("kernel.log", |_| {});
    assert_status(&f, Status::Warn);
    assert!(fixes(&f).contains("tcp_max_orphans"));
    // Appearing during the interval fails.
    let f = t.check_rising("kernel.log", |t| {
        t.append(
            "dev/kmsg",
            "4,4,400,-;nf_conntrack: nf_conntrack: table full, dropping packet\n",
        )
    });
    assert_status(&f, Status::Fail);
    assert!(f
        .summary
        .starts_with("1 known messages during the interval, 1 earlier"));
    assert!(fixes(&f).contains("nf_conntrack_max"));
    fs::remove_file(t.root().join("dev/kmsg")).unwrap();
    assert_status(&t.check("kernel.log"), Status::Skipped);
}

/// Target-sized comparisons take their numbers from the tune plan (one source of truth): a
/// tree below the plan's `need` warns with the plan's `value` as the fix, and a tree set to
/// the plan's values passes.
#[test]
fn target_comparisons_use_the_tune_plan() {
    const CONNS: u64 = 1_000_000;
    let t = Tree::healthy();
    let root = Root::new(t.root());
    let plan = plan_for(&root, CONNS, Role::Server).unwrap();
    // key, check, where the key lives under proc/sys
    let keys = [
        ("fs.nr_open", "fd.nr-open"),
        ("fs.file-max", "fd.file-max"),
        ("net.core.somaxconn", "net.somaxconn"),
        ("net.ipv4.tcp_mem", "tcp.memory"),
        ("net.ipv4.tcp_max_orphans", "tcp.orphans"),
        ("net.ipv4.tcp_max_tw_buckets", "tcp.time-wait"),
        ("net.netfilter.nf_conntrack_max", "net.conntrack"),
        ("net.netfilter.nf_conntrack_buckets", "net.conntrack"),
    ];
    let sysctl_path = |k: &str| format!("proc/sys/{}", k.replace('.', "/"));
    // The healthy tree's small values are below what a million connections need.
    t.put("proc/sys/fs/nr_open", "1024\n");
    t.put("proc/sys/fs/file-nr", "450\t0\t1000\n");
    t.put("proc/sys/net/core/somaxconn", "128\n");
    let ctx = t.ctx(Some(CONNS));
    for (key, check) in keys {
        let value = plan
            .value(key)
            .unwrap_or_else(|| panic!("plan sizes {key}"));
        let f = one(&ctx, check);
        assert_status(&f, Status::Warn);
        let want_fix = if value.contains(' ') {
            format!("sysctl -w {key}=\"{value}\"")
        } else {
            format!("sysctl -w {key}={value}")
        };
        assert!(
            f.fix.contains(&want_fix),
            "{check}: {want_fix:?} not in {f:#?}"
        );
    }
    // Set every key to the plan's value: the same checks pass.
    for (key, _) in keys {
        let value = plan.value(key).unwrap();
        if key == "fs.file-max" {
            t.put("proc/sys/fs/file-nr", &format!("450\t0\t{value}\n"));
        } else {
            t.put(&sysctl_path(key), &format!("{value}\n"));
        }
    }
    let ctx = t.ctx(Some(CONNS));
    for (_, check) in keys {
        assert_status(&one(&ctx, check), Status::Pass);
    }
    // Without the host facts there is no plan, and the check says why it skipped.
    fs::remove_file(t.root().join("proc/meminfo")).unwrap();
    let f = one(&t.ctx(Some(CONNS)), "fd.nr-open");
    assert_status(&f, Status::Skipped);
    assert!(f.summary.contains("meminfo"), "{}", f.summary);
}

#[test]
fn orphans_penalty_counts_from_a_quarter() {
    // The kernel counts orphans ×2 or ×4 (tcp_out_of_resources): 300 of 1000 can already
    // trip "too many orphaned sockets", 500 needs only one doubling.
    let t = Tree::healthy();
    t.sockstat(5, 249, 3, 100);
    assert_status(&t.check("tcp.orphans"), Status::Pass);
    t.sockstat(5, 300, 3, 100);
    let f = t.check("tcp.orphans");
    assert_status(&f, Status::Warn);
    assert!(f.summary.contains("×2 or ×4"), "{}", f.summary);
    assert_eq!(f.fix, vec!["sysctl -w net.ipv4.tcp_max_orphans=2000"]);
    t.sockstat(5, 500, 3, 100);
    assert_status(&t.check("tcp.orphans"), Status::Fail);
    // And the orphan-retries check says how long they linger.
    let f = t.check("tcp.orphan-retries");
    assert_status(&f, Status::Warn);
    assert!(
        f.summary.contains("retransmits 8 times, ~102 s"),
        "{}",
        f.summary
    );
    assert_eq!(
        f.fix,
        vec!["sysctl -w net.ipv4.tcp_orphan_retries=3  # orphans give up after ~3 s"]
    );
}

#[test]
fn tcp_mem_max_above_half_of_ram_warns() {
    let t = Tree::healthy();
    // 24 GiB box: 3200000 pages × 4 KiB = 12.2 GiB > 12 GiB.
    t.put("proc/sys/net/ipv4/tcp_mem", "786432\t2097152\t3200000\n");
    let f = t.check("tcp.memory");
    assert_status(&f, Status::Warn);
    assert!(f.summary.contains("above 50 %"), "{}", f.summary);
    // The fix doubles pressure but keeps max under half of RAM (3145727 pages).
    assert_eq!(
        f.fix,
        vec!["sysctl -w net.ipv4.tcp_mem=\"1572861 2097150 3145722\""]
    );
    t.put("proc/sys/net/ipv4/tcp_mem", "786432\t2097152\t3100000\n");
    assert_status(&t.check("tcp.memory"), Status::Pass);
}

#[test]
fn two_gib_box_asking_for_one_million() {
    let t = Tree::healthy();
    t.put("proc/meminfo", "MemTotal:        2097152 kB\n");
    let ctx = t.ctx(Some(1_000_000));
    let f = one(&ctx, "mem.target");
    assert_status(&f, Status::Fail);
    assert!(
        f.summary
            .starts_with("1000000 connections need ~7.55 GiB of kernel memory"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("this box has 2.00 GiB"), "{}", f.summary);
    // The tcp_mem doctor offers is the plan's, capped: the kernel default of a 2 GiB box.
    t.put("proc/sys/net/ipv4/tcp_mem", "100\t200\t300\n");
    let f = one(&t.ctx(Some(1_000_000)), "tcp.memory");
    assert_eq!(
        f.fix,
        vec!["sysctl -w net.ipv4.tcp_mem=\"24576 32768 49152\""]
    );
    // Without a target it says how many fit.
    let f = t.check("mem.target");
    assert_status(&f, Status::Pass);
    assert!(
        f.summary.contains("about 401248 idle connections"),
        "{}",
        f.summary
    );
}

#[test]
fn ephemeral_ports_cliff_at_half_the_range() {
    let t = Tree::healthy();
    // 20 ports in the range, 10 connections to one destination: half the range, where
    // connect() falls off the cliff (bench/connect-cliff.sh).
    t.put("proc/sys/net/ipv4/ip_local_port_range", "40000\t40019\n");
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Fail);
    assert!(f.summary.contains("uses 10 of 20"), "{}", f.summary);
    let fx = fixes(&f);
    assert!(fx.contains("IP_BIND_ADDRESS_NO_PORT set, so the port is chosen at connect() when the destination is known"), "{fx}");
    // Widening the range to 55536 ports (24991 per source at 45 %) makes 1 source enough;
    // keeping 20 ports (9 per source) needs 2 for the 10 connections.
    assert!(
        fx.contains("then 1 source address for 10 connections to 127.0.0.1:8080"),
        "{fx}"
    );
    assert!(
        fx.contains("or, keeping this range, use 2 source addresses towards 127.0.0.1:8080 (9 connections each"),
        "{fx}"
    );
    // The how-to follows the role: a proxy is told about its `server ... source` lines.
    let ctx = Ctx::begin(&Root::new(t.root()))
        .unwrap()
        .finish_as(None, Role::Proxy)
        .unwrap();
    let fx = fixes(&one(&ctx, "net.ephemeral-ports"));
    assert!(fx.contains("`source ADDR`"), "{fx}");
    // 9 of 20 = 45 %: the planning margin, a warning.
    t.tcp(&[], 8080, 9);
    assert_status(&t.check("net.ephemeral-ports"), Status::Warn);
    t.tcp(&[], 8080, 8);
    assert_status(&t.check("net.ephemeral-ports"), Status::Pass);
    // With a target, the number of sources follows it: 1M needs 41.
    t.tcp(&[], 8080, 10);
    let f = one(&t.ctx(Some(1_000_000)), "net.ephemeral-ports");
    assert!(fixes(&f).contains("then 41 source addresses"), "{f:#?}");
}

#[test]
fn kernel_log_tells_orphans_from_tcp_mem_and_oom() {
    let mut t = Tree::healthy();
    let f = t.check_rising("kernel.log", |t| {
        t.append(
            "dev/kmsg",
            "4,3,300,-;TCP: out of memory -- consider tuning tcp_mem\n",
        )
    });
    assert_status(&f, Status::Fail);
    assert!(f.summary.contains("reached tcp_mem[2]"), "{}", f.summary);
    assert_eq!(f.fix, vec!["sysctl -w net.ipv4.tcp_mem=\"3000 4000 6000\""]);
    // The field notes' wording is the orphan condition, with the orphan fix.
    let f = t.check_rising("kernel.log", |t| {
        t.append("dev/kmsg", "4,4,400,-;TCP: too many of orphaned sockets\n")
    });
    assert!(
        f.summary
            .contains("exceeded tcp_max_orphans, counted ×2 or ×4"),
        "{}",
        f.summary
    );
    assert!(
        fixes(&f).contains("sysctl -w net.ipv4.tcp_max_orphans=2000"),
        "{f:#?}"
    );
    assert!(fixes(&f).contains("tcp_orphan_retries=3"), "{f:#?}");
    let f = t.check_rising("kernel.log", |t| {
        t.append(
            "dev/kmsg",
            "3,5,500,-;Out of memory: Killed process 812 (c1m) total-vm:9000kB\n",
        )
    });
    assert!(f.summary.contains("the OOM killer ran"), "{}", f.summary);
    assert!(fixes(&f).contains("invoked oom-killer"), "{f:#?}");
}

#[test]
fn limits_file_above_nr_open_fails() {
    let t = Tree::healthy();
    assert_status(&t.check("fd.limits-config"), Status::Pass);
    t.put(
        "etc/security/limits.d/90-seed.conf",
        "*  soft nofile 2000000\n*  hard nofile 2000000\n",
    );
    let f = t.check("fd.limits-config");
    assert_status(&f, Status::Fail);
    assert!(
        f.summary
            .contains("2 nofile lines above fs.nr_open 1048576"),
        "{}",
        f.summary
    );
    assert!(f.details[0].contains("login is refused"), "{f:#?}");
    assert_eq!(f.fix[0], "sysctl -w fs.nr_open=2000000 && echo 'fs.nr_open = 2000000' > /etc/sysctl.d/10-nr-open.conf");
    t.put("proc/sys/fs/nr_open", "1073741816\n");
    assert_status(&t.check("fd.limits-config"), Status::Pass);
}

#[test]
fn conntrack_max_raised_without_buckets() {
    let t = Tree::healthy();
    t.put("proc/sys/net/netfilter/nf_conntrack_max", "1000000\n");
    t.put("proc/sys/net/netfilter/nf_conntrack_buckets", "65536\n");
    let f = t.check("net.conntrack");
    assert_status(&f, Status::Warn);
    assert!(
        f.summary.contains("31 entries per chain when full"),
        "{}",
        f.summary
    );
    assert!(fixes(&f).contains("sysctl -w net.netfilter.nf_conntrack_buckets=1000000"));
}

#[test]
fn nic_drops_rising_and_ring_fix() {
    let t = Tree::healthy();
    let p = Ctx::begin(&Root::new(t.root())).unwrap();
    t.put("sys/class/net/eth0/statistics/rx_missed_errors", "42\n");
    let mut ctx = p.finish(None).unwrap();
    let f = one(&ctx, "net.nic-drops");
    assert_status(&f, Status::Fail);
    assert!(
        f.summary.contains("eth0 rx_missed_errors +42"),
        "{}",
        f.summary
    );
    assert!(!f.summary.contains("lo "), "{}", f.summary);
    ctx.rings.insert("eth0".into(), (512, 4096));
    let f = one(&ctx, "net.nic-drops");
    assert_eq!(
        f.fix,
        vec!["ethtool -G eth0 rx 4096  # RX ring 512 of 4096"]
    );
}

#[test]
fn listening_port_in_the_ephemeral_range() {
    let t = Tree::healthy();
    t.put("proc/sys/net/ipv4/ip_local_port_range", "8000\t60999\n");
    t.put("proc/sys/net/ipv4/ip_local_reserved_ports", "9000-9010\n");
    let f = t.check("net.reserved-ports");
    assert_status(&f, Status::Warn);
    assert_eq!(
        f.fix,
        vec!["sysctl -w net.ipv4.ip_local_reserved_ports=9000-9010,8080"]
    );
    t.put("proc/sys/net/ipv4/ip_local_reserved_ports", "8000-8100\n");
    assert_status(&t.check("net.reserved-ports"), Status::Pass);
}

#[test]
fn ehash_for_ten_million() {
    let t = Tree::healthy();
    t.append(
        "dev/kmsg",
        "6,3,1,-;TCP established hash table entries: 262144 (order: 9, 2097152 bytes, linear)\n",
    );
    assert_status(&one(&t.ctx(Some(1_000_000)), "tcp.ehash"), Status::Pass);
    let f = one(&t.ctx(Some(10_000_000)), "tcp.ehash");
    assert_status(&f, Status::Warn);
    assert!(f.summary.contains("= 39 per slot"), "{}", f.summary);
    assert!(fixes(&f).contains("thash_entries=16777216"), "{f:#?}");
}

#[test]
fn dead_peer_timers_and_notsent_lowat() {
    let t = Tree::healthy();
    let f = t.check("tcp.dead-peers");
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("after 7875 s"), "{}", f.summary);
    assert!(
        f.summary.contains("~925 s (tcp_retries2 15)"),
        "{}",
        f.summary
    );
    t.put("proc/sys/net/ipv4/tcp_retries2", "5\n");
    let f = t.check("tcp.dead-peers");
    assert_status(&f, Status::Warn);
    assert!(fixes(&f).starts_with("sysctl -w net.ipv4.tcp_retries2=8"));
    t.put("proc/sys/net/ipv4/tcp_notsent_lowat", "1000\n");
    let f = t.check("tcp.notsent-lowat");
    assert_status(&f, Status::Warn);
    assert_eq!(f.fix, vec!["sysctl -w net.ipv4.tcp_notsent_lowat=16384"]);
}

/// Seed 003: the kernel default 1 restarts slow start after idle; doctor warns with tune's value.
#[test]
fn slow_start_after_idle() {
    let t = Tree::healthy();
    assert_status(&t.check("tcp.slow-start-after-idle"), Status::Pass);
    t.put("proc/sys/net/ipv4/tcp_slow_start_after_idle", "1\n");
    let f = t.check("tcp.slow-start-after-idle");
    assert_status(&f, Status::Warn);
    assert_eq!(
        f.fix,
        vec!["sysctl -w net.ipv4.tcp_slow_start_after_idle=0"]
    );
    for role in [Role::Server, Role::Proxy] {
        let ctx = Ctx::begin(&Root::new(t.root()))
            .unwrap()
            .finish_as(None, role)
            .unwrap();
        assert_status(&one(&ctx, "tcp.slow-start-after-idle"), Status::Warn);
    }
    fs::remove_file(t.root().join("proc/sys/net/ipv4/tcp_slow_start_after_idle")).unwrap();
    assert_status(&t.check("tcp.slow-start-after-idle"), Status::Skipped);
}

/// No fix ever carries a placeholder: with every check failing at once, each fix is a
/// command with numbers in it.
#[test]
fn no_placeholder_in_any_fix() {
    let mut t = Tree::healthy();
    t.put("proc/sys/fs/file-nr", "99000\t0\t100000\n");
    t.sockstat(5, 900, 990, 2900);
    t.put("proc/sys/net/netfilter/nf_conntrack_count", "999\n");
    t.put("proc/sys/net/ipv4/ip_local_port_range", "40000\t40009\n");
    // Sysctls the softnet fix doubles are unreadable: the kernel defaults stand in.
    fs::remove_file(t.root().join("proc/sys/net/core/netdev_max_backlog")).unwrap();
    fs::remove_file(t.root().join("proc/sys/net/core/netdev_budget")).unwrap();
    let p = Ctx::begin(&Root::new(t.root())).unwrap();
    t.bump("TCPReqQFullDrop", 5);
    t.bump("ListenOverflows", 5);
    t.put(
        "proc/net/softnet_stat",
        "000000ff 00000010 00000003 0\n00000100 00000001 00000000 0\n",
    );
    t.append(
        "dev/kmsg",
        "4,9,900,-;TCP: too many orphaned sockets\n4,10,901,-;TCP: Possible SYN flooding on port 8080. Sending cookies.\n4,11,902,-;VFS: file-max limit 100000 reached\n4,12,903,-;nf_conntrack: table full, dropping packet\n",
    );
    let ctx = p.finish(None).unwrap();
    let all = run_checks(&ctx, &[]).unwrap();
    let mut n = 0;
    for f in &all {
        for cmd in &f.fix {
            n += 1;
            assert!(!cmd.contains('<'), "placeholder in {}: {cmd}", f.check);
            assert!(!cmd.contains("higher"), "placeholder in {}: {cmd}", f.check);
        }
    }
    assert!(n >= 10, "{all:#?}");
    let softnet = all.iter().find(|f| f.check == "net.softnet").unwrap();
    assert_eq!(
        softnet.fix,
        vec![
            "sysctl -w net.core.netdev_max_backlog=2000",
            "sysctl -w net.core.netdev_budget=600"
        ]
    );
}

#[test]
fn a_target_that_fits_with_tcp_mem_capped_is_a_warning() {
    // 2M on 24 GiB fits in RAM; only tcp_mem's cap keeps full buffers from all queuing
    // without memory pressure. Not a failure, and no "spread over 1 boxes".
    let t = Tree::healthy();
    let f = one(&t.ctx(Some(2_000_000)), "mem.target");
    assert_status(&f, Status::Warn);
    assert!(
        f.summary.starts_with("tcp_mem is capped at"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("the memory fits"), "{}", f.summary);
    let fx = fixes(&f);
    assert!(!fx.contains("boxes"), "{fx}");
    assert!(fx.contains("--buffered"), "{fx}");
}

/// A /proc/net/tcp line for a TIME-WAIT socket from `src`:`sport` to `dst`:`dport`
/// (addresses as /proc prints them: hex, little-endian).
fn time_wait_line(src: &str, sport: u16, dst: &str, dport: u16) -> String {
    format!("   0: {src}:{sport:04X} {dst}:{dport:04X} 06 00000000:00000000 03:00000F3C 00000000     0        0 0 3\n")
}

#[test]
fn time_wait_sockets_a_connect_can_reuse_do_not_count_against_the_port_budget() {
    // Right after a bench run: 2 connections still open and 10 TIME-WAIT sockets this box
    // opened toward 127.0.0.1:8080, in a 20-port range. With tcp_tw_reuse 2 (the default)
    // and timestamps on, connect() takes over a loopback TIME-WAIT 4-tuple after 1 s, so
    // only the 2 open connections hold ports.
    let t = Tree::healthy();
    let lo = "0100007F";
    t.put("proc/sys/net/ipv4/ip_local_port_range", "40000\t40019\n");
    t.put("proc/sys/net/ipv4/tcp_tw_reuse", "2\n");
    t.put("proc/sys/net/ipv4/tcp_timestamps", "1\n");
    let tw: Vec<String> = (0..10)
        .map(|i| time_wait_line(lo, 40002 + i, lo, 8080))
        .collect();
    t.tcp(&tw, 8080, 2);
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Pass);
    assert!(f.summary.contains("uses 2 of 20"), "{}", f.summary);
    assert!(
        f.summary.contains("10 TIME-WAIT sockets not counted: connect() reuses their 4-tuples once they are 1000 ms old (tcp_tw_reuse=2, a loopback end)"),
        "{}",
        f.summary
    );

    // tcp_tw_reuse 0: each TIME-WAIT socket holds its port toward that destination for
    // 60 s, so they count, and the finding says what they are and how to reuse them.
    t.put("proc/sys/net/ipv4/tcp_tw_reuse", "0\n");
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Fail);
    assert!(f.summary.contains("uses 12 of 20"), "{}", f.summary);
    assert!(f.summary.contains("10 of them TIME-WAIT"), "{}", f.summary);
    assert!(
        fixes(&f).contains("sysctl -w net.ipv4.tcp_tw_reuse=1"),
        "{f:#?}"
    );

    // tcp_tw_reuse 2 does not reach a pair with no loopback end.
    t.put("proc/sys/net/ipv4/tcp_tw_reuse", "2\n");
    let (a, b) = ("0100000A", "0200000A"); // 10.0.0.1, 10.0.0.2
    let tw: Vec<String> = (0..9)
        .map(|i| time_wait_line(a, 40002 + i, b, 80))
        .collect();
    t.tcp(&tw, 8080, 2);
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Warn);
    assert!(
        f.summary
            .contains("busiest: 10.0.0.1 -> 10.0.0.2:80 uses 9 of 20"),
        "{}",
        f.summary
    );

    // Without timestamps no TIME-WAIT can be reused (PAWS is what makes it safe).
    t.put("proc/sys/net/ipv4/tcp_timestamps", "0\n");
    let tw: Vec<String> = (0..10)
        .map(|i| time_wait_line(lo, 40002 + i, lo, 8080))
        .collect();
    t.tcp(&tw, 8080, 2);
    let f = t.check("net.ephemeral-ports");
    assert_status(&f, Status::Fail);
    assert!(
        fixes(&f).contains("sysctl -w net.ipv4.tcp_timestamps=1"),
        "{f:#?}"
    );
}
