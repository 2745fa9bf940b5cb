//! `c1m bench-agent`: the load box's end. It listens on TCP, serves ONE coordinator at a time
//! (another gets `Refused`, busy), authenticates it by the shared token (constant-time
//! compare; a wrong token is refused, logged and counted), reports this box's limits, checks
//! the share it is given, starts its local bench workers on `Start` and relays both ways:
//! worker reports up, command lines down. Its workers die with it (PDEATHSIG), and with the
//! session: a coordinator that goes away takes this run's workers with it.

use super::frame::{
    read_frame, read_frame_capped, write_frame, FromAgent, ToAgent, MAX_HELLO, VERSION,
};
use super::limits::{self, AgentLimits};
use crate::procs;
use crate::run::Msg;
use crate::wire::WorkerConfig;
use anyhow::Context;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// A coordinator must say hello this soon after connecting.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Between hello and start (probes, plan) frames come at once.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Frames waiting for the coordinator socket; workers block on their stdout beyond it.
const RELAY_QUEUE: usize = 1024;
/// After `Stop`, how long workers get for their final reports.
const FINAL_WAIT: Duration = Duration::from_secs(20);
/// Longest command line relayed to workers (`P ch seq sent ack` is ~50 bytes).
const MAX_COMMAND: usize = 256;

/// What every session shares: the token, this box's limits and the counters.
pub struct Agent {
    pub token: String,
    pub limits: AgentLimits,
    pub host: String,
    busy: AtomicBool,
    pub refused_token: AtomicU64,
    pub refused_busy: AtomicU64,
}

impl Agent {
    pub fn new(token: String, limits: AgentLimits) -> Agent {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Agent {
            token,
            limits,
            host,
            busy: AtomicBool::new(false),
            refused_token: AtomicU64::new(0),
            refused_busy: AtomicU64::new(0),
        }
    }
}

/// Accepts coordinators until killed.
pub fn serve(agent: Arc<Agent>, listener: TcpListener) -> anyhow::Result<u8> {
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                eprintln!("c1m bench-agent: accept: {e}");
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let agent = agent.clone();
        std::thread::spawn(move || {
            if agent.busy.swap(true, Ordering::SeqCst) {
                let n = agent.refused_busy.fetch_add(1, Ordering::Relaxed) + 1;
                eprintln!("c1m bench-agent: refused {peer}: busy with another coordinator ({n} refused busy)");
                refuse(stream, "busy: this agent serves one coordinator at a time");
                return;
            }
            match session(&agent, stream, peer) {
                Ok(()) => eprintln!("c1m bench-agent: session with {peer} ended"),
                Err(e) => eprintln!("c1m bench-agent: session with {peer}: {e:#}"),
            }
            agent.busy.store(false, Ordering::SeqCst);
        });
    }
}

fn refuse(mut stream: TcpStream, reason: &str) {
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    let _ = write_frame(
        &mut stream,
        &FromAgent::Refused {
            reason: reason.to_string(),
        },
    );
}

fn session(agent: &Agent, mut stream: TcpStream, peer: SocketAddr) -> anyhow::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    match read_frame_capped::<_, ToAgent>(&mut stream, MAX_HELLO).context("handshake")? {
        Some(ToAgent::Hello { version, token }) => {
            if !bool::from(token.as_bytes().ct_eq(agent.token.as_bytes())) {
                let n = agent.refused_token.fetch_add(1, Ordering::Relaxed) + 1;
                refuse(stream, "wrong token");
                anyhow::bail!("refused: wrong token ({n} refused for a wrong token so far)");
            }
            if version != VERSION {
                refuse(
                    stream,
                    &format!("protocol {version} not spoken; this agent speaks {VERSION}"),
                );
                anyhow::bail!("refused: protocol version {version}");
            }
        }
        Some(other) => {
            refuse(stream, "expected hello");
            anyhow::bail!("refused: first frame was not hello: {other:?}");
        }
        None => anyhow::bail!("closed before hello"),
    }
    eprintln!("c1m bench-agent: coordinator {peer} authenticated");
    let welcome = FromAgent::Welcome {
        version: VERSION,
        host: agent.host.clone(),
        limits: agent.limits.clone(),
    };
    write_frame(&mut stream, &welcome)?;
    stream.set_read_timeout(Some(SETUP_TIMEOUT))?;
    let mut plan: Option<Vec<WorkerConfig>> = None;
    loop {
        match read_frame::<_, ToAgent>(&mut stream).context("setup")? {
            Some(ToAgent::Ping {
                seq,
                coordinator_us,
            }) => write_frame(
                &mut stream,
                &pong(seq, coordinator_us, crate::payload::now_us()),
            )?,
            Some(ToAgent::Plan { workers }) => match limits::check_plan(&agent.limits, &workers) {
                Ok(warnings) => {
                    for w in &warnings {
                        eprintln!("c1m bench-agent: warning: {w}");
                    }
                    write_frame(&mut stream, &FromAgent::PlanAccepted { warnings })?;
                    plan = Some(workers);
                }
                Err(reason) => {
                    refuse(stream, &reason);
                    anyhow::bail!("refused the plan: {reason}");
                }
            },
            Some(ToAgent::Start) => break,
            Some(ToAgent::Stop) | None => return Ok(()),
            Some(other) => anyhow::bail!("unexpected frame before start: {other:?}"),
        }
    }
    let mut plan = plan.context("start before any plan")?;
    for w in &mut plan {
        // The workers die with this process, not with the remote coordinator.
        w.parent_pid = std::process::id();
    }
    run(stream, plan)
}

