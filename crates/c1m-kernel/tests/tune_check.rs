//! `c1m tune --check` against fake trees: statuses ok / low / high / harmful / obsolete /
//! missing, config files that still set removed or harmful keys, and the exit code.

mod tune_support;

use serde_json::Value;
use tune_support::Fake;

fn rows(f: &Fake, args: &[&str]) -> (Vec<Value>, u8) {
    let mut a = vec!["--check", "--format", "json"];
    a.extend_from_slice(args);
    let (out, code) = f.run(&a).unwrap();
    (serde_json::from_str::<Vec<Value>>(&out).unwrap(), code)
}

fn status<'a>(rows: &'a [Value], key: &str) -> Option<&'a str> {
    rows.iter()
        .find(|r| r["key"] == key && r["source"].is_null())
        .map(|r| r["status"].as_str().unwrap())
}

#[test]
fn defaults_are_low_for_a_million() {
    let f = Fake::new();
    let (r, code) = rows(&f, &["--conns", "1M"]);
    assert_eq!(code, 1);
    assert_eq!(status(&r, "net.ipv4.tcp_mem"), Some("low"));
    assert_eq!(status(&r, "net.core.somaxconn"), Some("low"));
    assert_eq!(status(&r, "net.ipv4.tcp_max_orphans"), Some("low"));
    assert_eq!(
        status(&r, "net.ipv4.tcp_slow_start_after_idle"),
        Some("high")
    );
    assert_eq!(status(&r, "limits.nofile"), Some("low"));
    // Already enough: nr_open default 1048576 ≥ nofile 1048576; file-max 2516582 ≥ 1.25e6.
    assert_eq!(status(&r, "fs.nr_open"), Some("ok"));
    assert_eq!(status(&r, "fs.file-max"), Some("ok"));
    // Not for a server.
    assert_eq!(status(&r, "net.ipv4.ip_local_port_range"), None);
    assert_eq!(status(&r, "net.ipv4.tcp_keepalive_time"), Some("info"));
}

#[test]
fn small_target_on_defaults_needs_only_the_fixed_switches() {
    let f = Fake::new();
    f.sysctl("net.ipv4.tcp_slow_start_after_idle", "0\n");
    f.write(
        "/etc/security/limits.d/50-site.conf",
        "*  soft  nofile  65536\n*  hard  nofile  65536\n",
    );
    // 10k connections fit every kernel default; nofile 16384 ≤ 65536.
    let (r, code) = rows(&f, &["--conns", "10000"]);
    let bad: Vec<_> = r
        .iter()
        .filter(|x| !matches!(x["status"].as_str().unwrap(), "ok" | "info" | "missing"))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(code, 0);
}

#[test]
fn client_role_checks_ports_and_tw_reuse() {
    let f = Fake::new();
    let (r, _) = rows(&f, &["--conns", "1M", "--role", "client"]);
    assert_eq!(status(&r, "net.ipv4.ip_local_port_range"), Some("low"));
    // Default 2 (loopback only) is above the recommended 1 numerically: "high".
    assert_eq!(status(&r, "net.ipv4.tcp_tw_reuse"), Some("high"));
    assert_eq!(status(&r, "net.core.somaxconn"), None);
    f.sysctl("net.ipv4.ip_local_port_range", "1024\t65535\n");
    let (r, _) = rows(&f, &["--conns", "1M", "--role", "client"]);
    assert_eq!(status(&r, "net.ipv4.ip_local_port_range"), Some("ok"));
}

#[test]
fn harmful_live_values() {
    let f = Fake::new();
    f.sysctl("net.ipv4.tcp_max_tw_buckets", "5000\n");
    f.sysctl("net.ipv4.ip_no_pmtu_disc", "1\n");
    f.sysctl("vm.swappiness", "0\n");
    let (r, code) = rows(&f, &["--conns", "10000"]);
    assert_eq!(code, 1);
    assert_eq!(status(&r, "net.ipv4.tcp_max_tw_buckets"), Some("harmful"));
    assert_eq!(status(&r, "net.ipv4.ip_no_pmtu_disc"), Some("harmful"));
    assert_eq!(status(&r, "vm.swappiness"), Some("harmful"));
    let fix = r
        .iter()
        .find(|x| x["key"] == "net.ipv4.ip_no_pmtu_disc")
        .unwrap();
    assert_eq!(fix["target"], "0");
}

#[test]
fn tcp_mem_above_ram_is_high() {
    let f = Fake::new();
    // 7e6 pages × 4 KiB = 26.7 GiB > 24 GiB.
    f.sysctl("net.ipv4.tcp_mem", "786432\t2097152\t7000000\n");
    let (r, _) = rows(&f, &["--conns", "100000"]);
    assert_eq!(status(&r, "net.ipv4.tcp_mem"), Some("high"));
}

#[test]
fn obsolete_key_live_on_an_old_kernel() {
    let f = Fake::new();
    f.sysctl("net.ipv4.tcp_tw_recycle", "1\n");
    let (r, code) = rows(&f, &["--conns", "10000"]);
    assert_eq!(status(&r, "net.ipv4.tcp_tw_recycle"), Some("obsolete"));
    assert_eq!(code, 1);
    // On a current kernel (no file) it is not reported at all.
    f.remove_sysctl("net.ipv4.tcp_tw_recycle");
    let (r, _) = rows(&f, &["--conns", "10000"]);
    assert_eq!(status(&r, "net.ipv4.tcp_tw_recycle"), None);
}

