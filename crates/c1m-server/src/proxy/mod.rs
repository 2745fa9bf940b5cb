//! Backend proxies: synchronous questions to the application's backend, one HTTP POST each —
//! `connect` (may this subscriber come in, and who is it), `subscribe` (may it have this
//! channel), `publish` (may this WebSocket client message be published, and as what),
//! `refresh` (does this expiring connection go on). This module owns the wire format (the JSON
//! each kind sends and the answer it reads, docs/PROTOCOL.md "Backend proxies") and the
//! [`pool`] of threads that make the calls; the worker (`worker/proxy.rs`) owns the waiting
//! connections, the refusals and the counters.
//!
//! Must not touch: sockets of clients, the worker's tables. A call carries its JSON body
//! (built by the worker when a thread is free for it) and comes back as a [`Done`]; nothing
//! else crosses.

pub mod pool;

use base64::Engine;
use std::time::Instant;

/// Largest answer body read from the backend; a longer one is a failed call.
pub const MAX_ANSWER: usize = 64 * 1024;

/// The four questions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Connect,
    Subscribe,
    Publish,
    Refresh,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Connect => "connect",
            Kind::Subscribe => "subscribe",
            Kind::Publish => "publish",
            Kind::Refresh => "refresh",
        }
    }
}

/// What the backend said, or why it said nothing usable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `{"result": {…}}`: go on, with what the result set.
    Allow(Allow),
    /// `{"error": {"message": …}}`: refused, with the backend's reason.
    Deny(String),
    /// No answer within `proxy_timeout` (the wait in the worker's queue included).
    Timeout,
    /// Connection refused or reset, a non-2xx status, or an answer that is not the documented
    /// JSON: what went wrong.
    Failed(String),
}

/// The fields a `result` may set (each kind reads the ones it documents).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    /// connect: the connection's user id.
    pub user: Option<String>,
    /// connect: channels to subscribe besides the ones asked for.
    pub channels: Vec<String>,
    /// connect: what presence shows about the member (JSON text).
    pub info: Option<String>,
    /// connect, refresh: when the connection ends, Unix seconds.
    pub expire_at: Option<u64>,
    /// refresh: end the connection now.
    pub expired: bool,
    /// publish: the data to publish instead of the client's.
    pub data: Option<Vec<u8>>,
}

/// One call for the pool: where, what, until when, and what comes back with the answer.
pub struct Call {
    pub kind: Kind,
    /// The connection's token: the answer finds its connection by it (a stale one is dropped).
    pub token: u64,
    pub url: String,
    pub body: Vec<u8>,
    pub deadline: Instant,
    /// When the worker asked for it (the latency histogram's start: the wait for a free
    /// thread is part of the call's time, as it is part of its deadline).
    pub submitted: Instant,
    /// A publish's channel and data, handed back with the answer.
    pub publish: Option<Box<(String, Vec<u8>)>>,
}

/// A call's answer, back in the worker's loop.
pub struct Done {
    pub kind: Kind,
    pub token: u64,
    pub answer: Answer,
    /// From the call handed to the pool to its answer leaving the thread.
    pub micros: u64,
    pub publish: Option<Box<(String, Vec<u8>)>>,
}

/// `--proxy-headers`: header names, comma separated, each a valid HTTP token.
pub fn parse_header_list(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let token = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(format!("{name:?} is not a header name"));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

/// A message's bytes in a request: `data` when they are UTF-8, else `data_b64` (the server
/// API's names for the same thing).
pub fn put_data(obj: &mut serde_json::Map<String, serde_json::Value>, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => obj.insert("data".into(), text.into()),
        Err(_) => obj.insert(
            "data_b64".into(),
            base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .into(),
        ),
    };
}

/// Reads a 2xx answer's body.
pub fn parse_answer(body: &[u8]) -> Answer {
    let v: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Answer::Failed(format!("the answer is not JSON: {e}")),
    };
    if let Some(err) = v.get("error") {
        let message = err
            .get("message")
            .and_then(|m| m.as_str())
            .filter(|m| !m.is_empty())
            .unwrap_or("refused by the backend");
        return Answer::Deny(message.to_string());
    }
    let Some(result) = v.get("result").and_then(|r| r.as_object()) else {
        return Answer::Failed(
            "the answer has neither a \"result\" object nor an \"error\"".to_string(),
        );
    };
    match read_result(result) {
        Ok(allow) => Answer::Allow(allow),
        Err(why) => Answer::Failed(why),
    }
}

