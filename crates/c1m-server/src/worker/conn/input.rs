//! Input a connection has read and not used yet: the unused bytes are `bytes[start..]`. Using
//! input moves `start` and copies nothing, so a client that pipelines thousands of requests
//! and reads the answers slowly costs each request its parse, not a copy of everything still
//! waiting behind it (which made 40,000 pipelined requests take ~30 s). The used front is
//! dropped only when a read needs room and that front is large, so every byte is moved a
//! bounded number of times however the input is taken, one request per event or all at once.

/// Unused input and the buffer that holds it.
#[derive(Default)]
pub struct Input {
    bytes: Vec<u8>,
    start: usize,
}

impl Input {
    /// Input made of `bytes`, all unused (a reused buffer: its capacity comes along).
    pub fn new(bytes: Vec<u8>) -> Input {
        Input { bytes, start: 0 }
    }

    /// A copy of `bytes` at its own size.
    pub fn copied(bytes: &[u8]) -> Input {
        Input::new(bytes.to_vec())
    }

    pub fn unused(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    /// The unused bytes, writable (WebSocket frames are unmasked in place).
    pub fn unused_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..]
    }

    pub fn len(&self) -> usize {
        self.bytes.len() - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks the first `n` unused bytes used.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.bytes.len());
        if self.start == self.bytes.len() {
            self.bytes.clear();
            self.start = 0;
        }
    }

    /// Keeps only the first `len` unused bytes (a stream discards what it is sent).
    pub fn truncate(&mut self, len: usize) {
        self.bytes.truncate(self.start + len);
    }

    /// The buffer to append a read of up to `extra` bytes to. The used front is dropped first
    /// when it is at least as long as the rest (the move costs no more than the bytes used
    /// since the last one), or when it alone makes room for the read that would otherwise
    /// grow the buffer. So the buffer stays within about twice the unused input plus a read.
    pub fn for_append(&mut self, extra: usize) -> &mut Vec<u8> {
        let unused = self.len();
        let needs_room = self.bytes.len() + extra > self.bytes.capacity();
        if self.start > 0 && (self.start >= unused || (needs_room && self.start >= extra)) {
            self.bytes.drain(..self.start);
            self.start = 0;
        }
        if self.bytes.len() + extra > self.bytes.capacity() {
            self.bytes.reserve_exact(extra);
        }
        &mut self.bytes
    }

    /// This input, at its own size when the buffer holding it is mostly empty or used: what
    /// a connection keeps between events is the input, not the capacity of the read it came
    /// in (a 10-byte tail of a 64 KiB read keeps 10 bytes).
    pub fn trimmed(self) -> Input {
        if self.len() * 4 < self.bytes.capacity() && self.bytes.capacity() > 1024 {
            Input::copied(self.unused())
        } else {
            self
        }
    }

    /// The buffer itself, emptied (to reuse its capacity).
    pub fn into_cleared(mut self) -> Vec<u8> {
        self.bytes.clear();
        self.bytes
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.bytes.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn using_input_moves_no_bytes_and_reading_reuses_the_used_front() {
        // 1,000 requests of 35 bytes taken one per event, with a 4 KiB read whenever the
        // unused input falls under 8 KiB: the buffer's address changes only when it grows,
        // and the bytes moved stay a small multiple of the bytes used.
        let request = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
        let mut feed = request.repeat(2000).into_iter();
        let mut input = Input::default();
        let mut moved = 0;
        for _ in 0..1000 {
            if input.len() < 8192 {
                let before = input.start;
                let buf = input.for_append(4096);
                buf.extend(feed.by_ref().take(4096));
                if input.start < before {
                    moved += input.len() - 4096;
                }
            }
            assert!(input.unused().starts_with(request));
            input.consume(request.len());
        }
        let used = 1000 * request.len();
        assert!(moved <= 2 * used, "moved {moved} bytes to use {used}");
        assert!(
            input.capacity() <= 2 * (8192 + 4096) + 4096,
            "capacity {} for at most 12 KiB of unused input",
            input.capacity()
        );
    }

    #[test]
    fn using_everything_empties_the_buffer() {
        let mut input = Input::copied(b"abc");
        input.consume(2);
        assert_eq!(input.unused(), b"c");
        input.consume(5);
        assert!(input.is_empty());
        assert_eq!(input.start, 0);
    }

    #[test]
    fn a_small_rest_of_a_large_buffer_is_kept_at_its_own_size() {
        let mut input = Input::new(Vec::with_capacity(64 * 1024));
        input.for_append(10).extend_from_slice(b"0123456789");
        let kept = input.trimmed();
        assert_eq!(kept.unused(), b"0123456789");
        assert_eq!(kept.capacity(), 10);
        let mut mostly_unused = Input::copied(&[7u8; 4096]);
        mostly_unused.consume(1024);
        let before = mostly_unused.bytes.as_ptr();
        let kept = mostly_unused.trimmed();
        assert_eq!(
            kept.bytes.as_ptr(),
            before,
            "three quarters unused: kept, not copied"
        );
    }

    #[test]
    fn truncate_drops_what_a_stream_was_sent() {
        let mut input = Input::copied(b"head");
        input.consume(1);
        input.for_append(4).extend_from_slice(b"junk");
        input.truncate(3);
        assert_eq!(input.unused(), b"ead");
    }
}
