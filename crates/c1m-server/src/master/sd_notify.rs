//! systemd's readiness protocol (sd_notify(3)) for `Type=notify` units: the master tells the
//! service manager READY=1 once every worker is listening, WATCHDOG=1 from its loop tick (so a
//! stuck master is restarted by `WatchdogSec=`), and STOPPING=1 when it starts draining.
//!
//! The protocol is one Unix datagram per state change to `$NOTIFY_SOCKET` (a path, or an
//! abstract name when it starts with `@`); a plain std `UnixDatagram` does it, so neither
//! libsystemd nor any unsafe code is needed. Without `$NOTIFY_SOCKET` (not run by systemd)
//! every call is a no-op.

use anyhow::Context;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

/// The variables of the protocol; workers are spawned without them, as they must not speak
/// for the service (systemd's default NotifyAccess=main would ignore them anyway).
pub const ENV_VARS: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// Half the `WatchdogSec=` systemd announced (sd_watchdog_enabled(3) recommends pinging at
    /// least that often); None when no watchdog is configured for this process.
    watchdog_every: Option<Duration>,
    /// None until READY=1: systemd arms the watchdog once start-up is complete.
    next_watchdog: Option<Instant>,
}

impl Notifier {
    /// From the environment systemd sets: None when `$NOTIFY_SOCKET` is unset. (The master
    /// keeps the variables from its workers when spawning them: see [`ENV_VARS`].)
    pub fn from_env() -> anyhow::Result<Option<Notifier>> {
        let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
            return Ok(None);
        };
        let watchdog_every = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        let path = path.to_string_lossy().into_owned();
        let addr = match path.strip_prefix('@') {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(name.as_bytes())
            }
            None => SocketAddr::from_pathname(&path),
        }
        .with_context(|| format!("NOTIFY_SOCKET={path:?} is not a usable socket address"))?;
        let socket = UnixDatagram::unbound().context("creating the sd_notify socket")?;
        Ok(Some(Notifier {
            socket,
            addr,
            watchdog_every,
            next_watchdog: None,
        }))
    }

    /// Sends one state message (e.g. "READY=1\nSTATUS=…"). A failure is logged, never fatal:
    /// systemd not listening must not take the service down (it would notice via timeouts).
    pub fn send(&self, state: &str) {
        if let Err(e) = self.socket.send_to_addr(state.as_bytes(), &self.addr) {
            tracing::warn!(
                state = state.lines().next().unwrap_or(""),
                error = %e,
                "sd_notify failed"
            );
        }
    }

    /// READY=1 (with a status line); starts the watchdog pings.
    pub fn ready(&mut self, status: &str, now: Instant) {
        self.send(&format!("READY=1\nSTATUS={status}"));
        self.next_watchdog = self.watchdog_every.map(|every| now + every);
    }

    /// Called from every master loop tick: pings the watchdog when it is due.
    pub fn tick(&mut self, now: Instant) {
        let (Some(every), Some(due)) = (self.watchdog_every, self.next_watchdog) else {
            return;
        };
        if now >= due {
            self.send("WATCHDOG=1");
            self.next_watchdog = Some(now + every);
        }
    }
}

/// The ping interval for `WATCHDOG_USEC`/`WATCHDOG_PID` (sd_watchdog_enabled(3)): half the
/// timeout, and only when the variables are meant for this process.
fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(own_pid) {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchdog_interval_is_half_the_timeout_and_only_for_this_pid() {
        assert_eq!(
            watchdog_interval(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_interval(Some("2000000"), Some("7"), 7),
            Some(Duration::from_secs(1))
        );
        assert_eq!(watchdog_interval(Some("2000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(Some("x"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
    }
}