fn read_result(r: &serde_json::Map<String, serde_json::Value>) -> Result<Allow, String> {
    let mut out = Allow::default();
    let string = |key: &str| -> Result<Option<String>, String> {
        match r.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("result.{key} must be a string")),
        }
    };
    out.user = string("user")?.filter(|u| !u.is_empty());
    if let Some(channels) = r.get("channels").filter(|c| !c.is_null()) {
        let list = channels
            .as_array()
            .ok_or("result.channels must be an array of channel names")?;
        for c in list {
            let name = c
                .as_str()
                .ok_or("result.channels must be an array of channel names")?;
            if !c1m_proto::channel::is_valid_name(name) {
                return Err(c1m_proto::channel::ChannelError::BadName(
                    name.chars().take(100).collect(),
                )
                .to_string());
            }
            if !out.channels.iter().any(|have| have == name) {
                out.channels.push(name.to_string());
            }
        }
    }
    out.info = r
        .get("info")
        .filter(|i| !i.is_null())
        .map(|i| i.to_string());
    out.expire_at = match r.get("expire_at") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or("result.expire_at must be Unix seconds (a whole number)")?,
        ),
    };
    out.expired = match r.get("expired") {
        None | Some(serde_json::Value::Null) => false,
        Some(v) => v.as_bool().ok_or("result.expired must be true or false")?,
    };
    out.data = match (string("data")?, string("data_b64")?) {
        (Some(d), None) => Some(d.into_bytes()),
        (None, Some(b)) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(b.as_bytes())
                .map_err(|e| format!("result.data_b64 is not base64: {e}"))?,
        ),
        (None, None) => None,
        (Some(_), Some(_)) => return Err("result has both data and data_b64".to_string()),
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_documented() {
        let allow = parse_answer(
            br#"{"result":{"user":"u1","channels":["a","b","a"],"info":{"n":1},"expire_at":1700000000}}"#,
        );
        let Answer::Allow(a) = allow else {
            panic!("{allow:?}")
        };
        assert_eq!(a.user.as_deref(), Some("u1"));
        assert_eq!(a.channels, ["a", "b"], "duplicates dropped");
        assert_eq!(a.info.as_deref(), Some(r#"{"n":1}"#));
        assert_eq!(a.expire_at, Some(1_700_000_000));
        assert_eq!(
            parse_answer(br#"{"result":{}}"#),
            Answer::Allow(Allow::default())
        );
        assert_eq!(
            parse_answer(br#"{"error":{"message":"banned"}}"#),
            Answer::Deny("banned".into())
        );
        assert_eq!(
            parse_answer(br#"{"error":{}}"#),
            Answer::Deny("refused by the backend".into())
        );
        let Answer::Allow(p) = parse_answer(br#"{"result":{"data_b64":"AAE="}}"#) else {
            panic!()
        };
        assert_eq!(p.data, Some(vec![0, 1]));
        for bad in [
            &b"nope"[..],
            br#"{}"#,
            br#"{"result":[]}"#,
            br#"{"result":{"user":5}}"#,
            br#"{"result":{"channels":"a"}}"#,
            br#"{"result":{"channels":["bad name"]}}"#,
            br#"{"result":{"expire_at":-1}}"#,
            br#"{"result":{"expired":"yes"}}"#,
            br#"{"result":{"data":"a","data_b64":"YQ=="}}"#,
        ] {
            assert!(
                matches!(parse_answer(bad), Answer::Failed(_)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn header_lists_and_data() {
        assert_eq!(
            parse_header_list(" Cookie, Authorization ,,X-Id").unwrap(),
            ["Cookie", "Authorization", "X-Id"]
        );
        assert!(parse_header_list("Cookie,Bad Name").is_err());
        let mut obj = serde_json::Map::new();
        put_data(&mut obj, b"hi");
        put_data(&mut obj, &[0xff]);
        assert_eq!(obj["data"], "hi");
        assert_eq!(obj["data_b64"], "/w==");
    }
}
