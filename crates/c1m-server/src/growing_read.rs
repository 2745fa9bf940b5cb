//! Reads that land straight in an input buffer (a client connection's, the master link's):
//! the first asks for one page, and each read that fills its request doubles the next, up to a
//! maximum. No stack array: a 16 or 64 KiB one stayed resident in every process for good,
//! and a quiet socket never makes its buffer grow.

use std::io;

/// What the first read asks for.
const FIRST_READ: usize = 4096;

pub struct GrowingRead {
    size: usize,
    max: usize,
}

impl GrowingRead {
    pub const fn new(max: usize) -> GrowingRead {
        GrowingRead {
            size: if FIRST_READ < max { FIRST_READ } else { max },
            max,
        }
    }

    /// Bytes the next read asks for.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Appends one read to `buf`: `read` gets room for [`Self::size`] bytes past its end, and
    /// what it did not fill is cut off again. Returns `read`'s result.
    pub fn append(
        &mut self,
        buf: &mut Vec<u8>,
        read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let old = buf.len();
        buf.resize(old + self.size, 0);
        let got = read(&mut buf[old..]);
        buf.truncate(old + got.as_ref().map_or(0, |&n| n));
        if got.as_ref().is_ok_and(|&n| n == self.size) {
            self.size = (self.size * 2).min(self.max);
        }
        got
    }
}
