//! The HTTP ingress (`http://`): one JSON-RPC request, notification or
//! batch per POST body, carried over the pool of associations; with
//! `--protocol mcp`, MCP's Streamable HTTP sessions ([`super::mcp`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tracing::debug;

use super::body::{BodyError, connection_share, read_body};
use super::browser::{Caller, Reach};
use super::conn::Opening;
use super::mcp::McpSessions;
use super::response::{HttpResponse, Served, empty_response, json_response, status_only};
use super::{Clients, Conn, Kind, Refusal, authenticate, stopped};
use crate::gateway::context::Ctx;
use crate::gateway::edge::Edge;
use crate::gateway::edge::answer::{Answer, answer_batch, answer_one};
use crate::gateway::gated::Gated;
use crate::gateway::metrics::ReplyClass;
use crate::gateway::stall::{Requests, idle, stalled};
use crate::jsonrpc::carriage::{id_of, local_error, scan_error_response};
use crate::jsonrpc::{ScanError, Scanned, scan};
use crate::relay::{Failure, Shared};

/// `http://` and `https://`: JSON-RPC over HTTP POST (HTTP/1.1, and
/// HTTP/2 by ALPN over TLS or by prior knowledge in plaintext), stateless
/// over the pool of associations (MCP's Streamable HTTP sessions with
/// `--protocol mcp`).
pub struct Http;

impl Kind for Http {
    fn scheme(&self) -> &'static str {
        "http"
    }

    fn tls_scheme(&self) -> &'static str {
        "https"
    }

    fn unix_scheme(&self) -> Option<&'static str> {
        Some("unix")
    }

    fn alpn(&self) -> &'static [&'static [u8]] {
        &[b"h2", b"http/1.1"]
    }

    fn carries_tokens(&self) -> bool {
        true
    }

    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()> {
        Box::pin(serve(clients, edge))
    }
}

async fn serve(clients: Clients, edge: Arc<Edge>) {
    let limits = &edge.ctx.limits;
    let mcp = Arc::new(McpSessions::new(
        limits.max_connections,
        limits.max_sessions_per_client,
        limits.memory_budget,
    ));
    let shutdown = clients.shutdown();
    let opening = Opening {
        first_octet: true,
        session: false,
    };
    clients
        .each(opening, move |conn| {
            connection(conn, edge.clone(), mcp.clone(), shutdown.clone())
        })
        .await;
}

/// Serves one HTTP connection (HTTP/1.1 or HTTP/2) until the client goes,
/// shutdown, or the client stops taking its replies.
async fn connection(conn: Conn, edge: Arc<Edge>, mcp: Arc<McpSessions>, shutdown: super::Shutdown) {
    let Conn {
        stream,
        moved,
        from,
        certificate,
        permit,
    } = conn;
    let reach = stream.reach();
    // Requests in service, for the idle rule below. A request's service
    // begins when hyper has read its head, and ends when its reply's body
    // is dropped (written to the last octet, or given up).
    let requests = Requests::new();
    let limits = &edge.ctx.limits;
    let share = Arc::new(connection_share(limits.max_body, limits.memory_budget));
    let service = hyper::service::service_fn(|req| {
        let serving = requests.begin();
        let (edge, mcp) = (edge.clone(), mcp.clone());
        let client = Remote {
            from,
            certificate,
            reach,
            share: share.clone(),
        };
        async move {
            let response = handle_http(req, &edge, &mcp, client).await;
            Ok::<_, Infallible>(response.map(|body| Served::new(body, serving)))
        }
    });
    let stall = edge.ctx.limits.stall_timeout;
    let builder = http_builder(limits);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    // What ends a connection besides its client, polled only when one of
    // its own timers or the shutdown wakes it, not at each of the
    // connection's wake-ups (one or more per request):
    // - shutdown;
    // - idle: no request in service, and none begun, for the stall timeout
    //   since the last one ended or the connection opened (an idle
    //   keep-alive connection, headers trickled, a client that never asks);
    // - stalled: a client that takes no octet of its reply for the stall
    //   timeout (hyper has no write timeout of its own).
    let watchdog = Gated::new(async {
        tokio::select! {
            _ = stopped(shutdown) => Ended::Shutdown,
            () = idle(&requests, &moved, stall) => Ended::Idle,
            () = stalled(&moved, stall) => Ended::Stalled,
        }
    });
    // The connection first: a request whose head has arrived is read, and
    // begins its service, before an idle connection is given up.
    let result = tokio::select! {
        biased;
        r = conn.as_mut() => r,
        ended = watchdog => match ended {
            Ended::Shutdown => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
            why => {
                given_up(&edge.ctx, from, why);
                Ok(())
            }
        }
    };
    if let Err(e) = result {
        debug!(%from, error = %e, "HTTP connection ended");
    }
    drop(permit);
}

