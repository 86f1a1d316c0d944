//! What an option is when it is not given, written once: the values come
//! from the structs the gateway runs with ([`Limits::default`], the
//! association's and the endpoint's defaults), and the help text shows
//! them from there.

use super::super::Limits;
use super::values::{Protocol, Seconds};
use crate::assoc::AssocConfig;
use crate::assoc::endpoint::{
    Congestion, DEFAULT_FIRST_OCTETS_TIMEOUT, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_MAX_HANDSHAKES,
    DEFAULT_MAX_HANDSHAKES_PER_SOURCE,
};

/// The default of the option whose clap id is `id`, as its help shows it.
pub fn of(id: &str) -> Option<String> {
    let limits = Limits::default();
    let lsp = Limits::for_protocol(crate::bridge::ProtocolId::LSP_EXPERIMENTAL);
    let assoc = AssocConfig::default();
    let time = |d| Seconds(d).to_string();
    Some(match id {
        "protocol" => Protocol::default().to_string(),
        "framing" => crate::framing::Framing::default().to_string(),
        "congestion" => Congestion::default().to_string(),
        "handshake_timeout" => time(DEFAULT_HANDSHAKE_TIMEOUT),
        "first_octets_timeout" => time(DEFAULT_FIRST_OCTETS_TIMEOUT),
        "max_handshakes" => DEFAULT_MAX_HANDSHAKES.to_string(),
        "max_handshakes_per_source" => DEFAULT_MAX_HANDSHAKES_PER_SOURCE.to_string(),
        "key_update_after" => time(assoc.key_update_after),
        "key_update_after_bytes" => assoc.key_update_after_bytes.to_string(),
        "peer_timeout" => time(assoc.peer_timeout),
        "max_body" => format!("{}; {} with --protocol lsp", limits.max_body, lsp.max_body),
        "max_batch" => limits.max_batch.to_string(),
        "capture_max" => super::super::capture::DEFAULT_MAX_BYTES.to_string(),
        "oauth_audience" => "the first HTTP ingress's URL, on a fixed port".into(),
        "oauth_jwks" => "the issuer's metadata's jwks_uri".into(),
        "max_in_flight" => limits.max_in_flight.to_string(),
        "max_in_flight_per_connection" => limits.max_in_flight_per_connection.to_string(),
        "session_buffer" => limits.session_buffer.to_string(),
        "memory_budget" => limits.memory_budget.to_string(),
        "max_connections" => limits.max_connections.to_string(),
        "max_sessions_per_client" => limits.max_sessions_per_client.to_string(),
        "max_upstream_processes" => {
            format!("16 per CPU, {} here", 16 * super::build::default_shards())
        }
        "max_connections_per_source" => format!(
            "half of --max-connections, {} here",
            limits.max_connections_per_source
        ),
        "request_timeout" => format!(
            "{}; {} with --protocol lsp",
            time(limits.request_timeout),
            time(lsp.request_timeout)
        ),
        "idle_timeout" => format!(
            "{}; {} with --protocol lsp; none for connect",
            time(limits.idle_timeout),
            time(lsp.idle_timeout)
        ),
        "stall_timeout" => time(limits.stall_timeout),
        "listen_timeout" => time(limits.listen_timeout),
        "upstream_connect_timeout" => time(limits.upstream_connect_timeout),
        "drain_timeout" => time(limits.drain_timeout),
        "retry_budget" => limits.retry_budget.to_string(),
        "pool_size" => format!("the worker threads, {} here", limits.pool_size),
        "shards" => format!("the cores, {} here", super::build::default_shards()),
        "rate_limit_burst" => "a tenth of a second's worth, at least 1".to_owned(),
        _ => return None,
    })
}

/// `arg` with its default appended to its help (clap's `mut_args`).
#[cfg(feature = "cli")]
pub fn shown(arg: clap::Arg) -> clap::Arg {
    let Some(default) = of(arg.get_id().as_str()) else {
        return arg;
    };
    let with = |help: Option<&clap::builder::StyledStr>| {
        format!(
            "{} [default: {default}]",
            help.map(|h| h.to_string()).unwrap_or_default()
        )
    };
    let long = arg.get_long_help().map(|h| with(Some(h)));
    let help = with(arg.get_help());
    let arg = arg.help(help);
    match long {
        Some(long) => arg.long_help(long),
        None => arg,
    }
}
