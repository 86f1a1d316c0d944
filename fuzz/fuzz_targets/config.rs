//! The `config` target: `entries/config.rs` (replayed from `seeds/config` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::config::run(data));
