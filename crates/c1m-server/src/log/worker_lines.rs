//! A worker's log lines, in the same two formats the master writes through tracing-subscriber's
//! `fmt` (text: `TIMESTAMP LEVEL worker{n=3 pid=1234}: message key=value`; JSON: `timestamp`,
//! `level`, `fields`, `span`), written by a small subscriber of our own.
//!
//! Why not `fmt` here too: its span registry allocates a 4096-slot shard table up front, 32 KiB
//! of heap in each of the ~53 workers a 1M box runs (1.7 B per connection at 1M, of the 64 B
//! per-connection budget), and a worker has one span for its whole life, the worker's
//! identity, which this subscriber prints on every line instead. Spans are not tracked: no code a worker runs
//! opens one (a span opened anyway is accepted and left out of the lines).

use std::fmt::{self, Write as _};
use std::io::Write as _;
use std::time::SystemTime;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Writes every event it is given as one line on stderr (filtering is the layer's job).
pub struct WorkerLines {
    /// The worker's index (`n`) and pid, printed as the `worker` span on every line.
    pub index: usize,
    pub pid: u32,
    pub json: bool,
    /// Colour the level, as `fmt` does for a person at a terminal.
    pub ansi: bool,
}

impl WorkerLines {
    /// The whole line for `event`, ending in a newline.
    fn line(&self, event: &Event<'_>, now: SystemTime) -> String {
        let timestamp = humantime::format_rfc3339_micros(now);
        let level = *event.metadata().level();
        if self.json {
            // Keys in `fmt`'s order (a serde_json map would sort them): message first.
            let mut fields = JsonFields(Vec::new());
            event.record(&mut fields);
            fields.0.sort_by_key(|(name, _)| *name != "message");
            let mut line = format!(
                r#"{{"timestamp":"{timestamp}","level":"{}","fields":{{"#,
                level.as_str()
            );
            for (i, (name, value)) in fields.0.iter().enumerate() {
                let comma = if i == 0 { "" } else { "," };
                let _ = write!(line, "{comma}{}:{value}", serde_json::Value::from(*name));
            }
            let _ = writeln!(
                line,
                r#"}},"span":{{"n":{},"pid":{},"name":"worker"}}}}"#,
                self.index, self.pid
            );
            return line;
        }
        let mut text = TextFields::default();
        event.record(&mut text);
        let mut line = format!("{timestamp} ");
        if self.ansi {
            let _ = write!(line, "{}{level:>5}\x1b[0m", level_colour(level));
        } else {
            let _ = write!(line, "{level:>5}");
        }
        let _ = writeln!(
            line,
            " worker{{n={} pid={}}}: {}{}",
            self.index, self.pid, text.message, text.rest
        );
        line
    }
}

/// The ANSI colour `fmt` gives each level.
fn level_colour(level: Level) -> &'static str {
    match level {
        Level::ERROR => "\x1b[31m",
        Level::WARN => "\x1b[33m",
        Level::INFO => "\x1b[32m",
        Level::DEBUG => "\x1b[34m",
        Level::TRACE => "\x1b[35m",
    }
}

impl Subscriber for WorkerLines {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Not tracked (module doc); every span gets the same id.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let line = self.line(event, SystemTime::now());
        // One write per line, so lines from a master and its workers sharing stderr never
        // interleave mid-line; a closed stderr loses the line, nothing else.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The message, then ` key=value` for each other field, as `fmt`'s text format writes them.
#[derive(Default)]
struct TextFields {
    message: String,
    rest: String,
}

impl Visit for TextFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

/// The event's fields in the order they were recorded: numbers and booleans as JSON numbers
/// and booleans, the rest as strings.
struct JsonFields(Vec<(&'static str, serde_json::Value)>);

impl JsonFields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        self.0.push((field.name(), value));
    }
}

impl Visit for JsonFields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// Runs `emit` under a subscriber that keeps each line `WorkerLines` would write.
    fn lines_of(json: bool, emit: impl FnOnce()) -> Vec<String> {
        struct Keep(WorkerLines, Arc<Mutex<Vec<String>>>);
        impl Subscriber for Keep {
            fn enabled(&self, m: &Metadata<'_>) -> bool {
                self.0.enabled(m)
            }
            fn new_span(&self, a: &Attributes<'_>) -> Id {
                self.0.new_span(a)
            }
            fn record(&self, _: &Id, _: &Record<'_>) {}
            fn record_follows_from(&self, _: &Id, _: &Id) {}
            fn event(&self, e: &Event<'_>) {
                let now = SystemTime::UNIX_EPOCH
                    + std::time::Duration::from_micros(1_764_133_200_000_001);
                self.1.lock().unwrap().push(self.0.line(e, now));
            }
            fn enter(&self, _: &Id) {}
            fn exit(&self, _: &Id) {}
        }
        let kept = Arc::new(Mutex::new(Vec::new()));
        let lines = WorkerLines {
            index: 3,
            pid: 1234,
            json,
            ansi: false,
        };
        let subscriber = Keep(lines, kept.clone()).with(tracing_subscriber::EnvFilter::new("info"));
        tracing::subscriber::with_default(subscriber, emit);
        let lines = kept.lock().unwrap().clone();
        lines
    }

    #[test]
    fn text_lines_read_like_fmt_with_the_worker_span() {
        let lines = lines_of(false, || {
            tracing::info!(conns = 5, name = "news", "draining");
            tracing::debug!("filtered out");
        });
        assert_eq!(
            lines,
            ["2025-11-26T05:00:00.000001Z  INFO worker{n=3 pid=1234}: draining conns=5 name=\"news\"\n"]
        );
    }

    #[test]
    fn json_lines_carry_typed_fields_and_the_worker_span() {
        let lines = lines_of(true, || {
            tracing::warn!(conns = 5u64, ok = true, why = %"full", "refused");
        });
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with(r#"{"timestamp":"2025-11-26T05:00:00.000001Z","level":"WARN","fields":{"message":"refused","conns":5,"#),
            "{}",
            lines[0]
        );
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["timestamp"], "2025-11-26T05:00:00.000001Z");
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["fields"]["message"], "refused");
        assert_eq!(v["fields"]["conns"], 5);
        assert_eq!(v["fields"]["ok"], true);
        assert_eq!(v["fields"]["why"], "full");
        assert_eq!(
            v["span"],
            serde_json::json!({"n": 3, "pid": 1234, "name": "worker"})
        );
    }
}
