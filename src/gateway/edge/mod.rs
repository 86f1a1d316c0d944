//! The edge's side of the bridge: associations to the origin gateways.
//!
//! - Stateless traffic (HTTP ingress) shares a pool of associations per
//!   origin with opaque correlation ids, so two clients using the same `id`
//!   at the same time are never cross-wired. Each request goes to the
//!   healthiest, least loaded origin ([`health`]); one that could not be
//!   delivered goes to another when that cannot execute it twice, and a
//!   slow read-only one may be hedged (`--hedge-after`).
//! - Session traffic (WebSocket, TCP, stdio clients) gets an association of
//!   its own per client ([`Edge::session`]), so what the upstream sends on
//!   its own finds the right client. A session stays with the origin it
//!   started on; when that association ends, the client's connection does.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use std::pin::pin;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::Fuse;

use super::context::Ctx;
use super::metrics::{Families, Ingress, Metrics, Section};
use super::outbox::Outbox;
use super::session::Session;
use super::settings::HedgeAfter;
use crate::assoc::{Endpoint, PeerAddr, SharedClientEndpoint};
use crate::bridge::{Effect, TransportError};
use crate::jsonrpc::Kind;
use crate::relay::{Attached, Failure, Interim, Reply, label_of};

pub mod answer;
mod pool;

use super::policy::carry::{Action, Carry, Ended, Members, Next};
use super::policy::health::{self, Chooser, Health, Outcome, RetryBudget};
use super::policy::race::Slot;
pub use pool::HANDSHAKES_AT_ONCE;
use pool::{NotSent, Peer};

/// The edge: the origins and how to reach them.
pub struct Edge {
    pub endpoint: Endpoint,
    pub ctx: Arc<Ctx>,
    origins: Arc<Origins>,
    /// `endpoint` for session associations: a QUIC receive window of
    /// twice `--session-buffer`, so a client that does not read holds that
    /// much of its replies in transit at most.
    session_endpoint: Endpoint,
    /// The one QUIC client endpoint of all session associations (one per
    /// client: they must not each cost a socket and its buffers). Pooled
    /// associations keep endpoints of their own, to spread over cores.
    sessions: SharedClientEndpoint,
}

/// The origins, their health and the retry budget (also what `/metrics`
/// shows of them).
pub struct Origins {
    peers: Vec<Arc<Peer>>,
    /// The healths' clock, and the turn among equals.
    chooser: Chooser,
    budget: RetryBudget,
    hedging: Option<Hedging>,
}

/// When a read-only request gets a second copy (`--hedge-after`).
enum Hedging {
    After(Duration),
    /// After this percentile of the recent read-only latencies.
    Percentile(Box<health::Percentile>),
}

impl Origins {
    fn now(&self) -> u64 {
        self.chooser.at(Instant::now())
    }

    /// Whether a request may go elsewhere after this one: retries, hedges.
    fn can_retry(&self, hedging: bool) -> bool {
        self.peers.len() > 1 || hedging
    }

    /// Whether an origin not in `tried` is left.
    fn left(&self, tried: u64) -> bool {
        (tried.count_ones() as usize) < self.peers.len()
    }

    /// The origin for the next request among those not in `tried`.
    fn choose(&self, tried: u64) -> Option<usize> {
        if self.peers.len() == 1 {
            // No choice to make: no clock, no shared counter.
            return (tried & 1 == 0).then_some(0);
        }
        let health = |i: usize| &self.peers[i].health;
        self.chooser
            .choose_at(self.now(), self.peers.len(), health, tried)
    }

    /// How long a read-only request waits before it is hedged now; `None`
    /// for a percentile not known yet.
    fn hedge_delay(&self, hedging: &Hedging) -> Option<Duration> {
        match hedging {
            Hedging::After(d) => Some(*d),
            Hedging::Percentile(p) => p.get(self.now()),
        }
    }
}

impl Members for Origins {
    fn count(&self) -> usize {
        self.peers.len()
    }

    fn health(&self, i: usize) -> &Health {
        &self.peers[i].health
    }

    fn chooser(&self) -> &Chooser {
        &self.chooser
    }

    fn budget(&self) -> &RetryBudget {
        &self.budget
    }
}

