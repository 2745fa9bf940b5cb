//! The coordinator's side of a run with --agents: connecting to every agent (token, limits,
//! clock), splitting the run among them and handing each its share before the clock starts,
//! then starting them together.

use crate::fleet::link::{self, AgentLink};
use crate::fleet::split::{self, SplitInput};
use crate::fleet::state::{AgentRun, FleetRun};
use crate::human::{fmt_us, thousands};
use crate::run::{Msg, Run};
use crate::wire::{WorkerConfig, WorkerReport};
use anyhow::Context;
use std::sync::mpsc::Sender;
use std::time::Instant;

/// Connects to the agents and gives each its share; nothing runs yet.
pub(super) fn prepare(
    run: &mut Run,
    template: &WorkerConfig,
) -> anyhow::Result<(Vec<AgentLink>, Vec<AgentRun>)> {
    let spec = run.args.agents.clone().context("--agents")?;
    let token_file = run
        .args
        .agent_token_file
        .clone()
        .context("--agents needs --agent-token-file")?;
    let token = crate::fleet::read_token(&token_file)?;
    let mut links = Vec::new();
    for (i, (spec, addr)) in link::parse_agents(&spec)?.into_iter().enumerate() {
        links.push(AgentLink::connect(i, &spec, addr, &token)?);
    }
    let limits: Vec<_> = links.iter().map(|l| l.limits.clone()).collect();
    let input = SplitInput {
        template,
        conns: run.args.conns,
        rate: run.args.rate,
        churn_rate: run.args.churn_rate,
        sources: &run.sources,
        port_range: run.args.port_range.as_deref(),
        workers_per_agent: run.args.workers,
        by: run.args.agent_split,
    };
    let shares = split::split(&input, &limits)?;
    let mut agents = Vec::new();
    let mut next = 0;
    for (l, share) in links.iter_mut().zip(shares) {
        let n = share.workers.len();
        let mut a = AgentRun::new(l.spec.clone(), l.host.clone(), l.limits.clone(), l.clock);
        a.workers = next..next + n;
        a.first_conn = share.first_conn;
        a.conns = share.conns;
        a.sources = share.sources;
        a.warnings = l.plan(share.workers)?;
        next += n;
        if !run.args.quiet {
            eprintln!(
                "c1m bench: agent {} {} ({}): {} connections on {n} worker(s) · fd limit {} · \
                 {} CPU(s) · {} port(s) per source/destination × {} address(es) · clock offset \
                 {:+}µs (±{})",
                l.index,
                l.spec,
                l.host,
                thousands(a.conns),
                l.limits.nofile_hard,
                l.limits.cpus,
                l.limits.per_pair(),
                a.sources.len().max(1),
                l.clock.offset_us,
                fmt_us(l.clock.bound_us()),
            );
            for w in &a.warnings {
                eprintln!("c1m bench: agent {} warning: {w}", l.index);
            }
        }
        agents.push(a);
    }
    run.workers = next;
    run.latest = (0..next)
        .map(|index| WorkerReport {
            index,
            ..Default::default()
        })
        .collect();
    run.finals = vec![false; next];
    Ok((links, agents))
}

/// Starts every agent's workers, one right after the other.
pub(super) fn start(
    run: &mut Run,
    links: &mut [AgentLink],
    agents: Vec<AgentRun>,
    tx: &Sender<Msg>,
    t0: Instant,
) -> anyhow::Result<()> {
    for (l, a) in links.iter_mut().zip(&agents) {
        l.start(a.workers.clone(), tx.clone())?;
    }
    run.fleet = Some(FleetRun { agents, t0 });
    Ok(())
}

/// An agent's link broke before `Done`: its connections count as lost with the agent (their
/// last reported online figure), not as online and not as lost messages.
pub(super) fn agent_lost(run: &mut Run, agent: usize, reason: String) {
    let Some(f) = run.fleet.as_mut() else { return };
    let Some(a) = f.agents.get_mut(agent) else {
        return;
    };
    if a.done || a.lost.is_some() {
        return;
    }
    let mut online = 0;
    for r in run.latest.get_mut(a.workers.clone()).unwrap_or_default() {
        online += r.online;
        r.online = 0;
        r.connecting = 0;
    }
    let at = Instant::now();
    eprintln!(
        "c1m bench: agent {agent} {} lost at {:.1}s: {reason}; its {} connections count as agent lost",
        a.spec,
        at.saturating_duration_since(f.t0).as_secs_f64(),
        thousands(online)
    );
    a.lost = Some(crate::fleet::state::AgentLoss { at, reason, online });
}
