//! TCP keepalive and TCP_USER_TIMEOUT on accepted sockets, so the kernel drops a peer that
//! vanished without a FIN (power loss, a NAT that forgot the mapping): idle connections through
//! unanswered keepalive probes, busy ones through unacknowledged data. The socket then fails
//! with ETIMEDOUT and the worker reaps it (counted as `refused.dead_peer`).

use crate::config::Config;
use std::os::fd::AsRawFd;

pub fn apply(stream: &impl AsRawFd, cfg: &Config) -> std::io::Result<()> {
    if let Some(idle) = cfg.tcp_keepalive {
        c1m_sys::sockopt::set_keepalive(
            stream,
            idle.as_secs() as u32,
            cfg.tcp_keepalive_interval.as_secs() as u32,
            cfg.tcp_keepalive_count,
        )?;
    }
    if let Some(t) = cfg.effective_user_timeout() {
        c1m_sys::sockopt::set_user_timeout(stream, t.as_millis().min(u32::MAX as u128) as u32)?;
    }
    Ok(())
}
