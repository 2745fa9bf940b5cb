//! The `Idempotency-Key` publish header: which keys are accepted. A
//! publish retried with the same key on the same channel is answered with the first one's id
//! and stored once (docs/PROTOCOL.md, "Publishing exactly once").

/// Longest key accepted, in bytes (room for a UUID or a producer's own `order-123:attempt`).
pub const MAX_KEY_LEN: usize = 200;

/// The rule, as the 400 answer states it.
pub const KEY_RULE: &str = "Idempotency-Key must be 1 to 200 visible ASCII characters";

/// 1 to [`MAX_KEY_LEN`] visible ASCII characters (no spaces or controls: the key is part of
/// a Redis key name and of log lines).
pub fn is_valid_key(key: &str) -> bool {
    (1..=MAX_KEY_LEN).contains(&key.len()) && key.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(is_valid_key("550e8400-e29b-41d4-a716-446655440000"));
        assert!(is_valid_key(&"k".repeat(MAX_KEY_LEN)));
        assert!(!is_valid_key(""));
        assert!(!is_valid_key(&"k".repeat(MAX_KEY_LEN + 1)));
        assert!(!is_valid_key("a b"));
        assert!(!is_valid_key("a\tb"));
        assert!(!is_valid_key("é"));
    }
}
