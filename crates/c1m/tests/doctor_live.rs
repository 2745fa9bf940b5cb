//! The real `c1m doctor` and `c1m sockets` binaries against provoked conditions.
//!
//! Port use: many connections to one destination port only matter against the size of
//! ip_local_port_range. Narrowing the box's range would break every other program here, so
//! the test re-runs itself inside a fresh network namespace (`unshare -n`), where the range,
//! the loopback device and the sockets are its own and vanish with it.

use std::net::{TcpListener, TcpStream};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_c1m");
/// Set (to the outer network namespace's id) only for the re-run inside the namespace.
const INNER_ENV: &str = "C1M_TEST_NETNS_OUTER";
const RANGE: (u16, u16) = (50000, 50199);
/// The listener sits below the range so it takes no port from it.
const LISTEN_PORT: u16 = 45678;

fn netns_id() -> String {
    std::fs::read_link("/proc/self/ns/net")
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn doctor(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).arg("doctor").args(args).output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn port_use_to_one_destination_in_own_netns() {
    let out = Command::new("unshare")
        .args(["-n", "--"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "doctor_live::port_use_inner",
            "--ignored",
            "--nocapture",
        ])
        .env(INNER_ENV, netns_id())
        .output()
        .expect("running unshare");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "inner run failed:\n{text}");
    assert!(text.contains("port_use_inner: checked"), "{text}");
}

/// Runs only inside the namespace made by the test above.
#[test]
#[ignore = "run by port_use_to_one_destination_in_own_netns inside unshare -n"]
fn port_use_inner() {
    let outer = std::env::var(INNER_ENV).expect("run me through the outer test");
    // Never touch a sysctl of the shared namespace.
    assert_ne!(netns_id(), outer, "not in a new network namespace");
    let st = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(
        "/proc/sys/net/ipv4/ip_local_port_range",
        format!("{} {}", RANGE.0, RANGE.1),
    )
    .unwrap();
    let size = (RANGE.1 - RANGE.0 + 1) as usize;
    let l = TcpListener::bind(("127.0.0.1", LISTEN_PORT)).unwrap();
    let mut held = Vec::new();
    let mut connect = |n: usize| {
        for _ in 0..n {
            let c = TcpStream::connect(("127.0.0.1", LISTEN_PORT)).unwrap();
            held.push((c, l.accept().unwrap().0));
        }
    };

    // 10 % of the range: pass.
    connect(size / 10);
    let (code, text) = doctor(&["--only", "net.ephemeral-ports", "--interval", "0s"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.starts_with("pass"), "{text}");

    // 95 % of the range to one destination: fail, naming source and destination.
    connect(size * 95 / 100 - size / 10);
    let used = size * 95 / 100;
    let (code, text) = doctor(&["--only", "net.ephemeral-ports", "--interval", "0s"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.starts_with("FAIL"), "{text}");
    let want = format!("127.0.0.1 -> 127.0.0.1:{LISTEN_PORT} uses {used} of {size}");
    assert!(text.contains(&want), "{want:?} not in:\n{text}");
    assert!(
        text.contains("fix: sysctl -w net.ipv4.ip_local_port_range="),
        "{text}"
    );

    // `c1m sockets` agrees on the count per destination port.
    let out = Command::new(BIN)
        .args(["sockets", "--by", "dport", "--state", "estab"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&LISTEN_PORT.to_string()))
        .unwrap_or_else(|| panic!("no dport {LISTEN_PORT} in:\n{text}"));
    assert_eq!(
        line.split_whitespace().nth(1),
        Some(used.to_string().as_str())
    );
    drop(held);
    println!("port_use_inner: checked");
}

#[test]
fn exit_codes_against_a_fake_root() {
    let dir = std::env::temp_dir().join(format!("c1m-doctor-exit-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("dev")).unwrap();
    let root = dir.to_str().unwrap();
    std::fs::write(dir.join("dev/kmsg"), "6,1,1,-;Linux version\n").unwrap();
    let (code, text) = doctor(&["--root", root, "--interval", "0s", "--only", "kernel.log"]);
    assert_eq!(code, 0, "{text}");
    std::fs::write(
        dir.join("dev/kmsg"),
        "6,1,1,-;Linux version\n4,2,2,-;TCP: out of memory -- consider tuning tcp_mem\n",
    )
    .unwrap();
    let (code, text) = doctor(&["--root", root, "--interval", "0s", "--json"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("\"check\": \"kernel.log\""), "{text}");
    assert!(text.contains("\"status\": \"warn\""), "{text}");
    let (code, text) = doctor(&["--root", root, "--only", "no.such.check"]);
    assert_eq!(code, 2, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
