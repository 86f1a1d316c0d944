//! An MCP server over Streamable HTTP (MCP 2025-03-26 and 2025-06-18,
//! "Transports") as an origin's upstream, for `--protocol mcp` with an
//! `http(s)://` upstream. One MCP session rides one association, as with a
//! child process:
//!
//! - every message from the peer is its own POST, with `Accept:
//!   application/json, text/event-stream`; the POSTs of one session run
//!   concurrently, bounded by `--max-in-flight` like all upstream calls;
//! - the reply is a JSON body or an event stream; every JSON-RPC message in
//!   it (the response, and the server's progress, log and sampling messages
//!   before it) reaches the session, whose client gets them in order;
//! - the `Mcp-Session-Id` the server assigns (on `initialize`) is sent back
//!   on every later request, with the `MCP-Protocol-Version` it negotiated;
//!   a 404 for that id means the server ended the session: the request is
//!   answered NotDelivered saying the client must initialize again, and the
//!   id is forgotten;
//! - after `notifications/initialized`, a GET stream carries what the server
//!   sends outside any request (a server without one answers 405: fine);
//! - when the association ends, the session is ended with a DELETE.
//!
//! A request whose exchange ends without its reply (an empty 202, an HTML
//! error page, a stream closed early, an event over `--max-body`) is
//! answered NotDelivered, naming the HTTP status and what came instead.
//!
//! What era of MCP the server speaks is asked by the first session on it
//! (`server/discover`, a POST of its own: [`super::mcp_revision`]); a request
//! of the stateless revision to a server of the session era is answered
//! here.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use futures_util::FutureExt;

use super::http_client::HttpsClient;
use super::mcp_revision::{self, Member, Revision};
use super::{Address, Delivery, Env, Kind as UpstreamKind};
use crate::assoc::error::error_chain;
use crate::bridge::ProtocolId;
use crate::gateway::carry::in_flight_full;
use crate::gateway::context::Ctx;
use crate::gateway::forward::passthrough;
use crate::gateway::outbox::Inbox;
use crate::gateway::policy::backoff::Backoff;
use crate::gateway::session::{SESSION_OVER, Session};
use crate::jsonrpc::carriage::method_of;
use crate::jsonrpc::{IdKind, Kind, Scanned, same_id, scan};
use crate::relay::{Attached, Named};
use crate::sse::SseDecoder;

const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const ACCEPT_BOTH: HeaderValue = HeaderValue::from_static("application/json, text/event-stream");
const EVENT_STREAM: HeaderValue = HeaderValue::from_static("text/event-stream");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// How long ending the session (DELETE) may take.
const DELETE_WAIT: Duration = Duration::from_secs(1);
/// The pause before the GET stream is asked for again, doubling up to
/// [`LISTEN_MAX_BACKOFF`].
const LISTEN_BACKOFF: Duration = Duration::from_millis(500);
const LISTEN_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How much of a body that is not the reply a NotDelivered detail quotes.
const QUOTED: usize = 200;
/// The pause before a request's event stream is resumed when the stream
/// asked for none (`retry`).
const RESUME_AFTER: Duration = Duration::from_secs(1);
/// The most GETs that resume one request's event stream (the exchange's
/// deadline bounds them too).
const MAX_RESUMES: usize = 64;

/// The requests being exchanged with the server, by id, to end one that
/// is cancelled.
#[derive(Default)]
struct Running(HashMap<Bytes, (IdKind, tokio::task::AbortHandle)>);

impl Running {
    fn track(&mut self, id: Bytes, kind: IdKind, task: tokio::task::AbortHandle) {
        if self.0.len() >= 64 {
            self.0.retain(|_, (_, t)| !t.is_finished());
        }
        self.0.insert(id, (kind, task));
    }

    /// Ends the exchange of the request whose id token is `id`, if it
    /// runs: its kind. (The exchange holds a request back while another
    /// with its id runs, so at most one runs here.)
    fn end(&mut self, id: &[u8]) -> Option<IdKind> {
        let (kind, task) = self.0.remove(id)?;
        (!task.is_finished()).then(|| {
            task.abort();
            kind
        })
    }
}

/// Where a request's event stream, closed before its reply, resumes.
struct Resume {
    /// The last event id it gave (empty: none, and it cannot be resumed).
    last_id: Bytes,
    /// The pause it asked for.
    retry: Option<Duration>,
    /// Why it ended, when it broke rather than ended.
    broken: Option<String>,
}

/// What the server said of the session so far.
#[derive(Default)]
struct Negotiated {
    session_id: Option<HeaderValue>,
    protocol_version: Option<HeaderValue>,
}

/// One association's MCP session at the upstream.
struct McpSession {
    uri: Uri,
    /// The URI as it may be shown (no secrets: [`crate::gateway::redact`]).
    shown: crate::gateway::redact::PublicUrl,
    client: HttpsClient,
    /// `--upstream-header`.
    headers: Arc<[(HeaderName, HeaderValue)]>,
    ctx: Arc<Ctx>,
    session: Session,
    negotiated: Mutex<Negotiated>,
    /// The client sent `notifications/initialized`: time for the GET stream.
    initialized: Notify,
    /// The last credential an edge forwarded (`--forward-authorization`)
    /// that the server took, presented on the GET stream and the DELETE.
    credential: Mutex<Option<Bytes>>,
}

