//! The `authorization` target: `entries/authorization.rs` (replayed from `seeds/authorization` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::authorization::run(data));
