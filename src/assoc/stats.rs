//! Process-wide counters of what hostile or broken peers did: frames
//! dropped under the receive rules, associations closed for an error (by
//! class), handshakes refused because too many were in progress. Shared by
//! every association of an [`Endpoint`](super::transport::Endpoint), read by
//! the gateway's metrics.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::transport::TransportError;
use super::{AssocError, Drop};
use crate::record::RecordError;

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
    /// Connections refused because `max_handshakes` were in progress.
    pub handshakes_refused: AtomicU64,
}

/// Why an association closed with an error, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    Tampered,
    OutOfSequence,
    Malformed,
    Io,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 4] = [
        Self::Tampered,
        Self::OutOfSequence,
        Self::Malformed,
        Self::Io,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Tampered => "tampered",
            Self::OutOfSequence => "out_of_sequence",
            Self::Malformed => "malformed",
            Self::Io => "io",
        }
    }

    pub fn of(e: &TransportError) -> Self {
        match e {
            TransportError::Assoc(a) => Self::of_assoc(a),
            TransportError::Wire(_) | TransportError::TruncatedFrame => Self::Malformed,
            _ => Self::Io,
        }
    }

    pub fn of_assoc(e: &AssocError) -> Self {
        match e {
            AssocError::Tampered { .. } | AssocError::Record(RecordError::Open) => Self::Tampered,
            AssocError::Record(RecordError::OutOfSequence { .. }) => Self::OutOfSequence,
            AssocError::Record(_) | AssocError::Malformed(_) => Self::Malformed,
            AssocError::Closed => Self::Io,
        }
    }
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
