//! The webhook spool: a directory of segment files, each one POST body (a JSON object with an
//! `events` array) named `<unix ns, 20 digits>-<pid>-<seq>-<events>.json`, so names sort
//! oldest first and two masters sharing the directory during a live upgrade never pick the
//! same name. A segment is written to a temporary name and renamed, so a reader sees whole
//! segments only; it is removed once the backend acknowledged it. Past the byte limit the
//! oldest segments go first (the caller counts and logs them).
//!
//! Files are not fsynced: a killed process loses nothing (the page cache keeps them), a
//! power loss may lose the last seconds.

use anyhow::Context;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A temporary file older than this is a leftover of a process that died mid-write.
const STALE_TMP: Duration = Duration::from_secs(60);
/// How often the directory is listed again for segments another master wrote.
const RESCAN_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct Segment {
    pub name: String,
    pub bytes: u64,
    pub events: u64,
}

pub struct Spool {
    dir: PathBuf,
    segments: BTreeMap<String, Segment>,
    bytes: u64,
    seq: u64,
    scanned: Instant,
}

impl Spool {
    /// Opens (creating it if needed) the spool directory and lists what it holds.
    pub fn open(dir: &Path) -> anyhow::Result<Spool> {
        Spool::open_as(dir, 0)
    }

    /// As [`Spool::open`], for a second writer in the same process: its segment numbers
    /// start after `seq_base`, so the two never pick the same name.
    pub fn open_as(dir: &Path, seq_base: u64) -> anyhow::Result<Spool> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the webhook spool {}", dir.display()))?;
        let mut spool = Spool {
            dir: dir.to_path_buf(),
            segments: BTreeMap::new(),
            bytes: 0,
            seq: seq_base,
            scanned: Instant::now(),
        };
        spool
            .scan(true)
            .with_context(|| format!("reading the webhook spool {}", dir.display()))?;
        // A probe write, so an unwritable directory stops the start, not the first event.
        let probe = dir.join(format!(".probe-{}", std::process::id()));
        std::fs::write(&probe, b"")
            .with_context(|| format!("writing to the webhook spool {}", dir.display()))?;
        let _ = std::fs::remove_file(&probe);
        Ok(spool)
    }

    /// Lists the directory: adds segments written by another master, forgets removed ones.
    fn scan(&mut self, remove_stale: bool) -> io::Result<()> {
        let mut found = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp-") {
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_TMP);
                if remove_stale && old {
                    let _ = std::fs::remove_file(entry.path());
                }
                continue;
            }
            let Some(events) = events_in_name(&name) else {
                continue;
            };
            let bytes = match entry.metadata() {
                Ok(m) => m.len(),
                Err(_) => continue,
            };
            found.insert(
                name.clone(),
                Segment {
                    name,
                    bytes,
                    events,
                },
            );
        }
        self.bytes = found.values().map(|s| s.bytes).sum();
        self.segments = found;
        self.scanned = Instant::now();
        Ok(())
    }

    /// Lists again if it has been a while (a live upgrade's other master may have written).
    pub fn rescan_if_due(&mut self) {
        if self.scanned.elapsed() >= RESCAN_EVERY {
            if let Err(e) = self.scan(false) {
                tracing::warn!(dir = %self.dir.display(), error = %e, "webhook spool: listing failed");
            }
        }
    }

    /// Writes one segment holding `events` (each a JSON object).
    pub fn append(&mut self, events: &[String]) -> io::Result<()> {
        let mut body = String::from(BODY_HEAD);
        for (i, e) in events.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(e);
        }
        body.push_str(BODY_TAIL);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        self.seq += 1;
        let name = format!(
            "{nanos:020}-{}-{:08}-{}.json",
            std::process::id(),
            self.seq,
            events.len()
        );
        let tmp = self.dir.join(format!(".tmp-{name}"));
        let write = || -> io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(body.as_bytes())?;
            std::fs::rename(&tmp, self.dir.join(&name))
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.bytes += body.len() as u64;
        self.segments.insert(
            name.clone(),
            Segment {
                name,
                bytes: body.len() as u64,
                events: events.len() as u64,
            },
        );
        Ok(())
    }

    /// The oldest segment and its body; a segment whose file is gone (another master sent
    /// it) is forgotten and the next one tried.
    pub fn oldest(&mut self) -> Option<(Segment, Vec<u8>)> {
        loop {
            let seg = self.segments.values().next()?.clone();
            match std::fs::read(self.dir.join(&seg.name)) {
                Ok(body) => return Some((seg, body)),
                Err(_) => self.forget(&seg.name),
            }
        }
    }

    /// The oldest segments that fit one POST together (at most `max_events` events and
    /// `max_bytes` bytes, always at least the oldest one), as one `{"events":[…]}` body: a
    /// trickle of events writes many small segments, and one POST per segment would leave the
    /// spool growing behind a backend that takes 100 ms per request.
    pub fn oldest_run(
        &mut self,
        max_events: u64,
        max_bytes: usize,
    ) -> Option<(Vec<Segment>, Vec<u8>)> {
        let (first, body) = self.oldest()?;
        let Some(mut events) = events_of(&body).map(<[u8]>::to_vec) else {
            return Some((vec![first], body)); // not this writer's shape: it goes alone
        };
        let mut count = first.events;
        let mut run = vec![first];
        // Each segment holds at least one event, so no more than `max_events` can join.
        let next: Vec<Segment> = (self.segments.values().skip(1))
            .take(max_events as usize)
            .cloned()
            .collect();
        for seg in next {
            if count + seg.events > max_events || events.len() + seg.bytes as usize > max_bytes {
                break;
            }
            let Ok(body) = std::fs::read(self.dir.join(&seg.name)) else {
                break; // gone (another master sent it): the next call forgets it
            };
            let Some(more) = events_of(&body) else {
                break;
            };
            events.push(b',');
            events.extend_from_slice(more);
            count += seg.events;
            run.push(seg);
        }
        let mut merged = BODY_HEAD.as_bytes().to_vec();
        merged.extend_from_slice(&events);
        merged.extend_from_slice(BODY_TAIL.as_bytes());
        Some((run, merged))
    }

    fn forget(&mut self, name: &str) {
        if let Some(seg) = self.segments.remove(name) {
            self.bytes -= seg.bytes;
        }
    }

    /// Removes a segment (acknowledged, or dropped past the limit).
    pub fn remove(&mut self, name: &str) {
        let _ = std::fs::remove_file(self.dir.join(name));
        self.forget(name);
    }

    /// Drops the oldest segments until the spool holds at most `max` bytes: the segments
    /// dropped, oldest first.
    pub fn enforce(&mut self, max: u64) -> Vec<Segment> {
        let mut dropped = Vec::new();
        while self.bytes > max {
            let Some(seg) = self.segments.values().next().cloned() else {
                break;
            };
            self.remove(&seg.name);
            dropped.push(seg);
        }
        dropped
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

/// A segment body is `BODY_HEAD`, the events separated by commas, `BODY_TAIL`.
const BODY_HEAD: &str = "{\"events\":[";
const BODY_TAIL: &str = "]}\n";

/// The comma-separated events inside a segment body, as `append` writes it.
fn events_of(body: &[u8]) -> Option<&[u8]> {
    let inner = body
        .strip_prefix(BODY_HEAD.as_bytes())?
        .strip_suffix(BODY_TAIL.as_bytes())?;
    (!inner.is_empty()).then_some(inner)
}

/// The event count a segment's name ends with (`None`: not a segment).
fn events_in_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".json")?;
    let mut parts = stem.split('-');
    let nanos = parts.next()?;
    let (pid, seq, events) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || nanos.len() != 20 {
        return None;
    }
    if !(nanos.bytes().all(|b| b.is_ascii_digit())
        && pid.parse::<u32>().is_ok()
        && seq.parse::<u64>().is_ok())
    {
        return None;
    }
    events.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("c1m-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn segments_survive_a_reopen_and_leave_oldest_first() {
        let d = dir("reopen");
        let mut s = Spool::open(&d).unwrap();
        s.append(&["{\"id\":\"a\"}".into()]).unwrap();
        s.append(&["{\"id\":\"b\"}".into(), "{\"id\":\"c\"}".into()])
            .unwrap();
        std::fs::write(d.join("unrelated.txt"), "x").unwrap();
        let mut s = Spool::open(&d).unwrap();
        let (seg, body) = s.oldest().unwrap();
        assert_eq!(seg.events, 1);
        assert_eq!(body, b"{\"events\":[{\"id\":\"a\"}]}\n");
        s.remove(&seg.name);
        let (seg, body) = s.oldest().unwrap();
        assert_eq!(seg.events, 2);
        assert_eq!(s.bytes(), body.len() as u64);
        s.remove(&seg.name);
        assert!(s.oldest().is_none());
        assert_eq!(s.bytes(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn small_segments_go_out_together_within_the_batch_limits() {
        let d = dir("run");
        let mut spool = Spool::open(&d).unwrap();
        for i in 0..5 {
            spool.append(&[format!("{{\"n\":{i}}}")]).unwrap();
        }
        let (run, body) = spool.oldest_run(3, 1 << 20).unwrap();
        assert_eq!(run.len(), 3, "at most 3 events per POST");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["events"],
            serde_json::json!([{"n": 0}, {"n": 1}, {"n": 2}])
        );
        for seg in &run {
            spool.remove(&seg.name);
        }
        let (run, body) = spool.oldest_run(100, 1 << 20).unwrap();
        assert_eq!(run.len(), 2);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["events"], serde_json::json!([{"n": 3}, {"n": 4}]));
        // A byte limit below two segments still sends the oldest one alone.
        let (run, _) = spool.oldest_run(100, 1).unwrap();
        assert_eq!(run.len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn past_the_limit_the_oldest_go() {
        let d = dir("limit");
        let mut s = Spool::open(&d).unwrap();
        for i in 0..5 {
            s.append(&[format!("{{\"id\":\"{i}\"}}")]).unwrap();
        }
        let one = s.bytes() / 5;
        let dropped = s.enforce(one * 2);
        assert_eq!(dropped.len(), 3);
        let (_, body) = s.oldest().unwrap();
        assert!(String::from_utf8(body).unwrap().contains("\"3\""));
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn names_are_parsed_strictly() {
        assert_eq!(
            events_in_name("00000000000000000001-12-00000001-7.json"),
            Some(7)
        );
        assert_eq!(events_in_name("1-12-1-7.json"), None);
        assert_eq!(
            events_in_name(".tmp-00000000000000000001-12-00000001-7.json"),
            None
        );
        assert_eq!(
            events_in_name("00000000000000000001-12-00000001-7.txt"),
            None
        );
    }
}
