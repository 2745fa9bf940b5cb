//! Fuzz harness for the master<->worker ipc codec (c1m_server::ipc): the property each input
//! is checked against. Shared by the libFuzzer target (fuzz_targets/ipc_codec.rs) and by the
//! bounded random-input test in `cargo test` (crates/c1m-server/tests/ipc_stress.rs includes
//! this file), so the property is the same whether or not libFuzzer can run.
//!
//! The peers are our own processes, but a frame is only as good as the code that built it: a
//! decoder that panics, or allocates from a length it has not checked, would turn one encoder
//! bug into a dead master. A panic here is a finding.

use c1m_server::ipc::{examples, ToMaster, ToWorker};

/// Byte 0 picks the direction; the rest is a frame body (the 4-byte length prefix stripped,
/// as `Link` hands frames over). Whatever decodes must encode back to a frame that decodes to
/// the same message, and the re-encoded body is never larger than the input it came from
/// (a decoder that invents bytes would be reading past its frame).
pub fn ipc_codec(data: &[u8]) {
    let Some((&dir, body)) = data.split_first() else {
        return;
    };
    if dir & 1 == 0 {
        if let Ok(msg) = ToMaster::decode(body) {
            let frame = msg.encode();
            assert!(frame.len() - 4 <= body.len(), "re-encoded body grew");
            assert_eq!(ToMaster::decode(&frame[4..]).expect("re-decode"), msg);
        }
    } else if let Ok(msg) = ToWorker::decode(body) {
        let frame = msg.encode();
        assert!(frame.len() - 4 <= body.len(), "re-encoded body grew");
        assert_eq!(ToWorker::decode(&frame[4..]).expect("re-decode"), msg);
    }
}

/// Valid messages of every kind (`ipc::examples`), as fuzz inputs (direction byte + body): the
/// seeds the stress test mutates.
pub fn seed_inputs() -> Vec<Vec<u8>> {
    let (to_master, to_worker) = examples();
    let mut out = Vec::new();
    for m in to_master {
        out.push([&[0u8][..], &m.encode()[4..]].concat());
    }
    for m in to_worker {
        out.push([&[1u8][..], &m.encode()[4..]].concat());
    }
    out
}
