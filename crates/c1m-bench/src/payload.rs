//! The bench message payload: `c1mb {channel index} {sequence} {send time µs}` padded with `.`
//! to `--payload-size`. One ASCII line, so it passes every protocol unchanged (SSE data lines,
//! long-poll JSON strings, WebSocket text frames, TCP length-prefixed bodies).

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock microseconds since the Unix epoch; publisher and subscribers share one host clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// What a subscriber reads back from a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub channel: u32,
    pub seq: u32,
    pub sent_us: u64,
}

pub fn encode(stamp: Stamp, size: usize) -> Vec<u8> {
    let mut p = format!("c1mb {} {} {}", stamp.channel, stamp.seq, stamp.sent_us).into_bytes();
    if p.len() < size {
        p.push(b' ');
        p.resize(size, b'.');
    }
    p
}

/// None when the payload is not one of ours (counted as foreign, not an error).
pub fn decode(data: &[u8]) -> Option<Stamp> {
    let rest = data.strip_prefix(b"c1mb ")?;
    let mut words = rest.split(|&b| b == b' ');
    let mut num = || -> Option<u64> { std::str::from_utf8(words.next()?).ok()?.parse().ok() };
    Some(Stamp {
        channel: u32::try_from(num()?).ok()?,
        seq: u32::try_from(num()?).ok()?,
        sent_us: num()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_padding() {
        let s = Stamp {
            channel: 3,
            seq: 17,
            sent_us: 1_700_000_000_000_000,
        };
        let p = encode(s, 64);
        assert_eq!(p.len(), 64);
        assert_eq!(decode(&p), Some(s));
        assert_eq!(decode(&encode(s, 0)), Some(s));
        assert_eq!(decode(b"hello"), None);
        assert_eq!(decode(b"c1mb 1 x 3"), None);
    }
}
