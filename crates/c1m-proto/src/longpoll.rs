//! Long-poll response bodies: `{"messages":[…],"gaps":[…],"last_id":N}`.

use serde_json::json;

/// One message in a long-poll answer.
pub struct PollMessage<'a> {
    pub channel: &'a str,
    pub id: u64,
    pub payload: &'a [u8],
}

/// One gap in a long-poll answer: ids in `(after, through]` on `channel` are lost.
pub struct PollGap<'a> {
    pub channel: &'a str,
    pub after: u64,
    pub through: u64,
}

/// Encodes the JSON body. `last_id` is what the client sends back as `?last_id=` next time.
/// Payloads that are not UTF-8 carry U+FFFD replacements (JSON strings are text).
pub fn encode_body(messages: &[PollMessage<'_>], gaps: &[PollGap<'_>], last_id: u64) -> Vec<u8> {
    let messages: Vec<_> = messages
        .iter()
        .map(|m| json!({"channel": m.channel, "id": m.id, "data": String::from_utf8_lossy(m.payload)}))
        .collect();
    let gaps: Vec<_> = gaps
        .iter()
        .map(|g| json!({"channel": g.channel, "after": g.after, "through": g.through}))
        .collect();
    serde_json::to_vec(&json!({"messages": messages, "gaps": gaps, "last_id": last_id}))
        .expect("serializing a json! value cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body() {
        let body = encode_body(
            &[PollMessage {
                channel: "a",
                id: 3,
                payload: b"x\"y",
            }],
            &[PollGap {
                channel: "a",
                after: 1,
                through: 2,
            }],
            3,
        );
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["messages"][0]["data"], "x\"y");
        assert_eq!(v["gaps"][0]["through"], 2);
        assert_eq!(v["last_id"], 3);
    }
}
