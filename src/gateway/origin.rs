//! The origin's side: what arrives over an association is delivered to the
//! upstream JSON-RPC server, and its replies go back.
//!
//! - HTTP(S) upstream: each request is one POST on a pooled keep-alive
//!   HTTP/1.1 connection, driven by the request's own task
//!   ([`upstream_pool`](super::upstream_pool), [`Role::OriginStateless`]);
//!   its reply goes back on the request's correlation_id.
//! - WebSocket, IPC or MCP upstream, or child process (stdio): one upstream
//!   session per association ([`Session::origin`]), reconnected or
//!   restarted with backoff when it goes away; with several (a
//!   [`Sessions`] group), started on the best member and moved to another
//!   when it fails.
//!
//! - No upstream (`serve --listen` alone: associations for `ping` and
//!   benchmarks): every request is answered NotDelivered, saying so.
//!
//! An upstream that cannot be reached, refuses, or does not answer in time
//! is answered with BRIDGE_ERROR NotDelivered: never a fabricated success or
//! JSON-RPC error.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use super::child::{Stop, UpstreamChild};
use super::exec::{Exec, ExecSink, Local, Serve};
use crate::lines::{LineReader, LineSkipped, write_line};
use super::outbox::Inbox;
use super::session::Session;
use super::policy::health;
use super::upstream_group::{Group, Member, PostFailed, Sessions, Single};
use super::carry::in_flight_full;
use super::session::SESSION_OVER;
use super::upstream_http::{Connector, HttpsClient, host_override};
use super::upstream_pool::{Pool, PostError};
use super::{Ctx, GatewayConfig, Upstream};
use crate::assoc::AssocHandle;
use crate::assoc::error::error_chain;
use crate::shard::PerShard;
use crate::bridge::ProtocolId;
use crate::jsonrpc::{Kind, Scanned, scan};
use crate::relay::{MAY_HAVE_EXECUTED, Role, ToServe};

/// The longest pause between upstream restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// How long an idle keep-alive connection to an HTTP upstream is kept.
const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The group of HTTP upstreams (`--upstream` repeated, `--route`), if the
/// configuration has one, shown in the metrics, and its members' URLs in
/// its order.
fn http_group(ctx: &Ctx, config: &GatewayConfig) -> Option<(Arc<Group>, Vec<hyper::Uri>)> {
    if config.upstream_group.is_empty() && config.routes.is_empty() {
        return None;
    }
    let mut uris = config.upstream_group.clone();
    let routes = config
        .routes
        .iter()
        .map(|(glob, uri)| {
            let i = uris.iter().position(|u| u == uri).unwrap_or_else(|| {
                uris.push(uri.clone());
                uris.len() - 1
            });
            (glob.clone(), i)
        })
        .collect();
    let members = uris
        .iter()
        .map(|uri| Member {
            post_headers: post_headers(uri, &config.upstream_headers),
            uri: uri.clone(),
            health: Default::default(),
        })
        .collect();
    let default = config.upstream_group.len();
    let group = Arc::new(Group::new(members, default, routes, ctx.limits.retry_budget));
    ctx.metrics.show(group.clone());
    Some((group, uris))
}

/// Why a gateway without an upstream does not deliver a request.
const NO_UPSTREAM: &str = "this gateway has no upstream (--upstream or --upstream-cmd)";

/// What the origin delivers to; shared by all associations.
pub struct Origin {
    pub(super) ctx: Arc<Ctx>,
    /// `None`: requests are answered NotDelivered.
    upstream: Option<Upstream>,
    /// The connections to each HTTP upstream a request is POSTed to (the
    /// `--upstream` alone, or the group's members, in the group's order),
    /// one set per shard: a request drives the connection it takes on its
    /// own thread, and no other shard touches it.
    pools: PerShard<Box<[Pool]>>,
    /// MCP over HTTP (Streamable HTTP sessions, whose replies may stream):
    /// one client per shard, so that a session and its connections share
    /// a thread.
    http: Option<PerShard<HttpsClient>>,
    /// TLS for a WSS upstream.
    tls: Arc<rustls::ClientConfig>,
    /// Bounds the upstream calls in flight (HTTP).
    pub(super) permits: Arc<Semaphore>,
    /// Bounds the upstream child processes running (`--upstream-cmd`).
    children: Arc<Semaphore>,
    /// The octets of HTTP replies read and not yet sealed for the peer:
    /// `--memory-budget` of them in all (see [`collect_within`]).
    replies: Arc<Semaphore>,
    /// `--upstream-header`: sent with every HTTP request and WebSocket
    /// handshake to the upstream.
    pub(super) headers: Arc<[(hyper::header::HeaderName, hyper::header::HeaderValue)]>,
    /// What every POST to an HTTP upstream carries, built once (see
    /// [`post_headers`]).
    post_headers: hyper::HeaderMap,
    /// Several HTTP upstreams, or routes (`None`: `upstream` alone).
    group: Option<Arc<Group>>,
    /// Several session upstreams (`None`: `upstream` alone).
    sessions: Option<Arc<Sessions>>,
    /// The one HTTP upstream's health, for `/readyz` (with no group).
    single: Arc<Single>,
}

