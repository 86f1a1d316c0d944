//! NPAMP-CC-JSONRPC: a scanned JSON-RPC object ↔ a Bridge frame payload.
//!
//! Sending: [`write_payload`] writes the envelope (derived from the scan) and,
//! after it, the JSON-RPC text octet for octet, into the caller's buffer —
//! typically the frame being sealed, so the text is copied once. Receiving:
//! [`check_inbound`] runs every check of §3–§7 and returns the scanned kind.
//! Edge-generated errors ([`local_error`]) and batch joining ([`BatchJoin`])
//! live here too.

use std::borrow::Cow;

use super::scan::{self, IdToken, Kind, Limits, ScanError, Scanned, StrToken};
use crate::bridge::{
    self, BridgeEnvelope, BridgeError, BridgeMessage, ContentType, Effect, Extension, MessageKind,
    ProtocolId, SafetyLabel, TransportError,
};
use crate::wire::FrameType;

/// Why a Bridge frame is not valid JSON-RPC carriage. Every variant is
/// answered with `EnvelopeMalformed` (see [`CarriageError::transport_error`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CarriageError {
    #[error("envelope: {0}")]
    Envelope(#[from] BridgeError),
    #[error("content_type {0:#04x} is not application/json (0x01)")]
    ContentType(u8),
    #[error("carried object is not JSON-RPC 2.0: {0}")]
    Foreign(ScanError),
    #[error("a Bridge frame carries one JSON-RPC object, not a batch")]
    BatchInFrame,
    #[error("frame type {frame_type:?} cannot carry a JSON-RPC {carried}")]
    KindMismatch {
        frame_type: FrameType,
        carried: &'static str,
    },
    #[error("envelope method {envelope:?} is not the object's method {object:?}")]
    MethodMismatch { envelope: String, object: String },
}

impl CarriageError {
    pub const fn transport_error(&self) -> TransportError {
        TransportError::ENVELOPE_MALFORMED
    }
}

/// The `method` member's string value (escapes decoded only when present).
pub fn method_of<'a>(text: &'a [u8], method: &StrToken) -> Option<Cow<'a, str>> {
    let raw = text.get(method.raw.clone())?;
    if method.escaped {
        scan::decode_string(raw).map(Cow::Owned)
    } else {
        std::str::from_utf8(raw).ok().map(Cow::Borrowed)
    }
}

/// What kind of JSON-RPC object a frame type carries.
const fn kind_name(kind: &Kind) -> &'static str {
    match kind {
        Kind::Request { .. } => "request",
        Kind::Notification { .. } => "notification",
        Kind::Success { .. } => "success response",
        Kind::Error { .. } => "error response",
    }
}

/// The frame type and message kind that carry a notification that belongs
/// to a request (`correlation_id` non-empty: the request's): one chunk of
/// that request's streamed reply, BRIDGE_STREAM_DATA (NPAMP-BRIDGE §2, §5;
/// `docs/decisions.md` §11); any other object as [`frame_type_of`] says.
pub const fn frame_type_for(kind: &Kind, correlation_id: &[u8]) -> (FrameType, MessageKind) {
    match kind {
        Kind::Notification { .. } if !correlation_id.is_empty() => {
            (bridge::BRIDGE_STREAM_DATA, MessageKind::STREAM_DATA)
        }
        _ => frame_type_of(kind),
    }
}

/// The frame type and message kind that carry a JSON-RPC object (§4–§7).
pub const fn frame_type_of(kind: &Kind) -> (FrameType, MessageKind) {
    match kind {
        Kind::Request { .. } => (bridge::BRIDGE_REQUEST, MessageKind::REQUEST),
        Kind::Notification { .. } => (bridge::BRIDGE_NOTIFY, MessageKind::NOTIFICATION),
        Kind::Success { .. } => (bridge::BRIDGE_RESPONSE, MessageKind::RESPONSE),
        Kind::Error { .. } => (bridge::BRIDGE_ERROR, MessageKind::ERROR),
    }
}

/// Writes the Bridge payload for one JSON-RPC object: envelope, optional
/// SafetyLabel (requests and notifications), then `text` verbatim.
/// `correlation_id` is empty for a notification (§7) and the request's for a
/// reply (§5, §6), or for a notification that belongs to that request
/// (BRIDGE_STREAM_DATA, [`frame_type_for`]). Replies carry no method (§5,
/// §6). Returns the frame type.
pub fn write_payload(
    out: &mut Vec<u8>,
    protocol: ProtocolId,
    text: &[u8],
    kind: &Kind,
    correlation_id: &[u8],
    safety: Option<SafetyLabel<'_>>,
) -> Result<FrameType, CarriageError> {
    write_payload_with(out, protocol, text, kind, correlation_id, safety, None)
}

