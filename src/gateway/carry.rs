//! What both ends of a gateway pair share: putting one scanned JSON-RPC
//! object on an association (envelope + SafetyLabel + the octets, sealed
//! once), reading one back, and the edge's answers when the bridge fails.

use bytes::Bytes;

use crate::assoc::{AssocHandle, End, Gone};
use crate::bridge::{self, BridgeMessage, ContentType, ProtocolId, SafetyLabel, TransportError};
use crate::jsonrpc::carriage::{self, Inbound, frame_type_of, method_of, write_payload};
use crate::jsonrpc::{Kind, Labeler, Limits};

use super::metrics::ReplyClass;

/// Why the edge answers a request itself (DESIGN.md §5). Never a fabricated
/// success or upstream error: each names what failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The peer answered with an N-PAMP transport error.
    Transport(TransportError, String),
    /// No reply within the request timeout.
    Timeout,
    /// The edge refused: too many requests in flight, or no association
    /// to the peer could be established.
    Unavailable(String),
    /// The association ended before the reply came.
    Lost(String),
    /// The message cannot be carried (-32600 from the edge, HTTP 200 as
    /// for any invalid request).
    Invalid(String),
}

impl Failure {
    /// The transport error named in the answer.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Transport(code, _) => code.name(),
            Self::Timeout => "Timeout",
            Self::Unavailable(_) => "Unavailable",
            Self::Lost(_) => "NotDelivered",
            Self::Invalid(_) => "Invalid",
        }
    }

    /// JSON-RPC code (server-error range -32000..-32099).
    pub fn code(&self) -> i32 {
        match self {
            Self::Transport(code, _) => carriage::edge_code(*code),
            Self::Lost(_) => carriage::edge_code(TransportError::NOT_DELIVERED),
            Self::Timeout => -32010,
            Self::Unavailable(_) => -32011,
            Self::Invalid(_) => -32600,
        }
    }

    /// HTTP status at an HTTP ingress.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Transport(..) | Self::Lost(_) => 502,
            Self::Unavailable(_) => 503,
            Self::Timeout => 504,
            Self::Invalid(_) => 200,
        }
    }

    pub fn class(&self) -> ReplyClass {
        match self {
            Self::Transport(..) | Self::Lost(_) => ReplyClass::Transport,
            Self::Timeout => ReplyClass::Timeout,
            Self::Unavailable(_) => ReplyClass::Unavailable,
            Self::Invalid(_) => ReplyClass::Invalid,
        }
    }

    fn detail(&self) -> &str {
        match self {
            Self::Transport(_, d) | Self::Unavailable(d) | Self::Lost(d) | Self::Invalid(d) => d,
            Self::Timeout => "no reply within the request timeout",
        }
    }

    /// The JSON-RPC error the edge answers with; `data` names the failure:
    /// `{"npamp_error":"NotDelivered","npamp_code":4,"detail":"…"}`.
    pub fn response(&self, id: Option<&[u8]>) -> Vec<u8> {
        match self {
            Self::Transport(code, detail) => {
                return carriage::transport_error_response(id, *code, detail);
            }
            Self::Invalid(detail) => {
                let data = serde_json::Value::String(detail.clone()).to_string();
                return carriage::local_error(id, -32600, "Invalid Request", Some(&data));
            }
            _ => {}
        }
        let code = match self {
            Self::Lost(_) => TransportError::NOT_DELIVERED.0,
            _ => 0,
        };
        let data = serde_json::json!({
            "npamp_error": self.name(),
            "npamp_code": code,
            "detail": self.detail(),
        })
        .to_string();
        carriage::local_error(
            id,
            self.code(),
            &format!("N-PAMP gateway: {}", self.name()),
            Some(&data),
        )
    }
}

impl From<Gone> for Failure {
    fn from(g: Gone) -> Self {
        Failure::Lost(g.to_string())
    }
}

/// Why a message cannot be put on the bridge at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Uncarriable {
    #[error("method name is not valid Unicode")]
    MethodNotUnicode,
    #[error("method name of {0} octets is longer than the 255 the envelope can carry")]
    MethodTooLong(usize),
}

/// A JSON-RPC object ready to be sealed: the frame type, its envelope
/// fields and the octets, which are copied once, into the sealed frame.
pub struct Outgoing<'a> {
    text: &'a [u8],
    kind: &'a Kind,
    label: Option<(bridge::Effect, String)>,
}

impl<'a> Outgoing<'a> {
    /// Checks that the object can be carried and labels requests and
    /// notifications.
    pub fn new(text: &'a [u8], kind: &'a Kind, labeler: &Labeler) -> Result<Self, Uncarriable> {
        let label = match kind {
            Kind::Request { method, .. } | Kind::Notification { method } => {
                let m = method_of(text, method).ok_or(Uncarriable::MethodNotUnicode)?;
                if m.len() > bridge::FIELD_MAX_LEN {
                    return Err(Uncarriable::MethodTooLong(m.len()));
                }
                let mut label = labeler.label(&m, text);
                if label.scope.len() > bridge::FIELD_MAX_LEN {
                    label.scope.clear();
                }
                Some((label.effect, label.scope))
            }
            _ => None,
        };
        Ok(Self { text, kind, label })
    }

