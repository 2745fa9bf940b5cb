//! `c1m tune --apply` / `--revert` / `--dry-run` against fake trees: what is written, in what
//! order, that nothing is lowered, that a missing key is skipped, and that revert restores
//! every byte.

use crate::tune_support;

use serde_json::Value;
use tune_support::Fake;

const STATE: &str = "/var/lib/c1m/tune-revert.json";

#[test]
fn apply_then_check_is_clean_and_revert_restores_every_byte() {
    let f = Fake::new();
    f.write("/etc/sysctl.conf", "kernel.sysrq = 16\n");
    let before = f.snapshot();
    let (out, code) = f
        .run(&["--apply", "--conns", "1M", "--service", "c1m"])
        .unwrap();
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        f.get("net.ipv4.tcp_mem").unwrap(),
        "750000 1000000 1500000\n"
    );
    assert_eq!(f.get("net.core.somaxconn").unwrap(), "16384\n");
    assert_eq!(f.get("net.ipv4.tcp_slow_start_after_idle").unwrap(), "0\n");
    let dropin = f.read("/etc/sysctl.d/90-c1m.conf").unwrap();
    assert!(
        dropin.contains("net.ipv4.tcp_mem = 750000 1000000 1500000"),
        "{dropin}"
    );
    assert!(!dropin.contains("tcp_tw_recycle"));
    let limits = f.read("/etc/security/limits.d/90-c1m.conf").unwrap();
    assert!(limits.contains("root  hard  nofile  1048576"), "{limits}");
    let unit = f
        .read("/etc/systemd/system/c1m.service.d/90-c1m-limits.conf")
        .unwrap();
    assert!(unit.contains("[Service]\nLimitNOFILE=1048576"), "{unit}");
    assert_eq!(
        f.read("/etc/sysctl.conf").unwrap(),
        "kernel.sysrq = 16\n",
        "never edited"
    );
    assert!(f.read(STATE).is_some());

    let (out, code) = f
        .run(&["--check", "--conns", "1M", "--service", "c1m"])
        .unwrap();
    assert_eq!(code, 0, "after apply nothing needs changing:\n{out}");
    assert!(out.contains("ok        systemd.LimitNOFILE"), "{out}");

    let (out, code) = f.run(&["--revert"]).unwrap();
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        f.snapshot(),
        before,
        "revert must restore the tree byte for byte"
    );
}

#[test]
fn dry_run_writes_nothing() {
    let f = Fake::new();
    let before = f.snapshot();
    let (out, code) = f.run(&["--apply", "--dry-run", "--conns", "1M"]).unwrap();
    assert_eq!(code, 0);
    assert!(
        out.contains(
            "net.ipv4.tcp_mem would change: 294912 393216 589824 -> 750000 1000000 1500000"
        ),
        "{out}"
    );
    assert!(out.contains("dry run"), "{out}");
    assert_eq!(f.snapshot(), before);
    f.run(&["--apply", "--conns", "1M"]).unwrap();
    let applied = f.snapshot();
    let (out, _) = f.run(&["--revert", "--dry-run"]).unwrap();
    assert!(
        out.contains("net.ipv4.tcp_mem would be restored to 294912 393216 589824"),
        "{out}"
    );
    assert_eq!(f.snapshot(), applied);
}

#[test]
fn nr_open_is_written_first_for_a_proxy() {
    let f = Fake::new();
    // A proxy at 1M holds 2M descriptors: nofile 2^21 needs nr_open raised first.
    f.run(&["--apply", "--conns", "1M", "--role", "proxy"])
        .unwrap();
    assert_eq!(f.get("fs.nr_open").unwrap(), "2097152\n");
    let state: Value = serde_json::from_str(&f.read(STATE).unwrap()).unwrap();
    assert_eq!(state["sysctls"][0]["key"], "fs.nr_open");
    assert_eq!(state["sysctls"][0]["previous"], "1048576\n");
    let limits = f.read("/etc/security/limits.d/90-c1m.conf").unwrap();
    assert!(limits.contains("nofile  2097152"), "{limits}");
    assert_eq!(f.get("net.ipv4.tcp_tw_reuse").unwrap(), "1\n");
    assert_eq!(
        f.get("net.ipv4.ip_local_port_range").unwrap(),
        "10000 65535\n"
    );
}

