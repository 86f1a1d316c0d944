//! BridgeEnvelope and SafetyLabel codecs (NPAMP-BRIDGE §3, §4, §7).

use super::{
    BRIDGE_ERROR, BRIDGE_NOTIFY, BRIDGE_REQUEST, BRIDGE_RESPONSE, BRIDGE_STREAM_DATA,
    BRIDGE_STREAM_END, BridgeError, FIELD_MAX_LEN, TransportError,
};
use crate::wire::{FrameType, Tlv, TlvType, tlv::TLV_HEADER_LEN};

/// Foreign protocol identifier (NPAMP-BRIDGE §4, `registries/bridge_protocol_ids.csv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProtocolId(pub u8);

impl ProtocolId {
    pub const MCP: Self = Self(0x01);
    pub const A2A: Self = Self(0x02);
    pub const HTTP2: Self = Self(0x03);
    pub const WEBSOCKET: Self = Self(0x04);
    /// Plain JSON-RPC APIs (Ethereum, ...): an id from the experimental
    /// range 0x10–0x7F (NPAMP-BRIDGE §4), since no mapping registers one.
    pub const JSONRPC_EXPERIMENTAL: Self = Self(0x10);
    /// The Language Server Protocol: an id of its own from the experimental
    /// range, so that each side labels LSP methods with LSP's effect table
    /// (`docs/lsp.md`) and a pair whose sides disagree is seen.
    pub const LSP_EXPERIMENTAL: Self = Self(0x11);
}

/// `message_kind` (NPAMP-BRIDGE §4); must agree with the frame type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageKind(pub u8);

impl MessageKind {
    pub const REQUEST: Self = Self(0x01);
    pub const RESPONSE: Self = Self(0x02);
    pub const NOTIFICATION: Self = Self(0x03);
    pub const ERROR: Self = Self(0x04);
    pub const STREAM_DATA: Self = Self(0x05);
    pub const STREAM_END: Self = Self(0x06);

    /// Whether frames of this kind echo a request's correlation_id.
    pub const fn is_reply(self) -> bool {
        matches!(self.0, 0x02 | 0x04..=0x06)
    }
}

/// The message kind a Bridge frame type carries; `None` for other frame types.
/// Note the order: BRIDGE_ERROR is 0x0102 but `error` is kind 0x04, and
/// BRIDGE_NOTIFY is 0x0103 but `notification` is kind 0x03.
pub const fn kind_for_frame_type(frame_type: FrameType) -> Option<MessageKind> {
    let mut i = 0;
    while i < FRAME_KINDS.len() {
        if FRAME_KINDS[i].0.0 == frame_type.0 {
            return Some(FRAME_KINDS[i].1);
        }
        i += 1;
    }
    None
}

/// The frame type that carries a message kind; `None` for unknown kinds.
pub const fn frame_type_for_kind(kind: MessageKind) -> Option<FrameType> {
    let mut i = 0;
    while i < FRAME_KINDS.len() {
        if FRAME_KINDS[i].1.0 == kind.0 {
            return Some(FRAME_KINDS[i].0);
        }
        i += 1;
    }
    None
}

/// NPAMP-BRIDGE §2 frame types against §4 message kinds.
const FRAME_KINDS: [(FrameType, MessageKind); 6] = [
    (BRIDGE_REQUEST, MessageKind::REQUEST),
    (BRIDGE_RESPONSE, MessageKind::RESPONSE),
    (BRIDGE_ERROR, MessageKind::ERROR),
    (BRIDGE_NOTIFY, MessageKind::NOTIFICATION),
    (BRIDGE_STREAM_DATA, MessageKind::STREAM_DATA),
    (BRIDGE_STREAM_END, MessageKind::STREAM_END),
];

/// Foreign-message encoding (NPAMP-BRIDGE §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContentType(pub u8);

