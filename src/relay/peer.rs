//! What arrives from the peer: a Bridge payload decoded and checked
//! (NPAMP-BRIDGE + NPAMP-CC-JSONRPC), before the exchange acts on it.

use bytes::Bytes;

use crate::bridge::{self, BridgeMessage, ContentType, ProtocolId};
use crate::jsonrpc::Limits;
use crate::jsonrpc::carriage::{self, Inbound};
use crate::wire::FrameType;

/// A Bridge payload from the peer as [`super::Exchange::handle_peer`] takes
/// it: octets to read, and the message in them to keep, given up for it.
pub trait PeerPayload {
    /// The payload's octets.
    fn octets(&self) -> &[u8];

    /// The octets `part` of [`PeerPayload::octets`] as `Bytes` of their
    /// own, holding alive no more than about their own length (what the
    /// byte budgets charge): a copy, or an allocation that is (nearly) all
    /// theirs. The payload is given up for them, so nothing can still
    /// borrow it. Empty when `part` is not inside the payload.
    fn keep(self, part: std::ops::Range<usize>) -> Bytes;
}

/// A borrowed payload: what is kept of it is copied.
impl PeerPayload for &[u8] {
    fn octets(&self) -> &[u8] {
        self
    }

    fn keep(self, part: std::ops::Range<usize>) -> Bytes {
        self.get(part)
            .map_or_else(Bytes::new, Bytes::copy_from_slice)
    }
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
        /// Whether it is a request (to be answered ProtocolUnsupported).
        request: bool,
    },
}

/// Decodes a Bridge payload and runs the carriage checks.
pub fn receive<'a>(
    frame_type: FrameType,
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
            request: is_request,
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
