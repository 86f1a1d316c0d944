//! One origin as the edge reaches it: its address, the pool of
//! associations its stateless requests share, and its health.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::warn;

use futures_util::FutureExt;

use crate::assoc::{Endpoint, Link, LinkError, PeerAddr, SharedClientEndpoint};
use crate::bridge::ProtocolId;
use crate::gateway::context::Ctx;
use crate::gateway::exec::{Exec, ExecSink, Local};
use crate::gateway::metrics::Ingress;
use crate::gateway::policy::health::{self, Health};
use crate::gateway::policy::race::{self, End, Race, Verdict};
use crate::jsonrpc::{Kind, Scanned, scan};
use crate::relay::{Attached, Failure, Interim, Reply, Role};

/// A request as a try carries it: its text, its kind, what goes beside it,
/// and where what the origin streams before its reply goes.
pub type Message = (Bytes, Kind, Option<Attached>, Option<Interim>);

/// After a failed connect, requests fail fast for this long instead of each
/// starting a handshake with a peer that is down.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// The most spares under way to one origin at once. A handshake left
/// hanging by a killed origin is one of the few in flight in the
/// milliseconds it died in; many slow ones at once are an origin that is
/// overloaded, which twice as many would not help.
const SPARES_AT_ONCE: usize = 4;
/// The least round-trip time a new QUIC connection to an origin assumes
/// from the last one's ([`Peer::connect`]): a lost Initial is sent again
/// after about three times this, doubling each time.
const INITIAL_RTT_AT_LEAST: Duration = Duration::from_millis(5);
/// The most: quinn's default, for a path with no measure yet.
const INITIAL_RTT_AT_MOST: Duration = Duration::from_millis(333);

/// An origin gateway: where it is, its pooled associations, its health.
pub struct Peer {
    pub addr: PeerAddr,
    pub health: Health,
    /// Where its health's times count from.
    epoch: Instant,
    slots: Vec<Slot>,
    next: AtomicUsize,
    /// How long the last handshake that succeeded took, in microseconds
    /// (0: none yet).
    handshake_took: AtomicU64,
    /// Spares under way ([`SPARES_AT_ONCE`] at most).
    spares: AtomicUsize,
    /// The round-trip time of the last QUIC association made, when its
    /// handshake ended, in microseconds (0: none yet).
    last_rtt: AtomicU64,
    /// Turns for handshakes ([`HANDSHAKES_AT_ONCE`]).
    handshakes: tokio::sync::Semaphore,
}

