//! HTTP JSON-RPC upstreams (`http://`, `https://`, `http+unix://`), request
//! by request: each request is one POST on a pooled keep-alive HTTP/1.1
//! connection, driven by the request's own task ([`Role::OriginStateless`]);
//! its reply goes back on the request's correlation_id. Several make a
//! group, with routes ([`Group`]): the best member a request's method may go
//! to is chosen, then another while the failure allows.
//!
//! An upstream that cannot be reached, refuses, or does not answer in time
//! is answered with BRIDGE_ERROR NotDelivered: never a fabricated success or
//! JSON-RPC error.
//!
//! [`Role::OriginStateless`]: crate::relay::Role::OriginStateless

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::debug;

use super::group::{Group, Member, PostFailed, Single};
use super::http_client::{host_override, parse_unix_url};
use super::pool::{Pool, PostError};
use super::{Address, Delivery, Env, Kind, Plan};
use crate::assoc::error::error_chain;
use crate::bridge::ProtocolId;
use crate::gateway::carry::in_flight_full;
use crate::gateway::context::Ctx;
use crate::gateway::exec::Exec;
use crate::gateway::forward::passthrough;
use crate::gateway::policy::carry::{Action, Carry, Ended, Next};
use crate::gateway::policy::health;
use crate::gateway::policy::race::Slot;
use crate::jsonrpc::{Kind as Message, Scanned, scan};
use crate::relay::{Attached, MAY_HAVE_EXECUTED, ToServe};
use crate::shard::PerShard;

/// HTTP JSON-RPC, for every protocol but MCP (whose HTTP upstreams hold
/// sessions: [`super::mcp_http`]).
pub struct Http;

impl Kind for Http {
    fn name(&self) -> &'static str {
        "http"
    }

    fn parse(&self, url: &str) -> Option<Result<Address, String>> {
        let uri = parse_unix_url(url).or_else(|| super::uri_of(url, &["http", "https"]))?;
        Some(uri.map(Address::Uri))
    }

    fn takes(&self, address: &Address, protocol: ProtocolId) -> bool {
        matches!(address, Address::Uri(_)) && protocol != ProtocolId::MCP
    }

    fn takes_headers(&self) -> bool {
        true
    }

    fn takes_credentials(&self) -> bool {
        true
    }

    fn delivery(&self) -> Delivery {
        Delivery::Requests
    }
}

/// How long an idle keep-alive connection to an HTTP upstream is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why a gateway without an upstream does not deliver a request.
pub const NO_UPSTREAM: &str = "this gateway has no upstream (--upstream or --upstream-cmd)";

/// The group of HTTP upstreams (`--upstream` repeated, `--route`), if the
/// configuration has one, shown in the metrics, and its members' URLs in
/// its order.
fn group_of(ctx: &Ctx, config: &Plan) -> Option<(Arc<Group>, Vec<hyper::Uri>)> {
    if config.group.is_empty() && config.routes.is_empty() {
        return None;
    }
    let mut uris = config.group.clone();
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
            post_headers: post_headers(uri, &config.headers),
            uri: uri.clone(),
            health: Default::default(),
        })
        .collect();
    let default = config.group.len();
    let group = Arc::new(Group::new(
        members,
        default,
        routes,
        ctx.limits.retry_budget,
    ));
    ctx.metrics.show(group.clone());
    Some((group, uris))
}

