//! libFuzzer target: the WebSocket frame decoder, fed whole and in pieces.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| c1m_proto_fuzz::ws_frame(data));
