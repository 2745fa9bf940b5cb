//! `c1m tune --check` against fake trees: statuses ok / low / high / harmful / obsolete /
//! missing, config files that still set removed or harmful keys, and the exit code.

use crate::tune_support;

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
    // Swappiness is not c1m's business: a note, never a finding, never repaired.
    assert_eq!(status(&r, "vm.swappiness"), Some("info"));
    let sw = r.iter().find(|x| x["key"] == "vm.swappiness").unwrap();
    assert!(sw["target"].is_null(), "{sw}");
    let fix = r
        .iter()
        .find(|x| x["key"] == "net.ipv4.ip_no_pmtu_disc")
        .unwrap();
    assert_eq!(fix["target"], "0");
}

#[test]
fn tcp_mem_above_half_of_ram_is_high() {
    let f = Fake::new();
    // 3.2e6 pages × 4 KiB = 12.2 GiB: below the 24 GiB of RAM, above half of it, so the
    // kernel would reach the OOM killer before memory pressure.
    f.sysctl("net.ipv4.tcp_mem", "786432\t2097152\t3200000\n");
    let (r, code) = rows(&f, &["--conns", "100000"]);
    assert_eq!(code, 1);
    assert_eq!(status(&r, "net.ipv4.tcp_mem"), Some("high"));
}

