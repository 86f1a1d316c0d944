//! Where JSON-RPC clients come in: HTTP (POST, one request or batch per
//! body), WebSocket (one message per frame), TCP and stdio (one message per
//! line). HTTP shares the pool of associations; every WebSocket, TCP or
//! stdio client gets a session (an association) of its own.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::{Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tracing::{debug, warn};

use super::edge::Edge;
use super::lines::{LineReader, LineSkipped, write_line};
use super::mcp_edge::McpSessions;
use super::metrics::{Ingress, ReplyClass};
use super::outbox::{Inbox, Outbox};
use super::session::Session;
use super::sse::EventBody;
use super::stall::{Moved, Tracked, stalled, wrote};
use crate::jsonrpc::carriage::{
    BatchJoin, id_of, local_error, scan_error_response, scan_error_response_to,
};
use crate::jsonrpc::{Kind, ScanError, Scanned, request_id, scan};
use crate::relay::{Failure, Reply};

/// Stops accepting when the value turns `true`.
pub type Shutdown = watch::Receiver<bool>;

async fn stopped(mut s: Shutdown) {
    let _ = s.wait_for(|v| *v).await;
}

/// The next client connection, at most `permits` at once (a further one
/// waits in the listen backlog); `None` once shutdown begins.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    shutdown: &Shutdown,
) -> Option<(
    tokio::net::TcpStream,
    std::net::SocketAddr,
    OwnedSemaphorePermit,
)> {
    let permit = permits.clone().acquire_owned().await.ok()?;
    loop {
        tokio::select! {
            a = listener.accept() => match a {
                Ok((tcp, from)) => {
                    let _ = tcp.set_nodelay(true);
                    return Some((tcp, from, permit));
                }
                Err(e) => {
                    // Out of descriptors and the like: pause, do not spin.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped(shutdown.clone()) => return None,
        }
    }
}

/// An HTTP ingress's answer: one body, or an event stream (MCP).
pub type HttpResponse = Response<Either<Full<Bytes>, EventBody>>;

pub fn json_response(status: u16, body: impl Into<Bytes>) -> HttpResponse {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// 200 with an event stream of what `rx` receives.
pub fn event_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> HttpResponse {
    let mut r = Response::new(Either::Right(EventBody(rx)));
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/event-stream"),
    );
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-cache"),
    );
    r
}

fn status_only(status: StatusCode, why: &str) -> HttpResponse {
    let body = serde_json::json!({ "error": why }).to_string();
    json_response(status.as_u16(), body)
}

/// A session client's socket: the kernel's send buffer is fixed at
/// `--session-buffer` (at least 64 KiB) instead of growing to megabytes, so
/// a client that does not read holds that much of the kernel's memory at
/// most, and is noticed (its writes block) as soon as that is full.
fn bound_send_buffer(tcp: &tokio::net::TcpStream, ctx: &super::Ctx) {
    let n = ctx.limits.session_buffer.max(64 << 10);
    if let Err(e) = socket2::SockRef::from(tcp).set_send_buffer_size(n) {
        debug!(error = %e, "cannot set the client socket's send buffer");
    }
}

/// HTTP ingress: accepts until shutdown, at most `max_connections` at once.
pub async fn serve_http(listener: TcpListener, edge: Arc<Edge>, shutdown: Shutdown) {
    let limits = &edge.ctx.limits;
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mcp = Arc::new(McpSessions::default());
    while let Some((tcp, from, permit)) = accept(&listener, &permits, &shutdown).await {
        let (edge, shutdown, mcp) = (edge.clone(), shutdown.clone(), mcp.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|req| {
                let (edge, mcp) = (edge.clone(), mcp.clone());
                async move { Ok::<_, Infallible>(handle_http(req, &edge, &mcp).await) }
            });
            // A client that takes no octet of its reply for the stall
            // timeout is given up (hyper has no write timeout of its own).
            let moved = Moved::new();
            let io = hyper_util::rt::TokioIo::new(Tracked::new(tcp, moved.clone()));
            let stall = edge.ctx.limits.stall_timeout;
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(stall)
                .serve_connection(io, service);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                _ = stopped(shutdown.clone()) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
                () = stalled(&moved, stall) => {
                    warn!(%from, "HTTP client took no octet of its reply for {:.1} s (--stall-timeout): dropping it", stall.as_secs_f64());
                    edge.ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
                    Ok(())
                }
            };
            if let Err(e) = result {
                if e.is_timeout() {
                    // Headers not complete within the stall timeout (slowloris).
                    edge.ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
                }
                debug!(%from, error = %e, "HTTP connection ended");
            }
            drop(permit);
        });
    }
}

