//! The `sse` target: `entries/sse.rs` (replayed from `seeds/sse` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::sse::run(data));