/// What serves an origin's requests one by one: its HTTP upstream, or the
/// group's members, or nothing (each request is then answered
/// NotDelivered, saying why).
pub struct Requests {
    ctx: Arc<Ctx>,
    /// The connections to each HTTP upstream a request is POSTed to (the
    /// `--upstream` alone, or the group's members, in the group's order),
    /// one set per shard: a request drives the connection it takes on its
    /// own thread, and no other shard touches it.
    pools: PerShard<Box<[Pool]>>,
    /// The room under `--max-in-flight` (the origin's, shared).
    pub permits: Arc<Semaphore>,
    /// The octets of HTTP replies read and not yet sealed for the peer:
    /// `--memory-budget` of them in all (see [`collect_within`]).
    replies: Arc<Semaphore>,
    /// What every POST to the one HTTP upstream carries, built once (see
    /// [`post_headers`]).
    post_headers: hyper::HeaderMap,
    /// Several HTTP upstreams, or routes (`None`: the upstream alone).
    group: Option<Arc<Group>>,
    /// The one HTTP upstream's health, for `/readyz` (with no group).
    single: Arc<Single>,
    /// How the upstreams are reached: for their protected-resource
    /// metadata, fetched when one refuses a forwarded credential.
    connector: super::http_client::Connector,
}

impl Requests {
    /// For `config`'s upstreams when they are served request by request;
    /// else one that answers every request NotDelivered.
    pub fn new(env: &Env, config: &Plan) -> Self {
        let ctx = &env.ctx;
        let protocol = ctx.protocol;
        let per_request = config.upstream.as_ref().filter(|u| u.per_request(protocol));
        let single_uri = per_request.and_then(|u| u.http_uri());
        let group = per_request.and_then(|_| group_of(ctx, config));
        let posted_to = match (&group, single_uri) {
            (Some((_, uris)), _) => uris.clone(),
            (None, Some(uri)) => vec![uri.clone()],
            (None, None) => Vec::new(),
        };
        let max_idle = ctx.limits.max_in_flight.min(1024);
        let pools = PerShard::new(ctx.shards.as_deref(), || {
            (posted_to.iter())
                .map(|uri| Pool::new(env.connector.clone(), uri.clone(), max_idle, IDLE_TIMEOUT))
                .collect()
        });
        let single = Arc::new(Single::starting(Instant::now()));
        if group.is_none() && !posted_to.is_empty() {
            ctx.metrics.show(single.clone());
        }
        Self {
            ctx: ctx.clone(),
            pools,
            permits: env.permits.clone(),
            replies: Arc::new(Semaphore::new(reply_budget(ctx))),
            post_headers: single_uri
                .map_or_else(hyper::HeaderMap::new, |uri| post_headers(uri, &env.headers)),
            group: group.map(|(group, _)| group),
            single,
            connector: env.connector.clone(),
        }
    }

