//! The exchange layer, between `jsonrpc` and `gateway`: what crossing the
//! bridge means for JSON-RPC, as a sans-IO state machine ([`Exchange`]) that
//! every dispatcher of the gateway drives: the edge's client sessions and
//! its pool of associations for HTTP clients, the origin's upstream
//! sessions and its stateless upstream.
//!
//! ```text
//!  local party ──handle_local──▶ ┌──────────┐ ──Send──▶ peer gateway
//!                                │ Exchange │
//!  local party ◀──Deliver/Answer─└──────────┘ ◀─handle_peer── peer gateway
//!                    handle_timeout ▲  │ poll_timeout
//! ```
//!
//! It reads no clock and does no I/O: time comes in with every input, and
//! its tests run two exchanges joined in memory on a virtual clock.

mod budget;
mod exchange;
mod failure;
mod peer;
#[cfg(test)]
mod tests;

pub use budget::{Full, Shared};
pub use exchange::{
    Action, Attached, CANCELLED_GRACE, Config, Corr, Exchange, Gate, Interim, LASTING_MARGIN,
    Lasting, Named, Names, Observer, Relations, Role, Served, ToPeer, ToServe, Unobserved,
    label_of,
};
pub use failure::{
    Failure, MAY_HAVE_EXECUTED, Reply, ReplyClass, UNAUTHORIZED_CODE, Uncarriable,
    reply_over_max_body,
};
pub use peer::{PeerPayload, Received, receive};