impl Section for Origins {
    fn name(&self) -> &'static str {
        "origins"
    }

    /// `/readyz`: why no request can go anywhere now, when every origin is
    /// ejected.
    fn readiness(&self) -> Result<(), String> {
        let healths = self.peers.iter().map(|p| &p.health);
        health::readiness("origin", healths, self.now())
    }

    /// The origins' lines of `/metrics`.
    fn render(&self, _: &Metrics, o: &mut Families) {
        let shown: Vec<(String, &Health)> = self
            .peers
            .iter()
            .map(|p| (p.addr.to_string(), &p.health))
            .collect();
        health::render(
            o,
            "npamp_origin",
            "origin",
            &shown,
            self.now(),
            &self.budget,
        );
        if let Some(hedging) = &self.hedging {
            let delay = self.hedge_delay(hedging).unwrap_or_default();
            o.gauge(
                "npamp_hedge_delay_seconds",
                "How long a read-only request waits before it is hedged (0: a percentile not known yet).",
            )
            .value(delay.as_secs_f64());
        }
    }
}

/// The most origins one edge carries to (a bit each in a request's
/// tried-set).
pub const MAX_PEERS: usize = 64;

impl Edge {
    /// An edge with one origin.
    pub fn new(peer: PeerAddr, endpoint: Endpoint, ctx: Arc<Ctx>) -> Self {
        Self::with_peers(&[peer], endpoint, ctx)
    }

    /// An edge with these origins (at least one, at most [`MAX_PEERS`];
    /// the configuration checks both).
    pub fn with_peers(peers: &[PeerAddr], endpoint: Endpoint, ctx: Arc<Ctx>) -> Self {
        let size = ctx.limits.pool_size.max(1);
        let window = (2 * ctx.limits.session_buffer).clamp(64 << 10, u32::MAX as usize);
        let session_endpoint = Endpoint {
            receive_window: Some(u32::try_from(window).unwrap_or(u32::MAX)),
            ..endpoint.clone()
        };
        let chooser = Chooser::starting(Instant::now());
        let epoch = chooser.epoch();
        let origins = Arc::new(Origins {
            peers: peers
                .iter()
                .take(MAX_PEERS)
                .map(|a| Arc::new(Peer::new(*a, size, epoch)))
                .collect(),
            chooser,
            budget: RetryBudget::new(ctx.limits.retry_budget),
            hedging: ctx.limits.hedge_after.map(|h| match h {
                HedgeAfter::Delay(d) => Hedging::After(d),
                HedgeAfter::Percentile(p) => {
                    Hedging::Percentile(Box::new(health::Percentile::new(p)))
                }
            }),
        });
        ctx.metrics.show(origins.clone());
        Self {
            endpoint,
            session_endpoint,
            origins,
            ctx,
            sessions: SharedClientEndpoint::default(),
        }
    }

    /// Makes every origin's pooled associations now, in the background,
    /// instead of on the first requests. The first handshake of a process
    /// also seeds AWS-LC's random number generator from CPU jitter: the
    /// first request waited 37-179 ms for both on a 2-core machine, and
    /// the requests behind it as long.
    pub fn open_pools(&self) {
        for peer in &self.origins.peers {
            peer.open(&self.ctx, &self.endpoint);
        }
    }

    /// The first origin (the only one, mostly).
    pub fn peer(&self) -> PeerAddr {
        self.origins.peers[0].addr
    }

    fn now(&self) -> u64 {
        self.origins.now()
    }

    fn choose(&self, tried: u64) -> Option<usize> {
        self.origins.choose(tried)
    }

    fn peer_at(&self, i: usize) -> &Arc<Peer> {
        &self.origins.peers[i]
    }

    /// Establishes an association and the session of one client that came
    /// in at `ingress`, with the best origin that takes it.
    pub async fn session(&self, ingress: Ingress, to_local: Outbox) -> Result<Session, Failure> {
        let mut tried = 0;
        let link = loop {
            let i = self.choose(tried).unwrap_or(0);
            tried |= 1 << i;
            let peer = self.peer_at(i);
            match peer
                .connect(&self.ctx, &self.session_endpoint, Some(&self.sessions))
                .await
            {
                Ok(link) => break link,
                // Nothing was sent: another origin may take the session.
                Err(f) => {
                    peer.health.eject(self.now());
                    if !self.origins.left(tried) {
                        return Err(f);
                    }
                }
            }
        };
        let mut session = None;
        let handle = link.spawn(|h| {
            let s = Session::edge(ingress, h, self.ctx.clone(), to_local);
            let sink = s.sink();
            session = Some(s);
            sink
        });
        self.ctx.track(&handle, super::metrics::Side::Edge);
        session.ok_or_else(|| Failure::Unavailable("session not created".into()))
    }

