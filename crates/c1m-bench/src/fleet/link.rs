//! The coordinator's end of one agent connection: parsing `--agents`, connecting and
//! authenticating, the clock probes, handing over the plan, and once started a reader thread
//! that turns the agent's frames into the coordinator's [`Msg`]s (reports and worker ends
//! like a local worker's; `AgentLost` when the connection breaks before `Done`).

use super::clock::{self, ClockSample};
use super::frame::{read_frame, write_frame, FromAgent, ToAgent, VERSION};
use super::limits::AgentLimits;
use crate::run::Msg;
use crate::wire::WorkerConfig;
use anyhow::{bail, Context};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::sync::mpsc::Sender;
use std::time::Duration;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Handshake and plan answers come at once; a silent agent is a broken one.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Workers report every 250 ms: this long without a frame means the agent is gone.
const RUN_SILENCE: Duration = Duration::from_secs(15);
const CLOCK_PROBES: u32 = 5;

/// `agent://HOST:PORT,…` → (as given, address). `ssh://` is named as not available.
pub fn parse_agents(spec: &str) -> anyhow::Result<Vec<(String, SocketAddr)>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item.starts_with("ssh://") {
            bail!(
                "--agents {item}: ssh:// agents are not supported; start `c1m bench-agent` on \
                 that box and give agent://HOST:PORT"
            );
        }
        let Some(rest) = item.strip_prefix("agent://") else {
            bail!("--agents {item:?}: want agent://HOST:PORT");
        };
        let addr = rest
            .to_socket_addrs()
            .with_context(|| format!("resolve agent {item}"))?
            .next()
            .with_context(|| format!("agent {item} resolves to no address"))?;
        out.push((item.to_string(), addr));
    }
    if out.is_empty() {
        bail!("--agents is empty");
    }
    Ok(out)
}

/// A connected, authenticated agent.
pub struct AgentLink {
    pub index: usize,
    pub spec: String,
    pub host: String,
    pub limits: AgentLimits,
    pub clock: ClockSample,
    stream: TcpStream,
    /// A write failed: the agent is gone (its reader reports how).
    dead: bool,
    ping_seq: u32,
}

