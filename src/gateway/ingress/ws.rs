//! The WebSocket ingress (`ws://`): one JSON-RPC message per text frame,
//! one session per connection.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use hyper::StatusCode;
use tracing::debug;

use super::client::{MessageSource, stream_client};
use super::{Client, Clients, Kind, authorized, bound_send_buffer};
use crate::gateway::edge::Edge;
use crate::gateway::stall::{Moved, Tracked, wrote};

struct WsSource<S>(S);

impl<S> MessageSource for WsSource<S>
where
    S: futures_util::Stream<
            Item = Result<
                tokio_tungstenite::tungstenite::Message,
                tokio_tungstenite::tungstenite::Error,
            >,
        > + Unpin
        + Send,
{
    async fn next_message(&mut self) -> std::io::Result<Option<Bytes>> {
        use tokio_tungstenite::tungstenite::{Error, Message};
        loop {
            return match self.0.next().await {
                Some(Ok(Message::Text(t))) => Ok(Some(Bytes::from(t))),
                Some(Ok(Message::Binary(b))) => Ok(Some(b)),
                Some(Ok(Message::Close(_))) | None => Ok(None),
                Some(Ok(_)) => continue,
                Some(Err(Error::Capacity(e))) => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    e.to_string(),
                )),
                Some(Err(e)) => Err(std::io::Error::other(e)),
            };
        }
    }
}

/// `ws://`: one JSON-RPC message per text frame.
pub struct WebSocket;

impl Kind for WebSocket {
    fn scheme(&self) -> &'static str {
        "ws"
    }

    fn carries_tokens(&self) -> bool {
        true
    }

    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()> {
        Box::pin(serve(clients, edge))
    }
}

async fn serve(mut clients: Clients, edge: Arc<Edge>) {
    use tokio_tungstenite::tungstenite::Message;
    let ingress = clients.ingress;
    while let Some(Client { tcp, from, permit }) = clients.next().await {
        let edge = edge.clone();
        bound_send_buffer(&tcp, &edge.ctx);
        tokio::spawn(async move {
            let config = crate::gateway::ws_config(edge.ctx.limits.max_body);
            // The callback's signature is tungstenite's (`ErrorResponse` is
            // an `http::Response`).
            #[allow(clippy::result_large_err)]
            let check = |req: &tokio_tungstenite::tungstenite::handshake::server::Request, resp| {
                if authorized(&edge.ctx, req.headers()) {
                    return Ok(resp);
                }
                let mut refusal =
                    tokio_tungstenite::tungstenite::handshake::server::ErrorResponse::new(Some(
                        "unauthorized: missing or unknown bearer token".to_owned(),
                    ));
                *refusal.status_mut() = StatusCode::UNAUTHORIZED;
                refusal.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
                Err(refusal)
            };
            let moved = Moved::new();
            let tcp = Tracked::new(tcp, moved.clone());
            let handshake = tokio::time::timeout(
                edge.ctx.limits.stall_timeout,
                tokio_tungstenite::accept_hdr_async_with_config(tcp, check, Some(config)),
            )
            .await;
            let ws = match handshake {
                Ok(Ok(ws)) => ws,
                Ok(Err(e)) => {
                    debug!(%from, error = %e, "WebSocket handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%from, "WebSocket handshake timed out");
                    return;
                }
            };
            let (mut sink, stream) = ws.split();
            let (tx, mut rx) = edge.ctx.limits.outbox();
            let (stall, metrics) = (edge.ctx.limits.stall_timeout, edge.ctx.metrics.clone());
            let writer = tokio::spawn(async move {
                while let Some(text) = rx.recv().await {
                    let msg = match tokio_tungstenite::tungstenite::Utf8Bytes::try_from(text) {
                        Ok(t) => Message::Text(t),
                        Err(_) => continue,
                    };
                    let write = async {
                        sink.feed(msg).await?;
                        if rx.is_empty() {
                            sink.flush().await?;
                        }
                        Ok::<_, tokio_tungstenite::tungstenite::Error>(())
                    };
                    if !wrote(stall, &moved, &metrics, write).await {
                        return;
                    }
                }
                let _ = sink.close().await;
            });
            stream_client(WsSource(stream), tx, edge, ingress).await;
            let _ = writer.await;
            drop(permit);
        });
    }
}
