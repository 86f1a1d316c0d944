//! The `scenario` target: `entries/scenario.rs` (replayed from `seeds/scenario` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::scenario::run(data));
