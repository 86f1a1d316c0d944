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
    // Reading key files and resolving host names are not parsing: leave
    // the file system and the resolver alone (a name lookup without a
    // network takes seconds).
    if file.identity.is_some() || file.auth_token_file.is_some() {
        return;
    }
    let literal = |url: &str| {
        let addr = url.split_once("://").map_or(url, |(_, rest)| rest);
        addr.trim_end_matches('/')
            .parse::<std::net::SocketAddr>()
            .is_ok()
    };
    let addresses = file
        .listen
        .iter()
        .chain(&file.ingress)
        .chain(&file.peer)
        .chain(&file.metrics);
    if !addresses.map(String::as_str).all(literal) {
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