/// Counts and logs a connection the watchdog ended: idle, or stalled.
fn given_up(ctx: &Ctx, from: super::Peer, why: Ended) {
    ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
    if matches!(why, Ended::Idle) {
        debug!(%from, "HTTP connection with no request for the stall timeout: closing it");
        return;
    }
    static STALLED: crate::gateway::quiet::Every = crate::gateway::quiet::Every::new();
    crate::gateway::quiet::warn_every!(
        STALLED,
        %from,
        "HTTP client took no octet of its reply for {:.1} s (--stall-timeout): dropping it (one line per 5 s at most; all are counted in npamp_stalled_clients_total)",
        ctx.limits.stall_timeout.as_secs_f64()
    );
}

/// The HTTP/1.1 and HTTP/2 settings every connection is served with.
fn http_builder(limits: &crate::gateway::settings::Limits) -> auto::Builder<TokioExecutor> {
    let stall = limits.stall_timeout;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No header-read timer of hyper's: it costs a timer armed and cleared
    // per request. The idle rule (`connection`) covers what it did (a head not
    // complete within the stall timeout, an idle keep-alive connection),
    // over HTTP/2 as well, with one timer per connection.
    // A request head of HTTP/1.1 within HTTP/2's header list limit (16 KiB,
    // 431 past it) and a little for the request line, not hyper's 400 KB.
    // An HTTP/2 connection is one client, as a session client is: at most
    // --max-in-flight-per-connection requests (streams) at once, each of
    // whose bodies being read is budgeted (`body.rs`).
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .max_buf_size(MAX_HEAD);
    // HTTP/2 keep-alive, on hyper's own timers: a connection silent for
    // the stall timeout gets a PING, and one whose client does not answer
    // it within the stall timeout more is closed: a client gone without a
    // FIN (a sleeping laptop, a dropped NAT mapping) no longer holds its
    // streams (an MCP GET stream, a long call) until they end of
    // themselves. The answers do not make a connection busy: idle is no
    // request in service (`stall::idle`). It costs an uncontended lock and
    // a clock read per frame read.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(stall))
        .keep_alive_timeout(stall)
        .max_concurrent_streams(
            u32::try_from(limits.max_in_flight_per_connection).unwrap_or(u32::MAX),
        );
    builder
}

/// The most an HTTP/1.1 request head may take while it is read (hyper's
/// read buffer, so it answers 431 past it): HTTP/2's 16 KiB of header list
/// and 4 KiB for the request line. A head that came whole in one read is
/// held to [`MAX_HEADER_LIST`] after.
const MAX_HEAD: usize = 20 << 10;

/// The most a request's headers may take, counted as HTTP/2 counts its
/// header list (each name and value and 32 octets): hyper's HTTP/2 limit.
const MAX_HEADER_LIST: usize = 16 << 10;

/// A request's headers as HTTP/2 counts them (RFC 9113 §6.5.2).
fn header_list_size(headers: &hyper::HeaderMap) -> usize {
    headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 32)
        .sum()
}

/// Why a connection's watchdog ended it.
enum Ended {
    Shutdown,
    Idle,
    Stalled,
}

