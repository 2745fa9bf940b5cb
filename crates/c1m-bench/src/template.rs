//! Templates for talking to any server: `{ch}` (channel name), `{i}` (connection index),
//! `{payload}` (the stamped bench payload) in URLs, headers and publish bodies. A template is
//! checked once when the run is planned ([`check`]) and expanded per request ([`expand`]).

use anyhow::bail;

/// Expands `{name}` placeholders from `vars`; anything else is copied as it is.
pub fn expand(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after
            .find('}')
            .and_then(|close| Some((close, vars.iter().find(|(k, _)| *k == &after[..close])?)))
        {
            Some((close, (_, v))) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Fails on a `{name}` that is not one of `allowed` (a typo would otherwise go out verbatim).
pub fn check(what: &str, template: &str, allowed: &[&str]) -> anyhow::Result<()> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        if let Some(close) = after.find('}') {
            let name = &after[..close];
            let plausible =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if plausible && !allowed.contains(&name) {
                bail!(
                    "{what} {template:?}: unknown placeholder {{{name}}} (allowed: {})",
                    allowed
                        .iter()
                        .map(|a| format!("{{{a}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        rest = after;
    }
    Ok(())
}

/// A header template `Name: value` as a request line `Name: value\r\n`, checked for CR/LF
/// (a header must not smuggle in another request line).
pub fn header_line(what: &str, h: &str) -> anyhow::Result<String> {
    let Some((name, _)) = h.split_once(':') else {
        bail!("{what} {h:?} is not `Name: value`");
    };
    if name.trim().is_empty() || name.contains(char::is_whitespace) {
        bail!("{what} {h:?}: bad header name");
    }
    if h.contains(['\r', '\n']) {
        bail!("{what} {h:?} contains a line break");
    }
    Ok(format!("{h}\r\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_known_names_only() {
        let v = [("ch", "news-3"), ("i", "17")];
        assert_eq!(expand("/sub/{ch}?u={i}", &v), "/sub/news-3?u=17");
        assert_eq!(expand("{\"a\":{ch}}", &v), "{\"a\":news-3}");
        assert_eq!(expand("{x}{", &v), "{x}{");
        assert!(check("--url", "/sub/{ch}/{i}", &["ch", "i"]).is_ok());
        assert!(check("--url", "/sub/{chan}", &["ch", "i"]).is_err());
        // JSON braces are not placeholders.
        assert!(check("--publish-body", "{\"data\":\"{payload}\"}", &["payload"]).is_ok());
    }

    #[test]
    fn headers() {
        assert_eq!(header_line("-H", "X-A: b").unwrap(), "X-A: b\r\n");
        assert!(header_line("-H", "nocolon").is_err());
        assert!(header_line("-H", "X-A: b\r\nX-B: c").is_err());
    }
}
