//! The stdio ingress (`npamp-gateway connect`).

use std::sync::Arc;

use super::Ingress;
use super::client::{stream_client, write_messages};
use crate::gateway::edge::Edge;
use crate::gateway::stall::{Moved, Tracked};

/// The stdio ingress (`npamp-gateway connect`): this process's stdin and
/// stdout are one client session, in `--framing` (an editor's LSP, or
/// lines).
pub async fn serve(edge: Arc<Edge>) {
    let (tx, rx) = edge.ctx.limits.outbox();
    let moved = Moved::new();
    let reader = edge.ctx.message_reader(tokio::io::stdin());
    let writer = tokio::spawn(write_messages(
        Tracked::new(tokio::io::stdout(), moved.clone()),
        reader.decided(),
        moved,
        rx,
        edge.ctx.limits.stall_timeout,
        edge.ctx.metrics.clone(),
    ));
    stream_client(
        reader,
        tx,
        edge,
        Ingress::STDIO,
        // The one client of this process: no rate limit of its own.
        None,
    )
    .await;
    let _ = writer.await;
}
