//! libFuzzer target: see c1m_proto_fuzz::http::http_head for the properties.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = c1m_proto_fuzz::http::http_head(data);
});
