//! Test support for `npamp-gateway`, built on the library's public API
//! alone:
//!
//! - [`mock`]: a mock JSON-RPC upstream (HTTP, WebSocket, newline-delimited
//!   TCP, stdio), with latency, injected errors, padding, exact-count faults
//!   and server-pushed notifications: `npamp-gateway mock-upstream` and
//!   `npamp-loadgen upstream`;
//! - [`exactly_once`]: an embedded gateway pair (a mock upstream, an origin
//!   and an edge in one process, pinned to each other) and the check that
//!   every request through it gets exactly its own answer, the main
//!   command's default.
//!
//! The command's integration tests and the load generator use it; a
//! program that embeds the gateway has no need of it.

pub mod exactly_once;
pub mod mock;