impl Origin {
    pub fn new(ctx: Arc<Ctx>, config: &GatewayConfig) -> Result<Self, super::GatewayError> {
        let upstream = config.upstream.clone();
        let headers = config.upstream_headers.clone();
        let tls = Arc::new(super::tls_roots_client_config(config.upstream_ca.as_deref())?);
        let connector = Connector::new((*tls).clone(), ctx.limits.upstream_connect_timeout);
        let max_idle = ctx.limits.max_in_flight.min(1024);
        let mcp = ctx.protocol == ProtocolId::MCP;
        let http = match &upstream {
            Some(Upstream::Http(_)) if mcp => Some(PerShard::new(ctx.shards.as_deref(), || {
                Client::builder(hyper_util::rt::TokioExecutor::new())
                    .pool_idle_timeout(HTTP_IDLE_TIMEOUT)
                    .pool_max_idle_per_host(max_idle)
                    .build(connector.clone())
            })),
            _ => None,
        };
        // The URLs POSTed to: `--upstream`, or the group's members (set below).
        let mut posted_to = match &upstream {
            Some(Upstream::Http(uri)) if !mcp => vec![uri.clone()],
            _ => Vec::new(),
        };
        let permits = Arc::new(Semaphore::new(ctx.limits.max_in_flight));
        let replies = Arc::new(Semaphore::new(reply_budget(&ctx)));
        let single_headers = match &upstream {
            Some(Upstream::Http(uri)) => post_headers(uri, &headers),
            _ => hyper::HeaderMap::new(),
        };
        let group = http_group(&ctx, config).map(|(group, uris)| {
            if !mcp {
                posted_to = uris;
            }
            group
        });
        let sessions = (!config.session_group.is_empty()).then(|| {
            let sessions = Arc::new(Sessions::new(config.session_group.clone()));
            ctx.metrics.show(sessions.clone());
            sessions
        });
        let pools = PerShard::new(ctx.shards.as_deref(), || {
            (posted_to.iter())
                .map(|uri| Pool::new(connector.clone(), uri.clone(), max_idle, HTTP_IDLE_TIMEOUT))
                .collect()
        });
        let single = Arc::new(Single::starting(Instant::now()));
        let children = Arc::new(Semaphore::new(ctx.limits.max_upstream_processes));
        if group.is_none() && !posted_to.is_empty() {
            ctx.metrics.show(single.clone());
        }
        Ok(Self {
            ctx,
            upstream,
            sessions,
            single,
            children,
            pools,
            http,
            tls,
            permits,
            replies,
            headers: headers.into(),
            post_headers: single_headers,
            group,
        })
    }

    /// The sink for a newly accepted association.
    pub fn sink(self: &Arc<Self>, assoc: AssocHandle) -> OriginSink {
        self.ctx.track(&assoc, super::metrics::Side::Origin);
        let upstream = match &self.upstream {
            // MCP over HTTP is a session (Streamable HTTP).
            Some(Upstream::Http(_)) if self.ctx.protocol == ProtocolId::MCP => {
                self.upstream.as_ref()
            }
            Some(Upstream::Http(_)) | None => None,
            Some(_) => self.upstream.as_ref(),
        };
        match upstream {
            None => {
                let mut exchange = self.ctx.exchange(Role::OriginStateless, None);
                if self.upstream.is_none() {
                    exchange.local_gone(NO_UPSTREAM.into());
                }
                let origin = self.clone();
                let exec = Exec::start_with(exchange, assoc, self.ctx.clone(), |me| {
                    let me = me.clone();
                    let serve: Serve = Box::new(move |request| {
                        let Some(exec) = me.upgrade() else {
                            return;
                        };
                        // Room is taken now, in the order requests arrive,
                        // when there is some (else the task waits for it).
                        let room = origin.permits.clone().try_acquire_owned().ok();
                        let origin = origin.clone();
                        tokio::spawn(async move {
                            origin.serve(exec, request, room).await
                        });
                    });
                    Local::Served(serve)
                });
                ExecSink(exec)
            }
            Some(upstream) => {
                let (tx, rx) = self.ctx.limits.outbox();
                let session = Session::origin(assoc, self.ctx.clone(), tx);
                let sink = session.sink();
                let (origin, upstream) = (self.clone(), upstream.clone());
                tokio::spawn(async move { origin.run_upstream(upstream, session, rx).await });
                sink
            }
        }
    }

