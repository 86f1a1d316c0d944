//! The `handshake` target: `entries/handshake.rs` (replayed from `seeds/handshake` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::handshake::run(data));
