//! libFuzzer target: see c1m_proto_fuzz::line::tcp_line for the properties.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = c1m_proto_fuzz::line::tcp_line(data);
});
