//! The TCP ingress (`tcp://`, and `tls+tcp://` over TLS, `unix+lines://`
//! on a Unix socket): JSON-RPC one message per line or in LSP's framing
//! (`--framing`), one session per connection.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use std::sync::atomic::Ordering::Relaxed;

use tracing::debug;

use super::client::{stream_client, write_messages};
use super::conn::Opening;
use super::limit::ClientKey;
use super::{Clients, Conn, Kind};
use crate::gateway::edge::Edge;

/// `tcp://` and `tls+tcp://`: one JSON-RPC message per line, or LSP-framed.
pub struct Lines;

impl Kind for Lines {
    fn scheme(&self) -> &'static str {
        "tcp"
    }

    fn tls_scheme(&self) -> &'static str {
        "tls+tcp"
    }

    fn unix_scheme(&self) -> Option<&'static str> {
        Some("unix+lines")
    }

    fn alpn(&self) -> &'static [&'static [u8]] {
        &[]
    }

    /// A line protocol has nowhere to put a bearer token: with
    /// `--auth-token-file`, its clients are authenticated by certificate.
    fn carries_tokens(&self) -> bool {
        false
    }

    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()> {
        Box::pin(serve(clients, edge))
    }
}

async fn serve(clients: Clients, edge: Arc<Edge>) {
    let ingress = clients.ingress;
    let opening = Opening {
        first_octet: false,
        session: true,
    };
    clients
        .each(opening, move |conn| client(conn, edge.clone(), ingress))
        .await;
}

/// One line client: refused without a certificate where tokens are asked
/// for, else a session.
async fn client(conn: Conn, edge: Arc<Edge>, ingress: super::Ingress) {
    let Conn {
        stream,
        moved,
        from,
        certificate,
        permit,
    } = conn;
    if edge.ctx.live().tokens.is_some() && certificate.is_none() {
        // Tokens are asked for and a line has no place for one: only a
        // certificate lets such a client in.
        edge.ctx.metrics.unauthorized.fetch_add(1, Relaxed);
        debug!(%from, "line client without a client certificate refused");
        return;
    }
    let (r, w) = tokio::io::split(stream);
    let (tx, rx) = edge.ctx.limits.outbox();
    let reader = edge
        .ctx
        .message_reader(r)
        .stalling(edge.ctx.limits.stall_timeout);
    let writer = tokio::spawn(write_messages(
        w,
        reader.decided(),
        moved,
        rx,
        edge.ctx.limits.stall_timeout,
        edge.ctx.metrics.clone(),
    ));
    let client = match certificate {
        Some(fingerprint) => ClientKey::Certificate(fingerprint),
        None => from.key(),
    };
    stream_client(reader, tx, edge, ingress, Some(super::Admitted::by(client))).await;
    let _ = writer.await;
    drop(permit);
}
