//! The one binary codec the gateway's internal formats share: the master ↔ worker link
//! (`c1m-server`'s ipc) and the live upgrade's hand-over (the `handover` module). It owns the
//! primitive encodings (little-endian numbers, byte strings with a u32 length, u32 counts,
//! optional values), the bounds checks every read makes, and named records: a struct sent
//! field by field as (name, value) pairs, so a field added or removed on one side cannot shift
//! the others (the reader ignores names it does not know, and the caller defaults missing ones).
//!
//! No I/O and no knowledge of the messages: each format names its own tags (see [`crate::wire_tags!`])
//! and its own error scope. Decoding never panics and never allocates from a length it has not
//! checked against the bytes actually there: a short or malformed input is a [`DecodeError`]
//! that says which format and which field.

use std::fmt;

/// Why some bytes could not be decoded: the format (`scope`, e.g. "ipc") and the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub scope: &'static str,
    pub what: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: truncated or bad {}", self.scope, self.what)
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for std::io::Error {
    fn from(e: DecodeError) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

pub type Result<T> = std::result::Result<T, DecodeError>;

/// Declares a `#[repr(u8)]` enum of message tags and its `TryFrom<u8>`, so each tag number is
/// written once: encoders write `Tag::X as u8`, decoders match on `Tag::try_from(byte)`.
/// (The compiler refuses two variants with the same number.)
#[macro_export]
macro_rules! wire_tags {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $value,)*
        }

        impl TryFrom<u8> for $name {
            type Error = u8;
            fn try_from(byte: u8) -> ::std::result::Result<$name, u8> {
                match byte {
                    $($value => Ok($name::$variant),)*
                    other => Err(other),
                }
            }
        }
    };
}

/// Value kinds inside a named record; each is self-delimiting, so a reader can skip a field
/// whose name it does not know.
const KIND_U64: u8 = 0;
const KIND_BYTES: u8 = 1;
const KIND_RECORD: u8 = 2;

/// Appends encoded values to a byte vector.
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    pub fn new() -> Writer {
        Writer(Vec::new())
    }

    /// A message that starts with its tag byte.
    pub fn tag(tag: u8) -> Writer {
        Writer(vec![tag])
    }

    /// A frame for a stream: a u32 length (filled in by [`Writer::into_frame`]), then the tag.
    pub fn frame(tag: u8) -> Writer {
        Writer(vec![0, 0, 0, 0, tag])
    }

    /// The bytes written so far.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// The frame begun with [`Writer::frame`], its length prefix set to the body's length.
    pub fn into_frame(mut self) -> Vec<u8> {
        let len = (self.0.len() - 4) as u32;
        self.0[..4].copy_from_slice(&len.to_le_bytes());
        self.0
    }

    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A count of the items that follow (read back with [`Reader::count`]).
    pub fn count(&mut self, n: usize) -> &mut Self {
        self.u32(n as u32)
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }
    pub fn opt_bytes(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            Some(b) => self.u8(1).bytes(b),
            None => self.u8(0),
        }
    }
    pub fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        self.opt_bytes(v.map(str::as_bytes))
    }
    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(n) => self.u8(1).u64(n),
            None => self.u8(0),
        }
    }

    /// A named record: `fill` writes its fields; read back with [`Reader::record`].
    pub fn record(&mut self, fill: impl FnOnce(&mut RecordWriter)) -> &mut Self {
        let at = self.0.len();
        self.u32(0);
        fill(&mut RecordWriter(self));
        let len = (self.0.len() - at - 4) as u32;
        self.0[at..at + 4].copy_from_slice(&len.to_le_bytes());
        self
    }
}

/// Writes the (name, value) fields of a record. Zero, empty and empty-record values are left
/// out: the reader defaults a missing field, so they read back the same and cost nothing.
pub struct RecordWriter<'w>(&'w mut Writer);

impl RecordWriter<'_> {
    pub fn u64(&mut self, name: &str, v: u64) -> &mut Self {
        if v != 0 {
            self.0.str(name).u8(KIND_U64).u64(v);
        }
        self
    }
    pub fn bool(&mut self, name: &str, v: bool) -> &mut Self {
        self.u64(name, u64::from(v))
    }
    pub fn bytes(&mut self, name: &str, v: &[u8]) -> &mut Self {
        if !v.is_empty() {
            self.0.str(name).u8(KIND_BYTES).bytes(v);
        }
        self
    }
    pub fn str(&mut self, name: &str, v: &str) -> &mut Self {
        self.bytes(name, v.as_bytes())
    }
    /// A nested record (left out when `fill` writes no field).
    pub fn record(&mut self, name: &str, fill: impl FnOnce(&mut RecordWriter)) -> &mut Self {
        let start = self.0 .0.len();
        self.0.str(name).u8(KIND_RECORD);
        let body = self.0 .0.len() + 4;
        self.0.record(fill);
        if self.0 .0.len() == body {
            self.0 .0.truncate(start);
        }
        self
    }
}

