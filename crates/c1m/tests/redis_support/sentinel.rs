//! A Redis master, its replica and three Sentinels (`redis-server --sentinel`) on loopback
//! ports, each in its own temp dir, with a short `down-after-milliseconds` so a killed master
//! is replaced within seconds.

use super::{free_port, wait_listening, Proc, Redis, TempDir};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const MASTER_NAME: &str = "mymaster";

pub struct Sentinels {
    /// The first master, then its replica.
    pub redis: Vec<Redis>,
    pub ports: Vec<u16>,
    _procs: Vec<Proc>,
    _dirs: Vec<TempDir>,
}

impl Sentinels {
    /// None (skipped) when redis is not installed.
    pub fn start() -> Option<Sentinels> {
        let master = Redis::start(&[])?;
        let mport = master.port.to_string();
        let replica = Redis::start(&["--replicaof", "127.0.0.1", &mport]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replica
            .cli(&[], &["info", "replication"])
            .contains("master_link_status:up")
        {
            assert!(Instant::now() < deadline, "the replica never synced");
            std::thread::sleep(Duration::from_millis(50));
        }
        let (mut procs, mut dirs, mut ports) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..3 {
            let port = free_port();
            let dir = TempDir::new(&format!("sentinel-{port}"));
            let conf = dir.0.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {mport} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n",
                    dir.0.display()
                ),
            )
            .unwrap();
            let child = Command::new(master.server)
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server --sentinel");
            procs.push(Proc(child));
            wait_listening(SocketAddr::from(([127, 0, 0, 1], port)), "redis sentinel");
            dirs.push(dir);
            ports.push(port);
        }
        let s = Sentinels {
            redis: vec![master, replica],
            ports,
            _procs: procs,
            _dirs: dirs,
        };
        // Every Sentinel knows the replica and the other Sentinels before anything fails.
        let deadline = Instant::now() + Duration::from_secs(15);
        while !s.ports.iter().all(|&p| {
            let info = s.ask(p, &["sentinel", "master", MASTER_NAME]);
            let field = |name: &str| {
                let lines: Vec<&str> = info.lines().collect();
                lines
                    .iter()
                    .position(|l| *l == name)
                    .and_then(|i| lines.get(i + 1))
                    .and_then(|v| v.parse::<u32>().ok())
                    .unwrap_or(0)
            };
            field("num-slaves") >= 1 && field("num-other-sentinels") >= 2
        }) {
            assert!(
                Instant::now() < deadline,
                "the Sentinels never found each other"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(s)
    }

    /// redis-cli against Sentinel `port`.
    pub fn ask(&self, port: u16, command: &[&str]) -> String {
        let out = Command::new(self.redis[0].cli)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(command)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// `redis+sentinel://` naming the three Sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The index (in `redis`) of the master the first Sentinel names.
    pub fn master(&self) -> usize {
        let out = self.ask(
            self.ports[0],
            &["sentinel", "get-master-addr-by-name", MASTER_NAME],
        );
        let port: u16 = out
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0);
        self.redis
            .iter()
            .position(|r| r.port == port)
            .unwrap_or_else(|| panic!("the Sentinels name no known master: {out}"))
    }

    /// Waits (at most `limit`) until every Sentinel names `index` as master and it says so.
    pub fn wait_master(&self, index: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        let port = self.redis[index].port.to_string();
        while !(self.ports.iter().all(|&p| {
            self.ask(p, &["sentinel", "get-master-addr-by-name", MASTER_NAME])
                .lines()
                .nth(1)
                == Some(port.as_str())
        }) && self.redis[index].cli(&[], &["role"]).starts_with("master"))
        {
            assert!(
                Instant::now() < deadline,
                "redis {index} not master within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