#[test]
fn two_gib_box_asking_for_one_million_gets_a_finding_not_a_huge_tcp_mem() {
    let f = Fake::new();
    f.write("/proc/meminfo", "MemTotal:        2097152 kB\n");
    f.sysctl("net.ipv4.tcp_mem", "24576\t32768\t49152\n");
    let (out, code) = f.run(&["--conns", "1M"]).unwrap();
    assert_eq!(code, 0);
    assert!(
        out.contains("1000000 connections need ~7.55 GiB of kernel memory"),
        "{out}"
    );
    assert!(out.contains("this box has 2.00 GiB"), "{out}");
    // The plan keeps the kernel's own tcp_mem: nothing near 5.7 GiB is printed or written.
    assert!(
        out.contains("net.ipv4.tcp_mem = 24576 32768 49152"),
        "{out}"
    );
    assert!(!out.contains("1500000"), "{out}");
    // --check: a finding of its own, exit 1, while tcp_mem at the kernel default is ok.
    let (r, code) = rows(&f, &["--conns", "1M"]);
    assert_eq!(code, 1);
    assert_eq!(status(&r, "memory.target"), Some("does-not-fit"));
    assert_eq!(status(&r, "net.ipv4.tcp_mem"), Some("ok"));
    // --apply writes no more than that, and says why.
    let (out, _) = f.run(&["--conns", "1M", "--apply"]).unwrap();
    assert!(
        out.contains("WARNING  1000000 connections need ~7.55 GiB"),
        "{out}"
    );
    let live = f.get("net.ipv4.tcp_mem").unwrap();
    let max: u64 = live.split_whitespace().last().unwrap().parse().unwrap();
    assert!(max * 4096 <= 1 << 30, "{live}");
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

#[test]
fn nofile_above_nr_open_is_critical_wherever_it_is_configured() {
    // Seed 002's lockout: nofile 2000000 with fs.nr_open at its 1048576 default.
    let f = Fake::new();
    f.write(
        "/etc/security/limits.d/60-seed.conf",
        "# from the notes\n*    soft nofile 2000000\n*    hard nofile 2000000\n",
    );
    let (r, code) = rows(&f, &["--conns", "10000"]);
    assert_eq!(code, 1);
    // One row for the domain's two lines: its verdict is the worst one.
    let crit: Vec<&Value> = r.iter().filter(|x| x["status"] == "critical").collect();
    assert_eq!(crit.len(), 1, "{r:#?}");
    assert_eq!(crit[0]["source"], "/etc/security/limits.d/60-seed.conf:2");
    let note = crit[0]["note"].as_str().unwrap();
    assert!(note.contains("above fs.nr_open 1048576"), "{note}");
    assert!(note.contains("login is refused"), "{note}");
    assert!(note.contains("sysctl -w fs.nr_open=2000000"), "{note}");

    // Raising nr_open above it clears the finding.
    f.sysctl("fs.nr_open", "1073741816\n");
    let (r, _) = rows(&f, &["--conns", "10000"]);
    assert!(r.iter().all(|x| x["status"] != "critical"), "{r:#?}");

    // systemd: a unit and the manager default, each above nr_open.
    f.sysctl("fs.nr_open", "1048576\n");
    f.remove("/etc/security/limits.d/60-seed.conf");
    f.write(
        "/etc/systemd/system.conf.d/50-nofile.conf",
        "[Manager]\nDefaultLimitNOFILE=1048576:4194304\n",
    );
    f.write(
        "/etc/systemd/system/gw.service.d/limits.conf",
        "[Service]\nLimitNOFILE=3000000\n",
    );
    let (r, code) = rows(&f, &["--conns", "10000"]);
    assert_eq!(code, 1);
    let crit: Vec<&str> = r
        .iter()
        .filter(|x| x["status"] == "critical")
        .map(|x| x["note"].as_str().unwrap())
        .collect();
    assert_eq!(crit.len(), 2, "{crit:#?}");
    assert!(crit
        .iter()
        .any(|n| n.contains("every unit without its own LimitNOFILE=")));
    assert!(crit
        .iter()
        .any(|n| n.contains("for gw.service") && n.contains("205/LIMITS")));
    let default = r
        .iter()
        .find(|x| x["key"] == "systemd.DefaultLimitNOFILE")
        .unwrap();
    assert_eq!(default["status"], "critical");
    assert_eq!(default["live"], "soft 1048576 hard 4194304");
}

#[test]
fn user_specific_limits_lines_are_read() {
    let f = Fake::new();
    f.write(
        "/etc/security/limits.conf",
        "*      -    nofile 1048576\nroot   -    nofile 1048576\nc1m    soft nofile 4096\n@web   hard nofile 8192\n",
    );
    let (r, code) = rows(&f, &["--conns", "10000"]);
    assert_eq!(code, 1);
    let row = |d: &str| {
        r.iter()
            .find(|x| x["key"] == "limits.nofile" && x["note"].as_str().unwrap().contains(d))
            .unwrap_or_else(|| panic!("no row for {d}: {r:#?}"))
    };
    assert_eq!(row("for `*`")["status"], "ok");
    assert_eq!(row("of root")["status"], "ok");
    // The user's own line wins over `*` for that user: its logins get 4096.
    assert_eq!(row("logins of c1m")["status"], "low");
    assert_eq!(row("logins of c1m")["live"], "soft 4096 hard -");
    assert_eq!(row("group @web")["status"], "low");
}

#[test]
fn one_verdict_per_nofile_setting_the_worst_with_its_reason() {
    // nofile 2000000 meets the 1M recommendation (1048576) but is above fs.nr_open: the login
    // is refused, so the one row for `*` is critical, never "ok" beside a critical for the
    // same lines.
    let f = Fake::new();
    let file = "/etc/security/limits.d/60-seed.conf";
    f.write(
        file,
        "# from the notes\n*    soft nofile 2000000\n*    hard nofile 2000000\n",
    );
    let (r, code) = rows(&f, &["--conns", "1M"]);
    assert_eq!(code, 1);
    let from_file: Vec<&Value> = r
        .iter()
        .filter(|x| x["source"].as_str().is_some_and(|s| s.starts_with(file)))
        .collect();
    assert_eq!(from_file.len(), 1, "{from_file:#?}");
    let row = from_file[0];
    assert_eq!(row["key"], "limits.nofile");
    assert_eq!(row["status"], "critical");
    assert_eq!(row["live"], "soft 2000000 hard 2000000");
    let note = row["note"].as_str().unwrap();
    // The reason leads, and names both lines and both fixes.
    assert!(
        note.starts_with("nofile 2000000 for * is above fs.nr_open 1048576"),
        "{note}"
    );
    assert!(note.contains(&format!("{file}:2")), "{note}");
    assert!(note.contains(&format!("{file}:3")), "{note}");
    assert!(note.contains("sysctl -w fs.nr_open=2000000"), "{note}");
    assert!(
        note.contains(&format!(
            "sed -i -e '2s/2000000/1048576/' -e '3s/2000000/1048576/' {file}"
        )),
        "{note}"
    );
    // The text output: one line for the file, and it says critical.
    let (out, code) = f.run(&["--check", "--conns", "1M"]).unwrap();
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains(file)).collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].starts_with("critical  limits.nofile"), "{out}");

    // systemd: the named service's row and the manager default's row carry the verdict
    // themselves; no second row for the same line.
    f.remove(file);
    f.write(
        "/etc/systemd/system.conf.d/50-nofile.conf",
        "[Manager]\nDefaultLimitNOFILE=1048576:4194304\n",
    );
    f.write(
        "/etc/systemd/system/gw.service.d/limits.conf",
        "[Service]\nLimitNOFILE=3000000\n",
    );
    let (r, code) = rows(&f, &["--conns", "1M", "--service", "gw"]);
    assert_eq!(code, 1);
    let unit: Vec<&Value> = r
        .iter()
        .filter(|x| x["source"] == "/etc/systemd/system/gw.service.d/limits.conf:2")
        .collect();
    assert_eq!(unit.len(), 1, "{unit:#?}");
    assert_eq!(unit[0]["key"], "systemd.LimitNOFILE");
    assert_eq!(unit[0]["status"], "critical");
    assert!(
        unit[0]["note"]
            .as_str()
            .unwrap()
            .starts_with("LimitNOFILE=3000000 for gw.service is above fs.nr_open 1048576"),
        "{unit:#?}"
    );
    let default: Vec<&Value> = r
        .iter()
        .filter(|x| x["key"] == "systemd.DefaultLimitNOFILE")
        .collect();
    assert_eq!(default.len(), 1, "{default:#?}");
    assert_eq!(default[0]["status"], "critical");
    assert_eq!(default[0]["live"], "soft 1048576 hard 4194304");
}

