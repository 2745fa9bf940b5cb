//! The bench message payload: `c1mb {channel index} {sequence} {send time µs}` padded with `.`
//! to `--payload-size`. One ASCII line, so it passes every protocol unchanged (SSE data lines,
//! long-poll JSON strings, WebSocket text frames, TCP length-prefixed bodies) and any server's
//! envelope: a subscriber finds the stamp by searching for its `c1mb ` prefix anywhere in what
//! arrived (`{"pub":{"data":"c1mb 0 7 …"}}` works as well as the bare payload).

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

/// The stamp's marker; searched for anywhere in a message.
const MARKER: &[u8] = b"c1mb ";

/// None when the message carries no stamp of ours (counted as foreign, not an error).
pub fn decode(data: &[u8]) -> Option<Stamp> {
    // The common case (our own servers, nchan) has the stamp first: no search then.
    let at = if data.starts_with(MARKER) {
        0
    } else {
        data.windows(MARKER.len()).position(|w| w == MARKER)?
    };
    let mut rest = &data[at + MARKER.len()..];
    // Each number ends at the first non-digit: an envelope may follow it (`…123"}`).
    let mut num = || -> Option<u64> {
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let v = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        rest = &rest[digits..];
        rest = rest.strip_prefix(b" ").unwrap_or(rest);
        Some(v)
    };
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
        assert_eq!(decode(b"c1mb 1  3 4"), None);
    }

    /// Another server's envelope around the payload: the stamp is found inside it (before,
    /// only a payload that started with the stamp counted; these were all "foreign").
    #[test]
    fn stamp_inside_an_envelope() {
        let s = Stamp {
            channel: 2,
            seq: 9,
            sent_us: 1_700_000_000_000_001,
        };
        let bare = String::from_utf8(encode(s, 0)).unwrap();
        let padded = String::from_utf8(encode(s, 80)).unwrap();
        for wrapped in [
            format!("{{\"push\":{{\"pub\":{{\"data\":\"{bare}\"}}}}}}"),
            format!("{{\"data\":\"{padded}\",\"id\":\"x\"}}"),
            format!("event=m;{bare}"),
        ] {
            assert_eq!(decode(wrapped.as_bytes()), Some(s), "{wrapped}");
        }
    }
}
