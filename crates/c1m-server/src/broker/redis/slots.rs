//! Redis Cluster routing: which hash slot a key lives in (CRC16/XMODEM of its hash tag, mod
//! 16384, as the cluster spec defines it) and which master serves each slot (the map read with
//! `CLUSTER SLOTS`, patched by `MOVED` answers until the next full read).

use redis::Value;

/// Slots in a Redis Cluster.
pub const SLOTS: usize = 16384;

/// CRC16, polynomial 0x1021, initial value 0, no reflection (XMODEM): the cluster's key hash.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot of `key`: only the part between the first `{` and the next `}` is hashed when that
/// part is not empty (the hash tag), so every key of one channel (`c1m:{CH}:…`) shares a slot.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

/// Which master (`host:port`) serves each slot; `None` for a slot no master claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotMap {
    /// Index into `masters` per slot (`u16::MAX`: unassigned); empty before the first read.
    owner: Vec<u16>,
    pub masters: Vec<String>,
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` answer: `[[start, end, [host, port, id…], replicas…]…]`. An
    /// empty host means the node that answered (`asked`).
    pub fn from_cluster_slots(v: &Value, asked: &str) -> Option<SlotMap> {
        let Value::Array(ranges) = v else {
            return None;
        };
        let mut map = SlotMap {
            owner: vec![u16::MAX; SLOTS],
            masters: Vec::new(),
        };
        for range in ranges {
            let Value::Array(parts) = range else {
                return None;
            };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(node))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                return None;
            };
            let host = match node.first()? {
                Value::BulkString(h) => String::from_utf8_lossy(h).into_owned(),
                Value::SimpleString(h) => h.clone(),
                _ => return None,
            };
            let Some(Value::Int(port)) = node.get(1) else {
                return None;
            };
            let addr = if host.is_empty() || host == "?" {
                let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
                format!("{asked_host}:{port}")
            } else {
                format!("{host}:{port}")
            };
            let index = map.index_of(&addr);
            let (start, end) = (usize::try_from(*start).ok()?, usize::try_from(*end).ok()?);
            if start > end || end >= SLOTS {
                return None;
            }
            map.owner[start..=end].fill(index);
        }
        Some(map)
    }

    fn index_of(&mut self, addr: &str) -> u16 {
        match self.masters.iter().position(|m| m == addr) {
            Some(i) => i as u16,
            None => {
                self.masters.push(addr.to_string());
                (self.masters.len() - 1) as u16
            }
        }
    }

    /// The master serving `slot`, if the map knows one.
    pub fn owner(&self, slot: u16) -> Option<&str> {
        let i = *self.owner.get(usize::from(slot))?;
        self.masters.get(usize::from(i)).map(String::as_str)
    }

    /// A `MOVED slot addr` answer: the slot is served by `addr` from now on.
    pub fn moved(&mut self, slot: u16, addr: &str) {
        if self.owner.len() != SLOTS {
            self.owner = vec![u16::MAX; SLOTS];
        }
        let index = self.index_of(addr);
        self.owner[usize::from(slot)] = index;
    }
}

/// A redirection in an error answer: `MOVED slot addr` or `ASK slot addr`.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect {
    Moved(u16, String),
    Ask(u16, String),
}

/// Parses the code and detail of a Redis error (`MOVED 3999 127.0.0.1:6381`).
pub fn redirect(code: &str, detail: &str) -> Option<Redirect> {
    let mut words = detail.split_whitespace();
    let slot = words.next()?.parse().ok()?;
    let addr = words.next()?.to_string();
    match code {
        "MOVED" => Some(Redirect::Moved(slot, addr)),
        "ASK" => Some(Redirect::Ask(slot, addr)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_cluster_spec() {
        // The spec's check value for CRC16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        // 0x31C3 is below 16384: the slot is the CRC itself.
        assert_eq!(key_slot(b"123456789"), 12739);
        // Hash tags: only the first non-empty {…} counts.
        assert_eq!(key_slot(b"c1m:{news}:h"), key_slot(b"news"));
        assert_eq!(key_slot(b"c1m:{news}:m"), key_slot(b"c1m:{news}:p"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        // Values `CLUSTER KEYSLOT` answers (the cluster test checks more against a live one).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), 3443);
    }

    #[test]
    fn a_slot_map_is_read_and_patched() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let v = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("127.0.0.1", 7000),
            ]),
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7001)]),
        ]);
        let mut map = SlotMap::from_cluster_slots(&v, "10.0.0.9:7001").unwrap();
        assert_eq!(map.owner(0), Some("127.0.0.1:7000"));
        assert_eq!(map.owner(5461), Some("10.0.0.9:7001"));
        map.moved(5461, "127.0.0.1:7002");
        assert_eq!(map.owner(5461), Some("127.0.0.1:7002"));
        assert_eq!(map.owner(5462), Some("10.0.0.9:7001"));
        assert_eq!(
            redirect("ASK", "3999 127.0.0.1:6381"),
            Some(Redirect::Ask(3999, "127.0.0.1:6381".into()))
        );
        assert_eq!(redirect("ERR", "x"), None);
    }
}
