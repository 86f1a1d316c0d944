//! One origin as the edge reaches it: its address, the pool of
//! associations its stateless requests share, and its health.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::warn;

use super::health::Health;
use crate::assoc::{Endpoint, Link, PeerAddr, SharedClientEndpoint};
use crate::gateway::Ctx;
use crate::gateway::exec::{Exec, ExecSink, Local};
use crate::gateway::metrics::Ingress;
use crate::jsonrpc::{Kind, Scanned};
use crate::relay::{Failure, Reply, Role};

/// After a failed connect, requests fail fast for this long instead of each
/// starting a handshake with a peer that is down.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// An origin gateway: where it is, its pooled associations, its health.
pub struct Peer {
    pub addr: PeerAddr,
    pub health: Health,
    /// Where its health's times count from.
    epoch: Instant,
    slots: Vec<Slot>,
    next: AtomicUsize,
}

/// Why a request was not sent (so it may go elsewhere as it is).
pub enum NotSent {
    /// No live association yet: one is being made in the background.
    Connecting,
    /// No association could be made.
    Failed(Failure),
}

impl NotSent {
    /// Why it was not sent.
    pub fn into_failure(self) -> Failure {
        match self {
            NotSent::Connecting => {
                Failure::Unavailable("no association to an origin yet: connecting".into())
            }
            NotSent::Failed(f) => f,
        }
    }

    /// The answer when no origin is left to try.
    pub fn into_reply(self) -> Reply {
        Reply::Failed(self.into_failure())
    }
}

impl Peer {
    pub fn new(addr: PeerAddr, pool_size: usize, epoch: Instant) -> Self {
        Self {
            addr,
            health: Health::default(),
            epoch,
            slots: (0..pool_size.max(1)).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// Now, as its health counts time.
    pub fn now(&self) -> u64 {
        super::health::millis(self.epoch, Instant::now())
    }

    /// Establishes an association to this origin; `shared`: the client
    /// endpoint of session associations.
    pub async fn connect(
        &self,
        ctx: &Ctx,
        endpoint: &Endpoint,
        shared: Option<&SharedClientEndpoint>,
    ) -> Result<Link, Failure> {
        let link = match shared {
            Some(shared) => Link::connect_sharing(self.addr, endpoint, shared).await,
            None => Link::connect(self.addr, endpoint).await,
        };
        link.map_err(|e| {
            ctx.metrics.handshake_failures.fetch_add(1, Relaxed);
            warn!(peer = %self.addr, error = %e, "cannot establish an association");
            Failure::Unavailable(format!(
                "no association to the peer gateway {}: {e}",
                self.addr
            ))
        })
    }

    /// Makes the slots' associations in the background, so that the first
    /// requests do not wait for a handshake: one first, then the others
    /// together once it is made, so an origin that is down costs one failed
    /// attempt (and one warning), not one per slot. A failure counts as one
    /// would for a request: the origin is ejected for its backoff, and the
    /// slot is tried again by the first request after [`RECONNECT_BACKOFF`].
    pub fn open(self: &Arc<Self>, ctx: &Arc<Ctx>, endpoint: &Endpoint) {
        let (me, ctx, endpoint) = (self.clone(), ctx.clone(), endpoint.clone());
        tokio::spawn(async move {
            if me.reconnect(0, &ctx, &endpoint).await.is_err() {
                return;
            }
            let rest = (1..me.slots.len()).map(|slot| me.reconnect(slot, &ctx, &endpoint));
            futures_util::future::join_all(rest).await;
        });
    }

    /// Carries one request over a pooled association and waits for its
    /// reply (or the request timeout, which the exchange keeps). With no
    /// live association it waits for one when `wait`, else it is not sent.
    pub async fn call(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        wait: bool,
        text: Bytes,
        kind: Kind,
    ) -> Result<Reply, NotSent> {
        let pooled = self.pooled(ctx, endpoint, wait).await?;
        let (tx, mut rx) = oneshot::channel();
        let carried = pooled.exec.with(|x, now| {
            x.handle_local(now, text, Ok(Scanned::Single(kind)), Some(tx));
        });
        // A send that waits for room on a backed-up association ends when
        // the exchange answers (a timeout): sealing happens at once or not
        // at all, so a send cut off here sent nothing.
        tokio::select! {
            biased;
            r = &mut rx => return Ok(answered(r)),
            () = carried => {}
        }
        Ok(answered(rx.await))
    }

    /// Carries one notification over a pooled association.
    pub async fn notify(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        text: Bytes,
        kind: Kind,
    ) -> Result<(), Failure> {
        let pooled = (self.pooled(ctx, endpoint, true).await).map_err(NotSent::into_failure)?;
        pooled
            .exec
            .with(|x, now| x.handle_local(now, text, Ok(Scanned::Single(kind)), None))
            .await;
        Ok(())
    }

    /// A live pooled association (round robin). A slot whose association
    /// is gone reconnects in the background while the live ones serve; when
    /// none is live, the request waits for the reconnect (`wait`) or is not
    /// sent.
    async fn pooled(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        wait: bool,
    ) -> Result<Arc<Pooled>, NotSent> {
        let n = self.slots.len();
        let first = self.next.fetch_add(1, Relaxed) % n;
        if let Some(p) = self.slots[first].live() {
            return Ok(p);
        }
        let live = (1..n).find_map(|i| self.slots[(first + i) % n].live());
        if live.is_none() && wait {
            // Boxed: a handshake's future is large, and rare.
            let reconnect = Box::pin(self.reconnect(first, ctx, endpoint));
            return reconnect.await.map_err(NotSent::Failed);
        }
        let (me, ctx, endpoint) = (self.clone(), ctx.clone(), endpoint.clone());
        tokio::spawn(async move {
            let _ = me.reconnect(first, &ctx, &endpoint).await;
        });
        live.ok_or(NotSent::Connecting)
    }

    async fn reconnect(
        &self,
        slot: usize,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
    ) -> Result<Arc<Pooled>, Failure> {
        let slot = &self.slots[slot];
        let _one = slot.connecting.lock().await;
        if let Some(p) = slot.live() {
            return Ok(p);
        }
        if let Some((at, why)) = &*lock(&slot.last_failure)
            && at.elapsed() < RECONNECT_BACKOFF
        {
            return Err(Failure::Unavailable(why.clone()));
        }
        let link = match self.connect(ctx, endpoint, None).await {
            Ok(l) => l,
            Err(f) => {
                if let Failure::Unavailable(why) = &f {
                    *lock(&slot.last_failure) = Some((Instant::now(), why.clone()));
                }
                self.health.eject(self.now());
                return Err(f);
            }
        };
        let mut exec = None;
        let handle = link.spawn(|handle| {
            let exchange = ctx.exchange(Role::EdgePool, Some(Ingress::HTTP));
            let e = Exec::start(exchange, handle, ctx.clone(), Local::Callers);
            exec = Some(e.clone());
            ExecSink(e)
        });
        ctx.track(&handle);
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

/// What a caller's ticket brought. A ticket dropped unanswered leaves the
/// request's fate unknown.
fn answered(r: Result<Reply, oneshot::error::RecvError>) -> Reply {
    r.unwrap_or_else(|_| {
        Reply::Failed(Failure::MayHaveExecuted(
            "the association dropped the request".into(),
        ))
    })
}
