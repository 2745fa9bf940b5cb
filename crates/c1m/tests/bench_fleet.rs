//! `c1m bench --agents` across network namespaces the test creates as hosts: a server
//! namespace (a bridge, `c1m serve`, the coordinator) and three agent namespaces, each with its
//! own address on 10.213.7.0/24 and a `c1m bench-agent`. Everything lives inside the
//! namespaces, which are deleted (with their links and bridge) on drop, also after a panic.
//!
//! Sizes are CI sizes (3 × 3,000 subscribers: under a minute on a 2-core box, far below the
//! fd limit of 20,000 per process), not the 60,000 of a benchmark run.
//!
//! Needs `ip netns` (root or CAP_SYS_ADMIN). Without it the tests print SKIPPED and return
//! (set C1M_REQUIRE_NETNS=1 to make that a failure instead).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_c1m");
const SERVER_IP: &str = "10.213.7.1";
const AGENTS: usize = 3;
/// The coordinator publishes from the bridge address, not loopback: a key is required.
const PUBLISH_KEY: &str = "fleet-publish-key";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The namespaces of one test; deleting a namespace takes its links and bridge with it.
struct Lab {
    server_ns: String,
    agent_ns: Vec<String>,
    token: PathBuf,
}

impl Lab {
    /// None (with the reason printed) when this host does not permit `ip netns`.
    fn create() -> Option<Lab> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "c1mf{}x{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let probe = Command::new("ip").args(["netns", "add", &tag]).output();
        match probe {
            Ok(o) if o.status.success() => {}
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                assert!(
                    std::env::var_os("C1M_REQUIRE_NETNS").is_none(),
                    "ip netns is not permitted here: {why}"
                );
                eprintln!("SKIPPED (not passed): `ip netns add` is not permitted here: {why}");
                return None;
            }
        }
        let token = std::env::temp_dir().join(format!("{tag}.token"));
        let lab = Lab {
            server_ns: tag.clone(),
            agent_ns: (0..AGENTS).map(|i| format!("{tag}a{i}")).collect(),
            token: token.clone(),
        };
        let s = lab.server_ns.as_str();
        ip(&["-n", s, "link", "set", "lo", "up"]);
        ip(&["-n", s, "link", "add", "br0", "type", "bridge"]);
        ip(&[
            "-n",
            s,
            "addr",
            "add",
            &format!("{SERVER_IP}/24"),
            "dev",
            "br0",
        ]);
        ip(&["-n", s, "link", "set", "br0", "up"]);
        for (i, a) in lab.agent_ns.iter().enumerate() {
            ip(&["netns", "add", a]);
            ip(&["-n", a, "link", "set", "lo", "up"]);
            let (port, peer) = (format!("p{i}"), format!("e{i}"));
            ip(&[
                "-n", s, "link", "add", &port, "type", "veth", "peer", "name", &peer, "netns", a,
            ]);
            ip(&["-n", s, "link", "set", &port, "master", "br0"]);
            ip(&["-n", s, "link", "set", &port, "up"]);
            ip(&[
                "-n",
                a,
                "addr",
                "add",
                &format!("{}/24", agent_ip(i)),
                "dev",
                &peer,
            ]);
            ip(&["-n", a, "link", "set", &peer, "up"]);
        }
        std::fs::write(&token, "fleet-test-token-0123456789abcdef\n").unwrap();
        Some(lab)
    }

    fn exec(&self, ns: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, BIN]);
        c
    }

    /// `c1m serve` in the server namespace; its http address once every worker is up.
    fn serve(&self) -> (KillOnDrop, String) {
        let mut cmd = self.exec(&self.server_ns);
        cmd.args([
            "serve",
            "--listen",
            &format!("{SERVER_IP}:0"),
            "--workers",
            "2",
            "--publish-key",
            PUBLISH_KEY,
        ]);
        let (child, line) = spawn_banner(cmd);
        let addr = line
            .strip_prefix("c1m serve: listening on http ")
            .and_then(|r| r.split([';', ',']).next())
            .unwrap_or_else(|| panic!("serve banner: {line:?}"))
            .to_string();
        // Every worker listening: the status shows each with a pid.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.server_ns,
                    "curl",
                    "-sf",
                    "--max-time",
                    "2",
                ])
                .arg(format!("http://{addr}/status"))
                .output()
                .unwrap();
            let ready = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .ok()
                .and_then(|v| {
                    let w = v["workers"].as_array()?.clone();
                    Some(!w.is_empty() && w.iter().all(|w| w["pid"].as_u64().unwrap_or(0) != 0))
                })
                .unwrap_or(false);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "c1m serve never became ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        (child, addr)
    }

    /// `c1m bench-agent` in agent namespace `i`; its `agent://` address.
    fn agent(&self, i: usize) -> (KillOnDrop, String) {
        let mut cmd = self.exec(&self.agent_ns[i]);
        cmd.args(["bench-agent", "--listen", &format!("{}:0", agent_ip(i))])
            .arg("--token-file")
            .arg(&self.token);
        let (child, line) = spawn_banner(cmd);
        let addr = line
            .strip_prefix("c1m bench-agent: listening on ")
            .unwrap_or_else(|| panic!("agent banner: {line:?}"));
        (child, format!("agent://{}", addr.trim()))
    }

    /// `c1m bench` (the coordinator) in the server namespace, started.
    fn bench(
        &self,
        server: &str,
        agents: &[&str],
        conns: u32,
        hold: &str,
        report: &PathBuf,
    ) -> Child {
        let mut cmd = self.exec(&self.server_ns);
        cmd.arg("bench")
            .arg(format!("http://{server}/sub/fleet"))
            .args([
                "--conns",
                &conns.to_string(),
                "--rate",
                "6000",
                "--hold",
                hold,
            ])
            .args([
                "--publish-every",
                "1s",
                "--publish-key",
                PUBLISH_KEY,
                "--quiet",
            ])
            .args(["--agents", &agents.join(",")])
            .arg("--agent-token-file")
            .arg(&self.token)
            .arg("--report")
            .arg(report)
            .stdout(Stdio::piped());
        cmd.spawn().expect("start c1m bench")
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in self.agent_ns.iter().chain([&self.server_ns]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_file(&self.token);
    }
}

