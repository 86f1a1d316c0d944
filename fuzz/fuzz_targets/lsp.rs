//! The `lsp` target: `entries/lsp.rs` (replayed from `seeds/lsp` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::lsp::run(data));
