//! The `bridge_envelope` target: `entries/bridge_envelope.rs` (replayed from `seeds/bridge_envelope` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::bridge_envelope::run(data));