/// 400 `HeaderMismatch` (-32020) for an MCP POST whose `Mcp-Method`,
/// `Mcp-Name` or `MCP-Protocol-Version` disagree with its body, or a
/// request of MCP's stateless revision without them, as its servers refuse
/// it (the headers let routing and policy go by them, so they must be the
/// body's).
fn header_mismatch(
    ctx: &Ctx,
    headers: &hyper::HeaderMap,
    body: &Bytes,
    kind: &crate::jsonrpc::Kind,
) -> Option<HttpResponse> {
    let why = crate::gateway::mcp_headers::mismatch(headers, body)?;
    ctx.metrics.reply(ReplyClass::Invalid);
    let id = id_of(kind).map(|id| &body[id.token.clone()]);
    let message = format!("Header mismatch: {why}");
    let error = local_error(
        id,
        crate::gateway::mcp_headers::HEADER_MISMATCH,
        &message,
        None,
    );
    Some(json_response(400, error))
}

/// 401 for a client without an accepted bearer token.
/// A client not let in: its status, its challenge, and a JSON-RPC error
/// saying why (-32012; -32011 Unavailable when tokens cannot be checked).
fn refused(r: Refusal) -> HttpResponse {
    if r.status == 503 {
        let f = crate::relay::Failure::Unavailable(r.why);
        return json_response(f.http_status(), f.response(None));
    }
    let mut resp = json_response(r.status, local_error(None, UNAUTHORIZED_CODE, &r.why, None));
    if let Some(value) = r.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut()
            .insert(hyper::header::WWW_AUTHENTICATE, value);
    }
    resp
}

/// The resource's metadata (RFC 9728), on an OAuth edge: what a client
/// reads to find where to get a token. Open to all, as a challenge names it.
async fn protected_resource<B>(edge: &Arc<Edge>, req: &Request<B>) -> Option<HttpResponse> {
    let ctx = &edge.ctx;
    if req.method() != hyper::Method::GET {
        return None;
    }
    if let Some(f) = &ctx.forwarding {
        let path = req.uri().path();
        let Some(kept) = f.metadata_at(path) else {
            // Another well-known document: not this edge's to give, nor the
            // pair's to carry (an authorization server's is carried, below).
            return (path.starts_with("/.well-known/") && !f.passes(path))
                .then(|| status_only(StatusCode::NOT_FOUND, "no such document here"));
        };
        if let Some(doc) = kept {
            return Some(json_response(200, doc));
        }
        // None yet: a request without a credential asks the upstream, whose
        // refusal brings it (MCP clients may look before any request).
        if f.wants_probe() {
            probe(edge).await;
        }
        return Some(match f.metadata_at(path).flatten() {
            Some(doc) => json_response(200, doc),
            None => status_only(
                StatusCode::NOT_FOUND,
                "the upstream gives no protected-resource metadata",
            ),
        });
    }
    let live = ctx.live();
    let oauth = live.oauth.as_ref()?;
    if !oauth.serves_metadata_at(req.uri().path()) {
        return None;
    }
    Some(json_response(200, oauth.spec().metadata()))
}