/// The request an exchange must bring the reply to.
struct Asked {
    id: Bytes,
    kind: IdKind,
    initialize: bool,
    /// `tools/list`: its answer names the parameters mirrored into
    /// headers ([`crate::gateway::mcp_params`]).
    tools_list: bool,
}

/// Why a POST brought no reply, and whether the server took the message
/// (then a request may have run).
struct Unanswered {
    detail: String,
    reached: bool,
    /// The server refused the credential the edge forwarded: its status
    /// and `WWW-Authenticate`.
    refused: Option<(u16, Bytes)>,
}

impl Unanswered {
    fn reached(detail: String) -> Self {
        Self {
            detail,
            reached: true,
            refused: None,
        }
    }

    fn not_reached(detail: String) -> Self {
        Self {
            detail,
            reached: false,
            refused: None,
        }
    }
}

/// What the peer sent, as far as the exchange cares.
enum Message {
    Request(Asked),
    /// Its method.
    Notification(Option<String>),
    Response,
}

impl Message {
    fn of(text: &Bytes, ctx: &Ctx) -> Self {
        match scan(text, &ctx.scan) {
            Ok(Scanned::Single(Kind::Request { id, method })) => {
                let method = method_of(text, &method);
                Message::Request(Asked {
                    id: text.slice(id.token.clone()),
                    kind: id.kind,
                    initialize: method.as_deref() == Some("initialize"),
                    tools_list: method.as_deref() == Some("tools/list"),
                })
            }
            Ok(Scanned::Single(Kind::Notification { method })) => {
                Message::Notification(method_of(text, &method).map(|m| m.into_owned()))
            }
            _ => Message::Response,
        }
    }
}

/// MCP over Streamable HTTP: `http://`, `https://` or `http+unix://` with
/// `--protocol mcp`.
pub struct McpHttp;

impl UpstreamKind for McpHttp {
    fn name(&self) -> &'static str {
        "mcp-http"
    }

    /// Its URLs are read by [`super::http::Http`], as every HTTP one.
    fn parse(&self, _url: &str) -> Option<Result<Address, String>> {
        None
    }

    fn takes(&self, address: &Address, protocol: ProtocolId) -> bool {
        matches!(address, Address::Uri(_)) && protocol == ProtocolId::MCP
    }

    fn takes_headers(&self) -> bool {
        true
    }

    fn takes_credentials(&self) -> bool {
        true
    }

    fn streams_per_request(&self) -> bool {
        true
    }

    fn delivery(&self) -> Delivery {
        Delivery::Session(|address, env, session, rx| match address {
            Address::Uri(uri) => run(uri, env, session, rx).boxed(),
            _ => std::future::ready("not an HTTP URL".to_owned()).boxed(),
        })
    }
}

/// Runs the upstream session until the association ends.
async fn run(uri: &Uri, env: &Env, session: &Session, rx: &mut Inbox) -> String {
    let Env { ctx, permits, .. } = env;
    let mcp = McpSession::new(uri, env, session);
    let member = ask_member(uri, &mcp, env).await;
    session.local_up();
    let mut tasks = tokio::task::JoinSet::new();
    let mut running = Running::default();
    let listener = mcp.clone();
    tasks.spawn(async move { listener.listen().await });
    let stall = ctx.limits.stall_timeout;
    loop {
        let text = tokio::select! {
            t = rx.recv_with() => t,
            _ = session.assoc().ended() => None,
        };
        let Some((text, mut attached)) = text else {
            break;
        };
        while tasks.try_join_next().is_some() {}
        if answered_here(&member, session, &text).await {
            continue;
        }
        // The edge's cancellation of a request of this association (its
        // client left), checked by the exchange: at once, room or not.
        if let Some(Attached::Cancel(id)) = &attached {
            if !mcp.cancelled(id, &mut running).await {
                continue;
            }
            attached = None;
        }
        // Waiting here is backpressure on the peer, as for any upstream.
        let permit = match tokio::time::timeout(stall, permits.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            Ok(Err(_)) => break,
            Err(_) => {
                mcp.unanswered(&text, &in_flight_full(ctx)).await;
                continue;
            }
        };
        let credential = match attached {
            Some(Attached::Authorization(a)) => Some(a),
            Some(Attached::HttpRequest(wire)) => {
                let m = mcp.clone();
                tasks.spawn(async move {
                    m.pass(text, wire).await;
                    drop(permit);
                });
                continue;
            }
            _ => None,
        };
        match Message::of(&text, ctx) {
            // Requests run concurrently: a long tool call holds up nothing.
            Message::Request(asked) => {
                let (id, kind) = (asked.id.clone(), asked.kind);
                let m = mcp.clone();
                let task = tasks.spawn(async move {
                    m.exchange(text, Message::Request(asked), credential).await;
                    drop(permit);
                });
                running.track(id, kind, task);
            }
            // A notification or a reply is taken before anything sent after
            // it is posted: `notifications/initialized` must reach a server
            // before the requests that follow it (servers answer 202 at once).
            what => {
                tokio::select! {
                    _ = mcp.exchange(text, what, credential) => {}
                    _ = session.assoc().ended() => break,
                }
                drop(permit);
            }
        }
    }
    tasks.abort_all();
    mcp.end().await;
    SESSION_OVER.to_owned()
}

