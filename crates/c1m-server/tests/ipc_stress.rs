//! Bounded, deterministic stand-in for the ipc fuzzer, run by plain `cargo test`: valid frames
//! of every message kind, mutated (bytes flipped, lengths and counts overwritten with edge
//! values, truncated, extended), through the same property the libFuzzer target checks
//! (fuzz/src/lib.rs).

#[path = "../fuzz/src/lib.rs"]
mod harness;

const CASES: usize = 200_000;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn mutate(rng: &mut XorShift, input: &mut Vec<u8>) {
    for _ in 0..=rng.next() % 3 {
        if input.len() < 2 {
            return;
        }
        let at = 1 + (rng.next() as usize % (input.len() - 1));
        match rng.next() % 6 {
            0 => input[at] ^= 1 << (rng.next() % 8),
            1 => input[at] = [0, 1, 0x7f, 0x80, 0xff][rng.next() as usize % 5],
            // A length or count field: 4 or 8 bytes of an edge value.
            2 | 3 => {
                let edges = [0, 1, 17, u32::MAX as u64, u64::MAX, 1 << 31];
                let edge = edges[rng.next() as usize % edges.len()];
                for (i, b) in edge.to_le_bytes().iter().enumerate() {
                    if let Some(slot) = input.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            4 => input.truncate(at),
            _ => {
                let extra = rng.next().to_le_bytes();
                input.extend_from_slice(&extra[..1 + rng.next() as usize % 8]);
            }
        }
    }
}

#[test]
fn mutated_ipc_frames_are_errors_or_round_trip() {
    let seeds = harness::seed_inputs();
    let mut rng = XorShift(0x1c1_0000_9e37);
    for seed in &seeds {
        harness::ipc_codec(seed);
    }
    for _ in 0..CASES {
        let mut input = seeds[rng.next() as usize % seeds.len()].clone();
        mutate(&mut rng, &mut input);
        harness::ipc_codec(&input);
    }
}
