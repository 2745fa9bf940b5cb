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

mod worker_lines;

use crate::config::{Config, LogFormat};
use crate::ipc::Refused;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;

/// How often at most the master writes its refusal summary.
pub const REFUSAL_SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// The filter `--log-level` names (a level or a tracing filter directive list).
pub fn filter(level: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .with_regex(false)
        .parse(level)
        .map_err(|e| e.to_string())
}

/// Installs a worker's subscriber ([`worker_lines`]): the same lines as the master's, each
/// naming the worker by index and pid, without tracing-subscriber's span registry.
pub fn init_worker(cfg: &Config, index: usize) {
    use tracing_subscriber::layer::SubscriberExt;
    let filter = filter(&cfg.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let lines = worker_lines::WorkerLines {
        index,
        pid: std::process::id(),
        json: matches!(cfg.log_format, LogFormat::Json),
        ansi: std::io::stderr().is_terminal(),
    };
    let _ = tracing::subscriber::set_global_default(lines.with(filter));
}

/// Installs the master's subscriber. Called once, first thing; a second call (tests in one
/// process) is ignored.
pub fn init(cfg: &Config) {
    let filter = filter(&cfg.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(false)
        // Colour only for a person at a terminal: a journal or a file gets plain text.
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match cfg.log_format {
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
pub struct RefusalSummary {
    last: Refused,
    at: Instant,
}

impl RefusalSummary {
    pub fn new(now: Instant) -> RefusalSummary {
        RefusalSummary {
            last: Refused::default(),
            at: now,
        }
    }

    /// Called with the current totals; writes the summary when one is due and anything rose.
    pub fn tick(&mut self, now: Instant, totals: &Refused) {
        if now.duration_since(self.at) < REFUSAL_SUMMARY_EVERY {
            return;
        }
        let rose: Vec<String> = totals
            .fields()
            .iter()
            .zip(self.last.fields())
            .filter(|((_, now), (_, before))| now > before)
            .map(|((name, now), (_, before))| format!("{name} +{}", now - before))
            .collect();
        if !rose.is_empty() {
            tracing::warn!(
                seconds = now.duration_since(self.at).as_secs(),
                refused = %rose.join(", "),
                "connections or requests refused"
            );
        }
        self.last = *totals;
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
