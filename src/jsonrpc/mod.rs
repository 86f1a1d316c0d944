//! JSON-RPC 2.0: the SIMD scanner and the NPAMP-CC-JSONRPC carriage mapping.
//!
//! ```text
//!  JSON-RPC text ──scan──▶ Kind {Request | Notification | Success | Error} + method/id ranges
//!                          or Batch [element ranges] or ScanError (-32700 / -32600)
//!  Kind + text ──carriage──▶ BridgeMessage (envelope derived, text carried verbatim)
//! ```
//!
//! The scanner never builds a DOM and never rewrites what it forwards.

mod scan;
mod simd;

pub use scan::{
    Element, IdKind, IdToken, InvalidRequest, KernelChoice, Kind, Limits, ScanError, Scanned,
    StrToken, decode_string, scan, scan_using,
};
