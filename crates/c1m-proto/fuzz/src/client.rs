//! Properties of the client-side stream parsers (`c1m_proto::client`), which read whatever a
//! server (c1m or any other) sends: for every protocol and starting phase, arbitrary bytes are
//! an error or events, never a panic; the bytes reported consumed never exceed the input; and
//! feeding the same bytes in two reads (keeping the unconsumed tail, as bench's worker does)
//! yields the same events as one read.

use c1m_proto::client::{parse, Ctx, Event, Phase, Wire};

const WIRES: [Wire; 5] = [Wire::Sse, Wire::Ws, Wire::Poll, Wire::Tcp, Wire::Connect];

fn events(wire: Wire, phase: &mut Phase, buf: &[u8], out: &mut Vec<String>) -> Option<usize> {
    let accept = c1m_proto::client::ws_accept("dGhlIHNhbXBsZSBub25jZQ==");
    let ctx = Ctx {
        wire,
        ws_accept: &accept,
    };
    let r = parse(&ctx, phase, buf, &mut |e: Event<'_>| {
        out.push(format!("{e:?}"))
    });
    if let Ok(used) = r {
        assert!(
            used <= buf.len(),
            "{wire:?} consumed {used} of {}",
            buf.len()
        );
    }
    r.ok()
}

/// `data[0..2]` (little-endian u16) picks the split point; the rest is the stream.
pub fn client_stream(data: &[u8]) {
    let [a, b, stream @ ..] = data else {
        return;
    };
    let cut = u16::from_le_bytes([*a, *b]);
    for wire in WIRES {
        for start in [Phase::Head, Phase::Body] {
            let (mut whole, mut ph) = (Vec::new(), start);
            let Some(_) = events(wire, &mut ph, stream, &mut whole) else {
                continue;
            };
            // Two reads: the first read's unconsumed tail is kept and the rest appended.
            let at = usize::from(cut) % (stream.len() + 1);
            let (mut split, mut ph2) = (Vec::new(), start);
            let Some(used) = events(wire, &mut ph2, &stream[..at], &mut split) else {
                panic!("{wire:?}: a prefix of an accepted stream was refused");
            };
            let rest = [&stream[used..at], &stream[at..]].concat();
            if events(wire, &mut ph2, &rest, &mut split).is_some() {
                assert_eq!(whole, split, "{wire:?}: events depend on the read boundary");
            }
        }
    }
}
