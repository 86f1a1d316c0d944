//! [`Client`]: JSON-RPC over N-PAMP from a program, with no ingress in
//! between: what an edge does for its HTTP clients, as a library.

use std::sync::Arc;

use bytes::Bytes;

use super::edge::Edge;
use super::edge::answer::{Answer, answer_batch, answer_one};
use super::metrics::Metrics;
use super::{Ctx, GatewayConfig, GatewayError};
use crate::assoc::PeerAddr;
use crate::jsonrpc::carriage::scan_error_response;
use crate::jsonrpc::{Scanned, scan};

/// Carries JSON-RPC texts to origin gateways over N-PAMP associations, as
/// an edge carries its HTTP clients' requests: the same choice of origin,
/// retries, hedging, limits and answers (`docs/gateway.md`), from the
/// configuration's identity, trust, `peers` and `limits`. Associations are
/// made when a request first needs one; the client is cheap to share
/// (`Arc`) across tasks.
///
/// ```no_run
/// # async fn demo() -> Result<(), npamp_gateway::gateway::GatewayError> {
/// use npamp_gateway::gateway::{Client, Gateway};
///
/// let config = Gateway::builder()
///     .identity_seed([4; 32])
///     .insecure_accept_any_peer() // or .trust(origin's public key)
///     .peer("quic://127.0.0.1:4433".parse().expect("a peer address"))
///     .config()?;
/// let client = Client::new(&config)?;
/// let reply = client
///     .call(r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#.into())
///     .await;
/// println!("{}", String::from_utf8_lossy(&reply.unwrap_or_default()));
/// # Ok(())
/// # }
/// ```
pub struct Client {
    edge: Arc<Edge>,
}

impl Client {
    /// A client of `config.peers` (one at least).
    pub fn new(config: &GatewayConfig) -> Result<Self, GatewayError> {
        if config.peers.is_empty() {
            return Err(GatewayError::Config(
                "a client needs an origin gateway to carry to (a peer)".into(),
            ));
        }
        let ctx = Arc::new(Ctx::new(config, Arc::new(Metrics::default())));
        let edge = Edge::with_peers(&config.peers, config.endpoint.clone(), ctx);
        Ok(Self {
            edge: Arc::new(edge),
        })
    }

    /// The first origin (the only one, mostly).
    pub fn peer(&self) -> PeerAddr {
        self.edge.peer()
    }

    /// Carries one JSON-RPC text, a request, a notification or a batch,
    /// untouched, and answers as an edge answers an HTTP client: the reply
    /// (the upstream's octets as they came), a JSON-RPC error object when
    /// it could not be carried or the text is not JSON-RPC (the codes of
    /// `docs/gateway.md`), a batch's answers in one array; `None` when
    /// there is nothing to answer (notifications only).
    pub async fn call(&self, text: Bytes) -> Option<Bytes> {
        let answer = match scan(&text, &self.edge.ctx.scan) {
            Err(e) => return Some(scan_error_response(&e).into()),
            Ok(Scanned::Single(kind)) => answer_one(&self.edge, text, kind, None).await,
            Ok(Scanned::Batch(elements)) => {
                return answer_batch(&self.edge, &text, elements, None).await;
            }
        };
        match answer {
            Answer::Reply(text) | Answer::Challenged(text, _) | Answer::Passed(text, _) => {
                Some(text)
            }
            Answer::Failed(f, id) => Some(f.response(id.as_deref()).into()),
            Answer::None => None,
        }
    }
}
