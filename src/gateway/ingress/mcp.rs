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
//! - Every event stream of a session is resumable ([`super::replay`]): its
//!   events have ids, and a GET with `Last-Event-ID` is sent what came
//!   after that event on its stream, then the rest (MCP 2025-11-25). An id
//!   this session's streams no longer know gets 400.
//!
//! Requests without a session id (and without `initialize`) keep the
//! stateless path: pooled associations, one reply per POST.

use std::collections::{HashMap, VecDeque};
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
use super::replay::{Connection, ENDED_KEPT, Stream, parse_event_id};
use super::response::{HttpResponse, empty_response, framed_event_response, json_response};
use crate::gateway::context::Ctx;
use crate::gateway::edge::Edge;
use crate::gateway::mcp_headers::version_at_least;
use crate::gateway::outbox::Inbox;
use crate::gateway::session::Session;
use crate::jsonrpc::carriage::{local_error, method_of};
use crate::jsonrpc::{IdKind, Kind, Scanned, same_id, scan};
use crate::relay::Attached;

pub const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// What a request answered as JSON is sent: its reply alone.
const REPLY_QUEUE: usize = 1;

/// The first revision whose servers prime their streams for resumability.
const PRIMING_SINCE: &str = "2025-11-25";

/// The sessions of one HTTP ingress.
pub struct McpSessions {
    map: Mutex<HashMap<String, Arc<HttpSession>>>,
    /// Sessions held or being opened, in all (`--max-connections`) and by
    /// client (`--max-sessions-per-client`): a place is taken before the
    /// session's handshake begins, so a burst of `initialize` cannot
    /// overshoot the limits.
    places: Arc<Places>,
    /// What the sessions' streams may keep for resumes, in all.
    replay: Arc<crate::relay::Shared>,
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
    /// What its streams keep for resumes is taken from.
    replay: Arc<crate::relay::Shared>,
    /// Held while the session is.
    _place: Place,
}

#[derive(Default)]
struct Routes {
    /// The requests in flight, oldest first, with the streams they are
    /// answered on.
    waiting: Vec<Waiting>,
    /// The GET stream.
    get: Option<Arc<Stream>>,
    /// The last streams whose reply was sent, oldest first, kept for a
    /// client that lost it ([`ENDED_KEPT`]).
    ended: VecDeque<Arc<Stream>>,
    /// The number of the session's last stream.
    streams: u64,
}

impl Routes {
    /// The session's stream `number`, while it may be resumed. Not one
    /// whose POST still waits to learn whether the upstream refused its
    /// credential: its status is not sent yet.
    fn stream(&self, number: u64) -> Option<Arc<Stream>> {
        let waiting = self.waiting.iter().filter_map(|w| match &w.to {
            To::Events(s) if w.refused.is_none() => Some(s),
            _ => None,
        });
        (waiting.chain(&self.get).chain(&self.ended))
            .find(|s| s.number() == number)
            .cloned()
    }

    /// A new stream, numbered next, keeping at most `room` octets from
    /// `replay`.
    fn open(
        &mut self,
        prime: bool,
        room: usize,
        replay: &Arc<crate::relay::Shared>,
    ) -> (Arc<Stream>, Connection) {
        self.streams += 1;
        Stream::open(self.streams, prime, room, replay.clone())
    }

    /// Ends every stream's connection (the session is over).
    fn close(&mut self) {
        let waiting = self.waiting.iter().filter_map(|w| match &w.to {
            To::Events(s) => Some(s),
            To::Json(_) => None,
        });
        for s in waiting.chain(&self.get).chain(&self.ended) {
            s.close();
        }
        *self = Routes::default();
    }
}

struct Waiting {
    id: Bytes,
    kind: IdKind,
    to: To,
    /// Where the upstream's refusal of the credential the edge forwarded
    /// with it goes (`--forward-authorization`): its challenge, and the
    /// reply it came with.
    refused: Option<oneshot::Sender<(Bytes, Bytes)>>,
}

/// Where a request's messages go.
enum To {
    /// A JSON reply: the response alone.
    Json(mpsc::Sender<Bytes>),
    /// An event stream.
    Events(Arc<Stream>),
}

/// How a POST reads what its request's [`To`] is sent.
enum Reader {
    Json(mpsc::Receiver<Bytes>),
    Events(Connection),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The session id a request names.
pub fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(&MCP_SESSION_ID).and_then(|v| v.to_str().ok())
}

/// Whether a client of this revision expects its streams primed for
/// resumability: 2025-11-25 or later (its `MCP-Protocol-Version`; dates
/// compare as text).
fn primes(headers: &HeaderMap) -> bool {
    headers
        .get(&MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| version_at_least(v, PRIMING_SINCE))
}

