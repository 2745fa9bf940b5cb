//! The README's own `--conns 1M` (and `1.5M`, `10M`, `250K`, `1_000_000`) is accepted by every
//! subcommand that takes a connection count: one parser (c1m_proto::count) behind all of them.
//!
//! Each run puts a deliberately bad flag AFTER the count. clap reports the first bad argument,
//! so an error naming the later flag proves the count itself parsed; nothing is started.

use std::process::Command;

fn c1m(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .args(args)
        .output()
        .expect("run c1m");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_subcommand_takes_the_same_counts() {
    for n in ["1M", "1.5M", "10M", "250K", "1_000_000"] {
        let cases: [(&[&str], &str); 5] = [
            (
                &["serve", "--max-conns", n, "--workers", "bogus"],
                "--workers",
            ),
            (
                &[
                    "bench",
                    "http://127.0.0.1:1/sub/x",
                    "--conns",
                    n,
                    "--rate",
                    "bogus",
                ],
                "--rate",
            ),
            (&["tune", "--conns", n, "--role", "bogus"], "--role"),
            (
                &["doctor", "--conns", n, "--interval", "bogus"],
                "--interval",
            ),
            (&["top", "--conns", n, "--interval", "bogus"], "--interval"),
        ];
        for (args, later) in cases {
            let (code, err) = c1m(args);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(
                err.contains(later) && !err.contains("--conns <") && !err.contains("--max-conns <"),
                "{args:?}: the count was refused, or the error is not about {later}: {err}"
            );
        }
    }
}

#[test]
fn a_bad_count_is_refused_with_the_forms_that_work() {
    for args in [
        &["bench", "http://127.0.0.1:1/sub/x", "--conns", "lots"][..],
        &["doctor", "--conns", "1.5"][..],
        &["tune", "--conns", "M"][..],
        &["serve", "--max-conns", "1e6"][..],
    ] {
        let (code, err) = c1m(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("not a") || err.contains("whole"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn tune_prints_the_parsed_count() {
    let dir = std::env::temp_dir().join(format!("c1m-conns-{}", std::process::id()));
    let _ = std::fs::create_dir_all(dir.join("proc"));
    std::fs::write(dir.join("proc/meminfo"), "MemTotal: 25165824 kB\n").unwrap();
    std::fs::create_dir_all(dir.join("sys/devices/system/cpu")).unwrap();
    std::fs::write(dir.join("sys/devices/system/cpu/online"), "0-1\n").unwrap();
    std::fs::create_dir_all(dir.join("proc/self")).unwrap();
    std::fs::write(dir.join("proc/self/smaps"), "KernelPageSize: 4 kB\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_c1m"))
        .args(["tune", "--conns", "1.5M", "--root", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--conns 1500000"), "{text}");
}
