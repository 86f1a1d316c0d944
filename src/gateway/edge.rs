//! The edge's side of the bridge: associations to the peer gateway.
//!
//! - Stateless traffic (HTTP ingress) shares a pool of associations with
//!   opaque correlation ids, so two clients using the same `id` at the same
//!   time are never cross-wired.
//! - Session traffic (WebSocket, TCP, stdio clients) gets an association of
//!   its own per client ([`Edge::session`]), so what the upstream sends on
//!   its own finds the right client.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::{debug, warn};

use super::Ctx;
use super::carry::{
    Failure, Outgoing, Received, Reply, lost, receive, refuse_malformed, refuse_protocol,
    send_transport_error,
};
use super::outbox::Outbox;
use super::session::{Session, Side};
use crate::assoc::{AssocHandle, BridgeSink, End};
use crate::assoc::{Endpoint, Link, PeerAddr, SharedClientEndpoint};
use crate::bridge::TransportError;
use crate::jsonrpc::carriage::Inbound;
use crate::jsonrpc::{Begin, CorrelationError, CorrelationMode, Correlator, Kind};
use crate::wire::FrameType;

/// After a failed connect, requests fail fast for this long instead of each
/// starting a handshake with a peer that is down.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// The edge: where the peer is and how to reach it.
pub struct Edge {
    pub peer: PeerAddr,
    pub endpoint: Endpoint,
    pub ctx: Arc<Ctx>,
    pool: Pool,
    /// The one QUIC client endpoint of all session associations (one per
    /// client: they must not each cost a socket and its buffers). Pooled
    /// associations keep endpoints of their own, to spread over cores.
    sessions: SharedClientEndpoint,
}

impl Edge {
    pub fn new(peer: PeerAddr, endpoint: Endpoint, ctx: Arc<Ctx>) -> Self {
        let size = ctx.limits.pool_size.max(1);
        Self {
            peer,
            endpoint,
            pool: Pool {
                slots: (0..size).map(|_| Slot::default()).collect(),
                next: AtomicUsize::new(0),
            },
            ctx,
            sessions: SharedClientEndpoint::default(),
        }
    }

    /// Establishes an association and the session of one client on it.
    pub async fn session(&self, side: Side, to_local: Outbox) -> Result<Session, Failure> {
        let link = self.connect(Some(&self.sessions)).await?;
        let mut session = None;
        let handle = link.spawn(|h| {
            let s = Session::new(side, h, self.ctx.clone(), to_local);
            let sink = s.sink();
            session = Some(s);
            sink
        });
        self.ctx.track(&handle);
        session.ok_or_else(|| Failure::Unavailable("session not created".into()))
    }

    async fn connect(&self, shared: Option<&SharedClientEndpoint>) -> Result<Link, Failure> {
        let link = match shared {
            Some(shared) => Link::connect_sharing(self.peer, &self.endpoint, shared).await,
            None => Link::connect(self.peer, &self.endpoint).await,
        };
        match link {
            Ok(link) => Ok(link),
            Err(e) => {
                self.ctx.metrics.handshake_failures.fetch_add(1, Relaxed);
                warn!(peer = %self.peer, error = %e, "cannot establish an association");
                Err(Failure::Unavailable(format!(
                    "no association to the peer gateway {}: {e}",
                    self.peer
                )))
            }
        }
    }