impl ContentType {
    /// This implementation's marker for a BRIDGE_ERROR that carries an N-PAMP
    /// transport error in place of a foreign message (see `docs/bridge.md`).
    pub const TRANSPORT_ERROR: Self = Self(0x00);
    pub const JSON: Self = Self(0x01);
    pub const CBOR: Self = Self(0x02);
    pub const GRPC_PROTO: Self = Self(0x03);
}

/// SafetyLabel `effect` (NPAMP-BRIDGE §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Effect {
    ReadOnly = 0x00,
    IdempotentWrite = 0x01,
    NonIdempotentWrite = 0x02,
    Destructive = 0x03,
}

impl Effect {
    pub const fn from_octet(octet: u8) -> Option<Self> {
        match octet {
            0x00 => Some(Self::ReadOnly),
            0x01 => Some(Self::IdempotentWrite),
            0x02 => Some(Self::NonIdempotentWrite),
            0x03 => Some(Self::Destructive),
            _ => None,
        }
    }

    /// Executing it twice has the effect of executing it once: a request
    /// of this class whose fate is unknown may be sent again.
    pub const fn resend_safe(self) -> bool {
        matches!(self, Self::ReadOnly | Self::IdempotentWrite)
    }
}

/// The SafetyLabel TLV value: an effect class and an advisory scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SafetyLabel<'a> {
    pub effect: Effect,
    pub scope: &'a str,
}

/// The BridgeEnvelope TLV value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BridgeEnvelope<'a> {
    pub protocol_id: ProtocolId,
    pub message_kind: MessageKind,
    pub content_type: ContentType,
    /// Raw flags octet; bit 0 is `final`, bits 1–7 are reserved and ignored.
    pub flags: u8,
    pub correlation_id: &'a [u8],
    pub method: &'a str,
}

impl BridgeEnvelope<'_> {
    pub const FLAG_FINAL: u8 = 0x01;

    pub const fn is_final(&self) -> bool {
        self.flags & Self::FLAG_FINAL != 0
    }

    const FIXED_LEN: usize = 6;

    fn value_len(&self) -> usize {
        Self::FIXED_LEN + self.correlation_id.len() + self.method.len()
    }
}

/// This gateway's extension TLV, after the SafetyLabel and before the
/// foreign message (`docs/decisions.md` §9). Its types have the high bit
/// set: a receiver that does not know one rejects the frame (core draft,
/// "Extension TLV encoding"), so what it carries is never dropped unseen,
/// nor taken for the foreign message (which, JSON, starts with an ASCII
/// octet).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Extension<'a> {
    /// On a request: the `Authorization` header value the client sent the
    /// edge, for the origin to present to the upstream
    /// (`--forward-authorization`).
    Authorization(&'a [u8]),
    /// On a reply: the upstream refused the request's credentials; the
    /// value is `status u16 ‖ challenge_len u16 ‖ WWW-Authenticate ‖
    /// the upstream's protected-resource metadata` (the last possibly
    /// empty).
    Challenge(&'a [u8]),
    /// On a request: an HTTP request to the upstream's authorization
    /// endpoints, which the origin makes in place of delivering the
    /// foreign message (`--forward-authorization`, the MCP 2025-03-26
    /// layout; `docs/decisions.md` §10).
    HttpRequest(&'a [u8]),
    /// On a reply: what the upstream answered that HTTP request.
    HttpResponse(&'a [u8]),
    /// On a notification that cancels a request (MCP's
    /// `notifications/cancelled`, which an edge sends for a client that
    /// left): that request's correlation id, so that the receiver ends
    /// that request and no other with its id (`docs/decisions.md` §11).
    Cancel(&'a [u8]),
}

impl Extension<'_> {
    pub const AUTHORIZATION: TlvType = TlvType(0xF0A1);
    pub const CHALLENGE: TlvType = TlvType(0xF0A2);
    pub const HTTP_REQUEST: TlvType = TlvType(0xF0A3);
    pub const HTTP_RESPONSE: TlvType = TlvType(0xF0A4);
    pub const CANCEL: TlvType = TlvType(0xF0A5);

    /// Its value's length.
    pub fn len(&self) -> usize {
        self.parts().1.len()
    }

    /// Whether its value is empty (a client that sent no `Authorization`).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether its value fits a TLV (65 535 octets at most).
    pub fn fits(&self) -> bool {
        self.parts().1.len() <= usize::from(u16::MAX)
    }

    fn parts(&self) -> (TlvType, &[u8]) {
        match *self {
            Self::Authorization(v) => (Self::AUTHORIZATION, v),
            Self::Challenge(v) => (Self::CHALLENGE, v),
            Self::HttpRequest(v) => (Self::HTTP_REQUEST, v),
            Self::HttpResponse(v) => (Self::HTTP_RESPONSE, v),
            Self::Cancel(v) => (Self::CANCEL, v),
        }
    }
}

/// Never shows a credential.
impl std::fmt::Debug for Extension<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Authorization(v) => write!(f, "Authorization(<{} octets>)", v.len()),
            Self::Challenge(v) => write!(f, "Challenge(<{} octets>)", v.len()),
            Self::HttpRequest(v) => write!(f, "HttpRequest(<{} octets>)", v.len()),
            Self::HttpResponse(v) => write!(f, "HttpResponse(<{} octets>)", v.len()),
            Self::Cancel(v) => write!(f, "Cancel(<{} octets>)", v.len()),
        }
    }
}