/// [`write_payload`], with this gateway's `extension` TLV before the text
/// (`docs/decisions.md` §9).
pub fn write_payload_with(
    out: &mut Vec<u8>,
    protocol: ProtocolId,
    text: &[u8],
    kind: &Kind,
    correlation_id: &[u8],
    safety: Option<SafetyLabel<'_>>,
    extension: Option<Extension<'_>>,
) -> Result<FrameType, CarriageError> {
    let (frame_type, message_kind) = frame_type_for(kind, correlation_id);
    let method = match kind {
        Kind::Request { method, .. } | Kind::Notification { method } => method_of(text, method)
            .ok_or(CarriageError::Foreign(ScanError::Invalid(
                scan::InvalidRequest::MethodNotUnicode,
            )))?,
        Kind::Success { .. } | Kind::Error { .. } => Cow::Borrowed(""),
    };
    let safety = match kind {
        Kind::Request { .. } | Kind::Notification { .. } => safety,
        _ => None,
    };
    let envelope = BridgeEnvelope {
        protocol_id: protocol,
        message_kind,
        content_type: ContentType::JSON,
        flags: 0,
        correlation_id,
        method: &method,
    };
    // Refused before anything is written: never an envelope without its
    // message.
    if let Some(e) = extension.as_ref().filter(|e| !e.fits()) {
        return Err(BridgeError::ExtensionTooLong(e.len()).into());
    }
    out.reserve(
        bridge::envelope_and_label_len(&envelope, safety.as_ref())
            + extension.as_ref().map_or(0, |e| 4 + e.len())
            + text.len(),
    );
    bridge::write_envelope(out, frame_type, &envelope, safety.as_ref())?;
    if let Some(e) = &extension {
        bridge::write_extension(out, e)?;
    }
    out.extend_from_slice(text);
    Ok(frame_type)
}

/// Writes a BRIDGE_ERROR payload carrying a transport error in place of a
/// foreign message (`docs/decisions.md` §2): content_type 0x00 (never
/// JSON, so never a foreign error), then the transport-error object
/// `code u8 ‖ msg_len u8 ‖ msg` (a detail past 255 octets is cut).
pub fn write_transport_error(
    out: &mut Vec<u8>,
    protocol: ProtocolId,
    correlation_id: &[u8],
    code: TransportError,
    detail: &str,
) -> Result<(), CarriageError> {
    let envelope = BridgeEnvelope {
        protocol_id: protocol,
        message_kind: MessageKind::ERROR,
        content_type: ContentType::TRANSPORT_ERROR,
        flags: 0,
        correlation_id,
        method: "",
    };
    bridge::write_envelope(out, bridge::BRIDGE_ERROR, &envelope, None)?;
    bridge::write_transport_error_object(out, code, detail);
    Ok(())
}

/// A received Bridge frame that passed every carriage check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound<'a> {
    /// A JSON-RPC object; `text` is the foreign message, untouched.
    JsonRpc {
        kind: Kind,
        text: &'a [u8],
        correlation_id: &'a [u8],
        safety: Option<Effect>,
        /// This gateway's extension beside it (`docs/decisions.md` §9).
        extension: Option<Extension<'a>>,
    },
    /// A transport error in place of a reply.
    TransportError {
        code: TransportError,
        detail: &'a [u8],
        correlation_id: &'a [u8],
    },
}

/// The receiving side's checks (§3–§7): content_type JSON, the foreign
/// message one valid JSON-RPC 2.0 object of the kind the frame type says,
/// and the envelope method equal to the object's. Correlation of replies
/// (id against correlation_id) is the [`super::Correlator`]'s.
pub fn check_inbound<'a>(
    msg: &BridgeMessage<'a>,
    limits: &Limits,
) -> Result<Inbound<'a>, CarriageError> {
    if let Some(te) = msg.transport_error(ContentType::JSON) {
        let (code, detail) = te?;
        return Ok(Inbound::TransportError {
            code,
            detail,
            correlation_id: msg.envelope.correlation_id,
        });
    }
    if msg.envelope.content_type != ContentType::JSON {
        return Err(CarriageError::ContentType(msg.envelope.content_type.0));
    }
    let kind = match scan::scan(msg.foreign, limits).map_err(CarriageError::Foreign)? {
        Scanned::Single(kind) => kind,
        Scanned::Batch(_) => return Err(CarriageError::BatchInFrame),
    };
    if frame_type_for(&kind, msg.envelope.correlation_id).0 != msg.frame_type {
        return Err(CarriageError::KindMismatch {
            frame_type: msg.frame_type,
            carried: kind_name(&kind),
        });
    }
    if let Kind::Request { method, .. } | Kind::Notification { method } = &kind {
        let object = method_of(msg.foreign, method).unwrap_or_default();
        if object != msg.envelope.method {
            return Err(CarriageError::MethodMismatch {
                envelope: msg.envelope.method.to_owned(),
                object: object.into_owned(),
            });
        }
    }
    Ok(Inbound::JsonRpc {
        kind,
        text: msg.foreign,
        correlation_id: msg.envelope.correlation_id,
        safety: msg.safety.map(|s| s.effect),
        extension: msg.extension,
    })
}

