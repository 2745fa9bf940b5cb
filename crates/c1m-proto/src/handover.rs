//! The live upgrade's hand-over wire format (docs/upgrade.md): what the old master tells the
//! new one (hello, hub state, commit), what an old worker sends its successor beside the file
//! descriptors (listener kinds, one record per connection), and the acknowledgements. No I/O
//! here: the sockets and SCM_RIGHTS are in `c1m-sys::fd_passing` and `c1m-server`.
//!
//! Every message starts with a tag byte; numbers are little-endian, byte strings carry a u32
//! length. [`FORMAT_VERSION`] is the first field of [`Control::Hello`] and of
//! [`Pair::Hello`] and is checked before anything else is decoded: a binary that reads a
//! different format refuses the hand-over instead of misreading it. Decoding never panics: a
//! short or malformed message is an `Err` naming what was bad.

use std::fmt;

/// Bumped whenever any message or record below changes shape.
pub const FORMAT_VERSION: u32 = 1;

/// Largest message on a worker pair socket (SOCK_SEQPACKET keeps each one whole; this stays
/// well under the default socket buffer). Longer data (a batch of records) is split into parts.
pub const MAX_PACKET: usize = 60 * 1024;

/// Descriptors handed over per batch (one sendmsg carries ≤ 253).
pub const FDS_PER_BATCH: usize = 200;

/// A hand-over message that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadRecord(pub String);

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hand-over: truncated or bad {}", self.0)
    }
}

impl std::error::Error for BadRecord {}

type Result<T> = std::result::Result<T, BadRecord>;

/// Old master ↔ new master (a Unix stream; each message is preceded by a u32 length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// Old → new, first: the format, the old master's pid and its worker count (the new one
    /// runs as many, paired by index) and the addresses it serves (port 0 already resolved).
    Hello {
        format: u32,
        old_pid: u32,
        workers: u32,
        listen: String,
        tcp_listen: Option<String>,
        admin_listen: Option<String>,
        /// The last of the `workers` is the control worker (it alone serves the admin
        /// listener). Sent as one trailing byte only when true, so a binary from before the
        /// control worker still reads every hello that does not have one.
        control_worker: bool,
    },
    /// New → old: format understood; this binary's pid and version.
    Accept { pid: u32, version: String },
    /// New → old: the hand-over cannot go on (format mismatch, bad configuration); why.
    Refuse { reason: String },
    /// Old → new: the hub, frozen (no publish is taken until the new master has it).
    Hub(Box<HubState>),
    /// New → old: hub taken, new workers started.
    HubTaken,
    /// Old → new: every connection is handed over; the new generation serves from now on.
    Commit,
    /// Old → new: the hand-over is off; the old generation keeps serving, the new one exits.
    Abort { reason: String },
}

/// The in-memory hub's ids and history, and the master's running totals that must not go
/// down across an upgrade.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubState {
    pub last_id: u64,
    pub forgotten_through: u64,
    pub channels: Vec<ChannelHistory>,
    /// Channel → indices of the workers with subscribers on it.
    pub interest: Vec<(String, Vec<u32>)>,
    pub published: u64,
    pub publish_refused: u64,
    pub upgrades_attempted: u64,
    pub upgrades_completed: u64,
    pub upgrades_failed: u64,
    /// (bucket, highest id) of the hub's buckets of forgotten channels that are not 0: what a
    /// channel the hub no longer tracks may have lost. Written only when not empty (an older
    /// binary, which reads no such field, can then still take the hub).
    pub lost_buckets: Vec<(u32, u64)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelHistory {
    pub name: String,
    pub forgotten_through: u64,
    /// (id, age in ms, payload), oldest first.
    pub messages: Vec<(u64, u64, Vec<u8>)>,
}

/// Old worker ↔ new worker (SOCK_SEQPACKET: one message per packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pair {
    /// New → old, first.
    Hello { format: u32 },
    /// Old → new: the listening sockets, one kind byte per attached descriptor
    /// ([`LISTENER_HTTP`], [`LISTENER_TCP`], [`LISTENER_ADMIN`]).
    Listeners { kinds: Vec<u8> },
    /// Old → new: part of a batch of connection records. The batch's descriptors ride on its
    /// first part, in record order; `last` closes the batch.
    Part { last: bool, data: Vec<u8> },
    /// Old → new: all batches sent; `conns` records in total.
    End { conns: u64 },
    /// New → old: all records rebuilt; nothing is touched until `Commit`.
    Received { conns: u64 },
    /// Old → new: serve them (the old worker exits next).
    Commit,
    /// Old → new: hand-over off; drop the copies without touching the connections.
    Abort,
}