    /// Keeps one upstream session up for as long as the association lives:
    /// on `single`, or on a member of the session group, moving to another
    /// member (at once, when one is admitted) when it fails.
    async fn run_upstream(&self, single: Upstream, session: Session, mut rx: Inbox) {
        let _counted = Counted::new(&self.ctx.metrics.upstream_sessions);
        let group = self.sessions.as_deref();
        let mut backoff = FIRST_BACKOFF;
        let mut first = true;
        let mut failed = None;
        loop {
            if !first {
                self.ctx.metrics.upstream_restarts.fetch_add(1, Relaxed);
            }
            first = false;
            let on = group.map(|g| g.enter(failed));
            let upstream = match (group, &on) {
                (Some(g), Some(on)) => &g.members[on.index].upstream,
                _ => &single,
            };
            let started = Instant::now();
            // Watches the association itself: when it ends, it closes the
            // upstream politely before returning.
            let why = self.one_upstream(upstream, &session, &mut rx).await;
            if !session.assoc().is_open() {
                return;
            }
            warn!(%upstream, %why, "upstream session ended");
            session.local_down(&why).await;
            if !session.assoc().is_open() {
                return;
            }
            // Everything queued has been answered NotDelivered: emptying the
            // queue now frees the association's reader if it waits for room.
            while rx.try_recv().is_some() {}
            if started.elapsed() > MAX_BACKOFF * 2 {
                backoff = FIRST_BACKOFF;
            }
            let another = match (group, &on) {
                (Some(g), Some(on)) => {
                    failed = Some(on.index);
                    g.failed(on, started.elapsed())
                }
                _ => false,
            };
            drop(on);
            if another {
                // The session's state (subscriptions, an MCP session) does
                // not move with it: the next member starts afresh.
                info!(from = %upstream, "upstream session moves to another upstream of the group");
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = session.assoc().ended() => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            // What was queued while the upstream was down was answered
            // NotDelivered already: it must not reach the next upstream.
            while rx.try_recv().is_some() {}
            session.local_starting();
        }
    }

    /// Runs one upstream session until it fails; returns why.
    async fn one_upstream(&self, upstream: &Upstream, session: &Session, rx: &mut Inbox) -> String {
        match upstream {
            Upstream::Cmd(argv) => {
                // Each association its own process: bounded, so a flood of
                // associations (MCP clients initializing) cannot start one
                // each without end.
                let Ok(_running) = self.children.clone().try_acquire_owned() else {
                    self.ctx
                        .metrics
                        .upstream_processes_refused
                        .fetch_add(1, Relaxed);
                    return format!(
                        "{} upstream processes run already (--max-upstream-processes): none started for this association",
                        self.ctx.limits.max_upstream_processes
                    );
                };
                run_child(argv, session, rx, &self.ctx).await
            }
            Upstream::Ipc(path) => run_ipc(path, session, rx, &self.ctx).await,
            Upstream::Ws(url) => {
                run_ws(url, session, rx, &self.ctx, self.tls.clone(), &self.headers).await
            }
            Upstream::Http(uri) => match self.http.as_ref().map(PerShard::get) {
                Some(client) => {
                    let up = super::mcp_http::Upstream {
                        ctx: &self.ctx,
                        permits: &self.permits,
                        headers: &self.headers,
                        uri,
                        client,
                    };
                    super::mcp_http::run(up, session, rx).await
                }
                None => "no HTTP client for the upstream".into(),
            },
        }
    }

    /// Serves one request or notification of the peer: waits for room
    /// under `--max-in-flight` (backpressure, for as long as a stalled party
    /// may hold a reader up, less what it was held before), posts it, and
    /// tells the exchange what came of it.
    async fn serve(
        &self,
        exec: Arc<Exec<()>>,
        request: ToServe,
        room: Option<OwnedSemaphorePermit>,
    ) {
        let ctx = &self.ctx;
        let ToServe {
            text,
            corr,
            resend_safe,
            wait,
        } = request;
        let permit = match room {
            Some(p) => Ok(Ok(p)),
            None => tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await,
        };
        let notification = corr.is_none();
        let (outcome, _room) = match permit {
            Ok(Ok(_permit)) => self.post(text, resend_safe, notification).await,
            Ok(Err(_)) => return,
            Err(_) => (Err(in_flight_full(ctx)), None),
        };
        // The reply's octets count until it is sealed for the peer, when
        // `with` returns (`_room` is dropped after).
        match corr {
            Some(corr) => {
                let served = outcome.and_then(|posted| match posted {
                    Posted::Reply(text, kind) => Ok((text, kind)),
                    // post() reads a request's answer as a reply, always.
                    Posted::Taken => Err("the upstream's answer was not read as a reply".into()),
                });
                exec.with(|x, now| x.served(now, &corr, served)).await;
            }
            None => match outcome {
                Ok(_) => {
                    ctx.metrics.upstream_notifications.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    ctx.metrics.dropped.fetch_add(1, Relaxed);
                    debug!(error = %e, "notification to the upstream failed");
                }
            },
        }
    }

    /// One request or notification to the HTTP upstream (or the group's
    /// best member, then another when that cannot execute it twice): a
    /// request's reply (one JSON-RPC response, scanned) or a notification
    /// taken, or why not, and the room a reply's octets hold in the reply
    /// budget.
    async fn post(
        &self,
        text: Bytes,
        resend_safe: bool,
        notification: bool,
    ) -> (Result<Posted, String>, Option<OwnedSemaphorePermit>) {
        let mut room = None;
        let headers = &self.post_headers;
        let failed = match &self.group {
            None => match self.pools.get().first() {
                Some(pool) => match self.post_to(pool, headers, text, notification, &mut room).await {
                    Ok(posted) => {
                        if let Posted::Reply(..) = posted {
                            self.single.answered();
                        }
                        return (Ok(posted), room);
                    }
                    Err(f) => {
                        if let PostFailed::NotSent(why) | PostFailed::Unknown(why) = &f {
                            self.single.unreachable();
                            say_unreachable(why);
                        }
                        f
                    }
                },
                None => return (Err(NO_UPSTREAM.into()), None),
            },
            Some(group) => {
                let posted = self.post_grouped(group, text, resend_safe, notification, &mut room);
                match posted.await {
                    Ok(posted) => return (Ok(posted), room),
                    Err(f) => f,
                }
            }
        };
        let why = match failed {
            PostFailed::Unknown(why) if !resend_safe => format!("{MAY_HAVE_EXECUTED}{why}"),
            PostFailed::NotSent(why) | PostFailed::Unknown(why) | PostFailed::Final(why) => why,
        };
        (Err(why), room)
    }

    /// [`Origin::post`] over the group: the best member the request's
    /// method may go to, then others while the failure allows. A
    /// notification's answer, or its absence, says nothing of a member's
    /// health; only a connection that could not be made does.
    async fn post_grouped(
        &self,
        group: &Group,
        text: Bytes,
        resend_safe: bool,
        notification: bool,
        room: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Posted, PostFailed> {
        // One clock read for each try's start and one for its end, shared by
        // the budget, the choice and the member's health.
        let mut started = Instant::now();
        group.budget.deposit(group.at(started));
        let allowed = if group.has_routes() {
            match scan(&text, &self.ctx.scan) {
                Ok(Scanned::Single(Kind::Request { method, .. } | Kind::Notification { method })) => {
                    let name = crate::jsonrpc::carriage::method_of(&text, &method);
                    group.candidates(name.as_deref())
                }
                _ => group.candidates(None),
            }
        } else {
            group.candidates(None)
        };
        let mut tried = 0;
        let mut last = PostFailed::NotSent("no upstream takes this method".into());
        while let Some(i) = group.choose_at(group.at(started), allowed, tried) {
            tried |= 1 << i;
            // A pool for each member, in the group's order (`Origin::new`).
            let (m, Some(pool)) = (&group.members[i], self.pools.get().get(i)) else {
                break;
            };
            m.health.start(group.at(started));
            let r = (self.post_to(pool, &m.post_headers, text.clone(), notification, room)).await;
            let ended = Instant::now();
            let outcome = match &r {
                Ok(Posted::Reply(..)) => {
                    health::Outcome::Replied(ended.saturating_duration_since(started))
                }
                Ok(Posted::Taken) => health::Outcome::Neutral,
                Err(PostFailed::Final(_)) if notification => health::Outcome::Neutral,
                Err(PostFailed::Final(_)) => health::Outcome::NotDelivered,
                Err(PostFailed::NotSent(why) | PostFailed::Unknown(why)) => {
                    say_unreachable(why);
                    health::Outcome::Unreachable
                }
            };
            m.health.finish(group.at(ended), outcome);
            match r {
                Ok(reply) => return Ok(reply),
                Err(f) => {
                    let again = group.again(&f, resend_safe);
                    last = f;
                    if !again {
                        break;
                    }
                    m.health.retries.fetch_add(1, Relaxed);
                    started = ended;
                }
            }
        }
        Err(last)
    }

    /// One POST to the HTTP upstream `pool` connects to. A notification's
    /// answer (204, or 200 with a body or none) is read and let go, not
    /// taken for a reply; only a request's time to its answer is observed
    /// as the upstream's latency.
    async fn post_to(
        &self,
        pool: &Pool,
        headers: &hyper::HeaderMap,
        text: Bytes,
        notification: bool,
        room: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Posted, PostFailed> {
        let uri = pool.uri();
        let ctx = &self.ctx;
        // tokio's clock, as the timeout's (paused in tests); the deadline is
        // taken from it instead of a second reading.
        let started = tokio::time::Instant::now();
        // What clients are told never holds the URL's secrets (made only
        // when there is something to tell).
        let shown = || super::redact::PublicUrl::of_uri(uri);
        let limit = ctx.limits.max_body;
        // Boxed: the exchange with the upstream is most of a request task's
        // state (1 048 of 2 208 octets, and more for what holds it), which
        // is copied whole each time a future holding it is moved: as it is
        // made, spawned, and ended.
        let exchange = Box::pin(async {
            let mut req = hyper::Request::new(Full::new(text));
            *req.method_mut() = hyper::Method::POST;
            *req.headers_mut() = headers.clone();
            let budget = Budget {
                room: &self.replies,
                octets: reply_budget(ctx),
                wait: ctx.limits.stall_timeout,
            };
            let read = async |resp: hyper::Response<hyper::body::Incoming>| {
                let status = resp.status();
                let (body, held) = collect_within(resp.into_body(), limit, &budget)
                    .await
                    .map_err(|e| {
                        PostFailed::Final(match e {
                            Collect::Body(e) => {
                                super::carry::reading_reply_failed(&shown(), &*e, limit)
                            }
                            Collect::NoRoom => reply_budget_full(&shown(), ctx),
                        })
                    })?;
                *room = held;
                Ok::<_, PostFailed>((status, body))
            };
            pool.exchange(req, read).await.map_err(|e| match e {
                // Nothing reached the upstream.
                PostError::NotSent(e) => {
                    PostFailed::NotSent(format!("upstream {}: {}", shown(), error_chain(&*e)))
                }
                PostError::Exchange(e) => {
                    PostFailed::Unknown(format!("upstream {}: {}", shown(), error_chain(&e)))
                }
            })?
        });
        let deadline = started + ctx.limits.request_timeout;
        let result = tokio::time::timeout_at(deadline, exchange).await;
        if !notification && matches!(result, Ok(Ok(_))) {
            ctx.metrics.upstream_latency.observe(started.elapsed());
        }
        let (status, body) = result.map_err(|_| {
            PostFailed::Final(format!(
                "upstream {} did not answer within {:?}",
                shown(),
                ctx.limits.request_timeout
            ))
        })??;
        if notification {
            return Ok(Posted::Taken);
        }
        reply_in(ctx, &shown(), status, body)
    }
}

/// A request's answer as its reply: one JSON-RPC response, else why not.
fn reply_in(
    ctx: &Ctx,
    shown: &dyn std::fmt::Display,
    status: hyper::StatusCode,
    body: Bytes,
) -> Result<Posted, PostFailed> {
    match scan(&body, &ctx.scan) {
        Ok(Scanned::Single(k @ (Kind::Success { .. } | Kind::Error { .. }))) => {
            Ok(Posted::Reply(body, k))
        }
        _ => Err(PostFailed::Final(format!(
            "upstream {shown} answered HTTP {status} without a JSON-RPC response ({} octets)",
            body.len()
        ))),
    }
}

/// What one POST to the HTTP upstream came to.
enum Posted {
    /// A request's reply: one JSON-RPC response, scanned.
    Reply(Bytes, Kind),
    /// A notification taken. Whatever the upstream answered (204, or 200
    /// with a body or none) is not a reply, and says nothing of its health.
    Taken,
}

/// The octets the origin's HTTP replies may hold between the upstream and
/// the peer: `--memory-budget` (at most what a semaphore counts).
fn reply_budget(ctx: &Ctx) -> usize {
    ctx.limits
        .memory_budget
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize))
}

/// Where a reply's octets are taken from while it is read.
struct Budget<'a> {
    room: &'a Arc<Semaphore>,
    /// All of it (what one reply may hold at most).
    octets: usize,
    /// How long a chunk may wait for room.
    wait: Duration,
}

