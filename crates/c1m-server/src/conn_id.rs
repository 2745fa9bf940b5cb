//! A connection's node-unique id as the outside world sees it (webhooks, and any API that
//! names one connection): the worker's index and the connection's slab token (slot +
//! generation), written `<worker>-<token hex>`. The generation makes a reused slot a new id,
//! so an id names one connection for the life of the master's generation of workers.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub worker: usize,
    pub token: u64,
}

impl ConnId {
    pub fn new(worker: usize, token: u64) -> ConnId {
        ConnId { worker, token }
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{:x}", self.worker, self.token)
    }
}

impl std::str::FromStr for ConnId {
    type Err = String;
    fn from_str(s: &str) -> Result<ConnId, String> {
        let bad = || format!("connection id {s:?}: expected <worker>-<token hex>");
        let (w, t) = s.split_once('-').ok_or_else(bad)?;
        Ok(ConnId {
            worker: w.parse().map_err(|_| bad())?,
            token: u64::from_str_radix(t, 16).map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ConnId;

    #[test]
    fn written_and_read_back() {
        let id = ConnId::new(3, (7 << 32) | 0x2a);
        assert_eq!(id.to_string(), "3-70000002a");
        assert_eq!("3-70000002a".parse::<ConnId>().unwrap(), id);
        assert!("3".parse::<ConnId>().is_err());
        assert!("x-1".parse::<ConnId>().is_err());
        assert!("1-zz".parse::<ConnId>().is_err());
    }
}
