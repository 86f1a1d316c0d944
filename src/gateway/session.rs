//! A session: one association between one JSON-RPC party on a message
//! stream and the peer gateway.
//!
//! - at the **edge**, the local party is a WebSocket, TCP, stdio or MCP
//!   client ([`Role::EdgeSession`]);
//! - at the **origin**, it is a WebSocket upstream, a child process or an
//!   MCP server over HTTP ([`Role::OriginSession`]).
//!
//! What crossing means (correlation, held-back ids, batches, deadlines,
//! room) is the exchange's ([`crate::relay`]); a session feeds it what the
//! local party sends and waits while the exchange does not read it.

use std::sync::Arc;

use bytes::Bytes;

use super::context::Ctx;
use super::exec::{Exec, ExecSink, Local};
use super::mcp_names;
use super::metrics::Ingress;
use super::outbox::Outbox;
use crate::assoc::AssocHandle;
use crate::bridge::ProtocolId;
use crate::jsonrpc::carriage::method_of;
use crate::jsonrpc::{IdKind, Kind, ScanError, Scanned, scan};
use crate::relay::{Attached, Named, Relations, Role};

/// What an origin session's upstream is.
#[derive(Clone, Copy, Debug, Default)]
pub struct Upstreamed {
    /// It presents a forwarded credential (an MCP server over HTTP).
    pub credentials: bool,
    /// It gives no request a stream of its own, so that its notifications
    /// name the request they belong to (a child process, a WebSocket).
    pub names: bool,
}

/// Why an upstream session ended when its association did.
pub(super) const SESSION_OVER: &str = "the association ended";

/// A running session; cheap to clone.
#[derive(Clone)]
pub struct Session {
    exec: Arc<Exec<()>>,
    /// The local party's notifications name the requests they belong to
    /// (an MCP server over stdio or a WebSocket: [`super::mcp_names`]).
    names: bool,
}

/// The association sink of a session.
pub type SessionSink = ExecSink<()>;

impl Session {
    /// An edge session for a client that came in at `ingress`.
    pub fn edge(ingress: Ingress, assoc: AssocHandle, ctx: Arc<Ctx>, to_local: Outbox) -> Self {
        let exchange = ctx.exchange(Role::EdgeSession, Some(ingress));
        let exec = Exec::start(exchange, assoc, ctx, Local::Stream(to_local));
        Self { exec, names: false }
    }

    /// An origin session for an upstream (started later: messages for it
    /// queue until [`Session::local_up`]).
    /// `upstream`: what the upstream is ([`Upstreamed`]).
    pub fn origin(
        assoc: AssocHandle,
        ctx: Arc<Ctx>,
        to_local: Outbox,
        upstream: Upstreamed,
    ) -> Self {
        let mut exchange = ctx.exchange(Role::OriginSession, None);
        exchange.set_takes_credentials(upstream.credentials);
        let names = upstream.names && ctx.protocol == ProtocolId::MCP;
        if names {
            exchange.set_names(Relations {
                names_of: mcp_names::names_of,
                given_up: mcp_names::given_up,
            });
        }
        let exec = Exec::start(exchange, assoc, ctx, Local::Stream(to_local));
        Self { exec, names }
    }

    pub fn sink(&self) -> SessionSink {
        ExecSink(self.exec.clone())
    }

    pub fn assoc(&self) -> &AssocHandle {
        self.exec.assoc()
    }

    /// Requests of the local party that wait for a reply (or to be sent).
    pub fn outstanding(&self) -> usize {
        self.exec.peek(|x| x.outstanding())
    }

    /// A message from the local party (one line, one WebSocket message);
    /// returns when the local party may be read again.
    pub async fn on_local_message(&self, text: Bytes) {
        let scanned = scan(&text, &self.exec.ctx().scan);
        self.on_local_scanned(text, scanned).await;
    }

