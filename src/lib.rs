//! `npamp-gateway`: carries JSON-RPC 2.0 across authenticated, post-quantum
//! N-PAMP associations.
//!
//! The crate is built in layers whose dependencies point one way; the
//! protocol layers are sans-IO (they never read a clock or the OS RNG and
//! never touch a socket), the gateway is the async shell around them:
//!
//! ```text
//!   wire ──▶ record ──▶ bridge ──▶ jsonrpc ──▶ relay ──▶ gateway
//!   36-octet header,  traffic keys,  BridgeEnvelope,  SIMD scanner,   the exchange:    ingress, edge,
//!   CRC32C, TLVs,     nonces, AEAD   SafetyLabel,     carriage,       correlation,     origin, config,
//!   deframer          of frames      transport errs   effect tables   deadlines, room  metrics
//!                 handshake ──▶ assoc (QUIC and TCP + TLS 1.3 transports, the association driver)
//! ```
//!
//! The public API is the gateway and the protocol layers under it:
//!
//! - [`gateway`]: a running gateway, [`gateway::Gateway`], started from a
//!   [`gateway::GatewayBuilder`] (options set by calls) or from a
//!   [`gateway::GatewayConfig`] that [`gateway::config::GatewayOptions`]
//!   (the command line's flags and the TOML file's keys, typed) or
//!   [`gateway::config::Sourced`] (the same with where each came from)
//!   resolves: ingresses (HTTP/1.1 and HTTP/2, WebSocket, lines, over TCP,
//!   TLS or Unix sockets), the edge, the origin and its upstreams; its
//!   counters in [`gateway::metrics`].
//! - [`wire`], [`record`], [`bridge`]: the N-PAMP wire codec, the record
//!   layer and the NPAMP-BRIDGE envelope, byte-exact with the N-PAMP
//!   conformance corpus.
//! - [`handshake`]: the 1.5-RTT handshake (X25519MLKEM768 + Ed25519).
//! - [`assoc`]: associations over QUIC and TCP + TLS 1.3: connect,
//!   listen (with flood defences), keepalive, key update, close.
//! - [`jsonrpc`]: finds `method` and `id` without re-serializing, carries
//!   the untouched octets (NPAMP-CC-JSONRPC), labels effects.
//! - [`lines`]: newline-delimited JSON-RPC (TCP, stdio, child processes):
//!   bounded line reading and one-message-per-line writing.
//! - [`lsp`]: the Language Server Protocol's `Content-Length` framing, and
//!   [`framing`]: which of the two a stream transport speaks (`--framing`,
//!   found from a stream's first octets with `auto`).
//! - [`sse`]: Server-Sent Events as MCP's Streamable HTTP carries JSON-RPC
//!   in them: one message as an event, and a sans-IO decoder.
//!
//! Under it, crate-private unless the `internals` feature is on (the
//! `npamp-gateway` command, in its own package, turns it on, and so do this
//! workspace's tests, benches and fuzz targets; it is not a stable API):
//! `relay`, the sans-IO exchange of one dispatcher on a virtual clock; the
//! ingress, edge and origin machinery inside `gateway`; `conformance`, the
//! adapter the N-PAMP conformance runner drives. The mock upstream and the
//! embedded pair of the tests, the load generator and the main command are
//! a crate of their own (`npamp-testkit`), built on the public API alone.
//!
//! A program that embeds the gateway depends on it as it is, with no
//! features: no clap, and only the API above. The `cli` feature adds clap's
//! derives to the option structs, for a command line that flattens them.

/// Declares modules under the public API: public with the `internals`
/// feature (this workspace's command, tests, benches and fuzz targets),
/// crate-private without it.
macro_rules! internal {
    ($($(#[$meta:meta])* mod $name:ident;)*) => {$(
        $(#[$meta])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$meta])*
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        pub(crate) mod $name;
    )*};
}

pub mod assoc;
pub mod bridge;
pub mod framing;
pub mod gateway;
pub mod handshake;
pub mod jsonrpc;
pub mod lines;
pub mod lsp;
pub mod record;
pub mod shard;
pub mod sse;
pub mod wire;

internal! {
    mod conformance;
    mod relay;
}