pub const LISTENER_HTTP: u8 = 1;
pub const LISTENER_TCP: u8 = 2;
pub const LISTENER_ADMIN: u8 = 3;

/// One connection's state beside its descriptor. `kind` is the server's own code for what
/// the connection is doing (the server maps it; unknown codes are refused there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnRecord {
    pub kind: u8,
    pub keep_alive: bool,
    pub flags: u8,
    pub edge: u8,
    /// Milliseconds left on the connection's timer (0: none).
    pub timer_ms: u64,
    /// Channels subscribed, by name.
    pub channels: Vec<String>,
    /// Input read but not yet used (a half-read request or line, an unfinished frame).
    pub inbuf: Vec<u8>,
    /// Bytes owed to the client, in order (the unsent tail of its queue).
    pub out: Vec<u8>,
    /// A chunked replay waiting for its next chunk after this id.
    pub replay_after: Option<u64>,
    /// CORS headers owed on this connection's next answer.
    pub cors: Option<String>,
    /// A `/dashboard/events` stream.
    pub dashboard: bool,
    /// WebSocket mid-message: the decoder's state and the message so far.
    pub ws_decoder: Option<Vec<u8>>,
    pub ws_data: Vec<u8>,
}

// ---- encoding --------------------------------------------------------------------------------

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn tag(tag: u8) -> Writer {
        Writer(vec![tag])
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    fn opt_bytes(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            Some(b) => self.u8(1).bytes(b),
            None => self.u8(0),
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(n) => self.u8(1).u64(n),
            None => self.u8(0),
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The hand-over format version; another one is refused (the old master serves on).
    fn format_version(&mut self) -> Result<u32> {
        let format = self.u32("format")?;
        if format != FORMAT_VERSION {
            return Err(BadRecord(format!(
                "format version {format} (this binary reads {FORMAT_VERSION})"
            )));
        }
        Ok(format)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(BadRecord(what.to_string()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BadRecord(what.to_string())),
        }
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    fn bytes(&mut self, what: &str) -> Result<Vec<u8>> {
        let n = self.u32(what)? as usize;
        Ok(self.take(n, what)?.to_vec())
    }
    fn string(&mut self, what: &str) -> Result<String> {
        String::from_utf8(self.bytes(what)?).map_err(|_| BadRecord(what.to_string()))
    }
    fn opt_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>> {
        Ok(if self.bool(what)? {
            Some(self.bytes(what)?)
        } else {
            None
        })
    }
    fn opt_string(&mut self, what: &str) -> Result<Option<String>> {
        self.opt_bytes(what)?
            .map(|b| String::from_utf8(b).map_err(|_| BadRecord(what.to_string())))
            .transpose()
    }
    fn opt_u64(&mut self, what: &str) -> Result<Option<u64>> {
        Ok(if self.bool(what)? {
            Some(self.u64(what)?)
        } else {
            None
        })
    }
    /// A count of items each at least `min_size` bytes long: more than the rest could hold is
    /// refused before anything is allocated.
    fn count(&mut self, min_size: usize, what: &str) -> Result<usize> {
        let n = self.u32(what)? as usize;
        if n > self.0.len() / min_size.max(1) {
            return Err(BadRecord(what.to_string()));
        }
        Ok(n)
    }
    fn end(&self, what: &str) -> Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(BadRecord(format!("{what} (trailing bytes)")))
        }
    }
}

