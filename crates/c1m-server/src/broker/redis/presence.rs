//! Presence in Redis (one Redis; under Redis Cluster presence stays per node, see
//! docs/PROTOCOL.md): the cluster's member sets and the join/leave events between nodes.
//!
//! Data model: `c1m:pr:m:{channel}`, a hash `node/conn → member JSON` ('' for an anonymous
//! member: counted, not listed); `c1m:pr:n:{node}`, each node's member count per channel (what
//! to clean when the node dies); `c1m:pr:nodes`, the nodes that hold members; and
//! `c1m:pr:alive:{node}`, a key with a TTL ([`ALIVE_TTL_MS`]) each node refreshes every tick
//! (about a second). A node whose key expired is dead: the first live node to run [`REAP`]
//! after that deletes its members and publishes their leaves, atomically, so exactly one
//! node reaps it. A dead node's members therefore leave within `ALIVE_TTL_MS` + a tick + the
//! pub/sub hop: under [`LEAVE_BOUND`].
//!
//! Events travel on the channel's own pub/sub name (the one its messages use, so only nodes
//! with subscribers on the channel get them), as `J\n{node}\n{json}` or `L\n{node}\n{json}`; a
//! message is `{id}\n{payload}` with a numeric id, so the two cannot be confused. A node
//! delivers its own events directly and skips their echo.

/// How long a node's members outlive its last refresh.
pub const ALIVE_TTL_MS: u64 = 5000;
/// The stated bound: a dead node's members have left (on every live node) within this.
#[allow(dead_code)] // the bound documented and tested; the code's parts are the TTL and tick
pub const LEAVE_BOUND: std::time::Duration = std::time::Duration::from_secs(10);
/// Most member changes in one script call (its arguments stay far below Redis' limits).
pub const OPS_PER_CALL: usize = 2000;

/// Apply member changes and refresh this node. ARGV: node, ttl ms, db, then (op, channel,
/// conn, value) fours. Ops: `J` add and publish a join, `Q` add quietly (a live upgrade, a
/// resync), `L` remove and publish a leave, `D` remove quietly (an anonymous member).
pub const APPLY: &str = r#"
local node = ARGV[1]
redis.call('SET', 'c1m:pr:alive:' .. node, '1', 'PX', ARGV[2])
redis.call('SADD', 'c1m:pr:nodes', node)
local counts = 'c1m:pr:n:' .. node
for i = 4, #ARGV, 4 do
  local op, ch, conn, value = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = 'c1m:pr:m:' .. ch
  local field = node .. '/' .. conn
  if op == 'J' or op == 'Q' then
    if redis.call('HSET', key, field, value) == 1 then
      redis.call('HINCRBY', counts, ch, 1)
    end
  elseif redis.call('HDEL', key, field) == 1 then
    if redis.call('HINCRBY', counts, ch, -1) <= 0 then redis.call('HDEL', counts, ch) end
  end
  if (op == 'J' or op == 'L') and value ~= '' then
    redis.call('PUBLISH', 'c1m:' .. ARGV[3] .. ':p:' .. ch, op .. '\n' .. node .. '\n' .. value)
  end
end
return 1
"#;

/// Reap dead nodes. ARGV: this node, db. Returns {channel, leave JSON, ...}: the leaves this
/// node delivers itself (the others get them from pub/sub).
pub const REAP: &str = r#"
local out = {}
for _, node in ipairs(redis.call('SMEMBERS', 'c1m:pr:nodes')) do
  if redis.call('EXISTS', 'c1m:pr:alive:' .. node) == 0 then
    local prefix = node .. '/'
    for _, ch in ipairs(redis.call('HKEYS', 'c1m:pr:n:' .. node)) do
      local key = 'c1m:pr:m:' .. ch
      local all = redis.call('HGETALL', key)
      for i = 1, #all, 2 do
        if string.sub(all[i], 1, #prefix) == prefix then
          redis.call('HDEL', key, all[i])
          if all[i + 1] ~= '' then
            redis.call('PUBLISH', 'c1m:' .. ARGV[2] .. ':p:' .. ch, 'L\n' .. ARGV[1] .. '\n' .. all[i + 1])
            table.insert(out, ch)
            table.insert(out, all[i + 1])
          end
        end
      end
    end
    redis.call('DEL', 'c1m:pr:n:' .. node)
    redis.call('SREM', 'c1m:pr:nodes', node)
  end
end
return out
"#;

/// A channel's members over the cluster. ARGV: channel. Returns {field, value, ...}.
pub const QUERY: &str = r#"
return redis.call('HGETALL', 'c1m:pr:m:' .. ARGV[1])
"#;

/// A pub/sub payload that is a presence event: (join, sending node, JSON).
pub fn split_event(data: &[u8]) -> Option<(bool, &str, &str)> {
    let join = match data.get(..2)? {
        b"J\n" => true,
        b"L\n" => false,
        _ => return None,
    };
    let rest = std::str::from_utf8(&data[2..]).ok()?;
    let (node, json) = rest.split_once('\n')?;
    Some((join, node, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_told_from_messages() {
        assert_eq!(
            split_event(b"J\n12-34\n{\"user\":\"a\"}"),
            Some((true, "12-34", "{\"user\":\"a\"}"))
        );
        assert_eq!(split_event(b"L\nn\n{}"), Some((false, "n", "{}")));
        assert_eq!(split_event(b"17\npayload"), None);
        assert_eq!(split_event(b"J\nno-json-line"), None);
    }
}
