//! HPACK (RFC 7541): the request-header decoder and the response-header encoder.
//!
//! Decoder: integers capped at 2^32 (§5.1 lets a decoder refuse larger), strings bounded by the
//! block they sit in, Huffman checked for EOS and padding, a dynamic table bounded by the size
//! this side allows (`set_limit`), and the decoded header list capped (`max_list`, what
//! SETTINGS_MAX_HEADER_LIST_SIZE advertises, counted as §4.1 does: name + value + 32). When the
//! cap is passed the decoder stops handing fields out but reads the block to its end, so the
//! dynamic table stays in step with the peer's encoder and only that request is refused (an HPACK
//! bomb costs one stream, not the connection, and never more than the cap in memory).
//!
//! Encoder: no dynamic table (a server may leave it empty, §2.3.2, and an idle connection then
//! holds no encoder state): a static-table index when name and value match, else a literal
//! without indexing, by static name index when there is one, strings not Huffman-coded.

use super::hpack_tables::STATIC;
use super::huffman;
use std::collections::VecDeque;

/// Why a header block was refused. All but [`HpackError::ListTooLarge`] are a connection error
/// of type COMPRESSION_ERROR: the decoder's state can no longer match the peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HpackError {
    /// The block ended inside a representation.
    Truncated,
    /// An integer above 2^32.
    IntegerOverflow,
    /// Index 0, or past the static and dynamic tables.
    BadIndex,
    /// A Huffman string with EOS or bad padding.
    Huffman,
    /// A dynamic table size update above the allowed size, or after a field.
    TableSizeUpdate,
    /// The decoded header list passed `max_list`; the block was read to its end and the table is
    /// consistent, so this is a stream-level refusal.
    ListTooLarge,
}

/// Per-entry overhead in the table's size accounting (RFC 7541 §4.1).
pub const ENTRY_OVERHEAD: usize = 32;
/// The table size an encoder may use until it has seen this side's SETTINGS (RFC 9113 §6.5.2).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// One dynamic table entry: name and value.
type Entry = (Box<[u8]>, Box<[u8]>);

/// HPACK decoding context of one connection.
#[derive(Debug)]
pub struct Decoder {
    table: VecDeque<Entry>,
    /// Sum of entry sizes.
    size: usize,
    /// Size the peer's encoder chose (a size update), at most `limit`.
    max_size: usize,
    /// Size this side allows (SETTINGS_HEADER_TABLE_SIZE once acknowledged).
    limit: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: DEFAULT_TABLE_SIZE,
            limit: DEFAULT_TABLE_SIZE,
        }
    }
}

impl Decoder {
    /// A decoder whose table size is `size` from the start, as if SETTINGS_HEADER_TABLE_SIZE had
    /// been acknowledged before the first block (RFC 7541 Appendix C.5, C.6 assume this).
    pub fn with_table_size(size: usize) -> Self {
        Decoder {
            max_size: size,
            limit: size,
            ..Decoder::default()
        }
    }

