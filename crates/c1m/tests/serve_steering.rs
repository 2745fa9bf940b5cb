//! Accept steering, against the real binary: with more subscriber workers than CPUs, each
//! CPU's new connections go to one worker at a time, which takes them until its fill mark and
//! then hands the CPU on (`crate::steering` in c1m-server). Without it SO_REUSEPORT spreads
//! every connection over all workers, and a ramp pays a process switch per connection.

use crate::common;

use common::{Server, Sse};

/// 12 workers of 105 connections each (1,200 / 12 plus the 5 % spread slack): fill mark 92.
const ARGS: &[&str] = &["--workers", "12", "--max-conns", "1200"];
const SUBSCRIBERS: usize = 400;

fn per_worker(s: &serde_json::Value) -> Vec<u64> {
    s["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["role"] == "subscribers")
        .map(|w| w["connections"].as_u64().unwrap())
        .collect()
}

fn steered_workers(s: &serde_json::Value) -> Vec<u64> {
    s["steering"]["cpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["worker"].as_u64())
        .collect()
}

#[test]
fn connections_fill_a_few_workers_in_turn_and_none_is_refused() {
    let server = Server::start(ARGS);
    let s = server.wait_status(|s| !steered_workers(s).is_empty());
    let cpus = s["steering"]["cpus"].as_array().unwrap().len();
    assert!(cpus >= 1, "{s}");
    let subs: Vec<Sse> = (0..SUBSCRIBERS)
        .map(|_| Sse::connect(server.http, "/sub/steer", ""))
        .collect();
    let s = server.wait_status(|s| Server::held(s) == SUBSCRIBERS as u64);
    let counts = per_worker(&s);
    // Hash spreading would give each of the 12 about 33; steering fills workers to the mark
    // (92) one CPU at a time, so at least two workers are that full and most hold little.
    let full = counts.iter().filter(|&&n| n >= 85).count();
    assert!(full >= 2, "no worker was filled in turn: {counts:?}");
    assert!(
        s["steering"]["moves"].as_u64().unwrap() >= 2,
        "steered workers never handed a CPU on: {s}"
    );
    assert_eq!(s["refused"]["max_conns"], 0, "{s}");
    assert!(counts.iter().all(|&n| n <= 105), "{counts:?}");
    drop(subs);
}

#[test]
fn a_dead_steered_workers_cpu_goes_to_another_worker() {
    let server = Server::start(ARGS);
    let s = server.wait_status(|s| !steered_workers(s).is_empty());
    let victim = steered_workers(&s)[0];
    let pid = s["workers"][victim as usize]["pid"].as_u64().unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The CPU is steered again, to a live worker (the dead one's successor starts unsteered
    // and may be picked once it reports, with a new pid).
    let s = server.wait_status(|s| {
        let steered = steered_workers(s);
        s["workers"][victim as usize]["pid"].as_u64() != Some(pid)
            && steered.len() == s["steering"]["cpus"].as_array().unwrap().len()
    });
    for w in steered_workers(&s) {
        assert_ne!(s["workers"][w as usize]["pid"].as_u64(), Some(pid), "{s}");
    }
    // And connections are still taken.
    let _sub = Sse::connect(server.http, "/sub/after", "");
    server.wait_status(|s| Server::held(s) == 1);
}
