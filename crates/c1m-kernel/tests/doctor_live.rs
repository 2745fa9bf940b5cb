//! Doctor against real conditions provoked on this box, through the library: a listener with
//! backlog 1 flooded with loopback connects (ListenOverflows rising, a full accept queue), and
//! a child process holding every descriptor its lowered RLIMIT_NOFILE allows. Nothing global
//! is changed; the sockets and the child are gone when each test ends.

use c1m_kernel::doctor::{diagnose, DoctorArgs, Finding, Report, Status};
use socket2::{Domain, Socket, Type};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn args(interval: Duration, only: &[&str]) -> DoctorArgs {
    DoctorArgs {
        interval,
        json: false,
        conns: None,
        role: c1m_kernel::params::Role::Server,
        root: PathBuf::from("/"),
        only: only.iter().map(|s| s.to_string()).collect(),
        list: false,
    }
}

fn finding<'a>(r: &'a Report, name: &str) -> &'a Finding {
    r.findings.iter().find(|f| f.check == name).unwrap()
}

/// ListenOverflows read straight from /proc/net/netstat, by header name.
fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        if pair[0].starts_with("TcpExt:") {
            let names = pair[0].split_whitespace();
            let vals = pair[1].split_whitespace();
            for (n, v) in names.zip(vals) {
                if n == "ListenOverflows" {
                    return v.parse().unwrap();
                }
            }
        }
    }
    panic!("no ListenOverflows in /proc/net/netstat");
}

#[test]
fn listener_with_backlog_1_flooded_overflows() {
    let l = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    l.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    l.listen(1).unwrap();
    let addr = l.local_addr().unwrap().as_socket().unwrap();
    let before = listen_overflows();
    // Doctor watches for 1.5 s while the flood happens inside its interval.
    let doctor = std::thread::spawn(|| {
        diagnose(&args(
            Duration::from_millis(1500),
            &["tcp.accept-queue", "net.somaxconn"],
        ))
        .unwrap()
    });
    std::thread::sleep(Duration::from_millis(200));
    let mut flood = Vec::new();
    for _ in 0..32 {
        let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        // EINPROGRESS is the expected answer of a non-blocking connect.
        let _ = s.connect(&addr.into());
        flood.push(s);
    }
    let report = doctor.join().unwrap();
    let after = listen_overflows();
    assert!(
        after > before,
        "the flood did not overflow ({before} -> {after})"
    );

    let aq = finding(&report, "tcp.accept-queue");
    assert_eq!(aq.status, Status::Fail, "{aq:#?}");
    assert!(aq.summary.contains("ListenOverflows +"), "{}", aq.summary);
    assert!(!aq.fix.is_empty());
    // The listener itself shows up with a full accept queue (backlog 1 from sock_diag).
    let sm = finding(&report, "net.somaxconn");
    assert_eq!(sm.status, Status::Fail, "{sm:#?}");
    assert!(
        sm.details
            .iter()
            .any(|d| d.starts_with(&format!("{addr} accept queue")) && d.ends_with("/1")),
        "{sm:#?}"
    );
    drop(flood);
    drop(l);
}

#[test]
fn process_at_its_fd_limit_is_named() {
    // The child opens some descriptors and sleeps holding them; then its RLIMIT_NOFILE is
    // lowered (prlimit, on the child only) to exactly the number it holds.
    let opens: String = (3..40).map(|fd| format!(" {fd}</dev/null")).collect();
    let mut child = Command::new("bash")
        .args(["-c", &format!("exec{opens} && exec sleep 20")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let fd_count = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let comm = || std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    // Wait (bounded) until bash has become sleep with its descriptors open.
    let deadline = Instant::now() + Duration::from_secs(5);
    while comm().trim() != "sleep" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let open = fd_count();
    assert!(open > 10, "child holds only {open} descriptors");
    let st = Command::new("prlimit")
        .args([
            "--pid",
            &pid.to_string(),
            &format!("--nofile={open}:{open}"),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "prlimit failed");

    let report = diagnose(&args(Duration::ZERO, &["fd.process"])).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();

    let f = finding(&report, "fd.process");
    assert_eq!(f.status, Status::Fail, "{f:#?}");
    let line = format!("pid {pid} (sleep): {open} of {open} descriptors open");
    assert!(f.details.iter().any(|d| d.starts_with(&line)), "{f:#?}");
    assert!(
        f.fix
            .iter()
            .any(|c| c == &format!("prlimit --pid {pid} --nofile={}:{}", open * 2, open * 2)),
        "{f:#?}"
    );
}
