//! JSON-RPC 2.0: the SIMD scanner and the NPAMP-CC-JSONRPC carriage mapping.
//!
//! ```text
//!  JSON-RPC text ──scan──▶ Kind {Request | Notification | Success | Error} + method/id ranges
//!                          or Batch [element ranges] or ScanError (-32700 / -32600)
//!  Kind + text ──carriage::write_payload──▶ Bridge payload (envelope derived, text verbatim)
//!  Bridge message ──carriage::check_inbound──▶ Kind + text, or EnvelopeMalformed
//!  ids ──Correlator──▶ correlation_ids; replies matched and checked against the request id
//! ```
//!
//! The scanner never builds a DOM and never rewrites what it forwards.

pub mod carriage;
mod correlation;
mod head;
mod safety;
mod scan;
mod short;
mod simd;

pub use correlation::{Begin, CorrelationError, CorrelationMode, Correlator, same_id};
pub use head::{request_id, response_id};
pub use safety::{
    EffectTable, Label, Labeler, SafetyPolicy, ToolAnnotations, ToolEffects, tools_call_name,
};
pub use scan::{
    Element, IdKind, IdToken, InvalidRequest, KernelChoice, Kind, Limits, ScanError, Scanned,
    StrToken, decode_string, scan, scan_using,
};
pub use short::ShortBytes;