/// The format version a `Control::Hello` or `Pair::Hello` announces, read before the rest so
/// a mismatch is reported as such (not as a garbled message).
pub fn hello_format(msg: &[u8]) -> Option<u32> {
    match msg {
        [1, a, b, c, d, ..] => Some(u32::from_le_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

impl Control {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Control::Hello {
                format,
                old_pid,
                workers,
                listen,
                tcp_listen,
                admin_listen,
                control_worker,
            } => {
                let mut w = Writer::tag(1);
                w.u32(*format).u32(*old_pid).u32(*workers);
                w.bytes(listen.as_bytes())
                    .opt_bytes(tcp_listen.as_deref().map(str::as_bytes))
                    .opt_bytes(admin_listen.as_deref().map(str::as_bytes));
                if *control_worker {
                    w.u8(1);
                }
                w.0
            }
            Control::Accept { pid, version } => {
                let mut w = Writer::tag(2);
                w.u32(*pid).bytes(version.as_bytes());
                w.0
            }
            Control::Refuse { reason } => {
                let mut w = Writer::tag(3);
                w.bytes(reason.as_bytes());
                w.0
            }
            Control::Hub(h) => {
                let mut w = Writer::tag(4);
                w.u64(h.last_id).u64(h.forgotten_through);
                w.u32(h.channels.len() as u32);
                for ch in &h.channels {
                    w.bytes(ch.name.as_bytes()).u64(ch.forgotten_through);
                    w.u32(ch.messages.len() as u32);
                    for (id, age, payload) in &ch.messages {
                        w.u64(*id).u64(*age).bytes(payload);
                    }
                }
                w.u32(h.interest.len() as u32);
                for (name, workers) in &h.interest {
                    w.bytes(name.as_bytes()).u32(workers.len() as u32);
                    for i in workers {
                        w.u32(*i);
                    }
                }
                w.u64(h.published).u64(h.publish_refused);
                w.u64(h.upgrades_attempted)
                    .u64(h.upgrades_completed)
                    .u64(h.upgrades_failed);
                if !h.lost_buckets.is_empty() {
                    w.u32(h.lost_buckets.len() as u32);
                    for (bucket, id) in &h.lost_buckets {
                        w.u32(*bucket).u64(*id);
                    }
                }
                w.0
            }
            Control::HubTaken => vec![5],
            Control::Commit => vec![6],
            Control::Abort { reason } => {
                let mut w = Writer::tag(7);
                w.bytes(reason.as_bytes());
                w.0
            }
        }
    }

    pub fn decode(msg: &[u8]) -> Result<Control> {
        let mut r = Reader(msg);
        let out = match r.u8("tag")? {
            1 => {
                let format = r.format_version()?;
                Control::Hello {
                    format,
                    old_pid: r.u32("pid")?,
                    workers: r.u32("workers")?,
                    listen: r.string("listen")?,
                    tcp_listen: r.opt_string("tcp listen")?,
                    admin_listen: r.opt_string("admin listen")?,
                    control_worker: !r.0.is_empty() && r.bool("control worker")?,
                }
            }
            2 => Control::Accept {
                pid: r.u32("pid")?,
                version: r.string("version")?,
            },
            3 => Control::Refuse {
                reason: r.string("reason")?,
            },
            4 => {
                let mut h = HubState {
                    last_id: r.u64("last id")?,
                    forgotten_through: r.u64("forgotten")?,
                    ..Default::default()
                };
                for _ in 0..r.count(16, "channel count")? {
                    let mut ch = ChannelHistory {
                        name: r.string("channel")?,
                        forgotten_through: r.u64("channel forgotten")?,
                        messages: Vec::new(),
                    };
                    for _ in 0..r.count(20, "message count")? {
                        ch.messages
                            .push((r.u64("id")?, r.u64("age")?, r.bytes("payload")?));
                    }
                    h.channels.push(ch);
                }
                for _ in 0..r.count(8, "interest count")? {
                    let name = r.string("interest channel")?;
                    let n = r.count(4, "interest workers")?;
                    let workers = (0..n)
                        .map(|_| r.u32("worker"))
                        .collect::<Result<Vec<_>>>()?;
                    h.interest.push((name, workers));
                }
                h.published = r.u64("published")?;
                h.publish_refused = r.u64("refused")?;
                h.upgrades_attempted = r.u64("attempted")?;
                h.upgrades_completed = r.u64("completed")?;
                h.upgrades_failed = r.u64("failed")?;
                if !r.0.is_empty() {
                    for _ in 0..r.count(12, "lost bucket count")? {
                        h.lost_buckets
                            .push((r.u32("lost bucket")?, r.u64("lost bucket id")?));
                    }
                }
                Control::Hub(Box::new(h))
            }
            5 => Control::HubTaken,
            6 => Control::Commit,
            7 => Control::Abort {
                reason: r.string("reason")?,
            },
            _ => return Err(BadRecord("control tag".into())),
        };
        r.end("control message")?;
        Ok(out)
    }
}

impl Pair {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Pair::Hello { format } => {
                let mut w = Writer::tag(1);
                w.u32(*format);
                w.0
            }
            Pair::Listeners { kinds } => {
                let mut w = Writer::tag(2);
                w.bytes(kinds);
                w.0
            }
            Pair::Part { last, data } => {
                let mut w = Writer::tag(3);
                w.u8(u8::from(*last)).bytes(data);
                w.0
            }
            Pair::End { conns } => {
                let mut w = Writer::tag(4);
                w.u64(*conns);
                w.0
            }
            Pair::Received { conns } => {
                let mut w = Writer::tag(5);
                w.u64(*conns);
                w.0
            }
            Pair::Commit => vec![6],
            Pair::Abort => vec![7],
        }
    }

    pub fn decode(msg: &[u8]) -> Result<Pair> {
        let mut r = Reader(msg);
        let out = match r.u8("tag")? {
            1 => {
                let format = r.format_version()?;
                Pair::Hello { format }
            }
            2 => Pair::Listeners {
                kinds: r.bytes("listener kinds")?,
            },
            3 => Pair::Part {
                last: r.bool("last")?,
                data: r.bytes("part")?,
            },
            4 => Pair::End {
                conns: r.u64("count")?,
            },
            5 => Pair::Received {
                conns: r.u64("count")?,
            },
            6 => Pair::Commit,
            7 => Pair::Abort,
            _ => return Err(BadRecord("pair tag".into())),
        };
        r.end("pair message")?;
        Ok(out)
    }

    /// Splits an encoded batch into parts that each fit a packet.
    pub fn parts(batch: &[u8]) -> Vec<Pair> {
        let room = MAX_PACKET - 16;
        let mut parts: Vec<Pair> = batch
            .chunks(room)
            .map(|c| Pair::Part {
                last: false,
                data: c.to_vec(),
            })
            .collect();
        if parts.is_empty() {
            parts.push(Pair::Part {
                last: false,
                data: Vec::new(),
            });
        }
        if let Some(Pair::Part { last, .. }) = parts.last_mut() {
            *last = true;
        }
        parts
    }
}

