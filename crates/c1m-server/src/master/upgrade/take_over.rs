//! The new master's side of a live upgrade: answers the old master's hello (refusing another
//! hand-over format), takes the hub and the port reservations, starts its workers in
//! hand-over mode, and serves once the old master commits.

use super::control::{bound, read_msg, write_msg};
use super::{Counters, ENV_UPGRADE_RESERVED};
use crate::config::{Config, ServeArgs};
use crate::master::{HandoverFrom, Master, Plan};
use anyhow::{bail, Context};
use c1m_proto::handover::{Control, HubState};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// The new master: started by the old one with `C1M_UPGRADE_FD`. Returns the exit code.
pub fn take_over(args: ServeArgs, mut cfg: Config, fd: i32) -> anyhow::Result<u8> {
    let started = Instant::now();
    let mut ctl = UnixStream::from(c1m_sys::fd::adopt_inherited(fd)?);
    let deadline = Instant::now() + cfg.upgrade_timeout;
    bound(&ctl, deadline)?;
    let hello = read_msg(&mut ctl)?;
    let (old_pid, old_slots, workers) = match Control::decode(&hello) {
        Ok(Control::Hello {
            old_pid,
            workers,
            listen,
            tcp_listen,
            admin_listen,
            control_worker,
            ..
        }) => {
            cfg.listen = listen.parse().context("listen address")?;
            cfg.tcp_listen = tcp_listen.map(|a| a.parse()).transpose()?;
            cfg.admin_listen = admin_listen.map(|a| a.parse()).transpose()?;
            let slots = workers as usize;
            // The subscriber workers: all the old slots but its control worker, if it had one.
            (
                old_pid,
                slots,
                slots - usize::from(control_worker && slots > 0),
            )
        }
        Ok(other) => bail!("expected hello, got {other:?}"),
        Err(e) => {
            let reason = format!("{e}");
            tracing::error!(error = %reason, format = ?c1m_proto::handover::hello_format(&hello), "upgrade refused: this binary cannot read the old one's hand-over");
            let _ = write_msg(&mut ctl, &Control::Refuse { reason });
            return Ok(1);
        }
    };
    let reservations = crate::listener::adopt_reserved(
        &std::env::var(ENV_UPGRADE_RESERVED).unwrap_or_default(),
        &cfg,
    )?;
    // The key files as they are now (the old master's bytes do not travel): a bad one
    // refuses the upgrade, and the old master serves on with its own.
    let secrets = match crate::secrets::Secrets::read(&cfg) {
        Ok(secrets) => secrets,
        Err(e) => {
            let reason = format!("{e:#}");
            tracing::error!(error = %reason, "upgrade refused: the key files do not load");
            let _ = write_msg(&mut ctl, &Control::Refuse { reason });
            return Ok(1);
        }
    };
    let limit = c1m_sys::rlimit::raise_nofile_to_hard()?;
    let plan = crate::master::plan(
        crate::config::Workers::Count(workers),
        cfg.max_conns,
        limit.hard,
        c1m_sys::process::available_cpus(),
    );
    let (version, commit) = crate::build_info();
    write_msg(
        &mut ctl,
        &Control::Accept {
            pid: std::process::id(),
            version: format!("{version} (commit {commit})"),
        },
    )?;
    let hub = match Control::decode(&read_msg(&mut ctl)?)? {
        Control::Hub(h) => h,
        Control::Abort { reason } => {
            tracing::warn!(reason, "upgrade: aborted by the old master");
            return Ok(1);
        }
        other => bail!("expected the hub, got {other:?}"),
    };
    let from = HandoverFrom {
        old_pid,
        deadline,
        old_slots,
    };
    let mut master = match start_workers(cfg, plan, secrets, *hub, from) {
        Ok(m) => m,
        Err(e) => {
            let reason = format!("{e:#}");
            let _ = write_msg(&mut ctl, &Control::Refuse { reason });
            return Err(e);
        }
    };
    write_msg(&mut ctl, &Control::HubTaken)?;
    tracing::info!(
        old_master = old_pid,
        "upgrade: hub taken, workers taking over"
    );
    match read_msg(&mut ctl).and_then(|m| Ok(Control::decode(&m)?)) {
        Ok(Control::Commit) => {}
        answer => {
            tracing::error!(?answer, "upgrade: not committed; the new generation exits");
            master.kill_workers();
            return Ok(1);
        }
    }
    master.upgrades.completed += 1;
    master.handover_from = None;
    // Held from here, and passed on again at this master's own upgrade.
    master.set_reservations(reservations);
    master.set_reload_source(args);
    tracing::info!(
        old_master = old_pid,
        took_ms = started.elapsed().as_millis() as u64,
        "upgrade: committed; this master serves"
    );
    master.run()?;
    tracing::info!("stopped");
    Ok(0)
}

fn start_workers(
    cfg: Config,
    plan: Plan,
    secrets: crate::secrets::Secrets,
    hub: HubState,
    from: HandoverFrom,
) -> anyhow::Result<Master> {
    let mut master = Master::build(cfg, plan, secrets)?;
    let slots = master.slot_count();
    let history = crate::broker::HistoryExport {
        last_id: hub.last_id,
        forgotten_through: hub.forgotten_through,
        channels: hub.channels,
        lost_buckets: hub.lost_buckets,
    };
    if !master.broker.import_history(history, Instant::now()) {
        bail!("this master's broker cannot take the hub");
    }
    for (channel, workers) in hub.interest {
        let ws = workers
            .into_iter()
            .map(|w| w as usize)
            .filter(|&w| w < slots)
            .collect();
        master.interest.insert(channel, ws);
    }
    master.published = hub.published;
    master.publish_refused = hub.publish_refused;
    master.upgrades = Counters {
        attempted: hub.upgrades_attempted,
        completed: hub.upgrades_completed,
        failed: hub.upgrades_failed,
    };
    master.handover_from = Some(from);
    master.spawn_all()?;
    Ok(master)
}
