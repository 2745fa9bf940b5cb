//! libFuzzer target: the WebSocket handshake validator over parsed and raw header lists.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = c1m_proto_fuzz::ws_handshake(data);
});
