//! The Lua scripts that make Redis the cluster's hub, and the decoding of their answers.
//! Each runs atomically inside Redis, which is what gives every node one order per channel:
//! the id is taken (`INCR`, raised to the wall clock in µs when that is higher, so ids never
//! go back across a failover to a replica that missed the newest ones), the message stored (`XADD` to the channel's stream, entry id =
//! message id) and announced (`PUBLISH`) in one step, so pub/sub order, stream order and id
//! order are the same.
//!
//! Keys (all under `c1m:`, in the URL's database): `id` the one counter, `start` the first id
//! of this data set (its epoch: a Redis that lost its data starts a new one at the wall clock
//! in µs, above every id it handed out before), `h:CH` a channel's history stream, hashes
//! `forgot` (CH → highest id trimmed from history) and `last` (CH → newest id, for when the
//! stream expired as a whole). Pub/sub channel `c1m:DB:p:CH` carries `ID\nPAYLOAD` (pub/sub
//! ignores the database number, so it is part of the name).

use crate::broker::Replay;
use crate::broker::{gap_through, ReplayChunk};
use redis::Value;

/// Shared by the scripts of both modes (one Redis, `cluster_script`): the epoch on first touch
/// (one Redis only), trimming a channel's stream by count and by age (each returning the
/// highest id dropped, for the caller to record as forgotten), reading entries after an id.
pub(super) const PRELUDE: &str = r#"
local function init(start)
  if redis.call('EXISTS', 'c1m:id') == 0 then
    redis.call('SET', 'c1m:id', string.format('%.0f', tonumber(start) - 1))
    redis.call('SET', 'c1m:start', start)
  end
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Keeps the newest `maxc` entries of stream `key`; returns the highest id dropped (nil: none).
local function trim_count(key, maxc)
  local n = redis.call('XLEN', key)
  if n <= maxc then return nil end
  local old = redis.call('XRANGE', key, '-', '+', 'COUNT', n - maxc)
  redis.call('XTRIM', key, 'MAXLEN', maxc)
  return string.sub(old[#old][1], 1, -3)
end
-- {id, payload, ...} of stream `key`'s entries after id `after`, at most `count`.
local function read_after(key, after, count)
  local flat = {}
  local entries = redis.call('XRANGE', key, '(' .. after .. '-0', '+', 'COUNT', count)
  for _, e in ipairs(entries) do
    local fields = e[2]
    for j = 1, #fields, 2 do
      if fields[j] == 'p' then
        table.insert(flat, string.sub(e[1], 1, -3))
        table.insert(flat, fields[j + 1])
      end
    end
  end
  return flat
end
-- Returns the highest id dropped (nil: none); the caller records it as forgotten.
local function trim_age(key, cutoff)
  -- Looks at the oldest entry only: in a steady state at most one leaves per publish.
  local dropped = nil
  for _ = 1, 1000 do
    local front = redis.call('XRANGE', key, '-', '+', 'COUNT', 1)
    if #front == 0 then break end
    local fields = front[1][2]
    local t = nil
    for i = 1, #fields, 2 do
      if fields[i] == 't' then t = tonumber(fields[i + 1]) end
    end
    if t == nil or t >= cutoff then break end
    redis.call('XDEL', key, front[1][1])
    dropped = front[1][1]
  end
  if dropped ~= nil then return string.sub(dropped, 1, -3) end
  return nil
end
"#;

/// ARGV: channel, payload, max count, max age ms, start (µs, used only on first touch), db,
/// idempotency key ('' = none), its TTL in ms. Returns {message id, 1 if the key had already
/// been used on this channel (nothing stored: the id is the first publish's) else 0}. The key
/// is `c1m:k:LEN:CH:KEY` (the channel's length first, so no two (channel, key) pairs collide),
/// set in the same atomic step as the message, so a publish is stored exactly when its key is.
const PUBLISH_BODY: &str = r#"
local ch = ARGV[1]
init(ARGV[5])
local ikey = nil
if ARGV[7] ~= '' then
  ikey = 'c1m:k:' .. string.len(ch) .. ':' .. ch .. ':' .. ARGV[7]
  local first = redis.call('GET', ikey)
  if first then return {first, 1} end
end
-- max(previous + 1, now in µs): a replica promoted before the newest INCRs reached it
-- (Sentinel failover) goes on above the ids the old master handed out, never reusing one.
local id = tonumber(redis.call('INCR', 'c1m:id'))
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now_us > id then
  id = now_us
  redis.call('SET', 'c1m:id', string.format('%.0f', id))
end
id = string.format('%.0f', id)
local now = now_ms()
local key = 'c1m:h:' .. ch
if redis.call('EXISTS', key) == 0 then
  -- The stream expired as a whole (idle past the age bound): all before it is forgotten.
  local last = redis.call('HGET', 'c1m:last', ch)
  if last then redis.call('HSET', 'c1m:forgot', ch, last) end
end
redis.call('XADD', key, id .. '-0', 'p', ARGV[2], 't', now)
local dropped = trim_count(key, tonumber(ARGV[3]))
if dropped then redis.call('HSET', 'c1m:forgot', ch, dropped) end
dropped = trim_age(key, now - tonumber(ARGV[4]))
if dropped then redis.call('HSET', 'c1m:forgot', ch, dropped) end
redis.call('HSET', 'c1m:last', ch, id)
redis.call('PEXPIRE', key, ARGV[4])
redis.call('PUBLISH', 'c1m:' .. ARGV[6] .. ':p:' .. ch, id .. '\n' .. ARGV[2])
if ikey then redis.call('SET', ikey, id, 'PX', ARGV[8]) end
return {id, 0}
"#;

/// ARGV: after ('' = none), most entries per channel, max age ms, start, then the channels.
/// Returns {current id, then per channel: forgotten-through (0: nothing lost), the epoch start,
/// {id, payload, ...}}.
const REPLAY_BODY: &str = r#"
init(ARGV[4])
local start = redis.call('GET', 'c1m:start')
local out = {redis.call('GET', 'c1m:id')}
local cutoff = now_ms() - tonumber(ARGV[3])
for i = 5, #ARGV do
  local ch = ARGV[i]
  local key = 'c1m:h:' .. ch
  local dropped = trim_age(key, cutoff)
  if dropped then redis.call('HSET', 'c1m:forgot', ch, dropped) end
  local forgot
  if redis.call('EXISTS', key) == 1 then
    forgot = redis.call('HGET', 'c1m:forgot', ch)
  else
    forgot = redis.call('HGET', 'c1m:last', ch)
  end
  table.insert(out, forgot or '0')
  table.insert(out, start)
  local flat = {}
  if ARGV[1] ~= '' then flat = read_after(key, ARGV[1], ARGV[2]) end
  table.insert(out, flat)
end
return out
"#;

/// Presence: this node's subscriber counts. ARGV: node id, ttl ms, then (channel, count)
/// pairs (count 0 removes). The node's hash lives `ttl` after its last report, so a node that
/// died stops counting within it. `@` is the key prefix (see [`presence_script`]).
const PRESENCE: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local key = '@subs:' .. ARGV[1]
for i = 3, #ARGV, 2 do
  if ARGV[i + 1] == '0' then
    redis.call('HDEL', key, ARGV[i])
  else
    redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  end
end
redis.call('PEXPIRE', key, ARGV[2])
redis.call('ZADD', '@nodes', now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', '@nodes', '-inf', now - tonumber(ARGV[2]))
return 1
"#;

/// Channel info. ARGV: this node's id, ttl ms, channel. Returns {subscribers on the other
/// live nodes, live nodes (this one included), newest id or ''}; `LAST` is how the newest id
/// is read (see [`info_script`]).
const INFO: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nodes = redis.call('ZRANGEBYSCORE', '@nodes', now - tonumber(ARGV[2]), '+inf')
local sum = 0
local live = 1
for _, n in ipairs(nodes) do
  if n ~= ARGV[1] then
    live = live + 1
    sum = sum + tonumber(redis.call('HGET', '@subs:' .. n, ARGV[3]) or '0')
  end
end
return {sum, live, LAST}
"#;

/// Where presence lives: `c1m:` in one Redis; under Redis Cluster every presence key shares
/// the hash tag `{presence}`, so both scripts run on one shard.
pub fn presence_prefix(cluster: bool) -> &'static str {
    if cluster {
        "c1m:{presence}:"
    } else {
        "c1m:"
    }
}

pub fn presence_script(cluster: bool) -> String {
    PRESENCE.replace('@', presence_prefix(cluster))
}

/// In one Redis the newest id comes from the same script; under Redis Cluster it is on the
/// channel's own shard (a second call, `cluster_script::LAST`), so this script answers ''.
pub fn info_script(cluster: bool) -> String {
    let last = if cluster {
        "''"
    } else {
        "redis.call('HGET', 'c1m:last', ARGV[3]) or ''"
    };
    INFO.replace('@', presence_prefix(cluster))
        .replace("LAST", last)
}

pub fn publish_script() -> String {
    format!("{PRELUDE}{PUBLISH_BODY}")
}

pub fn replay_script() -> String {
    format!("{PRELUDE}{REPLAY_BODY}")
}

/// The pub/sub channel name carrying `channel`'s messages.
pub fn pubsub_name(db: i64, channel: &str) -> String {
    format!("c1m:{db}:p:{channel}")
}

/// The pub/sub name of the server API's control messages (acts on users, questions to every
/// node and their answers): not a channel's name (those carry `:p:`).
pub fn control_name(db: i64) -> String {
    format!("c1m:{db}:control")
}

/// The channel of a pub/sub name, if it is one of ours.
pub fn channel_of(db: i64, name: &[u8]) -> Option<&str> {
    let prefix = format!("c1m:{db}:p:");
    let rest = name.strip_prefix(prefix.as_bytes())?;
    std::str::from_utf8(rest).ok()
}

/// `ID\nPAYLOAD` from pub/sub.
pub fn split_message(data: &[u8]) -> Option<(u64, &[u8])> {
    let nl = data.iter().position(|&b| b == b'\n')?;
    let id = std::str::from_utf8(&data[..nl]).ok()?.parse().ok()?;
    Some((id, &data[nl + 1..]))
}

/// The publish script's answer: (id, whether it repeated an idempotency key).
pub fn decode_published(v: &Value) -> Option<(u64, bool)> {
    match v {
        Value::Array(parts) if parts.len() == 2 => {
            Some((as_u64(&parts[0])?, as_u64(&parts[1])? == 1))
        }
        _ => None,
    }
}

pub fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// One channel in a replay answer: the highest id history had and no longer holds (0: none),
/// the first id of its history (the data set's epoch; under Redis Cluster the channel's), and
/// the (id, payload) entries after `after`.
pub type FoundChannel = (u64, u64, Vec<(u64, Vec<u8>)>);

/// What a replay script found: the counter, and per channel (in the order asked) what
/// [`FoundChannel`] says.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    pub current: u64,
    pub channels: Vec<FoundChannel>,
}

pub fn decode_found(v: Value, count: usize) -> Option<Found> {
    let Value::Array(items) = v else {
        return None;
    };
    let mut it = items.into_iter();
    let current = as_u64(&it.next()?)?;
    let mut channels = Vec::with_capacity(count);
    for _ in 0..count {
        let forgot = as_u64(&it.next()?)?;
        let start = as_u64(&it.next()?)?;
        let Value::Array(flat) = it.next()? else {
            return None;
        };
        let mut entries = Vec::with_capacity(flat.len() / 2);
        let mut f = flat.into_iter();
        while let (Some(id), Some(payload)) = (f.next(), f.next()) {
            let Value::BulkString(payload) = payload else {
                return None;
            };
            entries.push((as_u64(&id)?, payload));
        }
        channels.push((forgot, start, entries));
    }
    Some(Found { current, channels })
}

/// The same answer the in-process hub gives (see `MemoryHub::replay`): gaps first, then the
/// messages of all channels in id order up to `budget` payload bytes. `cap` is how many entries
/// per channel the script returned at most: a channel that hit it may hold more, so nothing
/// past its last entry is sent in this chunk (the next chunk starts there).
pub fn to_chunk(
    found: Found,
    names: &[String],
    after: u64,
    budget: usize,
    cap: usize,
) -> ReplayChunk {
    let mut items = Vec::new();
    let mut messages = Vec::new();
    let mut cutoff = u64::MAX;
    for (name, (forgot, start, entries)) in names.iter().zip(found.channels) {
        if let Some(through) = gap_through(after, forgot, start, found.current) {
            items.push(Replay::Gap {
                channel: name.clone(),
                after,
                through,
            });
        }
        if entries.len() >= cap {
            cutoff = cutoff.min(entries.last().map_or(u64::MAX, |e| e.0));
        }
        messages.extend(entries.into_iter().map(|(id, p)| (id, name, p)));
    }
    messages.sort_unstable_by_key(|m| m.0);
    let total = messages.len();
    let (mut spent, mut taken) = (0, 0);
    for (id, channel, payload) in messages {
        if id > cutoff || (taken > 0 && spent + payload.len() > budget) {
            break;
        }
        spent += payload.len();
        taken += 1;
        items.push(Replay::Message {
            channel: channel.clone(),
            id,
            payload,
        });
    }
    ReplayChunk {
        items,
        more: taken < total || cutoff != u64::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (forgotten-through, entries) of one channel, all channels of one epoch `start`.
    type Lost = (u64, Vec<(u64, Vec<u8>)>);

    fn found(current: u64, start: u64, channels: Vec<Lost>) -> Found {
        Found {
            current,
            channels: channels
                .into_iter()
                .map(|(forgot, entries)| (forgot, start, entries))
                .collect(),
        }
    }

    fn ids(chunk: &ReplayChunk) -> Vec<u64> {
        chunk
            .items
            .iter()
            .filter_map(|r| match r {
                Replay::Message { id, .. } => Some(*id),
                Replay::Gap { .. } => None,
            })
            .collect()
    }

    #[test]
    fn gaps_for_trimmed_history_and_a_new_epoch() {
        let names = ["a".to_string()];
        // History trimmed through 105: a resume from 100 is told (100, 105].
        let f = found(110, 50, vec![(105, vec![(106, b"x".to_vec())])]);
        let chunk = to_chunk(f, &names, 100, usize::MAX, 1000);
        assert_eq!(
            chunk.items[0],
            Replay::Gap {
                channel: "a".into(),
                after: 100,
                through: 105
            }
        );
        assert_eq!(ids(&chunk), vec![106]);
        // A data set that started at 500 (Redis lost its data): ids below it are a gap.
        let f = found(510, 500, vec![(0, vec![])]);
        let chunk = to_chunk(f, &names, 120, usize::MAX, 1000);
        assert_eq!(
            chunk.items,
            vec![Replay::Gap {
                channel: "a".into(),
                after: 120,
                through: 499
            }]
        );
        // A resume from 0 ("from the beginning") in that data set lost nothing: no gap.
        let f = found(510, 500, vec![(0, vec![(505, b"y".to_vec())])]);
        let chunk = to_chunk(f, &names, 0, usize::MAX, 1000);
        assert_eq!(ids(&chunk), vec![505]);
        assert_eq!(chunk.items.len(), 1);
        // Nothing lost: no gap.
        let f = found(510, 500, vec![(0, vec![(505, b"y".to_vec())])]);
        let chunk = to_chunk(f, &names, 501, usize::MAX, 1000);
        assert_eq!(ids(&chunk), vec![505]);
        assert!(!chunk.more);
        // An id the data set never issued.
        let f = found(510, 500, vec![(0, vec![])]);
        let chunk = to_chunk(f, &names, 900, usize::MAX, 1000);
        assert!(matches!(chunk.items[0], Replay::Gap { through: 510, .. }));
    }

    #[test]
    fn a_channel_at_its_cap_cuts_the_chunk_so_nothing_is_skipped() {
        let names = ["a".to_string(), "b".to_string()];
        // "a" returned its cap of 2 entries (it may hold more after 3); "b" returned all.
        let f = found(
            20,
            1,
            vec![
                (0, vec![(2, b"a".to_vec()), (3, b"a".to_vec())]),
                (0, vec![(1, b"b".to_vec()), (9, b"b".to_vec())]),
            ],
        );
        let chunk = to_chunk(f, &names, 0, usize::MAX, 2);
        // 9 would skip a's entries between 3 and 9: the chunk stops at 3 and says more.
        assert_eq!(ids(&chunk), vec![1, 2, 3]);
        assert!(chunk.more);
        // The byte budget also cuts (at least one message always goes).
        let f = found(20, 1, vec![(0, vec![(2, vec![0; 10]), (3, vec![0; 10])])]);
        let chunk = to_chunk(f, &names[..1], 0, 5, 1000);
        assert_eq!(ids(&chunk), vec![2]);
        assert!(chunk.more);
    }

    #[test]
    fn pubsub_names_and_messages_round_trip() {
        let name = pubsub_name(3, "news.eu");
        assert_eq!(channel_of(3, name.as_bytes()), Some("news.eu"));
        assert_eq!(channel_of(4, name.as_bytes()), None);
        assert_eq!(
            split_message(b"42\nhello\nworld"),
            Some((42, &b"hello\nworld"[..]))
        );
        assert_eq!(split_message(b"x\nhello"), None);
        assert_eq!(split_message(b"42"), None);
    }
}
