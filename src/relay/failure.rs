//! How a request is answered when it cannot be answered by the upstream
//! (DESIGN.md §5), and the classes the edge counts answers in.

use bytes::Bytes;

use crate::bridge::TransportError;
use crate::jsonrpc::carriage;

/// How a request was answered at the edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyClass {
    /// The upstream's result.
    Success = 0,
    /// The upstream's JSON-RPC error, carried verbatim.
    Error = 1,
    /// An N-PAMP transport error from the peer, answered by the edge.
    Transport = 2,
    /// No reply within the request timeout.
    Timeout = 3,
    /// Refused by the edge: overload or no association to the peer.
    Unavailable = 4,
    /// Refused by the edge: not JSON-RPC (-32700 / -32600), too large, or
    /// not permitted to the client (a scope its token lacks).
    Invalid = 5,
    /// Refused by the edge: over the client's rate limit.
    RateLimited = 6,
}

impl ReplyClass {
    pub const ALL: [ReplyClass; 7] = [
        Self::Success,
        Self::Error,
        Self::Transport,
        Self::Timeout,
        Self::Unavailable,
        Self::Invalid,
        Self::RateLimited,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Transport => "transport_error",
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Invalid => "invalid",
            Self::RateLimited => "rate_limited",
        }
    }
}

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
    /// The association ended before the reply came: the request was not
    /// sent, or it was and re-sending it is safe (read-only or
    /// idempotent-write), so an edge with another origin tries that one.
    Lost(String),
    /// The association ended after a non-idempotent or destructive request
    /// was sent and before its reply came: the upstream may have executed
    /// it, and the gateway will not send it again (-32014, HTTP 502).
    MayHaveExecuted(String),
    /// The message cannot be carried (-32600 from the edge, HTTP 200 as
    /// for any invalid request).
    Invalid(String),
    /// Over the client's rate limit (-32013, HTTP 429): what the limit is,
    /// and when the client may try again.
    RateLimited(String, std::time::Duration),
    /// The client's token lacks a scope the message needs
    /// (`--require-scope`; -32012, HTTP 403): which.
    Forbidden(String),
}

/// The JSON-RPC code of an edge's refusal of a client's credentials: 401
/// and 403 at an HTTP ingress.
pub const UNAUTHORIZED_CODE: i32 = -32012;

/// How a gateway of this project starts the NotDelivered detail of a
/// request its upstream may have executed (sent, then the connection
/// failed before the reply): the edge answers it -32014 `MayHaveExecuted`.
pub const MAY_HAVE_EXECUTED: &str = "may have executed: ";

impl Failure {
    /// A transport error the peer answered with.
    pub fn from_peer(code: TransportError, detail: String) -> Self {
        if code == TransportError::NOT_DELIVERED && detail.starts_with(MAY_HAVE_EXECUTED) {
            Self::MayHaveExecuted(detail)
        } else {
            Self::Transport(code, detail)
        }
    }

    /// The transport error named in the answer.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Transport(code, _) => code.name(),
            Self::Timeout => "Timeout",
            Self::Unavailable(_) => "Unavailable",
            Self::Lost(_) => "NotDelivered",
            Self::MayHaveExecuted(_) => "MayHaveExecuted",
            Self::Invalid(_) => "Invalid",
            Self::RateLimited(..) => "RateLimited",
            Self::Forbidden(_) => "Forbidden",
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
            Self::RateLimited(..) => -32013,
            Self::MayHaveExecuted(_) => -32014,
            Self::Forbidden(_) => UNAUTHORIZED_CODE,
        }
    }

    /// HTTP status at an HTTP ingress.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Transport(..) | Self::Lost(_) | Self::MayHaveExecuted(_) => 502,
            Self::Unavailable(_) => 503,
            Self::Timeout => 504,
            Self::Invalid(_) => 200,
            Self::RateLimited(..) => 429,
            Self::Forbidden(_) => 403,
        }
    }

    pub fn class(&self) -> ReplyClass {
        match self {
            Self::Transport(..) | Self::Lost(_) | Self::MayHaveExecuted(_) => ReplyClass::Transport,
            Self::Timeout => ReplyClass::Timeout,
            Self::Unavailable(_) => ReplyClass::Unavailable,
            Self::Invalid(_) | Self::Forbidden(_) => ReplyClass::Invalid,
            Self::RateLimited(..) => ReplyClass::RateLimited,
        }
    }

    fn detail(&self) -> &str {
        match self {
            Self::Transport(_, d)
            | Self::Unavailable(d)
            | Self::Lost(d)
            | Self::MayHaveExecuted(d)
            | Self::Invalid(d)
            | Self::Forbidden(d)
            | Self::RateLimited(d, _) => d,
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

/// Why a message cannot be put on the bridge at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Uncarriable {
    #[error("method name is not valid Unicode")]
    MethodNotUnicode,
    #[error("method name of {0} octets is longer than the 255 the envelope can carry")]
    MethodTooLong(usize),
}

/// A reply to a request that crossed the bridge, as the edge hands it on.
#[derive(Clone, Debug)]
pub enum Reply {
    /// The upstream's reply object, verbatim.
    Message {
        text: Bytes,
        is_error: bool,
        /// What came back beside it (`--forward-authorization`): the
        /// upstream's refusal of the credential the edge forwarded, or its
        /// answer to an HTTP request.
        attached: Option<super::Attached>,
    },
    Failed(Failure),
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
