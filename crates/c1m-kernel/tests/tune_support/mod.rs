//! Fake trees for the tune tests: a temp directory standing for `/` on a 24 GiB, 2-CPU,
//! 4 KiB-page box whose sysctls hold a 6.x kernel's defaults (tab-separated, as procfs prints
//! them). Tests never touch the live /proc or /etc.

#![allow(dead_code)]

use c1m_kernel::tune::{run_to_string, TuneArgs};
use clap::Parser;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// 24 GiB in kB, as /proc/meminfo prints it.
pub const MEM_KB: u64 = 24 * 1024 * 1024;

/// Live defaults of a 24 GiB box (kernel 6.x).
pub const DEFAULTS: &[(&str, &str)] = &[
    ("fs.nr_open", "1048576\n"),
    ("fs.file-max", "2516582\n"),
    ("fs.epoll.max_user_watches", "5491489\n"),
    ("net.ipv4.tcp_mem", "294912\t393216\t589824\n"),
    ("net.ipv4.tcp_rmem", "4096\t131072\t33554432\n"),
    ("net.ipv4.tcp_wmem", "4096\t16384\t4194304\n"),
    ("net.core.somaxconn", "4096\n"),
    ("net.ipv4.tcp_max_syn_backlog", "2048\n"),
    ("net.ipv4.tcp_syncookies", "1\n"),
    ("net.ipv4.ip_local_port_range", "32768\t60999\n"),
    ("net.ipv4.tcp_tw_reuse", "2\n"),
    ("net.ipv4.tcp_max_tw_buckets", "131072\n"),
    ("net.ipv4.tcp_max_orphans", "131072\n"),
    ("net.ipv4.tcp_fin_timeout", "60\n"),
    ("net.ipv4.tcp_slow_start_after_idle", "1\n"),
    ("net.ipv4.tcp_keepalive_time", "7200\n"),
    ("net.core.netdev_max_backlog", "1000\n"),
    ("net.ipv4.ip_no_pmtu_disc", "0\n"),
    ("net.ipv4.tcp_window_scaling", "1\n"),
    ("net.netfilter.nf_conntrack_max", "262144\n"),
    ("vm.swappiness", "60\n"),
];

pub struct Fake {
    pub dir: TempDir,
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    tune: TuneArgs,
}

impl Fake {
    pub fn new() -> Fake {
        let f = Fake {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        f.write(
            "/proc/meminfo",
            &format!("MemTotal:       {MEM_KB} kB\nMemFree:        {MEM_KB} kB\n"),
        );
        f.write("/sys/devices/system/cpu/online", "0-1\n");
        f.write(
            "/proc/self/smaps",
            "55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1 /bin/c1m\nSize:                  4 kB\nKernelPageSize:        4 kB\n",
        );
        for (k, v) in DEFAULTS {
            f.sysctl(k, v);
        }
        f
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, abs: &str) -> PathBuf {
        self.root().join(abs.trim_start_matches('/'))
    }

    pub fn write(&self, abs: &str, content: &str) {
        let p = self.path(abs);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    pub fn read(&self, abs: &str) -> Option<String> {
        fs::read_to_string(self.path(abs)).ok()
    }

    pub fn sysctl_path(key: &str) -> String {
        format!("/proc/sys/{}", key.replace('.', "/"))
    }

    pub fn sysctl(&self, key: &str, value: &str) {
        self.write(&Self::sysctl_path(key), value);
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.read(&Self::sysctl_path(key))
    }

    pub fn remove(&self, abs: &str) {
        fs::remove_file(self.path(abs)).unwrap();
    }

    pub fn remove_sysctl(&self, key: &str) {
        fs::remove_file(self.path(&Self::sysctl_path(key))).unwrap();
    }

    /// Runs `c1m tune ARGS --root <fake>`; Ok((stdout, exit code)) or the error text.
    pub fn run(&self, args: &[&str]) -> Result<(String, u8), String> {
        let root = self.root().to_str().unwrap().to_string();
        let mut argv = vec!["tune"];
        argv.extend_from_slice(args);
        if !args.contains(&"explain") {
            argv.extend(["--root", root.as_str()]);
        }
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        run_to_string(cli.tune).map_err(|e| format!("{e:#}"))
    }

    /// Every file under the tree with its exact bytes: the before/after picture for revert.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root().to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(self.root()).unwrap().to_path_buf();
                    out.insert(rel, fs::read(&p).unwrap());
                }
            }
        }
        out
    }
}
