//! The stdio ingress (`npamp-gateway connect`).

use std::sync::Arc;

use super::Ingress;
use super::client::{stream_client, write_lines};
use crate::gateway::edge::Edge;
use crate::gateway::stall::{Moved, Tracked};
use crate::lines::LineReader;

/// The stdio ingress (`npamp-gateway connect`): this process's stdin and
/// stdout are one client session.
pub async fn serve(edge: Arc<Edge>) {
    let (tx, rx) = edge.ctx.limits.outbox();
    let moved = Moved::new();
    let writer = tokio::spawn(write_lines(
        Tracked::new(tokio::io::stdout(), moved.clone()),
        moved,
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
        // The one client of this process: no rate limit of its own.
        None,
    )
    .await;
    let _ = writer.await;
}
