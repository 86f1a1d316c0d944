//! The fuzz targets' bodies, one module a target: `run(input)` checks one
//! input and panics on a finding. Two callers: the libFuzzer binaries
//! (`fuzz_targets/NAME.rs`, built by `cargo fuzz` or `smoke.sh`) and the
//! workspace's tests, which replay every committed input (`seeds/NAME/*`)
//! through the same function on every `cargo test`.

pub mod authorization;
pub mod bridge_envelope;
pub mod config;
pub mod deframe;
pub mod handshake;
pub mod head_id;
pub mod json_stream;
pub mod jsonrpc_scan;
pub mod lines;
pub mod lsp;
pub mod open_frame;
pub mod scenario;
pub mod sse;
pub mod tlv;

mod pieces;

/// A target's body: checks one input, panics on a finding.
pub type Run = fn(&[u8]);

/// Every target by its name (the name of its binary and of its seed folder).
pub const TARGETS: &[(&str, Run)] = &[
    ("authorization", authorization::run),
    ("bridge_envelope", bridge_envelope::run),
    ("config", config::run),
    ("deframe", deframe::run),
    ("handshake", handshake::run),
    ("head_id", head_id::run),
    ("json_stream", json_stream::run),
    ("jsonrpc_scan", jsonrpc_scan::run),
    ("lines", lines::run),
    ("lsp", lsp::run),
    ("open_frame", open_frame::run),
    ("scenario", scenario::run),
    ("sse", sse::run),
    ("tlv", tlv::run),
];