    /// Carries one request and waits for its reply: to the best origin,
    /// then, when that one could not deliver it and sending it again cannot
    /// execute it twice, to the next (within the retry budget). What the
    /// origin streams before the reply goes to `interim`, if given.
    pub async fn call(
        self: &Arc<Self>,
        text: Bytes,
        kind: Kind,
        attached: Option<Attached>,
        interim: Option<Interim>,
    ) -> Reply {
        let metrics = &self.ctx.metrics;
        metrics.request(Ingress::HTTP);
        let started = Instant::now();
        let reply = if self
            .origins
            .can_retry(self.ctx.limits.hedge_after.is_some())
        {
            // Boxed: one origin without hedging, the common case, keeps a
            // request's future (copied as it is set up) as small as one try.
            Box::pin(self.carry((text, kind, attached, interim))).await
        } else {
            match self.only_try(started, text, kind, attached, interim).await {
                Ok(reply) => reply,
                Err(not_sent) => not_sent.into_reply(),
            }
        };
        match &reply {
            Reply::Message { is_error, .. } => {
                let class = if *is_error {
                    crate::relay::ReplyClass::Error
                } else {
                    crate::relay::ReplyClass::Success
                };
                metrics.reply(class);
                metrics.latency.observe(started.elapsed());
            }
            Reply::Failed(f) => metrics.reply(f.class()),
        }
        reply
    }

    /// [`Edge::call`] where a request may be tried more than once: the
    /// policy's [`Carry`] says where each try goes, when a read-only one
    /// is hedged and which end answers; this sends and waits as told.
    async fn carry(&self, message: pool::Message) -> Reply {
        let (text, kind) = (&message.0, &message.1);
        let started = Instant::now();
        let mut effect = None;
        let hedging = (self.origins.hedging.as_ref())
            .filter(|_| self.effect(&mut effect, text, kind) == Some(Effect::ReadOnly));
        let hedge = hedging.and_then(|h| self.origins.hedge_delay(h));
        let mut carry = Carry::new(&*self.origins, u64::MAX, hedge);
        let (tries, owner) = (AtomicUsize::new(0), Arc::new(AtomicUsize::new(usize::MAX)));
        let try_at = |member: usize, second: bool, wait: bool| {
            let peer = self.peer_at(member);
            let mut message = message.clone();
            let n = tries.fetch_add(1, Relaxed);
            message.3 = message.3.map(|i| self.first_try_only(i, owner.clone(), n));
            peer.call(&self.ctx, &self.endpoint, (wait, second), message)
                .fuse()
        };
        let mut first = pin!(Fuse::terminated());
        let mut second = pin!(Fuse::terminated());
        let mut hedge_timer = pin!(Fuse::terminated());
        let mut ends: [Option<Result<Reply, NotSent>>; 2] = [None, None];
        let mut steps = carry.start(started);
        loop {
            for action in steps {
                match action {
                    Action::Try {
                        slot: Slot::First,
                        member,
                        second: again,
                        wait,
                    } => {
                        first.set(try_at(member, again, wait));
                    }
                    Action::Try {
                        slot: Slot::Second,
                        member,
                        second: again,
                        wait,
                    } => {
                        second.set(try_at(member, again, wait));
                    }
                    Action::HedgeAt(due) => {
                        hedge_timer.set(tokio::time::sleep_until(due.into()).fuse());
                    }
                    Action::GiveUp(Slot::First) => first.set(Fuse::terminated()),
                    Action::GiveUp(Slot::Second) => second.set(Fuse::terminated()),
                    Action::Answer(slot) => {
                        let Some(end) = ends[slot.index()].take() else {
                            return Reply::Failed(Failure::Unavailable("no try answered".into()));
                        };
                        let reply = end.unwrap_or_else(NotSent::into_reply);
                        if let (Some(Hedging::Percentile(p)), Reply::Message { .. }) =
                            (hedging, &reply)
                        {
                            p.record(self.now(), started.elapsed());
                        }
                        return reply;
                    }
                    Action::NoMember => {
                        return Reply::Failed(Failure::Unavailable("no origin to carry to".into()));
                    }
                }
            }
            let (slot, end) = tokio::select! {
                r = &mut first => (Slot::First, r),
                r = &mut second => (Slot::Second, r),
                () = &mut hedge_timer => {
                    steps = carry.hedge_due(Instant::now());
                    continue;
                }
            };
            let ended = ended_of(&end);
            ends[slot.index()] = Some(end);
            let resend_safe = || {
                self.effect(&mut effect, text, kind)
                    .is_some_and(Effect::resend_safe)
            };
            steps = carry.ended(Instant::now(), slot, ended, resend_safe);
        }
    }

