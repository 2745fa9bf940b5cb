//! `c1m tune --conns N`: the printed plan in text, json and sysctl formats, against a fake
//! 24 GiB / 2 CPU / 4 KiB-page tree.

use crate::tune_support;

use c1m_kernel::params::{Verdict, PARAMS};
use tune_support::Fake;

#[test]
fn text_plan_has_files_math_and_reasons() {
    let f = Fake::new();
    let (out, code) = f.run(&["--conns", "1M"]).unwrap();
    assert_eq!(code, 0);
    // Hand-computed: 1e6 × 4096 B / 4096 B = 1e6 pages pressure, kernel shape around it.
    assert!(
        out.contains("net.ipv4.tcp_mem = 750000 1000000 1500000"),
        "{out}"
    );
    assert!(out.contains("fs.nr_open = 1048576"), "{out}");
    assert!(out.contains("net.core.somaxconn = 16384"), "{out}");
    // 24 GiB × 3/4 / (3806 B socket + 208 B epoll watch) = 4814985 idle connections.
    assert!(out.contains("4814985 idle connections"), "{out}");
    assert!(out.contains("*     hard  nofile  1048576"), "{out}");
    assert!(out.contains("root  hard  nofile  1048576"), "{out}");
    assert!(out.contains("LimitNOFILE=1048576"), "{out}");
    // nr_open is listed before anything else in the drop-in.
    let first = out
        .lines()
        .find(|l| l.trim_start().starts_with("fs.") || l.trim_start().starts_with("net."))
        .unwrap();
    assert!(first.contains("fs.nr_open"), "{first}");
    // Every value line is followed by its why.
    assert!(out.contains("# accept queue for reconnect storms"), "{out}");
}

#[test]
fn sysctl_format_never_writes_refused_keys() {
    let f = Fake::new();
    for role in ["server", "client", "proxy"] {
        let (out, code) = f
            .run(&["--conns", "1000000", "--role", role, "--format", "sysctl"])
            .unwrap();
        assert_eq!(code, 0);
        let keys: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('='))
            .map(|l| l.split('=').next().unwrap().trim())
            .collect();
        assert!(keys.len() >= 8, "{role}: {out}");
        for k in &keys {
            let p = PARAMS.iter().find(|p| p.key == *k).expect(k);
            assert!(p.verdict.writes(), "{role} writes {k} ({:?})", p.verdict);
        }
        for bad in PARAMS
            .iter()
            .filter(|p| !matches!(p.verdict, Verdict::Recommend | Verdict::NeverLower))
        {
            assert!(!keys.contains(&bad.key), "{role} wrote {}", bad.key);
        }
        let client_only = keys.contains(&"net.ipv4.ip_local_port_range");
        assert_eq!(client_only, role != "server", "{role}: {out}");
    }
}

#[test]
fn json_plan_parses_and_holds_the_math() {
    let f = Fake::new();
    let (out, _) = f
        .run(&["--conns", "1M", "--role", "client", "--format", "json"])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["host"]["mem_bytes"], 24u64 << 30);
    assert_eq!(v["host"]["cpus"], 2);
    assert_eq!(v["host"]["page_size"], 4096);
    assert_eq!(
        v["math"]["tcp_mem"],
        serde_json::json!([750000, 1000000, 1500000])
    );
    // 45 % of 55536 ports = 24991 per source address (under the connect() cliff at half the
    // range): 1e6 → 41 source addresses per destination, not the 19 a full range suggests.
    assert_eq!(v["math"]["conns_per_source"], 24991);
    assert_eq!(v["math"]["source_ips_per_destination"], 41);
    assert_eq!(v["nofile"], "1048576");
    let keys: Vec<&str> = v["sysctls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"net.ipv4.tcp_tw_reuse"));
    assert!(
        !keys.contains(&"net.core.somaxconn"),
        "client has no listener"
    );
    assert!(v["refused"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["key"] == "net.ipv4.tcp_tw_recycle" && r["removed"] == "4.12"));
    assert!(v["files"]["/etc/sysctl.d/90-c1m.conf"]
        .as_str()
        .unwrap()
        .contains("net.ipv4.tcp_tw_reuse = 1"));
}

#[test]
fn mem_flag_overrides_meminfo_and_page_size_is_read() {
    let f = Fake::new();
    // 8 GiB: 2097152 pages / 16 = 131072; 10k connections need only 10000 pages.
    let (out, _) = f
        .run(&["--conns", "10k", "--mem", "8G", "--format", "sysctl"])
        .unwrap();
    assert!(
        out.contains("net.ipv4.tcp_mem = 98304 131072 196608"),
        "{out}"
    );
    // 64 KiB pages: the same bytes are 16 times fewer pages.
    f.write("/proc/self/smaps", "KernelPageSize:       64 kB\n");
    let (out, _) = f
        .run(&["--conns", "100K", "--mem", "24G", "--format", "json"])
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["host"]["page_size"], 65536);
    // buffered auto = one page = 65536 B; 1e5 × 65536 / 65536 = 1e5 pages.
    assert_eq!(v["math"]["tcp_mem"][1], 100_000);
}