    /// Carries one request over a pooled association and waits for its
    /// reply (or the request timeout).
    pub async fn call(self: &Arc<Self>, text: &Bytes, kind: &Kind) -> Reply {
        let Some(id) = crate::jsonrpc::carriage::id_of(kind) else {
            return Reply::Failed(Failure::Invalid("not a request".into()));
        };
        let out = match Outgoing::new(text, kind, &self.ctx.labeler) {
            Ok(o) => o,
            Err(e) => return Reply::Failed(Failure::Invalid(e.to_string())),
        };
        let pooled = match self.pooled().await {
            Ok(p) => p,
            Err(f) => return Reply::Failed(f),
        };
        let (tx, rx) = oneshot::channel();
        let begin = lock(&pooled.table).begin(&text[id.token.clone()], id.kind, tx);
        let corr = match begin {
            Begin::Assigned(corr) => corr,
            Begin::Full | Begin::HoldBack => {
                return Reply::Failed(Failure::Unavailable(
                    "too many requests in flight on the association".into(),
                ));
            }
        };
        // One deadline for the whole request: a send that waits for room on
        // a backed-up association counts against it too. Sealing happens
        // at once or not at all, so a send cut off by the deadline sent
        // nothing.
        let deadline = tokio::time::Instant::now() + self.ctx.limits.request_timeout;
        let sent = out.send(&pooled.handle, self.ctx.protocol, &corr);
        match tokio::time::timeout_at(deadline, sent).await {
            Ok(Ok(())) => {}
            Ok(Err(gone)) => {
                lock(&pooled.table).abandon(&corr);
                return Reply::Failed(gone.into());
            }
            Err(_) => {
                lock(&pooled.table).abandon(&corr);
                return Reply::Failed(Failure::Timeout);
            }
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => {
                Reply::Failed(Failure::Lost("the association dropped the request".into()))
            }
            Err(_) => {
                lock(&pooled.table).abandon(&corr);
                Reply::Failed(Failure::Timeout)
            }
        }
    }

    /// Carries one notification over a pooled association.
    pub async fn notify(self: &Arc<Self>, text: &Bytes, kind: &Kind) -> Result<(), Failure> {
        let out = Outgoing::new(text, kind, &self.ctx.labeler)
            .map_err(|e| Failure::Invalid(e.to_string()))?;
        let pooled = self.pooled().await?;
        out.send(&pooled.handle, self.ctx.protocol, &[])
            .await
            .map_err(Failure::from)
    }

    /// A live pooled association (round robin). A slot whose association
    /// is gone reconnects in the background while the live ones serve; when
    /// none is live, the request waits for the reconnect.
    async fn pooled(self: &Arc<Self>) -> Result<Arc<Pooled>, Failure> {
        let n = self.pool.slots.len();
        let first = self.pool.next.fetch_add(1, Relaxed) % n;
        if let Some(p) = self.pool.slots[first].live() {
            return Ok(p);
        }
        for i in 1..n {
            if let Some(p) = self.pool.slots[(first + i) % n].live() {
                let edge = self.clone();
                tokio::spawn(async move {
                    let _ = edge.reconnect(&edge.pool.slots[first]).await;
                });
                return Ok(p);
            }
        }
        self.reconnect(&self.pool.slots[first]).await
    }

