//! The `open_frame` target: `entries/open_frame.rs` (replayed from `seeds/open_frame` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::open_frame::run(data));
