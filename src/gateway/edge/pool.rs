//! One origin as the edge reaches it: its address, the pool of
//! associations its stateless requests share, and its health.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;
use tracing::{info, warn};

use super::health::Health;
use crate::assoc::{Endpoint, Link, LinkError, PeerAddr, SharedClientEndpoint};
use crate::gateway::Ctx;
use crate::gateway::exec::{Exec, ExecSink, Local};
use crate::gateway::metrics::Ingress;
use crate::jsonrpc::{Kind, Scanned};
use crate::relay::{Failure, Reply, Role};

/// After a failed connect, requests fail fast for this long instead of each
/// starting a handshake with a peer that is down.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(200);

/// A handshake that has run this many times as long as the last one that
/// succeeded (and at least [`SPARE_AFTER_AT_LEAST`]) gets a spare, made
/// beside it, for the requests that wait ([`Peer::spare`]).
const SPARE_AFTER_TIMES: u32 = 4;
/// The least a handshake runs before it gets a spare: a few round trips
/// and some scheduling delay on a loaded machine, well above a handshake's
/// time on a LAN (1.5 ms over loopback).
const SPARE_AFTER_AT_LEAST: Duration = Duration::from_millis(500);

/// An origin gateway: where it is, its pooled associations, its health.
pub struct Peer {
    pub addr: PeerAddr,
    pub health: Health,
    /// Where its health's times count from.
    epoch: Instant,
    slots: Vec<Slot>,
    next: AtomicUsize,
    /// Held while a spare handshake is under way: one at a time.
    spare: Arc<tokio::sync::Mutex<()>>,
    /// How long the last handshake that succeeded took, in microseconds
    /// (0: none yet).
    handshake_took: AtomicU64,
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
            spare: Arc::default(),
            handshake_took: AtomicU64::new(0),
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
            warn!(peer = %self.addr, error = %e, "cannot establish an association");
            self.unavailable(ctx, &e)
        })
    }

    /// A handshake with this origin that failed with `e`, counted.
    fn unavailable(&self, ctx: &Ctx, e: &LinkError) -> Failure {
        ctx.metrics.handshake_failures.fetch_add(1, Relaxed);
        Failure::Unavailable(format!(
            "no association to the peer gateway {}: {e}",
            self.addr
        ))
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
            if me.reconnect(0, &ctx2, &endpoint, Attempt::Slot).await.is_ok() {
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
            drop(self.reconnect_on_its_shard(slot, ctx, endpoint, Attempt::Slot));
        }
    }

    /// Reconnects slot `slot` on a task of its shard (see
    /// [`Self::reconnect_in_background`]); the handle gives the outcome.
    fn reconnect_on_its_shard(
        self: &Arc<Self>,
        slot: usize,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        attempt: Attempt,
    ) -> tokio::task::JoinHandle<Result<Arc<Pooled>, Failure>> {
        let (me, ctx2, endpoint) = (self.clone(), ctx.clone(), endpoint.clone());
        crate::shard::spawn_on(ctx.shards.as_deref(), slot, async move {
            me.reconnect(slot, &ctx2, &endpoint, attempt).await
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
    /// copy would have.
    pub async fn call(
        self: &Arc<Self>,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        wait: bool,
        second: bool,
        text: Bytes,
        kind: Kind,
    ) -> Result<Reply, NotSent> {
        let pooled = self.pooled(ctx, endpoint, wait, second).await?;
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
        let pooled = (self.pooled(ctx, endpoint, true, false).await).map_err(NotSent::into_failure)?;
        pooled
            .exec
            .with(|x, now| x.handle_local(now, text, Ok(Scanned::Single(kind)), None))
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
    /// busy, the first of theirs to end. Either way, once the handshake
    /// waited for has run past [`Self::spare_after`], a spare made beside
    /// it ([`Self::spare`]).
    ///
    /// Never one handshake in particular, and never one for long: one under
    /// way may be with a peer that has gone since it began. An origin
    /// killed mid-handshake answers nothing for it, and once restarted
    /// ignores its datagrams (they lead with a Handshake packet, which gets
    /// no stateless reset) until a reset or the handshake timeout, seconds
    /// later. A new one reaches whatever answers now.
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
        let spare_after = self.spare_after();
        let hanging = match free {
            Some(free) => {
                // On the slot's shard, where its association is to live.
                let own = self.reconnect_on_its_shard(free, ctx, endpoint, Attempt::Slot);
                let Some(spare_after) = spare_after else {
                    return joined(own.await);
                };
                match tokio::time::timeout(spare_after, own).await {
                    Ok(made) => return joined(made),
                    Err(_) => free,
                }
            }
            None => {
                let ended = async {
                    self.a_handshake_ends().await;
                    self.any_live().ok_or_else(|| self.failure_now())
                };
                let Some(spare_after) = spare_after else {
                    return ended.await;
                };
                let deadline = self.earliest_handshake() + spare_after;
                match tokio::time::timeout_at(deadline.into(), ended).await {
                    Ok(made) => return made,
                    Err(_) => first,
                }
            }
        };
        self.spare(hanging, ctx, endpoint, spare_after.unwrap_or_default())
            .await
    }

    /// A handshake beside slot `slot`'s, which has run past `after`: one at
    /// a time per origin. The request that starts it waits for it; one
    /// that finds it under way waits for the first handshake to end, this
    /// one or a slot's. Its association goes into the slot, unless the
    /// slot's own handshake made one first (then it is closed).
    async fn spare(
        self: &Arc<Self>,
        slot: usize,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        after: Duration,
    ) -> Result<Arc<Pooled>, Failure> {
        if let Ok(one) = self.spare.clone().try_lock_owned() {
            warn!(
                peer = %self.addr, slot, after = ?after,
                "a handshake with the origin is taking far longer than the last one: making a spare beside it"
            );
            let spare = self.reconnect_on_its_shard(slot, ctx, endpoint, Attempt::Spare(one));
            return joined(spare.await);
        }
        self.a_handshake_ends().await;
        self.any_live().ok_or_else(|| self.failure_now())
    }

    /// How long a handshake runs before a request waiting for it makes a
    /// spare: [`SPARE_AFTER_TIMES`] the last successful one, at least
    /// [`SPARE_AFTER_AT_LEAST`]. None before the first success: nothing
    /// tells a slow origin from a gone one yet.
    fn spare_after(&self) -> Option<Duration> {
        let took = self.handshake_took.load(Relaxed);
        (took > 0).then(|| (Duration::from_micros(took) * SPARE_AFTER_TIMES).max(SPARE_AFTER_AT_LEAST))
    }

    /// When the oldest handshake of a slot under way began (now if none
    /// has yet).
    fn earliest_handshake(&self) -> Instant {
        (self.slots.iter().filter_map(|s| *lock(&s.began)).min()).unwrap_or_else(Instant::now)
    }

    /// Waits until one of the handshakes under way now (a slot's, or the
    /// spare) ends; at once if none is.
    async fn a_handshake_ends(&self) {
        let mut ends: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>>> = Vec::new();
        for s in self.slots.iter().filter(|s| s.is_connecting()) {
            ends.push(Box::pin(async { drop(s.connecting.lock().await) }));
        }
        if self.spare.try_lock().is_err() {
            ends.push(Box::pin(async { drop(self.spare.lock().await) }));
        }
        if !ends.is_empty() {
            futures_util::future::select_all(ends).await;
        }
    }

    /// A live association of any slot.
    fn any_live(&self) -> Option<Arc<Pooled>> {
        self.slots.iter().find_map(Slot::live)
    }

    /// Why there is no association: the latest failure a slot keeps, else
    /// that the handshakes under way made none.
    fn failure_now(&self) -> Failure {
        let latest = self
            .slots
            .iter()
            .filter_map(|s| lock(&s.last_failure).clone())
            .max_by_key(|(at, _)| *at);
        Failure::Unavailable(latest.map_or_else(
            || format!("no association to the peer gateway {}: none was made", self.addr),
            |(_, why)| why,
        ))
    }

    /// A handshake for slot `slot` under `attempt`'s lock, unless the slot
    /// is live (or, for a spare, any slot is) or its last failure is within
    /// [`RECONNECT_BACKOFF`]. The association made goes into the slot,
    /// unless one made meanwhile (by the spare, or by the handshake the
    /// spare was made beside) is live there: that one stays, and this one
    /// is closed.
    async fn reconnect(
        &self,
        slot: usize,
        ctx: &Arc<Ctx>,
        endpoint: &Endpoint,
        attempt: Attempt,
    ) -> Result<Arc<Pooled>, Failure> {
        let s = &self.slots[slot];
        let own = matches!(attempt, Attempt::Slot);
        // Held until the association is in the slot, or the handshake failed.
        let (_one, _spare, live) = match attempt {
            Attempt::Slot => (Some(s.connecting.lock().await), None, s.live()),
            Attempt::Spare(held) => (None, Some(held), self.any_live()),
        };
        if let Some(p) = live {
            return Ok(p);
        }
        if let Some((at, why)) = &*lock(&s.last_failure)
            && at.elapsed() < RECONNECT_BACKOFF
        {
            return Err(Failure::Unavailable(why.clone()));
        }
        let began = Instant::now();
        if own {
            *lock(&s.began) = Some(began);
        }
        let link = Link::connect(self.addr, endpoint).await;
        if own {
            *lock(&s.began) = None;
        }
        let link = match link {
            Ok(l) => l,
            Err(e) => return self.failed(slot, began, ctx, &e),
        };
        let took = u64::try_from(began.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.handshake_took.store(took.max(1), Relaxed);
        if let Some(p) = s.live() {
            tokio::spawn(async move { drop(link.close().await) });
            return Ok(p);
        }
        let mut exec = None;
        let handle = link.spawn(|handle| {
            let exchange = ctx.exchange(Role::EdgePool, Some(Ingress::HTTP));
            let e = Exec::start(exchange, handle, ctx.clone(), Local::Callers);
            exec = Some(e.clone());
            ExecSink(e)
        });
        ctx.track(&handle);
        let exec = exec.ok_or_else(|| Failure::Unavailable("association not started".into()))?;
        let pooled = Arc::new(Pooled {
            exec,
            made: Instant::now(),
        });
        *s.current.write().unwrap_or_else(|p| p.into_inner()) = Some(pooled.clone());
        *lock(&s.last_failure) = None;
        Ok(pooled)
    }

    /// A handshake for slot `slot` begun at `began` failed with `e`. If an
    /// association made since serves (a spare made beside it; the origin
    /// restarted and answered another), the failure is of a peer that is
    /// gone, not of the one that answers now: that association answers,
    /// and the origin is not ejected. Else the slot keeps the failure for
    /// [`RECONNECT_BACKOFF`] and the origin is ejected for its backoff.
    fn failed(
        &self,
        slot: usize,
        began: Instant,
        ctx: &Ctx,
        e: &LinkError,
    ) -> Result<Arc<Pooled>, Failure> {
        let failure = self.unavailable(ctx, e);
        let newer = self.slots.iter().find_map(|s| s.live().filter(|p| p.made > began));
        if let Some(p) = newer {
            info!(peer = %self.addr, slot, error = %e, "a handshake begun before the association that serves now failed");
            return Ok(p);
        }
        warn!(peer = %self.addr, slot, error = %e, "cannot establish an association");
        if let Failure::Unavailable(why) = &failure {
            *lock(&self.slots[slot].last_failure) = Some((Instant::now(), why.clone()));
        }
        self.health.eject(self.now());
        Err(failure)
    }
}

/// The lock a handshake for a slot is made under.
enum Attempt {
    /// The slot's own ([`Slot::connecting`]): one at a time per slot.
    Slot,
    /// A spare's ([`Peer::spare`], held by its caller): one at a time per
    /// origin.
    Spare(tokio::sync::OwnedMutexGuard<()>),
}

/// What a handshake's task brought.
fn joined(
    r: Result<Result<Arc<Pooled>, Failure>, tokio::task::JoinError>,
) -> Result<Arc<Pooled>, Failure> {
    r.unwrap_or_else(|e| Err(Failure::Unavailable(format!("the handshake's task ended: {e}"))))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct Slot {
    current: RwLock<Option<Arc<Pooled>>>,
    connecting: tokio::sync::Mutex<()>,
    /// When the slot's handshake under way began.
    began: Mutex<Option<Instant>>,
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
    /// When its handshake ended.
    made: Instant,
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

    /// `got` is the failure to reach the tests' closed port.
    fn refused(got: Result<Arc<Pooled>, NotSent>) {
        match got {
            Err(NotSent::Failed(Failure::Unavailable(why))) => {
                assert!(why.contains("127.0.0.1:1"), "{why}");
            }
            Err(NotSent::Failed(other)) => panic!("{other:?}"),
            Err(NotSent::Connecting) => panic!("not sent: connecting"),
            Ok(_) => panic!("an association to a closed port"),
        }
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
        assert_eq!(two.first_slot(&ctx), 0, "the next request's first slot is 1");
        let stuck = two.slots[1].connecting.lock().await;
        assert!(two.slots[1].is_connecting() && !two.slots[0].is_connecting());
        let got = tokio::time::timeout(
            Duration::from_secs(5),
            two.pooled(&ctx, &endpoint, true, false),
        )
        .await
        .expect("answered without waiting for slot 1's handshake");
        refused(got);
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
        assert!(early.is_err(), "answered while every handshake was under way");
        drop(held);
        let answered = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("answered once slot 0's handshake ended")
            .expect("task");
        assert!(answered, "slot 0's failure");
        drop(stuck);
    }

    /// A lone slot's handshake that never ends (its lock held here) holds
    /// up the requests waiting for it only until it has run past
    /// [`SPARE_AFTER_TIMES`] the last one's time, at least
    /// [`SPARE_AFTER_AT_LEAST`]: then a spare is made beside it, and its
    /// outcome (here a refused connection) answers. Before any handshake
    /// has succeeded there is nothing to judge by, and none is made.
    #[tokio::test]
    async fn a_handshake_hanging_past_the_last_ones_time_gets_a_spare() {
        let (ctx, one) = (ctx(None), peer(1));
        let endpoint = Endpoint::new([9; 32], crate::handshake::Trust::InsecureAcceptAny);
        let hanging = one.slots[0].connecting.lock().await;
        *lock(&one.slots[0].began) = Some(Instant::now());
        let waited = tokio::time::timeout(
            SPARE_AFTER_AT_LEAST + Duration::from_millis(300),
            one.pooled(&ctx, &endpoint, true, false),
        )
        .await;
        assert!(waited.is_err(), "a spare with no handshake to judge by");
        one.handshake_took.store(1_000, Relaxed);
        *lock(&one.slots[0].began) = Some(Instant::now());
        let started = Instant::now();
        let got = tokio::time::timeout(
            Duration::from_secs(5),
            one.pooled(&ctx, &endpoint, true, false),
        )
        .await
        .expect("answered by the spare");
        let took = started.elapsed();
        refused(got);
        assert!(took >= SPARE_AFTER_AT_LEAST - Duration::from_millis(20), "{took:?}");
        // The spare's failure is kept for the backoff and ejected the
        // origin, as any fresh handshake's would.
        assert!(lock(&one.slots[0].last_failure).is_some());
        assert_eq!(one.health.ejections.load(Relaxed), 1);
        drop(hanging);
    }

    /// Requests that find their first slot's association gone while
    /// another serves leave no task behind for each of them while that
    /// slot's handshake is under way.
    #[tokio::test]
    async fn a_handshake_under_way_gathers_no_task_per_request() {
        let (ctx, two) = (ctx(None), peer(2));
        let endpoint = Endpoint::new([9; 32], crate::handshake::Trust::InsecureAcceptAny);
        let alive = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
        let before = alive();
        let hanging = two.slots[1].connecting.lock().await;
        for _ in 0..1000 {
            two.reconnect_in_background(1, &ctx, &endpoint);
        }
        assert_eq!(alive(), before, "a task waiting per request");
        drop(hanging);
    }

    #[test]
    fn without_shards_every_slot_is_taken_in_turn() {
        let (ctx, three) = (ctx(None), peer(3));
        let got: Vec<_> = (0..6).map(|_| three.first_slot(&ctx)).collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2]);
    }
}