/// Whether the client's `initialize` asks for a revision whose streams are
/// primed ([`primes`]).
fn initialize_primes(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Initialize<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(rename = "protocolVersion", borrow)]
        protocol_version: std::borrow::Cow<'a, str>,
    }
    serde_json::from_slice::<Initialize>(body)
        .is_ok_and(|i| version_at_least(&i.params.protocol_version, PRIMING_SINCE))
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
    /// At most `max_total` sessions, `max_per_client` of one client;
    /// their streams keep for resumes at most a quarter of
    /// `memory_budget`.
    pub fn new(max_total: usize, max_per_client: usize, memory_budget: usize) -> Self {
        Self {
            map: Mutex::default(),
            places: Arc::new(Places::new(max_total, max_per_client)),
            replay: super::replay::replay_budget(memory_budget),
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
                Some(s) => {
                    s.post(body, kind, (events, primes(headers)), attached)
                        .await
                }
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
            replay: self.replay.clone(),
            _place: place,
        });
        lock(&self.map).insert(id.clone(), s.clone());
        info!(session = %id, "MCP session opened");
        let (sessions, router) = (self.clone(), s.clone());
        let idle = ctx.limits.idle_timeout;
        let stall = ctx.limits.stall_timeout;
        tokio::spawn(async move { sessions.route(router, rx, idle, stall).await });
        // The revision the client asks for says whether it is primed.
        let prime = initialize_primes(&body);
        let mut resp = s.post(body, kind, (events, prime), attached).await;
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

    /// GET: the stream for what the server sends outside any request, one
    /// at a time (a second would take the first's messages away from it);
    /// with `Last-Event-ID`, the resume of the stream that event was on.
    pub fn get(&self, headers: &HeaderMap, client: ClientKey) -> Option<HttpResponse> {
        let id = session_id(headers)?;
        let Some(s) = self.find(id, client).filter(|s| s.presents(headers)) else {
            return Some(unknown_session(id));
        };
        s.touch();
        if let Some(last) = headers.get(&LAST_EVENT_ID) {
            return Some(s.resume(last));
        }
        let mut routes = lock(&s.routes);
        if routes.get.as_ref().is_some_and(|g| g.connected()) {
            let body = local_error(
                None,
                -32600,
                "this MCP session has a GET stream open already: one at a time",
                None,
            );
            return Some(json_response(409, body));
        }
        let (stream, c) = routes.open(primes(headers), s.ctx.limits.max_body, &s.replay);
        routes.get = Some(stream);
        Some(framed_event_response(c.first, c.rx))
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
        lock(&s.routes).close();
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
    /// (`attached`); `events`: its client takes an event stream, `prime`:
    /// one primed for resumability.
    async fn post(
        &self,
        body: Bytes,
        kind: Kind,
        (events, prime): (bool, bool),
        attached: Option<Attached>,
    ) -> HttpResponse {
        self.touch();
        let Kind::Request { id, .. } = &kind else {
            // A notification, or the client's answer to a server request.
            self.session.on_local_message_with(body, attached).await;
            return empty_response(StatusCode::ACCEPTED);
        };
        let token = body.slice(id.token.clone());
        let (refused, refusal) = match attached {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let waiting = (token.clone(), id.kind, refused);
        let Some(reader) = self.wait_for(waiting, events, prime) else {
            let e = local_error(
                Some(&token),
                -32600,
                "a request with this id is already in flight in this MCP session",
                None,
            );
            return json_response(200, e);
        };
        let credential = attached.clone();
        self.session.on_local_message_with(body, attached).await;
        match refusal {
            Some(refusal) => self.forwarded(reader, refusal, credential).await,
            None => match reader {
                Reader::Events(c) => framed_event_response(c.first, c.rx),
                // JSON: the response alone (the session always answers, if
                // only with its own error at the request timeout).
                Reader::Json(mut rx) => match rx.recv().await {
                    Some(reply) => json_response(200, reply),
                    None => session_ended(),
                },
            },
        }
    }

    /// Makes a request (its id, and where its refusal goes) wait for its
    /// messages: on a new stream (`events`; `prime`d or not), else as JSON.
    /// `None`: a request with its id is in flight.
    fn wait_for(
        &self,
        (token, kind, refused): (Bytes, IdKind, Option<oneshot::Sender<(Bytes, Bytes)>>),
        events: bool,
        prime: bool,
    ) -> Option<Reader> {
        let mut routes = lock(&self.routes);
        if routes
            .waiting
            .iter()
            .any(|w| same_id(&w.id, w.kind, &token, kind))
        {
            return None;
        }
        let (to, reader) = match events {
            true => {
                let (stream, c) = routes.open(prime, self.ctx.limits.max_body, &self.replay);
                (To::Events(stream), Reader::Events(c))
            }
            false => {
                let (tx, rx) = mpsc::channel(REPLY_QUEUE);
                (To::Json(tx), Reader::Json(rx))
            }
        };
        routes.waiting.push(Waiting {
            id: token,
            kind,
            to,
            refused,
        });
        Some(reader)
    }

    /// The answer to a request sent with the client's credential
    /// (`credential`, forwarded): the upstream may refuse it, which its
    /// status answers; nothing is sent before the first message says
    /// whether it did.
    async fn forwarded(
        &self,
        mut reader: Reader,
        mut refusal: oneshot::Receiver<(Bytes, Bytes)>,
        credential: Option<Attached>,
    ) -> HttpResponse {
        let first = match &mut reader {
            Reader::Json(rx) => rx.recv().await,
            Reader::Events(c) => c.rx.recv().await,
        };
        if first.is_some()
            && let Ok((challenge, reply)) = refusal.try_recv()
        {
            // The refusal came with the reply, the first message.
            return self.challenged(reply, &challenge);
        }
        let Some(first) = first else {
            return session_ended();
        };
        self.accepted(credential.as_ref());
        match reader {
            Reader::Events(mut c) => {
                c.first.push_back(first);
                framed_event_response(c.first, c.rx)
            }
            Reader::Json(_) => json_response(200, first),
        }
    }

    /// A GET with `Last-Event-ID`: the stream it names, from after that
    /// event; its connection, if it still had one, let go.
    fn resume(&self, last: &HeaderValue) -> HttpResponse {
        let found = last.to_str().ok().and_then(parse_event_id);
        let found = found.and_then(|(n, after)| Some((lock(&self.routes).stream(n)?, after)));
        let resumed =
            found.and_then(|(stream, after)| Some((stream.resume(after)?, stream, after)));
        let Some((c, stream, after)) = resumed else {
            debug!(session = %self.id, "a resume from an event id no stream of the session knows");
            let body = local_error(
                None,
                -32000,
                &format!(
                    "no event stream of this MCP session has the event {:?} (it ended long ago, or the id is not this server's)",
                    String::from_utf8_lossy(last.as_bytes())
                ),
                None,
            );
            return json_response(400, body);
        };
        if c.missed > 0 {
            self.ctx.metrics.dropped.fetch_add(c.missed, Relaxed);
            warn!(session = %self.id, missed = c.missed, "an MCP stream resumed without events it could no longer keep (--max-body, --memory-budget)");
        }
        debug!(session = %self.id, stream = stream.number(), after, "an MCP stream resumed");
        framed_event_response(c.first, c.rx)
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
                        let _ = refused.send((c.clone(), m.clone()));
                    }
                    if let To::Events(stream) = &w.to {
                        // Kept a while, for a client that loses the reply.
                        if routes.ended.len() == ENDED_KEPT {
                            routes.ended.pop_front();
                        }
                        routes.ended.push_back(stream.clone());
                    }
                    (w.to, true)
                })
            }
            // The server's own request or notification: the newest request
            // stream a client reads, else the GET stream (kept for its
            // resume if its client is away). Not a stream whose status
            // waits for its reply (a forwarded request: a message of another
            // request would send it 200 before its refusal comes).
            _ => {
                let routes = lock(&self.routes);
                let newest = routes.waiting.iter().rev().find_map(|w| match &w.to {
                    To::Events(s) if w.refused.is_none() && s.connected() => Some(s),
                    _ => None,
                });
                newest
                    .or(routes.get.as_ref())
                    .map(|s| (To::Events(s.clone()), false))
            }
        };
        let Some((to, last)) = target else {
            self.ctx.metrics.dropped.fetch_add(1, Relaxed);
            warn!(session = %self.id, "a message for an MCP client with no open stream; dropped");
            return;
        };
        let (tx, m, stream) = match to {
            To::Json(tx) => (tx, m, None),
            To::Events(stream) => match stream.push(m, last) {
                Some((tx, m)) => (tx, m, Some(stream)),
                None => {
                    debug!(session = %self.id, stream = stream.number(), "a message for an MCP stream whose client is away: kept for its resume");
                    return;
                }
            },
        };
        if tokio::time::timeout(stall, tx.send(m)).await.is_err() {
            match stream {
                // Kept: the connection that skipped it ends, and its
                // client resumes from before the gap.
                Some(stream) => {
                    stream.detach(&tx);
                    debug!(session = %self.id, "an MCP client's stream is not read; its connection let go, the message kept for its resume");
                }
                None => {
                    self.ctx.metrics.dropped.fetch_add(1, Relaxed);
                    debug!(session = %self.id, "an MCP client's reply is not read; dropped");
                }
            }
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
