//! The gateway's TOML configuration (`--config FILE`) over arbitrary text:
//! parsing and checking never panic, and every refusal names where it came
//! from (the file, with the key and line when there is one).

use std::path::Path;

use npamp_gateway::gateway::config::Sourced;

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return;
    };
    // Reading key files and resolving host names are not parsing: leave
    // the file system and the resolver alone (addresses are resolved as
    // they are parsed, and a name lookup without a network takes seconds).
    if table.contains_key("identity") || table.contains_key("auth-token-file") {
        return;
    }
    let literal = |url: &str| {
        let addr = url.split_once("://").map_or(url, |(_, rest)| rest);
        addr.trim_end_matches('/')
            .parse::<std::net::SocketAddr>()
            .is_ok()
    };
    let texts = |key: &str| -> Vec<&str> {
        match table.get(key) {
            Some(toml::Value::String(s)) => vec![s.as_str()],
            Some(toml::Value::Array(a)) => a.iter().filter_map(toml::Value::as_str).collect(),
            _ => Vec::new(),
        }
    };
    let addresses = ["listen", "ingress", "peer", "metrics", "upstream"]
        .into_iter()
        .flat_map(texts);
    if !addresses.into_iter().all(literal) {
        return;
    }
    let path = Path::new("fuzz.toml");
    let checked = Sourced::parse(path, text).and_then(|s| s.resolve());
    if let Err(e) = checked {
        assert!(
            e.at.starts_with("fuzz.toml") || e.at.starts_with("--"),
            "error without a place: {e}"
        );
        assert!(!e.message.is_empty());
    }
}
