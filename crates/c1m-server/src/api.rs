//! What the worker and the master agree on about the server API (`POST /api/{call}`): the
//! calls there are (also the only values of the `call` label in `/metrics`), the shape of an
//! error answer, and the default body limit. Parsing and carrying out a call is the master's
//! (`master::api`); the worker frames the request and acts on connections (`worker::api`).

/// Every call, in the order the docs list them.
pub const CALLS: [&str; 11] = [
    "publish",
    "broadcast",
    "batch",
    "disconnect",
    "unsubscribe",
    "subscribe",
    "presence",
    "presence_stats",
    "history",
    "channels",
    "info",
];

/// The `call` label for a requested name: itself when it is a call, else `unknown` (a label
/// taken from the path would let any client grow the metrics without bound).
pub fn label(call: &str) -> &'static str {
    CALLS
        .iter()
        .find(|&&c| c == call)
        .copied()
        .unwrap_or("unknown")
}

/// The body of an error answer: `{"error":{"code":N,"message":"..."}}`.
pub fn error_body(code: u16, message: &str) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

/// How long a worker waits for the master's answer to a call before it answers 503 itself; the
/// master counts an answer that comes later as `late`, not `ok` (the client never saw it).
pub const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Default `--api-max-body`: the largest request body a call takes.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// WebSocket close codes of a `disconnect` (4000-4999 is private use; 4001, 4003 and 4008
/// are taken): without and with the advice to reconnect.
pub const WS_KICKED: u16 = 4010;
pub const WS_KICKED_RECONNECT: u16 = 4011;
