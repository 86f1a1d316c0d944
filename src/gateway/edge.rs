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
use tracing::warn;

use super::Ctx;
use super::exec::{Exec, ExecSink, Local, refused};
use super::metrics::Ingress;
use super::outbox::Outbox;
use super::session::Session;
use crate::assoc::{Endpoint, Link, PeerAddr, SharedClientEndpoint};
use crate::jsonrpc::{Kind, Scanned};
use crate::relay::{Failure, Reply, Role};

/// After a failed connect, requests fail fast for this long instead of each
/// starting a handshake with a peer that is down.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// The edge: where the peer is and how to reach it.
pub struct Edge {
    pub peer: PeerAddr,
    pub endpoint: Endpoint,
    pub ctx: Arc<Ctx>,
    pool: Pool,
    /// `endpoint` for session associations: a QUIC receive window of
    /// twice `--session-buffer`, so a client that does not read holds that
    /// much of its replies in transit at most.
    session_endpoint: Endpoint,
    /// The one QUIC client endpoint of all session associations (one per
    /// client: they must not each cost a socket and its buffers). Pooled
    /// associations keep endpoints of their own, to spread over cores.
    sessions: SharedClientEndpoint,
}

impl Edge {
    pub fn new(peer: PeerAddr, endpoint: Endpoint, ctx: Arc<Ctx>) -> Self {
        let size = ctx.limits.pool_size.max(1);
        let window = (2 * ctx.limits.session_buffer).clamp(64 << 10, u32::MAX as usize);
        let session_endpoint = Endpoint {
            receive_window: Some(u32::try_from(window).unwrap_or(u32::MAX)),
            ..endpoint.clone()
        };
        Self {
            peer,
            endpoint,
            session_endpoint,
            pool: Pool {
                slots: (0..size).map(|_| Slot::default()).collect(),
                next: AtomicUsize::new(0),
            },
            ctx,
            sessions: SharedClientEndpoint::default(),
        }
    }

    /// Establishes an association and the session of one client that came
    /// in at `ingress`.
    pub async fn session(&self, ingress: Ingress, to_local: Outbox) -> Result<Session, Failure> {
        let link = self.connect(Some(&self.sessions)).await?;
        let mut session = None;
        let handle = link.spawn(|h| {
            let s = Session::edge(ingress, h, self.ctx.clone(), to_local);
            let sink = s.sink();
            session = Some(s);
            sink
        });
        self.ctx.track(&handle);
        session.ok_or_else(|| Failure::Unavailable("session not created".into()))
    }

    async fn connect(&self, shared: Option<&SharedClientEndpoint>) -> Result<Link, Failure> {
        let link = match shared {
            Some(shared) => Link::connect_sharing(self.peer, &self.session_endpoint, shared).await,
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
    /// reply (or the request timeout, which the exchange keeps).
    pub async fn call(self: &Arc<Self>, text: Bytes, kind: Kind) -> Reply {
        let pooled = match self.pooled().await {
            Ok(p) => p,
            Err(f) => {
                self.ctx.metrics.request(Ingress::HTTP);
                return refused(&self.ctx, f);
            }
        };
        let (tx, mut rx) = oneshot::channel();
        let carried = pooled.exec.with(|x, now| {
            x.handle_local(now, text, Ok(Scanned::Single(kind)), Some(tx));
        });
        // A send that waits for room on a backed-up association ends when
        // the exchange answers (a timeout): sealing happens at once or not
        // at all, so a send cut off here sent nothing.
        tokio::select! {
            biased;
            r = &mut rx => return answered(r),
            () = carried => {}
        }
        answered(rx.await)
    }

    /// Carries one notification over a pooled association.
    pub async fn notify(self: &Arc<Self>, text: Bytes, kind: Kind) -> Result<(), Failure> {
        let pooled = self.pooled().await?;
        pooled
            .exec
            .with(|x, now| x.handle_local(now, text, Ok(Scanned::Single(kind)), None))
            .await;
        Ok(())
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
        let ctx = self.ctx.clone();
        let mut exec = None;
        let handle = link.spawn(|handle| {
            let exchange = ctx.exchange(Role::EdgePool, Some(Ingress::HTTP));
            let e = Exec::start(exchange, handle, ctx.clone(), Local::Callers);
            exec = Some(e.clone());
            ExecSink(e)
        });
        self.ctx.track(&handle);
        let exec = exec.ok_or_else(|| Failure::Unavailable("association not started".into()))?;
        let pooled = Arc::new(Pooled { exec });
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
        current
            .as_ref()
            .filter(|p| p.exec.assoc().is_open())
            .cloned()
    }
}

/// One pooled association and its exchange.
struct Pooled {
    exec: Arc<Exec<oneshot::Sender<Reply>>>,
}

/// What a caller's ticket brought.
fn answered(r: Result<Reply, oneshot::error::RecvError>) -> Reply {
    r.unwrap_or_else(|_| Reply::Failed(Failure::Lost("the association dropped the request".into())))
}
