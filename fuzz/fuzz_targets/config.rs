//! The gateway's TOML configuration (`--config FILE`) over arbitrary text:
//! parsing and checking never panic, and every refusal names where it came
//! from (the file, with the key and line when there is one).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use npamp_gateway::gateway::config::GatewayOptions;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    let Ok(file) = GatewayOptions::parse_toml(path, text) else {
        return;
    };
    // Reading an identity file is not parsing: leave the file system alone.
    if file.identity.is_some() {
        return;
    }
    if let Err(e) = GatewayOptions::default().resolve_text(path, text) {
        assert!(
            e.at.starts_with("fuzz.toml") || e.at.starts_with("--"),
            "error without a place: {e}"
        );
        assert!(!e.message.is_empty());
    }
});
