//! HTTP/2 with hyper's client: a run's `connections` connections, made
//! when a worker first needs one (again after one fails), each carrying
//! the requests of the workers that share it, one stream each.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use std::sync::Arc;

use super::{Broken, HttpReply, HttpTarget, Method};
use crate::header::Header;
use crate::tls::Tls;

type Sender = SendRequest<Full<Bytes>>;

/// The connections of a run, each behind a lock taken only to find it
/// (or to make it, once, for every worker waiting on it).
pub(super) struct Connections {
    slots: Vec<tokio::sync::Mutex<Option<Sender>>>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} HTTP/2 connections", self.slots.len())
    }
}

impl Connections {
    pub(super) fn new(n: usize) -> Self {
        Self {
            slots: (0..n.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
        }
    }
}

/// One worker's streams, on its share of the connections.
pub(super) struct Stream {
    connections: Arc<Connections>,
    slot: usize,
    uri: hyper::Uri,
    authority: String,
    tls: Option<Tls>,
}

impl Stream {
    pub(super) fn new(target: &HttpTarget, connections: Arc<Connections>, worker: usize) -> Self {
        Self {
            slot: worker % connections.slots.len(),
            connections,
            uri: target.uri.clone(),
            authority: target.authority.clone(),
            tls: target.tls.clone(),
        }
    }

    /// The worker's connection, made if it has none or its last one ended.
    async fn sender(&self) -> Result<Sender, Broken> {
        let mut slot = self.connections.slots[self.slot].lock().await;
        if let Some(s) = slot.as_ref().filter(|s| !s.is_closed()) {
            return Ok(s.clone());
        }
        *slot = None;
        let stream = crate::tls::connect(&self.authority, self.tls.as_ref())
            .await
            .map_err(Broken::Connect)?;
        let (sender, conn) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .adaptive_window(true)
                .handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| Broken::H2(format!("handshake: {e}")))?;
        tokio::spawn(conn);
        *slot = Some(sender.clone());
        Ok(sender)
    }

    pub(super) async fn exchange<'a>(
        &mut self,
        method: Method,
        body: Bytes,
        headers: impl Iterator<Item = &'a Header>,
    ) -> Result<HttpReply, Broken> {
        let mut request = hyper::Request::builder().uri(self.uri.clone());
        request = request.method(match method {
            Method::Post => hyper::Method::POST,
            Method::Delete => hyper::Method::DELETE,
        });
        for h in headers {
            request = request.header(h.name.as_str(), h.value.as_str());
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| Broken::H2(format!("request: {e}")))?;
        let mut sender = self.sender().await?;
        sender
            .ready()
            .await
            .map_err(|e| Broken::H2(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| Broken::H2(e.to_string()))?;
        let status = response.status().as_u16();
        let text = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_owned())
        };
        let session = text("mcp-session-id");
        let events = text("content-type")
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|_| Broken::MidReply)?
            .to_bytes();
        Ok(HttpReply {
            status,
            body,
            keep_alive: true,
            session,
            events,
        })
    }
}