/// A decoded Bridge frame plaintext.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BridgeMessage<'a> {
    pub frame_type: FrameType,
    pub envelope: BridgeEnvelope<'a>,
    pub safety: Option<SafetyLabel<'a>>,
    /// This gateway's extension, if the sender added one.
    pub extension: Option<Extension<'a>>,
    /// The foreign message, octet for octet.
    pub foreign: &'a [u8],
}

impl<'a> BridgeMessage<'a> {
    /// Decodes a Bridge frame's plaintext, applying every MUST-reject of
    /// NPAMP-BRIDGE §2–§7.
    pub fn decode(frame_type: FrameType, payload: &'a [u8]) -> Result<Self, BridgeError> {
        let frame_kind =
            kind_for_frame_type(frame_type).ok_or(BridgeError::NotBridgeFrame(frame_type))?;
        let (tlv, rest) = match Tlv::parse(payload) {
            Ok(parsed) => parsed,
            Err(_) if payload.len() >= 2 && payload[..2] != [0x00, 0x10] => {
                return Err(BridgeError::EnvelopeAbsent(u16::from_be_bytes([
                    payload[0], payload[1],
                ])));
            }
            Err(_) => return Err(BridgeError::EnvelopeTruncated("TLV length exceeds payload")),
        };
        if tlv.tlv_type != TlvType::BRIDGE_ENVELOPE {
            return Err(BridgeError::EnvelopeAbsent(tlv.tlv_type.0));
        }
        let envelope = decode_envelope_value(tlv.value)?;
        if envelope.protocol_id.0 == 0x00 {
            return Err(BridgeError::ReservedProtocolId);
        }
        if envelope.message_kind != frame_kind {
            return Err(BridgeError::MessageKindMismatch {
                frame_type,
                kind: envelope.message_kind.0,
            });
        }
        check_correlation(frame_type, envelope.correlation_id)?;
        let (safety, rest) = decode_safety_label(rest)?;
        let (extension, foreign) = decode_extension(rest)?;
        Ok(Self {
            frame_type,
            envelope,
            safety,
            extension,
            foreign,
        })
    }

    /// Octets of the encoding.
    pub fn encoded_len(&self) -> usize {
        envelope_and_label_len(&self.envelope, self.safety.as_ref())
            + self
                .extension
                .map_or(0, |e| TLV_HEADER_LEN + e.parts().1.len())
            + self.foreign.len()
    }

