//! libFuzzer target: the master<->worker ipc codec, both directions.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| c1m_server_fuzz::ipc_codec(data));
