//! Incremental UTF-8 validation whose whole carried state is one byte.
//!
//! A text message may arrive in many frames and each frame in many reads, and a codepoint may
//! be split anywhere (RFC 6455 5.6, 8.1). Validation must still fail as early as possible, and
//! the carry must fit the decoder's small per-connection state: we only need to know what the
//! next byte is allowed to be, never the codepoint's value, so a state number is enough.
//! Bulk runs go through `std::str::from_utf8`; only the ≤ 3 bytes around a split walk the
//! byte-at-a-time table below (RFC 3629 section 4 grammar).

/// What the next byte must be. `Default` is "between codepoints".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Utf8State(u8);

const ACCEPT: u8 = 0;
/// One more continuation byte (80..=BF) ends the codepoint.
const TAIL1: u8 = 1;
const TAIL2: u8 = 2;
const TAIL3: u8 = 3;
/// After E0: A0..=BF (rules out overlong 3-byte forms), then one tail byte.
const AFTER_E0: u8 = 4;
/// After ED: 80..=9F (rules out UTF-16 surrogates), then one tail byte.
const AFTER_ED: u8 = 5;
/// After F0: 90..=BF (rules out overlong 4-byte forms), then two tail bytes.
const AFTER_F0: u8 = 6;
/// After F4: 80..=8F (rules out codepoints above U+10FFFF), then two tail bytes.
const AFTER_F4: u8 = 7;
const REJECT: u8 = 8;

fn step(state: u8, b: u8) -> u8 {
    let tail = (0x80..=0xBF).contains(&b);
    let next = |ok: bool, to: u8| if ok { to } else { REJECT };
    match state {
        ACCEPT => match b {
            0x00..=0x7F => ACCEPT,
            0xC2..=0xDF => TAIL1,
            0xE0 => AFTER_E0,
            0xE1..=0xEC | 0xEE..=0xEF => TAIL2,
            0xED => AFTER_ED,
            0xF0 => AFTER_F0,
            0xF1..=0xF3 => TAIL3,
            0xF4 => AFTER_F4,
            _ => REJECT,
        },
        TAIL1 => next(tail, ACCEPT),
        TAIL2 => next(tail, TAIL1),
        TAIL3 => next(tail, TAIL2),
        AFTER_E0 => next((0xA0..=0xBF).contains(&b), TAIL1),
        AFTER_ED => next((0x80..=0x9F).contains(&b), TAIL1),
        AFTER_F0 => next((0x90..=0xBF).contains(&b), TAIL2),
        AFTER_F4 => next((0x80..=0x8F).contains(&b), TAIL2),
        _ => REJECT,
    }
}

impl Utf8State {
    /// The carried state as one byte (a live upgrade hands it to the next process).
    pub fn to_byte(self) -> u8 {
        self.0
    }

    /// The inverse of [`Utf8State::to_byte`]; None for a byte no state has.
    pub fn from_byte(b: u8) -> Option<Utf8State> {
        (b <= REJECT).then_some(Utf8State(b))
    }

    /// Feeds the next bytes of the stream. Returns false as soon as the stream can no longer
    /// be valid UTF-8, whatever follows; the state is then stuck at "invalid".
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        let mut i = 0;
        // Finish a codepoint carried over from the previous piece byte by byte.
        while self.0 != ACCEPT && self.0 != REJECT && i < bytes.len() {
            self.0 = step(self.0, bytes[i]);
            i += 1;
        }
        if self.0 != ACCEPT {
            return self.0 != REJECT;
        }
        let rest = bytes.get(i..).unwrap_or_default();
        match std::str::from_utf8(rest) {
            Ok(_) => true,
            // Invalid bytes inside the piece: fail now, not at the end of the message.
            Err(e) if e.error_len().is_some() => {
                self.0 = REJECT;
                false
            }
            // The piece ends inside a codepoint: carry its (valid) prefix.
            Err(e) => {
                for &b in rest.get(e.valid_up_to()..).unwrap_or_default() {
                    self.0 = step(self.0, b);
                }
                self.0 != REJECT
            }
        }
    }

    /// True between codepoints: a text message may end here.
    pub fn is_complete(self) -> bool {
        self.0 == ACCEPT
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8State;

    fn split_everywhere_agrees(bytes: &[u8]) {
        let want = std::str::from_utf8(bytes).is_ok();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            let mut s = Utf8State::default();
            let ok = s.feed(a) && s.feed(b) && s.is_complete();
            assert_eq!(ok, want, "{bytes:x?} cut at {cut}");
        }
        // One byte at a time, the worst case for the carry.
        let mut s = Utf8State::default();
        let ok = bytes.iter().all(|&b| s.feed(&[b])) && s.is_complete();
        assert_eq!(ok, want, "{bytes:x?} bytewise");
    }

    #[test]
    fn agrees_with_std_on_edge_cases_split_anywhere() {
        let cases: &[&[u8]] = &[
            b"",
            b"hello",
            "κόσμε".as_bytes(),
            "\u{10FFFF}\u{FFFD}\u{800}\u{7FF}\u{80}".as_bytes(),
            &[0xED, 0x9F, 0xBF],       // U+D7FF, last before surrogates
            &[0xED, 0xA0, 0x80],       // U+D800 surrogate: invalid
            &[0xEE, 0x80, 0x80],       // U+E000
            &[0xC0, 0xAF],             // overlong '/'
            &[0xE0, 0x80, 0xAF],       // overlong
            &[0xF0, 0x80, 0x80, 0xAF], // overlong
            &[0xF4, 0x90, 0x80, 0x80], // above U+10FFFF
            &[0xF5, 0x80, 0x80, 0x80],
            &[0xCE, 0xBA, 0xE1], // truncated at end
            &[0x80],             // lone continuation
            &[0xFF],
            &[
                0xCE, 0xBA, 0xE1, 0xBD, 0xB9, 0xCF, 0x83, 0xCE, 0xBC, 0xCE, 0xB5, 0xED, 0xA0, 0x80,
            ],
        ];
        for c in cases {
            split_everywhere_agrees(c);
        }
    }

    #[test]
    fn agrees_with_std_on_pseudo_random_bytes() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 9) as usize;
            // Bias toward bytes that form multi-byte sequences.
            let bytes: Vec<u8> = (0..len)
                .map(|i| {
                    let b = (x >> (i * 7)) as u8;
                    if i % 2 == 0 {
                        b | 0x80
                    } else {
                        b
                    }
                })
                .collect();
            split_everywhere_agrees(&bytes);
        }
    }

    #[test]
    fn stays_invalid_after_reject() {
        let mut s = Utf8State::default();
        assert!(!s.feed(&[0xFF]));
        assert!(!s.feed(b"fine"));
        assert!(!s.is_complete());
    }
}