/// Reads encoded values from a byte slice; every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    scope: &'static str,
}

impl<'a> Reader<'a> {
    /// `scope` names the format in errors ("ipc", "hand-over").
    pub fn new(buf: &'a [u8], scope: &'static str) -> Reader<'a> {
        Reader { buf, scope }
    }

    /// An error about `what` in this reader's format.
    pub fn bad(&self, what: impl Into<String>) -> DecodeError {
        DecodeError {
            scope: self.scope,
            what: what.into(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(self.bad(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    /// Strictly 0 or 1: any other byte is a malformed input, not "true".
    pub fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.bad(what)),
        }
    }
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }
    pub fn bytes_ref(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub fn bytes(&mut self, what: &str) -> Result<Vec<u8>> {
        Ok(self.bytes_ref(what)?.to_vec())
    }
    pub fn string(&mut self, what: &str) -> Result<String> {
        String::from_utf8(self.bytes(what)?).map_err(|_| self.bad(what))
    }
    pub fn opt_bytes(&mut self, what: &str) -> Result<Option<Vec<u8>>> {
        Ok(if self.bool(what)? {
            Some(self.bytes(what)?)
        } else {
            None
        })
    }
    pub fn opt_string(&mut self, what: &str) -> Result<Option<String>> {
        self.opt_bytes(what)?
            .map(|b| String::from_utf8(b).map_err(|_| self.bad(what)))
            .transpose()
    }
    pub fn opt_u64(&mut self, what: &str) -> Result<Option<u64>> {
        Ok(if self.bool(what)? {
            Some(self.u64(what)?)
        } else {
            None
        })
    }
    /// A count of items each at least `min_size` bytes long: more than the rest could hold is
    /// refused before anything is allocated.
    pub fn count(&mut self, min_size: usize, what: &str) -> Result<usize> {
        let n = self.u32(what)? as usize;
        if n > self.buf.len() / min_size.max(1) {
            return Err(self.bad(what));
        }
        Ok(n)
    }
    /// Nothing may follow the message.
    pub fn end(&self, what: &str) -> Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.bad(format!("{what} (trailing bytes)")))
        }
    }

    /// A named record written by [`Writer::record`]: its fields, in the order written.
    pub fn record(&mut self, what: &str) -> Result<Fields<'a>> {
        let body = self.bytes_ref(what)?;
        Ok(Fields(Reader::new(body, self.scope)))
    }
}

/// One field's value in a named record.
#[derive(Debug, Clone)]
pub enum Value<'a> {
    U64(u64),
    Bytes(&'a [u8]),
    Record(Fields<'a>),
}

/// One (name, value) of a named record; the typed getters refuse a value of another kind
/// (that is the sender's bug, not a field to skip).
#[derive(Debug, Clone)]
pub struct Field<'a> {
    pub name: &'a str,
    pub value: Value<'a>,
    scope: &'static str,
}

impl<'a> Field<'a> {
    fn wrong(&self, kind: &str) -> DecodeError {
        DecodeError {
            scope: self.scope,
            what: format!("field {} (not {kind})", self.name),
        }
    }
    pub fn u64(&self) -> Result<u64> {
        match self.value {
            Value::U64(v) => Ok(v),
            _ => Err(self.wrong("a number")),
        }
    }
    pub fn u32(&self) -> Result<u32> {
        u32::try_from(self.u64()?).map_err(|_| self.wrong("a 32-bit number"))
    }
    pub fn bool(&self) -> Result<bool> {
        match self.u64()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.wrong("a boolean")),
        }
    }
    pub fn string(&self) -> Result<String> {
        match self.value {
            Value::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| self.wrong("UTF-8")),
            _ => Err(self.wrong("a string")),
        }
    }
    pub fn record(&self) -> Result<Fields<'a>> {
        match &self.value {
            Value::Record(f) => Ok(f.clone()),
            _ => Err(self.wrong("a record")),
        }
    }
}

/// The fields of a named record, in the order written.
#[derive(Debug, Clone)]
pub struct Fields<'a>(Reader<'a>);

