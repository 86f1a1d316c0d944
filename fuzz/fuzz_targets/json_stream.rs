//! The `json_stream` target: `entries/json_stream.rs` (replayed from `seeds/json_stream` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::json_stream::run(data));
