//! Process-wide counters of what hostile or broken peers did: frames
//! dropped under the receive rules, associations closed for an error (by
//! class), handshakes refused because too many were in progress. Shared by
//! every association of an [`Endpoint`](super::Endpoint), read by
//! the gateway's metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::association::Drop;
use super::error::ErrorClass;

#[derive(Debug, Default)]
pub struct AssocStats {
    pub dropped_unknown_channel: AtomicU64,
    pub dropped_forged_close: AtomicU64,
    pub dropped_unknown_frame_type: AtomicU64,
    /// A frame failed authentication (tampered, forged, wrong key).
    pub closed_tampered: AtomicU64,
    /// A frame's sequence number was not the next one (replayed, reordered).
    pub closed_out_of_sequence: AtomicU64,
    /// Not a frame: bad CRC, reserved octets set, oversized length,
    /// truncated, a control payload of the wrong shape.
    pub closed_malformed: AtomicU64,
    /// The connection failed (reset, QUIC idle timeout, TLS alert).
    pub closed_io: AtomicU64,
    /// Connections refused because `max_handshakes` were in progress, or
    /// `max_handshakes_per_source` from the same address.
    pub handshakes_refused: AtomicU64,
    /// Connections dropped for sending nothing within the first-octets
    /// deadline.
    pub connections_silent: AtomicU64,
    /// Silent connections pushed out of a full waiting room by newer ones.
    pub connections_evicted: AtomicU64,
    /// QUIC attempts answered with a Retry (address validation) because
    /// many handshakes were in progress.
    pub quic_retries: AtomicU64,
}

impl AssocStats {
    pub fn dropped(&self, why: Drop) {
        match why {
            Drop::UnknownChannel(_) => &self.dropped_unknown_channel,
            Drop::ForgedClose => &self.dropped_forged_close,
            Drop::UnknownFrameType(_) => &self.dropped_unknown_frame_type,
        }
        .fetch_add(1, Relaxed);
    }

    pub fn closed(&self, class: ErrorClass) {
        self.closed_counter(class).fetch_add(1, Relaxed);
    }

    pub fn closed_counter(&self, class: ErrorClass) -> &AtomicU64 {
        match class {
            ErrorClass::Tampered => &self.closed_tampered,
            ErrorClass::OutOfSequence => &self.closed_out_of_sequence,
            ErrorClass::Malformed => &self.closed_malformed,
            ErrorClass::Io => &self.closed_io,
        }
    }
}