impl ConnRecord {
    fn write(&self, w: &mut Writer) {
        w.u8(self.kind)
            .u8(u8::from(self.keep_alive))
            .u8(self.flags)
            .u8(self.edge)
            .u64(self.timer_ms);
        w.u32(self.channels.len() as u32);
        for c in &self.channels {
            w.bytes(c.as_bytes());
        }
        w.bytes(&self.inbuf)
            .bytes(&self.out)
            .opt_u64(self.replay_after);
        w.opt_bytes(self.cors.as_deref().map(str::as_bytes))
            .u8(u8::from(self.dashboard))
            .opt_bytes(self.ws_decoder.as_deref())
            .bytes(&self.ws_data);
    }

    fn read(r: &mut Reader) -> Result<ConnRecord> {
        let mut rec = ConnRecord {
            kind: r.u8("kind")?,
            keep_alive: r.bool("keep-alive")?,
            flags: r.u8("flags")?,
            edge: r.u8("edge")?,
            timer_ms: r.u64("timer")?,
            ..Default::default()
        };
        for _ in 0..r.count(4, "channel count")? {
            rec.channels.push(r.string("channel")?);
        }
        rec.inbuf = r.bytes("inbuf")?;
        rec.out = r.bytes("out")?;
        rec.replay_after = r.opt_u64("replay")?;
        rec.cors = r.opt_string("cors")?;
        rec.dashboard = r.bool("dashboard")?;
        rec.ws_decoder = r.opt_bytes("ws decoder")?;
        rec.ws_data = r.bytes("ws data")?;
        Ok(rec)
    }