    /// Applies this side's SETTINGS_HEADER_TABLE_SIZE once the peer acknowledged it. A smaller
    /// size evicts at once and frees the memory. RFC 7541 §4.2 has the peer confirm with a size
    /// update at the start of its next block, but a missing one is not refused: Go's encoder
    /// (h2spec, Go clients) omits it, and the table is already at the new size, so decoding
    /// goes on exactly as if the update had come.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
        if limit < self.max_size {
            self.max_size = limit;
            self.evict(0);
            if self.table.is_empty() {
                self.table = VecDeque::new();
            }
        }
    }

    /// Bytes the dynamic table accounts for (RFC 7541 §4.1).
    pub fn table_size(&self) -> usize {
        self.size
    }

    /// Decodes one whole header block, calling `field(name, value)` for each field in order.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut r = Reader { buf: block, pos: 0 };
        let (mut list, mut over) = (0usize, false);
        let mut first = true;
        let (mut name_buf, mut value_buf) = (Vec::new(), Vec::new());
        while let Some(&b) = r.buf.get(r.pos) {
            if b & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only at the start of a block.
                let size = r.int(5)?;
                if !first || size > self.limit {
                    return Err(HpackError::TableSizeUpdate);
                }
                self.max_size = size;
                self.evict(0);
                continue;
            }
            first = false;
            let entry_len;
            if b & 0x80 != 0 {
                // Indexed field (§6.1).
                let (n, v) = self.get(r.int(7)?)?;
                entry_len = n.len() + v.len();
                if !over && list + entry_len + ENTRY_OVERHEAD <= max_list {
                    field(n, v);
                }
            } else {
                // Literal (§6.2): with incremental indexing (01), without (0000), never (0001).
                let (prefix, index) = if b & 0x40 != 0 { (6, true) } else { (4, false) };
                let name_idx = r.int(prefix)?;
                let budget = if over {
                    0
                } else {
                    max_list.saturating_sub(list)
                };
                // Strings that will be neither handed out nor stored are skipped undecoded.
                let keep = index || budget > 0;
                name_buf.clear();
                value_buf.clear();
                let name_len = if name_idx == 0 {
                    r.string(&mut name_buf, keep)?
                } else {
                    let n = self.get(name_idx)?.0;
                    if keep {
                        name_buf.extend_from_slice(n);
                    }
                    n.len()
                };
                let value_len = r.string(&mut value_buf, keep)?;
                entry_len = name_len + value_len;
                if !over && list + entry_len + ENTRY_OVERHEAD <= max_list {
                    field(&name_buf, &value_buf);
                }
                if index {
                    self.insert(&name_buf, &value_buf);
                }
            }
            list += entry_len + ENTRY_OVERHEAD;
            over |= list > max_list;
        }
        if over {
            return Err(HpackError::ListTooLarge);
        }
        Ok(())
    }

    /// Static index 1..=61, then the dynamic table newest first.
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::BadIndex),
            1..=61 => Ok(STATIC[index - 1]),
            _ => self
                .table
                .get(index - 62)
                .map(|(n, v)| (&n[..], &v[..]))
                .ok_or(HpackError::BadIndex),
        }
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let size = name.len() + value.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            // §4.4: an entry larger than the table empties it and is not added.
            self.evict(self.max_size);
            return;
        }
        self.evict(size);
        self.table.push_front((name.into(), value.into()));
        self.size += size;
    }

    /// Evicts oldest entries until `room` more bytes fit under `max_size`.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((n, v)) = self.table.pop_back() else {
                break;
            };
            self.size -= n.len() + v.len() + ENTRY_OVERHEAD;
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    /// Prefix integer (§5.1); values above u32::MAX are refused.
    fn int(&mut self, prefix: u8) -> Result<usize, HpackError> {
        let mask = (1u16 << prefix) as u8 - 1;
        let b = *self.buf.get(self.pos).ok_or(HpackError::Truncated)?;
        self.pos += 1;
        let mut value = u64::from(b & mask);
        if value < u64::from(mask) {
            return Ok(value as usize);
        }
        let mut shift = 0;
        loop {
            let b = *self.buf.get(self.pos).ok_or(HpackError::Truncated)?;
            self.pos += 1;
            value += u64::from(b & 0x7f) << shift;
            // Past 5 continuation bytes a u32 is exceeded even if the bytes carry zeros (and
            // the shift must stay below 64).
            if value > u64::from(u32::MAX) || (shift >= 28 && b & 0x80 != 0) {
                return Err(HpackError::IntegerOverflow);
            }
            if b & 0x80 == 0 {
                return Ok(value as usize);
            }
            shift += 7;
        }
    }

    /// String literal (§5.2): decoded into `out` when `keep`, else only checked for length.
    /// Returns the decoded length (for a skipped Huffman string, its upper bound).
    fn string(&mut self, out: &mut Vec<u8>, keep: bool) -> Result<usize, HpackError> {
        let huff = self.buf.get(self.pos).ok_or(HpackError::Truncated)? & 0x80 != 0;
        let len = self.int(7)?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.buf.len())
            .ok_or(HpackError::Truncated)?;
        let raw = &self.buf[self.pos..end];
        self.pos = end;
        if !keep {
            return Ok(if huff { len * 8 / 5 } else { len });
        }
        if huff {
            huffman::decode(raw, out).map_err(|_| HpackError::Huffman)?;
        } else {
            out.extend_from_slice(raw);
        }
        Ok(out.len())
    }
}

/// Appends an HPACK prefix integer whose first byte carries `flags` above the prefix.
pub fn write_int(out: &mut Vec<u8>, flags: u8, prefix: u8, value: usize) {
    let mask = ((1u16 << prefix) - 1) as usize;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    write_int(out, 0, 7, s.len());
    out.extend_from_slice(s);
}

/// Appends one field without touching any dynamic table (the stateless encoder above).
pub fn encode_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let mut name_idx = 0;
    for (i, (n, v)) in STATIC.iter().enumerate() {
        if *n == name {
            if *v == value {
                write_int(out, 0x80, 7, i + 1);
                return;
            }
            if name_idx == 0 {
                name_idx = i + 1;
            }
        }
    }
    write_int(out, 0x00, 4, name_idx);
    if name_idx == 0 {
        write_str(out, name);
    }
    write_str(out, value);
}

/// Appends `:status` then the fields (names must already be lowercase).
pub fn encode_response<'a>(
    out: &mut Vec<u8>,
    status: u16,
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) {
    let mut digits = [b'0'; 3];
    let mut s = status.min(999);
    for d in digits.iter_mut().rev() {
        *d = b'0' + (s % 10) as u8;
        s /= 10;
    }
    encode_field(out, b":status", &digits);
    for (name, value) in fields {
        encode_field(out, name.as_bytes(), value);
    }
}
