//! A worker with nothing to time (idle streams arm no timer) sleeps until its next periodic
//! job instead of waking at every 100 ms tick: at the fd limit's layout that is ~54 processes
//! waking ten times a second for nothing. The timers it skips must not come back short: the
//! ticks slept through count before a new timer is armed.

use crate::common;

use common::Server;
use std::io::Read;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

/// Σ voluntary and involuntary context switches of a process so far.
fn wake_ups(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches"))
        .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
        .sum()
}

/// The master's children (its workers), read from /proc: asking /status would leave a
/// keep-alive connection, whose idle timer is a timer armed.
fn workers_of(master: u32) -> Vec<u32> {
    let children = std::fs::read_to_string(format!("/proc/{master}/task/{master}/children"));
    let pids: Vec<u32> = children
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(!pids.is_empty(), "no worker under {master}");
    pids
}

/// `c1m serve --workers 1 ARGS…`, up once its banner is out. Not `Server::start`: that asks
/// /status through a pooled client, whose kept-alive connection is a timer armed in a worker,
/// which then ticks as it should. Its workers report within their first 250 ms.
fn start_untouched(args: &[&str]) -> Server {
    let mut cmd = common::c1m();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--workers", "1"])
        .args(args);
    let (child, banner) = common::spawn_for_banner(cmd);
    let (http, _) = common::parse_banner(&banner).expect("serve's banner");
    thread::sleep(Duration::from_millis(1500)); // start-up's own wake-ups
    Server {
        child,
        http,
        tcp: None,
    }
}

#[test]
fn an_idle_worker_wakes_for_its_figures_not_for_every_timer_tick() {
    let server = start_untouched(&[]);
    let pids = workers_of(server.child.id());
    let before: Vec<u64> = pids.iter().map(|&p| wake_ups(p)).collect();
    thread::sleep(Duration::from_secs(3));
    for (pid, before) in pids.iter().zip(before) {
        let woke = wake_ups(*pid) - before;
        // Figures go to the master every 250 ms: 12 in 3 s. Waking at every tick was 30.
        assert!(woke <= 20, "worker {pid} woke {woke} times in 3 s idle");
    }
    // The figures still come: the master sees both workers report.
    let s = server.wait_status(|s| s["workers"].as_array().is_some_and(|w| w.len() == 2));
    assert!(!s["workers"][0]["pid"].is_null(), "{s}");
}

#[test]
fn a_head_timer_armed_after_an_idle_sleep_runs_its_full_time() {
    // A 100 ms head timeout is two ticks: counted from a now left behind by the sleep (up to
    // 250 ms, two ticks) it would fire at once or within one tick, under 100 ms.
    let server = start_untouched(&["--head-timeout", "100ms"]);
    for _ in 0..10 {
        thread::sleep(Duration::from_millis(330)); // idle: the worker sleeps past ticks
        let started = Instant::now();
        let mut silent = TcpStream::connect(server.http).unwrap();
        silent
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut sink = Vec::new();
        let _ = silent.read_to_end(&mut sink); // the server closes it at the head timeout
        let lasted = started.elapsed();
        assert!(
            lasted >= Duration::from_millis(100) && lasted < Duration::from_secs(5),
            "a 100 ms head timeout closed the connection after {lasted:?}"
        );
    }
}