/// The JSON-RPC code an edge uses for a transport error (DESIGN.md §5:
/// server-error range, -32000..-32099).
pub const fn edge_code(code: TransportError) -> i32 {
    match code.0 {
        1 => -32001,
        2 => -32002,
        3 => -32003,
        4 => -32004,
        5 => -32005,
        _ => -32000,
    }
}

/// A JSON-RPC error response generated by the edge itself: `id` is the raw
/// token of the request's id (`None` → `null`), `data` is an optional JSON
/// value written as is.
pub fn local_error(id: Option<&[u8]>, code: i32, message: &str, data: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + message.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"error\":{\"code\":");
    out.extend_from_slice(code.to_string().as_bytes());
    out.extend_from_slice(b",\"message\":");
    // Serialising a &str to JSON cannot fail.
    let _ = serde_json::to_writer(&mut out, message);
    if let Some(data) = data {
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(data.as_bytes());
    }
    out.extend_from_slice(b"},\"id\":");
    out.extend_from_slice(id.unwrap_or(b"null"));
    out.push(b'}');
    out
}

/// The edge's answer to a transport failure, with `data` naming the N-PAMP
/// transport error: `{"npamp_error":"NotDelivered","npamp_code":4,"detail":…}`.
pub fn transport_error_response(id: Option<&[u8]>, code: TransportError, detail: &str) -> Vec<u8> {
    let data = serde_json::json!({
        "npamp_error": code.name(),
        "npamp_code": code.0,
        "detail": detail,
    })
    .to_string();
    local_error(
        id,
        edge_code(code),
        &format!("N-PAMP transport error: {}", code.name()),
        Some(&data),
    )
}

/// The edge's answer to a text it cannot carry (-32700 / -32600).
pub fn scan_error_response(err: &ScanError) -> Vec<u8> {
    scan_error_response_to(None, err)
}

/// [`scan_error_response`] for a request whose id token is known
/// (`None` → `null`).
pub fn scan_error_response_to(id: Option<&[u8]>, err: &ScanError) -> Vec<u8> {
    let message = match err {
        ScanError::Parse { .. } => "Parse error",
        _ => "Invalid Request",
    };
    let detail = serde_json::Value::String(err.to_string()).to_string();
    local_error(id, err.jsonrpc_code(), message, Some(&detail))
}

/// Joins replies to a batch into one JSON array, each reply's octets
/// untouched. A batch whose elements were all notifications has no reply
/// ([`BatchJoin::finish`] returns `None`, JSON-RPC §6).
#[derive(Clone, Debug, Default)]
pub struct BatchJoin {
    out: Vec<u8>,
    replies: usize,
}

impl BatchJoin {
    pub fn with_capacity(octets: usize) -> Self {
        Self {
            out: Vec::with_capacity(octets),
            replies: 0,
        }
    }

    pub fn push(&mut self, reply: &[u8]) {
        self.out.push(if self.replies == 0 { b'[' } else { b',' });
        self.out.extend_from_slice(reply);
        self.replies += 1;
    }

    pub const fn len(&self) -> usize {
        self.replies
    }

    pub const fn is_empty(&self) -> bool {
        self.replies == 0
    }

    pub fn finish(mut self) -> Option<Vec<u8>> {
        if self.replies == 0 {
            return None;
        }
        self.out.push(b']');
        Some(self.out)
    }
}

/// The id token of a scanned object, if it has one.
pub fn id_of(kind: &Kind) -> Option<&IdToken> {
    match kind {
        Kind::Request { id, .. } | Kind::Success { id } | Kind::Error { id } => Some(id),
        Kind::Notification { .. } => None,
    }
}