/// 401 for a client without an accepted bearer token.
fn unauthorized() -> HttpResponse {
    let body = local_error(
        None,
        UNAUTHORIZED_CODE,
        "unauthorized: missing or unknown bearer token",
        None,
    );
    let mut r = json_response(401, body);
    r.headers_mut().insert(
        hyper::header::WWW_AUTHENTICATE,
        hyper::header::HeaderValue::from_static("Bearer"),
    );
    r
}

/// Whether a client's request headers carry an accepted token (always,
/// when the gateway has none configured); counts refusals.
fn authorized(ctx: &super::Ctx, headers: &hyper::HeaderMap) -> bool {
    let Some(tokens) = &ctx.tokens else {
        return true;
    };
    let ok = tokens.allows(
        headers
            .get(hyper::header::AUTHORIZATION)
            .map(hyper::header::HeaderValue::as_bytes),
    );
    if !ok {
        ctx.metrics.unauthorized.fetch_add(1, Relaxed);
    }
    ok
}

/// The JSON-RPC error code of a 401 answer.
pub const UNAUTHORIZED_CODE: i32 = -32012;

async fn handle_http(
    req: Request<hyper::body::Incoming>,
    edge: &Arc<Edge>,
    mcp: &Arc<McpSessions>,
) -> HttpResponse {
    let ctx = &edge.ctx;
    if !authorized(ctx, req.headers()) {
        return unauthorized();
    }
    let is_mcp = ctx.protocol == crate::bridge::ProtocolId::MCP;
    if is_mcp {
        let answer = match *req.method() {
            hyper::Method::GET => mcp.get(req.headers()),
            hyper::Method::DELETE => mcp.delete(req.headers()).await,
            _ => None,
        };
        if let Some(a) = answer {
            return a;
        }
    }
    if req.method() != hyper::Method::POST {
        let mut r = status_only(
            StatusCode::METHOD_NOT_ALLOWED,
            "JSON-RPC over HTTP: use POST",
        );
        r.headers_mut().insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static("POST"),
        );
        return r;
    }
    if let Some(ct) = req.headers().get(hyper::header::CONTENT_TYPE) {
        let ok = ct
            .to_str()
            .map(|s| {
                s.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
            })
            .unwrap_or(false);
        if !ok {
            return status_only(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json",
            );
        }
    }
    let too_large = || {
        ctx.metrics.reply(ReplyClass::Invalid);
        status_only(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "body larger than the limit of {} octets",
                ctx.limits.max_body
            ),
        )
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > ctx.limits.max_body as u64) {
        return too_large();
    }
    let (parts, body) = req.into_parts();
    let body = Limited::new(body, ctx.limits.max_body).collect();
    let body = match tokio::time::timeout(ctx.limits.stall_timeout, body).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Ok(Err(e)) => {
            return status_only(StatusCode::BAD_REQUEST, &format!("reading the body: {e}"));
        }
        Err(_) => {
            ctx.metrics.stalled_clients.fetch_add(1, Relaxed);
            let mut r = status_only(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the body did not arrive within {} s",
                    ctx.limits.stall_timeout.as_secs_f64()
                ),
            );
            r.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            return r;
        }
    };
    match scan(&body, &ctx.scan) {
        Err(ScanError::TooLarge { .. }) => too_large(),
        Err(e) => {
            ctx.metrics.reply(ReplyClass::Invalid);
            json_response(200, scan_error_response(&e))
        }
        Ok(Scanned::Single(kind)) => {
            if is_mcp
                && let Some(a) = mcp
                    .post(edge, &parts.headers, body.clone(), kind.clone())
                    .await
            {
                return a;
            }
            single_answer(ctx, http_one(edge, body, kind).await)
        }
        Ok(Scanned::Batch(_)) if is_mcp && let Some(a) = mcp.batch(&parts.headers) => a,
        Ok(Scanned::Batch(elements)) => {
            let answers = futures_util::future::join_all(elements.into_iter().map(|e| {
                let start = e.range.start;
                let elem = body.slice(e.range);
                async move {
                    match e.kind {
                        Ok(kind) => match http_one(edge, elem, kind.relative_to(start)).await {
                            HttpAnswer::Reply(text) => Some(text),
                            HttpAnswer::Failed(f, id) => Some(f.response(id.as_deref()).into()),
                            HttpAnswer::None => None,
                        },
                        Err(invalid) => {
                            ctx.metrics.reply(ReplyClass::Invalid);
                            Some(scan_error_response(&ScanError::Invalid(invalid)).into())
                        }
                    }
                }
            }))
            .await;
            let mut join = BatchJoin::with_capacity(body.len());
            for a in answers.iter().flatten() {
                join.push(a);
            }
            match join.finish() {
                Some(array) => json_response(200, array),
                None => nothing_to_answer(ctx),
            }
        }
    }
}