    /// Appends the encoding (envelope, optional label, foreign message) to `out`.
    #[inline]
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), BridgeError> {
        out.reserve(self.encoded_len());
        write_envelope(out, self.frame_type, &self.envelope, self.safety.as_ref())?;
        if let Some(e) = &self.extension {
            write_extension(out, e)?;
        }
        out.extend_from_slice(self.foreign);
        Ok(())
    }

    /// The transport error this BRIDGE_ERROR carries in place of a foreign
    /// message, with its detail; `None` for other messages. A receiver tells
    /// the two apart by content_type: a foreign error object always has its
    /// carriage class's own (`class`: JSON for JSON-RPC), a transport-error
    /// object any other (ours 0x00, the reference implementation's CBOR).
    pub fn transport_error(
        &self,
        class: ContentType,
    ) -> Option<Result<(TransportError, &'a [u8]), BridgeError>> {
        if self.frame_type != BRIDGE_ERROR || self.envelope.content_type == class {
            return None;
        }
        Some(super::decode_transport_error(self.foreign))
    }
}

/// Writes the BridgeEnvelope TLV and the optional SafetyLabel TLV; the caller
/// appends the foreign message after them. Validates what a sender must not
/// get wrong: kind vs frame type, correlation rules, field lengths, protocol_id.
#[inline]
pub fn write_envelope(
    out: &mut Vec<u8>,
    frame_type: FrameType,
    envelope: &BridgeEnvelope<'_>,
    safety: Option<&SafetyLabel<'_>>,
) -> Result<(), BridgeError> {
    let frame_kind =
        kind_for_frame_type(frame_type).ok_or(BridgeError::NotBridgeFrame(frame_type))?;
    if envelope.message_kind != frame_kind {
        return Err(BridgeError::MessageKindMismatch {
            frame_type,
            kind: envelope.message_kind.0,
        });
    }
    if envelope.protocol_id.0 == 0x00 {
        return Err(BridgeError::ReservedProtocolId);
    }
    check_correlation(frame_type, envelope.correlation_id)?;
    let corr_len = field_len("correlation_id", envelope.correlation_id.len())?;
    let method_len = field_len("method", envelope.method.len())?;
    let scope_len = safety
        .map(|label| field_len("scope", label.scope.len()))
        .transpose()?;

    // Cannot truncate: 6 + 255 + 255 fits a u16.
    let value_len = envelope.value_len() as u16;
    out.extend_from_slice(&TlvType::BRIDGE_ENVELOPE.0.to_be_bytes());
    out.extend_from_slice(&value_len.to_be_bytes());
    out.extend_from_slice(&[
        envelope.protocol_id.0,
        envelope.message_kind.0,
        envelope.content_type.0,
        envelope.flags,
        corr_len,
    ]);
    out.extend_from_slice(envelope.correlation_id);
    out.push(method_len);
    out.extend_from_slice(envelope.method.as_bytes());

    if let (Some(label), Some(scope_len)) = (safety, scope_len) {
        out.extend_from_slice(&TlvType::SAFETY_LABEL.0.to_be_bytes());
        out.extend_from_slice(&(2 + u16::from(scope_len)).to_be_bytes());
        out.extend_from_slice(&[label.effect as u8, scope_len]);
        out.extend_from_slice(label.scope.as_bytes());
    }
    Ok(())
}

