//! Presence, the parts both processes share: which channels keep a member set and send
//! join/leave events (one function each, so per-namespace options replace the global switch in
//! one place), the connection id members are known by, and the join/leave event's JSON.
//!
//! Who holds what: a worker knows its own members and reports their joins and leaves to the
//! master in one frame per loop turn (`worker/presence.rs`); the master keeps the node's
//! member sets, bounded, and survives a worker's crash, so it says the crashed worker's
//! members left (`master/presence.rs`).

use crate::config::Config;
use std::fmt;

/// Largest `info` claim (its JSON text) a member carries; a token with a larger one is
/// refused (401), so presence never holds a truncated value.
pub const MAX_INFO: usize = 1024;

/// Whether `channel` keeps a member set.
pub fn enabled(cfg: &Config, _channel: &str) -> bool {
    cfg.presence
}

/// Whether `channel`'s subscribers get `join` / `leave` events.
pub fn join_leave_enabled(cfg: &Config, channel: &str) -> bool {
    cfg.join_leave && enabled(cfg, channel)
}

/// A connection's node-unique id: the worker slot it lives in and its token there (slot
/// index + generation). Written `<worker>-<token hex>`, e.g. `0-100000003`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub worker: u32,
    pub token: u64,
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{:x}", self.worker, self.token)
    }
}

impl std::str::FromStr for ConnId {
    type Err = String;
    fn from_str(s: &str) -> Result<ConnId, String> {
        let bad = || format!("connection id {s:?} is not <worker>-<token hex>");
        let (w, t) = s.split_once('-').ok_or_else(bad)?;
        let digits = |x: &str, hex: bool| {
            !x.is_empty()
                && x.len() <= 16
                && x.bytes().all(|b| {
                    if hex {
                        b.is_ascii_hexdigit()
                    } else {
                        b.is_ascii_digit()
                    }
                })
        };
        if !digits(w, false) || !digits(t, true) {
            return Err(bad());
        }
        Ok(ConnId {
            worker: w.parse().map_err(|_| bad())?,
            token: u64::from_str_radix(t, 16).map_err(|_| bad())?,
        })
    }
}

/// The event's JSON object: `{"channel","user","conn","info"?}` (`info` only when the
/// member's token had one; it is JSON already and goes in as it is).
pub fn event_json(channel: &str, user: Option<&str>, conn: ConnId, info: Option<&str>) -> String {
    let mut out = String::with_capacity(64 + channel.len() + info.map_or(0, str::len));
    out.push_str("{\"channel\":");
    out.push_str(&serde_json::Value::from(channel).to_string());
    out.push_str(",\"user\":");
    out.push_str(&serde_json::Value::from(user).to_string());
    out.push_str(",\"conn\":\"");
    out.push_str(&conn.to_string());
    out.push('"');
    if let Some(info) = info {
        out.push_str(",\"info\":");
        out.push_str(info);
    }
    out.push('}');
    out
}

/// The WebSocket envelope of an event: the same object with `"type":"join"` (or `leave`)
/// first.
pub fn ws_envelope(join: bool, json: &str) -> String {
    let kind = if join { "join" } else { "leave" };
    format!(
        "{{\"type\":\"{kind}\",{}",
        json.strip_prefix('{').unwrap_or(json)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conn_ids_are_written_and_read_back() {
        let id = ConnId {
            worker: 3,
            token: 0x1_0000_0007,
        };
        assert_eq!(id.to_string(), "3-100000007");
        assert_eq!("3-100000007".parse::<ConnId>().unwrap(), id);
        for bad in ["", "3", "-1", "3-", "x-1", "3-g", "3-1-2", "99999999999-1"] {
            assert!(bad.parse::<ConnId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn events_are_json() {
        let id = ConnId {
            worker: 0,
            token: 1,
        };
        let j = event_json("room", Some("a\"n"), id, Some("{\"n\":1}"));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["user"], "a\"n");
        assert_eq!(v["conn"], "0-1");
        assert_eq!(v["info"]["n"], 1);
        let anon: serde_json::Value =
            serde_json::from_str(&event_json("r", None, id, None)).unwrap();
        assert!(anon["user"].is_null() && anon.get("info").is_none());
        let ws: serde_json::Value = serde_json::from_str(&ws_envelope(false, &j)).unwrap();
        assert_eq!(ws["type"], "leave");
        assert_eq!(ws["channel"], "room");
    }
}