/// Why a reply body was not read whole.
#[derive(Debug)]
enum Collect {
    /// Over the limit, or the stream failed.
    Body(Box<dyn std::error::Error + Send + Sync>),
    /// The budget had no room for it within the wait.
    NoRoom,
}

/// Reads a reply body of at most `limit` octets, taking room for its octets
/// from the budget as they arrive: the upstream is not read while there is
/// none (backpressure through TCP), and a reply that finds none within the
/// budget's wait is given up, so replies that are each half read cannot
/// wait for one another for ever. A reply holds at most the whole budget: a
/// larger one reads on once it holds all of it (it is alone then). Returns
/// the body (one chunk as it came, else joined) and the room it holds.
async fn collect_within<B>(
    body: B,
    limit: usize,
    budget: &Budget<'_>,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Collect>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut body = std::pin::pin!(Limited::new(body, limit));
    let mut held: Option<OwnedSemaphorePermit> = None;
    let (mut first, mut joined) = (None::<Bytes>, None::<bytes::BytesMut>);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(Collect::Body)?.into_data() else {
            continue;
        };
        let have = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        let want = data.len().min(budget.octets.saturating_sub(have));
        if want > 0 {
            let n = u32::try_from(want).unwrap_or(u32::MAX);
            let more = tokio::time::timeout(budget.wait, budget.room.clone().acquire_many_owned(n))
                .await
                .map_err(|_| Collect::NoRoom)?
                .map_err(|_| Collect::NoRoom)?;
            match &mut held {
                Some(h) => h.merge(more),
                None => held = Some(more),
            }
        }
        match (&mut first, &mut joined) {
            (None, None) => first = Some(data),
            (Some(one), None) => {
                let mut all = bytes::BytesMut::with_capacity(one.len() + data.len());
                all.extend_from_slice(one);
                all.extend_from_slice(&data);
                first = None;
                joined = Some(all);
            }
            (_, Some(all)) => all.extend_from_slice(&data),
        }
    }
    let body = joined.map_or_else(|| first.unwrap_or_default(), bytes::BytesMut::freeze);
    Ok((body, held))
}