    /// `interim` for try `n` of a request: what the origin streams before
    /// the reply goes on from the first try that streams anything, alone
    /// (two executions' progress would interleave); another's is dropped,
    /// counted.
    fn first_try_only(&self, interim: Interim, owner: Arc<AtomicUsize>, n: usize) -> Interim {
        let ctx = self.ctx.clone();
        Interim(Arc::new(move |m: Bytes| {
            let first = owner.compare_exchange(usize::MAX, n, Relaxed, Relaxed);
            match first {
                Ok(_) => (interim.0)(m),
                Err(o) if o == n => (interim.0)(m),
                Err(_) => {
                    ctx.metrics.dropped.fetch_add(1, Relaxed);
                }
            }
        }))
    }

    /// The one try of a request that cannot go elsewhere (one origin, no
    /// hedging), begun at `started`, with its health kept (also when the
    /// request is dropped). It waits for an association.
    async fn only_try(
        &self,
        started: Instant,
        text: Bytes,
        kind: Kind,
        attached: Option<Attached>,
        interim: Option<Interim>,
    ) -> Result<Reply, NotSent> {
        let peer = self.peer_at(0);
        let mut guard = Attempt {
            health: &peer.health,
            epoch: self.origins.chooser.epoch(),
            started,
            outcome: Outcome::Neutral,
        };
        peer.health
            .start(health::millis(self.origins.chooser.epoch(), started));
        let r = (peer.call(
            &self.ctx,
            &self.endpoint,
            (true, false),
            (text, kind, attached, interim),
        ))
        .await;
        // Not sent: the pool ejected the origin if it could not connect.
        if let Ok(reply) = &r {
            guard.outcome = outcome(reply);
        }
        r
    }

    /// The request's effect class, labelled once.
    fn effect(
        &self,
        effect: &mut Option<Option<Effect>>,
        text: &[u8],
        kind: &Kind,
    ) -> Option<Effect> {
        *effect.get_or_insert_with(|| {
            label_of(text, kind, &self.ctx.labeler)
                .ok()
                .flatten()
                .map(|l| l.effect)
        })
    }

    /// Carries one notification to the best origin.
    pub async fn notify(
        self: &Arc<Self>,
        text: Bytes,
        kind: Kind,
        attached: Option<Attached>,
    ) -> Result<(), Failure> {
        let i = self.choose(0).unwrap_or(0);
        let peer = self.peer_at(i);
        let sent = peer
            .notify(&self.ctx, &self.endpoint, text, kind, attached)
            .await;
        if sent.is_err() {
            peer.health.eject(self.now());
        }
        sent
    }
}

/// A try in progress; its end, however it comes, goes into the health.
struct Attempt<'a> {
    health: &'a Health,
    epoch: Instant,
    started: Instant,
    /// `Replied` with its latency filled in at the end.
    outcome: Outcome,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        let outcome = match self.outcome {
            Outcome::Replied(_) => Outcome::Replied(now.saturating_duration_since(self.started)),
            other => other,
        };
        self.health.finish(health::millis(self.epoch, now), outcome);
    }
}

