//! Presence, the parts both processes share: the join/leave event's JSON. Which channels keep
//! a member set and send join/leave events is their namespace's `presence` / `join_leave`
//! (`config::Namespaces`, whose global defaults are `--presence` / `--join-leave`); members
//! are known by their `crate::conn_id::ConnId`.
//!
//! Who holds what: a worker knows its own members and reports their joins and leaves to the
//! master in one frame per loop turn (`worker/presence.rs`); the master keeps the node's
//! member sets, bounded, and survives a worker's crash, so it says the crashed worker's
//! members left (`master/presence.rs`).

use crate::conn_id::ConnId;

/// Largest `info` claim (its JSON text) a member carries; a token with a larger one is
/// refused (401), so presence never holds a truncated value.
pub const MAX_INFO: usize = 1024;

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
    fn events_are_json() {
        let id = ConnId {
            worker: 0,
            token: 1,
        };
        let j = event_json("room", Some("a\"n"), id, Some("{\"n\":1}"));
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["user"], "a\"n");
        assert_eq!(v["conn"], id.to_string());
        assert_eq!(v["info"]["n"], 1);
        let anon: serde_json::Value =
            serde_json::from_str(&event_json("r", None, id, None)).unwrap();
        assert!(anon["user"].is_null() && anon.get("info").is_none());
        let ws: serde_json::Value = serde_json::from_str(&ws_envelope(false, &j)).unwrap();
        assert_eq!(ws["type"], "leave");
        assert_eq!(ws["channel"], "room");
    }
}
