//! The `deframe` target: `entries/deframe.rs` (replayed from `seeds/deframe` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::deframe::run(data));
