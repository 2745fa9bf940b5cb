//! libFuzzer target: encoders → decoder round trip (message, envelope, ping, pong, close,
//! masked client frames).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| c1m_proto_fuzz::ws_roundtrip(data));
