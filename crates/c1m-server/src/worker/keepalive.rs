//! TCP keepalive and TCP_USER_TIMEOUT on accepted sockets, so the kernel drops a peer that
//! vanished without a FIN (power loss, a NAT that forgot the mapping): idle connections through
//! unanswered keepalive probes, busy ones through unacknowledged data. The socket then fails
//! with ETIMEDOUT and the worker reaps it (counted as `refused.dead_peer`).
//!
//! The options are set once on each listening socket, not on every accepted one: Linux copies
//! SO_KEEPALIVE, TCP_KEEPIDLE/KEEPINTVL/KEEPCNT and TCP_USER_TIMEOUT from the listener into
//! the socket it creates for a connection (and arms the keepalive timer there). That saves
//! five setsockopt calls per connection on the subscribe ramp (~4 % of a worker's time in a
//! perf profile of a ramp). A reload sets them again, so later connections follow.

use crate::config::Config;
use std::os::fd::AsRawFd;

/// Sets both options on a listening socket, on or off, for the connections it will accept.
pub fn apply_to_listener(listener: &impl AsRawFd, cfg: &Config) -> std::io::Result<()> {
    match cfg.tcp_keepalive {
        Some(idle) => c1m_sys::sockopt::set_keepalive(
            listener,
            idle.as_secs() as u32,
            cfg.tcp_keepalive_interval.as_secs() as u32,
            cfg.tcp_keepalive_count,
        )?,
        None => c1m_sys::sockopt::clear_keepalive(listener)?,
    }
    // 0 turns TCP_USER_TIMEOUT off.
    let user_timeout = cfg
        .effective_user_timeout()
        .map_or(0, |t| t.as_millis().min(u32::MAX as u128) as u32);
    c1m_sys::sockopt::set_user_timeout(listener, user_timeout)
}