#[test]
fn never_lowers_a_higher_live_value() {
    let f = Fake::new();
    f.sysctl("net.ipv4.tcp_max_orphans", "4000000\n");
    f.sysctl("net.ipv4.tcp_mem", "800000\t900000\t2000000\n");
    f.run(&["--apply", "--conns", "1M"]).unwrap();
    assert_eq!(
        f.get("net.ipv4.tcp_max_orphans").unwrap(),
        "4000000\n",
        "untouched"
    );
    // Element-wise: keep the higher min and max, raise the pressure.
    assert_eq!(
        f.get("net.ipv4.tcp_mem").unwrap(),
        "800000 1000000 2000000\n"
    );
    let dropin = f.read("/etc/sysctl.d/90-c1m.conf").unwrap();
    assert!(
        dropin.contains("net.ipv4.tcp_max_orphans = 4000000"),
        "{dropin}"
    );
}

#[test]
fn missing_key_is_skipped_with_a_note() {
    let f = Fake::new();
    f.remove_sysctl("fs.epoll.max_user_watches");
    let before = f.snapshot();
    let (out, code) = f.run(&["--apply", "--conns", "1M"]).unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("skip  fs.epoll.max_user_watches"), "{out}");
    assert!(!f.path("/proc/sys/fs/epoll/max_user_watches").exists());
    let dropin = f.read("/etc/sysctl.d/90-c1m.conf").unwrap();
    assert!(!dropin.contains("max_user_watches"), "{dropin}");
    f.run(&["--revert"]).unwrap();
    assert_eq!(f.snapshot(), before);
}

#[test]
fn harmful_live_value_repaired_and_restored() {
    let f = Fake::new();
    f.sysctl("net.ipv4.ip_no_pmtu_disc", "1\n");
    f.sysctl("net.ipv4.tcp_max_tw_buckets", "5000\n");
    let before = f.snapshot();
    f.run(&["--apply", "--conns", "10000"]).unwrap();
    assert_eq!(f.get("net.ipv4.ip_no_pmtu_disc").unwrap(), "0\n");
    // 10000 sockets → 16384; kernel default on 24 GiB is 131072.
    assert_eq!(f.get("net.ipv4.tcp_max_tw_buckets").unwrap(), "131072\n");
    f.run(&["--revert"]).unwrap();
    assert_eq!(f.snapshot(), before);
}

#[test]
fn second_apply_keeps_the_first_saved_values() {
    let f = Fake::new();
    f.write(
        "/etc/sysctl.d/90-c1m.conf",
        "# an older hand-written file\n",
    );
    let before = f.snapshot();
    f.run(&["--apply", "--conns", "100000"]).unwrap();
    f.run(&["--apply", "--conns", "2M"]).unwrap();
    assert_eq!(f.get("net.core.somaxconn").unwrap(), "32768\n");
    f.run(&["--revert"]).unwrap();
    assert_eq!(f.snapshot(), before, "back to before the first apply");
    let (out, code) = f.run(&["--revert"]).unwrap();
    assert_eq!(code, 0);
    assert!(out.contains("nothing to revert"), "{out}");
}

#[test]
fn config_lines_are_reported_not_edited() {
    let f = Fake::new();
    f.write("/etc/sysctl.conf", "net.ipv4.tcp_tw_recycle = 1\n");
    let (out, _) = f.run(&["--apply", "--conns", "10000"]).unwrap();
    assert!(
        out.contains("/etc/sysctl.conf:1 sets net.ipv4.tcp_tw_recycle"),
        "{out}"
    );
    assert_eq!(
        f.read("/etc/sysctl.conf").unwrap(),
        "net.ipv4.tcp_tw_recycle = 1\n"
    );
}
