//! The raw TCP line protocol (docs/PROTOCOL.md): `SUB ch1,ch2 [last_id]\n` in; `OK`, `MSG` with a
//! length-prefixed payload, `GAP`, `ERR`, `BYE` out. The length prefix is what lets a payload
//! carry newlines (or any bytes) without breaking the framing.

/// Longest command line accepted from a client.
pub const MAX_LINE: usize = 8192;

/// Sent before the server closes on shutdown.
pub const BYE: &[u8] = b"BYE\n";

/// A parsed `SUB` command.
#[derive(Debug, PartialEq, Eq)]
pub struct Sub<'a> {
    pub channels: &'a str,
    pub last_id: Option<u64>,
}

/// Parses one command line (without its `\n`; a trailing `\r` is allowed).
pub fn parse_command(line: &[u8]) -> Result<Sub<'_>, &'static str> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|_| "command is not UTF-8")?;
    let mut parts = text.split(' ');
    if parts.next() != Some("SUB") {
        return Err("expected: SUB channel[,channel...] [last_id]");
    }
    let channels = parts
        .next()
        .filter(|c| !c.is_empty())
        .ok_or("SUB needs a channel")?;
    let last_id = match parts.next() {
        None => None,
        // Digits only: u64's parser also takes a leading `+`, which the grammar does not.
        Some(id) if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) => {
            return Err("last_id must be an unsigned integer");
        }
        Some(id) => Some(id.parse().map_err(|_| "last_id is over 2^64-1")?),
    };
    if parts.next().is_some() {
        return Err("too many arguments to SUB");
    }
    Ok(Sub { channels, last_id })
}

/// `OK {current_id}\n`
pub fn encode_ok(current_id: u64) -> Vec<u8> {
    format!("OK {current_id}\n").into_bytes()
}

/// `MSG {channel} {id} {len}\n{payload}\n`
pub fn encode_msg(channel: &str, id: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("MSG {channel} {id} {}\n", payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out.push(b'\n');
    out
}

/// `JOIN {channel} {len}\n{json}\n` or `LEAVE …`: a member came or went (`json` is the
/// event's object, `{"channel","user","conn","info"?}`); length-prefixed like `MSG`, no id.
pub fn encode_presence(join: bool, channel: &str, json: &[u8]) -> Vec<u8> {
    let word = if join { "JOIN" } else { "LEAVE" };
    let mut out = format!("{word} {channel} {}\n", json.len()).into_bytes();
    out.extend_from_slice(json);
    out.push(b'\n');
    out
}

/// `GAP {channel} {after} {through}\n`
pub fn encode_gap(channel: &str, after: u64, through: u64) -> Vec<u8> {
    format!("GAP {channel} {after} {through}\n").into_bytes()
}

/// `ERR {reason}\n` (newlines in the reason are replaced so the frame stays one line).
pub fn encode_err(reason: &str) -> Vec<u8> {
    format!("ERR {}\n", reason.replace(['\n', '\r'], " ")).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presence_lines_are_length_prefixed() {
        assert_eq!(
            encode_presence(true, "room", b"{\"u\":1}"),
            b"JOIN room 7\n{\"u\":1}\n"
        );
        assert_eq!(encode_presence(false, "r", b"{}"), b"LEAVE r 2\n{}\n");
    }

    #[test]
    fn commands() {
        assert_eq!(
            parse_command(b"SUB a,b 42\r").unwrap(),
            Sub {
                channels: "a,b",
                last_id: Some(42)
            }
        );
        assert_eq!(
            parse_command(b"SUB a").unwrap(),
            Sub {
                channels: "a",
                last_id: None
            }
        );
        assert!(parse_command(b"PUB a").is_err());
        assert!(parse_command(b"SUB").is_err());
        assert!(parse_command(b"SUB a x").is_err());
        assert!(parse_command(b"SUB a 1 2").is_err());
    }

    #[test]
    fn fuzz_last_id_is_digits_only() {
        // u64::from_str takes a leading `+`; the grammar (docs/PROTOCOL.md) does not.
        for bad in [
            &b"SUB a +5"[..],
            b"SUB a -5",
            b"SUB a 5x",
            b"SUB a ",
            b"SUB a 18446744073709551616",
        ] {
            assert!(
                parse_command(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_command(b"SUB a 18446744073709551615")
                .unwrap()
                .last_id,
            Some(u64::MAX)
        );
    }

    #[test]
    fn frames() {
        assert_eq!(encode_msg("c", 5, b"a\nb"), b"MSG c 5 3\na\nb\n".to_vec());
        assert_eq!(encode_gap("c", 1, 4), b"GAP c 1 4\n".to_vec());
        assert_eq!(encode_err("x\ny"), b"ERR x y\n".to_vec());
    }
}