/// A request without a credential (`ping`), carried to the upstream for the
/// refusal that brings its protected-resource metadata
/// (`--forward-authorization`).
async fn probe(edge: &Arc<Edge>) {
    let text =
        Bytes::from_static(br#"{"jsonrpc":"2.0","id":"npamp-metadata-probe","method":"ping"}"#);
    let Ok(Scanned::Single(kind)) = scan(&text, &edge.ctx.scan) else {
        return;
    };
    let attached = Some(crate::relay::Attached::Authorization(Bytes::new()));
    if let Answer::Challenged(_, challenge) = answer_one(edge, text, kind, attached).await
        && let Some(f) = &edge.ctx.forwarding
    {
        let _ = f.answer(&challenge);
    }
}

/// A request for the upstream's authorization endpoints (the MCP
/// 2025-03-26 layout), carried to the origin beside a request of the
/// edge's own, and the upstream's answer (`--forward-authorization`;
/// [`passthrough`]).
async fn pass(
    edge: &Arc<Edge>,
    f: &crate::gateway::forward::Forwarding,
    req: Request<hyper::body::Incoming>,
    client: &Remote,
    key: super::limit::ClientKey,
) -> HttpResponse {
    use crate::gateway::forward::passthrough::{Crossing, MAX_REQUEST_BODY, Passed};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let ctx = &edge.ctx;
    if let Some(r) = refuse_passed_head(&req) {
        return closing_if_body(req.headers(), r);
    }
    let (parts, body) = req.into_parts();
    let body = match read_request_body(ctx, &parts.headers, body, client).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    if let Some(f) = super::client::over_rate_limit(ctx, key, body.len(), || 1) {
        return rate_limited(&f, None);
    }
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let crossing = Crossing::request(&parts.method, target, &parts.headers, body);
    let Some(wire) = crossing
        .encode()
        .filter(|_| crossing.body.len() <= MAX_REQUEST_BODY)
    else {
        let why = format!(
            "an authorization request is carried with a body up to {MAX_REQUEST_BODY} octets, and headers that fit beside it"
        );
        return status_only(StatusCode::PAYLOAD_TOO_LARGE, &why);
    };
    let n = NEXT.fetch_add(1, Relaxed);
    let text = Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":"npamp-http-{n}","method":"npamp/authorization-server"}}"#
    ));
    let Ok(Scanned::Single(kind)) = scan(&text, &ctx.scan) else {
        return status_only(StatusCode::INTERNAL_SERVER_ERROR, "the edge's own request");
    };
    let attached = Some(crate::relay::Attached::HttpRequest(wire));
    let answer = match answer_one(edge, text, kind, attached).await {
        Answer::Passed(_, answer) => f.passed(parts.uri.path(), &answer),
        Answer::Failed(failure, _) => {
            return json_response(failure.http_status(), failure.response(None));
        }
        _ => None,
    };
    let Some(Passed {
        status,
        headers,
        body,
    }) = answer
    else {
        let why = "the origin brought no answer of the upstream's authorization server";
        return status_only(StatusCode::BAD_GATEWAY, why);
    };
    let mut r = json_response(status.as_u16(), body);
    r.headers_mut().remove(header::CONTENT_TYPE);
    for (name, value) in headers {
        r.headers_mut().append(name, value);
    }
    r
}

/// What an authorization request is refused for from its head alone: a
/// method other than GET and POST, a body declared over what is carried,
/// a `Transfer-Encoding` other than chunked.
fn refuse_passed_head<B>(req: &Request<B>) -> Option<HttpResponse> {
    use crate::gateway::forward::passthrough::MAX_REQUEST_BODY;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if !matches!(*req.method(), hyper::Method::GET | hyper::Method::POST) {
        let why = "an authorization endpoint takes GET and POST";
        let mut r = status_only(StatusCode::METHOD_NOT_ALLOWED, why);
        r.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static("GET, POST, OPTIONS"),
        );
        Some(r)
    } else if declared.is_some_and(|n| n > MAX_REQUEST_BODY) {
        let why =
            format!("an authorization request's body is carried up to {MAX_REQUEST_BODY} octets");
        Some(status_only(StatusCode::PAYLOAD_TOO_LARGE, &why))
    } else {
        unsupported_transfer_encoding(req.headers())
    }
}

/// The JSON-RPC error code of a 401 or 403 answer.
pub use crate::relay::UNAUTHORIZED_CODE;

/// Who is on the other end of an HTTP connection.
#[derive(Clone)]
struct Remote {
    from: super::Peer,
    certificate: Option<u64>,
    reach: Reach,
    /// What the connection's bodies being read may hold.
    share: Arc<Shared>,
}

/// The request headers a page may send (a preflight's
/// `Access-Control-Allow-Headers`).
const ALLOW_HEADERS: &str =
    "content-type, authorization, mcp-session-id, mcp-protocol-version, last-event-id";

/// The methods of an HTTP ingress: POST, and GET and DELETE for MCP
/// sessions.
fn allowed_methods(ctx: &Ctx) -> &'static str {
    if ctx.protocol == crate::bridge::ProtocolId::MCP {
        "POST, GET, DELETE, OPTIONS"
    } else {
        "POST, OPTIONS"
    }
}