/// Writes this gateway's extension TLV, after [`write_envelope`] and
/// before the foreign message; refused over 65 535 octets.
pub fn write_extension(out: &mut Vec<u8>, extension: &Extension<'_>) -> Result<(), BridgeError> {
    let (tlv_type, value) = extension.parts();
    let len = u16::try_from(value.len()).map_err(|_| BridgeError::ExtensionTooLong(value.len()))?;
    out.extend_from_slice(&tlv_type.0.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(value);
    Ok(())
}

/// Octets [`write_envelope`] writes.
pub fn envelope_and_label_len(
    envelope: &BridgeEnvelope<'_>,
    safety: Option<&SafetyLabel<'_>>,
) -> usize {
    TLV_HEADER_LEN + envelope.value_len() + safety.map_or(0, |l| TLV_HEADER_LEN + 2 + l.scope.len())
}

/// `bridge.correlate`: whether `reply` answers `request` — the request is a
/// BRIDGE_REQUEST, the reply a reply kind, and the correlation_ids are equal.
pub fn correlates(request: &BridgeMessage<'_>, reply: &BridgeMessage<'_>) -> bool {
    request.frame_type == BRIDGE_REQUEST
        && reply.envelope.message_kind.is_reply()
        && request.envelope.correlation_id == reply.envelope.correlation_id
}

fn field_len(field: &'static str, len: usize) -> Result<u8, BridgeError> {
    if len > FIELD_MAX_LEN {
        return Err(BridgeError::FieldTooLong { field, len });
    }
    Ok(len as u8)
}

fn check_correlation(frame_type: FrameType, corr: &[u8]) -> Result<(), BridgeError> {
    match (frame_type == BRIDGE_NOTIFY, corr.is_empty()) {
        (true, false) => Err(BridgeError::NotifyWithCorrelation),
        (false, true) => Err(BridgeError::MissingCorrelation(frame_type)),
        _ => Ok(()),
    }
}

/// Reads `len` octets off the front of `rest`.
fn take<'a>(rest: &mut &'a [u8], len: usize, what: &'static str) -> Result<&'a [u8], BridgeError> {
    if rest.len() < len {
        return Err(BridgeError::EnvelopeTruncated(what));
    }
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    Ok(head)
}

fn decode_envelope_value(value: &[u8]) -> Result<BridgeEnvelope<'_>, BridgeError> {
    let mut rest = value;
    let fixed = take(&mut rest, 5, "fixed fields")?;
    let correlation_id = take(&mut rest, usize::from(fixed[4]), "correlation_id")?;
    let method_len = take(&mut rest, 1, "method_len")?[0];
    let method = take(&mut rest, usize::from(method_len), "method")?;
    if !rest.is_empty() {
        return Err(BridgeError::EnvelopeTrailing(rest.len()));
    }
    let method = std::str::from_utf8(method).map_err(|_| BridgeError::MethodNotUtf8)?;
    Ok(BridgeEnvelope {
        protocol_id: ProtocolId(fixed[0]),
        message_kind: MessageKind(fixed[1]),
        content_type: ContentType(fixed[2]),
        flags: fixed[3],
        correlation_id,
        method,
    })
}

/// The optional SafetyLabel after the envelope: present when the next two
/// octets are its type (a JSON foreign message starts with `{`, `[` or
/// whitespace, never 0x00).
fn decode_safety_label(rest: &[u8]) -> Result<(Option<SafetyLabel<'_>>, &[u8]), BridgeError> {
    if !rest.starts_with(&TlvType::SAFETY_LABEL.0.to_be_bytes()) {
        return Ok((None, rest));
    }
    let (tlv, foreign) = Tlv::parse(rest)
        .map_err(|_| BridgeError::SafetyLabelTruncated("TLV length exceeds payload"))?;
    let [effect, scope_len, scope @ ..] = tlv.value else {
        return Err(BridgeError::SafetyLabelTruncated("effect and scope_len"));
    };
    let scope_len = usize::from(*scope_len);
    if scope.len() < scope_len {
        return Err(BridgeError::SafetyLabelTruncated("scope"));
    }
    if scope.len() > scope_len {
        return Err(BridgeError::SafetyLabelTrailing(scope.len() - scope_len));
    }
    let effect = Effect::from_octet(*effect).ok_or(BridgeError::UnknownEffect(*effect))?;
    let scope = std::str::from_utf8(scope).map_err(|_| BridgeError::ScopeNotUtf8)?;
    Ok((Some(SafetyLabel { effect, scope }), foreign))
}

