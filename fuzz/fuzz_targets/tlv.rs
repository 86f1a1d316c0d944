//! The `tlv` target: `entries/tlv.rs` (replayed from `seeds/tlv` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::tlv::run(data));
