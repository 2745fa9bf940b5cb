//! Fuzz harness for the raw TCP line protocol's input: the `SUB ch1[,ch2…] [last_id]` command
//! (c1m_proto::line) and the channel list inside it (c1m_proto::channel), read the way the
//! worker reads them. Shared by the libFuzzer target and tests/http_stress.rs.

use c1m_proto::{channel, line};

/// Target: `data` as a raw TCP connection's first bytes. Returns the accepted command's
/// (channels, last_id), if any.
pub fn tcp_line(data: &[u8]) -> Option<(Vec<String>, Option<u64>)> {
    let Some(end) = data.iter().position(|&b| b == b'\n') else {
        return None; // the worker waits (or refuses past line::MAX_LINE)
    };
    let raw = &data[..end];
    let sub = line::parse_command(raw).ok()?;
    // Exactly the grammar: "SUB" SP channels [SP 1*DIGIT] [CR]; nothing else was skipped.
    let text = std::str::from_utf8(raw.strip_suffix(b"\r").unwrap_or(raw)).unwrap();
    let rest = text.strip_prefix("SUB ").expect("accepted without `SUB `");
    let (channels, id_text) = match rest.split_once(' ') {
        Some((c, id)) => (c, Some(id)),
        None => (rest, None),
    };
    assert_eq!(sub.channels, channels);
    assert!(!channels.is_empty() && !channels.contains(['\n', ' ']));
    if let Some(id) = id_text {
        assert!(
            !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
            "last_id {id:?} accepted"
        );
        assert_eq!(sub.last_id, id.parse().ok());
    } else {
        assert_eq!(sub.last_id, None);
    }
    let (channels, last_id) = (sub.channels, sub.last_id);
    let max = 8;
    let names = channel::parse_list(channels, max).ok()?;
    assert!(!names.is_empty() && names.len() <= max);
    for (i, name) in names.iter().enumerate() {
        assert!(channel::is_valid_name(name));
        assert!(!names[..i].contains(name), "duplicate {name}");
    }
    // Re-encoded, a valid command means the same.
    let again = match last_id {
        Some(id) => format!("SUB {channels} {id}"),
        None => format!("SUB {channels}"),
    };
    let reparsed = line::parse_command(again.as_bytes()).expect("re-encoded command parses");
    assert_eq!((reparsed.channels, reparsed.last_id), (channels, last_id));
    Some((names.iter().map(|s| s.to_string()).collect(), last_id))
}