    async fn reconnect(&self, slot: &Slot) -> Result<Arc<Pooled>, Failure> {
        let _one = slot.connecting.lock().await;
        if let Some(p) = slot.live() {
            return Ok(p);
        }
        if let Some((at, why)) = &*lock(&slot.last_failure)
            && at.elapsed() < RECONNECT_BACKOFF
        {
            return Err(Failure::Unavailable(why.clone()));
        }
        let link = match self.connect(None).await {
            Ok(l) => l,
            Err(f) => {
                if let Failure::Unavailable(why) = &f {
                    *lock(&slot.last_failure) = Some((Instant::now(), why.clone()));
                }
                return Err(f);
            }
        };
        let table = Arc::new(Mutex::new(Correlator::new(
            CorrelationMode::Opaque,
            self.ctx.limits.max_in_flight,
        )));
        let ctx = self.ctx.clone();
        let sink_table = table.clone();
        let handle = link.spawn(|handle| PoolSink {
            table: sink_table,
            ctx,
            handle,
        });
        self.ctx.track(&handle);
        let pooled = Arc::new(Pooled { handle, table });
        *slot.current.write().unwrap_or_else(|p| p.into_inner()) = Some(pooled.clone());
        *lock(&slot.last_failure) = None;
        Ok(pooled)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Pool {
    slots: Vec<Slot>,
    next: AtomicUsize,
}

#[derive(Default)]
struct Slot {
    current: RwLock<Option<Arc<Pooled>>>,
    connecting: tokio::sync::Mutex<()>,
    last_failure: Mutex<Option<(Instant, String)>>,
}

impl Slot {
    fn live(&self) -> Option<Arc<Pooled>> {
        let current = self.current.read().unwrap_or_else(|p| p.into_inner());
        current.as_ref().filter(|p| p.handle.is_open()).cloned()
    }
}

type Waiter = oneshot::Sender<Reply>;

/// One pooled association and its outstanding requests.
struct Pooled {
    handle: AssocHandle,
    table: Arc<Mutex<Correlator<Waiter>>>,
}

struct PoolSink {
    table: Arc<Mutex<Correlator<Waiter>>>,
    ctx: Arc<Ctx>,
    handle: AssocHandle,
}

impl PoolSink {
    fn fail(&self, corr: &[u8], f: Failure) {
        if let Some(w) = lock(&self.table).abandon(corr) {
            let _ = w.send(Reply::Failed(f));
        } else {
            self.ctx.metrics.dropped.fetch_add(1, Relaxed);
        }
    }
}

impl BridgeSink for PoolSink {
    async fn frame(&mut self, frame_type: FrameType, payload: &[u8]) {
        let ctx = &self.ctx;
        match receive(frame_type, payload, ctx.protocol, &ctx.peer_scan) {
            Received::Message(Inbound::JsonRpc {
                kind: kind @ (Kind::Success { .. } | Kind::Error { .. }),
                text,
                correlation_id,
                ..
            }) => {
                let (Kind::Success { id } | Kind::Error { id }) = &kind else {
                    return;
                };
                let is_error = matches!(kind, Kind::Error { .. });
                let done = lock(&self.table).complete(
                    correlation_id,
                    &text[id.token.clone()],
                    id.kind,
                    is_error,
                );
                match done {
                    Ok(waiter) => {
                        let text = Bytes::copy_from_slice(text);
                        let _ = waiter.send(Reply::Message { text, is_error });
                    }
                    Err(CorrelationError::Unknown) => {
                        ctx.metrics.dropped.fetch_add(1, Relaxed);
                        debug!("a reply for no outstanding request (late?); dropped");
                    }
                    Err(e) => {
                        warn!(error = %e, "reply does not match its request");
                        let code = TransportError::ENVELOPE_MALFORMED;
                        self.fail(correlation_id, Failure::Transport(code, e.to_string()));
                    }
                }
            }
            Received::Message(Inbound::TransportError {
                code,
                detail,
                correlation_id,
            }) => {
                ctx.metrics.transport_error(code);
                let detail = String::from_utf8_lossy(detail).into_owned();
                self.fail(correlation_id, Failure::Transport(code, detail));
            }
            Received::Message(Inbound::JsonRpc {
                kind: Kind::Request { .. },
                correlation_id,
                ..
            }) => {
                // A server-originated request has no client here to go to.
                let code = TransportError::NOT_DELIVERED;
                ctx.metrics.transport_error(code);
                let detail = "stateless ingress (HTTP): no client session to deliver a server-originated request to";
                let _ =
                    send_transport_error(&self.handle, ctx.protocol, correlation_id, code, detail)
                        .await;
            }
            Received::Message(Inbound::JsonRpc { .. }) => {
                // A notification for nobody.
                ctx.metrics.dropped.fetch_add(1, Relaxed);
            }
            Received::Malformed {
                error,
                correlation_id,
            } => refuse_malformed(&self.handle, ctx, &error, correlation_id).await,
            Received::WrongProtocol {
                protocol,
                correlation_id,
            } => refuse_protocol(&self.handle, ctx, frame_type, protocol, correlation_id).await,
        }
    }

    fn ended(&mut self, why: &End) {
        if matches!(why, End::Error(_)) {
            self.ctx.metrics.association_errors.fetch_add(1, Relaxed);
        }
        let failure = lost(why);
        for (_, waiter) in lock(&self.table).drain() {
            let _ = waiter.send(Reply::Failed(failure.clone()));
        }
    }
}