fn agent_ip(i: usize) -> String {
    format!("10.213.7.{}", 10 + i)
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns a command whose first stdout line is its banner; the rest of stdout is drained.
fn spawn_banner(mut cmd: Command) -> (KillOnDrop, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawn");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    std::thread::spawn(move || for _ in out.lines().map_while(Result::ok) {});
    (KillOnDrop(child), line.trim().to_string())
}

/// Waits for the coordinator (bounded) and returns its exit code, report and summary.
fn finish(child: Child, report: &PathBuf) -> (i32, serde_json::Value, String) {
    let mut child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.0.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "c1m bench did not finish in 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(child.0.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    eprintln!("{stdout}");
    let code = child.0.wait().unwrap().code().unwrap_or(-1);
    let text = std::fs::read_to_string(report)
        .unwrap_or_else(|e| panic!("no report {} ({e}):\n{stdout}", report.display()));
    let _ = std::fs::remove_file(report);
    (code, serde_json::from_str(&text).unwrap(), stdout)
}

fn report_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("c1m-fleet-{}-{name}.json", std::process::id()))
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn three_agents_add_up_to_one_agent_of_the_same_shape() {
    let Some(lab) = Lab::create() else { return };
    let (_server, server) = lab.serve();
    let agents: Vec<(KillOnDrop, String)> = (0..AGENTS).map(|i| lab.agent(i)).collect();
    let addrs: Vec<&str> = agents.iter().map(|a| a.1.as_str()).collect();

    let path = report_path("three");
    let (code, three, _) = finish(lab.bench(&server, &addrs, 9000, "4s", &path), &path);
    let path = report_path("one");
    let (code_one, one, _) = finish(lab.bench(&server, &addrs[..1], 9000, "4s", &path), &path);
    assert_eq!(
        (code, code_one),
        (0, 0),
        "both runs succeed: {} {}",
        three["publishing"],
        one["publishing"]
    );

    let per_agent = three["fleet"]["agents"].as_array().unwrap();
    assert_eq!(per_agent.len(), 3);
    for a in per_agent {
        assert_eq!(n(&a["subscribed"]), 3000, "{a}");
        assert_eq!(n(&a["delivery"]["missing"]), 0, "{a}");
        assert!(a["lost"].is_null(), "{a}");
    }
    // The merged histogram is the sum of the agents' (its count is their counts' sum).
    let merged = n(&three["latency_us"]["delivery"]["count"]);
    let summed: u64 = per_agent
        .iter()
        .map(|a| n(&a["latency_us"]["delivery"]["count"]))
        .sum();
    assert_eq!(merged, summed);
    // Same shape, same totals: every subscriber online and every published message delivered
    // to each exactly once (the number of publishes may differ by timing, the ratio not).
    for r in [&three, &one] {
        let res = &r["result"];
        let d = &r["delivery"]["totals"];
        let published = n(&r["publishing"]["published"]);
        assert!(published >= 2, "{r}");
        assert_eq!(n(&res["subscribed"]), 9000);
        assert_eq!(n(&res["peak_online"]), 9000);
        assert_eq!(n(&d["expected"]), published * 9000, "{d}");
        assert_eq!(n(&d["received_in_window"]), published * 9000, "{d}");
        assert_eq!(
            (n(&d["missing"]), n(&d["duplicates"]), n(&d["reordered"])),
            (0, 0, 0)
        );
        assert_eq!(n(&r["latency_us"]["delivery"]["count"]), published * 9000);
        assert_eq!(n(&r["fleet"]["agents_lost"]), 0);
        // Namespaces share one clock: the probe bounds it well under a millisecond or so.
        assert!(
            n(&r["fleet"]["clock_skew_bound_us"]) < 20_000,
            "{}",
            r["fleet"]
        );
    }
    assert_eq!(one["fleet"]["agents"].as_array().unwrap().len(), 1);
}

