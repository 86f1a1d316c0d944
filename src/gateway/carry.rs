//! The answers when the bridge fails: what an association's end, an
//! upstream's unreadable reply or an origin's full `--max-in-flight` means
//! for the request that waited.

use crate::assoc::End;
use crate::relay::Failure;

/// Why an association went away, as an edge failure. One the origin
/// refused in the handshake delivered nothing: NotDelivered, never
/// "may have executed".
pub fn lost(end: &End) -> Failure {
    if end.refused_in_handshake() {
        return Failure::Transport(
            crate::bridge::TransportError::NOT_DELIVERED,
            format!(
                "the origin refused this gateway in the N-PAMP handshake, so nothing was delivered (is this gateway's public key in the origin's --trust?): {end}"
            ),
        );
    }
    Failure::Lost(format!("association lost before the reply: {end}"))
}

/// Why a request waited in vain for room under `--max-in-flight` (an
/// origin's).
pub fn in_flight_full(ctx: &super::context::Ctx) -> String {
    format!(
        "{} requests to the upstream are in flight (--max-in-flight) and none finished within {:.1} s (--stall-timeout)",
        ctx.limits.max_in_flight,
        ctx.limits.stall_timeout.as_secs_f64()
    )
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
