//! libFuzzer target: see c1m_proto_fuzz::http::chunked_body for the properties.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| c1m_proto_fuzz::http::chunked_body(data));
