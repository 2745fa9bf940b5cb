//! Presence in Redis, the same for one Redis, Sentinel and Redis Cluster: the cluster's member
//! sets and the join/leave events between nodes.
//!
//! Data model (`@` is the key prefix, [`prefix`]: `c1m:pr:` in one Redis, `c1m:{presence}:pr:`
//! under Redis Cluster, where the hash tag keeps every presence key on one shard so the
//! scripts run atomically there): `@m:{channel}`, a hash `node/conn → member JSON` ('' for an
//! anonymous member: counted, not listed); `@n:{node}`, each node's member count per channel
//! (what to clean when the node dies); `@nodes`, the nodes that hold members; and
//! `@alive:{node}`, a key with a TTL ([`ALIVE_TTL_MS`]) each node refreshes every tick (about
//! a second). A node whose key expired is dead: the first live node to run [`REAP`] after that
//! deletes its members and publishes their leaves, atomically, so exactly one node reaps it.
//! A dead node's members therefore leave within `ALIVE_TTL_MS` + a tick + the pub/sub hop:
//! under [`LEAVE_BOUND`].
//!
//! Events travel on one plain pub/sub name per database ([`event_name`]), which every node's
//! control link hears (`pubsub::ControlLink`): plain pub/sub reaches every node of a Redis
//! Cluster and every replica behind Sentinel, where a channel's own (sharded) name would not
//! reach a node subscribed on another shard. A payload is `J\n{node}\n{channel}\n{json}` or
//! `L\n…`; a node delivers its own events directly and skips their echo, and the master hands
//! an event only to workers with subscribers on its channel.

/// How long a node's members outlive its last refresh.
pub const ALIVE_TTL_MS: u64 = 5000;
/// The stated bound: a dead node's members have left (on every live node) within this.
#[allow(dead_code)] // the bound documented and tested; the code's parts are the TTL and tick
pub const LEAVE_BOUND: std::time::Duration = std::time::Duration::from_secs(10);
/// Most member changes in one script call (its arguments stay far below Redis' limits).
pub const OPS_PER_CALL: usize = 2000;

/// Apply member changes and refresh this node. ARGV: node, ttl ms, event name, then (op,
/// channel, conn, value) fours. Ops: `J` add and publish a join, `Q` add quietly (a live upgrade, a
/// resync), `L` remove and publish a leave, `D` remove quietly (an anonymous member).
const APPLY: &str = r#"
local node = ARGV[1]
redis.call('SET', '@alive:' .. node, '1', 'PX', ARGV[2])
redis.call('SADD', '@nodes', node)
local counts = '@n:' .. node
for i = 4, #ARGV, 4 do
  local op, ch, conn, value = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = '@m:' .. ch
  local field = node .. '/' .. conn
  if op == 'J' or op == 'Q' then
    if redis.call('HSET', key, field, value) == 1 then
      redis.call('HINCRBY', counts, ch, 1)
    end
  elseif redis.call('HDEL', key, field) == 1 then
    if redis.call('HINCRBY', counts, ch, -1) <= 0 then redis.call('HDEL', counts, ch) end
  end
  if (op == 'J' or op == 'L') and value ~= '' then
    redis.call('PUBLISH', ARGV[3], op .. '\n' .. node .. '\n' .. ch .. '\n' .. value)
  end
end
return 1
"#;

/// Reap dead nodes. ARGV: this node, event name. Returns {channel, leave JSON, ...}: the leaves this
/// node delivers itself (the others get them from pub/sub).
const REAP: &str = r#"
local out = {}
for _, node in ipairs(redis.call('SMEMBERS', '@nodes')) do
  if redis.call('EXISTS', '@alive:' .. node) == 0 then
    local prefix = node .. '/'
    for _, ch in ipairs(redis.call('HKEYS', '@n:' .. node)) do
      local key = '@m:' .. ch
      local all = redis.call('HGETALL', key)
      for i = 1, #all, 2 do
        if string.sub(all[i], 1, #prefix) == prefix then
          redis.call('HDEL', key, all[i])
          if all[i + 1] ~= '' then
            redis.call('PUBLISH', ARGV[2], 'L\n' .. ARGV[1] .. '\n' .. ch .. '\n' .. all[i + 1])
            table.insert(out, ch)
            table.insert(out, all[i + 1])
          end
        end
      end
    end
    redis.call('DEL', '@n:' .. node)
    redis.call('SREM', '@nodes', node)
  end
end
return out
"#;

/// A channel's members over the cluster. ARGV: channel. Returns {field, value, ...}.
const QUERY: &str = r#"
return redis.call('HGETALL', '@m:' .. ARGV[1])
"#;

/// The key prefix of presence (see the module doc).
pub fn prefix(cluster: bool) -> &'static str {
    if cluster {
        "c1m:{presence}:pr:"
    } else {
        "c1m:pr:"
    }
}

/// The scripts (apply, reap, query) with the mode's key prefix.
pub fn scripts(cluster: bool) -> [String; 3] {
    [APPLY, REAP, QUERY].map(|s| s.replace('@', prefix(cluster)))
}

/// The plain pub/sub name carrying join/leave events between nodes (not a channel's name:
/// those carry `:p:`).
pub fn event_name(db: i64) -> String {
    format!("c1m:{db}:presence")
}

/// An event's payload: (join, sending node, channel, JSON).
pub fn split_event(data: &[u8]) -> Option<(bool, &str, &str, &str)> {
    let join = match data.get(..2)? {
        b"J\n" => true,
        b"L\n" => false,
        _ => return None,
    };
    let rest = std::str::from_utf8(&data[2..]).ok()?;
    let (node, rest) = rest.split_once('\n')?;
    let (channel, json) = rest.split_once('\n')?;
    Some((join, node, channel, json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_node_channel_and_member() {
        assert_eq!(
            split_event(b"J\n12-34\nroom\n{\"user\":\"a\"}"),
            Some((true, "12-34", "room", "{\"user\":\"a\"}"))
        );
        assert_eq!(split_event(b"L\nn\nc\n{}"), Some((false, "n", "c", "{}")));
        assert_eq!(split_event(b"17\npayload"), None);
        assert_eq!(split_event(b"J\nnode\nno-json-line"), None);
    }

    #[test]
    fn under_redis_cluster_every_presence_key_is_on_one_slot() {
        use super::super::slots::key_slot;
        let p = prefix(true);
        let slot = key_slot(super::super::cluster_script::presence_key().as_bytes());
        for key in ["m:room", "n:node-1", "nodes", "alive:node-1"] {
            assert_eq!(key_slot(format!("{p}{key}").as_bytes()), slot, "{key}");
        }
        for s in scripts(true) {
            assert!(!s.contains('@') && !s.contains("'c1m:pr:"), "{s}");
        }
    }
}
