//! The `jsonrpc_scan` target: `entries/jsonrpc_scan.rs` (replayed from `seeds/jsonrpc_scan` by the
//! workspace's tests too).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| npamp_gateway_fuzz::jsonrpc_scan::run(data));
