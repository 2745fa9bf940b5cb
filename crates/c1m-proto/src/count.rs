//! Connection counts as people write them: `1000000`, `1_000_000`, `1,000,000`, `250K`,
//! `1M`, `1.5M`, `10M`. The one parser behind every `--conns` / `--max-conns` flag (serve,
//! bench, tune, doctor, top), so `c1m tune --conns 1M` and `c1m bench --conns 1M` agree.
//!
//! Owns: text -> count. Suffixes are decimal (K = 1,000, M = 1,000,000, G = 1,000,000,000)
//! because connections are counted, not addressed. A fraction must come out whole
//! (`1.5M` is 1,500,000; `1.5K5` and `0.0001K` are refused).

/// Parses a count; the error says what was wrong, for clap to print next to the flag.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let t: String = s
        .trim()
        .chars()
        .filter(|c| *c != '_' && *c != ',')
        .collect();
    let bad = || format!("not a count: {s:?} (try 1000000, 1_000_000, 250K, 1M, 1.5M)");
    let (num, mult): (&str, u64) = match t.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&t[..t.len() - 1], 1_000),
        Some('m') => (&t[..t.len() - 1], 1_000_000),
        Some('g') => (&t[..t.len() - 1], 1_000_000_000),
        _ => (t.as_str(), 1),
    };
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    let digits = |d: &str| d.chars().all(|c| c.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) {
        return Err(bad());
    }
    let whole: u64 = int.parse().map_err(|_| bad())?;
    let mut n = whole
        .checked_mul(mult)
        .ok_or_else(|| format!("count {s:?} is too large"))?;
    if !frac.is_empty() {
        // frac / 10^len × mult must be whole: 1.5M = 1 M + 5 × 100,000.
        let scale = 10u64
            .checked_pow(frac.len() as u32)
            .filter(|&p| p <= mult)
            .ok_or_else(|| format!("{s:?} is not a whole number of connections"))?;
        let f: u64 = frac.parse().map_err(|_| bad())?;
        n = n
            .checked_add(f * (mult / scale))
            .ok_or_else(|| format!("count {s:?} is too large"))?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::parse_count;

    #[test]
    fn forms_people_write() {
        for (s, n) in [
            ("1000000", 1_000_000),
            ("1_000_000", 1_000_000),
            ("1,000,000", 1_000_000),
            ("1M", 1_000_000),
            ("1m", 1_000_000),
            ("1.5M", 1_500_000),
            ("10M", 10_000_000),
            ("250K", 250_000),
            ("250k", 250_000),
            ("0.5K", 500),
            (" 2G ", 2_000_000_000),
        ] {
            assert_eq!(parse_count(s), Ok(n), "{s}");
        }
    }

    #[test]
    fn refusals_say_why() {
        for s in [
            "",
            "M",
            "lots",
            "1.5",
            "-1",
            "1e6",
            "0.0001K",
            "1.2.3M",
            "99999999999999G",
        ] {
            assert!(parse_count(s).is_err(), "{s:?} accepted");
        }
    }
}
