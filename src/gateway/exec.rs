//! Drives an [`Exchange`] over an association: the one place where the
//! exchange's actions meet the runtime. Every dispatcher of the gateway
//! (client sessions, the HTTP pool, upstream sessions, the stateless
//! upstream) is an `Exec` with a different [`Local`] party.
//!
//! - Inputs run under a short lock ([`Exec::with`]); the actions they yield
//!   are carried out after it is released, in order: sealing for the peer,
//!   queueing for the local party (awaiting here is backpressure), answering
//!   a caller, serving a request.
//! - One timer task per association sleeps until the exchange's
//!   `poll_timeout`, re-armed when a deadline moves earlier.
//! - A reader the exchange stops reading (its local party or the peer)
//!   waits in [`Exec::local_room`] / [`Exec::peer_room`] until resumed.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, oneshot};
use tracing::debug;

use super::context::Ctx;
use super::metrics::{Ingress, Metrics};
use super::outbox::{Outbox, TrySend};
use crate::assoc::{AssocHandle, BridgeSink, End, Payload};
use crate::bridge::{ProtocolId, TransportError};
use crate::relay::{
    Action, Config, Exchange, Observer, PeerPayload, Reply, ReplyClass, Role, ToPeer, ToServe,
    receive,
};
use crate::wire::FrameType;

/// Where an exchange's answers go: the ticket a caller waits on.
pub trait Ticket: Send + 'static {
    fn answer(self, reply: Reply);
}

impl Ticket for () {
    fn answer(self, _: Reply) {}
}

impl Ticket for oneshot::Sender<Reply> {
    fn answer(self, reply: Reply) {
        // The caller may have stopped waiting (its client went away).
        let _ = self.send(reply);
    }
}

/// Serves one request or notification of the peer on its own
/// (`Action::Serve`); it tells its exchange what came of a request
/// ([`Exec::start_with`] gives it a handle to it).
pub type Serve = Box<dyn Fn(ToServe) + Send + Sync>;

/// The local party of an exchange, as its executor reaches it.
pub enum Local {
    /// A stream (a client's connection, an upstream session): in order,
    /// through its bounded queue.
    Stream(Outbox),
    /// Callers with tickets (the HTTP pool).
    Callers,
    /// Each request served on its own (an HTTP upstream).
    Served(Serve),
}

/// An action that found its queue full, to carry out when it has room.
enum Waits<'a> {
    Send(ToPeer),
    Deliver(&'a Outbox, Bytes, Option<crate::relay::Attached>),
}

/// What one input yielded, in order.
enum Actions<T> {
    None,
    One(Action<T>),
    Many(Vec<Action<T>>),
}

struct Core<T> {
    exchange: Exchange<T>,
    /// The deadline the timer sleeps until.
    armed: Option<Instant>,
}

/// An exchange and the association it runs over.
pub struct Exec<T> {
    core: Mutex<Core<T>>,
    assoc: AssocHandle,
    ctx: Arc<Ctx>,
    local: Local,
    timer: Notify,
    local_resumed: Notify,
    peer_resumed: Notify,
}

impl<T: Ticket> Exec<T> {
    /// Runs `exchange` over `assoc` (its timer task too).
    pub fn start(
        exchange: Exchange<T>,
        assoc: AssocHandle,
        ctx: Arc<Ctx>,
        local: Local,
    ) -> Arc<Self> {
        Self::start_with(exchange, assoc, ctx, |_| local)
    }

    /// [`Exec::start`] for a local party that needs a handle to the
    /// executor itself (a [`Serve`] reports back to it).
    pub fn start_with(
        exchange: Exchange<T>,
        assoc: AssocHandle,
        ctx: Arc<Ctx>,
        local: impl FnOnce(&Weak<Self>) -> Local,
    ) -> Arc<Self> {
        let exec = Arc::new_cyclic(|me| Self {
            core: Mutex::new(Core {
                exchange,
                armed: None,
            }),
            assoc,
            ctx,
            local: local(me),
            timer: Notify::new(),
            local_resumed: Notify::new(),
            peer_resumed: Notify::new(),
        });
        let timer = exec.clone();
        tokio::spawn(async move { timer.run_timer().await });
        exec
    }