/// Whether `text` was answered in the member's place: a request of the
/// stateless revision to a server of the session era, answered as a server
/// of that era would ([`mcp_revision`]).
async fn answered_here(member: &Member, session: &Session, text: &[u8]) -> bool {
    let Some(refused) = member.refusal(text) else {
        return false;
    };
    session.on_local_message(refused).await;
    true
}

/// The member at `uri`, asked what it speaks by its first session
/// ([`mcp_revision`]), whose answer every session waits for as long as a
/// connection may take.
async fn ask_member(uri: &Uri, mcp: &McpSession, env: &Env) -> Arc<Member> {
    let prober = Prober {
        uri: mcp.uri.clone(),
        client: mcp.client.clone(),
        headers: mcp.headers.clone(),
        ctx: mcp.ctx.clone(),
    };
    let ask = move || prober.clone().discover();
    let wait = env.ctx.limits.upstream_connect_timeout;
    let member = Address::Uri(uri.clone());
    env.revisions
        .join(&member, (ask, mcp.shown.to_string()), wait)
        .await
}

/// What asks a server what it speaks: POSTs of its own, outside any
/// session.
#[derive(Clone)]
struct Prober {
    uri: Uri,
    client: HttpsClient,
    headers: Arc<[(HeaderName, HeaderValue)]>,
    ctx: Arc<Ctx>,
}

impl Prober {
    /// Its answer to `server/discover` ([`mcp_revision`]). `None`: nothing
    /// learned (no answer, a refused credential, a busy or failing server).
    async fn discover(self) -> Option<Revision> {
        let (status, reply) = self.post(mcp_revision::discover_request()).await?;
        if matches!(status, 401 | 403 | 408 | 429) || status >= 500 {
            return None;
        }
        match reply {
            Some(reply) => Some(mcp_revision::read_discover(&reply)),
            // No JSON-RPC in it: a 4xx says the session era (the spec's
            // "400 with an empty body").
            None => (400..500)
                .contains(&status)
                .then_some(Revision::Sessions { version: None }),
        }
    }

    /// Posts `body`, one of the gateway's own requests of the stateless
    /// revision: the status and the JSON-RPC answer (the body, or the event
    /// that answers it), within the request timeout.
    async fn post(&self, body: Bytes) -> Option<(u16, Option<Bytes>)> {
        let mirrored = crate::gateway::mcp_headers::mirrored(&body);
        let mut req = hyper::Request::post(self.uri.clone())
            .header(ACCEPT, ACCEPT_BOTH)
            .header(CONTENT_TYPE, "application/json");
        if let Some(v) = mirrored.method {
            req = req.header(crate::gateway::mcp_headers::MCP_METHOD, v);
        }
        if let Some(v) = mirrored.protocol_version {
            req = req.header(MCP_PROTOCOL_VERSION, v);
        }
        if let Some(host) = super::http_client::host_override(&self.uri) {
            req = req.header(hyper::header::HOST, host);
        }
        for (name, value) in self.headers.iter() {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(body)).ok()?;
        let deadline = tokio::time::Instant::now() + self.ctx.limits.request_timeout;
        let resp = tokio::time::timeout_at(deadline, self.client.request(req));
        let resp = resp.await.ok()?.ok()?;
        let status = resp.status().as_u16();
        let events = is_event_stream(resp.headers());
        let answer = read_answer(resp.into_body(), events, &self.ctx, deadline).await;
        Some((status, answer))
    }
}

/// The JSON-RPC answer in a body: the whole of it, or the first event of a
/// stream that is an answer (not a notification); `None` when it holds
/// none by `deadline`, or more than `--max-body`.
async fn read_answer(
    body: hyper::body::Incoming,
    events: bool,
    ctx: &Ctx,
    deadline: tokio::time::Instant,
) -> Option<Bytes> {
    let max = ctx.limits.max_body;
    let mut body = Limited::new(body, max);
    let mut decoder = SseDecoder::new(max);
    let mut raw = Vec::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(f))) => f,
            Ok(None) => break,
            Ok(Some(Err(_))) | Err(_) => return None,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if !events {
            raw.extend_from_slice(&data);
            continue;
        }
        let mut got = Vec::new();
        decoder.push(&data, &mut got).ok()?;
        let answer = |m: &Bytes| {
            matches!(
                scan(m, &ctx.scan),
                Ok(Scanned::Single(Kind::Success { .. } | Kind::Error { .. }))
            )
        };
        if let Some(answer) = got.into_iter().find(answer) {
            return Some(answer);
        }
    }
    (!events && !raw.is_empty()).then(|| Bytes::from(raw))
}

