//! The stdio ingress (`npamp-gateway connect`).

use std::sync::Arc;

use super::Ingress;
use super::client::{stream_client, write_lines};
use crate::gateway::edge::Edge;
use crate::gateway::lines::LineReader;

/// The stdio ingress (`npamp-gateway connect`): this process's stdin and
/// stdout are one client session.
pub async fn serve(edge: Arc<Edge>) {
    let (tx, rx) = edge.ctx.limits.outbox();
    let writer = tokio::spawn(write_lines(
        tokio::io::stdout(),
        rx,
        edge.ctx.limits.stall_timeout,
        edge.ctx.metrics.clone(),
    ));
    let max = edge.ctx.limits.max_body;
    stream_client(
        LineReader::skipping_long_lines(tokio::io::stdin(), max),
        tx,
        edge,
        Ingress::STDIO,
    )
    .await;
    let _ = writer.await;
}