/// The response headers a page may read.
fn exposed(ctx: &Ctx) -> &'static str {
    if ctx.protocol == crate::bridge::ProtocolId::MCP {
        "mcp-session-id, mcp-protocol-version, www-authenticate"
    } else {
        "www-authenticate"
    }
}

/// Browsers first: a page of a foreign origin is refused, a preflight is
/// answered, and every answer to an allowed page carries its CORS headers.
async fn handle_http(
    req: Request<hyper::body::Incoming>,
    edge: &Arc<Edge>,
    mcp: &Arc<McpSessions>,
    client: Remote,
) -> HttpResponse {
    let ctx = &edge.ctx;
    if req.version() < hyper::Version::HTTP_2 && header_list_size(req.headers()) > MAX_HEADER_LIST {
        return status_only(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!("request headers over {MAX_HEADER_LIST} octets"),
        );
    }
    let caller = ctx
        .live()
        .browsers
        .caller(req.headers(), req.uri(), client.reach);
    let mut r = match &caller {
        Caller::ForeignHost(host) => {
            ctx.metrics.foreign_hosts.fetch_add(1, Relaxed);
            debug!(host, "HTTP request for a host name not allowed refused");
            return status_only(StatusCode::FORBIDDEN, &Caller::host_refusal(host));
        }
        Caller::Foreign(origin) => {
            ctx.metrics.foreign_origins.fetch_add(1, Relaxed);
            debug!(
                origin,
                "HTTP request from a page of a foreign origin refused"
            );
            return status_only(StatusCode::FORBIDDEN, &Caller::refusal(origin));
        }
        _ if req.method() == hyper::Method::OPTIONS => preflight(ctx, &req),
        _ => answer(req, edge, mcp, client).await,
    };
    caller.decorate(r.headers_mut(), exposed(ctx));
    r
}

/// The answer to OPTIONS: a CORS preflight (from an allowed page: it may
/// send what it asks), or a plain question of what the resource allows.
fn preflight<B>(ctx: &Ctx, req: &Request<B>) -> HttpResponse {
    let mut r = empty_response(StatusCode::NO_CONTENT);
    let h = r.headers_mut();
    let methods = HeaderValue::from_static(allowed_methods(ctx));
    if req
        .headers()
        .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, methods);
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
    } else {
        h.insert(header::ALLOW, methods);
    }
    r
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    edge: &Arc<Edge>,
    mcp: &Arc<McpSessions>,
    client: Remote,
) -> HttpResponse {
    let ctx = &edge.ctx;
    if let Some(metadata) = protected_resource(edge, &req).await {
        return metadata;
    }
    let admitted = match authenticate(ctx, req.headers(), client.certificate, client.from).await {
        Ok(a) => a,
        // Its body is not read: the connection cannot carry another request,
        // and a client that would send one on it is told so.
        Err(refusal) => return closing(refused(refusal)),
    };
    let key = admitted.key;
    if let Some(f) = &ctx.forwarding
        && f.passes(req.uri().path())
    {
        return pass(edge, f, req, &client, key).await;
    }
    let is_mcp = ctx.protocol == crate::bridge::ProtocolId::MCP;
    if let Some(refused) = refuse_head(ctx, &req, is_mcp.then_some((mcp, key))).await {
        return refused;
    }
    let (parts, body) = req.into_parts();
    let body = match read_request_body(ctx, &parts.headers, body, &client).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let scanned = scan(&body, &ctx.scan);
    if let Ok(message) = &scanned
        && let Some(refused) = refused_message(ctx, &admitted, message, &body)
    {
        return refused;
    }
    if scanned.is_ok() {
        ctx.captured(&body);
    }
    match scanned {
        Err(ScanError::TooLarge { .. }) => too_large(ctx),
        Err(e) => {
            ctx.metrics.reply(ReplyClass::Invalid);
            json_response(200, scan_error_response(&e))
        }
        Ok(Scanned::Single(kind)) => {
            answer_single(edge, mcp, &parts.headers, (body, kind), key).await
        }
        Ok(Scanned::Batch(_)) if is_mcp && let Some(a) = mcp.batch(&parts.headers) => a,
        Ok(Scanned::Batch(elements)) => {
            match answer_batch(edge, &body, elements, forwarded(ctx, &parts.headers)).await {
                Some(array) => json_response(200, array),
                None => nothing_to_answer(ctx),
            }
        }
    }
}