/// The most handshakes under way to one origin at once (spares aside).
/// An origin takes at most `--max-handshakes-per-source` (32 by default)
/// from one address, and refuses the rest at once: a herd of session
/// clients (hundreds of WebSocket clients whose first messages come
/// together, the reconnections after a restart) would mostly be refused.
/// Past this many, a handshake waits for a turn instead, for at most
/// `--handshake-timeout`, counted in `npamp_handshakes_queued_total`.
pub const HANDSHAKES_AT_ONCE: usize = 16;

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
            handshake_took: AtomicU64::new(0),
            spares: AtomicUsize::new(0),
            last_rtt: AtomicU64::new(0),
            handshakes: tokio::sync::Semaphore::new(HANDSHAKES_AT_ONCE),
        }
    }

    /// Now, as its health counts time.
    pub fn now(&self) -> u64 {
        health::millis(self.epoch, Instant::now())
    }

    /// Establishes an association to this origin; `shared`: the client
    /// endpoint of session associations.
    ///
    /// A handshake that has run past [`Self::spare_after`] gets a spare,
    /// made beside it (while fewer than [`SPARES_AT_ONCE`] are), and the
    /// first of the two to succeed is kept (the other is dropped, and its
    /// connection with it). One under way may be with a peer that has gone
    /// since it began: an origin killed mid-handshake answers nothing for
    /// it, and once restarted ignores its datagrams (they lead with a
    /// Handshake packet, which gets no stateless reset) until the handshake
    /// or idle timeout, seconds later. The spare reaches whatever answers
    /// now.
    ///
    /// Over QUIC the connection assumes the round-trip time the last one
    /// measured, rather than quinn's 333 ms, so that an Initial lost while
    /// the origin restarts (a rolling restart: the edge reconnects as the
    /// drained associations close) is sent again within milliseconds, not
    /// after a second.
    pub async fn connect(
        &self,
        ctx: &Ctx,
        endpoint: &Endpoint,
        shared: Option<&SharedClientEndpoint>,
    ) -> Result<Link, Failure> {
        let _turn = self.turn(ctx, endpoint).await?;
        let measured;
        let endpoint = match self.initial_rtt() {
            Some(rtt) => {
                measured = Endpoint {
                    initial_rtt: Some(rtt),
                    ..endpoint.clone()
                };
                &measured
            }
            None => endpoint,
        };
        let once = || async {
            let link = match shared {
                Some(shared) => Link::connect_sharing(self.addr, endpoint, shared).await,
                None => Link::connect(self.addr, endpoint).await,
            };
            if let Ok(link) = &link {
                self.handshake_took
                    .store(micros(link.handshake_time), Relaxed);
                if let Some(rtt) = link.rtt() {
                    self.last_rtt.store(micros(rtt), Relaxed);
                }
            }
            link
        };
        let link = match self.spare_after() {
            Some(after) => {
                // Lazy: runs only once `first_of` starts it.
                let spare = async {
                    // With as many under way as may be, none: the first alone.
                    let _one = Spare::take(&self.spares)?;
                    ctx.metrics.handshake_spares.fetch_add(1, Relaxed);
                    warn!(
                        peer = %self.addr, after = ?after,
                        "a handshake is taking far longer than the last one with this origin: making a spare beside it"
                    );
                    Some(once().await)
                };
                first_of(once(), spare, after).await
            }
            None => once().await,
        };
        link.map_err(|e| self.failed(ctx, &e))
    }

    /// A turn among the handshakes under way to this origin
    /// ([`HANDSHAKES_AT_ONCE`]), waited for within the handshake timeout.
    async fn turn(
        &self,
        ctx: &Ctx,
        endpoint: &Endpoint,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, Failure> {
        if let Ok(turn) = self.handshakes.try_acquire() {
            return Ok(turn);
        }
        ctx.metrics.handshakes_queued.fetch_add(1, Relaxed);
        let wait = endpoint.handshake_timeout;
        match tokio::time::timeout(wait, self.handshakes.acquire()).await {
            Ok(Ok(turn)) => Ok(turn),
            _ => Err(Failure::Unavailable(format!(
                "no association to the peer gateway {}: {HANDSHAKES_AT_ONCE} handshakes with it were under way and none ended within {wait:?} (--handshake-timeout)",
                self.addr
            ))),
        }
    }

    /// A handshake that failed: counted, logged (throttled), and said to
    /// the requests that waited, with a hint where the origin never
    /// answered.
    fn failed(&self, ctx: &Ctx, e: &LinkError) -> Failure {
        ctx.metrics.handshake_failures.fetch_add(1, Relaxed);
        static FAILED: crate::gateway::quiet::Every = crate::gateway::quiet::Every::new();
        crate::gateway::quiet::warn_every!(
            FAILED,
            peer = %self.addr,
            error = %e,
            "cannot establish an association (one line per 5 s at most; all are counted in npamp_handshake_failures_total)"
        );
        let hint = match self.addr.scheme {
            _ if !e.no_answer() => "",
            crate::assoc::Scheme::Tls => {
                " (no answer: is the origin running, and does TCP reach that port?)"
            }
            _ => {
                " (no answer: is the origin running, and does UDP reach that port? tls:// tries TCP)"
            }
        };
        Failure::Unavailable(format!(
            "no association to the peer gateway {}: {e}{hint}",
            self.addr
        ))
    }

    /// The round-trip time a new QUIC connection assumes: the last one's,
    /// within [`INITIAL_RTT_AT_LEAST`] and [`INITIAL_RTT_AT_MOST`]; none
    /// (quinn's default) before one was made.
    fn initial_rtt(&self) -> Option<Duration> {
        let rtt = self.last_rtt.load(Relaxed);
        (rtt > 0)
            .then(|| Duration::from_micros(rtt).clamp(INITIAL_RTT_AT_LEAST, INITIAL_RTT_AT_MOST))
    }

    /// How long a handshake runs before it gets a spare
    /// ([`race::spare_after`] the last successful one). None before the
    /// first success: nothing tells a slow origin from a gone one yet.
    fn spare_after(&self) -> Option<Duration> {
        let took = self.handshake_took.load(Relaxed);
        (took > 0).then(|| race::spare_after(Duration::from_micros(took)))
    }

    /// Makes the slots' associations in the background, so that the first
    /// requests do not wait for a handshake: one first, then the others
    /// together once it is made, so an origin that is down costs one failed
    /// attempt (and one warning), not one per slot. A failure counts as one
    /// would for a request: the origin is ejected for its backoff, and the
    /// slot is tried again by the first request after [`RECONNECT_BACKOFF`].
    pub fn open(self: &Arc<Self>, ctx: &Arc<Ctx>, endpoint: &Endpoint) {
        let (me, ctx2, endpoint) = (self.clone(), ctx.clone(), endpoint.clone());
        crate::shard::spawn_on(ctx.shards.as_deref(), 0, async move {
            if me.reconnect(0, &ctx2, &endpoint).await.is_ok() {
                for slot in 1..me.slots.len() {
                    me.reconnect_in_background(slot, &ctx2, &endpoint);
                }
            }
        });
    }

    /// Reconnects slot `slot` on a task of its own, where its association
    /// is to live: on its shard (slot `i` is shard `i`'s, modulo their
    /// number), else here.
    /// Nothing to do while a handshake for the slot is under way: a task
    /// per request would wait on it, as many tasks as requests come while
    /// a handshake hangs (seconds; see [`Self::wait_for_association`]).
    fn reconnect_in_background(self: &Arc<Self>, slot: usize, ctx: &Arc<Ctx>, endpoint: &Endpoint) {
        if !self.slots[slot].is_connecting() {
            drop(self.reconnect_on_its_shard(slot, ctx, endpoint));
        }
    }

    /// Reconnects slot `slot` on a task of its shard (see
    /// [`Self::reconnect_in_background`]); the handle gives the outcome.
    fn reconnect_on_its_shard(
        self: &Arc<Self>,
        slot: usize,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
    ) -> tokio::task::JoinHandle<Result<Arc<Pooled>, Failure>> {
        let (me, ctx2, endpoint) = (self.clone(), ctx.clone(), endpoint.clone());
        crate::shard::spawn_on(ctx.shards.as_deref(), slot, async move {
            me.reconnect(slot, &ctx2, &endpoint).await
        })
    }

    /// The slot to try first: on a shard, one of that shard's slots (in
    /// turn), so that a request and its association share a thread;
    /// elsewhere, every slot in turn.
    fn first_slot(&self, ctx: &Ctx) -> usize {
        let n = self.slots.len();
        match (&ctx.shards, crate::shard::Shards::current()) {
            (Some(shards), Some(shard)) if shard < n => {
                let k = shards.len();
                // Slots shard, shard + k, shard + 2k, ... are this shard's.
                let mine = (n - shard).div_ceil(k);
                if mine == 1 {
                    shard
                } else {
                    shard + k * (self.next.fetch_add(1, Relaxed) % mine)
                }
            }
            _ => self.next.fetch_add(1, Relaxed) % n,
        }
    }

    /// Carries one request over a pooled association and waits for its
    /// reply (or the request timeout, which the exchange keeps). With no
    /// live association it waits for one when `wait`, else it is not sent.
    /// A `second` copy (a hedge) takes another association than the first
    /// copy would have. The request is its text, its kind, and what goes
    /// beside it.
    pub async fn call(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        (wait, second): (bool, bool),
        (text, kind, attached, interim): Message,
    ) -> Result<Reply, NotSent> {
        let pooled = self.pooled(ctx, endpoint, wait, second).await?;
        let (tx, rx) = oneshot::channel();
        let mut waiting = Waiting {
            rx: Some(rx),
            exec: &pooled.exec,
            ctx,
        };
        let carried = pooled.exec.with(|x, now| {
            x.handle_local_streamed(now, (text, kind), Some(tx), attached, interim);
        });
        // A send that waits for room on a backed-up association ends when
        // the exchange answers (a timeout): sealing happens at once or not
        // at all, so a send cut off here sent nothing.
        let reply = tokio::select! {
            biased;
            r = waiting.reply() => r,
            () = carried => waiting.reply().await,
        };
        Ok(answered(reply))
    }

    /// Carries one notification over a pooled association.
    pub async fn notify(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        text: Bytes,
        kind: Kind,
        attached: Option<Attached>,
    ) -> Result<(), Failure> {
        let pooled =
            (self.pooled(ctx, endpoint, true, false).await).map_err(NotSent::into_failure)?;
        pooled
            .exec
            .with(|x, now| x.handle_local_one(now, text, kind, None, attached))
            .await;
        Ok(())
    }

    /// A live pooled association (round robin). A slot whose association
    /// is gone reconnects in the background while the live ones serve; when
    /// none is live, the request waits for one
    /// ([`Self::wait_for_association`]) when `wait`, else it is not sent.
    async fn pooled(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        wait: bool,
        second: bool,
    ) -> Result<Arc<Pooled>, NotSent> {
        let n = self.slots.len();
        let first = (self.first_slot(ctx) + usize::from(second)) % n;
        if let Some(p) = self.slots[first].live() {
            return Ok(p);
        }
        let live = (1..n).find_map(|i| self.slots[(first + i) % n].live());
        if live.is_none() && wait {
            return self
                .wait_for_association(first, ctx, endpoint)
                .await
                .map_err(NotSent::Failed);
        }
        self.reconnect_in_background(first, ctx, endpoint);
        live.ok_or(NotSent::Connecting)
    }

    /// With no live association: a handshake of the request's own, on the
    /// first slot from `first` where none is under way, or, with every slot
    /// busy, the first of theirs to end.
    ///
    /// Never one handshake in particular: one under way may be with a peer
    /// that has gone since it began (see [`Self::connect`]). A new one
    /// reaches whatever answers now.
    async fn wait_for_association(
        self: &Arc<Self>,
        first: usize,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
    ) -> Result<Arc<Pooled>, Failure> {
        let n = self.slots.len();
        let free = (0..n)
            .map(|i| (first + i) % n)
            .find(|&s| !self.slots[s].is_connecting());
        let slot = match free {
            Some(free) => free,
            None => {
                let ended = self.first_handshake_to_end().await;
                if let Some(p) = self.slots[ended].live() {
                    return Ok(p);
                }
                // It failed: within the backoff its slot answers with why.
                ended
            }
        };
        if slot == first {
            // Boxed: a handshake's future is large, and rare.
            Box::pin(self.reconnect(slot, ctx, endpoint)).await
        } else {
            // Another shard's slot: its association is made, and so lives,
            // there.
            self.reconnect_on_its_shard(slot, ctx, endpoint)
                .await
                .unwrap_or_else(|e| {
                    Err(Failure::Unavailable(format!(
                        "the handshake's task ended: {e}"
                    )))
                })
        }
    }

    /// The slot whose handshake under way ends first.
    async fn first_handshake_to_end(&self) -> usize {
        let ends = self.slots.iter().map(|s| Box::pin(s.connecting.lock()));
        let (_ended, slot, _others) = futures_util::future::select_all(ends).await;
        slot
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
        ctx.track(&handle, crate::gateway::metrics::Side::Edge);
        let exec = exec.ok_or_else(|| Failure::Unavailable("association not started".into()))?;
        let pooled = Arc::new(Pooled { exec });
        *slot.current.write().unwrap_or_else(|p| p.into_inner()) = Some(pooled.clone());
        *lock(&slot.last_failure) = None;
        Ok(pooled)
    }
}