impl McpSession {
    fn new(uri: &Uri, env: &Env, session: &Session) -> Arc<Self> {
        Arc::new(McpSession {
            uri: uri.clone(),
            shown: crate::gateway::redact::PublicUrl::of_uri(uri),
            client: env.https_client().clone(),
            headers: env.headers.clone(),
            ctx: env.ctx.clone(),
            session: session.clone(),
            negotiated: Mutex::new(Negotiated::default()),
            initialized: Notify::new(),
            credential: Mutex::new(None),
        })
    }

    fn negotiated(&self) -> std::sync::MutexGuard<'_, Negotiated> {
        self.negotiated.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request to the upstream carrying the session's headers, and the
    /// forwarded `credential` (a POST's own; else the last one); the
    /// session id it carries.
    fn request(
        &self,
        method: Method,
        accept: HeaderValue,
        body: Bytes,
        credential: Option<&Bytes>,
    ) -> Result<(hyper::Request<Full<Bytes>>, Option<HeaderValue>), String> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(self.uri.clone())
            .header(ACCEPT, accept);
        // What the body gives (MCP 2026-07-28's Request Metadata); a
        // request's own protocol version wins over the session's.
        let mirrored = crate::gateway::mcp_headers::mirrored(&body);
        if !body.is_empty() {
            req = req.header(CONTENT_TYPE, "application/json");
        }
        let call = mirrored.method.as_ref().is_some_and(|m| m == "tools/call");
        if let Some(v) = mirrored.method {
            req = req.header(crate::gateway::mcp_headers::MCP_METHOD, v);
        }
        if let Some(v) = mirrored.name {
            req = req.header(crate::gateway::mcp_headers::MCP_NAME, v);
        }
        // A tool call of the stateless revision: the parameters its tool
        // has mirrored into headers, as that revision's clients send them.
        if call && mirrored.protocol_version.is_some() {
            for (name, value) in self.ctx.mcp_params.headers(&self.uri.to_string(), &body) {
                req = req.header(name, value);
            }
        }
        if let Some(host) = super::http_client::host_override(&self.uri) {
            req = req.header(hyper::header::HOST, host);
        }
        for (name, value) in self.headers.iter() {
            req = req.header(name, value);
        }
        let sent = {
            let n = self.negotiated();
            match mirrored.protocol_version {
                // A request of the stateless revision: its own version, and
                // no session (that revision has none).
                Some(v) => {
                    req = req.header(MCP_PROTOCOL_VERSION, v);
                    None
                }
                None => {
                    if let Some(v) = &n.protocol_version {
                        req = req.header(MCP_PROTOCOL_VERSION, v.clone());
                    }
                    if let Some(v) = &n.session_id {
                        req = req.header(MCP_SESSION_ID, v.clone());
                    }
                    n.session_id.clone()
                }
            }
        };
        let mut req = req
            .body(Full::new(body))
            .map_err(|e| format!("bad upstream request: {e}"))?;
        let last = credential
            .is_none()
            .then(|| {
                self.credential
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
            })
            .flatten();
        if let Some(c) = credential.or(last.as_ref()) {
            crate::gateway::forward::present(req.headers_mut(), c);
        }
        Ok((req, sent))
    }

    /// Remembers the session id a successful answer to initialize assigns.
    fn learn_session_id(&self, headers: &hyper::HeaderMap) {
        let Some(v) = headers.get(&MCP_SESSION_ID) else {
            return;
        };
        // MCP: visible ASCII only (0x21 to 0x7E).
        if v.is_empty() || !v.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b)) {
            warn!(uri = %self.shown, "the upstream assigned an Mcp-Session-Id that is not visible ASCII; ignored");
            return;
        }
        let mut n = self.negotiated();
        if n.session_id.as_ref() != Some(v) {
            info!(uri = %self.shown, session = %String::from_utf8_lossy(v.as_bytes()), "upstream MCP session");
            n.session_id = Some(v.clone());
        }
    }

    /// The server no longer knows session `sent` (HTTP 404).
    fn forget_session_id(&self, sent: &HeaderValue) -> String {
        let mut n = self.negotiated();
        if n.session_id.as_ref() == Some(sent) {
            n.session_id = None;
            n.protocol_version = None;
        }
        format!(
            "the upstream's MCP session {} has ended (HTTP 404): the client must send initialize again",
            String::from_utf8_lossy(sent.as_bytes())
        )
    }

    /// Posts one message from the peer (with the `credential` an edge
    /// forwarded) and delivers what comes back.
    async fn exchange(&self, text: Bytes, what: Message, credential: Option<Bytes>) {
        let ctx = &self.ctx;
        let is_notification = matches!(what, Message::Notification(_));
        let (asked, notification) = match what {
            Message::Request(a) => (Some(a), None),
            Message::Notification(m) => (None, m),
            Message::Response => (None, None),
        };
        let started = Instant::now();
        // A request's deadline is the exchange's, which answers it then;
        // a notification's is as far off (as for any served message).
        let deadline = match &asked {
            Some(a) => match self.session.deadline_of(&a.id, a.kind) {
                Some(deadline) => deadline,
                None => {
                    // Answered already (its deadline passed while it
                    // waited here): nobody waits for what it would do.
                    debug!(uri = %self.shown, "a request answered before it was posted; not posted");
                    return;
                }
            },
            None => started + ctx.limits.request_timeout,
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        let post = self.post(text, asked.as_ref(), credential.as_ref());
        let posted = tokio::time::timeout_at(deadline, post).await;
        // The upstream's latency: a request's, to its answer.
        if asked.is_some() && matches!(posted, Ok(Ok(()))) {
            ctx.metrics.upstream_latency.observe(started.elapsed());
        }
        match (posted, asked) {
            (Ok(Ok(())), _) => {
                // The server took it: the credential the GET stream and the
                // DELETE present from now on (one it refused is never).
                if let Some(c) = credential {
                    *self.credential.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
                }
                if is_notification {
                    ctx.metrics.upstream_notifications.fetch_add(1, Relaxed);
                }
                if notification.as_deref() == Some("notifications/initialized") {
                    self.initialized.notify_one();
                }
            }
            (
                Ok(Err(Unanswered {
                    refused: Some((status, challenge)),
                    ..
                })),
                Some(a),
            ) => self.refused(&a, (status, &challenge), deadline).await,
            (
                Ok(Err(Unanswered {
                    detail, reached, ..
                })),
                Some(a),
            ) => {
                debug!(%detail, "the upstream did not answer");
                self.session
                    .local_cannot_answer(&a.id, a.kind, &detail, reached)
                    .await;
            }
            (Ok(Err(Unanswered { detail, .. })), None) => {
                ctx.metrics.dropped.fetch_add(1, Relaxed);
                warn!(uri = %self.shown, %detail, "the upstream did not take a notification or reply");
            }
            // A request that timed out is answered by the session's sweep,
            // at its deadline.
            (Err(_), _) => debug!(uri = %self.shown, "upstream exchange timed out"),
        }
    }

    /// Delivers the messages of a POST's event stream (or of a GET that
    /// resumes it) until the reply to `asked` (if it asked): whether the
    /// reply came, the last message that was not it, and where the stream
    /// would resume.
    async fn read_events(
        &self,
        mut body: hyper::body::Incoming,
        asked: Option<&Asked>,
    ) -> Result<(bool, Bytes, Resume), String> {
        let uri = &self.shown;
        let mut events = SseDecoder::new(self.ctx.limits.max_body);
        let (mut answered, mut other, mut broken) = (false, Bytes::new(), None);
        while !answered {
            let Some(frame) = body.frame().await else {
                break;
            };
            let frame = match frame {
                Ok(frame) => frame,
                Err(e) => {
                    let e = error_chain(&e);
                    broken = Some(format!("upstream {uri}: reading its event stream: {e}"));
                    break;
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let mut complete = Vec::new();
            let pushed = events.push(&data, &mut complete);
            for event in complete {
                if !crate::sse::carries_a_message(&event) {
                    continue;
                }
                if self.deliver(event.clone(), asked).await {
                    answered = true;
                } else {
                    other = event;
                }
            }
            if let Err(e) = pushed {
                if answered {
                    break;
                }
                // The decoder's only error: an event over --max-body.
                let crate::sse::SseError::TooLarge { max } = e;
                return Err(crate::gateway::carry::reply_over_max_body(
                    &format!("upstream {uri}"),
                    None,
                    max,
                ));
            }
        }
        let resume = Resume {
            last_id: events.last_event_id().clone(),
            retry: events.retry(),
            broken,
        };
        Ok((answered, other, resume))
    }

    /// Resumes a request's event stream that the server closed (or that
    /// broke) before the reply (MCP 2025-11-25, "Resumability and
    /// Redelivery": a server may close it to have the client poll; the
    /// client resumes with a GET naming the last event id, after the
    /// `retry` the stream asked for). GETs until the reply comes or the
    /// request is answered otherwise (on the session's GET stream); the
    /// last event id and retry are kept across streams that give none, as
    /// an event source keeps them; [`MAX_RESUMES`] at most, within the
    /// exchange's deadline. Whether the reply came, and the last message
    /// that was not it.
    async fn resume(
        &self,
        asked: &Asked,
        credential: Option<&Bytes>,
        mut from: Resume,
    ) -> Result<(bool, Bytes), Unanswered> {
        let uri = &self.shown;
        let mut other = Bytes::new();
        for _ in 0..MAX_RESUMES {
            tokio::time::sleep(from.retry.unwrap_or(RESUME_AFTER)).await;
            if self.session.deadline_of(&asked.id, asked.kind).is_none() {
                return Ok((true, other));
            }
            let Ok(last) = HeaderValue::from_maybe_shared(from.last_id.clone()) else {
                break;
            };
            let (mut req, sent) = self
                .request(Method::GET, EVENT_STREAM, Bytes::new(), credential)
                .map_err(Unanswered::reached)?;
            req.headers_mut().insert(LAST_EVENT_ID, last);
            let resp = self.client.request(req).await.map_err(|e| {
                Unanswered::reached(format!(
                    "upstream {uri}: resuming its event stream: {}",
                    error_chain(&e)
                ))
            })?;
            let status = resp.status();
            if status == StatusCode::NOT_FOUND
                && let Some(sent) = &sent
            {
                return Err(Unanswered::reached(self.forget_session_id(sent)));
            }
            if !status.is_success() {
                return Err(Unanswered::reached(format!(
                    "upstream {uri} closed the request's event stream before the reply, and refused to resume it (HTTP {status})"
                )));
            }
            if !is_event_stream(resp.headers()) {
                // Not a stream: its body is the answer, or nothing.
                let body = Limited::new(resp.into_body(), self.ctx.limits.max_body)
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let answered = !body.is_empty() && self.deliver(body.clone(), Some(asked)).await;
                return Ok((answered, if answered { other } else { body }));
            }
            let (answered, last, next) = self
                .read_events(resp.into_body(), Some(asked))
                .await
                .map_err(Unanswered::reached)?;
            if !last.is_empty() {
                other = last;
            }
            if answered {
                return Ok((true, other));
            }
            from = Resume {
                last_id: Some(next.last_id)
                    .filter(|id| !id.is_empty())
                    .unwrap_or(from.last_id),
                retry: next.retry.or(from.retry),
                broken: next.broken,
            };
        }
        match from.broken {
            Some(why) => Err(Unanswered::reached(why)),
            None => Ok((false, other)),
        }
    }

    /// The POST of one message; `Err` says why the request (if it is one)
    /// got no reply, and whether the server took it.
    async fn post(
        &self,
        text: Bytes,
        asked: Option<&Asked>,
        credential: Option<&Bytes>,
    ) -> Result<(), Unanswered> {
        let uri = &self.shown;
        let (req, sent) = self
            .request(Method::POST, ACCEPT_BOTH, text, credential)
            .map_err(Unanswered::not_reached)?;
        let resp = self.client.request(req).await.map_err(|e| Unanswered {
            detail: format!("upstream {uri}: {}", error_chain(&e)),
            // Once connected, the request may have gone out whole.
            reached: !e.is_connect(),
            refused: None,
        })?;
        let status = resp.status();
        if credential.is_some()
            && let Some(refused) = refusal(&resp, uri)
        {
            return Err(refused);
        }
        // The session is the one the answer to initialize names (MCP:
        // "at initialization time"), never one named on an error or on
        // another request's answer.
        if status.is_success() && asked.is_some_and(|a| a.initialize) {
            self.learn_session_id(resp.headers());
        }
        if status == StatusCode::NOT_FOUND
            && let Some(sent) = &sent
        {
            return Err(Unanswered::not_reached(self.forget_session_id(sent)));
        }
        let sse = is_event_stream(resp.headers());
        let max = self.ctx.limits.max_body;
        // Whether the reply came, and the last message that was not the
        // reply (quoted if none is).
        let (answered, other) = if sse {
            let (answered, other, resume) = self
                .read_events(resp.into_body(), asked)
                .await
                .map_err(Unanswered::reached)?;
            match asked {
                // Closed (or broken) before the reply, with an id to
                // resume from.
                Some(a) if !answered && !resume.last_id.is_empty() => {
                    let (answered, later) = self.resume(a, credential, resume).await?;
                    (answered, if later.is_empty() { other } else { later })
                }
                _ => match resume.broken {
                    Some(why) if !answered => return Err(Unanswered::reached(why)),
                    _ => (answered, other),
                },
            }
        } else {
            let body = Limited::new(resp.into_body(), max)
                .collect()
                .await
                .map_err(|e| {
                    Unanswered::reached(crate::gateway::carry::reading_reply_failed(uri, &*e, max))
                })?
                .to_bytes();
            match body.is_empty() {
                true => (false, body),
                false => (self.deliver(body.clone(), asked).await, body),
            }
        };
        if answered || (asked.is_none() && status.is_success()) {
            return Ok(());
        }
        Err(without_reply(uri, status, asked.is_some(), &other))
    }

    /// Hands one message from the upstream to the session; whether it is
    /// the reply to `asked` (a batch: whether one of its elements is).
    async fn deliver(&self, msg: Bytes, asked: Option<&Asked>) -> bool {
        let scanned = scan(&msg, &self.ctx.scan);
        let (reply, response) = match &scanned {
            Ok(Scanned::Single(kind)) => (
                asked.is_some_and(|a| answers(&msg, kind, a)),
                matches!(kind, Kind::Success { .. } | Kind::Error { .. }),
            ),
            Ok(Scanned::Batch(elements)) => (
                asked.is_some_and(|a| {
                    elements
                        .iter()
                        .any(|e| e.kind.as_ref().is_ok_and(|k| answers(&msg, k, a)))
                }),
                false,
            ),
            Err(_) => (false, false),
        };
        if reply && asked.is_some_and(|a| a.initialize) {
            self.learn_protocol_version(&msg);
        }
        if reply && asked.is_some_and(|a| a.tools_list) {
            self.ctx.mcp_params.learn(&self.uri.to_string(), &msg);
        }
        if response && !reply {
            // A response to no request of this exchange (a server's error
            // with an id of its own): the detail quotes it instead.
            self.ctx.metrics.dropped.fetch_add(1, Relaxed);
            return false;
        }
        match asked {
            // What comes on a request's stream before its reply belongs to
            // it (MCP: progress, log messages): streamed with it.
            Some(a) if !reply => {
                let named = Named::Id(a.id.clone(), a.kind);
                self.session.on_local_related(msg, scanned, named).await;
            }
            _ => self.session.on_local_scanned(msg, scanned).await,
        }
        reply
    }

    /// The protocol version an `initialize` reply settles, sent with every
    /// later request (MCP 2025-06-18).
    fn learn_protocol_version(&self, reply: &[u8]) {
        let version = serde_json::from_slice::<serde_json::Value>(reply)
            .ok()
            .and_then(|v| {
                v.get("result")?
                    .get("protocolVersion")?
                    .as_str()
                    .map(str::to_owned)
            })
            .and_then(|v| HeaderValue::from_str(&v).ok());
        if let Some(v) = version {
            self.negotiated().protocol_version = Some(v);
        }
    }

    /// The server refused the credential the edge forwarded with `asked`:
    /// the request is answered with a JSON-RPC error of this gateway's, and
    /// beside it the status, the challenge and the server's
    /// protected-resource metadata, for the edge to answer its client with.
    async fn refused(
        &self,
        asked: &Asked,
        (status, challenge): (u16, &Bytes),
        deadline: tokio::time::Instant,
    ) {
        let (map, metadata) = self.metadata(challenge, deadline).await;
        let wire = crate::gateway::forward::encode_challenge(status, map, challenge, &metadata);
        let reply = crate::gateway::forward::refused_reply(Some(&asked.id), status);
        self.session
            .on_local_message_with(reply.into(), Some(Attached::Challenge(wire)))
            .await;
    }

    /// An HTTP request for the server's authorization endpoints an edge
    /// carried (`--forward-authorization`, the 2025-03-26 layout), made to
    /// the server's scheme and authority; its answer goes back beside the
    /// reply to `text` ([`passthrough`]).
    async fn pass(&self, text: Bytes, wire: Bytes) {
        let deadline = tokio::time::Instant::now() + self.ctx.limits.request_timeout;
        let send = |req: hyper::Request<Full<Bytes>>, room: usize| async move {
            let resp = (self.client.request(req).await).map_err(|e| error_chain(&e))?;
            let (head, body) = resp.into_parts();
            let body = Limited::new(body, room).collect().await;
            let body = body.map_err(|e| format!("its answer: {e}"))?.to_bytes();
            Ok((head.status.as_u16(), head.headers, body))
        };
        let host = super::http_client::host_override(&self.uri);
        let answer = passthrough::pass(&wire, &self.uri, host, deadline, send).await;
        match passthrough::reply_to(&text, &answer, &self.ctx.peer_scan) {
            Ok((reply, _)) => {
                let attached = Some(Attached::HttpResponse(answer));
                self.session.on_local_message_with(reply, attached).await;
            }
            Err(e) => self.unanswered(&text, &e).await,
        }
    }

    /// The edge cancelled the request whose id token is `id` (its client
    /// left; MCP's `notifications/cancelled` came with it): its exchange
    /// with the server is ended (the POST's stream closed, which is how a
    /// stateless server hears of it) and the request given up. Whether the
    /// notification goes on to the server: to a session's alone.
    async fn cancelled(&self, id: &[u8], running: &mut Running) -> bool {
        if let Some(kind) = running.end(id) {
            let detail = "cancelled: its client went away";
            self.session
                .local_cannot_answer(id, kind, detail, true)
                .await;
        }
        self.negotiated().session_id.is_some()
    }

    /// The server's protected-resource metadata a refusal names (on its
    /// own scheme and authority alone), and how its `resource` maps
    /// ([`crate::gateway::forward::MetadataCache`]).
    async fn metadata(&self, challenge: &[u8], deadline: tokio::time::Instant) -> (u8, Bytes) {
        use crate::gateway::forward::MAX_METADATA;
        let get = |uri: Uri| async move {
            let mut req = hyper::Request::new(Full::new(Bytes::new()));
            *req.uri_mut() = uri;
            if let Some(host) = super::http_client::host_override(&self.uri) {
                req.headers_mut().insert(hyper::header::HOST, host);
            }
            let resp = self.client.request(req).await.ok()?;
            if !resp.status().is_success() {
                return None;
            }
            let body = Limited::new(resp.into_body(), MAX_METADATA).collect().await;
            body.ok().map(|b| b.to_bytes())
        };
        self.ctx
            .upstream_metadata
            .fetch(challenge, &self.uri, deadline, get)
            .await
    }

    /// A message the upstream will not be asked: its request, if it is one,
    /// is answered NotDelivered.
    async fn unanswered(&self, text: &Bytes, detail: &str) {
        match scan(text, &self.ctx.scan) {
            Ok(Scanned::Single(Kind::Request { id, .. })) => {
                let token = &text[id.token.clone()];
                self.session
                    .local_cannot_answer(token, id.kind, detail, false)
                    .await;
            }
            _ => {
                self.ctx.metrics.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// The GET stream for what the server sends outside any request: opened
    /// once the client has sent `notifications/initialized`, opened again
    /// (with backoff) when it ends, given up when the server has none (405)
    /// or forgot the session (404) until the client initializes again.
    async fn listen(&self) {
        loop {
            self.initialized.notified().await;
            // A stream that lasted is no reason to wait long; one that
            // ends at once must not become a loop of GETs.
            let mut backoff = Backoff::new(LISTEN_BACKOFF, LISTEN_MAX_BACKOFF, LISTEN_MAX_BACKOFF);
            loop {
                let opened = Instant::now();
                match self.listen_once().await {
                    Ok(()) => backoff.ended(opened.elapsed()),
                    // None to have for this session: wait for the next
                    // `notifications/initialized` (a new session).
                    Err(Some(why)) => {
                        debug!(uri = %self.shown, %why, "upstream GET stream: none for now");
                        break;
                    }
                    Err(None) => {}
                }
                tokio::time::sleep(backoff.pause()).await;
            }
        }
    }

    /// One GET stream: `Ok` when it ended after it was open,
    /// `Err(None)` when it failed (try again), `Err(Some(why))` when there
    /// is none to have.
    async fn listen_once(&self) -> Result<(), Option<String>> {
        let (req, sent) = self
            .request(Method::GET, EVENT_STREAM, Bytes::new(), None)
            .map_err(Some)?;
        let resp = self.client.request(req).await.map_err(|e| {
            debug!(uri = %self.shown, error = %error_chain(&e), "upstream GET stream");
            None
        })?;
        let status = resp.status();
        if status == StatusCode::METHOD_NOT_ALLOWED {
            return Err(Some("the server offers none (HTTP 405)".into()));
        }
        if status == StatusCode::NOT_FOUND
            && let Some(sent) = &sent
        {
            return Err(Some(self.forget_session_id(sent)));
        }
        if !status.is_success() {
            return Err(None);
        }
        let mut events = SseDecoder::new(self.ctx.limits.max_body);
        let mut body = resp.into_body();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let mut complete = Vec::new();
            let pushed = events.push(&data, &mut complete);
            for event in complete
                .into_iter()
                .filter(|e| crate::sse::carries_a_message(e))
            {
                self.session.on_local_message(event).await;
            }
            if pushed.is_err() {
                self.ctx.metrics.dropped.fetch_add(1, Relaxed);
                warn!(uri = %self.shown, "an event over --max-body on the upstream's GET stream; reconnecting");
                break;
            }
        }
        Ok(())
    }

    /// Ends the upstream session, if it has one (MCP: the client SHOULD
    /// send DELETE; a server that does not allow it answers 405).
    async fn end(&self) {
        if self.negotiated().session_id.is_none() {
            return;
        }
        let Ok((req, _)) = self.request(Method::DELETE, ACCEPT_BOTH, Bytes::new(), None) else {
            return;
        };
        match tokio::time::timeout(DELETE_WAIT, self.client.request(req)).await {
            Ok(Ok(resp)) => {
                debug!(uri = %self.shown, status = %resp.status(), "upstream MCP session ended")
            }
            Ok(Err(e)) => {
                debug!(uri = %self.shown, error = %error_chain(&e), "ending the upstream MCP session")
            }
            Err(_) => debug!(uri = %self.shown, "ending the upstream MCP session: no answer"),
        }
    }
}

/// Whether an answer is an event stream.
fn is_event_stream(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The server refused the credential an edge forwarded (401 or 403 with
/// `WWW-Authenticate`): not reached, the status and the challenge.
fn refusal<B>(resp: &hyper::Response<B>, uri: &dyn std::fmt::Display) -> Option<Unanswered> {
    let status = resp.status();
    if !matches!(status.as_u16(), 401 | 403) {
        return None;
    }
    let challenge = resp.headers().get(hyper::header::WWW_AUTHENTICATE)?;
    Some(Unanswered {
        detail: format!("upstream {uri} refused the credential (HTTP {status})"),
        reached: false,
        refused: Some((
            status.as_u16(),
            Bytes::copy_from_slice(challenge.as_bytes()),
        )),
    })
}

/// A POST answered `status` without the reply to the request it `asked`
/// (or a notification or reply not taken); `other`: the last message that
/// was not the reply, quoted.
fn without_reply(
    uri: &dyn std::fmt::Display,
    status: StatusCode,
    asked: bool,
    other: &[u8],
) -> Unanswered {
    let quoted = String::from_utf8_lossy(&other[..other.len().min(QUOTED)]).into_owned();
    // A server that took the request (2xx), or failed at it (5xx), may have
    // run it; one that refused it (4xx) did not.
    let reached = status.is_success() || status.is_server_error();
    let detail = match (asked, other.is_empty()) {
        (true, true) => format!("upstream {uri} answered HTTP {status} without a reply"),
        (true, false) => {
            format!(
                "upstream {uri} answered HTTP {status} without a reply to this request: {quoted}"
            )
        }
        (false, _) => format!("upstream {uri} answered HTTP {status}: {quoted}"),
    };
    Unanswered {
        detail,
        reached,
        refused: None,
    }
}

/// Whether `kind` (of `msg`) is the response to `asked`.
fn answers(msg: &[u8], kind: &Kind, asked: &Asked) -> bool {
    match kind {
        Kind::Success { id } | Kind::Error { id } => {
            same_id(&msg[id.token.clone()], id.kind, &asked.id, asked.kind)
        }
        _ => false,
    }
}