#[test]
fn too_many_connections_warn() {
    let f = Fake::new();
    let (out, code) = f.run(&["--conns", "5M"]).unwrap();
    assert_eq!(code, 0);
    // 5M × (4014 B slab + 4096 B buffered) = 40.6 GB on a 24 GiB box.
    assert!(
        out.contains("WARNING: 5000000 connections need ~37.77 GiB of kernel memory"),
        "{out}"
    );
}

#[test]
fn argument_errors() {
    let f = Fake::new();
    assert!(f.run(&[]).unwrap_err().contains("--conns"));
    assert!(f.run(&["--conns", "0"]).is_err());
    assert!(f
        .run(&["--conns", "1M", "--dry-run"])
        .unwrap_err()
        .contains("--dry-run"));
    assert!(f.run(&["--conns", "1M", "--check", "--apply"]).is_err());
    assert!(f.run(&["--conns", "1M", "--mem", "lots"]).is_err());
    // A tree without /proc/meminfo is an error (exit 2 in the binary), not a guess.
    std::fs::remove_file(f.path("/proc/meminfo")).unwrap();
    assert!(f.run(&["--conns", "1M"]).unwrap_err().contains("meminfo"));
}

/// The `docker run` command in `text` (joined over `\` continuations, `#` comment prefixes
/// removed): its `--ulimit nofile=` value and its `--sysctl KEY=VALUE` pairs, quotes removed.
fn docker_run(text: &str) -> (String, Vec<(String, String)>) {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.trim_start().trim_start_matches('#').trim())
        .collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("docker run"))
        .expect("a `docker run` line");
    let mut cmd = String::new();
    for l in &lines[start..] {
        cmd.push_str(l.trim_end_matches('\\'));
        cmd.push(' ');
        if !l.ends_with('\\') {
            break;
        }
    }
    let value_after = |at: usize| -> String {
        let rest = &cmd[at..];
        match rest.strip_prefix('"') {
            Some(q) => q[..q.find('"').expect("closing quote")].to_string(),
            None => rest.split_whitespace().next().unwrap_or("").to_string(),
        }
    };
    let ulimit = cmd
        .find("--ulimit nofile=")
        .map(|i| value_after(i + "--ulimit nofile=".len()))
        .expect("--ulimit nofile=");
    let mut sysctls = Vec::new();
    for (i, _) in cmd.match_indices("--sysctl ") {
        let kv = i + "--sysctl ".len();
        let eq = kv + cmd[kv..].find('=').expect("KEY=VALUE");
        sysctls.push((cmd[kv..eq].to_string(), value_after(eq + 1)));
    }
    (ulimit, sysctls)
}

/// The backticked sysctl keys of the install guide's "host-wide ones (…)" list.
fn guide_host_wide(guide: &str) -> Vec<String> {
    let from = guide
        .find("host-wide ones (")
        .expect("the install guide's host-wide list");
    let list = &guide[from..from + guide[from..].find(')').unwrap()];
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn install_guide_and_dockerfile_container_sysctls_are_what_tune_computes() {
    // The install guide's container section is for a million connections: it must list what
    // `c1m tune --conns 1M` prints for a container, no more (ignored or host-wide keys fail
    // there) and no other values.
    let f = Fake::new();
    let (out, _) = f.run(&["--conns", "1M"]).unwrap();
    let (nofile, want) = docker_run(&out);
    assert!(!want.is_empty(), "{out}");
    let guide = include_str!("../../../docs/install.md");
    let dockerfile = include_str!("../../../Dockerfile");
    for (name, text) in [("docs/install.md", guide), ("Dockerfile", dockerfile)] {
        let (u, got) = docker_run(text);
        assert_eq!(
            got, want,
            "{name}'s docker run --sysctl list vs c1m tune --conns 1M"
        );
        assert_eq!(u, nofile, "{name}'s --ulimit nofile vs c1m tune --conns 1M");
    }
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("host-wide, set on the host:"))
        .unwrap();
    let host: Vec<String> = line
        .split_once(':')
        .unwrap()
        .1
        .split(',')
        .map(|k| k.trim().to_string())
        .collect();
    assert_eq!(
        guide_host_wide(guide),
        host,
        "docs/install.md's host-wide list"
    );
}