    /// A batch of records: a count, then each record.
    pub fn encode_batch(records: &[ConnRecord]) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(records.len() as u32);
        for rec in records {
            rec.write(&mut w);
        }
        w.0
    }

    pub fn decode_batch(data: &[u8]) -> Result<Vec<ConnRecord>> {
        let mut r = Reader(data);
        let n = r.count(30, "record count")?;
        let records = (0..n)
            .map(|_| ConnRecord::read(&mut r))
            .collect::<Result<Vec<_>>>()?;
        r.end("record batch")?;
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ConnRecord {
        ConnRecord {
            kind: 9,
            keep_alive: true,
            flags: 5,
            edge: 2,
            timer_ms: 1234,
            channels: vec!["a".into(), "news/β".into()],
            inbuf: b"GET / HT".to_vec(),
            out: b"data: x\n\n".to_vec(),
            replay_after: Some(77),
            cors: Some("Access-Control-Allow-Origin: *\r\n".into()),
            dashboard: false,
            ws_decoder: Some(vec![1, 2, 3]),
            ws_data: b"half".to_vec(),
        }
    }

    fn controls() -> Vec<Control> {
        vec![
            Control::Hello {
                format: FORMAT_VERSION,
                old_pid: 42,
                workers: 3,
                listen: "127.0.0.1:80".into(),
                tcp_listen: Some("127.0.0.1:81".into()),
                admin_listen: None,
                control_worker: false,
            },
            Control::Hello {
                format: FORMAT_VERSION,
                old_pid: 42,
                workers: 4,
                listen: "127.0.0.1:80".into(),
                tcp_listen: None,
                admin_listen: Some("127.0.0.1:82".into()),
                control_worker: true,
            },
            Control::Accept {
                pid: 7,
                version: "0.1.0 (commit x)".into(),
            },
            Control::Refuse {
                reason: "no".into(),
            },
            Control::Hub(Box::new(HubState {
                last_id: 9,
                forgotten_through: 3,
                channels: vec![ChannelHistory {
                    name: "c".into(),
                    forgotten_through: 4,
                    messages: vec![(5, 10, b"p".to_vec()), (9, 0, Vec::new())],
                }],
                interest: vec![("c".into(), vec![0, 2])],
                published: 6,
                publish_refused: 1,
                upgrades_attempted: 2,
                upgrades_completed: 1,
                upgrades_failed: 1,
                lost_buckets: vec![(7, 3)],
            })),
            Control::HubTaken,
            Control::Commit,
            Control::Abort {
                reason: "timeout".into(),
            },
        ]
    }

    fn pairs() -> Vec<Pair> {
        vec![
            Pair::Hello {
                format: FORMAT_VERSION,
            },
            Pair::Listeners {
                kinds: vec![LISTENER_HTTP, LISTENER_TCP],
            },
            Pair::Part {
                last: true,
                data: vec![1, 2],
            },
            Pair::End { conns: 3 },
            Pair::Received { conns: 3 },
            Pair::Commit,
            Pair::Abort,
        ]
    }

    #[test]
    fn round_trips() {
        for c in controls() {
            assert_eq!(Control::decode(&c.encode()).unwrap(), c);
        }
        for p in pairs() {
            assert_eq!(Pair::decode(&p.encode()).unwrap(), p);
        }
        let batch = vec![record(), ConnRecord::default(), record()];
        let bytes = ConnRecord::encode_batch(&batch);
        assert_eq!(ConnRecord::decode_batch(&bytes).unwrap(), batch);
        // A batch larger than a packet is split and joins back to the same bytes.
        let big = vec![0xabu8; 3 * MAX_PACKET];
        let parts = Pair::parts(&big);
        assert!(parts.len() >= 3);
        let mut joined = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let encoded = p.encode();
            assert!(encoded.len() <= MAX_PACKET);
            let Pair::Part { last, data } = Pair::decode(&encoded).unwrap() else {
                panic!("not a part")
            };
            assert_eq!(last, i == parts.len() - 1);
            joined.extend(data);
        }
        assert_eq!(joined, big);
    }

    /// Decodes all of `buf` with `dec`, returning every event with its unmasked bytes.
    fn decode_all(dec: &mut crate::ws::frame::Decoder, buf: &[u8]) -> Vec<(String, Vec<u8>)> {
        let limits = crate::ws::frame::Limits::default();
        let mut buf = buf.to_vec();
        let mut out = Vec::new();
        let mut at = 0;
        while at < buf.len() {
            let d = dec.decode(&mut buf[at..], &limits).unwrap();
            if let Some(crate::ws::frame::Event::Data { payload, fin, .. }) = &d.event {
                let bytes = buf[at..][payload.clone()].to_vec();
                out.push((format!("fin={fin}"), bytes));
            }
            if d.consumed == 0 {
                break;
            }
            at += d.consumed;
        }
        out
    }

    #[test]
    fn a_websocket_decoder_mid_frame_carries_over() {
        use crate::ws::frame::Decoder;
        // A masked text frame (no FIN: the message goes on) whose payload splits "é".
        let text = "caf\u{e9} au lait".as_bytes();
        let mask = [0x11, 0x22, 0x33, 0x44];
        let mut frame = vec![0x01, 0x80 | text.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(text.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        let split = 6 + 4; // header + "caf" + the first byte of "é"
        let mut old = Decoder::default();
        let first = decode_all(&mut old, &frame[..split]);
        assert_eq!(first, vec![("fin=false".to_string(), b"caf\xc3".to_vec())]);
        let state = old.to_bytes();
        assert_eq!(state.len(), Decoder::STATE_LEN);
        let mut carried = Decoder::from_bytes(&state).unwrap();
        assert_eq!(carried, old);
        // The rest decodes the same in the carried decoder as in the original.
        let rest_old = decode_all(&mut old, &frame[split..]);
        let rest_new = decode_all(&mut carried, &frame[split..]);
        assert_eq!(rest_new, rest_old);
        assert_eq!(rest_new[0].1, text[4..].to_vec());
        // Bytes no decoder state has are refused.
        assert!(Decoder::from_bytes(&state[..10]).is_none());
        let mut bad = state.clone();
        bad[21] = 9;
        assert!(Decoder::from_bytes(&bad).is_none());
        let mut bad = state;
        bad[20] = 200;
        assert!(Decoder::from_bytes(&bad).is_none());
    }

    #[test]
    fn another_format_version_is_refused_by_name() {
        let mut hello = controls().remove(0).encode();
        assert_eq!(hello_format(&hello), Some(FORMAT_VERSION));
        hello[1..5].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let err = Control::decode(&hello).unwrap_err().to_string();
        assert!(err.contains("format version 2"), "{err}");
        let mut pair = pairs().remove(0).encode();
        pair[1..5].copy_from_slice(&99u32.to_le_bytes());
        assert!(Pair::decode(&pair).is_err());
    }

    #[test]
    fn truncated_or_garbage_messages_are_errors_not_panics() {
        let mut all: Vec<Vec<u8>> = controls().iter().map(Control::encode).collect();
        all.extend(pairs().iter().map(Pair::encode));
        for msg in &all {
            // A hello without its trailing control-worker byte is an older binary's hello.
            let optional_tail = matches!(
                Control::decode(msg),
                Ok(Control::Hello {
                    control_worker: true,
                    ..
                })
            );
            // A hub without its trailing lost buckets is one that lost no channel's record.
            let buckets_tail = match Control::decode(msg) {
                Ok(Control::Hub(h)) if !h.lost_buckets.is_empty() => 4 + 12 * h.lost_buckets.len(),
                _ => 0,
            };
            for cut in 0..msg.len() {
                let older_hello = optional_tail && cut == msg.len() - 1;
                let no_buckets = buckets_tail > 0 && cut == msg.len() - buckets_tail;
                assert!(
                    Control::decode(&msg[..cut]).is_err() || cut == 1 || older_hello || no_buckets
                );
                let _ = Pair::decode(&msg[..cut]);
            }
        }
        let batch = ConnRecord::encode_batch(&[record(), record()]);
        for cut in 0..batch.len() {
            assert!(
                ConnRecord::decode_batch(&batch[..cut]).is_err(),
                "cut {cut}"
            );
        }
        // Trailing garbage, huge counts and bad booleans are refused.
        let mut long = batch.clone();
        long.push(0);
        assert!(ConnRecord::decode_batch(&long).is_err());
        assert!(ConnRecord::decode_batch(&[0xff, 0xff, 0xff, 0xff]).is_err());
        let mut bad_bool = ConnRecord::encode_batch(&[record()]);
        bad_bool[5] = 9; // keep_alive
        assert!(ConnRecord::decode_batch(&bad_bool).is_err());
        // Pseudo-random garbage never panics.
        let mut x: u32 = 12345;
        for _ in 0..2000 {
            let len = (x % 64) as usize;
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            let _ = Control::decode(&junk);
            let _ = Pair::decode(&junk);
            let _ = ConnRecord::decode_batch(&junk);
        }
    }
}
