//! The `head_id` target: `entries/head_id.rs` (replayed from `seeds/head_id` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::head_id::run(data));