#[test]
fn a_capped_tcp_mem_is_named_for_what_it_is_not_does_not_fit() {
    // 2M on 24 GiB: 15.11 GiB of kernel memory fits the 18.00 GiB usable, but full buffers
    // would want tcp_mem's max above its cap, so pressure starts before all are queued.
    let f = Fake::new();
    let (r, _) = rows(&f, &["--conns", "2M"]);
    assert!(r.iter().all(|x| x["status"] != "does-not-fit"), "{r:#?}");
    let row = r.iter().find(|x| x["key"] == "memory.target").unwrap();
    assert_eq!(row["status"], "tcp-mem-capped");
    let note = row["note"].as_str().unwrap();
    assert!(
        note.starts_with("tcp_mem is capped at 2758631 pages (10.52 GiB"),
        "{note}"
    );
    assert!(
        note.contains("memory pressure starts at 7.02 GiB, before all 2000000 sockets have 4096 B queued (7.63 GiB)"),
        "{note}"
    );
    assert!(
        note.contains("the memory fits (15.11 GiB needed, 18.00 GiB usable"),
        "{note}"
    );
    let (out, _) = f.run(&["--check", "--conns", "2M"]).unwrap();
    assert!(!out.contains("does-not-fit"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("tcp-mem-capped memory.target")),
        "{out}"
    );
    // The plan words it the same.
    let (out, _) = f.run(&["--conns", "2M"]).unwrap();
    assert!(out.contains("WARNING: tcp_mem is capped at"), "{out}");
    assert!(!out.contains("need ~15.11 GiB"), "{out}");
    // A warning, not a finding: once --apply wrote the plan, the check passes.
    let (out, code) = f.run(&["--conns", "2M", "--apply"]).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("WARNING  tcp_mem is capped at"), "{out}");
    let (out, code) = f.run(&["--check", "--conns", "2M"]).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 finding(s), 1 warning(s)"), "{out}");
}
