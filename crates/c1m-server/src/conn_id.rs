//! A connection's id, unique on its node while the connection lives: the worker's index and
//! the connection's slab token (slot and generation), written `3-1a2b0000000f` (decimal worker,
//! hex token). The worker names its connections with it (the SSE and WebSocket response heads
//! carry it as `C1m-Conn-Id`), webhooks and presence name connections by it, and the server
//! API's calls by connection parse it back, so the master knows which worker to ask without
//! asking them all.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub worker: u32,
    pub token: u64,
}

impl ConnId {
    pub fn new(worker: usize, token: u64) -> ConnId {
        ConnId {
            worker: worker as u32,
            token,
        }
    }
}

/// What a well-formed id looks like, for error messages.
pub const FORM: &str =
    "WORKER-TOKEN: a decimal worker index, '-', a hex token (e.g. 3-1a2b0000000f)";

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{:012x}", self.worker, self.token)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadConnId(pub String);

impl fmt::Display for BadConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad connection id {:?}: expected {FORM}", self.0)
    }
}

impl std::error::Error for BadConnId {}

impl FromStr for ConnId {
    type Err = BadConnId;
    fn from_str(s: &str) -> Result<ConnId, BadConnId> {
        let bad = || BadConnId(s.chars().take(64).collect());
        let (worker, token) = s.split_once('-').ok_or_else(bad)?;
        let digits = |t: &str, hex: bool| {
            !t.is_empty()
                && t.len() <= 16
                && t.bytes()
                    .all(|b| b.is_ascii_digit() || (hex && b.is_ascii_hexdigit()))
        };
        if !digits(worker, false) || !digits(token, true) {
            return Err(bad());
        }
        Ok(ConnId {
            worker: worker.parse().map_err(|_| bad())?,
            token: u64::from_str_radix(token, 16).map_err(|_| bad())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_and_read_back() {
        let id = ConnId {
            worker: 3,
            token: 0x1a2b_0000_000f,
        };
        assert_eq!(id.to_string(), "3-1a2b0000000f");
        assert_eq!("3-1a2b0000000f".parse::<ConnId>(), Ok(id));
        assert_eq!("0-f".parse::<ConnId>().unwrap().token, 15);
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            "",
            "3",
            "-f",
            "3-",
            "x-1",
            "3-xyz",
            "3-1-2",
            "+3-1",
            "3-+1",
            "99999999999-1",
            "1-12345678901234567",
        ] {
            assert!(bad.parse::<ConnId>().is_err(), "{bad:?}");
        }
    }
}