/// Why a reply waited in vain for room in the reply budget.
fn reply_budget_full(shown: &dyn std::fmt::Display, ctx: &Ctx) -> String {
    format!(
        "upstream {shown} executed the request and is answering, but replies being read hold this gateway's --memory-budget ({} octets) and none made room within {:.1} s (--stall-timeout): retrying may execute it again",
        reply_budget(ctx),
        ctx.limits.stall_timeout.as_secs_f64()
    )
}

/// The headers of every POST to `uri`: `--upstream-header`s, then
/// Content-Type and Host unless those named them. Host is written as the
/// HTTP client would write it for each request (the URI's host, and its
/// port unless the scheme's default), so that it is built once here
/// rather than formatted per request.
fn post_headers(
    uri: &hyper::Uri,
    extra: &[(hyper::header::HeaderName, hyper::header::HeaderValue)],
) -> hyper::HeaderMap {
    use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
    let mut map = hyper::HeaderMap::with_capacity(extra.len() + 2);
    for (name, value) in extra {
        map.append(name, value.clone());
    }
    map.entry(CONTENT_TYPE)
        .or_insert(HeaderValue::from_static("application/json"));
    let default_port = match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    let host = host_override(uri).or_else(|| match (uri.host(), uri.port_u16()) {
        (Some(host), Some(port)) if Some(port) != default_port => {
            HeaderValue::from_str(&format!("{host}:{port}")).ok()
        }
        (Some(host), _) => HeaderValue::from_str(host).ok(),
        (None, _) => None,
    });
    if let Some(host) = host {
        map.entry(HOST).or_insert(host);
    }
    map
}

