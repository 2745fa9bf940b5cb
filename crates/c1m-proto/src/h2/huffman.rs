//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B): a decoder that appends to a caller's
//! buffer and checks the padding rules, and an encoder used by tests and clients.
//!
//! The code is canonical (within one length, codes rise with the symbol), so decoding needs only
//! the first code and the count of each length, built at compile time: no per-connection state
//! and no tree. It reads one bit at a time, which is plenty for request heads.

use super::hpack_tables::HUFFMAN;

const MAX_LEN: usize = 30;
const EOS: u16 = 256;

struct Canonical {
    /// Code of the first symbol of each length.
    first: [u32; MAX_LEN + 1],
    count: [u16; MAX_LEN + 1],
    /// Index into `symbols` of the first symbol of each length.
    offset: [u16; MAX_LEN + 1],
    /// Symbols ordered by (length, symbol).
    symbols: [u16; 257],
}

const fn canonical() -> Canonical {
    let mut c = Canonical {
        first: [0; MAX_LEN + 1],
        count: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        symbols: [0; 257],
    };
    let mut i = 0;
    while i < 257 {
        c.count[HUFFMAN[i].1 as usize] += 1;
        i += 1;
    }
    let mut fill = [0u16; MAX_LEN + 1];
    let (mut len, mut acc) = (1, 0);
    while len <= MAX_LEN {
        c.offset[len] = acc;
        fill[len] = acc;
        acc += c.count[len];
        len += 1;
    }
    i = 0;
    while i < 257 {
        let len = HUFFMAN[i].1 as usize;
        c.symbols[fill[len] as usize] = i as u16;
        if fill[len] == c.offset[len] {
            c.first[len] = HUFFMAN[i].0;
        }
        fill[len] += 1;
        i += 1;
    }
    c
}

static CANON: Canonical = canonical();

/// Why a Huffman string was refused (all are COMPRESSION_ERROR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HuffmanError {
    /// The EOS symbol inside the string.
    Eos,
    /// More than 7 bits of padding, or padding that is not the EOS code's leading 1s.
    Padding,
}

/// Decodes `src` and appends the octets to `dst` (at most `src.len() * 8 / 5` of them: the
/// shortest code is 5 bits).
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let (mut code, mut len) = (0u32, 0usize);
    for byte in src {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            let count = u32::from(CANON.count[len]);
            let at = code.wrapping_sub(CANON.first[len]);
            if count > 0 && code >= CANON.first[len] && at < count {
                let sym = CANON.symbols[(CANON.offset[len] as u32 + at) as usize];
                if sym == EOS {
                    return Err(HuffmanError::Eos);
                }
                dst.push(sym as u8);
                (code, len) = (0, 0);
            } else if len == MAX_LEN {
                // Every 30-bit string is a code (the EOS code is all ones), so this is
                // unreachable with the RFC table; kept so a table error cannot index past it.
                return Err(HuffmanError::Padding);
            }
        }
    }
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// Length of `src` once Huffman-coded.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| HUFFMAN[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Appends the Huffman coding of `src`, padded with the EOS code's leading 1s.
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    let (mut acc, mut bits) = (0u64, 0u32);
    for &b in src {
        let (code, len) = HUFFMAN[b as usize];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            dst.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        dst.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_round_trips_alone_and_in_a_run() {
        let all: Vec<u8> = (0..=255).collect();
        for b in &all {
            let mut enc = Vec::new();
            encode(&[*b], &mut enc);
            let mut dec = Vec::new();
            decode(&enc, &mut dec).unwrap_or_else(|e| panic!("symbol {b}: {e:?}"));
            assert_eq!(dec, [*b]);
        }
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        assert_eq!(enc.len(), encoded_len(&all));
        let mut dec = Vec::new();
        decode(&enc, &mut dec).unwrap();
        assert_eq!(dec, all);
    }

    #[test]
    fn padding_rules_hold() {
        // "0" is 00000 (5 bits): padded with 111 it is valid.
        let mut d = Vec::new();
        assert_eq!(decode(&[0b0000_0111], &mut d), Ok(()));
        assert_eq!(d, b"0");
        // Padding of zeros is not a prefix of EOS.
        assert_eq!(
            decode(&[0b0000_0000], &mut Vec::new()),
            Err(HuffmanError::Padding)
        );
        // A whole byte of 1s is more than 7 bits of padding.
        assert_eq!(
            decode(&[0b0000_0111, 0xff], &mut Vec::new()),
            Err(HuffmanError::Padding)
        );
        // EOS itself (30 ones) inside a string.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xfc], &mut Vec::new()),
            Err(HuffmanError::Eos)
        );
    }
}
