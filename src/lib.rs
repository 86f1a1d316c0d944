//! `npamp-gateway`: carries JSON-RPC 2.0 across authenticated, post-quantum
//! N-PAMP associations.
//!
//! This crate is built sans-IO in layers whose dependencies point one way:
//!
//! ```text
//!   wire ──▶ record ──▶ bridge ──▶ (jsonrpc, handshake, assoc, gateway: to come)
//!   36-octet header,     traffic keys,      BridgeEnvelope,
//!   CRC32C, TLVs,        nonces, in-place   SafetyLabel,
//!   deframer             AEAD of frames     correlation
//! ```
//!
//! What it does today: the N-PAMP wire codec, the record layer and the
//! NPAMP-BRIDGE envelope, byte-exact with the N-PAMP conformance corpus
//! ([`conformance`]). What it does not do yet: the handshake, the association
//! over QUIC/TLS, the JSON-RPC scanner and the gateway itself.
//!
//! The pure layers never read a clock or the OS RNG and never touch a socket.

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