/// One message of a client let in (`key`): MCP session traffic to its
/// session, the rest over the pool.
async fn answer_single(
    edge: &Arc<Edge>,
    mcp: &Arc<McpSessions>,
    headers: &hyper::HeaderMap,
    (body, kind): (Bytes, crate::jsonrpc::Kind),
    key: super::limit::ClientKey,
) -> HttpResponse {
    let ctx = &edge.ctx;
    let is_mcp = ctx.protocol == crate::bridge::ProtocolId::MCP;
    let attached = forwarded(ctx, headers);
    if is_mcp && let Some(refused) = header_mismatch(ctx, headers, &body, &kind) {
        return refused;
    }
    // Boxed: an MCP session's future is large (13 KiB), and without
    // the box every HTTP request's future, which hyper moves as it
    // sets it up, would be as large.
    if is_mcp
        && let Some(a) = Box::pin(mcp.post(
            edge,
            headers,
            body.clone(),
            kind.clone(),
            (key, attached.clone()),
        ))
        .await
    {
        return a;
    }
    // MCP 2026-07-28 pairs some errors with an HTTP status; only the
    // reply crossed the pair, so its error code says which.
    let stateless = is_mcp && crate::gateway::mcp_headers::stateless(&body);
    if is_mcp
        && matches!(kind, crate::jsonrpc::Kind::Request { .. })
        && super::mcp::accepts_events(headers)
    {
        let answer = |a| match a {
            Answer::Reply(text) if stateless => {
                json_response(crate::gateway::mcp_headers::status_of(&text), text)
            }
            a => single_answer(ctx, a),
        };
        return super::streamed::streamed(edge, (body, kind), attached, answer).await;
    }
    match answer_one(edge, body, kind, attached).await {
        Answer::Reply(text) if stateless => {
            json_response(crate::gateway::mcp_headers::status_of(&text), text)
        }
        a => single_answer(ctx, a),
    }
}

/// What is refused, or answered, from a request's head alone: a
/// `Transfer-Encoding` other than chunked, MCP's GET and DELETE (`mcp`: an
/// MCP ingress), a method other than POST, a `Content-Type` other than
/// JSON.
async fn refuse_head(
    ctx: &Ctx,
    req: &Request<hyper::body::Incoming>,
    mcp: Option<(&Arc<McpSessions>, super::limit::ClientKey)>,
) -> Option<HttpResponse> {
    let answer = refusal_of_head(ctx, req, mcp).await?;
    Some(closing_if_body(req.headers(), answer))
}

/// `r`, given before the request's body (if it has one) is read: with
/// `Connection: close` when there is one, as hyper then closes the
/// connection.
fn closing_if_body(headers: &hyper::HeaderMap, r: HttpResponse) -> HttpResponse {
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|n| n.as_bytes() != b"0");
    if has_body { closing(r) } else { r }
}

/// 501 for a `Transfer-Encoding` other than chunked: hyper takes the
/// chunks apart; gzip & co. under them are not decoded here.
fn unsupported_transfer_encoding(headers: &hyper::HeaderMap) -> Option<HttpResponse> {
    let te = headers.get(header::TRANSFER_ENCODING)?;
    let chunked = te
        .to_str()
        .is_ok_and(|te| te.trim().eq_ignore_ascii_case("chunked"));
    (!chunked).then(|| {
        status_only(
            StatusCode::NOT_IMPLEMENTED,
            "Transfer-Encoding other than chunked is not supported",
        )
    })
}