impl<'a> Fields<'a> {
    /// The next field, or None at the record's end.
    pub fn next_field(&mut self) -> Result<Option<Field<'a>>> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let name = self.0.bytes_ref("field name")?;
        let name = std::str::from_utf8(name).map_err(|_| self.0.bad("field name"))?;
        let value = match self.0.u8("field kind")? {
            KIND_U64 => Value::U64(self.0.u64(name)?),
            KIND_BYTES => Value::Bytes(self.0.bytes_ref(name)?),
            KIND_RECORD => Value::Record(self.0.record(name)?),
            _ => return Err(self.0.bad(format!("field {name} (unknown kind)"))),
        };
        Ok(Some(Field {
            name,
            value,
            scope: self.0.scope,
        }))
    }

    /// Calls `each` for every field; `each` ignores the names it does not know.
    pub fn for_each(mut self, mut each: impl FnMut(Field<'a>) -> Result<()>) -> Result<()> {
        while let Some(field) = self.next_field()? {
            each(field)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip_and_short_input_names_the_field() {
        let mut w = Writer::tag(7);
        w.u8(1).bool(true).u32(2).u64(3).str("é").opt_u64(Some(4));
        w.opt_str(None).count(1).bytes(b"x");
        let bytes = w.into_bytes();
        let mut r = Reader::new(&bytes, "test");
        assert_eq!(r.u8("tag").unwrap(), 7);
        assert_eq!(r.u8("a").unwrap(), 1);
        assert!(r.bool("b").unwrap());
        assert_eq!(r.u32("c").unwrap(), 2);
        assert_eq!(r.u64("d").unwrap(), 3);
        assert_eq!(r.string("e").unwrap(), "é");
        assert_eq!(r.opt_u64("f").unwrap(), Some(4));
        assert_eq!(r.opt_string("g").unwrap(), None);
        assert_eq!(r.count(5, "h").unwrap(), 1);
        assert_eq!(r.bytes("i").unwrap(), b"x");
        r.end("message").unwrap();
        let err = Reader::new(&bytes[..3], "test").u64("id").unwrap_err();
        assert_eq!(err.to_string(), "test: truncated or bad id");
    }

    #[test]
    fn frames_carry_their_body_length() {
        let mut w = Writer::frame(3);
        w.u64(9);
        let frame = w.into_frame();
        assert_eq!(frame[..4], 9u32.to_le_bytes());
        assert_eq!(frame[4], 3);
    }

    #[test]
    fn counts_larger_than_the_input_could_hold_are_refused() {
        let mut w = Writer::new();
        w.count(1_000_000).u64(1);
        let bytes = w.into_bytes();
        assert!(Reader::new(&bytes, "t").count(8, "items").is_err());
        assert!(Reader::new(&[1], "t").bool("x").unwrap());
        assert!(Reader::new(&[2], "t").bool("x").is_err());
    }

    #[test]
    fn records_skip_zero_values_and_nest() {
        let mut w = Writer::new();
        w.record(|r| {
            r.u64("a", 5).u64("zero", 0).str("s", "hi").str("empty", "");
            r.record("inner", |r| {
                r.u64("b", 6);
            });
            r.record("nothing", |r| {
                r.u64("c", 0);
            });
        });
        let bytes = w.into_bytes();
        let mut fields = Reader::new(&bytes, "t").record("stats").unwrap();
        let mut seen = Vec::new();
        while let Some(field) = fields.next_field().unwrap() {
            let shown = match &field.value {
                Value::U64(v) => v.to_string(),
                Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                Value::Record(inner) => {
                    let inner = inner.clone().next_field().unwrap().unwrap();
                    format!("{}={}", inner.name, inner.u64().unwrap())
                }
            };
            seen.push(format!("{}:{shown}", field.name));
        }
        let mut fields = Reader::new(&bytes, "t").record("stats").unwrap();
        let first = fields.next_field().unwrap().unwrap();
        assert_eq!(
            first.string().unwrap_err().to_string(),
            "t: truncated or bad field a (not a string)"
        );
        assert_eq!(seen, ["a:5", "s:hi", "inner:b=6"]);
    }

    #[test]
    fn a_truncated_record_is_an_error_not_a_panic() {
        let mut w = Writer::new();
        w.record(|r| {
            r.u64("a", 5).str("s", "hi");
        });
        let bytes = w.into_bytes();
        for cut in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..cut], "t");
            let result = r.record("stats").and_then(|f| f.for_each(|_| Ok(())));
            assert!(result.is_err(), "cut {cut}");
        }
    }

    wire_tags! {
        enum Example {
            One = 1,
            Nine = 9,
        }
    }

    #[test]
    fn tags_convert_both_ways() {
        assert_eq!(Example::try_from(9), Ok(Example::Nine));
        assert_eq!(Example::One as u8, 1);
        assert_eq!(Example::try_from(2), Err(2));
    }
}