/// The HTTP answer to one message.
fn single_answer(ctx: &super::Ctx, a: HttpAnswer) -> HttpResponse {
    match a {
        HttpAnswer::Reply(text) => json_response(200, text),
        HttpAnswer::Failed(f, id) => json_response(f.http_status(), f.response(id.as_deref())),
        HttpAnswer::None => nothing_to_answer(ctx),
    }
}

/// The answer to a POST of notifications only: 204, or 202 for MCP, whose
/// Streamable HTTP transport asks for 202 Accepted with no body.
fn nothing_to_answer(ctx: &super::Ctx) -> HttpResponse {
    empty_response(if ctx.protocol == crate::bridge::ProtocolId::MCP {
        StatusCode::ACCEPTED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// A status with no body.
pub fn empty_response(status: StatusCode) -> HttpResponse {
    let mut r = Response::new(Either::Left(Full::new(Bytes::new())));
    *r.status_mut() = status;
    r
}

enum HttpAnswer {
    Reply(Bytes),
    /// The failure and the request's id token (to answer with).
    Failed(Failure, Option<Bytes>),
    /// A notification: nothing to answer.
    None,
}

async fn http_one(edge: &Arc<Edge>, text: Bytes, kind: Kind) -> HttpAnswer {
    let ctx = &edge.ctx;
    match &kind {
        Kind::Request { id, .. } => {
            let id_token = text.slice(id.token.clone());
            match edge.call(text, kind).await {
                Reply::Message { text, .. } => HttpAnswer::Reply(text),
                Reply::Failed(f) => HttpAnswer::Failed(f, Some(id_token)),
            }
        }
        Kind::Notification { .. } => match edge.notify(text, kind).await {
            Ok(()) => HttpAnswer::None,
            Err(f) => {
                ctx.metrics.notification(Ingress::Http);
                HttpAnswer::Failed(f, None)
            }
        },
        Kind::Success { .. } | Kind::Error { .. } => {
            ctx.metrics.reply(ReplyClass::Invalid);
            let id = id_of(&kind).map(|i| &text[i.token.clone()]);
            HttpAnswer::Reply(
                local_error(
                    id,
                    -32600,
                    "Invalid Request",
                    Some("\"the HTTP ingress accepts requests and notifications, not responses\""),
                )
                .into(),
            )
        }
    }
}

/// A stream of messages from a client.
pub trait MessageSource: Send {
    fn next_message(&mut self) -> impl Future<Output = std::io::Result<Option<Bytes>>> + Send;
}

impl<R: AsyncRead + Unpin + Send> MessageSource for LineReader<R> {
    async fn next_message(&mut self) -> std::io::Result<Option<Bytes>> {
        self.next().await
    }
}

/// The answer to a line over `--max-body`: -32600, with the request's id
/// when the line's head shows it (else `null`, as for any request whose id
/// cannot be read).
fn too_large_line(skipped: &LineSkipped) -> Vec<u8> {
    let id = request_id(&skipped.head).map(|id| &skipped.head[id.token]);
    let f = ScanError::TooLarge {
        len: skipped.len,
        limit: skipped.max,
    };
    scan_error_response_to(id, &f)
}

/// Writes messages for a line-delimited client until the queue closes; a
/// client that takes no octet of them for `stall` is given up (the queue
/// is dropped, which ends its session).
pub async fn write_lines<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: Inbox,
    stall: Duration,
    metrics: Arc<super::metrics::Metrics>,
) {
    let moved = Moved::new();
    let mut w = Tracked::new(w, moved.clone());
    while let Some(text) = rx.recv().await {
        let write = async {
            write_line(&mut w, &text).await?;
            if rx.is_empty() {
                w.flush().await?;
            }
            Ok::<_, std::io::Error>(())
        };
        if !wrote(stall, &moved, &metrics, write).await {
            return;
        }
    }
    let _ = w.flush().await;
    let _ = w.shutdown().await;
}

/// Serves one session client: its messages go to the peer over an
/// association of its own (established at the first message); what comes
/// back goes to `tx`. Returns when the client is done and its outstanding
/// requests are answered, or the association is gone.
pub async fn stream_client<S: MessageSource>(
    mut source: S,
    tx: Outbox,
    edge: Arc<Edge>,
    ingress: Ingress,
) {
    let ctx = edge.ctx.clone();
    let mut session: Option<Session> = None;
    loop {
        let ended = async {
            match &session {
                Some(s) => s.assoc().ended().await,
                None => std::future::pending().await,
            }
        };
        let next = tokio::select! {
            m = tokio::time::timeout(ctx.limits.idle_timeout, source.next_message()) => m,
            _ = ended => {
                debug!("association ended: closing the client connection");
                return;
            }
            _ = tx.closed() => {
                // The writer gave up on the client (it stopped reading):
                // nothing sent from now on could reach it. Its connection
                // goes at once; the association closes on its own time.
                if let Some(s) = session {
                    tokio::spawn(async move { s.close().await });
                }
                return;
            }
        };
        let text = match next {
            Ok(Ok(Some(text))) => text,
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                if let Some(skipped) = LineSkipped::of(&e) {
                    // A line over --max-body, skipped whole: the client
                    // hears why (with the request's id when the line's
                    // head shows it) and its connection carries on.
                    ctx.metrics.reply(ReplyClass::Invalid);
                    let _ = tx.send(too_large_line(skipped).into()).await;
                    continue;
                }
                warn!(error = %e, "client connection failed");
                let f = ScanError::TooLarge {
                    len: ctx.limits.max_body + 1,
                    limit: ctx.limits.max_body,
                };
                if e.kind() == std::io::ErrorKind::InvalidData {
                    let _ = tx.send(scan_error_response(&f).into()).await;
                }
                break;
            }
            Err(_) => {
                if session.as_ref().is_some_and(|s| s.outstanding() > 0) {
                    continue;
                }
                debug!("idle client: closing");
                break;
            }
        };
        if session.is_none() {
            match edge.session(ingress, tx.clone()).await {
                Ok(s) => session = Some(s),
                Err(f) => {
                    answer_all(&text, &f, &tx, &edge).await;
                    continue;
                }
            }
        }
        if let Some(s) = &session {
            s.on_local_message(text).await;
        }
    }
    // The client is done sending: its outstanding requests still get their
    // replies (bounded by the request timeout), then the association closes.
    if let Some(s) = session {
        let deadline = Instant::now() + ctx.limits.request_timeout + Duration::from_secs(1);
        while s.outstanding() > 0 && Instant::now() < deadline && s.assoc().is_open() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        s.close().await;
    }
}

/// Without an association, every request in `text` gets `f`.
async fn answer_all(text: &Bytes, f: &Failure, tx: &Outbox, edge: &Edge) {
    let m = &edge.ctx.metrics;
    let answer = match scan(text, &edge.ctx.scan) {
        Err(e) => {
            m.reply(ReplyClass::Invalid);
            Some(scan_error_response(&e))
        }
        Ok(Scanned::Single(kind)) => id_of(&kind)
            .filter(|_| matches!(kind, Kind::Request { .. }))
            .map(|id| {
                m.reply(f.class());
                f.response(Some(&text[id.token.clone()]))
            }),
        Ok(Scanned::Batch(elements)) => {
            let mut join = BatchJoin::default();
            for e in elements {
                match e.kind {
                    Ok(Kind::Request { id, .. }) => {
                        m.reply(f.class());
                        join.push(&f.response(Some(&text[id.token])));
                    }
                    Ok(_) => {}
                    Err(invalid) => join.push(&scan_error_response(&ScanError::Invalid(invalid))),
                }
            }
            join.finish()
        }
    };
    if let Some(a) = answer {
        let _ = tx.send(a.into()).await;
    }
}

/// TCP ingress: newline-delimited JSON-RPC, one session per connection.
pub async fn serve_tcp(listener: TcpListener, edge: Arc<Edge>, shutdown: Shutdown) {
    let permits = Arc::new(Semaphore::new(edge.ctx.limits.max_connections));
    while let Some((tcp, _, permit)) = accept(&listener, &permits, &shutdown).await {
        let edge = edge.clone();
        bound_send_buffer(&tcp, &edge.ctx);
        tokio::spawn(async move {
            let (r, w) = tcp.into_split();
            let (tx, rx) = edge.ctx.limits.outbox();
            let writer = tokio::spawn(write_lines(
                w,
                rx,
                edge.ctx.limits.stall_timeout,
                edge.ctx.metrics.clone(),
            ));
            let max = edge.ctx.limits.max_body;
            let lines = LineReader::skipping_long_lines(r, max);
            stream_client(lines, tx, edge, Ingress::Tcp).await;
            let _ = writer.await;
            drop(permit);
        });
    }
}

struct WsSource<S>(S);

impl<S> MessageSource for WsSource<S>
where
    S: futures_util::Stream<
            Item = Result<
                tokio_tungstenite::tungstenite::Message,
                tokio_tungstenite::tungstenite::Error,
            >,
        > + Unpin
        + Send,
{
    async fn next_message(&mut self) -> std::io::Result<Option<Bytes>> {
        use tokio_tungstenite::tungstenite::{Error, Message};
        loop {
            return match self.0.next().await {
                Some(Ok(Message::Text(t))) => Ok(Some(Bytes::from(t))),
                Some(Ok(Message::Binary(b))) => Ok(Some(b)),
                Some(Ok(Message::Close(_))) | None => Ok(None),
                Some(Ok(_)) => continue,
                Some(Err(Error::Capacity(e))) => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    e.to_string(),
                )),
                Some(Err(e)) => Err(std::io::Error::other(e)),
            };
        }
    }
}