fn pong(seq: u32, coordinator_us: u64, agent_recv_us: u64) -> FromAgent {
    FromAgent::Pong {
        seq,
        coordinator_us,
        agent_recv_us,
        agent_send_us: crate::payload::now_us(),
    }
}

/// The run: a writer thread owns the socket's sending side; worker readers and this thread
/// feed it through a bounded queue; this thread reads commands until `Stop` or a broken link.
fn run(mut stream: TcpStream, plan: Vec<WorkerConfig>) -> anyhow::Result<()> {
    let max_runtime = plan.iter().map(|w| w.max_runtime_ms).max().unwrap_or(0);
    stream.set_read_timeout(Some(
        Duration::from_millis(max_runtime) + Duration::from_secs(60),
    ))?;
    let (tx, rx) = sync_channel::<FromAgent>(RELAY_QUEUE);
    let mut out = stream.try_clone().context("clone socket")?;
    let writer = std::thread::spawn(move || {
        for msg in rx {
            if let Err(e) = write_frame(&mut out, &msg) {
                eprintln!("c1m bench-agent: sending to coordinator: {e:#}");
                break;
            }
        }
    });
    let gone = Arc::new(AtomicUsize::new(0));
    let sink = {
        let (tx, gone) = (tx.clone(), gone.clone());
        move |m: Msg| -> bool {
            let frame = match m {
                Msg::Report(report) => FromAgent::Report { report },
                Msg::WorkerGone(index) => {
                    gone.fetch_add(1, Ordering::SeqCst);
                    FromAgent::WorkerGone { index }
                }
                _ => return true,
            };
            tx.send(frame).is_ok()
        }
    };
    eprintln!(
        "c1m bench-agent: starting {} worker(s), {} connections",
        plan.len(),
        plan.iter().map(|w| w.conns).sum::<u64>()
    );
    let mut workers = match procs::spawn(&plan, sink) {
        Ok(w) => w,
        Err(e) => {
            // Tell the coordinator why before the link closes.
            let _ = tx.send(FromAgent::Refused {
                reason: format!("starting workers: {e:#}"),
            });
            drop(tx);
            let _ = writer.join();
            return Err(e);
        }
    };
    let result = relay_commands(&mut stream, &mut workers, &tx);
    if result.is_ok() {
        let until = Instant::now() + FINAL_WAIT;
        while gone.load(Ordering::SeqCst) < plan.len() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = tx.send(FromAgent::Done);
    }
    procs::reap(&mut workers);
    drop(tx);
    if result.is_err() {
        // The coordinator is gone: nothing will read what is queued.
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    let _ = writer.join();
    result
}

fn relay_commands(
    stream: &mut TcpStream,
    workers: &mut [procs::WorkerProc],
    tx: &SyncSender<FromAgent>,
) -> anyhow::Result<()> {
    loop {
        match read_frame::<_, ToAgent>(stream).context("coordinator link")? {
            Some(ToAgent::Command { line }) => {
                let ok = line.len() <= MAX_COMMAND
                    && !line.contains('\n')
                    && (line.starts_with("P ") || line.starts_with("R "));
                if ok {
                    procs::broadcast(workers, &format!("{line}\n"));
                } else {
                    eprintln!(
                        "c1m bench-agent: command refused: {:?}",
                        line.chars().take(64).collect::<String>()
                    );
                }
            }
            Some(ToAgent::Ping {
                seq,
                coordinator_us,
            }) => {
                let _ = tx.send(pong(seq, coordinator_us, crate::payload::now_us()));
            }
            Some(ToAgent::Stop) => {
                procs::stop(workers);
                return Ok(());
            }
            Some(other) => eprintln!("c1m bench-agent: unexpected frame ignored: {other:?}"),
            None => anyhow::bail!("the coordinator closed the connection before stop"),
        }
    }
}
