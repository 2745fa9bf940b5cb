//! The data model under Redis Cluster (`redis+cluster://`). Redis Cluster refuses a script
//! whose keys span hash slots, so there is no cluster-wide counter: every key of a channel
//! carries the hash tag `{CH}` and one script on the channel's shard does a publish atomically.
//!
//! Keys: `c1m:{CH}:h` the history stream (entry id = message id, as in one Redis),
//! `c1m:{CH}:m` the channel's meta hash (`last` newest id, `forgot` highest id trimmed from
//! history, `start` the first id of this copy of the channel), `c1m:{CH}:k:KEY` an idempotency
//! key. Sharded pub/sub channel `c1m:{CH}:p` carries `ID\nPAYLOAD` (`SPUBLISH`).
//!
//! Ids are per channel: `id = max(TIME in µs, last + 1)`, so they increase strictly on a
//! channel, and a channel whose keys were lost restarts at the wall clock, above every id it
//! issued (the epoch rule of one Redis, per channel; needs the shards' clocks NTP-synced).
//! The answers have the shapes of the one-Redis scripts (`script::decode_*`), one channel each.

use super::script::PRELUDE;

/// KEYS: stream, meta, idempotency key (optional). ARGV: sharded pub/sub channel, payload,
/// max count, max age ms, idempotency TTL ms. Returns {id, 1 if the key was already used (the
/// first publish's id, nothing stored) else 0}.
const PUBLISH_BODY: &str = r#"
local h, m = KEYS[1], KEYS[2]
if KEYS[3] then
  local first = redis.call('GET', KEYS[3])
  if first then return {first, 1} end
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local last = tonumber(redis.call('HGET', m, 'last') or '0')
local start = tonumber(redis.call('HGET', m, 'start') or '0')
local id = now_us
if last + 1 > id then id = last + 1 end
id = string.format('%.0f', id)
redis.call('HSETNX', m, 'start', id)
-- (A meta made by a replay before any publish has last below start: nothing was lost.)
if last > 0 and last >= start and redis.call('EXISTS', h) == 0 then
  -- The stream expired as a whole (idle past the age bound): all before it is forgotten.
  redis.call('HSET', m, 'forgot', string.format('%.0f', last))
end
redis.call('XADD', h, id .. '-0', 'p', ARGV[2], 't', now)
local dropped = trim_count(h, tonumber(ARGV[3]))
if dropped then redis.call('HSET', m, 'forgot', dropped) end
dropped = trim_age(h, now - tonumber(ARGV[4]))
if dropped then redis.call('HSET', m, 'forgot', dropped) end
redis.call('HSET', m, 'last', id)
redis.call('PEXPIRE', h, ARGV[4])
redis.call('SPUBLISH', ARGV[1], id .. '\n' .. ARGV[2])
if KEYS[3] then redis.call('SET', KEYS[3], id, 'PX', ARGV[5]) end
return {id, 0}
"#;

/// KEYS: stream, meta. ARGV: after ('' = none), most entries, max age ms. Returns the one-Redis
/// replay answer for one channel: {newest id, forgotten-through (0: nothing lost), the
/// channel's start, {id, payload, …}}. A channel without meta (never published, or its shard
/// lost it) gets one now, starting at the wall clock: later ids are above it, and a resume from
/// an id before it is told the gap (`gap_through`, the one gap rule).
const REPLAY_BODY: &str = r#"
local h, m = KEYS[1], KEYS[2]
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if redis.call('EXISTS', m) == 0 then
  redis.call('HSET', m, 'last', string.format('%.0f', now_us - 1),
    'start', string.format('%.0f', now_us))
end
local dropped = trim_age(h, math.floor(now_us / 1000) - tonumber(ARGV[3]))
if dropped then redis.call('HSET', m, 'forgot', dropped) end
local last = redis.call('HGET', m, 'last')
local start = tonumber(redis.call('HGET', m, 'start') or '1')
local forgot = tonumber(redis.call('HGET', m, 'forgot') or '0')
-- A stream gone as a whole lost everything up to the newest id, if one was ever published.
if redis.call('EXISTS', h) == 0 and tonumber(last) >= start then forgot = tonumber(last) end
local flat = {}
if ARGV[1] ~= '' then flat = read_after(h, ARGV[1], ARGV[2]) end
return {last, string.format('%.0f', forgot), string.format('%.0f', start), flat}
"#;

pub fn publish_script() -> String {
    format!("{PRELUDE}{PUBLISH_BODY}")
}

pub fn replay_script() -> String {
    format!("{PRELUDE}{REPLAY_BODY}")
}

pub fn stream_key(channel: &str) -> String {
    format!("c1m:{{{channel}}}:h")
}

pub fn meta_key(channel: &str) -> String {
    format!("c1m:{{{channel}}}:m")
}

/// The idempotency key of `key` on `channel`.
pub fn idempotency_key(channel: &str, key: &str) -> String {
    format!("c1m:{{{channel}}}:k:{key}")
}

/// The sharded pub/sub channel carrying `channel`'s messages.
pub fn pubsub_name(channel: &str) -> String {
    format!("c1m:{{{channel}}}:p")
}

/// The channel of a sharded pub/sub name, if it is one of ours.
pub fn channel_of(name: &[u8]) -> Option<&str> {
    let inner = name.strip_prefix(b"c1m:{")?.strip_suffix(b"}:p")?;
    std::str::from_utf8(inner).ok()
}

/// The key that routes presence scripts (every presence key shares its slot).
pub fn presence_key() -> String {
    format!("{}nodes", super::script::presence_prefix(true))
}

#[cfg(test)]
mod tests {
    use super::super::slots::key_slot;
    use super::*;

    #[test]
    fn every_key_of_a_channel_shares_its_slot() {
        let ch = "news.eu";
        let slot = key_slot(stream_key(ch).as_bytes());
        for key in [meta_key(ch), idempotency_key(ch, "k{x}"), pubsub_name(ch)] {
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
        assert_eq!(channel_of(pubsub_name(ch).as_bytes()), Some(ch));
        assert_eq!(channel_of(b"c1m:0:p:news"), None);
        assert_eq!(
            key_slot(presence_key().as_bytes()),
            key_slot(b"c1m:{presence}:subs:node-1")
        );
    }
}