/// How a try ended, for the policy: a reply answers; a try that sent
/// nothing goes on as it is; one the exchange could not deliver and knows
/// was not executed goes on within the budget; one the origin could not
/// deliver, only when it cannot execute twice; anything else is final.
fn ended_of(end: &Result<Reply, NotSent>) -> Ended {
    let Ok(reply) = end else {
        // The pool ejected the origin if it could not connect.
        return Ended {
            next: Next::NotSent,
            outcome: Outcome::Neutral,
        };
    };
    let next = match reply {
        Reply::Message { .. } => Next::Reply,
        // Never sent (no association), or the exchange found it safe to
        // send again (Lost is only for those).
        Reply::Failed(Failure::Unavailable(_) | Failure::Lost(_)) => Next::Again,
        // The origin could not deliver it: perhaps after its upstream
        // began executing it.
        Reply::Failed(Failure::Transport(code, _)) if *code == TransportError::NOT_DELIVERED => {
            Next::IfResendSafe
        }
        Reply::Failed(_) => Next::Final,
    };
    Ended {
        next,
        outcome: outcome(reply),
    }
}

/// What a reply says about the origin that gave it (a reply's latency is
/// the try's, filled in by [`Attempt`]).
fn outcome(reply: &Reply) -> Outcome {
    let latency = Duration::ZERO;
    match reply {
        Reply::Message { .. } => Outcome::Replied(latency),
        Reply::Failed(f) => match f {
            Failure::Transport(code, _) if *code == TransportError::NOT_DELIVERED => {
                Outcome::NotDelivered
            }
            // The origin answered: it is there.
            Failure::Transport(..) => Outcome::Replied(latency),
            // The association ended under the request.
            Failure::Lost(_) | Failure::MayHaveExecuted(_) => Outcome::Unreachable,
            // A timeout, or a refusal of this gateway's own (full).
            _ => Outcome::Neutral,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the relay makes of a try's end reaches the policy as the
    /// rules need it: only a reply wins; what was not sent, or is known
    /// not to have run, may go on; what the origin could not deliver goes
    /// on only when it cannot run twice; a request that may have executed,
    /// a timeout and other errors answered are final.
    #[test]
    fn each_end_of_a_try_reaches_the_policy_as_the_rules_need_it() {
        let failed = |f: Failure| Ok(Reply::Failed(f));
        let message = Ok(Reply::Message {
            text: Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":1}"#),
            is_error: false,
            attached: None,
        });
        let not_delivered = |detail: &str| {
            failed(Failure::from_peer(
                TransportError::NOT_DELIVERED,
                detail.into(),
            ))
        };
        let cases = [
            (message, Next::Reply),
            (Err(NotSent::Connecting), Next::NotSent),
            (
                failed(Failure::Unavailable("no association".into())),
                Next::Again,
            ),
            (failed(Failure::Lost("ended".into())), Next::Again),
            (not_delivered("upstream refused"), Next::IfResendSafe),
            (not_delivered("may have executed: reset"), Next::Final),
            (
                failed(Failure::MayHaveExecuted("ended".into())),
                Next::Final,
            ),
            (failed(Failure::Timeout), Next::Final),
            (
                failed(Failure::from_peer(
                    TransportError::SAFETY_POLICY,
                    "refused".into(),
                )),
                Next::Final,
            ),
        ];
        for (i, (end, next)) in cases.into_iter().enumerate() {
            assert_eq!(ended_of(&end).next, next, "case {i}");
        }
    }

    /// A request's future is moved (copied) as it is set up: what only a
    /// hedge or a handshake needs stays out of it.
    #[test]
    fn a_request_future_stays_small() {
        let endpoint = Endpoint::new([7; 32], crate::handshake::Trust::InsecureAcceptAny);
        let config = crate::gateway::GatewayConfig::new(endpoint.clone());
        let ctx = Arc::new(Ctx::new(&config, Default::default()));
        let edge = Arc::new(Edge::new(
            "quic://127.0.0.1:1".parse().expect("addr"),
            endpoint,
            ctx,
        ));
        let text = Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#);
        let Ok(crate::jsonrpc::Scanned::Single(kind)) =
            crate::jsonrpc::scan(&text, &crate::jsonrpc::Limits::default())
        else {
            panic!("scanned");
        };
        let peer = edge.peer_at(0).clone();
        let one = peer.call(
            &edge.ctx,
            &edge.endpoint,
            (true, false),
            (text.clone(), kind.clone(), None, None),
        );
        let one = std::mem::size_of_val(&one);
        let size = std::mem::size_of_val(&edge.call(text, kind, None, None));
        // Retries and the health add a little to one try at the pool; two
        // tries (a hedge) inline would double it.
        assert!(size < one + 512, "{size} octets, one try {one}");
    }
}