    /// Seals it on `assoc` with `correlation_id` (≤ 255 octets: ours are 9,
    /// a canonical id token is checked by the caller).
    pub async fn send(
        &self,
        assoc: &AssocHandle,
        protocol: ProtocolId,
        correlation_id: &[u8],
    ) -> Result<(), Gone> {
        let (frame_type, _) = frame_type_of(self.kind);
        let safety = self.label.as_ref().map(|(effect, scope)| SafetyLabel {
            effect: *effect,
            scope,
        });
        assoc
            .send(frame_type, |out| {
                // Cannot fail: method, scope and correlation_id were checked.
                let r = write_payload(out, protocol, self.text, self.kind, correlation_id, safety);
                debug_assert!(r.is_ok(), "{r:?}");
            })
            .await
    }
}

/// Sends a BRIDGE_ERROR carrying a transport error for `correlation_id`.
pub async fn send_transport_error(
    assoc: &AssocHandle,
    protocol: ProtocolId,
    correlation_id: &[u8],
    code: TransportError,
    detail: &str,
) -> Result<(), Gone> {
    let detail = truncate_utf8(detail, 512);
    assoc
        .send(bridge::BRIDGE_ERROR, |out| {
            let r = carriage::write_transport_error(out, protocol, correlation_id, code, detail);
            debug_assert!(r.is_ok(), "{r:?}");
        })
        .await
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A Bridge frame decoded and checked (NPAMP-BRIDGE + CC-JSONRPC).
pub enum Received<'a> {
    Message(Inbound<'a>),
    /// Not valid carriage; a request's correlation_id (when one could be
    /// read) is to be answered with EnvelopeMalformed.
    Malformed {
        error: String,
        correlation_id: Option<&'a [u8]>,
    },
    /// A protocol_id this gateway does not carry.
    WrongProtocol {
        protocol: ProtocolId,
        correlation_id: &'a [u8],
    },
}

/// Decodes a Bridge payload and runs the carriage checks.
pub fn receive<'a>(
    frame_type: crate::wire::FrameType,
    payload: &'a [u8],
    protocol: ProtocolId,
    limits: &Limits,
) -> Received<'a> {
    let msg = match BridgeMessage::decode(frame_type, payload) {
        Ok(m) => m,
        Err(e) => {
            return Received::Malformed {
                error: e.to_string(),
                correlation_id: None,
            };
        }
    };
    let is_request = frame_type == bridge::BRIDGE_REQUEST;
    if msg.envelope.protocol_id != protocol && msg.envelope.content_type == ContentType::JSON {
        return Received::WrongProtocol {
            protocol: msg.envelope.protocol_id,
            correlation_id: msg.envelope.correlation_id,
        };
    }
    match carriage::check_inbound(&msg, limits) {
        Ok(inbound) => Received::Message(inbound),
        Err(e) => Received::Malformed {
            error: e.to_string(),
            correlation_id: is_request.then_some(msg.envelope.correlation_id),
        },
    }
}

/// A frame for a protocol_id this gateway does not carry: a request is
/// answered ProtocolUnsupported, anything else dropped.
pub async fn refuse_protocol(
    assoc: &AssocHandle,
    ctx: &super::Ctx,
    frame_type: crate::wire::FrameType,
    protocol: ProtocolId,
    correlation_id: &[u8],
) {
    let code = TransportError::PROTOCOL_UNSUPPORTED;
    ctx.metrics.transport_error(code);
    if frame_type != bridge::BRIDGE_REQUEST {
        ctx.metrics
            .dropped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    let detail = format!(
        "this gateway carries protocol_id {:#04x}, not {:#04x}",
        ctx.protocol.0, protocol.0
    );
    let _ = send_transport_error(assoc, ctx.protocol, correlation_id, code, &detail).await;
}

/// A frame that is not valid carriage: dropped and counted; a request
/// among them (its correlation id could be read) is answered
/// EnvelopeMalformed.
pub async fn refuse_malformed(
    assoc: &AssocHandle,
    ctx: &super::Ctx,
    error: &str,
    correlation_id: Option<&[u8]>,
) {
    tracing::warn!(%error, "malformed Bridge frame");
    ctx.metrics
        .dropped
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(corr) = correlation_id {
        let code = TransportError::ENVELOPE_MALFORMED;
        ctx.metrics.transport_error(code);
        let _ = send_transport_error(assoc, ctx.protocol, corr, code, error).await;
    }
}

/// A reply to a request that crossed the bridge, as the edge hands it on.
#[derive(Clone, Debug)]
pub enum Reply {
    /// The upstream's reply object, verbatim.
    Message {
        text: Bytes,
        is_error: bool,
    },
    Failed(Failure),
}

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

/// The NotDelivered detail for a reply the upstream did produce that is over
/// `--max-body` (`limit`): the upstream executed the request, so a client
/// must not take NotDelivered to mean it may safely retry. The code stays
/// NotDelivered because NPAMP-CC-JSONRPC §6 makes "no JSON-RPC Response
/// was produced" a transport error, and none reached the client.
pub fn reply_over_max_body(
    upstream: &dyn std::fmt::Display,
    len: Option<usize>,
    limit: usize,
) -> String {
    let len = len.map_or_else(String::new, |l| format!(" of {l} octets"));
    format!(
        "{upstream} executed the request and answered, but its reply{len} exceeds this \
         gateway's --max-body {limit}: retrying may execute it again"
    )
}
