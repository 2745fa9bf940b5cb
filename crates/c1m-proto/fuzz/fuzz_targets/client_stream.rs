//! libFuzzer target: see c1m_proto_fuzz::client::client_stream for the properties.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    c1m_proto_fuzz::client::client_stream(data);
});