/// A duration in microseconds, at least 1 (0 means "none yet").
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// One of an origin's spares under way, counted while it lives.
struct Spare<'a>(&'a AtomicUsize);

impl<'a> Spare<'a> {
    /// One more under way, unless [`SPARES_AT_ONCE`] are.
    fn take(under_way: &'a AtomicUsize) -> Option<Self> {
        under_way
            .fetch_update(Relaxed, Relaxed, |n| (n < SPARES_AT_ONCE).then_some(n + 1))
            .ok()
            .map(|_| Spare(under_way))
    }
}

impl Drop for Spare<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// The first of `first` and a `spare`, started once `first` has run for
/// `after`, to succeed, as the policy's [`Race`] rules: with both failed,
/// the spare's failure. A spare that is not made (`None`) leaves `first`
/// to answer.
async fn first_of<T>(
    first: impl Future<Output = Result<T, LinkError>>,
    spare: impl Future<Output = Option<Result<T, LinkError>>>,
    after: Duration,
) -> Result<T, LinkError> {
    let mut first = pin!(first.fuse());
    tokio::select! {
        r = &mut first => return r,
        () = tokio::time::sleep(after) => {}
    }
    let mut spare = pin!(spare.fuse());
    let mut race = Race::new();
    let mut ends: [Option<Result<T, LinkError>>; 2] = [None, None];
    loop {
        let (slot, end) = tokio::select! {
            r = &mut first => {
                let end = if r.is_ok() { End::Won } else { End::Lost };
                ends[0] = Some(r);
                (race::Slot::First, end)
            }
            r = &mut spare => match r {
                Some(r) => {
                    let end = if r.is_ok() { End::Won } else { End::Lost };
                    ends[1] = Some(r);
                    (race::Slot::Second, end)
                }
                None => (race::Slot::Second, End::NotMade),
            },
        };
        if let Verdict::Answer(slot) = race.ended(slot, end)
            && let Some(answer) = ends[slot.index()].take()
        {
            return answer;
        }
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
    /// Whether a handshake for this slot is under way.
    fn is_connecting(&self) -> bool {
        self.connecting.try_lock().is_err()
    }

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

/// A caller waiting for its request's reply. Dropped before the reply (an
/// HTTP client that left), it gives the request up: the association's
/// exchange forgets the requests whose callers are gone and, for MCP,
/// tells the origin which (`notifications/cancelled` beside the request's
/// correlation id), which ends that request at the server.
struct Waiting<'a> {
    /// Taken when the reply comes.
    rx: Option<oneshot::Receiver<Reply>>,
    exec: &'a Arc<PoolExec>,
    ctx: &'a Arc<Ctx>,
}

/// A pooled association's executor: its callers wait on a oneshot.
type PoolExec = Exec<oneshot::Sender<Reply>>;

impl Waiting<'_> {
    async fn reply(&mut self) -> Result<Reply, oneshot::error::RecvError> {
        // Asked once the reply came, never: waits for ever.
        let Some(rx) = self.rx.as_mut() else {
            return std::future::pending().await;
        };
        let r = rx.await;
        self.rx = None;
        r
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Gone before its reply: its ticket is closed from now on.
        let Some(rx) = self.rx.take() else {
            return;
        };
        drop(rx);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (exec, ctx) = (self.exec.clone(), self.ctx.clone());
        runtime.spawn(async move {
            exec.with(|x, now| {
                let crossed = x.abandon_where(now, oneshot::Sender::is_closed);
                if ctx.protocol != ProtocolId::MCP {
                    return;
                }
                for (id, corr) in crossed {
                    let text = cancelled(&id);
                    if let Ok(Scanned::Single(kind)) = scan(&text, &ctx.scan) {
                        let cancel = Some(Attached::Cancel(Bytes::copy_from_slice(&corr)));
                        x.handle_local_one(now, text, kind, None, cancel);
                    }
                }
            })
            .await;
        });
    }
}

