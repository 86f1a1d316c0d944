//! The TCP ingress (`tcp://`): newline-delimited JSON-RPC, one session per
//! connection.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::client::{stream_client, write_lines};
use super::{Client, Clients, Kind, bound_send_buffer};
use crate::gateway::edge::Edge;
use crate::gateway::lines::LineReader;

/// `tcp://`: one JSON-RPC message per line.
pub struct Lines;

impl Kind for Lines {
    fn scheme(&self) -> &'static str {
        "tcp"
    }

    /// A line protocol has nowhere to put a bearer token.
    fn carries_tokens(&self) -> bool {
        false
    }

    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()> {
        Box::pin(serve(clients, edge))
    }
}

async fn serve(mut clients: Clients, edge: Arc<Edge>) {
    let ingress = clients.ingress;
    while let Some(Client { tcp, permit, .. }) = clients.next().await {
        let edge = edge.clone();
        bound_send_buffer(&tcp, &edge.ctx);
        tokio::spawn(async move {
            let (r, w) = tcp.into_split();
            let (tx, rx) = edge.ctx.limits.outbox();
            let writer = tokio::spawn(write_lines(
                w,
                rx,
                edge.ctx.limits.stall_timeout,
                edge.ctx.metrics.clone(),
            ));
            let max = edge.ctx.limits.max_body;
            let lines = LineReader::skipping_long_lines(r, max);
            stream_client(lines, tx, edge, ingress).await;
            let _ = writer.await;
            drop(permit);
        });
    }
}
