//! Channel grants in a token: the `channels` (subscribe) and `publish` claims. A grant is a
//! channel name whose dot-separated segments may be `*` (exactly one segment: `chat.*` covers
//! `chat.room1`, not `chat` nor `chat.a.b`); a last segment `**` covers one or more segments
//! (`chat.**` covers `chat.a` and `chat.a.b`; `**` alone covers every channel). A wildcard never
//! stands for an empty segment: `chat.*` covers neither `chat.` nor `chat..x` (a grant for
//! rooms must not grant names no room has).

use serde::Deserialize;

/// A claim holding one pattern or a list of them (issuers write both).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Grants {
    One(String),
    Many(Vec<String>),
}

impl Grants {
    fn patterns(&self) -> impl Iterator<Item = &str> {
        let list: &[String] = match self {
            Grants::One(p) => std::slice::from_ref(p),
            Grants::Many(v) => v,
        };
        list.iter().map(String::as_str)
    }

    /// Some pattern covers `channel`.
    pub fn covers(&self, channel: &str) -> bool {
        self.patterns().any(|p| pattern_covers(p, channel))
    }

    /// The first of `channels` no pattern covers.
    pub fn first_uncovered<'c>(&self, channels: &[&'c str]) -> Option<&'c str> {
        channels.iter().copied().find(|c| !self.covers(c))
    }
}

/// One pattern against one channel name, segment by segment.
pub fn pattern_covers(pattern: &str, channel: &str) -> bool {
    let mut want = pattern.split('.');
    let mut have = channel.split('.');
    loop {
        match (want.next(), have.next()) {
            (None, None) => return true,
            (Some("**"), Some(h)) => {
                return want.next().is_none() && !h.is_empty() && have.all(|s| !s.is_empty())
            }
            (Some("*"), Some(h)) if !h.is_empty() => {}
            (Some(w), Some(h)) if w == h => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_is_one_segment_and_double_star_the_rest() {
        let cases = [
            ("chat.*", "chat.room1", true),
            ("chat.*", "chat", false),
            ("chat.*", "chat.a.b", false),
            ("chat.*", "chatx.a", false),
            ("*.news", "eu.news", true),
            ("*.news", "eu.sport", false),
            ("chat.**", "chat.a", true),
            ("chat.**", "chat.a.b", true),
            ("chat.**", "chat", false),
            ("**", "anything.at.all", true),
            ("a.**.b", "a.x.b", false), // `**` only as the last segment
            ("news", "news", true),
            ("news", "news2", false),
            ("", "news", false),
            // A wildcard stands for one or more characters, never an empty segment.
            ("chat.*", "chat.", false),
            ("chat.*.x", "chat..x", false),
            ("*.news", ".news", false),
            ("chat.**", "chat.", false),
            ("chat.**", "chat.a.", false),
            ("chat.**", "chat..a", false),
            ("**", "a..b", false),
        ];
        for (pattern, channel, expect) in cases {
            assert_eq!(
                pattern_covers(pattern, channel),
                expect,
                "{pattern} vs {channel}"
            );
        }
    }

    #[test]
    fn one_or_many_and_the_first_channel_not_covered() {
        let one: Grants = serde_json::from_str("\"chat.*\"").unwrap();
        assert!(one.covers("chat.x"));
        let many: Grants = serde_json::from_str("[\"a\", \"b.*\"]").unwrap();
        assert_eq!(many.first_uncovered(&["a", "b.c"]), None);
        assert_eq!(many.first_uncovered(&["a", "c", "b.c"]), Some("c"));
    }
}