#[test]
fn an_agent_killed_mid_run_is_reported_lost_not_as_lost_messages() {
    let Some(lab) = Lab::create() else { return };
    let (_server, server) = lab.serve();
    let mut agents: Vec<(KillOnDrop, String)> = (0..AGENTS).map(|i| lab.agent(i)).collect();
    let addrs: Vec<String> = agents.iter().map(|a| a.1.clone()).collect();
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let path = report_path("kill");
    let bench = lab.bench(&server, &addrs, 3000, "6s", &path);
    // The ramp of 3,000 at 6,000/s takes half a second: at 3 s the hold is on.
    std::thread::sleep(Duration::from_secs(3));
    agents[2].0 .0.kill().unwrap();
    let (code, r, stdout) = finish(bench, &path);
    assert_eq!(
        code, 1,
        "a run that lost an agent did not do what was asked"
    );
    assert!(stdout.contains("LOST at"), "{stdout}");
    let fleet = &r["fleet"];
    assert_eq!(n(&fleet["agents_lost"]), 1, "{fleet}");
    assert_eq!(n(&fleet["connections_agent_lost"]), 1000, "{fleet}");
    let lost = &fleet["agents"][2]["lost"];
    assert_eq!(n(&lost["connections"]), 1000, "{lost}");
    assert!(fleet["agents"][0]["lost"].is_null() && fleet["agents"][1]["lost"].is_null());
    // The other two agents' subscribers got everything; none of the lost agent's
    // subscribers is counted as a missing message.
    let d = &r["delivery"]["totals"];
    assert_eq!(n(&d["missing"]), 0, "{d}");
    assert!(n(&d["expected"]) > 0, "{d}");
    // What the lost agent received before it died is in its own line, not in totals whose
    // expectations it never settled.
    assert_eq!(n(&d["received_in_window"]), n(&d["expected"]), "{d}");
    assert_eq!(n(&r["result"]["online_at_end"]), 2000);
    assert_eq!(r["result"]["success"], false);
}

/// Loopback only, no namespaces: a coordinator with the wrong token is refused with a clear
/// error (exit 2), and the agent logs and counts it; the agent then still serves the next one.
#[test]
fn a_wrong_token_is_refused_logged_and_counted() {
    let dir = std::env::temp_dir();
    let good = dir.join(format!("c1m-fleet-{}-good.token", std::process::id()));
    let bad = dir.join(format!("c1m-fleet-{}-bad.token", std::process::id()));
    std::fs::write(&good, "the-right-token-0123456789\n").unwrap();
    std::fs::write(&bad, "the-wrong-token-0123456789\n").unwrap();
    let mut cmd = Command::new(BIN);
    cmd.args(["bench-agent", "--listen", "127.0.0.1:0", "--token-file"])
        .arg(&good)
        .stderr(Stdio::piped());
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let _agent = KillOnDrop(child);
    let addr = line
        .trim()
        .strip_prefix("c1m bench-agent: listening on ")
        .unwrap_or_else(|| panic!("agent banner: {line:?}"))
        .to_string();
    let (log_tx, log_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in stderr.lines().map_while(Result::ok) {
            let _ = log_tx.send(l);
        }
    });
    let out = Command::new(BIN)
        .args([
            "bench",
            "http://127.0.0.1:9/sub/x",
            "--conns",
            "10",
            "--quiet",
        ])
        .args(["--agents", &format!("agent://{addr}"), "--agent-token-file"])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("refused: wrong token"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match log_rx.recv_timeout(left) {
            Ok(l) if l.contains("wrong token") => break l,
            Ok(_) => {}
            Err(e) => panic!("agent never logged the refusal: {e}"),
        }
    };
    assert!(
        logged.contains("1 refused for a wrong token so far"),
        "{logged}"
    );
    let _ = std::fs::remove_file(&good);
    let _ = std::fs::remove_file(&bad);
}
