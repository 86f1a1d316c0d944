//! NPAMP-BRIDGE (companion `10_bridge_framework.md`): the Bridge channel's
//! frame types, the BridgeEnvelope (TLV 0x0010) and SafetyLabel (TLV 0x0013)
//! codecs, transport error codes, and correlation.
//!
//! ```text
//!  Bridge frame plaintext = BridgeEnvelope TLV ‖ [SafetyLabel TLV] ‖ [extension TLV] ‖ foreign message (verbatim)
//! ```
//!
//! The extension TLV is this gateway's ([`Extension`], `docs/decisions.md`
//! §9 and §10): what an edge carries beside a request with
//! `--forward-authorization`, and what comes back with its reply.
//!
//! Decoding borrows every field from the caller's buffer; the foreign message
//! is never copied or rewritten.

mod envelope;
mod transport_error;

pub use envelope::{
    BridgeEnvelope, BridgeMessage, ContentType, Effect, Extension, MessageKind, ProtocolId,
    SafetyLabel, correlates, envelope_and_label_len, frame_type_for_kind, kind_for_frame_type,
    write_envelope, write_extension,
};
pub use transport_error::{
    TRANSPORT_ERROR_DETAIL_MAX_LEN, decode_transport_error, write_transport_error_object,
};

use crate::wire::FrameType;

/// Bridge-channel frame types (NPAMP-BRIDGE §2).
pub const BRIDGE_REQUEST: FrameType = FrameType(0x0100);
pub const BRIDGE_RESPONSE: FrameType = FrameType(0x0101);
pub const BRIDGE_ERROR: FrameType = FrameType(0x0102);
pub const BRIDGE_NOTIFY: FrameType = FrameType(0x0103);
pub const BRIDGE_STREAM_DATA: FrameType = FrameType(0x0104);
pub const BRIDGE_STREAM_END: FrameType = FrameType(0x0105);

/// Longest correlation_id, method and scope: their length fields are one octet.
pub const FIELD_MAX_LEN: usize = 255;

/// NPAMP-BRIDGE §6 transport error codes: failures *below* the foreign
/// protocol. One octet on the wire (the transport-error object,
/// [`write_transport_error_object`]). Unknown codes are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransportError(pub u8);

impl TransportError {
    pub const ENVELOPE_MALFORMED: Self = Self(1);
    pub const PROTOCOL_UNSUPPORTED: Self = Self(2);
    pub const METHOD_UNSUPPORTED: Self = Self(3);
    pub const NOT_DELIVERED: Self = Self(4);
    pub const SAFETY_POLICY: Self = Self(5);

    /// The spec's name, or `"Unknown"`.
    pub const fn name(self) -> &'static str {
        match self.0 {
            1 => "EnvelopeMalformed",
            2 => "ProtocolUnsupported",
            3 => "MethodUnsupported",
            4 => "NotDelivered",
            5 => "SafetyPolicy",
            _ => "Unknown",
        }
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// Why a Bridge payload was refused. Every decode variant is answered with
/// [`TransportError::ENVELOPE_MALFORMED`] (see [`BridgeError::transport_error`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    #[error("frame type {0:?} is not a Bridge operation frame (0x0100-0x0105)")]
    NotBridgeFrame(FrameType),
    #[error("BridgeEnvelope TLV absent: payload starts with TLV type {0:#06x}")]
    EnvelopeAbsent(u16),
    #[error("BridgeEnvelope truncated: {0}")]
    EnvelopeTruncated(&'static str),
    #[error("BridgeEnvelope has {0} trailing octets after the method")]
    EnvelopeTrailing(usize),
    #[error("protocol_id 0x00 is reserved and must not be used")]
    ReservedProtocolId,
    #[error("message_kind {kind:#04x} contradicts frame type {frame_type:?}")]
    MessageKindMismatch { frame_type: FrameType, kind: u8 },
    #[error("{0:?} requires a non-empty correlation_id")]
    MissingCorrelation(FrameType),
    #[error("BRIDGE_NOTIFY must carry corr_len = 0")]
    NotifyWithCorrelation,
    #[error("method is not valid UTF-8")]
    MethodNotUtf8,
    #[error("SafetyLabel truncated: {0}")]
    SafetyLabelTruncated(&'static str),
    #[error("SafetyLabel has {0} trailing octets after the scope")]
    SafetyLabelTrailing(usize),
    #[error("SafetyLabel effect {0:#04x} is not defined")]
    UnknownEffect(u8),
    #[error("SafetyLabel scope is not valid UTF-8")]
    ScopeNotUtf8,
    #[error("extension TLV truncated")]
    ExtensionTruncated,
    #[error("extension of {0} octets exceeds the 65535 a TLV holds")]
    ExtensionTooLong(usize),
    #[error("unknown critical TLV {0:#06x} before the foreign message")]
    UnknownCriticalTlv(u16),
    #[error("{field} of {len} octets exceeds 255")]
    FieldTooLong { field: &'static str, len: usize },
    #[error("transport-error object truncated: {0} octets, at least 2 needed (code, msg_len)")]
    TransportErrorTruncated(usize),
    #[error("transport-error object of {got} octets where code and msg_len say {declared}")]
    TransportErrorLength { declared: usize, got: usize },
}

impl BridgeError {
    /// The transport error a receiver answers with (NPAMP-BRIDGE §4: every
    /// malformed or contradictory envelope is `EnvelopeMalformed`).
    pub const fn transport_error(&self) -> TransportError {
        TransportError::ENVELOPE_MALFORMED
    }
}
