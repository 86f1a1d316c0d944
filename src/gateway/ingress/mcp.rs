//! MCP's Streamable HTTP at an edge's HTTP ingress (`--protocol mcp`): an
//! MCP client that talks HTTP gets a session of its own, on an association
//! of its own, as a WebSocket client does.
//!
//! - A POST of `initialize` without `Mcp-Session-Id` opens a session: a new
//!   association, a fresh random id in the reply's `Mcp-Session-Id`.
//! - A POST with that id goes to its session. A request is answered on an
//!   event stream (or as JSON when the client does not accept
//!   `text/event-stream`); the server's own messages while it runs (progress,
//!   logging, sampling requests) come on the newest open request stream,
//!   else on the GET stream. A notification or the client's answer to a
//!   server request gets 202.
//! - GET with the id opens the stream for what the server sends outside any
//!   request; DELETE ends the session and its association.
//! - An unknown or ended session's id gets 404, so the client initializes
//!   again; a session with no POST for `--idle-timeout` and no request in
//!   flight is ended, its GET stream open or not.
//! - At most `--max-connections` sessions, and `--max-sessions-per-client`
//!   of one client, their slots taken before their handshakes begin.
//! - A session belongs to the credential that opened it (its bearer token,
//!   client certificate or local user): a request with another gets what
//!   an unknown session gets, 404, whether it POSTs, GETs or DELETEs.
//!   Without client authentication the session id is the only key.
//! - One GET stream per session: a second while the first is open gets
//!   409.
//!
//! Requests without a session id (and without `initialize`) keep the
//! stateless path: pooled associations, one reply per POST.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use super::Ingress;
use super::limit::{ClientKey, Place, Places, PlacesFull};
use super::response::{
    HttpResponse, empty_response, event_response, event_response_after, json_response,
};
use crate::gateway::context::Ctx;
use crate::gateway::edge::Edge;
use crate::gateway::outbox::Inbox;
use crate::gateway::session::Session;
use crate::jsonrpc::carriage::{local_error, method_of};
use crate::jsonrpc::{IdKind, Kind, Scanned, same_id, scan};
use crate::relay::Attached;

pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");

/// Messages a request's stream may hold for a client that reads slowly.
const STREAM_QUEUE: usize = 64;

/// The sessions of one HTTP ingress.
pub struct McpSessions {
    map: Mutex<HashMap<String, Arc<HttpSession>>>,
    /// Sessions held or being opened, in all (`--max-connections`) and by
    /// client (`--max-sessions-per-client`): a place is taken before the
    /// session's handshake begins, so a burst of `initialize` cannot
    /// overshoot the limits.
    places: Arc<Places>,
}

struct HttpSession {
    id: String,
    ctx: Arc<Ctx>,
    session: Session,
    routes: Mutex<Routes>,
    last_used: Mutex<Instant>,
    /// The credential that opened it, where the client proved one.
    owner: Option<ClientKey>,
    /// On an edge that forwards credentials (and checks none): the SHA-256
    /// of the `Authorization` of its last POST the upstream did not refuse,
    /// which a GET or DELETE must present (else anyone with the session's
    /// id could use a credential it never held).
    forwarded: Mutex<Option<[u8; 32]>>,
    /// Held while the session is.
    _place: Place,
}

#[derive(Default)]
struct Routes {
    /// The requests in flight, oldest first, with the streams they are
    /// answered on.
    waiting: Vec<Waiting>,
    /// The GET stream.
    get: Option<mpsc::Sender<Bytes>>,
}

struct Waiting {
    id: Bytes,
    kind: IdKind,
    tx: mpsc::Sender<Bytes>,
    /// An event stream (else a JSON reply: the response only).
    events: bool,
    /// Where the upstream's refusal of the credential the edge forwarded
    /// with it goes (`--forward-authorization`).
    refused: Option<oneshot::Sender<Bytes>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The session id a request names.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(&MCP_SESSION_ID).and_then(|v| v.to_str().ok())
}

