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
//! - [`wire`], [`record`], [`bridge`]: the N-PAMP wire codec, the record
//!   layer and the NPAMP-BRIDGE envelope, byte-exact with the N-PAMP
//!   conformance corpus ([`conformance`]).
//! - [`handshake`]: the 1.5-RTT handshake (X25519MLKEM768 + Ed25519).
//! - [`assoc`]: associations over QUIC and TCP + TLS 1.3: connect,
//!   listen (with flood defences), keepalive, key update, close.
//! - [`jsonrpc`]: finds `method` and `id` without re-serializing, carries
//!   the untouched octets (NPAMP-CC-JSONRPC), labels effects.
//! - [`relay`]: the sans-IO exchange of one dispatcher, on a virtual clock.
//! - [`gateway`]: the running gateway ([`gateway::Gateway`] from a
//!   [`gateway::GatewayConfig`], or [`gateway::config::GatewayOptions`] for
//!   flags and TOML): ingresses (HTTP/1.1 and HTTP/2, WebSocket, lines, over
//!   TCP, TLS or Unix sockets), the edge, the origin and its upstreams.
//! - [`mock`] and [`exactly_once`]: the mock upstream and the embedded pair
//!   that the tests, the load generator and the main command use.

pub mod assoc;
pub mod bridge;
pub mod conformance;
pub mod exactly_once;
pub mod gateway;
pub mod handshake;
pub mod jsonrpc;
pub mod mock;
pub mod record;
pub mod relay;
pub mod wire;
