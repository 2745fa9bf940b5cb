//! One connection's state as it crosses a live upgrade beside its descriptor, and batches of
//! them. The server maps its own connection kinds onto `kind`; this module only carries bytes.

use super::SCOPE;
use crate::codec::{Reader, Result, Writer};

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
    /// The user the connection's token named (its `sub`), if any. Carried in the batch's
    /// named extras, not in the record's fixed fields (see [`ConnRecord::encode_batch`]).
    pub user: Option<String>,
    /// The `info` claim (JSON text) of a presence member. Carried in the batch's named
    /// extras like `user`.
    pub info: Option<String>,
    /// The connection's token in the old worker (slot and generation): the new worker puts it
    /// in the same slot with the same generation, so the connection keeps its id (the one its
    /// response head, its webhooks and the server API name it by). Carried in the batch's
    /// named extras (`tokens`); None from a binary that did not send it.
    pub token: Option<u64>,
}

impl ConnRecord {
    pub(super) fn write(&self, w: &mut Writer) {
        w.u8(self.kind)
            .bool(self.keep_alive)
            .u8(self.flags)
            .u8(self.edge)
            .u64(self.timer_ms);
        w.count(self.channels.len());
        for c in &self.channels {
            w.str(c);
        }
        w.bytes(&self.inbuf)
            .bytes(&self.out)
            .opt_u64(self.replay_after);
        w.opt_str(self.cors.as_deref())
            .bool(self.dashboard)
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

    /// A batch of records: a count, each record, then (only when one is needed) a named
    /// record of extras: `users`, `infos` and `tokens`, each a record whose field names are
    /// record positions and whose values are user ids (presence infos, tokens). Written by
    /// name so a binary that knows more extras can hand over to one that knows fewer; and a
    /// batch with no extras is byte for byte what binaries before the extras wrote and read,
    /// so an upgrade across them keeps working.
    pub fn encode_batch(records: &[ConnRecord]) -> Vec<u8> {
        ConnRecord::encode_batch_with(records, None)
    }

    /// As [`ConnRecord::encode_batch`], with the old worker's next connection generation in
    /// the extras (`next_generation`): the new worker counts on from there, so an id one of
    /// the old worker's connections had never names another connection.
    pub fn encode_batch_with(records: &[ConnRecord], next_generation: Option<u64>) -> Vec<u8> {
        let mut w = Writer::new();
        w.count(records.len());
        for rec in records {
            rec.write(&mut w);
        }
        let users = records.iter().any(|r| r.user.is_some());
        let infos = records.iter().any(|r| r.info.is_some());
        let tokens = records.iter().any(|r| r.token.is_some());
        if users || infos || tokens || next_generation.is_some() {
            w.record(|extras| {
                if let Some(g) = next_generation {
                    extras.u64("next_generation", g);
                }
                if users {
                    extras.record("users", |users| {
                        for (i, rec) in records.iter().enumerate() {
                            if let Some(user) = &rec.user {
                                users.str(&i.to_string(), user);
                            }
                        }
                    });
                }
                if infos {
                    extras.record("infos", |infos| {
                        for (i, rec) in records.iter().enumerate() {
                            if let Some(info) = &rec.info {
                                infos.str(&i.to_string(), info);
                            }
                        }
                    });
                }
                if tokens {
                    extras.record("tokens", |tokens| {
                        for (i, rec) in records.iter().enumerate() {
                            if let Some(token) = rec.token {
                                tokens.u64(&i.to_string(), token);
                            }
                        }
                    });
                }
            });
        }
        w.into_bytes()
    }

    pub fn decode_batch(data: &[u8]) -> Result<Vec<ConnRecord>> {
        ConnRecord::decode_batch_with(data).map(|(records, _)| records)
    }

    /// The records and the old worker's next generation, if it sent one.
    pub fn decode_batch_with(data: &[u8]) -> Result<(Vec<ConnRecord>, Option<u64>)> {
        let mut next_generation = None;
        let mut r = Reader::new(data, SCOPE);
        let n = r.count(30, "record count")?;
        let mut records = (0..n)
            .map(|_| ConnRecord::read(&mut r))
            .collect::<Result<Vec<_>>>()?;
        if !r.is_empty() {
            let bad_position = r.bad("users (a field name that is no record position)");
            r.record("batch extras")?.for_each(|extra| {
                if extra.name == "users" || extra.name == "infos" {
                    let users = extra.name == "users";
                    extra.record()?.for_each(|field| {
                        let at: usize = field.name.parse().map_err(|_| bad_position.clone())?;
                        let rec = records.get_mut(at).ok_or_else(|| bad_position.clone())?;
                        let value = Some(field.string()?);
                        if users {
                            rec.user = value;
                        } else {
                            rec.info = value;
                        }
                        Ok(())
                    })?;
                } else if extra.name == "next_generation" {
                    next_generation = Some(extra.u64()?);
                } else if extra.name == "tokens" {
                    extra.record()?.for_each(|field| {
                        let at: usize = field.name.parse().map_err(|_| bad_position.clone())?;
                        let rec = records.get_mut(at).ok_or_else(|| bad_position.clone())?;
                        rec.token = Some(field.u64()?);
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
        }
        r.end("record batch")?;
        Ok((records, next_generation))
    }
}
