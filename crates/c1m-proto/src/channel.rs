//! Channel names and channel lists (`/sub/a,b,c`).

/// Longest channel name accepted.
pub const MAX_CHANNEL_LEN: usize = 64;

/// Why a channel list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelError {
    Empty,
    TooMany { max: usize },
    BadName(String),
}

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChannelError::Empty => write!(f, "no channel given"),
            ChannelError::TooMany { max } => write!(f, "more than {max} channels"),
            ChannelError::BadName(n) => write!(
                f,
                "bad channel name {n:?}: 1-{MAX_CHANNEL_LEN} bytes of [A-Za-z0-9_.:-]"
            ),
        }
    }
}

/// True for a valid channel name: 1–64 bytes of `[A-Za-z0-9_.:-]`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_CHANNEL_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Splits `a,b,c` into distinct valid names (duplicates are folded, order kept).
pub fn parse_list(list: &str, max: usize) -> Result<Vec<&str>, ChannelError> {
    let mut out: Vec<&str> = Vec::new();
    for name in list.split(',') {
        if !is_valid_name(name) {
            return Err(if list.is_empty() {
                ChannelError::Empty
            } else {
                ChannelError::BadName(name.to_string())
            });
        }
        if !out.contains(&name) {
            out.push(name);
        }
    }
    if out.len() > max {
        return Err(ChannelError::TooMany { max });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_list("a,b.c,a", 4).unwrap(), vec!["a", "b.c"]);
        assert_eq!(parse_list("", 4), Err(ChannelError::Empty));
        assert!(matches!(
            parse_list("a,,b", 4),
            Err(ChannelError::BadName(_))
        ));
        assert!(matches!(
            parse_list("a b", 4),
            Err(ChannelError::BadName(_))
        ));
        assert_eq!(
            parse_list("a,b,c", 2),
            Err(ChannelError::TooMany { max: 2 })
        );
        assert!(parse_list(&"x".repeat(65), 2).is_err());
    }
}
