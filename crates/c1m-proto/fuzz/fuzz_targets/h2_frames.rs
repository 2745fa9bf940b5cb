//! libFuzzer target: HTTP/2 peer bytes through the connection state machine, and the same bytes
//! as one HPACK block; see c1m_proto_fuzz::h2 for the properties.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = c1m_proto_fuzz::h2::h2_frames(data);
    let _ = c1m_proto_fuzz::h2::hpack_block(data);
});
