//! The edge's answers when the bridge fails: what an association's end or
//! an upstream's unreadable reply means for the request that waited.

use crate::assoc::End;
use crate::relay::Failure;

/// Why an association went away, as an edge failure.
pub fn lost(end: &End) -> Failure {
    Failure::Lost(format!("association lost before the reply: {end}"))
}

/// The NotDelivered detail for an upstream's reply body that could not be
/// read: over `--max-body` ([`reply_over_max_body`]), or failing otherwise.
/// `upstream` names it as it may be shown.
pub fn reading_reply_failed(
    upstream: &dyn std::fmt::Display,
    e: &(dyn std::error::Error + Send + Sync + 'static),
    limit: usize,
) -> String {
    if e.is::<http_body_util::LengthLimitError>() {
        reply_over_max_body(&format!("upstream {upstream}"), None, limit)
    } else {
        format!("upstream {upstream}: reading its reply: {e}")
    }
}

pub use crate::relay::reply_over_max_body;
