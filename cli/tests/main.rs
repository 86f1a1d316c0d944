//! The command's integration tests, one binary: each file beside this one
//! is a module that runs the command as processes over loopback;
//! `cargo test -p npamp-gateway-cli --test integration MODULE::` runs one.

mod support;

mod browsers;
mod capture;
mod cli_serve_ping;
mod failover;
mod faults;
mod fuzz_replay;
mod gateway_pair;
mod hostile_clients;
mod ingress_tls;
mod ingress_unix;
mod ipc_upstream;
mod loadgen_reach;
mod lsp;
mod mcp_http;
mod mcp_sdk;
mod oauth;
mod oauth_e2e;
mod oauth_legacy;
mod rate_limits;
mod reload;
mod secrets;
mod telemetry;
mod upstream_lifecycle;
