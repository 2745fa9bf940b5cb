//! Parsing and printing of the quantities `tune` deals in: byte sizes (`24G`, `24GiB`,
//! `25769803776`), connection counts (`1M`, `1_000_000`), and human-readable bytes.
//!
//! Owns: nothing but text <-> number; no policy.

use anyhow::{bail, Context, Result};

/// Parses a byte size. Suffixes K, M, G, T (optionally followed by `i`, `iB` or `B`) are
/// binary multiples, because RAM is sold and reported in GiB.
pub fn parse_bytes(s: &str) -> Result<u64> {
    let t = s.trim().replace('_', "");
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num
        .parse()
        .with_context(|| format!("not a byte size: {s:?}"))?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kib" | "kb" => 10,
        "m" | "mi" | "mib" | "mb" => 20,
        "g" | "gi" | "gib" | "gb" => 30,
        "t" | "ti" | "tib" | "tb" => 40,
        _ => bail!("unknown size suffix in {s:?} (use K, M, G or T)"),
    };
    n.checked_mul(1u64 << shift)
        .with_context(|| format!("byte size {s:?} overflows"))
}

/// Parses a connection count with the one parser every subcommand uses
/// ([`c1m_proto::count::parse_count`]: `1M`, `1.5M`, `250K`, `1_000_000`).
pub fn parse_count(s: &str) -> Result<u64> {
    c1m_proto::count::parse_count(s).map_err(anyhow::Error::msg)
}

/// Bytes in the largest binary unit that keeps the number ≥ 1, two decimals: `4.38 GiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

/// Parses whitespace-separated unsigned integers (`287898 383866 575796`).
pub fn parse_numbers(s: &str) -> Option<Vec<u64>> {
    let v: Option<Vec<u64>> = s.split_whitespace().map(|x| x.parse().ok()).collect();
    v.filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_bytes("24G").unwrap(), 24 * 1024 * 1024 * 1024);
        assert_eq!(parse_bytes("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_bytes("512m").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("G").is_err());
        assert!(parse_bytes("99999999999T").is_err());
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("1M").unwrap(), 1_000_000);
        assert_eq!(parse_count("250k").unwrap(), 250_000);
        assert_eq!(parse_count("1_048_576").unwrap(), 1_048_576);
        assert!(parse_count("lots").is_err());
    }

    #[test]
    fn human() {
        assert_eq!(human_bytes(4_700_000_000), "4.38 GiB");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.50 KiB");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_numbers("1 2\t3\n"), Some(vec![1, 2, 3]));
        assert_eq!(parse_numbers("1 x"), None);
        assert_eq!(parse_numbers(""), None);
    }
}