/// MCP's cancellation of the request whose id is `id` (its token).
fn cancelled(id: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(120 + id.len());
    out.extend_from_slice(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"#,
    );
    out.extend_from_slice(id);
    out.extend_from_slice(br#","reason":"the client went away"}}"#);
    out.into()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::GatewayConfig;
    use crate::shard::Shards;

    fn ctx(shards: Option<Arc<Shards>>) -> Arc<Ctx> {
        let endpoint = Endpoint::new([7; 32], crate::handshake::Trust::InsecureAcceptAny);
        let config = GatewayConfig::new(endpoint);
        Arc::new(Ctx::new(&config, Default::default()).with_shards(shards))
    }

    fn peer(slots: usize) -> Arc<Peer> {
        let addr = "tls://127.0.0.1:1".parse().expect("addr");
        Arc::new(Peer::new(addr, slots, Instant::now()))
    }

    /// The slots six of a shard's requests try first.
    fn firsts(shards: &Shards, ctx: &Arc<Ctx>, peer: &Arc<Peer>, shard: usize) -> Vec<usize> {
        let (ctx, peer) = (ctx.clone(), peer.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(shards.spawn_on(shard, async move {
            (0..6).map(|_| peer.first_slot(&ctx)).collect::<Vec<_>>()
        }))
        .expect("task")
    }

    #[test]
    fn a_shard_takes_its_own_slots_and_other_threads_take_every_one() {
        let shards = Arc::new(Shards::start(2).expect("shards"));
        let ctx = ctx(Some(shards.clone()));
        // One slot per shard: always its own.
        let two = peer(2);
        assert_eq!(firsts(&shards, &ctx, &two, 0), [0; 6]);
        assert_eq!(firsts(&shards, &ctx, &two, 1), [1; 6]);
        // Five slots: shard 0 has 0, 2 and 4; shard 1 has 1 and 3, in turn.
        let five = peer(5);
        let mut mine = firsts(&shards, &ctx, &five, 0);
        mine.sort_unstable();
        assert_eq!(mine, [0, 0, 2, 2, 4, 4]);
        let mut mine = firsts(&shards, &ctx, &five, 1);
        mine.sort_unstable();
        assert_eq!(mine, [1, 1, 1, 3, 3, 3]);
        // A thread that is no shard's goes round them all.
        let mut all: Vec<_> = (0..5).map(|_| five.first_slot(&ctx)).collect();
        all.sort_unstable();
        assert_eq!(all, [0, 1, 2, 3, 4]);
    }

    /// A request with no live association does not queue behind a
    /// handshake under way on its first slot (one that may never finish:
    /// its peer restarted mid-handshake) while another slot is free: it
    /// makes its own there, and is answered by what that one meets (here a
    /// refused connection) at once. With every slot busy, the first
    /// handshake to end answers it.
    #[tokio::test]
    async fn a_waiting_request_takes_a_slot_where_no_handshake_is_under_way() {
        let (ctx, two) = (ctx(None), peer(2));
        let endpoint = Endpoint::new([9; 32], crate::handshake::Trust::InsecureAcceptAny);
        assert_eq!(
            two.first_slot(&ctx),
            0,
            "the next request's first slot is 1"
        );
        let stuck = two.slots[1].connecting.lock().await;
        assert!(two.slots[1].is_connecting() && !two.slots[0].is_connecting());
        let got = tokio::time::timeout(
            Duration::from_secs(5),
            two.pooled(&ctx, &endpoint, true, false),
        )
        .await
        .expect("answered without waiting for slot 1's handshake");
        match got {
            Err(NotSent::Failed(Failure::Unavailable(why))) => {
                assert!(why.contains("127.0.0.1:1"), "{why}");
            }
            Err(NotSent::Failed(other)) => panic!("{other:?}"),
            Err(NotSent::Connecting) => panic!("not sent: connecting"),
            Ok(_) => panic!("an association to a closed port"),
        }
        // Slot 0 made the attempt and keeps its failure for the backoff.
        assert!(lock(&two.slots[0].last_failure).is_some());
        assert!(lock(&two.slots[1].last_failure).is_none());
        // With every slot busy, the request waits for the first of their
        // handshakes to end, whichever: here slot 0's, while slot 1's hangs.
        let held = two.slots[0].connecting.lock().await;
        let (ctx2, two2, endpoint2) = (ctx.clone(), two.clone(), endpoint.clone());
        let mut waiting = tokio::spawn(async move {
            let got = two2.pooled(&ctx2, &endpoint2, true, false).await;
            matches!(got, Err(NotSent::Failed(Failure::Unavailable(_))))
        });
        let early = tokio::time::timeout(Duration::from_millis(200), &mut waiting).await;
        assert!(
            early.is_err(),
            "answered while every handshake was under way"
        );
        drop(held);
        let answered = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("answered once slot 0's handshake ended")
            .expect("task");
        assert!(answered, "slot 0's failure");
        drop(stuck);
    }

    /// Requests that find their first slot's association gone while
    /// another serves leave no task behind for each of them while that
    /// slot's handshake is under way.
    #[tokio::test]
    async fn a_handshake_under_way_gathers_no_task_per_request() {
        let (ctx, two) = (ctx(None), peer(2));
        let endpoint = Endpoint::new([9; 32], crate::handshake::Trust::InsecureAcceptAny);
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = alive();
        let hanging = two.slots[1].connecting.lock().await;
        for _ in 0..1000 {
            two.reconnect_in_background(1, &ctx, &endpoint);
        }
        assert_eq!(alive(), before, "a task waiting per request");
        drop(hanging);
    }

    /// A handshake that hangs gets one spare once it has run `after`, and
    /// the first of the two to succeed answers, whichever; with both
    /// failed, the later failure. One that ends before `after` gets none.
    #[tokio::test(start_paused = true)]
    async fn a_hanging_handshake_gets_one_spare_and_the_first_success_answers() {
        let after = Duration::from_millis(500);
        let timeout = |s| LinkError::HandshakeTimeout(Duration::from_secs(s));
        let hangs = std::future::pending::<Result<&str, LinkError>>;
        let at = |ms, r: Result<&'static str, LinkError>| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            r
        };
        let spare = |ms, r| async move { Some(at(ms, r).await) };
        let started = tokio::time::Instant::now();
        let got = first_of(hangs(), spare(10, Ok("spare")), after).await;
        assert_eq!(got.ok(), Some("spare"));
        assert_eq!(started.elapsed(), Duration::from_millis(510));
        // The first ends first after all.
        let started = tokio::time::Instant::now();
        let got = first_of(at(600, Ok("first")), spare(500, Ok("spare")), after).await;
        assert_eq!(
            (got.ok(), started.elapsed()),
            (Some("first"), Duration::from_millis(600))
        );
        // A spare that fails leaves the first to answer, and the other way round.
        let got = first_of(at(2_000, Ok("first")), spare(1, Err(timeout(1))), after).await;
        assert_eq!(got.ok(), Some("first"));
        let got = first_of(at(600, Err(timeout(1))), spare(400, Ok("spare")), after).await;
        assert_eq!(got.ok(), Some("spare"));
        let got = first_of(at(600, Err(timeout(1))), spare(400, Err(timeout(2))), after).await;
        assert_eq!(
            got.err().map(|e| e.to_string()),
            Some(timeout(2).to_string())
        );
        // A spare not made (too many under way) leaves the first to answer,
        // failed or not.
        let none = || async { None };
        let got = first_of(at(600, Err(timeout(1))), none(), after).await;
        assert_eq!(
            got.err().map(|e| e.to_string()),
            Some(timeout(1).to_string())
        );
        let got = first_of(at(600, Ok("first")), none(), after).await;
        assert_eq!(got.ok(), Some("first"));
        // Before `after`: no spare.
        let spared = std::sync::atomic::AtomicBool::new(false);
        let spare = async {
            spared.store(true, Relaxed);
            Some(Ok("spare"))
        };
        let got = first_of(at(499, Err(timeout(1))), spare, after).await;
        assert!(got.is_err() && !spared.load(Relaxed));
    }

    /// At most [`SPARES_AT_ONCE`] spares to one origin are under way at once.
    #[test]
    fn spares_under_way_are_capped() {
        let under_way = AtomicUsize::new(0);
        let taken: Vec<_> = (0..SPARES_AT_ONCE)
            .filter_map(|_| Spare::take(&under_way))
            .collect();
        assert_eq!(taken.len(), SPARES_AT_ONCE);
        assert!(Spare::take(&under_way).is_none());
        drop(taken);
        assert_eq!(under_way.load(Relaxed), 0);
        assert!(Spare::take(&under_way).is_some());
    }

    /// A connect whose handshake hangs (an origin that never answers)
    /// makes a spare, counted, while fewer than [`SPARES_AT_ONCE`] are
    /// under way; past that the first answers alone.
    #[tokio::test]
    async fn a_connect_makes_a_spare_only_under_the_cap() {
        let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = format!("quic://{}", silent.local_addr().expect("addr"));
        let one = Arc::new(Peer::new(addr.parse().expect("addr"), 1, Instant::now()));
        let ctx = ctx(None);
        let mut endpoint = Endpoint::new([9; 32], crate::handshake::Trust::InsecureAcceptAny);
        endpoint.handshake_timeout = race::SPARE_AFTER_AT_LEAST + Duration::from_millis(300);
        one.handshake_took.store(1, Relaxed);
        let spares = || ctx.metrics.handshake_spares.load(Relaxed);
        let all: Vec<_> = (0..SPARES_AT_ONCE)
            .filter_map(|_| Spare::take(&one.spares))
            .collect();
        assert!(one.connect(&ctx, &endpoint, None).await.is_err());
        assert_eq!(spares(), 0, "a spare past the cap");
        drop(all);
        assert!(one.connect(&ctx, &endpoint, None).await.is_err());
        assert_eq!(spares(), 1);
        assert_eq!(one.spares.load(Relaxed), 0, "a spare left counted");
    }

    /// A spare comes after 4 times the last successful handshake's time,
    /// at least 500 ms; and not before any has succeeded.
    #[test]
    fn a_spare_comes_after_four_times_the_last_handshake() {
        let one = peer(1);
        assert_eq!(one.spare_after(), None);
        one.handshake_took.store(2_000, Relaxed);
        assert_eq!(one.spare_after(), Some(race::SPARE_AFTER_AT_LEAST));
        one.handshake_took.store(300_000, Relaxed);
        assert_eq!(one.spare_after(), Some(Duration::from_millis(1_200)));
    }

    #[test]
    fn without_shards_every_slot_is_taken_in_turn() {
        let (ctx, three) = (ctx(None), peer(3));
        let got: Vec<_> = (0..6).map(|_| three.first_slot(&ctx)).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2]);
    }
}