async fn refusal_of_head(
    ctx: &Ctx,
    req: &Request<hyper::body::Incoming>,
    mcp: Option<(&Arc<McpSessions>, super::limit::ClientKey)>,
) -> Option<HttpResponse> {
    if let Some(refused) = unsupported_transfer_encoding(req.headers()) {
        return Some(refused);
    }
    if let Some((mcp, client)) = mcp {
        let answer = match *req.method() {
            hyper::Method::GET => mcp.get(req.headers(), client),
            hyper::Method::DELETE => mcp.delete(req.headers(), client).await,
            _ => None,
        };
        if answer.is_some() {
            return answer;
        }
    }
    if req.method() != hyper::Method::POST {
        let mut r = status_only(
            StatusCode::METHOD_NOT_ALLOWED,
            "JSON-RPC over HTTP: use POST",
        );
        r.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static(allowed_methods(ctx)),
        );
        return Some(r);
    }
    if let Some(ct) = req.headers().get(hyper::header::CONTENT_TYPE)
        && !names_json(ct)
    {
        return Some(status_only(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        ));
    }
    None
}

/// 413: a body over `--max-body`.
fn too_large(ctx: &Ctx) -> HttpResponse {
    ctx.metrics.reply(ReplyClass::Invalid);
    status_only(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "body larger than the limit of {} octets",
            ctx.limits.max_body
        ),
    )
}

/// The request's body, read within `--max-body`, the stall timeout and the
/// memory budgets (`body.rs`), or the answer that refuses it.
async fn read_request_body(
    ctx: &Ctx,
    headers: &hyper::HeaderMap,
    body: hyper::body::Incoming,
    client: &Remote,
) -> Result<Bytes, HttpResponse> {
    let declared = headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > ctx.limits.max_body as u64) {
        return Err(too_large(ctx));
    }
    let stall = ctx.limits.stall_timeout;
    let budgets = [&*ctx.shared, &*client.share];
    let e = match read_body(body, ctx.limits.max_body, stall, budgets).await {
        Ok(body) => return Ok(body),
        Err(e) => e,
    };
    let r = match e {
        BodyError::TooLarge => return Err(too_large(ctx)),
        BodyError::Read(e) => {
            return Err(status_only(
                StatusCode::BAD_REQUEST,
                &format!("reading the body: {e}"),
            ));
        }
        BodyError::Timeout => {
            ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
            status_only(
                StatusCode::REQUEST_TIMEOUT,
                &format!("the body did not arrive within {} s", stall.as_secs_f64()),
            )
        }
        BodyError::NoRoom => {
            ctx.metrics.reply(ReplyClass::Unavailable);
            status_only(
                StatusCode::SERVICE_UNAVAILABLE,
                "the gateway is full (--memory-budget): no room for this body while it is read",
            )
        }
    };
    // The rest of the body is not read: the connection cannot carry
    // another request.
    Err(closing(r))
}

/// `r` with `Connection: close`: an answer given before its request's body
/// was read, after which hyper closes an HTTP/1.1 connection.
fn closing(mut r: HttpResponse) -> HttpResponse {
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
}

/// 429 for a message over its client's rate limit (`--rate-limit`,
/// `--rate-limit-octets`); `None` when it is admitted or there is none.
fn over_rate_limit(
    ctx: &Ctx,
    key: super::limit::ClientKey,
    message: &Scanned,
    body: &Bytes,
) -> Option<HttpResponse> {
    let count = match message {
        Scanned::Single(_) => 1,
        Scanned::Batch(elements) => elements.len(),
    };
    let f = super::client::over_rate_limit(ctx, key, body.len(), || count)?;
    let id = match message {
        Scanned::Single(m) => id_of(m).map(|i| &body[i.token.clone()]),
        Scanned::Batch(_) => None,
    };
    ctx.metrics.reply_n(f.class(), count);
    Some(rate_limited(&f, id))
}

/// What an edge that forwards its clients' credentials carries beside a
/// request: the client's `Authorization`, or an empty one for none (so the
/// origin knows to bring the upstream's refusal back).
fn forwarded(ctx: &Ctx, headers: &hyper::HeaderMap) -> Option<crate::relay::Attached> {
    ctx.forwarding.as_ref()?;
    let value = headers
        .get(header::AUTHORIZATION)
        .map_or_else(Bytes::new, |v| Bytes::copy_from_slice(v.as_bytes()));
    Some(crate::relay::Attached::Authorization(value))
}