/// The sink of an association at the origin.
pub type OriginSink = ExecSink<()>;

/// A child process speaking newline-delimited JSON-RPC on stdio.
async fn run_child(argv: &[String], session: &Session, rx: &mut Inbox, ctx: &Ctx) -> String {
    let Some((program, args)) = argv.split_first() else {
        return "empty upstream command".into();
    };
    let (mut child, mut stdin, stdout, stderr) = match UpstreamChild::spawn(program, args) {
        Ok(c) => c,
        Err(e) => return format!("cannot start {}: {e}", super::redact::program(argv)),
    };
    let pid = child.id();
    info!(pid, command = %super::redact::program(argv), "upstream process started");
    debug!(pid, argv = ?argv, "upstream process arguments");
    session.local_up();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            info!(target: "upstream", pid, "{line}");
        }
    });
    let why = {
        let write = async {
            while let Some(text) = rx.recv().await {
                let write = async {
                    write_line(&mut stdin, &text).await?;
                    if rx.is_empty() {
                        stdin.flush().await?;
                    }
                    Ok::<_, std::io::Error>(())
                };
                if let Err(why) = upstream_write(ctx, "its stdin", write).await {
                    return Some(why);
                }
            }
            None
        };
        let read = async {
            // One reply too large for --max-body is dropped, not a reason to
            // restart the upstream (and lose its other requests and state):
            // the request it answers is told so when the reply's head names
            // it, else it times out.
            let mut lines = LineReader::skipping_long_lines(stdout, ctx.limits.max_body);
            loop {
                match lines.next().await {
                    Ok(Some(line)) => session.on_local_message(line).await,
                    Ok(None) => return "the upstream closed its stdout".to_owned(),
                    Err(e) => match LineSkipped::of(&e) {
                        Some(s) => session.local_message_too_large(&s.head, s.len).await,
                        None => return format!("reading the upstream's stdout: {e}"),
                    },
                }
            }
        };
        tokio::select! {
            w = write => w,
            r = read => Some(r),
            status = child.wait() => Some(match status {
                Ok(s) => format!("the upstream process exited ({s})"),
                Err(e) => format!("waiting for the upstream process: {e}"),
            }),
            _ = session.assoc().ended() => None,
        }
    };
    match why {
        Some(why) => {
            child.stop(Stop::Kill);
            why
        }
        None => {
            // The association is over, the child is fine: let it exit on
            // its own, as MCP's stdio shutdown asks (stdin closed, then
            // SIGTERM, then SIGKILL).
            drop(stdin);
            stop_child(&mut child, pid).await;
            SESSION_OVER.to_owned()
        }
    }
}

/// A Unix domain socket speaking JSON-RPC values back to back (geth's IPC):
/// each request goes out as one value and a newline (whitespace between
/// values, which such a server skips); replies and notifications are read
/// as values, with or without anything between them.
async fn run_ipc(path: &std::path::Path, session: &Session, rx: &mut Inbox, ctx: &Ctx) -> String {
    #[cfg(unix)]
    {
        let stream = match tokio::net::UnixStream::connect(path).await {
            Ok(s) => s,
            Err(e) => return format!("cannot connect to unix://{}: {e}", path.display()),
        };
        info!(path = %path.display(), "upstream socket connected");
        session.local_up();
        let (read, mut write) = stream.into_split();
        let writing = async {
            while let Some(text) = rx.recv().await {
                let one = async {
                    write_line(&mut write, &text).await?;
                    if rx.is_empty() {
                        write.flush().await?;
                    }
                    Ok::<_, std::io::Error>(())
                };
                if let Err(why) = upstream_write(ctx, "its socket", one).await {
                    return Some(why);
                }
            }
            None
        };
        let reading = async {
            let mut values = super::json_stream::ValueReader::new(read, ctx.limits.max_body);
            loop {
                match values.next().await {
                    Ok(Some(value)) => session.on_local_message(value).await,
                    Ok(None) => return "the upstream closed its socket".to_owned(),
                    Err(e) => return format!("reading the upstream's socket: {e}"),
                }
            }
        };
        tokio::select! {
            w = writing => w.unwrap_or_else(|| SESSION_OVER.to_owned()),
            r = reading => r,
            _ = session.assoc().ended() => SESSION_OVER.to_owned(),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (session, rx, ctx);
        format!("unix://{}: Unix domain sockets need a Unix system", path.display())
    }
}

/// One write to an upstream session, given up when it does not finish within
/// the stall timeout. An upstream that takes nothing holds up, in turn, its
/// queue, the association's reader and the PONGs the peer waits for: it is
/// restarted instead (what waited for it is answered NotDelivered), before
/// the peer's keepalive gives the whole association up.
async fn upstream_write<E: std::fmt::Display>(
    ctx: &Ctx,
    into: &str,
    write: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), String> {
    let stall = ctx.limits.stall_timeout;
    match tokio::time::timeout(stall, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("writing to {into}: {e}")),
        Err(_) => {
            ctx.metrics.stalled_upstreams.fetch_add(1, Relaxed);
            Err(format!(
                "the upstream took nothing from {into} for {:.1} s (--stall-timeout)",
                stall.as_secs_f64()
            ))
        }
    }
}

