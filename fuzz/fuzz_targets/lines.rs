//! The `lines` target: `entries/lines.rs` (replayed from `seeds/lines` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::lines::run(data));