/// WebSocket ingress: one JSON-RPC message per text frame, one session per
/// connection.
pub async fn serve_ws(listener: TcpListener, edge: Arc<Edge>, shutdown: Shutdown) {
    use tokio_tungstenite::tungstenite::Message;
    let permits = Arc::new(Semaphore::new(edge.ctx.limits.max_connections));
    while let Some((tcp, from, permit)) = accept(&listener, &permits, &shutdown).await {
        let edge = edge.clone();
        bound_send_buffer(&tcp, &edge.ctx);
        tokio::spawn(async move {
            let config = super::ws_config(edge.ctx.limits.max_body);
            // The callback's signature is tungstenite's (`ErrorResponse` is
            // an `http::Response`).
            #[allow(clippy::result_large_err)]
            let check = |req: &tokio_tungstenite::tungstenite::handshake::server::Request, resp| {
                if authorized(&edge.ctx, req.headers()) {
                    return Ok(resp);
                }
                let mut refusal =
                    tokio_tungstenite::tungstenite::handshake::server::ErrorResponse::new(Some(
                        "unauthorized: missing or unknown bearer token".to_owned(),
                    ));
                *refusal.status_mut() = StatusCode::UNAUTHORIZED;
                refusal.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer"),
                );
                Err(refusal)
            };
            let moved = Moved::new();
            let tcp = Tracked::new(tcp, moved.clone());
            let handshake = tokio::time::timeout(
                edge.ctx.limits.stall_timeout,
                tokio_tungstenite::accept_hdr_async_with_config(tcp, check, Some(config)),
            )
            .await;
            let ws = match handshake {
                Ok(Ok(ws)) => ws,
                Ok(Err(e)) => {
                    debug!(%from, error = %e, "WebSocket handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%from, "WebSocket handshake timed out");
                    return;
                }
            };
            let (mut sink, stream) = ws.split();
            let (tx, mut rx) = edge.ctx.limits.outbox();
            let (stall, metrics) = (edge.ctx.limits.stall_timeout, edge.ctx.metrics.clone());
            let writer = tokio::spawn(async move {
                while let Some(text) = rx.recv().await {
                    let msg = match tokio_tungstenite::tungstenite::Utf8Bytes::try_from(text) {
                        Ok(t) => Message::Text(t),
                        Err(_) => continue,
                    };
                    let write = async {
                        sink.feed(msg).await?;
                        if rx.is_empty() {
                            sink.flush().await?;
                        }
                        Ok::<_, tokio_tungstenite::tungstenite::Error>(())
                    };
                    if !wrote(stall, &moved, &metrics, write).await {
                        return;
                    }
                }
                let _ = sink.close().await;
            });
            stream_client(WsSource(stream), tx, edge, Ingress::WebSocket).await;
            let _ = writer.await;
            drop(permit);
        });
    }
}

/// The stdio ingress (`npamp-gateway connect`): this process's stdin and
/// stdout are one client session.
pub async fn serve_stdio(edge: Arc<Edge>) {
    let (tx, rx) = edge.ctx.limits.outbox();
    let writer = tokio::spawn(write_lines(
        tokio::io::stdout(),
        rx,
        edge.ctx.limits.stall_timeout,
        edge.ctx.metrics.clone(),
    ));
    let max = edge.ctx.limits.max_body;
    stream_client(
        LineReader::skipping_long_lines(tokio::io::stdin(), max),
        tx,
        edge,
        Ingress::Stdio,
    )
    .await;
    let _ = writer.await;
}