/// Whether the client takes an event stream.
pub fn accepts_events(headers: &HeaderMap) -> bool {
    headers
        .get(hyper::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"))
}

fn unknown_session(id: &str) -> HttpResponse {
    let body = local_error(
        None,
        -32001,
        &format!("no MCP session {id:?} here (ended, or never opened): send initialize again"),
        None,
    );
    json_response(404, body)
}

impl McpSessions {
    /// At most `max_total` sessions, `max_per_client` of one client.
    pub fn new(max_total: usize, max_per_client: usize) -> Self {
        Self {
            map: Mutex::default(),
            places: Arc::new(Places::new(max_total, max_per_client)),
        }
    }

    /// The session `id`, if `client` may use it: another credential than
    /// the one that opened it finds none.
    fn find(&self, id: &str, client: ClientKey) -> Option<Arc<HttpSession>> {
        let s = lock(&self.map).get(id).cloned()?;
        if !s.owned_by(client) {
            debug!(session = %id, "an MCP session named by another credential than its own: refused as unknown");
            return None;
        }
        Some(s)
    }

    /// A POST of one message, if it is MCP session traffic: it names a
    /// session, or it is `initialize`. `None`: the stateless path takes it.
    pub async fn post(
        self: &Arc<Self>,
        edge: &Arc<Edge>,
        headers: &HeaderMap,
        body: Bytes,
        kind: Kind,
        (client, attached): (ClientKey, Option<Attached>),
    ) -> Option<HttpResponse> {
        let events = accepts_events(headers);
        if let Some(id) = session_id(headers) {
            return Some(match self.find(id, client) {
                Some(s) => s.post(body, kind, events, attached).await,
                None => unknown_session(id),
            });
        }
        let initialize = matches!(&kind, Kind::Request { method, .. }
            if method_of(&body, method).as_deref() == Some("initialize"));
        if !initialize {
            return None;
        }
        Some(
            self.open(edge, body, kind, events, (client, attached))
                .await,
        )
    }

    /// A batch naming a session: MCP 2025-06-18 has no batches.
    pub fn batch(&self, headers: &HeaderMap) -> Option<HttpResponse> {
        session_id(headers)?;
        let body = local_error(
            None,
            -32600,
            "an MCP session takes one message per POST (MCP 2025-06-18 has no batches)",
            None,
        );
        Some(json_response(400, body))
    }

    /// Opens a session with `initialize` and answers it.
    async fn open(
        self: &Arc<Self>,
        edge: &Arc<Edge>,
        body: Bytes,
        kind: Kind,
        events: bool,
        (client, attached): (ClientKey, Option<Attached>),
    ) -> HttpResponse {
        let ctx = &edge.ctx;
        let id_token =
            crate::jsonrpc::carriage::id_of(&kind).map(|id| body.slice(id.token.clone()));
        let place = match self.places.take(client) {
            Ok(place) => place,
            Err(full) => {
                ctx.metrics.sessions_refused.fetch_add(1, Relaxed);
                let why = match full {
                    PlacesFull::Total => format!(
                        "{} MCP sessions are open (--max-connections)",
                        ctx.limits.max_connections
                    ),
                    PlacesFull::Each => format!(
                        "this client holds {} MCP sessions already (--max-sessions-per-client): end one (DELETE) or let it idle out",
                        self.places.max_each()
                    ),
                };
                let f = crate::relay::Failure::Unavailable(why);
                return json_response(f.http_status(), f.response(id_token.as_deref()));
            }
        };
        let (tx, rx) = ctx.limits.outbox();
        let session = match edge.session(Ingress::HTTP, tx).await {
            Ok(s) => s,
            Err(f) => return json_response(f.http_status(), f.response(id_token.as_deref())),
        };
        let Some(id) = new_session_id() else {
            session.close().await;
            let f = crate::relay::Failure::Unavailable(
                "the system's random generator failed: no session id".into(),
            );
            return json_response(f.http_status(), f.response(id_token.as_deref()));
        };
        let s = Arc::new(HttpSession {
            id: id.clone(),
            ctx: ctx.clone(),
            session,
            routes: Mutex::new(Routes::default()),
            last_used: Mutex::new(Instant::now()),
            owner: client.is_credential().then_some(client),
            forwarded: Mutex::new(None),
            _place: place,
        });
        lock(&self.map).insert(id.clone(), s.clone());
        info!(session = %id, "MCP session opened");
        let (sessions, router) = (self.clone(), s.clone());
        let idle = ctx.limits.idle_timeout;
        let stall = ctx.limits.stall_timeout;
        tokio::spawn(async move { sessions.route(router, rx, idle, stall).await });
        let mut resp = s.post(body, kind, events, attached).await;
        if matches!(resp.status().as_u16(), 401 | 403) {
            // The upstream refused the client's credential: no session was
            // opened there, so none is here. The client initializes again
            // with a credential it will take.
            lock(&self.map).remove(&id);
            s.session.close().await;
            return resp;
        }
        if let Ok(v) = HeaderValue::from_str(&id) {
            resp.headers_mut().insert(MCP_SESSION_ID, v);
        }
        resp
    }

    /// GET: the stream for what the server sends outside any request; one
    /// at a time (a second would take the first's messages away from it).
    pub fn get(&self, headers: &HeaderMap, client: ClientKey) -> Option<HttpResponse> {
        let id = session_id(headers)?;
        let Some(s) = self.find(id, client).filter(|s| s.presents(headers)) else {
            return Some(unknown_session(id));
        };
        s.touch();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        {
            let mut routes = lock(&s.routes);
            if routes.get.as_ref().is_some_and(|g| !g.is_closed()) {
                let body = local_error(
                    None,
                    -32600,
                    "this MCP session has a GET stream open already: one at a time",
                    None,
                );
                return Some(json_response(409, body));
            }
            routes.get = Some(tx);
        }
        Some(event_response(rx))
    }

    /// DELETE: ends the session and its association.
    pub async fn delete(&self, headers: &HeaderMap, client: ClientKey) -> Option<HttpResponse> {
        let id = session_id(headers)?;
        // Found and removed under one lock: its owner's, or none.
        let removed = {
            let mut map = lock(&self.map);
            match map.get(id) {
                Some(s) if s.owned_by(client) && s.presents(headers) => map.remove(id),
                _ => None,
            }
        };
        let Some(s) = removed else {
            return Some(unknown_session(id));
        };
        info!(session = %id, "MCP session ended by the client");
        s.session.close().await;
        Some(empty_response(StatusCode::OK))
    }

    /// Hands what the session has for its client to the right stream, until
    /// the association ends or the session is idle too long.
    async fn route(
        self: Arc<Self>,
        s: Arc<HttpSession>,
        mut rx: Inbox,
        idle: Duration,
        stall: Duration,
    ) {
        let check = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
        let mut tick = tokio::time::interval(check);
        loop {
            tokio::select! {
                m = rx.recv_with() => match m {
                    Some((m, attached)) => s.dispatch(m, attached, stall).await,
                    None => break,
                },
                _ = s.session.assoc().ended() => {
                    // The answers to what was in flight follow the end.
                    while let Ok(Some((m, attached))) =
                        tokio::time::timeout(Duration::from_millis(100), rx.recv_with()).await
                    {
                        s.dispatch(m, attached, stall).await;
                    }
                    break;
                }
                _ = tick.tick() => {
                    if lock(&s.last_used).elapsed() > idle && !s.busy() {
                        info!(session = %s.id, "MCP session idle: ended");
                        s.session.close().await;
                        break;
                    }
                }
            }
        }
        {
            let mut map = lock(&self.map);
            if map.get(&s.id).is_some_and(|x| Arc::ptr_eq(x, &s)) {
                map.remove(&s.id);
            }
        }
        // Every stream still open ends (its client sees no more).
        *lock(&s.routes) = Routes::default();
        debug!(session = %s.id, "MCP session over");
    }
}

impl HttpSession {
    /// Whether `client` may use the session: the credential that opened
    /// it, or anyone where none did.
    fn owned_by(&self, client: ClientKey) -> bool {
        self.owner.is_none_or(|owner| owner == client)
    }

    /// Whether a GET or DELETE with `headers` may use it: on a forwarding
    /// edge, with the credential its last accepted POST had.
    fn presents(&self, headers: &HeaderMap) -> bool {
        match *lock(&self.forwarded) {
            Some(digest) => headers
                .get(hyper::header::AUTHORIZATION)
                .is_some_and(|v| credential_digest(v.as_bytes()) == digest),
            None => true,
        }
    }

    /// Remembers the credential of a POST the upstream took.
    fn accepted(&self, attached: Option<&Attached>) {
        if let Some(Attached::Authorization(a)) = attached {
            *lock(&self.forwarded) = Some(credential_digest(a));
        }
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// A request is in flight: not idle, however long since the last POST.
    /// An open GET stream alone does not keep a session: a client could
    /// hold sessions forever with one each, and a session idle from its
    /// last POST for `--idle-timeout` is ended (its client gets 404 and
    /// initializes again).
    fn busy(&self) -> bool {
        !lock(&self.routes).waiting.is_empty()
    }

    /// One message from the client, with the credential the edge forwards
    /// (`attached`).
    async fn post(
        &self,
        body: Bytes,
        kind: Kind,
        events: bool,
        attached: Option<Attached>,
    ) -> HttpResponse {
        self.touch();
        let Kind::Request { id, .. } = &kind else {
            // A notification, or the client's answer to a server request.
            self.session.on_local_message_with(body, attached).await;
            return empty_response(StatusCode::ACCEPTED);
        };
        let token = body.slice(id.token.clone());
        let (tx, mut rx) = mpsc::channel(STREAM_QUEUE);
        let (refused, mut refusal) = match attached {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        {
            let mut routes = lock(&self.routes);
            if routes
                .waiting
                .iter()
                .any(|w| same_id(&w.id, w.kind, &token, id.kind))
            {
                let e = local_error(
                    Some(&token),
                    -32600,
                    "a request with this id is already in flight in this MCP session",
                    None,
                );
                return json_response(200, e);
            }
            routes.waiting.push(Waiting {
                id: token,
                kind: id.kind,
                tx,
                events,
                refused,
            });
        }
        let credential = attached.clone();
        self.session.on_local_message_with(body, attached).await;
        if let Some(refusal) = refusal.as_mut() {
            // Forwarded: the upstream may refuse the credential, which its
            // status answers; nothing is sent before the first message
            // says whether it did.
            let first = rx.recv().await;
            if let (Some(reply), Ok(challenge)) = (&first, refusal.try_recv()) {
                return self.challenged(reply.clone(), &challenge);
            }
            if first.is_some() {
                self.accepted(credential.as_ref());
            }
            return match (first, events) {
                (Some(first), true) => event_response_after(Some(first), rx),
                (Some(reply), false) => json_response(200, reply),
                (None, _) => session_ended(),
            };
        }
        if events {
            return event_response(rx);
        }
        // JSON: the response alone (the session always answers, if only
        // with its own error at the request timeout).
        match rx.recv().await {
            Some(reply) => json_response(200, reply),
            None => session_ended(),
        }
    }

    /// The upstream refused the credential the edge forwarded: its status
    /// and challenge, and the origin's JSON-RPC error.
    fn challenged(&self, reply: Bytes, challenge: &[u8]) -> HttpResponse {
        let Some((status, value)) = self
            .ctx
            .forwarding
            .as_ref()
            .and_then(|f| f.answer(challenge))
        else {
            return json_response(200, reply);
        };
        self.ctx.metrics.unauthorized.fetch_add(1, Relaxed);
        let mut r = json_response(status, reply);
        if let Ok(v) = HeaderValue::from_str(&value) {
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// One message from the session for the client, with what crossed
    /// beside it (the upstream's refusal of a forwarded credential).
    async fn dispatch(&self, m: Bytes, attached: Option<Attached>, stall: Duration) {
        let target = match scan(&m, &self.ctx.scan) {
            Ok(Scanned::Single(Kind::Success { id } | Kind::Error { id })) => {
                let token = &m[id.token.clone()];
                let mut routes = lock(&self.routes);
                let i = routes
                    .waiting
                    .iter()
                    .position(|w| same_id(&w.id, w.kind, token, id.kind));
                i.map(|i| {
                    let w = routes.waiting.remove(i);
                    // Before the reply: its POST reads the refusal as soon
                    // as the reply comes.
                    if let (Some(refused), Some(Attached::Challenge(c))) = (w.refused, &attached) {
                        let _ = refused.send(c.clone());
                    }
                    w.tx
                })
            }
            // The server's own request or notification: the newest request
            // stream, else the GET stream. Not a stream whose status waits
            // for its reply (a forwarded request: a message of another
            // request would send it 200 before its refusal comes).
            _ => {
                let routes = lock(&self.routes);
                routes
                    .waiting
                    .iter()
                    .rev()
                    .find(|w| w.events && w.refused.is_none() && !w.tx.is_closed())
                    .map(|w| w.tx.clone())
                    .or_else(|| routes.get.clone().filter(|g| !g.is_closed()))
            }
        };
        let Some(tx) = target else {
            self.ctx.metrics.dropped.fetch_add(1, Relaxed);
            warn!(session = %self.id, "a message for an MCP client with no open stream; dropped");
            return;
        };
        if tokio::time::timeout(stall, tx.send(m)).await.is_err() {
            self.ctx.metrics.dropped.fetch_add(1, Relaxed);
            debug!(session = %self.id, "an MCP client's stream is not read; message dropped");
        }
    }
}

/// A credential's SHA-256: what a session keeps of it.
fn credential_digest(credential: &[u8]) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, credential);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// The answer to a request whose session ended before its reply.
fn session_ended() -> HttpResponse {
    let e = local_error(None, -32004, "the MCP session ended", None);
    json_response(502, e)
}

/// 128 random bits, hex: MCP asks for ids that cannot be guessed.
fn new_session_id() -> Option<String> {
    use aws_lc_rs::rand::SecureRandom;
    let mut b = [0u8; 16];
    aws_lc_rs::rand::SystemRandom::new().fill(&mut b).ok()?;
    Some(hex::encode(b))
}
