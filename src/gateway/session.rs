//! A session: one association between one JSON-RPC party on a message
//! stream and the peer gateway. The same code runs at both ends:
//!
//! - at the **edge**, the local party is a WebSocket, TCP or stdio client;
//! - at the **origin**, it is a WebSocket upstream or a child process.
//!
//! Either party may send requests, notifications and replies: requests that
//! cross the bridge are tracked in `outgoing` (canonical correlation ids,
//! CC-JSONRPC §8.2: a request that reuses an outstanding id is held back
//! until the first is answered); requests that arrive from the peer are
//! tracked in `incoming` until the local party answers them. Every request
//! gets exactly one answer: the reply, or an error naming what failed.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, warn};

use super::Ctx;
use super::carry::{
    Failure, Outgoing, Received, lost, receive, refuse_malformed, refuse_protocol,
    send_transport_error,
};
use super::metrics::{Ingress, ReplyClass};
use super::outbox::Outbox;
use crate::assoc::{AssocHandle, BridgeSink, End};
use crate::bridge::{self, TransportError};
use crate::jsonrpc::carriage::{BatchJoin, Inbound, id_of, method_of, scan_error_response};
use crate::jsonrpc::{
    Begin, CorrelationMode, Correlator, IdKind, Kind, ScanError, Scanned, response_id, same_id,
    scan,
};
use crate::wire::FrameType;

/// The upstream is being started: messages queue for it.
const LOCAL_STARTING: u8 = 0;
/// The local party is there.
const LOCAL_UP: u8 = 1;
/// The upstream is down (backing off before a restart): requests are
/// answered NotDelivered at once.
const LOCAL_DOWN: u8 = 2;

/// Which end of the pair this session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The local party is a client that entered here.
    Edge(Ingress),
    /// The local party is the upstream server.
    Origin,
}

struct Pending {
    /// The request's id token (a slice of its text).
    id: Bytes,
    started: Instant,
    deadline: Instant,
    batch: Option<u64>,
}

struct Incoming {
    corr: Vec<u8>,
    kind: IdKind,
    /// Answered NotDelivered if the local party has not answered by then.
    deadline: Instant,
}

struct Held {
    text: Bytes,
    kind: Kind,
    batch: Option<u64>,
}

struct HeldIn {
    text: Bytes,
    token: Bytes,
    corr: Vec<u8>,
    kind: IdKind,
}

struct Batch {
    join: BatchJoin,
    waiting: usize,
}

struct State {
    outgoing: Correlator<Pending>,
    incoming: HashMap<Bytes, Incoming>,
    /// Local requests whose id is outstanding (held back, §8.2).
    held_out: VecDeque<Held>,
    /// Peer requests whose id the local party has not answered yet.
    held_in: VecDeque<HeldIn>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
}

struct Inner {
    side: Side,
    assoc: AssocHandle,
    ctx: Arc<Ctx>,
    to_local: Outbox,
    state: Mutex<State>,
    /// Origin: the upstream's state (`LOCAL_*`).
    local: AtomicU8,
}

/// A running session; cheap to clone.
#[derive(Clone)]
pub struct Session(Arc<Inner>);

/// The association sink of a session.
pub struct SessionSink(Session);

impl BridgeSink for SessionSink {
    async fn frame(&mut self, frame_type: FrameType, payload: &[u8]) {
        self.0.on_peer_frame(frame_type, payload).await;
    }

    fn ended(&mut self, why: &End) {
        self.0.peer_ended(why);
    }
}

impl Session {
    /// A session over `assoc`; what is for the local party goes to
    /// `to_local`, in order. Give [`Session::sink`] to the association.
    pub fn new(side: Side, assoc: AssocHandle, ctx: Arc<Ctx>, to_local: Outbox) -> Self {
        let capacity = ctx.limits.max_in_flight_per_connection;
        let session = Session(Arc::new(Inner {
            side,
            assoc,
            ctx,
            to_local,
            state: Mutex::new(State {
                outgoing: Correlator::new(CorrelationMode::Canonical, capacity),
                incoming: HashMap::new(),
                held_out: VecDeque::new(),
                held_in: VecDeque::new(),
                batches: HashMap::new(),
                next_batch: 0,
            }),
            local: AtomicU8::new(if side == Side::Origin {
                LOCAL_STARTING
            } else {
                LOCAL_UP
            }),
        }));
        let sweeper = session.clone();
        tokio::spawn(async move { sweeper.sweep().await });
        session
    }