    pub fn assoc(&self) -> &AssocHandle {
        &self.assoc
    }

    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    fn lock(&self) -> MutexGuard<'_, Core<T>> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the exchange.
    pub fn peek<R>(&self, f: impl FnOnce(&Exchange<T>) -> R) -> R {
        f(&self.lock().exchange)
    }

    /// Changes the exchange where that yields no actions.
    pub fn update(&self, f: impl FnOnce(&mut Exchange<T>)) {
        f(&mut self.lock().exchange);
    }

    /// Runs `f` on the exchange now, then carries out what it asks.
    pub async fn with<R>(self: &Arc<Self>, f: impl FnOnce(&mut Exchange<T>, Instant) -> R) -> R {
        let (r, actions) = self.step(f);
        if let Some(waiting) = self.run(actions) {
            waiting.await;
        }
        r
    }

    /// `f` under the lock; the actions it yields, and the timer re-armed
    /// when the next deadline moved earlier.
    fn step<R>(&self, f: impl FnOnce(&mut Exchange<T>, Instant) -> R) -> (R, Actions<T>) {
        let mut core = self.lock();
        let r = f(&mut core.exchange, Instant::now());
        // Most inputs yield one action: no allocation for it.
        let actions = match core.exchange.poll_action() {
            None => Actions::None,
            Some(first) => match core.exchange.poll_action() {
                None => Actions::One(first),
                Some(second) => {
                    let mut v = vec![first, second];
                    v.extend(core.exchange.drain_actions());
                    Actions::Many(v)
                }
            },
        };
        let next = core.exchange.poll_timeout();
        if next.is_some_and(|n| core.armed.is_none_or(|a| n < a)) {
            core.armed = next;
            self.timer.notify_one();
        }
        (r, actions)
    }

