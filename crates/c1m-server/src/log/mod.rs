//! Logging for the master and the workers: `tracing` events on stderr, as text or one JSON
//! object per line, with RFC 3339 timestamps and levels. Every line of a worker carries its
//! index and pid (written by [`worker_lines`], which the workers use instead of
//! tracing-subscriber's `fmt`), the master's its pid (a span entered for its life).
//!
//! What is logged at `info`: lifecycle events (start, worker exit and restart, reload,
//! shutdown), never a line per message or per connection. Refusals and disconnections that an
//! attacker can cause at will are summed by the master into one warning per
//! [`REFUSAL_SUMMARY_EVERY`] ([`RefusalSummary`]), and a worker's own error paths that can
//! repeat per connection go through [`Limited`].
//!
//! The two log settings, [`LogFormat`] and the `--log-level` [`filter`], are defined here and
//! the configuration uses them; this module takes plain values, never the configuration, so
//! the logger can be set up (and tested) without it.

mod worker_lines;

use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;

/// How often at most the master writes its refusal summary.
pub const REFUSAL_SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// How log lines are written to stderr.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `2026-11-23T13:40:00.123456Z  INFO worker{n=0 pid=123}: message key=value`
    Text,
    /// One JSON object per line: timestamp, level, fields (message and values), span.
    Json,
}

/// The filter `--log-level` names (a level or a tracing filter directive list).
pub fn filter(level: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .with_regex(false)
        .parse(level)
        .map_err(|e| e.to_string())
}

/// Installs a worker's subscriber ([`worker_lines`]): the same lines as the master's, each
/// naming the worker by index and pid, without tracing-subscriber's span registry.
pub fn init_worker(format: LogFormat, level: &str, index: usize) {
    use tracing_subscriber::layer::SubscriberExt;
    let filter = filter(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let lines = worker_lines::WorkerLines {
        index,
        pid: std::process::id(),
        json: matches!(format, LogFormat::Json),
        ansi: std::io::stderr().is_terminal(),
    };
    let _ = tracing::subscriber::set_global_default(lines.with(filter));
}

/// Installs the master's subscriber. Called once, first thing; a second call (tests in one
/// process) is ignored.
pub fn init(format: LogFormat, level: &str) {
    let filter = filter(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        // Colour only for a person at a terminal: a journal or a file gets plain text.
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

/// Sums the refusal counters over the interval and writes one warning per
/// [`REFUSAL_SUMMARY_EVERY`] naming what rose, so a flood of bad requests costs one line per 10 s.
/// It takes the counters as named values, so the logger does not depend on where they are
/// counted.
pub struct RefusalSummary {
    /// The totals at the last summary; a counter not seen yet was 0.
    last: Vec<(&'static str, u64)>,
    at: Instant,
}

impl RefusalSummary {
    pub fn new(now: Instant) -> RefusalSummary {
        RefusalSummary {
            last: Vec::new(),
            at: now,
        }
    }

    /// Called with the current totals (name and count); writes the summary when one is due and
    /// anything rose.
    pub fn tick(&mut self, now: Instant, totals: &[(&'static str, u64)]) {
        if now.duration_since(self.at) < REFUSAL_SUMMARY_EVERY {
            return;
        }
        let before = |name: &str| {
            self.last
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, v)| *v)
        };
        let rose: Vec<String> = totals
            .iter()
            .filter(|(name, now)| *now > before(name))
            .map(|(name, now)| format!("{name} +{}", now - before(name)))
            .collect();
        if !rose.is_empty() {
            tracing::warn!(
                seconds = now.duration_since(self.at).as_secs(),
                refused = %rose.join(", "),
                "connections or requests refused"
            );
        }
        self.last = totals.to_vec();
        self.at = now;
    }
}

/// A log line that may repeat for every connection (accept errors at the fd limit, socket
/// options failing): written at most once per period, with the number held back since.
pub struct Limited {
    period: Duration,
    last: Option<Instant>,
    held_back: u64,
}

impl Limited {
    pub const fn every(period: Duration) -> Limited {
        Limited {
            period,
            last: None,
            held_back: 0,
        }
    }

    /// `Some(n)` when this occurrence should be written (`n` similar ones were held back since
    /// the last line), `None` when it is held back.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < self.period => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limited_writes_once_per_period_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut l = Limited::every(Duration::from_secs(10));
        assert_eq!(l.allow(t0), Some(0));
        for i in 1..=5 {
            assert_eq!(l.allow(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(l.allow(t0 + Duration::from_secs(10)), Some(5));
        assert_eq!(l.allow(t0 + Duration::from_secs(11)), None);
    }

    #[test]
    fn levels_and_directives_parse_and_nonsense_does_not() {
        assert!(filter("info").is_ok());
        assert!(filter("warn,c1m_server::worker=debug").is_ok());
        assert!(filter("c1m_server=loudest").is_err());
    }
}