#[test]
fn config_files_with_obsolete_harmful_and_overriding_lines() {
    let f = Fake::new();
    f.sysctl("net.ipv4.tcp_slow_start_after_idle", "0\n");
    f.write(
        "/etc/sysctl.conf",
        "# seed 000\nnet.ipv4.tcp_tw_recycle = 1\nnet.ipv4.tcp_max_tw_buckets = 5000\n",
    );
    // Read before c1m's 90-c1m.conf: overridden by it, so not a finding.
    f.write("/etc/sysctl.d/10-early.conf", "net.core.somaxconn = 128\n");
    // Read after it: puts somaxconn back below the need at boot.
    f.write("/etc/sysctl.d/95-late.conf", "net.core.somaxconn = 128\n");
    f.write("/etc/sysctl.d/README", "net.ipv4.tcp_tw_recycle = 1\n");
    // 1M needs somaxconn 16384.
    let (r, code) = rows(&f, &["--conns", "1M"]);
    assert_eq!(code, 1);
    let from = |file: &str| -> Vec<(&str, &str)> {
        r.iter()
            .filter(|x| x["source"].as_str().is_some_and(|s| s.starts_with(file)))
            .map(|x| (x["key"].as_str().unwrap(), x["status"].as_str().unwrap()))
            .collect()
    };
    assert_eq!(
        from("/etc/sysctl.conf"),
        vec![
            ("net.ipv4.tcp_tw_recycle", "obsolete"),
            ("net.ipv4.tcp_max_tw_buckets", "harmful")
        ]
    );
    assert_eq!(
        from("/etc/sysctl.conf:2").len(),
        1,
        "line numbers are exact"
    );
    assert!(from("/etc/sysctl.d/10-early.conf").is_empty());
    assert_eq!(
        from("/etc/sysctl.d/95-late.conf"),
        vec![("net.core.somaxconn", "low")]
    );
    assert!(
        from("/etc/sysctl.d/README").is_empty(),
        "only *.conf is read"
    );
}

#[test]
fn missing_keys_are_notes_not_findings() {
    let f = Fake::new();
    f.sysctl("net.ipv4.tcp_slow_start_after_idle", "0\n");
    f.write("/etc/security/limits.d/50-site.conf", "* - nofile 65536\n");
    f.remove_sysctl("fs.epoll.max_user_watches");
    f.remove_sysctl("net.netfilter.nf_conntrack_max");
    let (r, code) = rows(&f, &["--conns", "10000"]);
    assert_eq!(status(&r, "fs.epoll.max_user_watches"), Some("missing"));
    assert_eq!(
        status(&r, "net.netfilter.nf_conntrack_max"),
        Some("missing")
    );
    assert_eq!(code, 0, "{r:?}");
}

#[test]
fn text_check_names_statuses() {
    let f = Fake::new();
    let (out, code) = f.run(&["--check", "--conns", "1M"]).unwrap();
    assert_eq!(code, 1);
    assert!(out.contains("low       net.ipv4.tcp_mem"), "{out}");
    assert!(out.contains("finding(s)"), "{out}");
}

#[test]
fn systemd_unit_limit_is_checked_when_named() {
    let f = Fake::new();
    let unit = "/etc/systemd/system/push.service";
    f.write(
        unit,
        "[Service]\nExecStart=/usr/bin/c1m serve\nLimitNOFILE=1024:524288\n",
    );
    let (r, _) = rows(&f, &["--conns", "1M", "--service", "push"]);
    let row = r
        .iter()
        .find(|x| x["key"] == "systemd.LimitNOFILE")
        .unwrap();
    assert_eq!(row["status"], "low");
    assert_eq!(row["source"], format!("{unit}:3"));
    // A drop-in is read after the unit file and wins.
    f.write(
        "/etc/systemd/system/push.service.d/override.conf",
        "[Service]\nLimitNOFILE=infinity\n",
    );
    let (r, _) = rows(&f, &["--conns", "1M", "--service", "push"]);
    let row = r
        .iter()
        .find(|x| x["key"] == "systemd.LimitNOFILE")
        .unwrap();
    assert_eq!(row["status"], "ok");
    // Without --service it is information only.
    let (r, _) = rows(&f, &["--conns", "1M"]);
    let row = r
        .iter()
        .find(|x| x["key"] == "systemd.LimitNOFILE")
        .unwrap();
    assert_eq!(row["status"], "info");
}

#[test]
fn own_nofile_is_information() {
    let f = Fake::new();
    f.write(
        "/proc/self/limits",
        "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n",
    );
    let (r, _) = rows(&f, &["--conns", "1M"]);
    let row = r
        .iter()
        .find(|x| x["source"] == "/proc/self/limits")
        .unwrap();
    assert_eq!(row["status"], "info");
    assert_eq!(row["live"], "soft 1024 hard 524288");
}