    /// Carries out `actions` in order. Each is done at once unless it is a
    /// send or a delivery that finds its queue full; from that one on, the
    /// rest wait their turn in a boxed future of their own. So the future
    /// of every [`Exec::with`] (part of every request's task) holds a
    /// pointer, not the actions and the futures that wait for room.
    fn run(&self, actions: Actions<T>) -> Option<Pin<Box<impl Future<Output = ()> + '_>>> {
        let (waits, rest) = match actions {
            Actions::None => return None,
            Actions::One(action) => (self.act_now(action)?, Vec::new().into_iter()),
            Actions::Many(v) => {
                let mut actions = v.into_iter();
                loop {
                    if let Some(waits) = self.act_now(actions.next()?) {
                        break (waits, actions);
                    }
                }
            }
        };
        Some(Box::pin(self.run_waiting(waits, rest)))
    }

    /// [`Exec::run`] from an action that waits for room.
    async fn run_waiting(&self, waits: Waits<'_>, rest: std::vec::IntoIter<Action<T>>) {
        self.when_room(waits).await;
        for action in rest {
            if let Some(waits) = self.act_now(action) {
                self.when_room(waits).await;
            }
        }
    }

    async fn when_room(&self, waits: Waits<'_>) {
        match waits {
            Waits::Send(msg) => not_sent(send(&self.assoc, self.ctx.protocol, &msg).await),
            Waits::Deliver(outbox, text, attached) => {
                if outbox.send_with(text, attached).await.is_err() {
                    self.undelivered();
                }
            }
        }
    }

    /// Carries out `action` unless it must wait for room.
    fn act_now(&self, action: Action<T>) -> Option<Waits<'_>> {
        match action {
            Action::Send(msg) => {
                let protocol = self.ctx.protocol;
                match self
                    .assoc
                    .try_send(msg.frame_type(), |out| msg.write(out, protocol))
                {
                    Some(sent) => not_sent(sent),
                    None => return Some(Waits::Send(msg)),
                }
            }
            Action::Deliver(text, attached) => match &self.local {
                Local::Stream(outbox) => match outbox.try_send_with(text, attached) {
                    Ok(()) => {}
                    Err((TrySend::Full(text), attached)) => {
                        return Some(Waits::Deliver(outbox, text, attached));
                    }
                    Err((TrySend::Gone, _)) => self.undelivered(),
                },
                _ => self.undelivered(),
            },
            Action::Answer(ticket, reply) => ticket.answer(reply),
            Action::Interim(interim, text) => (interim.0)(text),
            Action::Serve(request) => self.serve(request),
            Action::ResumeLocal => self.local_resumed.notify_waiters(),
            Action::ResumePeer => self.peer_resumed.notify_waiters(),
        }
        None
    }

    /// A delivery that did not reach the local party: its receiver is gone
    /// only when the party is, so what it would have got has nowhere to
    /// go.
    fn undelivered(&self) {
        self.ctx.metrics.dropped.fetch_add(1, Relaxed);
    }

    fn serve(&self, request: ToServe) {
        match &self.local {
            Local::Served(serve) => serve(request),
            _ => {
                self.ctx.metrics.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Waits while the exchange does not read the local party.
    pub async fn local_room(&self) {
        loop {
            let resumed = self.local_resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if self.peek(|x| x.reading_local()) || !self.assoc.is_open() {
                return;
            }
            tokio::select! {
                _ = resumed => {}
                _ = self.assoc.ended() => return,
            }
        }
    }

    /// Waits while the exchange does not read the peer.
    pub async fn peer_room(&self) {
        loop {
            let resumed = self.peer_resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            if self.peek(|x| x.reading_peer()) {
                return;
            }
            resumed.await;
        }
    }

    async fn run_timer(self: Arc<Self>) {
        loop {
            let woken = self.timer.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let deadline = {
                let mut core = self.lock();
                core.armed = core.exchange.poll_timeout();
                core.armed
            };
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => {
                    self.with(|x, now| x.handle_timeout(now)).await;
                }
                _ = woken => {}
                _ = self.assoc.ended() => return,
            }
        }
    }

    /// The association ended: what waits is answered.
    fn ended(self: &Arc<Self>, why: &End) {
        if why.refused_in_handshake() {
            self.ctx.metrics.handshake_failures.fetch_add(1, Relaxed);
        } else if matches!(why, End::Error(_)) {
            self.ctx.metrics.association_errors.fetch_add(1, Relaxed);
        }
        let failure = super::carry::lost(why);
        let (_, actions) = self.step(|x, now| x.peer_ended(now, failure));
        if matches!(actions, Actions::None) {
            return;
        }
        let exec = self.clone();
        tokio::spawn(async move {
            if let Some(waiting) = exec.run(actions) {
                waiting.await;
            }
        });
    }
}

/// The association's sink: what the peer sends goes to the exchange.
pub struct ExecSink<T>(pub Arc<Exec<T>>);

/// The driver's payload as the exchange takes it.
impl PeerPayload for Payload<'_> {
    fn octets(&self) -> &[u8] {
        Payload::octets(self)
    }

    fn keep(self, part: std::ops::Range<usize>) -> Bytes {
        Payload::keep(self, part)
    }
}

impl<T: Ticket> BridgeSink for ExecSink<T> {
    async fn frame(&mut self, frame_type: FrameType, payload: Payload<'_>) {
        let exec = &self.0;
        let ctx = &exec.ctx;
        let reading = exec
            .with(|x, now| {
                // What the exchange keeps of it: a large frame's own
                // allocation handed on, or a copy out of a shared buffer.
                x.handle_peer(now, payload, |octets| {
                    receive(frame_type, octets, ctx.protocol, &ctx.peer_scan)
                });
                x.reading_peer()
            })
            .await;
        // Not reading the peer is backpressure on it.
        if !reading {
            exec.peer_room().await;
        }
    }

    fn ended(&mut self, why: &End) {
        self.0.ended(why);
    }
}

/// A send that failed: the association ended, and the exchange hears it
/// from the driver and answers what waits.
fn not_sent(sent: Result<(), crate::assoc::Gone>) {
    if let Err(gone) = sent {
        debug!(error = %gone, "not sent");
    }
}