    pub fn sink(&self) -> SessionSink {
        SessionSink(self.clone())
    }

    pub fn assoc(&self) -> &AssocHandle {
        &self.0.assoc
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Requests that crossed the bridge and wait for a reply.
    pub fn outstanding(&self) -> usize {
        self.lock().outgoing.len()
    }

    async fn to_local(&self, text: Bytes) {
        // The receiver is gone only when the local party is gone; what it
        // would have got has nowhere to go.
        if self.0.to_local.send(text).await.is_err() {
            self.0.ctx.metrics.dropped.fetch_add(1, Relaxed);
        }
    }

    /// A message from the local party (one line, one WebSocket message).
    pub async fn on_local_message(&self, text: Bytes) {
        let scanned = scan(&text, &self.0.ctx.scan);
        self.on_local_scanned(text, scanned).await;
    }

    /// [`Session::on_local_message`] for a message its caller has already
    /// scanned (with the gateway's own limits, `Ctx::scan`).
    pub async fn on_local_scanned(&self, text: Bytes, scanned: Result<Scanned, ScanError>) {
        let ctx = &self.0.ctx;
        match scanned {
            Err(e) => match self.0.side {
                Side::Edge(_) => {
                    ctx.metrics.reply(ReplyClass::Invalid);
                    self.to_local(scan_error_response(&e).into()).await;
                }
                Side::Origin => {
                    ctx.metrics.dropped.fetch_add(1, Relaxed);
                    warn!(error = %e, "the upstream sent a message that is not JSON-RPC; dropped");
                }
            },
            Ok(Scanned::Single(kind)) => self.one(text, kind, None).await,
            Ok(Scanned::Batch(elements)) => {
                let batch = match self.0.side {
                    Side::Edge(_) => {
                        // Requests and invalid elements are answered;
                        // notifications are not (JSON-RPC §6).
                        let waiting = elements
                            .iter()
                            .filter(|e| !matches!(e.kind, Ok(Kind::Notification { .. })))
                            .count();
                        (waiting > 0).then(|| {
                            let mut s = self.lock();
                            s.next_batch += 1;
                            let b = s.next_batch;
                            s.batches.insert(
                                b,
                                Batch {
                                    join: BatchJoin::with_capacity(text.len()),
                                    waiting,
                                },
                            );
                            b
                        })
                    }
                    // An upstream's batch (rare): each element on its own.
                    Side::Origin => None,
                };
                for e in elements {
                    let start = e.range.start;
                    let elem = text.slice(e.range);
                    match e.kind {
                        Ok(kind) => self.one(elem, kind.relative_to(start), batch).await,
                        Err(invalid) => {
                            let err = crate::jsonrpc::ScanError::Invalid(invalid);
                            self.answer_local(batch, scan_error_response(&err).into())
                                .await;
                        }
                    }
                }
            }
        }
    }

    /// One JSON-RPC object from the local party.
    async fn one(&self, text: Bytes, kind: Kind, batch: Option<u64>) {
        let ctx = self.0.ctx.clone();
        let out = match Outgoing::new(&text, &kind, &ctx.labeler) {
            Ok(o) => o,
            Err(e) => {
                if let Kind::Request { id, .. } = &kind {
                    let id = text.slice(id.token.clone());
                    self.fail(batch, Some(&id), Failure::Invalid(e.to_string()))
                        .await;
                }
                return;
            }
        };
        match &kind {
            Kind::Request { id, .. } => {
                if let Side::Edge(i) = self.0.side {
                    ctx.metrics.request(i);
                }
                let id_token = text.slice(id.token.clone());
                if id_token.len() > bridge::FIELD_MAX_LEN && id.kind != IdKind::Null {
                    let e =
                        Failure::Invalid("an id longer than 255 octets cannot be carried".into());
                    self.fail(batch, Some(&id_token), e).await;
                    return;
                }
                if ctx.metrics.in_flight.load(Relaxed) >= ctx.limits.max_in_flight as i64 {
                    let e = Failure::Unavailable("too many requests in flight".into());
                    self.fail(batch, Some(&id_token), e).await;
                    return;
                }
                let now = Instant::now();
                let begin = self.lock().outgoing.begin(
                    &id_token,
                    id.kind,
                    Pending {
                        id: id_token.clone(),
                        started: now,
                        deadline: now + ctx.limits.request_timeout,
                        batch,
                    },
                );
                let corr = match begin {
                    Begin::Assigned(corr) => corr,
                    Begin::HoldBack => {
                        debug!(id = %String::from_utf8_lossy(&id_token), "id outstanding: held back");
                        drop(out);
                        self.lock().held_out.push_back(Held {
                            text: text.clone(),
                            kind: kind.clone(),
                            batch,
                        });
                        return;
                    }
                    Begin::Full => {
                        let e = Failure::Unavailable(
                            "too many requests in flight on this session".into(),
                        );
                        self.fail(batch, Some(&id_token), e).await;
                        return;
                    }
                };
                ctx.metrics.in_flight.fetch_add(1, Relaxed);
                if let Err(gone) = out.send(&self.0.assoc, ctx.protocol, &corr).await {
                    let pending = self.lock().outgoing.abandon(&corr);
                    if let Some(p) = pending {
                        self.finish(p, Err(gone.into())).await;
                    }
                }
            }
            Kind::Notification { .. } => {
                if let Side::Edge(i) = self.0.side {
                    ctx.metrics.notification(i);
                }
                if let Err(gone) = out.send(&self.0.assoc, ctx.protocol, &[]).await {
                    debug!(error = %gone, "notification not sent");
                    ctx.metrics.dropped.fetch_add(1, Relaxed);
                }
            }
            Kind::Success { id } | Kind::Error { id } => {
                // The local party answers a request that came from the peer.
                let token = text.slice(id.token.clone());
                let found = {
                    let mut s = self.lock();
                    take_incoming(&mut s.incoming, &token, id.kind)
                };
                let Some((key, incoming)) = found else {
                    ctx.metrics.dropped.fetch_add(1, Relaxed);
                    warn!(id = %String::from_utf8_lossy(&token), "a reply to no outstanding request; dropped");
                    return;
                };
                if let Err(gone) = out.send(&self.0.assoc, ctx.protocol, &incoming.corr).await {
                    debug!(error = %gone, "reply not sent");
                }
                self.release_incoming(&key).await;
            }
        }
    }

    /// The local party sent a message of `len` octets, over `--max-body`,
    /// that was dropped unread; `head` is its start. If the head shows it is
    /// the reply to a request from the peer, that request is answered
    /// NotDelivered, saying why, rather than left to time out.
    pub async fn local_message_too_large(&self, head: &[u8], len: usize) {
        let ctx = &self.0.ctx;
        ctx.metrics.dropped.fetch_add(1, Relaxed);
        let found = response_id(head).and_then(|id| {
            let mut s = self.lock();
            take_incoming(&mut s.incoming, &head[id.token], id.kind)
        });
        let Some((key, incoming)) = found else {
            warn!(
                len,
                "a message over --max-body from the local party; dropped"
            );
            return;
        };
        let detail =
            super::carry::reply_over_max_body(&"the upstream", Some(len), ctx.limits.max_body);
        warn!(
            len,
            "a reply over --max-body from the local party; its request is answered NotDelivered"
        );
        self.not_delivered(&incoming.corr, &detail).await;
        self.release_incoming(&key).await;
    }

    /// The local party will not answer the peer's request with this id (an
    /// HTTP upstream's exchange for it ended without a reply): it is
    /// answered NotDelivered with `detail`. False when no such request
    /// waits (already answered, or timed out).
    pub async fn local_cannot_answer(&self, token: &[u8], kind: IdKind, detail: &str) -> bool {
        let found = {
            let mut s = self.lock();
            take_incoming(&mut s.incoming, token, kind)
        };
        let Some((key, incoming)) = found else {
            return false;
        };
        self.not_delivered(&incoming.corr, detail).await;
        self.release_incoming(&key).await;
        true
    }

    /// A peer request whose id is now free goes to the local party.
    async fn release_incoming(&self, token: &[u8]) {
        let next = {
            let mut s = self.lock();
            let i = s.held_in.iter().position(|h| &h.token[..] == token);
            i.and_then(|i| s.held_in.remove(i))
        };
        if let Some(h) = next {
            self.deliver_request(h).await;
        }
    }

    /// Hands a request from the peer to the local party and remembers it;
    /// holds it back while the local party owes an answer on the same id.
    async fn deliver_request(&self, h: HeldIn) {
        let limit = self.0.ctx.limits.max_in_flight_per_connection;
        let deadline = Instant::now() + self.0.ctx.limits.request_timeout;
        let full = {
            let mut s = self.lock();
            let State {
                incoming, held_in, ..
            } = &mut *s;
            if incoming.len() + held_in.len() >= limit {
                Some(h.corr)
            } else {
                match incoming.entry(h.token.clone()) {
                    Entry::Occupied(_) => {
                        held_in.push_back(h);
                        return;
                    }
                    Entry::Vacant(v) => {
                        v.insert(Incoming {
                            corr: h.corr,
                            kind: h.kind,
                            deadline,
                        });
                        None
                    }
                }
            }
        };
        if let Some(corr) = full {
            let detail = format!("{limit} requests already wait for an answer here");
            self.not_delivered(&corr, &detail).await;
            return;
        }
        if self.0.side == Side::Origin {
            self.0.ctx.metrics.upstream_requests.fetch_add(1, Relaxed);
        }
        self.to_local(h.text).await;
    }

    /// A Bridge frame from the peer.
    async fn on_peer_frame(&self, frame_type: FrameType, payload: &[u8]) {
        let ctx = self.0.ctx.clone();
        let assoc = &self.0.assoc;
        match receive(frame_type, payload, ctx.protocol, &ctx.peer_scan) {
            Received::Message(Inbound::JsonRpc {
                kind,
                text,
                correlation_id,
                safety,
            }) => match kind {
                Kind::Request { method, id } => {
                    if let Some((code, detail)) =
                        self.refuse(method_of(text, &method).as_deref(), safety, text.len())
                    {
                        ctx.metrics.transport_error(code);
                        let _ = send_transport_error(
                            assoc,
                            ctx.protocol,
                            correlation_id,
                            code,
                            &detail,
                        )
                        .await;
                        return;
                    }
                    let text = Bytes::copy_from_slice(text);
                    let token = text.slice(id.token);
                    self.deliver_request(HeldIn {
                        text,
                        token,
                        corr: correlation_id.to_vec(),
                        kind: id.kind,
                    })
                    .await;
                }
                Kind::Notification { method } => {
                    // What the origin would refuse as a request it drops as a
                    // notification (nobody to tell), as the HTTP upstream does.
                    let name = method_of(text, &method);
                    if self.refuse(name.as_deref(), safety, text.len()).is_none() {
                        self.to_local(Bytes::copy_from_slice(text)).await;
                    } else {
                        ctx.metrics.dropped.fetch_add(1, Relaxed);
                    }
                }
                Kind::Success { ref id } | Kind::Error { ref id } => {
                    let is_error = matches!(kind, Kind::Error { .. });
                    let token = &text[id.token.clone()];
                    let done =
                        self.lock()
                            .outgoing
                            .complete(correlation_id, token, id.kind, is_error);
                    match done {
                        Ok(p) => {
                            let class = if is_error {
                                ReplyClass::Error
                            } else {
                                ReplyClass::Success
                            };
                            self.finish(p, Ok((Bytes::copy_from_slice(text), class)))
                                .await;
                        }
                        Err(crate::jsonrpc::CorrelationError::Unknown) => {
                            ctx.metrics.dropped.fetch_add(1, Relaxed);
                            debug!("a reply for no outstanding request (late?); dropped");
                        }
                        Err(e) => {
                            warn!(error = %e, "reply does not match its request");
                            let p = self.lock().outgoing.abandon(correlation_id);
                            if let Some(p) = p {
                                let f = Failure::Transport(
                                    TransportError::ENVELOPE_MALFORMED,
                                    e.to_string(),
                                );
                                self.finish(p, Err(f)).await;
                            }
                        }
                    }
                }
            },
            Received::Message(Inbound::TransportError {
                code,
                detail,
                correlation_id,
            }) => {
                ctx.metrics.transport_error(code);
                let p = self.lock().outgoing.abandon(correlation_id);
                match p {
                    Some(p) => {
                        let detail = String::from_utf8_lossy(detail).into_owned();
                        self.finish(p, Err(Failure::Transport(code, detail))).await;
                    }
                    None => {
                        ctx.metrics.dropped.fetch_add(1, Relaxed);
                    }
                }
            }
            Received::Malformed {
                error,
                correlation_id,
            } => refuse_malformed(assoc, &ctx, &error, correlation_id).await,
            Received::WrongProtocol {
                protocol,
                correlation_id,
            } => refuse_protocol(assoc, &ctx, frame_type, protocol, correlation_id).await,
        }
    }

    /// The origin's refusals of a request from the peer, if any.
    fn refuse(
        &self,
        method: Option<&str>,
        label: Option<bridge::Effect>,
        len: usize,
    ) -> Option<(TransportError, String)> {
        if self.0.side != Side::Origin {
            return None;
        }
        let method = method.unwrap_or_default();
        if let Some(refusal) = self.0.ctx.refusal(method, label, len) {
            return Some(refusal);
        }
        if self.0.local.load(Relaxed) == LOCAL_DOWN {
            self.0.ctx.metrics.upstream_failures.fetch_add(1, Relaxed);
            return Some((
                TransportError::NOT_DELIVERED,
                "the upstream is not running".into(),
            ));
        }
        None
    }

    /// Completes a request this side sent: its reply (or failure) goes to
    /// the local party, and a request held back on the same id is released.
    async fn finish(&self, p: Pending, outcome: Result<(Bytes, ReplyClass), Failure>) {
        let m = &self.0.ctx.metrics;
        m.in_flight.fetch_sub(1, Relaxed);
        m.latency.observe(p.started.elapsed());
        let text = match outcome {
            Ok((text, class)) => {
                m.reply(class);
                text
            }
            Err(f) => {
                m.reply(f.class());
                Bytes::from(f.response(Some(&p.id)))
            }
        };
        self.answer_local(p.batch, text).await;
        // A request held back on this id may go now (§8.2).
        let held = {
            let mut s = self.lock();
            let i = s.held_out.iter().position(|h| match id_of(&h.kind) {
                Some(id) => same_id(&h.text[id.token.clone()], id.kind, &p.id, id.kind),
                None => false,
            });
            i.and_then(|i| s.held_out.remove(i))
        };
        if let Some(h) = held {
            Box::pin(self.one(h.text, h.kind, h.batch)).await;
        }
    }

    /// An answer the edge makes itself (no request was registered).
    async fn fail(&self, batch: Option<u64>, id: Option<&[u8]>, f: Failure) {
        self.0.ctx.metrics.reply(f.class());
        self.answer_local(batch, f.response(id).into()).await;
    }

    /// One answer for the local party: alone, or into its batch's array.
    async fn answer_local(&self, batch: Option<u64>, text: Bytes) {
        let Some(b) = batch else {
            self.to_local(text).await;
            return;
        };
        let done = {
            let mut s = self.lock();
            match s.batches.get_mut(&b) {
                Some(batch) => {
                    batch.join.push(&text);
                    batch.waiting = batch.waiting.saturating_sub(1);
                    if batch.waiting == 0 {
                        s.batches.remove(&b).and_then(|b| b.join.finish())
                    } else {
                        None
                    }
                }
                None => None,
            }
        };
        if let Some(array) = done {
            self.to_local(array.into()).await;
        }
    }

    /// Answers requests whose deadline passed, until the association ends.
    async fn sweep(&self) {
        let period = (self.0.ctx.limits.request_timeout / 8)
            .clamp(Duration::from_millis(10), Duration::from_millis(250));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.0.assoc.ended() => return,
            }
            let now = Instant::now();
            let (expired, unanswered) = {
                let mut s = self.lock();
                let expired = s.outgoing.remove_where(|p| p.deadline <= now);
                let unanswered: Vec<(Bytes, Vec<u8>)> = s
                    .incoming
                    .extract_if(|_, i| i.deadline <= now)
                    .map(|(token, i)| (token, i.corr))
                    .collect();
                (expired, unanswered)
            };
            for p in expired {
                self.finish(p, Err(Failure::Timeout)).await;
            }
            // A request the local party never answered: its sender's edge
            // has answered Timeout by now; the peer learns NotDelivered and
            // the entry does not stay forever.
            let detail = format!(
                "no answer from the {} within {:?}",
                if self.0.side == Side::Origin {
                    "upstream"
                } else {
                    "client"
                },
                self.0.ctx.limits.request_timeout
            );
            for (token, corr) in unanswered {
                self.not_delivered(&corr, &detail).await;
                self.release_incoming(&token).await;
            }
        }
    }

    /// Answers a peer request with NotDelivered.
    async fn not_delivered(&self, corr: &[u8], detail: &str) {
        let ctx = &self.0.ctx;
        let code = TransportError::NOT_DELIVERED;
        ctx.metrics.transport_error(code);
        if self.0.side == Side::Origin {
            ctx.metrics.upstream_failures.fetch_add(1, Relaxed);
        }
        let _ = send_transport_error(&self.0.assoc, ctx.protocol, corr, code, detail).await;
    }

    /// The association ended: every request still waiting gets its answer.
    fn peer_ended(&self, why: &End) {
        if matches!(why, End::Error(_)) {
            self.0.ctx.metrics.association_errors.fetch_add(1, Relaxed);
        }
        let pending: Vec<Pending> = {
            let mut s = self.lock();
            s.held_in.clear();
            s.incoming.clear();
            let mut v: Vec<Pending> = s.outgoing.drain().map(|(_, p)| p).collect();
            // Held-back requests never crossed: they fail the same way.
            for h in std::mem::take(&mut s.held_out) {
                if let Some(id) = id_of(&h.kind) {
                    let now = Instant::now();
                    self.0.ctx.metrics.in_flight.fetch_add(1, Relaxed);
                    v.push(Pending {
                        id: h.text.slice(id.token.clone()),
                        started: now,
                        deadline: now,
                        batch: h.batch,
                    });
                }
            }
            v
        };
        if pending.is_empty() {
            return;
        }
        let session = self.clone();
        let failure = lost(why);
        tokio::spawn(async move {
            for p in pending {
                session.finish(p, Err(failure.clone())).await;
            }
        });
    }

    /// Origin: the upstream went away. Requests it had not answered get
    /// NotDelivered; requests it made to the client are forgotten.
    pub async fn local_down(&self, why: &str) {
        self.0.local.store(LOCAL_DOWN, Relaxed);
        let (incoming, held): (Vec<Incoming>, Vec<Vec<u8>>) = {
            let mut s = self.lock();
            let incoming = s.incoming.drain().map(|(_, i)| i).collect();
            let held = s.held_in.drain(..).map(|h| h.corr).collect();
            // The upstream's own requests to the client: nobody is left to
            // take their replies.
            let forgotten = s.outgoing.drain().count() as i64;
            self.0.ctx.metrics.in_flight.fetch_sub(forgotten, Relaxed);
            s.held_out.clear();
            (incoming, held)
        };
        let detail = format!("the upstream went away before replying: {why}");
        for corr in incoming.into_iter().map(|i| i.corr).chain(held) {
            self.not_delivered(&corr, &detail).await;
        }
    }

    /// Origin: the upstream is being (re)started; messages queue for it.
    pub fn local_starting(&self) {
        self.0.local.store(LOCAL_STARTING, Relaxed);
    }

    /// Origin: the upstream is running.
    pub fn local_up(&self) {
        self.0.local.store(LOCAL_UP, Relaxed);
    }

    /// Closes the association (the local party went away).
    pub async fn close(&self) {
        self.0.assoc.close(0).await;
    }
}

/// Removes the incoming request a reply with id `token` answers: the same
/// token, else the same id value (`1` and `1.0`, escapes in strings).
fn take_incoming(
    incoming: &mut HashMap<Bytes, Incoming>,
    token: &[u8],
    kind: IdKind,
) -> Option<(Bytes, Incoming)> {
    if let Some((k, v)) = incoming.remove_entry(token) {
        return Some((k, v));
    }
    let key = incoming
        .iter()
        .find(|(k, v)| same_id(k, v.kind, token, kind))
        .map(|(k, _)| k.clone())?;
    incoming.remove_entry(&key)
}
