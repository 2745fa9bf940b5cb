//! Processes: a crashed worker is restarted (logged, counted) while the others carry on;
//! SIGTERM ends every stream cleanly within the grace period; workers die with the master;
//! configuration from a TOML file.

use crate::common;

use common::{Server, Sse};
use std::time::{Duration, Instant};

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn a_killed_worker_is_restarted_and_counted() {
    let server = Server::start(&["--workers", "2"]);
    let pids = server.worker_pids();
    c1m_sys::process::kill(pids[0], libc::SIGKILL).unwrap();
    let s = server.wait_status(|s| {
        s["worker_restarts"] == 1
            && s["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["pid"].as_u64() != Some(0))
    });
    let new_pids: Vec<u32> = s["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["pid"].as_u64().unwrap() as u32)
        .collect();
    assert_ne!(new_pids[0], pids[0]);
    assert_eq!(new_pids[1], pids[1], "the other worker was left alone");
    assert_eq!(s["workers"][0]["restarts"], 1);
    // Both workers serve again: enough subscribers land on each through SO_REUSEPORT.
    let mut subs: Vec<Sse> = (0..16)
        .map(|_| Sse::connect(server.http, "/sub/after", ""))
        .collect();
    let s = server.wait_status(|s| s["connections"]["sse"] == 16);
    assert!(
        s["workers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w["role"] == "subscribers")
            .all(|w| w["connections"].as_u64().unwrap() > 0),
        "{s}"
    );
    let id = server.publish("after", b"x");
    for sub in &mut subs {
        assert_eq!(sub.next().id, Some(id.to_string()));
    }
}

/// Inodes of the sockets listening on `port` (IPv4, /proc/net/tcp state 0A).
fn listener_inodes(port: u16) -> Vec<String> {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A").then(|| f[9].to_string())
        })
        .collect()
}

/// A process killed with SIGKILL releases its sockets in the reverse order of their
/// descriptor numbers. A worker's listener must be its highest-numbered socket, so a killed
/// worker leaves the SO_REUSEPORT group before its connections are torn down (at 1M that
/// took 15 s, and clients reconnecting from the same address and port were handed to the
/// dead listener all that time), not after.
#[test]
fn a_workers_listener_is_numbered_above_its_connections() {
    let server = Server::start(&["--workers", "1"]);
    let subs: Vec<Sse> = (0..40)
        .map(|_| Sse::connect(server.http, "/sub/fdorder", ""))
        .collect();
    server.wait_status(|s| s["connections"]["sse"] == 40);
    let listeners = listener_inodes(server.http.port());
    assert_eq!(listeners.len(), 1, "one worker, one listener");
    let pid = server.worker_pids()[0];
    let mut listener_fd = None;
    let mut other_socket_fds = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue; // closed between the listing and the read
        };
        let target = target.to_string_lossy().to_string();
        let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        else {
            continue;
        };
        let fd: i32 = entry.file_name().to_string_lossy().parse().unwrap();
        if listeners.iter().any(|l| l == inode) {
            listener_fd = Some(fd);
        } else {
            other_socket_fds.push(fd);
        }
    }
    let listener_fd = listener_fd.expect("the worker holds its listener");
    assert!(other_socket_fds.len() >= 40, "{other_socket_fds:?}");
    let highest_other = other_socket_fds.iter().max().copied().unwrap();
    assert!(
        listener_fd > highest_other,
        "listener fd {listener_fd}, highest other socket fd {highest_other}"
    );
    drop(subs);
}

#[test]
fn sigterm_ends_streams_cleanly_within_the_grace_period() {
    let mut server = Server::start(&[
        "--workers",
        "2",
        "--grace",
        "2s",
        "--tcp-listen",
        "127.0.0.1:0",
    ]);
    let pids = server.worker_pids();
    let mut subs: Vec<Sse> = (0..6)
        .map(|_| Sse::connect(server.http, "/sub/bye", ""))
        .collect();
    let mut tcp = std::net::TcpStream::connect(server.tcp.unwrap()).unwrap();
    std::io::Write::write_all(&mut tcp, b"SUB bye\n").unwrap();
    server.wait_status(|s| s["connections"]["sse"] == 6 && s["connections"]["tcp"] == 1);
    let started = Instant::now();
    server.signal(libc::SIGTERM);
    for sub in &mut subs {
        let rest = sub.read_to_close();
        assert!(rest.ends_with("event: shutdown\ndata: \n\n"), "{rest:?}");
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut tcp, &mut out).unwrap();
    assert!(out.ends_with("BYE\n"), "{out:?}");
    let status = server.wait_exit(Duration::from_secs(4));
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    for pid in pids {
        assert!(!alive(pid), "worker {pid} outlived the master");
    }
}

#[test]
fn workers_die_with_the_master() {
    let mut server = Server::start(&["--workers", "2"]);
    let pids = server.worker_pids();
    server.signal(libc::SIGKILL);
    server.wait_exit(Duration::from_secs(2));
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "workers still alive after the master was killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn toml_config_file_sets_options_and_flags_override_it() {
    let dir = std::env::temp_dir().join(format!("c1m-lifecycle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("serve.toml");
    std::fs::write(&path, "workers = 3\nhistory_size = 1\nmax_payload = 10\n").unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap(), "--max-payload", "20"]);
    assert_eq!(
        server.worker_pids().len(),
        4,
        "3 subscriber workers and the control worker"
    );
    server.publish("c", &[b'x'; 20]);
    match ureq::post(&server.url("/pub/c")).send_bytes(&[b'x'; 21]) {
        Err(ureq::Error::Status(413, _)) => {}
        other => panic!("expected 413, got {other:?}"),
    }
    let bad = common::c1m()
        .args(["serve", "--config", "/nonexistent/c1m.toml"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("/nonexistent/c1m.toml"));
    std::fs::remove_dir_all(dir).unwrap();
}