/// Seals one message for the peer.
pub async fn send(
    assoc: &AssocHandle,
    protocol: ProtocolId,
    msg: &ToPeer,
) -> Result<(), crate::assoc::Gone> {
    assoc
        .send(msg.frame_type(), |out| msg.write(out, protocol))
        .await
}

/// The exchange's counts, into the gateway's metrics.
pub struct Counting {
    metrics: Arc<Metrics>,
    /// Where the edge's clients came in; `None` at the origin.
    ingress: Option<Ingress>,
    /// Requests and their answers are counted here, not by the caller. (An
    /// HTTP request may be tried at several origins: the edge counts it
    /// once, with its final answer.)
    counts_requests: bool,
}

impl Observer for Counting {
    fn request(&self) {
        if let Some(i) = self.ingress.filter(|_| self.counts_requests) {
            self.metrics.request(i);
        }
    }

    fn notification(&self) {
        if let Some(i) = self.ingress {
            self.metrics.notification(i);
        }
    }

    fn answered(&self, class: ReplyClass, latency: Option<Duration>) {
        if !self.counts_requests {
            return;
        }
        self.metrics.reply(class);
        if let Some(l) = latency {
            self.metrics.latency.observe(l);
        }
    }

    fn in_flight(&self, delta: i64) {
        self.metrics.in_flight.fetch_add(delta, Relaxed);
    }

    fn dropped(&self) {
        self.metrics.dropped.fetch_add(1, Relaxed);
    }

    fn transport_error(&self, code: TransportError, sent: bool) {
        self.metrics.transport_error(code, sent);
    }

    fn delivered(&self) {
        if self.ingress.is_none() {
            self.metrics.upstream_requests.fetch_add(1, Relaxed);
        }
    }

    fn not_delivered(&self) {
        if self.ingress.is_none() {
            self.metrics.upstream_failures.fetch_add(1, Relaxed);
        }
    }

    fn replied(&self) {
        if self.ingress.is_none() {
            self.metrics.upstream_replies.fetch_add(1, Relaxed);
        }
    }
}

impl Ctx {
    /// A new exchange of `role`; `ingress`: where its clients came in (an
    /// edge).
    pub fn exchange<T>(self: &Arc<Self>, role: Role, ingress: Option<Ingress>) -> Exchange<T> {
        let l = &self.limits;
        let (max_outstanding, budget) = match role {
            // Shared by many callers: the gateway's limits are its own.
            Role::EdgePool => (l.max_in_flight, usize::MAX),
            _ => (l.max_in_flight_per_connection, l.session_buffer),
        };
        let gate: Option<Arc<dyn crate::relay::Gate>> =
            (!role.is_edge()).then(|| self.clone() as Arc<dyn crate::relay::Gate>);
        Exchange::new(Config {
            role,
            request_timeout: l.request_timeout,
            stall_timeout: l.stall_timeout,
            max_outstanding,
            // The origin takes what the edge admitted on the association
            // (the same limit): it never refuses a request for room.
            max_incoming: match role {
                Role::OriginStateless => l.max_in_flight,
                _ => l.max_in_flight_per_connection,
            },
            budget,
            local_name: match role {
                Role::EdgeSession | Role::EdgePool => "client".into(),
                _ => "upstream".into(),
            },
            labeler: self.labeler.clone(),
            gate,
            shared: self.shared.clone(),
            observer: Arc::new(Counting {
                metrics: self.metrics.clone(),
                ingress,
                counts_requests: role != Role::EdgePool,
            }),
            lasting: (self.protocol == crate::bridge::ProtocolId::MCP)
                .then(|| super::mcp_names::lasting(l.listen_timeout)),
        })
    }
}

impl crate::relay::Gate for Ctx {
    fn refusal(
        &self,
        method: &str,
        label: Option<crate::bridge::Effect>,
        len: usize,
    ) -> Option<(TransportError, String)> {
        Ctx::refusal(self, method, label, len)
    }
}
