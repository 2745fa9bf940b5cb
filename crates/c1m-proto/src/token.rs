//! RFC 9110 §5.6 field-value syntax shared by the head's framing rules (`http_framing`) and the
//! chunked decoder's extensions and trailers (`chunked`): what a `token` byte is and what
//! optional whitespace is. A leaf module, so neither of those needs the other.

/// RFC 9110 §5.6.2 `tchar`.
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Strips optional whitespace (RFC 9110 §5.6.3 `OWS`: SP / HTAB) from both ends.
pub fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tchars_and_ows() {
        assert!(b"chunked-1.x!#$%&'*+^_`|~".iter().all(|&b| is_tchar(b)));
        assert!(!b" \t\",;=()/:<>?@[\\]{}\x7f\x00"
            .iter()
            .any(|&b| is_tchar(b)));
        assert_eq!(trim_ows(b" \tchunked\t "), b"chunked");
        assert_eq!(trim_ows(b"  "), b"");
        assert_eq!(trim_ows(b"a b"), b"a b");
    }
}