    /// Serves one request or notification of the peer: waits for room
    /// under `--max-in-flight` (backpressure, for as long as a stalled party
    /// may hold a reader up, less what it was held before), posts it, and
    /// tells the exchange what came of it.
    pub async fn serve(
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
            time_left,
            attached,
        } = request;
        // The exchange's deadline for it, on tokio's clock (paused in
        // tests): every try ends by then.
        let deadline = tokio::time::Instant::now() + time_left;
        let authorization = match attached {
            Some(Attached::Authorization(a)) => Some(a),
            Some(Attached::HttpRequest(wire)) => {
                let room = match room {
                    Some(p) => Some(p),
                    None => tokio::time::timeout(wait, self.permits.clone().acquire_owned())
                        .await
                        .ok()
                        .and_then(Result::ok),
                };
                return self.pass(exec, corr, (text, wire), room, deadline).await;
            }
            _ => None,
        };
        // Kept for a refusal's answer, which names the request's id.
        let request_text = authorization.as_ref().map(|_| text.clone());
        let permit = match room {
            Some(p) => Ok(Ok(p)),
            None => tokio::time::timeout(wait, self.permits.clone().acquire_owned()).await,
        };
        let notification = corr.is_none();
        let (outcome, _room) = match permit {
            // Its deadline passed while it waited for room: the exchange has
            // answered it, so it is not sent (it would run for nobody).
            Ok(Ok(_)) if tokio::time::Instant::now() >= deadline => (
                Err(format!(
                    "not sent: the request's time ({:?}, --request-timeout) ran out while it waited for room at the upstream",
                    ctx.limits.request_timeout
                )),
                None,
            ),
            Ok(Ok(_permit)) => {
                self.post(
                    text,
                    authorization.as_ref(),
                    resend_safe,
                    notification,
                    deadline,
                )
                .await
            }
            Ok(Err(_)) => return,
            Err(_) => (Err(in_flight_full(ctx)), None),
        };
        // The reply's octets count until it is sealed for the peer, when
        // `with` returns (`_room` is dropped after).
        self.answer(exec, corr, outcome, request_text, deadline)
            .await;
    }

    /// Tells the exchange what a request came to (a reply, the upstream's
    /// refusal of the credential forwarded with `request`, or why there is
    /// none); counts what a notification came to.
    async fn answer(
        &self,
        exec: Arc<Exec<()>>,
        corr: Option<crate::relay::Corr>,
        outcome: Result<Posted, String>,
        request: Option<Bytes>,
        deadline: tokio::time::Instant,
    ) {
        let ctx = &self.ctx;
        match corr {
            Some(corr) => {
                let mut attached = None;
                let served = match outcome {
                    Ok(Posted::Refused(status, challenge, upstream)) => {
                        let (map, metadata) =
                            self.metadata_for(&challenge, &upstream, deadline).await;
                        let wire = crate::gateway::forward::encode_challenge(
                            status, map, &challenge, &metadata,
                        );
                        attached = Some(Attached::Challenge(wire));
                        let request = request.as_deref().unwrap_or_default();
                        refused_reply(request, status, &ctx.peer_scan)
                    }
                    Ok(Posted::Reply(text, kind)) => Ok((text, kind)),
                    // post() reads a request's answer as a reply, always.
                    Ok(Posted::Taken) => {
                        Err("the upstream's answer was not read as a reply".into())
                    }
                    Err(e) => Err(e),
                };
                exec.with(|x, now| x.served_with(now, &corr, served, attached))
                    .await;
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
    /// budget. Every try ends by `deadline`.
    async fn post(
        &self,
        text: Bytes,
        authorization: Option<&Bytes>,
        resend_safe: bool,
        notification: bool,
        deadline: tokio::time::Instant,
    ) -> (Result<Posted, String>, Option<OwnedSemaphorePermit>) {
        let mut room = None;
        let headers = &self.post_headers;
        let failed = match &self.group {
            None => match self.pools.get().first() {
                Some(pool) => match self
                    .post_to(
                        pool,
                        headers,
                        (text, authorization),
                        notification,
                        deadline,
                        &mut room,
                    )
                    .await
                {
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
                let posted = self.post_grouped(
                    group,
                    (text, authorization),
                    resend_safe,
                    notification,
                    deadline,
                    &mut room,
                );
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

    /// [`Requests::post`] over the group: the policy's [`Carry`] says which
    /// member each try goes to and whether a failed one goes on (the best
    /// member the request's method may go to, then others while the
    /// failure allows). A notification's answer, or its absence, says
    /// nothing of a member's health; only a connection that could not be
    /// made does.
    async fn post_grouped(
        &self,
        group: &Group,
        (text, authorization): (Bytes, Option<&Bytes>),
        resend_safe: bool,
        notification: bool,
        deadline: tokio::time::Instant,
        room: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Posted, PostFailed> {
        let allowed = self.candidates(group, &text);
        let mut carry = Carry::new(group, allowed, None);
        let mut steps = carry.start(Instant::now());
        let mut last = None;
        // Until the policy answers (with the last try's end) or finds no
        // member.
        while let Some(Action::Try { member, .. }) = steps.into_iter().next() {
            // A pool for each member, in the group's order (`Requests::new`).
            let (m, Some(pool)) = (&group.members[member], self.pools.get().get(member)) else {
                break;
            };
            // Past the deadline the exchange has answered it: no member is
            // tried (and judged) for what nobody waits for.
            if last.is_some() && tokio::time::Instant::now() >= deadline {
                break;
            }
            let r = self
                .post_to(
                    pool,
                    &m.post_headers,
                    (text.clone(), authorization),
                    notification,
                    deadline,
                    room,
                )
                .await;
            let ended = grouped_end(&r, notification);
            last = Some(r);
            steps = carry.ended(Instant::now(), Slot::First, ended, || resend_safe);
        }
        last.unwrap_or_else(|| Err(PostFailed::NotSent("no upstream takes this method".into())))
    }

    /// The members that may take the request: its method's route's.
    fn candidates(&self, group: &Group, text: &Bytes) -> u64 {
        if !group.has_routes() {
            return group.candidates(None);
        }
        match scan(text, &self.ctx.scan) {
            Ok(Scanned::Single(
                Message::Request { method, .. } | Message::Notification { method },
            )) => {
                let name = crate::jsonrpc::carriage::method_of(text, &method);
                group.candidates(name.as_deref())
            }
            _ => group.candidates(None),
        }
    }

    /// One POST to the HTTP upstream `pool` connects to. A notification's
    /// answer (204, or 200 with a body or none) is read and let go, not
    /// taken for a reply; only a request's time to its answer is observed
    /// as the upstream's latency. Ends at `deadline`, the exchange's: a
    /// request not answered by then is not sent again.
    async fn post_to(
        &self,
        pool: &Pool,
        headers: &hyper::HeaderMap,
        (text, authorization): (Bytes, Option<&Bytes>),
        notification: bool,
        deadline: tokio::time::Instant,
        room: &mut Option<OwnedSemaphorePermit>,
    ) -> Result<Posted, PostFailed> {
        let uri = pool.uri();
        let ctx = &self.ctx;
        // tokio's clock, as the deadline's (paused in tests).
        let started = tokio::time::Instant::now();
        // What clients are told never holds the URL's secrets (made only
        // when there is something to tell).
        let shown = || crate::gateway::redact::PublicUrl::of_uri(uri);
        let limit = ctx.limits.max_body;
        // Boxed: the exchange with the upstream is most of a request task's
        // state (1 048 of 2 208 octets, and more for what holds it), which
        // is copied whole each time a future holding it is moved: as it is
        // made, spawned, and ended.
        let exchange = Box::pin(async {
            let req = post_request(text, headers, authorization);
            let budget = Budget {
                room: &self.replies,
                octets: reply_budget(ctx),
                wait: ctx.limits.stall_timeout,
            };
            let read = async |resp: hyper::Response<hyper::body::Incoming>| {
                let status = resp.status();
                if authorization.is_some()
                    && let Some(challenge) = refusal_of(&resp)
                {
                    return Ok((status, Err(challenge)));
                }
                let (body, held) = collect_within(resp.into_body(), limit, &budget)
                    .await
                    .map_err(|e| {
                        PostFailed::Final(match e {
                            Collect::Body(e) => {
                                crate::gateway::carry::reading_reply_failed(&shown(), &*e, limit)
                            }
                            Collect::NoRoom => reply_budget_full(&shown(), ctx),
                        })
                    })?;
                *room = held;
                Ok::<_, PostFailed>((status, Ok(body)))
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
        let result = tokio::time::timeout_at(deadline, exchange).await;
        if !notification && matches!(result, Ok(Ok(_))) {
            ctx.metrics.upstream_latency.observe(started.elapsed());
        }
        let (status, body) = result.map_err(|_| {
            PostFailed::Final(format!(
                "upstream {} did not answer within the request's time ({:?}, --request-timeout)",
                shown(),
                ctx.limits.request_timeout
            ))
        })??;
        if notification {
            return Ok(Posted::Taken);
        }
        match body {
            Ok(body) => reply_in(ctx, &shown(), status, body),
            Err(challenge) => Ok(Posted::Refused(status.as_u16(), challenge, uri.clone())),
        }
    }

    /// An HTTP request for the upstream's authorization endpoints an edge
    /// carried (`--forward-authorization`), made to the (first) upstream's
    /// scheme and authority; its answer goes back beside the reply to
    /// `text` ([`passthrough`]).
    /// It takes room under `--max-in-flight` as any request (`room`: none
    /// was had within its wait).
    async fn pass(
        &self,
        exec: Arc<Exec<()>>,
        corr: Option<crate::relay::Corr>,
        (text, wire): (Bytes, Bytes),
        room: Option<OwnedSemaphorePermit>,
        deadline: tokio::time::Instant,
    ) {
        use passthrough::Crossing;
        let Some(corr) = corr else { return };
        let upstream = self.pools.get().first().map(|p| p.uri().clone());
        let answer = match (upstream, room) {
            (Some(up), Some(_room)) => {
                let send = |req, room| self.send_passed(req, room);
                passthrough::pass(&wire, &up, host_override(&up), deadline, send).await
            }
            (Some(_), None) => Crossing::failed(503, &in_flight_full(&self.ctx))
                .encode()
                .unwrap_or_default(),
            (None, _) => Crossing::failed(502, "no HTTP upstream")
                .encode()
                .unwrap_or_default(),
        };
        let served = passthrough::reply_to(&text, &answer, &self.ctx.peer_scan);
        let attached = Some(Attached::HttpResponse(answer));
        exec.with(|x, now| x.served_with(now, &corr, served, attached))
            .await;
    }

    /// One request to an upstream's authorization endpoint, its answer's
    /// body read up to `room`.
    async fn send_passed(
        &self,
        req: hyper::Request<Full<Bytes>>,
        room: usize,
    ) -> Result<(u16, hyper::HeaderMap, Bytes), String> {
        // A connection of its own: these are few (a client's authorization).
        let pool = Pool::new(self.connector.clone(), req.uri().clone(), 0, IDLE_TIMEOUT);
        let read = async |resp: hyper::Response<hyper::body::Incoming>| {
            let (head, body) = resp.into_parts();
            let body = Limited::new(body, room).collect().await;
            let body = body.map_err(|e| format!("its answer: {e}"))?.to_bytes();
            Ok::<_, String>((head.status.as_u16(), head.headers, body))
        };
        match pool.exchange(req, read).await {
            Ok(answer) => answer,
            Err(PostError::NotSent(e)) => Err(format!("not sent: {}", error_chain(&*e))),
            Err(PostError::Exchange(e)) => Err(error_chain(&e)),
        }
    }

    /// The protected-resource metadata (RFC 9728) of the upstream at
    /// `upstream` that refused with `challenge`, and how its `resource`
    /// maps ([`crate::gateway::forward::MetadataCache`]).
    async fn metadata_for(
        &self,
        challenge: &[u8],
        upstream: &hyper::Uri,
        deadline: tokio::time::Instant,
    ) -> (u8, Bytes) {
        use crate::gateway::forward::MAX_METADATA;
        let get = |uri: hyper::Uri| async move {
            let host = uri
                .authority()
                .and_then(|a| hyper::header::HeaderValue::from_str(a.as_str()).ok());
            let pool = Pool::new(self.connector.clone(), uri, 0, IDLE_TIMEOUT);
            let mut req = hyper::Request::new(Full::new(Bytes::new()));
            if let Some(host) = host {
                req.headers_mut().insert(hyper::header::HOST, host);
            }
            let read = async |resp: hyper::Response<hyper::body::Incoming>| {
                if !resp.status().is_success() {
                    return None;
                }
                let body = Limited::new(resp.into_body(), MAX_METADATA).collect().await;
                body.ok().map(|b| b.to_bytes())
            };
            pool.exchange(req, read).await.ok().flatten()
        };
        self.ctx
            .upstream_metadata
            .fetch(challenge, upstream, deadline, get)
            .await
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
        Ok(Scanned::Single(k @ (Message::Success { .. } | Message::Error { .. }))) => {
            Ok(Posted::Reply(body, k))
        }
        _ => Err(PostFailed::Final(format!(
            "upstream {shown} answered HTTP {status} without a JSON-RPC response ({} octets)",
            body.len()
        ))),
    }
}

/// The POST of `text` with `headers`, and the `authorization` the edge
/// forwarded, if any ([`present`]).
fn post_request(
    text: Bytes,
    headers: &hyper::HeaderMap,
    authorization: Option<&Bytes>,
) -> hyper::Request<Full<Bytes>> {
    let mut req = hyper::Request::new(Full::new(text));
    *req.method_mut() = hyper::Method::POST;
    *req.headers_mut() = headers.clone();
    if let Some(a) = authorization {
        crate::gateway::forward::present(req.headers_mut(), a);
    }
    req
}

/// The challenge of an upstream's refusal of a forwarded credential (401
/// or 403 with `WWW-Authenticate`). Its body is the upstream's word to the
/// client, not a reply: the status and the challenge say it all.
fn refusal_of<B>(resp: &hyper::Response<B>) -> Option<Bytes> {
    if !matches!(resp.status().as_u16(), 401 | 403) {
        return None;
    }
    let challenge = resp.headers().get(hyper::header::WWW_AUTHENTICATE)?;
    Some(Bytes::copy_from_slice(challenge.as_bytes()))
}

/// The reply to a request whose forwarded credential the upstream refused
/// with `status`: a JSON-RPC error (-32012) with the request's id, which
/// the edge answers with that status and the upstream's challenge.
fn refused_reply(
    request: &[u8],
    status: u16,
    limits: &crate::jsonrpc::Limits,
) -> Result<(Bytes, Message), String> {
    let id = match scan(request, limits) {
        Ok(Scanned::Single(Message::Request { id, .. })) => request.get(id.token),
        _ => None,
    };
    let text: Bytes = crate::gateway::forward::refused_reply(id, status).into();
    match scan(&text, limits) {
        Ok(Scanned::Single(kind)) => Ok((text, kind)),
        _ => Err(format!(
            "the upstream refused the credential (HTTP {status})"
        )),
    }
}

/// What one POST to the HTTP upstream came to.
enum Posted {
    /// A request's reply: one JSON-RPC response, scanned.
    Reply(Bytes, Message),
    /// The upstream refused the credential the edge forwarded (401 or
    /// 403): the status, its `WWW-Authenticate`, and the upstream's URL.
    Refused(u16, Bytes, hyper::Uri),
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

/// How a POST to a member ended, for the policy: a reply or a notification
/// taken answers; a connection not made goes on as it is; a connection
/// that failed after sending goes on only when that cannot execute it
/// twice; what the upstream answered, or did not answer in time, is final.
fn grouped_end(r: &Result<Posted, PostFailed>, notification: bool) -> Ended {
    let (next, outcome) = match r {
        // A refusal of the client's credential is an answer: the member
        // is well, and another would refuse it too.
        Ok(Posted::Reply(..) | Posted::Refused(..)) => {
            (Next::Reply, health::Outcome::Replied(Duration::ZERO))
        }
        Ok(Posted::Taken) => (Next::Reply, health::Outcome::Neutral),
        Err(PostFailed::Final(_)) if notification => (Next::Final, health::Outcome::Neutral),
        Err(PostFailed::Final(_)) => (Next::Final, health::Outcome::NotDelivered),
        Err(PostFailed::NotSent(why)) => {
            say_unreachable(why);
            (Next::NotSent, health::Outcome::Unreachable)
        }
        Err(PostFailed::Unknown(why)) => {
            say_unreachable(why);
            (Next::IfResendSafe, health::Outcome::Unreachable)
        }
    };
    Ended { next, outcome }
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