impl AgentLink {
    pub fn connect(
        index: usize,
        spec: &str,
        addr: SocketAddr,
        token: &str,
    ) -> anyhow::Result<Self> {
        let ctx = || format!("agent {spec}");
        let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).with_context(ctx)?;
        stream.set_nodelay(true).with_context(ctx)?;
        stream
            .set_read_timeout(Some(ANSWER_TIMEOUT))
            .with_context(ctx)?;
        stream
            .set_write_timeout(Some(ANSWER_TIMEOUT))
            .with_context(ctx)?;
        let hello = ToAgent::Hello {
            version: VERSION,
            token: token.to_string(),
        };
        write_frame(&mut stream, &hello).with_context(ctx)?;
        let (host, limits) = match read_frame(&mut stream).with_context(ctx)? {
            Some(FromAgent::Welcome {
                version,
                host,
                limits,
            }) if version == VERSION => (host, limits),
            Some(FromAgent::Welcome { version, .. }) => {
                bail!("agent {spec} speaks protocol {version}, this bench {VERSION}")
            }
            Some(FromAgent::Refused { reason }) => bail!("agent {spec} refused: {reason}"),
            Some(other) => bail!("agent {spec}: unexpected answer to hello: {other:?}"),
            None => bail!("agent {spec} closed the connection during the handshake"),
        };
        let mut link = AgentLink {
            index,
            spec: spec.to_string(),
            host,
            limits,
            clock: ClockSample::default(),
            stream,
            dead: false,
            ping_seq: 0,
        };
        let mut samples = Vec::new();
        for _ in 0..CLOCK_PROBES {
            link.ping()?;
            match read_frame::<_, FromAgent>(&mut link.stream).with_context(ctx)? {
                Some(p) => samples.extend(p.clock_sample(crate::payload::now_us())),
                None => bail!("agent {spec} closed the connection during the clock probe"),
            }
        }
        link.clock = clock::best(&samples).context("no clock sample")?;
        Ok(link)
    }

    /// Sends the agent its workers; Ok(warnings) when it accepted them.
    pub fn plan(&mut self, workers: Vec<WorkerConfig>) -> anyhow::Result<Vec<String>> {
        let spec = self.spec.clone();
        write_frame(&mut self.stream, &ToAgent::Plan { workers })
            .with_context(|| format!("agent {spec}"))?;
        match read_frame(&mut self.stream).with_context(|| format!("agent {spec}"))? {
            Some(FromAgent::PlanAccepted { warnings }) => Ok(warnings),
            Some(FromAgent::Refused { reason }) => {
                bail!("agent {spec} refused its share: {reason}")
            }
            Some(other) => bail!("agent {spec}: unexpected answer to the plan: {other:?}"),
            None => bail!("agent {spec} closed the connection instead of accepting the plan"),
        }
    }

    /// Starts the reader thread, then tells the agent to start its workers.
    pub fn start(&mut self, workers: Range<usize>, tx: Sender<Msg>) -> anyhow::Result<()> {
        let mut reader = self
            .stream
            .try_clone()
            .with_context(|| format!("agent {}", self.spec))?;
        reader.set_read_timeout(Some(RUN_SILENCE))?;
        let index = self.index;
        std::thread::spawn(move || relay(&mut reader, index, workers, &tx));
        self.send(&ToAgent::Start);
        if self.dead {
            bail!("agent {}: could not send start", self.spec);
        }
        Ok(())
    }

    /// A clock probe; its answer arrives as `Msg::AgentClock` once the reader runs.
    pub fn ping(&mut self) -> anyhow::Result<()> {
        self.ping_seq += 1;
        let msg = ToAgent::Ping {
            seq: self.ping_seq,
            coordinator_us: crate::payload::now_us(),
        };
        write_frame(&mut self.stream, &msg).with_context(|| format!("agent {}", self.spec))
    }

    pub fn command(&mut self, line: &str) {
        self.send(&ToAgent::Command {
            line: line.trim_end().to_string(),
        });
    }

    pub fn stop(&mut self) {
        self.send(&ToAgent::Stop);
    }

    fn send(&mut self, msg: &ToAgent) {
        if !self.dead && write_frame(&mut self.stream, msg).is_err() {
            self.dead = true;
        }
    }

    /// Closes the connection (the reader ends with it).
    pub fn close(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Agent frames → coordinator messages, until `Done` or the connection breaks.
fn relay(r: &mut TcpStream, agent: usize, workers: Range<usize>, tx: &Sender<Msg>) {
    let reason = loop {
        let msg = match read_frame::<_, FromAgent>(r) {
            Ok(Some(m)) => m,
            Ok(None) => break "the agent closed the connection".to_string(),
            Err(e) => break format!("{e:#}"),
        };
        let sent = match msg {
            FromAgent::Report { report } if workers.contains(&report.index) => {
                tx.send(Msg::Report(report))
            }
            FromAgent::WorkerGone { index } if workers.contains(&index) => {
                tx.send(Msg::WorkerGone(index))
            }
            FromAgent::Done => {
                let _ = tx.send(Msg::AgentDone(agent));
                return;
            }
            ref p @ FromAgent::Pong { .. } => match p.clock_sample(crate::payload::now_us()) {
                Some(s) => tx.send(Msg::AgentClock(agent, s)),
                None => Ok(()),
            },
            FromAgent::Refused { reason } => break format!("the agent gave up: {reason}"),
            other => {
                eprintln!("c1m bench: agent {agent}: unexpected frame ignored: {other:?}");
                Ok(())
            }
        };
        if sent.is_err() {
            return;
        }
    };
    let _ = tx.send(Msg::AgentLost(agent, reason));
    for i in workers {
        let _ = tx.send(Msg::WorkerGone(i));
    }
}