/// The extension after the SafetyLabel: present when the next octet has
/// its high bit set (a JSON foreign message starts with an ASCII one). One
/// of another type is refused, as the core asks of an unknown critical
/// TLV.
fn decode_extension(rest: &[u8]) -> Result<(Option<Extension<'_>>, &[u8]), BridgeError> {
    if rest.first().is_none_or(|b| b & 0x80 == 0) {
        return Ok((None, rest));
    }
    let (tlv, foreign) = Tlv::parse(rest).map_err(|_| BridgeError::ExtensionTruncated)?;
    let extension = match tlv.tlv_type {
        Extension::AUTHORIZATION => Extension::Authorization(tlv.value),
        Extension::CHALLENGE => Extension::Challenge(tlv.value),
        Extension::HTTP_REQUEST => Extension::HttpRequest(tlv.value),
        Extension::HTTP_RESPONSE => Extension::HttpResponse(tlv.value),
        Extension::CANCEL => Extension::Cancel(tlv.value),
        other => return Err(BridgeError::UnknownCriticalTlv(other.0)),
    };
    Ok((Some(extension), foreign))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(corr: &'a [u8], foreign: &'a [u8]) -> BridgeMessage<'a> {
        BridgeMessage {
            frame_type: BRIDGE_REQUEST,
            envelope: BridgeEnvelope {
                protocol_id: ProtocolId::MCP,
                message_kind: MessageKind::REQUEST,
                content_type: ContentType::JSON,
                flags: 0,
                correlation_id: corr,
                method: "tools/call",
            },
            safety: Some(SafetyLabel {
                effect: Effect::NonIdempotentWrite,
                scope: "fs:/tmp",
            }),
            extension: None,
            foreign,
        }
    }

    #[test]
    fn encode_decode_roundtrip() {
        let m = request(
            b"\x0a\x0b\x0c\x0d",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
        );
        let mut out = Vec::new();
        m.encode_into(&mut out).unwrap();
        assert_eq!(out.len(), m.encoded_len());
        assert_eq!(BridgeMessage::decode(BRIDGE_REQUEST, &out).unwrap(), m);
    }

    #[test]
    fn decode_rejects_protocol_id_zero() {
        let mut out = Vec::new();
        request(b"c", b"{}").encode_into(&mut out).unwrap();
        out[4] = 0;
        assert_eq!(
            BridgeMessage::decode(BRIDGE_REQUEST, &out),
            Err(BridgeError::ReservedProtocolId)
        );
    }

    #[test]
    fn encode_refuses_what_decode_would_reject() {
        let mut out = Vec::new();
        let mut m = request(b"", b"{}");
        assert!(matches!(
            m.encode_into(&mut out),
            Err(BridgeError::MissingCorrelation(_))
        ));
        m.envelope.correlation_id = b"c";
        m.frame_type = BRIDGE_RESPONSE;
        assert!(matches!(
            m.encode_into(&mut out),
            Err(BridgeError::MessageKindMismatch { .. })
        ));
        let long = "m".repeat(256);
        let mut m = request(b"c", b"{}");
        m.envelope.method = &long;
        assert!(matches!(
            m.encode_into(&mut out),
            Err(BridgeError::FieldTooLong {
                field: "method",
                ..
            })
        ));
    }

    #[test]
    fn decode_rejects_unknown_effect_and_trailing_scope() {
        let mut out = Vec::new();
        request(b"c", b"{}").encode_into(&mut out).unwrap();
        let label_at = 4 + 6 + 1 + "tools/call".len();
        let mut bad = out.clone();
        bad[label_at + 4] = 9;
        assert_eq!(
            BridgeMessage::decode(BRIDGE_REQUEST, &bad),
            Err(BridgeError::UnknownEffect(9))
        );
        let mut bad = out.clone();
        bad[label_at + 5] = 3; // scope_len 3 of 7 octets
        assert_eq!(
            BridgeMessage::decode(BRIDGE_REQUEST, &bad),
            Err(BridgeError::SafetyLabelTrailing(4))
        );
    }

    #[test]
    fn frame_type_and_kind_map_both_ways() {
        for t in 0x0100..=0x0105 {
            let kind = kind_for_frame_type(FrameType(t)).unwrap();
            assert_eq!(frame_type_for_kind(kind), Some(FrameType(t)));
        }
        assert_eq!(kind_for_frame_type(FrameType(0x0106)), None);
        assert_eq!(kind_for_frame_type(FrameType::PING), None);
        assert_eq!(kind_for_frame_type(BRIDGE_ERROR), Some(MessageKind::ERROR));
        assert_eq!(
            kind_for_frame_type(BRIDGE_NOTIFY),
            Some(MessageKind::NOTIFICATION)
        );
    }

    #[test]
    fn an_extension_sits_between_the_label_and_the_foreign_message() {
        let foreign = br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#;
        let mut m = request(b"c1", foreign);
        m.safety = Some(SafetyLabel {
            effect: Effect::ReadOnly,
            scope: "s",
        });
        for extension in [
            Extension::Authorization(b"Bearer t"),
            Extension::Authorization(b""),
            Extension::Challenge(b"\x01\x91\x00\x06Bearer"),
            Extension::HttpRequest(b"\x00\x03GET"),
            Extension::HttpResponse(b"\x01\x2e"),
            Extension::Cancel(b"7"),
        ] {
            m.extension = Some(extension);
            let mut out = Vec::new();
            m.encode_into(&mut out).expect("encode");
            assert_eq!(out.len(), m.encoded_len());
            assert_eq!(BridgeMessage::decode(BRIDGE_REQUEST, &out), Ok(m));
        }
        // Another critical type where ours would be: refused, not taken for
        // the foreign message.
        let mut out = Vec::new();
        m.extension = None;
        m.encode_into(&mut out).expect("encode");
        let at = out.len() - foreign.len();
        let mut unknown = out[..at].to_vec();
        unknown.extend_from_slice(&[0xF0, 0xFF, 0x00, 0x01, 0x00]);
        unknown.extend_from_slice(foreign);
        assert_eq!(
            BridgeMessage::decode(BRIDGE_REQUEST, &unknown),
            Err(BridgeError::UnknownCriticalTlv(0xF0FF))
        );
        let mut cut = out[..at].to_vec();
        cut.extend_from_slice(&[0xF0, 0xA1, 0x00, 0x09, b'x']);
        assert_eq!(
            BridgeMessage::decode(BRIDGE_REQUEST, &cut),
            Err(BridgeError::ExtensionTruncated)
        );
        // A credential is never shown.
        let shown = format!("{:?}", Extension::Authorization(b"Bearer secret"));
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn transport_error_roundtrip() {
        let m = BridgeMessage {
            frame_type: BRIDGE_ERROR,
            envelope: BridgeEnvelope {
                protocol_id: ProtocolId::MCP,
                message_kind: MessageKind::ERROR,
                content_type: ContentType::TRANSPORT_ERROR,
                flags: 0,
                correlation_id: b"c1",
                method: "tools/call",
            },
            safety: None,
            extension: None,
            foreign: b"\x04\x1bupstream refused connection",
        };
        let mut out = Vec::new();
        m.encode_into(&mut out).unwrap();
        let d = BridgeMessage::decode(BRIDGE_ERROR, &out).unwrap();
        let (code, detail) = d.transport_error(ContentType::JSON).unwrap().unwrap();
        assert_eq!(code, TransportError::NOT_DELIVERED);
        assert_eq!(detail, b"upstream refused connection");
    }
}
