//! `c1m top` with stdout piped (not a terminal): it falls back to plain lines, stops after
//! `--count`, and carries the sockets by state and the doctor's findings of a fake tree.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_c1m");

#[test]
fn piped_top_prints_count_plain_lines_with_findings() {
    let dir = std::env::temp_dir().join(format!("c1m-top-plain-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("proc/net")).unwrap();
    std::fs::create_dir_all(dir.join("dev")).unwrap();
    let head = "  sl  local_address rem_address   st tx_queue rx_queue\n";
    let listener = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 0 0 0 0 1 1\n";
    let estab: String = (0..3)
        .map(|i| {
            format!(
                "   {}: 0100007F:{:04X} 0100007F:1F90 01 00000000:00000000 0 0 0 0 1 1\n",
                i + 1,
                40000 + i
            )
        })
        .collect();
    std::fs::write(dir.join("proc/net/tcp"), format!("{head}{listener}{estab}")).unwrap();
    std::fs::write(
        dir.join("dev/kmsg"),
        "4,1,1,-;TCP: too many orphaned sockets\n",
    )
    .unwrap();

    let out = Command::new(BIN)
        .args([
            "top",
            "--count",
            "3",
            "--interval",
            "100ms",
            "--doctor-every",
            "0s",
            "--root",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in &lines {
        assert!(
            l.as_bytes()[2] == b':' && l.contains("Z sockets=4 estab=3 listen=1"),
            "{l}"
        );
    }
    // The doctor's first run completes on the second tick.
    assert!(!lines[0].contains("kernel.log"), "{text}");
    assert!(lines[2].ends_with("| WARN kernel.log"), "{text}");
}
