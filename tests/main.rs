//! The library's integration tests, one binary (one link of the whole
//! dependency graph instead of one per file). Each file beside this one is
//! a module; `cargo test --test integration MODULE::` runs one of them.

#[cfg(feature = "internals")]
mod alloc_free;
mod assoc_sockets;
mod carriage_exchanges;
mod client;
#[cfg(feature = "internals")]
mod conformance;
mod deploy;
mod handshake_kat;
mod hostile_peers;
mod layering;
mod proptest_codecs;
mod proptest_scanner;