    /// [`Session::on_local_message`], with what goes beside it: a client's
    /// forwarded credential (edge), the upstream's refusal of one
    /// (origin).
    pub async fn on_local_message_with(&self, text: Bytes, attached: Option<Attached>) {
        let Some(attached) = attached else {
            return self.on_local_message(text).await;
        };
        let kind = match scan(&text, &self.exec.ctx().scan) {
            Ok(Scanned::Single(kind)) => kind,
            scanned => return self.on_local_scanned(text, scanned).await,
        };
        let reading = self
            .exec
            .with(|x, now| {
                x.handle_local_one(now, text, kind, None, Some(attached));
                x.reading_local()
            })
            .await;
        if !reading {
            self.exec.local_room().await;
        }
    }

    /// A notification of the local party that belongs to the peer's request
    /// it names (it came on that request's own stream, or names it as
    /// [`super::mcp_names`] reads): streamed to the peer before the
    /// request's reply while it waits for one
    /// ([`crate::relay::Exchange::handle_local_related`]); anything else
    /// goes as [`Session::on_local_scanned`] sends it.
    pub async fn on_local_related(
        &self,
        text: Bytes,
        scanned: Result<Scanned, ScanError>,
        named: Named,
    ) {
        match scanned {
            Ok(Scanned::Single(kind @ Kind::Notification { .. })) => {
                self.related(text, kind, &named).await;
            }
            scanned => self.unrelated(text, scanned).await,
        }
    }

    /// A notification that belongs to the request `named` names.
    async fn related(&self, text: Bytes, kind: Kind, named: &Named) {
        let reading = self
            .exec
            .with(|x, now| {
                x.handle_local_related(now, text, kind, named);
                x.reading_local()
            })
            .await;
        if !reading {
            self.exec.local_room().await;
        }
    }

    /// [`Session::on_local_message`] for a message its caller has already
    /// scanned (with the gateway's own limits, `Ctx::scan`).
    pub async fn on_local_scanned(&self, text: Bytes, scanned: Result<Scanned, ScanError>) {
        if self.names
            && let Ok(Scanned::Single(kind @ Kind::Notification { method })) = &scanned
            && let Some(named) =
                method_of(&text, method).and_then(|m| mcp_names::named_by(&m, &text))
        {
            let kind = kind.clone();
            return self.related(text, kind, &named).await;
        }
        self.unrelated(text, scanned).await;
    }

    /// A message that belongs to no request of the peer's in particular.
    async fn unrelated(&self, text: Bytes, scanned: Result<Scanned, ScanError>) {
        let reading = self
            .exec
            .with(|x, now| {
                x.handle_local(now, text, scanned, None);
                x.reading_local()
            })
            .await;
        if !reading {
            self.exec.local_room().await;
        }
    }

    /// The local party sent a message of `len` octets, over `--max-body`,
    /// that was dropped unread; `head` is its start.
    pub async fn local_message_too_large(&self, head: &[u8], len: usize) {
        let max = self.exec.ctx().limits.max_body;
        self.exec
            .with(|x, now| x.local_too_large(now, head, len, max))
            .await;
    }

    /// The exchange's deadline for the peer's request with this id, while
    /// it waits for the local party.
    pub fn deadline_of(&self, token: &[u8], kind: IdKind) -> Option<std::time::Instant> {
        self.exec.peek(|x| x.deadline_of(token, kind))
    }

    /// The local party will not answer the peer's request with this id: it
    /// is answered NotDelivered with `detail` (MayHaveExecuted when it
    /// `reached` the party and must not run twice). False when no such
    /// request waits (already answered, or timed out).
    pub async fn local_cannot_answer(
        &self,
        token: &[u8],
        kind: IdKind,
        detail: &str,
        reached: bool,
    ) -> bool {
        self.exec
            .with(|x, now| x.local_cannot_answer(now, token, kind, detail.to_owned(), reached))
            .await
    }

    /// Origin: the upstream went away. Requests it had not answered get
    /// NotDelivered; requests it made to the client are forgotten.
    pub async fn local_down(&self, why: &str) {
        self.exec.with(|x, _| x.local_down(why)).await;
    }

    /// Origin: the upstream is being (re)started; messages queue for it.
    pub fn local_starting(&self) {
        self.exec.update(|x| x.local_starting());
    }

    /// Origin: the upstream is running.
    pub fn local_up(&self) {
        self.exec.update(|x| x.local_up());
    }

    /// Closes the association (the local party went away).
    pub async fn close(&self) {
        self.exec.assoc().close(0).await;
    }
}