/// Counts itself in a gauge while it lives (also when its task is aborted).
struct Counted<'a>(&'a std::sync::atomic::AtomicI64);

impl<'a> Counted<'a> {
    fn new(gauge: &'a std::sync::atomic::AtomicI64) -> Self {
        gauge.fetch_add(1, Relaxed);
        Self(gauge)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}

/// How long an upstream child gets to exit after its stdin closes, and again
/// after SIGTERM, before it is killed.
const CHILD_EXIT_GRACE: Duration = Duration::from_secs(2);

/// Waits for a child whose stdin was closed to exit; SIGTERM after
/// [`CHILD_EXIT_GRACE`], SIGKILL after another.
async fn stop_child(child: &mut UpstreamChild, pid: u32) {
    let exited = async |child: &mut UpstreamChild| {
        tokio::time::timeout(CHILD_EXIT_GRACE, child.wait())
            .await
            .is_ok()
    };
    if exited(child).await {
        debug!(pid, "upstream process exited after its stdin closed");
        return;
    }
    if cfg!(unix) {
        child.stop(Stop::Terminate);
        if exited(child).await {
            info!(pid, "upstream process exited on SIGTERM");
            return;
        }
    }
    warn!(pid, "upstream process did not exit; killing it");
    child.stop(Stop::Kill);
    let _ = child.wait().await;
}

/// A WebSocket upstream: one connection per association.
async fn run_ws(
    url: &str,
    session: &Session,
    rx: &mut Inbox,
    ctx: &Ctx,
    tls: Arc<rustls::ClientConfig>,
    headers: &[(hyper::header::HeaderName, hyper::header::HeaderValue)],
) -> String {
    use tokio_tungstenite::tungstenite::Message;
    let shown = super::redact::PublicUrl::of(url);
    let connect = super::ws_connect(url, ctx.limits.max_body, tls, headers);
    let within = ctx.limits.upstream_connect_timeout;
    let ws = match tokio::time::timeout(within, connect).await {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return format!("cannot connect to {shown}: {e}"),
        Err(_) => {
            return format!(
                "cannot connect to {shown}: no answer within {within:?} (--upstream-connect-timeout)"
            );
        }
    };
    info!(url = %shown, "upstream WebSocket connected");
    session.local_up();
    let (mut tx, mut stream) = ws.split();
    let why = {
        let write = async {
            while let Some(text) = rx.recv().await {
                // The carried octets are UTF-8 JSON (the scanner checked).
                let msg = match std::str::from_utf8(&text) {
                    Ok(_) => Message::Text(unsafe_free_utf8(text)),
                    Err(_) => Message::Binary(text),
                };
                if let Err(why) = upstream_write(ctx, "the WebSocket", tx.send(msg)).await {
                    return Some(why);
                }
            }
            None
        };
        let read = async {
            while let Some(msg) = stream.next().await {
                match msg {
                    Ok(Message::Text(t)) => session.on_local_message(Bytes::from(t)).await,
                    Ok(Message::Binary(b)) => session.on_local_message(b).await,
                    Ok(Message::Close(_)) => {
                        return "the upstream closed the WebSocket".to_owned();
                    }
                    Ok(_) => {}
                    Err(e) => return format!("reading the upstream WebSocket: {e}"),
                }
            }
            "the upstream WebSocket ended".to_owned()
        };
        tokio::select! {
            w = write => w,
            r = read => Some(r),
            _ = session.assoc().ended() => None,
        }
    };
    match why {
        Some(why) => why,
        None => {
            // The association is over: close the WebSocket with a Close
            // frame (RFC 6455 §7), briefly, rather than just dropping it.
            use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
            let close = Message::Close(Some(CloseFrame {
                code: CloseCode::Away,
                reason: "the N-PAMP association ended".into(),
            }));
            let _ = tokio::time::timeout(UPSTREAM_CLOSE_WAIT, async {
                tx.send(close).await?;
                tx.close().await
            })
            .await;
            SESSION_OVER.to_owned()
        }
    }
}

/// How long closing an upstream WebSocket may take.
const UPSTREAM_CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Text-frame payload from octets already known to be UTF-8.
fn unsafe_free_utf8(b: Bytes) -> tokio_tungstenite::tungstenite::Utf8Bytes {
    tokio_tungstenite::tungstenite::Utf8Bytes::try_from(b).unwrap_or_default()
}


/// A request that could not reach its HTTP upstream, at warn, one line per
/// 5 s at most: a dead upstream is seen at the default log level, and a
/// flood of failing requests is not a flood of lines.
fn say_unreachable(why: &str) {
    static DOWN: crate::gateway::quiet::Every = crate::gateway::quiet::Every::new();
    crate::gateway::quiet::warn_every!(
        DOWN,
        error = %why,
        "a request could not reach the upstream (one line per 5 s at most; all are counted in npamp_upstream_failures_total)"
    );
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
    use tokio::sync::Semaphore;

    use super::{Budget, Collect, collect_within, post_headers};

    /// A body of the given chunks.
    fn body(
        chunks: &[usize],
    ) -> http_body_util::StreamBody<
        impl futures_util::Stream<Item = Result<hyper::body::Frame<Bytes>, std::io::Error>>,
    > {
        let frames: Vec<_> = chunks
            .iter()
            .map(|&n| Ok(hyper::body::Frame::data(Bytes::from(vec![b'x'; n]))))
            .collect();
        http_body_util::StreamBody::new(futures_util::stream::iter(frames))
    }

    /// All of `room` (1000 octets), waited for up to 10 s.
    fn budget_of(room: &Arc<Semaphore>) -> Budget<'_> {
        Budget {
            room,
            octets: room.available_permits(),
            wait: Duration::from_secs(10),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_takes_room_for_its_octets_and_gives_it_back_when_dropped() {
        let room = Arc::new(Semaphore::new(1000));
        let budget = budget_of(&room);
        // One chunk is handed on as it came; several are joined.
        let (one, held) = collect_within(body(&[300]), 1 << 20, &budget)
            .await
            .expect("read");
        assert_eq!((one.len(), room.available_permits()), (300, 700));
        let (three, held3) = collect_within(body(&[100, 100, 100]), 1 << 20, &budget)
            .await
            .expect("read");
        assert_eq!((three.len(), room.available_permits()), (300, 400));
        drop((held, held3));
        assert_eq!(room.available_permits(), 1000);
        // Over --max-body is the body's error, as before.
        let over = collect_within(body(&[600, 600]), 1000, &budget).await;
        assert!(matches!(over, Err(Collect::Body(_))), "{over:?}");
        assert_eq!(room.available_permits(), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reply_larger_than_the_budget_reads_on_alone_and_one_without_room_is_given_up() {
        let room = Arc::new(Semaphore::new(1000));
        let budget = budget_of(&room);
        // 5000 octets hold the whole budget and read on.
        let (big, held) = collect_within(body(&[800, 800, 3400]), 1 << 20, &budget)
            .await
            .expect("read");
        assert_eq!((big.len(), room.available_permits()), (5000, 0));
        // Meanwhile another reply finds no room: given up after the wait,
        // not waiting for ever.
        let started = tokio::time::Instant::now();
        let starved = collect_within(body(&[10]), 1 << 20, &budget).await;
        assert!(matches!(starved, Err(Collect::NoRoom)), "{starved:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        // Room given back lets the next one through at once.
        drop(held);
        let (small, _held) = collect_within(body(&[10]), 1 << 20, &budget)
            .await
            .expect("read");
        assert_eq!(small.len(), 10);
    }

    fn host(uri: &str, extra: &[(&str, &str)]) -> (Vec<String>, Vec<String>) {
        let extra: Vec<_> = extra
            .iter()
            .map(|(n, v)| {
                (
                    HeaderName::from_bytes(n.as_bytes()).expect("name"),
                    HeaderValue::from_str(v).expect("value"),
                )
            })
            .collect();
        let map = post_headers(&uri.parse().expect("uri"), &extra);
        let all = |name| {
            map.get_all(name)
                .iter()
                .map(|v| v.to_str().expect("ascii").to_owned())
                .collect()
        };
        (all(HOST), all(CONTENT_TYPE))
    }

    #[test]
    fn host_is_written_once_as_the_client_would_and_given_headers_win() {
        let json = vec!["application/json".to_owned()];
        for (uri, want) in [
            ("http://127.0.0.1:8545/", "127.0.0.1:8545"),
            ("http://rpc.example/v3/KEY", "rpc.example"),
            ("http://rpc.example:80/", "rpc.example"),
            ("https://rpc.example:443/", "rpc.example"),
            ("https://rpc.example:8443/", "rpc.example:8443"),
            ("http://[::1]:9000/", "[::1]:9000"),
            ("http://user:pass@rpc.example:81/", "rpc.example:81"),
            // A Unix socket's URI carries the path in hex as its host.
            ("http+unix://2f72756e2f6170702e736f636b/rpc", "localhost"),
        ] {
            assert_eq!(
                host(uri, &[]),
                (vec![want.to_owned()], json.clone()),
                "{uri}"
            );
        }
        let given = host(
            "http://127.0.0.1:1/",
            &[
                ("host", "rpc.example"),
                ("content-type", "application/json-rpc"),
            ],
        );
        assert_eq!(
            given,
            (
                vec!["rpc.example".to_owned()],
                vec!["application/json-rpc".to_owned()]
            )
        );
    }
}