/// The upstream refused the client's credential: its status and challenge
/// (`resource_metadata` naming this edge), the origin's JSON-RPC error.
fn challenged(ctx: &Ctx, text: Bytes, challenge: &[u8]) -> HttpResponse {
    let Some((status, value)) = ctx.forwarding.as_ref().and_then(|f| f.answer(challenge)) else {
        return json_response(200, text);
    };
    ctx.metrics.unauthorized.fetch_add(1, Relaxed);
    let mut r = json_response(status, text);
    if let Ok(v) = HeaderValue::from_str(&value) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// What refuses a message of a client let in (`who`) before it is
/// carried: its rate limit (429), or a scope its token lacks (403).
fn refused_message(
    ctx: &Ctx,
    admitted: &super::Admitted,
    message: &Scanned,
    body: &Bytes,
) -> Option<HttpResponse> {
    if let Some(refused) = over_rate_limit(ctx, admitted.key, message, body) {
        return Some(refused);
    }
    let (challenge, f) = admitted.lacks(ctx, body, message)?;
    Some(forbidden(&challenge, &f, message, body))
}

/// 403 for a message whose token lacks a scope it needs
/// (`--require-scope`), with the challenge that names every scope it
/// needs; nothing of it is carried.
fn forbidden(challenge: &str, f: &Failure, message: &Scanned, body: &Bytes) -> HttpResponse {
    let id = match message {
        Scanned::Single(m) => id_of(m).map(|i| &body[i.token.clone()]),
        Scanned::Batch(_) => None,
    };
    let mut r = json_response(f.http_status(), f.response(id));
    if let Ok(value) = HeaderValue::from_str(challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    r
}

/// Whether a Content-Type begins with `application/json`, in any case and
/// after any leading spaces (parameters such as `charset` allowed), without
/// the copy a lowercased string would cost every request.
fn names_json(ct: &HeaderValue) -> bool {
    const JSON: &[u8] = b"application/json";
    ct.to_str().is_ok_and(|s| {
        s.trim_start()
            .as_bytes()
            .get(..JSON.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(JSON))
    })
}

/// 429 with `Retry-After`, and the JSON-RPC error (with the request's id
/// when it was one request).
fn rate_limited(f: &Failure, id: Option<&[u8]>) -> HttpResponse {
    let mut r = json_response(f.http_status(), f.response(id));
    if let Failure::RateLimited(_, after) = f {
        let seconds = super::limit::RetryAfter(*after).seconds();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    r
}

/// The HTTP answer to one message.
fn single_answer(ctx: &Ctx, a: Answer) -> HttpResponse {
    match a {
        Answer::Reply(text) | Answer::Passed(text, _) => json_response(200, text),
        Answer::Challenged(text, challenge) => challenged(ctx, text, &challenge),
        Answer::Failed(f, id) => json_response(f.http_status(), f.response(id.as_deref())),
        Answer::None => nothing_to_answer(ctx),
    }
}

/// The answer to a POST of notifications only: 204, or 202 for MCP, whose
/// Streamable HTTP transport asks for 202 Accepted with no body.
fn nothing_to_answer(ctx: &Ctx) -> HttpResponse {
    empty_response(if ctx.protocol == crate::bridge::ProtocolId::MCP {
        StatusCode::ACCEPTED
    } else {
        StatusCode::NO_CONTENT
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_named_in_any_case_with_parameters_and_nothing_else_is() {
        let named = |ct: &'static str| names_json(&HeaderValue::from_static(ct));
        assert!(named("application/json"));
        assert!(named("Application/JSON; charset=utf-8"));
        assert!(named("  application/json"));
        assert!(!named("text/plain"));
        assert!(!named("application/jso"));
        assert!(!named(""));
        assert!(!named("application/x-json"));
        let not_text = HeaderValue::from_bytes(b"application/json\xff").expect("a header value");
        assert!(!names_json(&not_text));
    }
}
