//! The exchange: one association's JSON-RPC traffic between the local party
//! and the peer gateway, as a state machine.
//!
//! It owns what both directions must agree on: the correlation of
//! requests and replies (CC-JSONRPC §8), requests held back while their id
//! is outstanding (§8.2), batches joined into one answer, deadlines, and
//! the octets it holds. It does no I/O and reads no clock: inputs come in
//! with the time (`handle_local`, `handle_peer`, `handle_timeout`), and
//! what to do comes out of [`Exchange::poll_action`]; [`Exchange::poll_timeout`]
//! says when to call `handle_timeout` next.
//!
//! Flow control: a local message that finds no room (the session's
//! requests in flight, its octet budget, the gateway's) waits here and the
//! local party is no longer read ([`Exchange::reading_local`]), so a
//! pipelining client is slowed to what the pair can carry, not refused; a
//! message that waits longer than `stall_timeout` is answered Unavailable.
//! Requests from the peer beyond the room the local party has wait too,
//! and the peer is no longer read ([`Exchange::reading_peer`]), which is
//! backpressure through the association's flow control.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, warn};

use super::budget::{Full, Shared};
use super::failure::{Failure, MAY_HAVE_EXECUTED, Reply, ReplyClass, Uncarriable};
use super::peer::{PeerPayload, Received};
use crate::bridge::{self, Effect, ProtocolId, SafetyLabel, TransportError};
use crate::jsonrpc::carriage::{
    BatchJoin, Inbound, frame_type_for, method_of, scan_error_response, write_payload_with,
    write_transport_error,
};
use crate::jsonrpc::{
    Begin, CorrelationError, CorrelationMode, Correlator, IdKind, Kind, Label, Labeler,
    SafetyPolicy, ScanError, Scanned, ShortBytes, response_id, same_id,
};
use crate::wire::FrameType;

/// A correlation_id (or, for requests matched by id, an id token): inline
/// when short, as they nearly always are.
pub type Corr = ShortBytes;

/// How long a message waiting for the gateway-wide budget waits before it
/// looks again (the budget frees elsewhere, unseen here).
const SHARED_RETRY: Duration = Duration::from_millis(20);

/// Which end of the pair an exchange is, and who its local party is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Edge: one client on a message stream (WebSocket, TCP, stdio, an MCP
    /// session).
    EdgeSession,
    /// Edge: the HTTP clients sharing one pooled association.
    EdgePool,
    /// Origin: an upstream session (WebSocket, child process, MCP over
    /// HTTP).
    OriginSession,
    /// Origin: each request served on its own (an HTTP upstream, or none).
    OriginStateless,
}

/// How the local party is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Party {
    /// One party on a message stream: what is for it is delivered in order,
    /// and it answers the peer's requests by id.
    Stream,
    /// Many callers on one association: each request is answered to its
    /// own ticket; a request from the peer has nobody to go to.
    Callers,
    /// Each request from the peer is served on its own and answered through
    /// [`Exchange::served`].
    Served,
}

impl Role {
    pub fn is_edge(self) -> bool {
        matches!(self, Self::EdgeSession | Self::EdgePool)
    }

    fn party(self) -> Party {
        match self {
            Self::EdgeSession | Self::OriginSession => Party::Stream,
            Self::EdgePool => Party::Callers,
            Self::OriginStateless => Party::Served,
        }
    }

    /// Opaque ids when callers share the association (two clients may use
    /// the same `id` at once); the id itself for one party (§8.2).
    fn correlation(self) -> CorrelationMode {
        match self {
            Self::EdgePool => CorrelationMode::Opaque,
            _ => CorrelationMode::Canonical,
        }
    }

    /// A client is told when its message is not JSON-RPC (-32700/-32600),
    /// and its batch is answered as one array; an upstream's bad message is
    /// dropped (nobody to tell), and its batch elements go on their own.
    fn local_is_client(self) -> bool {
        self.is_edge()
    }
}

/// The origin's checks of a request from the peer (`--allow-method`,
/// policy, `--max-body`).
pub trait Gate: Send + Sync {
    fn refusal(
        &self,
        method: &str,
        label: Option<Effect>,
        len: usize,
    ) -> Option<(TransportError, String)>;
}

/// What an exchange counts (the gateway's metrics); every method does
/// nothing by default.
pub trait Observer: Send + Sync {
    /// A request from the local party.
    fn request(&self) {}
    /// A notification from the local party.
    fn notification(&self) {}
    /// A request of the local party was answered (`latency`: it crossed).
    fn answered(&self, _class: ReplyClass, _latency: Option<Duration>) {}
    /// Requests waiting for the peer's reply went up or down.
    fn in_flight(&self, _delta: i64) {}
    /// A message was dropped (malformed, for nobody, too late).
    fn dropped(&self) {}
    /// A transport error was sent (`sent`) or received.
    fn transport_error(&self, _code: TransportError, _sent: bool) {}
    /// A request of the peer went to the local party.
    fn delivered(&self) {}
    /// A request of the peer was answered NotDelivered by this side.
    fn not_delivered(&self) {}
    /// A request of the peer was answered by the local party (a result or
    /// a JSON-RPC error).
    fn replied(&self) {}
}

/// An observer that counts nothing.
pub struct Unobserved;

impl Observer for Unobserved {}

/// An exchange's limits and collaborators.
pub struct Config {
    pub role: Role,
    /// A request crossing the bridge is answered Timeout after this; one the
    /// local party does not answer, NotDelivered.
    pub request_timeout: Duration,
    /// A local message waits at most this long for room.
    pub stall_timeout: Duration,
    /// Requests of the local party awaiting the peer's reply.
    pub max_outstanding: usize,
    /// Requests of the peer awaiting the local party's answer.
    pub max_incoming: usize,
    /// Octets of JSON-RPC text this exchange holds in each direction: in
    /// flight (awaiting an answer) and waiting for room.
    pub budget: usize,
    /// How the local party is named in answers ("client", "upstream").
    pub local_name: String,
    pub labeler: Arc<Labeler>,
    /// The origin's checks of the peer's requests; `None` at an edge.
    pub gate: Option<Arc<dyn Gate>>,
    /// The gateway-wide limits.
    pub shared: Arc<Shared>,
    pub observer: Arc<dyn Observer>,
    /// Requests that open a stream rather than make a call; `None`: every
    /// request is a call.
    pub lasting: Option<Lasting>,
}

/// Requests that open a stream rather than make a call (MCP's
/// `subscriptions/listen`): they last `lifetime`, not the request timeout,
/// and at its end are answered as ended, not as failed.
///
/// The origin's end is the one meant to be seen: its answer crosses as the
/// upstream's would, and the local party is told the request was given up
/// (its cancellation, where the party names its requests; a served one's
/// stream is let go). An origin counts the lifetime from when the request
/// arrived, held for room or not. An edge waits [`LASTING_MARGIN`] longer,
/// then answers its caller alike itself and gives the request up at the
/// peer (`given_up`, beside the request's correlation id), as for a caller
/// that left: an origin that keeps it longer lets it go then.
#[derive(Clone, Copy, Debug)]
pub struct Lasting {
    /// The method of such a request, as it is written (no escapes).
    pub method: &'static str,
    pub lifetime: Duration,
    /// The answer that ends one, for its id token: the text, and where the
    /// id is in it.
    pub ended: fn(&[u8]) -> (Bytes, std::ops::Range<usize>),
    /// The notification that gives up the request with this id (its token)
    /// at the peer: the text, and where its method is in it.
    pub given_up: fn(&[u8]) -> (Bytes, std::ops::Range<usize>),
}

/// How much longer than the lifetime an edge waits for a lasting request's
/// end to come from the origin ([`Lasting`]).
pub const LASTING_MARGIN: Duration = Duration::from_secs(5);

/// What the exchange asks its executor to do, in order.
#[derive(Debug)]
pub enum Action<T> {
    /// Seal and send to the peer.
    Send(ToPeer),
    /// Hand to the local party (a stream), in order, with what crossed
    /// beside it (for the parties that take it).
    Deliver(Bytes, Option<Attached>),
    /// The answer to the caller of this ticket.
    Answer(T, Reply),
    /// A message the peer streamed before a caller's reply (a notification
    /// that belongs to its request: BRIDGE_STREAM_DATA), for that caller.
    Interim(Interim, Bytes),
    /// Serve a request or notification of the peer on its own.
    Serve(ToServe),
    /// The local party may be read again.
    ResumeLocal,
    /// The peer may be read again.
    ResumePeer,
}

/// A request or notification of the peer for the local party to serve on
/// its own ([`Action::Serve`]).
#[derive(Debug)]
pub struct ToServe {
    pub text: Bytes,
    /// A request's, to answer it with [`Exchange::served`]; `None` for a
    /// notification.
    pub corr: Option<Corr>,
    /// Its effect (the label, else this side's table) is read-only or
    /// idempotent-write, so it may be sent to the upstream twice.
    pub resend_safe: bool,
    /// How much longer it may wait for room at the local party: what is
    /// left of `stall_timeout` after the time it was held here, so that its
    /// whole wait for room stays within that one bound.
    pub wait: Duration,
    /// How long until its deadline: a request's is the exchange's own
    /// (`request_timeout` from when it was delivered), when the exchange
    /// answers it if the local party has not; a notification's is as far
    /// off. Whoever serves it ends every try by then rather than keep a
    /// deadline of its own.
    pub time_left: Duration,
    /// What the edge carried beside it (`--forward-authorization`): the
    /// client's `Authorization`, to present to the upstream (empty when
    /// the client sent none), or an HTTP request to make in its place.
    pub attached: Option<Attached>,
}

/// Where a caller takes the messages the peer streams before its reply
/// (`docs/decisions.md` §11): called with each, in order, by whoever
/// carries out [`Action::Interim`]. It must not wait (a bounded queue that
/// is full drops, counting it).
#[derive(Clone)]
pub struct Interim(pub Arc<dyn Fn(Bytes) + Send + Sync>);

impl std::fmt::Debug for Interim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interim")
    }
}

/// What crosses beside a message, in this gateway's extension TLV
/// (`docs/decisions.md` §9). Never shown: it holds a credential.
#[derive(Clone, PartialEq, Eq)]
pub enum Attached {
    /// Beside a request: the client's `Authorization` header value
    /// (`--forward-authorization`).
    Authorization(Bytes),
    /// Beside a reply: the upstream's refusal of that credential (see
    /// [`bridge::Extension::Challenge`]).
    Challenge(Bytes),
    /// Beside a request: an HTTP request for the upstream's authorization
    /// endpoints, made in its place ([`bridge::Extension::HttpRequest`]).
    HttpRequest(Bytes),
    /// Beside a reply: the upstream's answer to that HTTP request.
    HttpResponse(Bytes),
    /// Beside MCP's `notifications/cancelled` an edge sends for a client
    /// that left: the cancelled request's correlation id on the wire; the
    /// receiver delivers it with that request's id token instead, once it
    /// has checked the request still waits ([`bridge::Extension::Cancel`]).
    Cancel(Bytes),
}

impl Attached {
    fn extension(&self) -> bridge::Extension<'_> {
        match self {
            Self::Authorization(v) => bridge::Extension::Authorization(v),
            Self::Challenge(v) => bridge::Extension::Challenge(v),
            Self::HttpRequest(v) => bridge::Extension::HttpRequest(v),
            Self::HttpResponse(v) => bridge::Extension::HttpResponse(v),
            Self::Cancel(v) => bridge::Extension::Cancel(v),
        }
    }

    /// What a received extension attaches, copied out of its frame.
    pub fn of(extension: Option<bridge::Extension<'_>>) -> Option<Self> {
        Some(match extension? {
            bridge::Extension::Authorization(v) => Self::Authorization(Bytes::copy_from_slice(v)),
            bridge::Extension::Challenge(v) => Self::Challenge(Bytes::copy_from_slice(v)),
            bridge::Extension::HttpRequest(v) => Self::HttpRequest(Bytes::copy_from_slice(v)),
            bridge::Extension::HttpResponse(v) => Self::HttpResponse(Bytes::copy_from_slice(v)),
            bridge::Extension::Cancel(v) => Self::Cancel(Bytes::copy_from_slice(v)),
        })
    }

    /// What goes beside a request of the peer, of what its frame carried
    /// (what belongs beside a reply is ignored there).
    fn of_request(extension: Option<bridge::Extension<'_>>) -> Option<Self> {
        Self::of(extension).filter(|a| {
            matches!(
                a,
                Self::Authorization(_) | Self::HttpRequest(_) | Self::Cancel(_)
            )
        })
    }

    /// What goes beside a reply of the peer, of what its frame carried.
    fn of_reply(extension: Option<bridge::Extension<'_>>) -> Option<Self> {
        Self::of(extension).filter(|a| matches!(a, Self::Challenge(_) | Self::HttpResponse(_)))
    }
}

impl std::fmt::Debug for Attached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.extension(), f)
    }
}

/// A Bridge message for the peer.
#[derive(Debug)]
pub enum ToPeer {
    /// A JSON-RPC object, verbatim; `corr` is empty for a notification.
    Message {
        text: Bytes,
        kind: Kind,
        corr: Corr,
        label: Option<Label>,
        attached: Option<Attached>,
    },
    /// A transport error in place of the reply to `corr`.
    Error {
        corr: Corr,
        code: TransportError,
        detail: String,
    },
}

impl ToPeer {
    /// The frame type it goes in.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Self::Message { kind, corr, .. } => frame_type_for(kind, corr).0,
            Self::Error { .. } => bridge::BRIDGE_ERROR,
        }
    }

    /// Writes its Bridge payload (a detail past 255 octets is cut).
    pub fn write(&self, out: &mut Vec<u8>, protocol: ProtocolId) {
        // Cannot fail: method, scope and correlation_id were checked when
        // the exchange made it.
        let r = match self {
            Self::Message {
                text,
                kind,
                corr,
                label,
                attached,
            } => {
                let safety = label.as_ref().map(|l| SafetyLabel {
                    effect: l.effect,
                    scope: &l.scope,
                });
                let extension = attached.as_ref().map(Attached::extension);
                write_payload_with(out, protocol, text, kind, corr, safety, extension).map(drop)
            }
            Self::Error { corr, code, detail } => {
                write_transport_error(out, protocol, corr, *code, detail)
            }
        };
        debug_assert!(r.is_ok(), "{r:?}");
    }
}

/// What a served request came to.
pub type Served = Result<(Bytes, Kind), String>;

/// Whether the local party is there to take the peer's requests.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Local {
    /// Being started: messages wait for it.
    Starting,
    Up,
    /// Gone (backing off before a restart, or none at all): requests are
    /// answered NotDelivered at once, with this detail.
    Down(String),
}

/// A reply to a request of the local party, as it came from the peer.
struct Replied {
    text: Bytes,
    is_error: bool,
    /// What came beside it: the upstream's refusal of a forwarded
    /// credential, or its answer to an HTTP request.
    attached: Option<Attached>,
}

struct Pending<T> {
    /// The request's id token, for an answer made here.
    id: Corr,
    octets: usize,
    started: Instant,
    batch: Option<u64>,
    ticket: Option<T>,
    /// Where the messages streamed before its reply go.
    interim: Option<Interim>,
    serial: u64,
    /// Sending it twice does what sending it once does (read-only or
    /// idempotent-write): if the association ends before its reply, it
    /// may be sent again elsewhere.
    resend_safe: bool,
}

/// A local message not yet sent: no room, or its id is outstanding.
struct Queued<T> {
    text: Bytes,
    kind: Kind,
    label: Option<Label>,
    attached: Option<Attached>,
    batch: Option<u64>,
    ticket: Option<T>,
    interim: Option<Interim>,
    since: Instant,
}

struct Incoming {
    corr: Corr,
    id: Corr,
    kind: IdKind,
    /// What a notification of the local party may name it by
    /// ([`Exchange::set_names`]); `None` when nothing.
    names: Option<Box<Names>>,
    /// Answered to the peer already (its deadline passed) and cancelled at
    /// the local party: it keeps its id for [`CANCELLED_GRACE`] only.
    given_up: bool,
    octets: usize,
    serial: u64,
    /// When it is answered if the local party has not (set as it is
    /// delivered).
    deadline: Instant,
    /// Read-only or idempotent-write: may be sent to the local party again.
    resend_safe: bool,
    /// A stream, not a call ([`Lasting`]).
    lasting: bool,
}

/// What of a peer's request a notification of the local party may name it
/// by, where the local party's protocol has such names and the local party
/// gives no request a stream of its own (an MCP server over stdio or a
/// WebSocket: MCP 2026-07-28, stdio, "Receiving Messages").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Names {
    /// Its progress token, as [`Exchange::set_names`]'s reader writes it.
    pub progress: Option<Bytes>,
    /// It asked for log messages.
    pub logs: bool,
    /// It opens a subscription, whose notifications name it by its id.
    pub subscription: bool,
    /// It must not be cancelled (MCP's `initialize`).
    pub uncancellable: bool,
}

/// How a local party without a stream per request names the requests its
/// notifications belong to, and is told that one was given up
/// ([`Exchange::set_names`]).
#[derive(Clone, Copy, Debug)]
pub struct Relations {
    /// What of a request of the peer its notifications may name it by.
    pub names_of: fn(&[u8]) -> Names,
    /// The notification that tells the local party that the request with
    /// this id (its token, as it came) was given up (MCP's
    /// `notifications/cancelled`), so that it sends nothing more naming it.
    pub given_up: fn(&[u8]) -> Bytes,
}

/// The request of the peer that a notification of the local party belongs
/// to, as the notification names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Named {
    /// By its id: the request's own stream it came on.
    Id(Bytes, IdKind),
    /// By the id of the request that opened its subscription
    /// ([`Names::subscription`]; MCP's subscription id).
    Subscription(Bytes, IdKind),
    /// By its progress token ([`Names::progress`]), when exactly one
    /// waiting request gave it.
    Progress(Bytes),
    /// A log message: it belongs to the one request that asked for them,
    /// when exactly one waits.
    Log,
}

/// A request of the peer not yet delivered: no room, or the local party
/// still owes an answer on its id.
struct HeldIn {
    text: Bytes,
    attached: Option<Attached>,
    key: Corr,
    incoming: Incoming,
    since: Instant,
}

struct Batch {
    join: BatchJoin,
    waiting: usize,
}

/// Deadlines in the order they were set (each is `now + timeout`, so the
/// order is the deadlines' own); entries whose request is gone are skipped.
///
/// A request answered in time leaves its entry behind. The queue drops such
/// entries as it grows, not only when a deadline comes due: the shell's
/// timer fires at the front deadline, a whole request timeout after it was
/// set, and by then a busy association would hold an entry for every
/// request of that timeout (600 000 at 20 000 requests a second and 30 s),
/// growing in steps whose copies stall the association for milliseconds.
struct Deadlines(VecDeque<(Instant, u64, Corr)>);

impl Deadlines {
    fn front(&self) -> Option<Instant> {
        self.0.front().map(|d| d.0)
    }

    /// Sets a deadline. Entries no longer live go first: those at the front
    /// (requests are mostly answered in the order they were sent), and all
    /// of them once the queue holds more than twice what is live. Such a
    /// pass removes at least half the queue, so this costs O(1) amortized,
    /// and the queue stays within twice what is live (plus a small slack).
    fn push(
        &mut self,
        entry: (Instant, u64, Corr),
        live: usize,
        is_live: impl Fn(u64, &[u8]) -> bool,
    ) {
        while let Some((_, serial, key)) = self.0.front()
            && !is_live(*serial, key)
        {
            self.0.pop_front();
        }
        if self.0.len() > 2 * live + 64 {
            self.0.retain(|(_, serial, key)| is_live(*serial, key));
        }
        self.0.push_back(entry);
    }

    /// The next entry whose deadline is `now` or past: (serial, key).
    fn pop_due(&mut self, now: Instant) -> Option<(u64, Corr)> {
        if self.front()? > now {
            return None;
        }
        self.0.pop_front().map(|(_, serial, key)| (serial, key))
    }
}

/// How long a request cancelled at a local party that names its requests
/// keeps its id after ([`Exchange::set_names`]).
pub const CANCELLED_GRACE: Duration = Duration::from_secs(1);

/// One association's exchange. `T` is a caller's ticket (the HTTP pool's
/// reply channel); `()` where there is one local party.
pub struct Exchange<T> {
    config: Config,
    party: Party,
    /// The local party presents a forwarded credential (an HTTP upstream,
    /// request by request or as an MCP session): a peer's request that
    /// carries one is refused where it does not.
    takes_credentials: bool,
    /// How the local party's notifications name the peer's requests
    /// ([`Exchange::set_names`]).
    relations: Option<Relations>,
    outgoing: Correlator<Pending<T>>,
    out_deadlines: Deadlines,
    /// Those of lasting requests ([`Lasting`]): a lifetime of their own,
    /// the same for all, so in order too.
    out_lasting: Deadlines,
    /// Octets of local requests in flight.
    sent_octets: usize,
    waiting: VecDeque<Queued<T>>,
    queued_octets: usize,
    /// When the oldest message that found no room began to wait.
    stalled_since: Option<Instant>,
    /// When a local message waiting for the gateway-wide budget looks again.
    retry_local: Option<Instant>,
    incoming: HashMap<Corr, Incoming>,
    in_deadlines: Deadlines,
    in_lasting: Deadlines,
    /// Requests of the peer cancelled at a local party that names them
    /// ([`Relations`]): each is forgotten [`CANCELLED_GRACE`] after, time
    /// for an answer the local party wrote before it read the
    /// cancellation, so that its id is handed to no other request
    /// meanwhile.
    cancelled: Deadlines,
    held_in: VecDeque<HeldIn>,
    /// Octets of the peer's requests delivered and not answered, or held.
    in_octets: usize,
    /// Of which held.
    held_octets: usize,
    /// When a request of the peer waiting for the gateway-wide budget
    /// looks again.
    retry_peer: Option<Instant>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    next_serial: u64,
    local: Local,
    closed: Option<Failure>,
    actions: VecDeque<Action<T>>,
    reading_local: bool,
    reading_peer: bool,
}

impl<T> Exchange<T> {
    pub fn new(config: Config) -> Self {
        let party = config.role.party();
        let local = match config.role {
            Role::OriginSession => Local::Starting,
            _ => Local::Up,
        };
        Self {
            takes_credentials: party == Party::Served,
            relations: None,
            party,
            outgoing: Correlator::new(config.role.correlation(), usize::MAX),
            out_deadlines: Deadlines(VecDeque::new()),
            out_lasting: Deadlines(VecDeque::new()),
            sent_octets: 0,
            waiting: VecDeque::new(),
            queued_octets: 0,
            stalled_since: None,
            retry_local: None,
            incoming: HashMap::new(),
            in_deadlines: Deadlines(VecDeque::new()),
            in_lasting: Deadlines(VecDeque::new()),
            cancelled: Deadlines(VecDeque::new()),
            held_in: VecDeque::new(),
            in_octets: 0,
            held_octets: 0,
            retry_peer: None,
            batches: HashMap::new(),
            next_batch: 0,
            next_serial: 0,
            local,
            closed: None,
            actions: VecDeque::new(),
            reading_local: true,
            reading_peer: true,
            config,
        }
    }

    /// The next thing to do.
    pub fn poll_action(&mut self) -> Option<Action<T>> {
        self.actions.pop_front()
    }

    /// Every action queued now, in order.
    pub fn drain_actions(&mut self) -> impl Iterator<Item = Action<T>> + '_ {
        self.actions.drain(..)
    }

    /// When [`Exchange::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let stall = self.stalled_since.map(|s| s + self.config.stall_timeout);
        [
            self.out_deadlines.front(),
            self.in_deadlines.front(),
            self.out_lasting.front(),
            self.in_lasting.front(),
            self.cancelled.front(),
            stall,
            self.held_deadline(),
            self.retry_local,
            self.retry_peer,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Requests of the local party awaiting the peer's reply, and those
    /// waiting to be sent.
    pub fn outstanding(&self) -> usize {
        self.outgoing.len() + self.waiting.len()
    }

    /// Whether the local party may be read: false while a message of it
    /// waits for room.
    pub fn reading_local(&self) -> bool {
        self.reading_local
    }

    /// Whether the peer may be read: false while requests of it wait for
    /// room at the local party.
    pub fn reading_peer(&self) -> bool {
        self.reading_peer
    }

    /// Octets this exchange holds: (local → peer, peer → local).
    pub fn octets(&self) -> (usize, usize) {
        (self.sent_octets + self.queued_octets, self.in_octets)
    }

    /// Entries in the deadline queues of each direction (live or not).
    #[cfg(test)]
    pub(super) fn deadlines_queued(&self) -> (usize, usize) {
        (
            self.out_deadlines.0.len() + self.out_lasting.0.len(),
            self.in_deadlines.0.len() + self.in_lasting.0.len(),
        )
    }

    fn serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    // ---- the local party ------------------------------------------------

    /// One request or notification of the local party (a caller's,
    /// `ticket`), with `attached` beside it.
    pub fn handle_local_one(
        &mut self,
        now: Instant,
        text: Bytes,
        kind: Kind,
        ticket: Option<T>,
        attached: Option<Attached>,
    ) {
        self.one(now, text, kind, None, (ticket, None), attached);
    }

    /// [`Exchange::handle_local_one`] for a caller that takes the messages
    /// the peer streams before its reply (`interim`).
    pub fn handle_local_streamed(
        &mut self,
        now: Instant,
        (text, kind): (Bytes, Kind),
        ticket: Option<T>,
        attached: Option<Attached>,
        interim: Option<Interim>,
    ) {
        self.one(now, text, kind, None, (ticket, interim), attached);
    }

    /// A notification of the local party that belongs to the peer's request
    /// it names (a message on that request's own stream, as an MCP server's
    /// progress): sent as one chunk of that request's streamed reply
    /// (BRIDGE_STREAM_DATA, echoing its correlation id) while the request
    /// waits for its reply, else as a notification of its own.
    pub fn handle_local_related(&mut self, now: Instant, text: Bytes, kind: Kind, named: &Named) {
        let corr = match (&kind, self.named_incoming(named)) {
            (Kind::Notification { .. }, Some(incoming)) if self.closed.is_none() => {
                incoming.corr.clone()
            }
            _ => return self.one(now, text, kind, None, (None, None), None),
        };
        // What the envelope cannot carry (a method over 255 octets, or not
        // Unicode) is dropped, as a notification of its own would be.
        let Ok(label) = label_of(&text, &kind, &self.config.labeler) else {
            self.config.observer.dropped();
            return;
        };
        self.config.observer.notification();
        self.send_message(text, kind, corr, label, None);
    }

    /// A message of the local party, scanned with the gateway's limits.
    /// `ticket` is its caller's (a pool); `None` for a stream.
    pub fn handle_local(
        &mut self,
        now: Instant,
        text: Bytes,
        scanned: Result<Scanned, ScanError>,
        ticket: Option<T>,
    ) {
        match scanned {
            Err(e) => {
                if self.config.role.local_is_client() {
                    self.config.observer.answered(ReplyClass::Invalid, None);
                    match ticket {
                        Some(t) => self.push(Action::Answer(t, Reply::Failed(invalid(&e)))),
                        None => self.push(Action::Deliver(scan_error_response(&e).into(), None)),
                    }
                } else {
                    self.config.observer.dropped();
                    warn!(error = %e, "the {} sent a message that is not JSON-RPC; dropped", self.config.local_name);
                }
            }
            Ok(Scanned::Single(kind)) => self.one(now, text, kind, None, (ticket, None), None),
            Ok(Scanned::Batch(elements)) => {
                if let Some(t) = ticket {
                    let f = Failure::Invalid("a batch is answered by the ingress".into());
                    self.push(Action::Answer(t, Reply::Failed(f)));
                    return;
                }
                let batch = if self.config.role.local_is_client() {
                    // Requests and invalid elements are answered;
                    // notifications are not (JSON-RPC §6).
                    let waiting = elements
                        .iter()
                        .filter(|e| !matches!(e.kind, Ok(Kind::Notification { .. })))
                        .count();
                    (waiting > 0).then(|| {
                        self.next_batch += 1;
                        let join = BatchJoin::with_capacity(text.len());
                        self.batches
                            .insert(self.next_batch, Batch { join, waiting });
                        self.next_batch
                    })
                } else {
                    None
                };
                for e in elements {
                    let start = e.range.start;
                    let elem = text.slice(e.range);
                    match e.kind {
                        Ok(kind) => self.one(
                            now,
                            elem,
                            kind.relative_to(start),
                            batch,
                            (None, None),
                            None,
                        ),
                        Err(invalid) => {
                            let err = ScanError::Invalid(invalid);
                            self.config.observer.answered(ReplyClass::Invalid, None);
                            self.answer_local(batch, scan_error_response(&err).into());
                        }
                    }
                }
            }
        }
    }

    /// One JSON-RPC object of the local party.
    fn one(
        &mut self,
        now: Instant,
        text: Bytes,
        kind: Kind,
        batch: Option<u64>,
        (ticket, interim): (Option<T>, Option<Interim>),
        attached: Option<Attached>,
    ) {
        let label = match label_of(&text, &kind, &self.config.labeler) {
            Ok(l) => l,
            Err(e) => {
                if let Kind::Request { id, .. } = &kind {
                    let id = text.slice(id.token.clone());
                    self.refuse_local(batch, ticket, &id, Failure::Invalid(e.to_string()));
                }
                return;
            }
        };
        match &kind {
            Kind::Request { id, .. } => {
                self.config.observer.request();
                let id_token = text.slice(id.token.clone());
                if id_token.len() > bridge::FIELD_MAX_LEN && id.kind != IdKind::Null {
                    let f =
                        Failure::Invalid("an id longer than 255 octets cannot be carried".into());
                    self.refuse_local(batch, ticket, &id_token, f);
                    return;
                }
                if let Some(f) = self.closed.clone() {
                    self.refuse_local(batch, ticket, &id_token, f);
                    return;
                }
                self.queued_octets += text.len();
                self.waiting.push_back(Queued {
                    text,
                    kind,
                    label,
                    attached,
                    batch,
                    ticket,
                    interim,
                    since: now,
                });
                self.admit(now);
            }
            Kind::Notification { .. } => {
                self.config.observer.notification();
                if self.closed.is_some() {
                    self.config.observer.dropped();
                    return;
                }
                if self.waiting.is_empty() {
                    self.send_message(text, kind, Corr::default(), label, attached);
                } else {
                    // Behind what waits, in order.
                    self.queued_octets += text.len();
                    self.waiting.push_back(Queued {
                        text,
                        kind,
                        label,
                        attached,
                        batch,
                        ticket,
                        interim: None,
                        since: now,
                    });
                }
            }
            Kind::Success { id } | Kind::Error { id } => {
                // The local party answers a request of the peer.
                let token = &text[id.token.clone()];
                let Some(incoming) = self.take_incoming(token, id.kind) else {
                    if let Some(incoming) = self.take_rounded(token, id.kind) {
                        // Promptly, as over HTTP: its client would
                        // otherwise wait for its timeout.
                        let d = format!(
                            "{} answered with another request's id ({} for {}: a number it does not hold exactly)",
                            self.config.local_name,
                            String::from_utf8_lossy(token),
                            String::from_utf8_lossy(&incoming.id),
                        );
                        self.not_delivered(incoming.corr.clone(), d);
                        self.released(now, incoming);
                        return;
                    }
                    self.config.observer.dropped();
                    warn!(id = %String::from_utf8_lossy(token), "a reply to no outstanding request; dropped");
                    return;
                };
                let corr = incoming.corr.clone();
                self.config.observer.replied();
                self.send_message(text, kind, corr, None, attached);
                self.released(now, incoming);
            }
        }
    }

    /// Sends what waits, in order, while there is room; an id that is
    /// outstanding holds its request back (and only it).
    fn admit(&mut self, now: Instant) {
        if let Some(f) = self.closed.clone() {
            // Nothing crosses any more: what waited fails as it would have.
            for q in std::mem::take(&mut self.waiting) {
                if matches!(q.kind, Kind::Request { .. }) {
                    let id = q.text.slice(id_range(&q.kind));
                    self.refuse_local(q.batch, q.ticket, &id, f.clone());
                }
            }
            self.queued_octets = 0;
            self.stalled_since = None;
            self.retry_local = None;
            self.update_reading_local();
            return;
        }
        let mut i = 0;
        let mut stalled = None;
        self.retry_local = None;
        while i < self.waiting.len() {
            let q = &self.waiting[i];
            let Kind::Request { .. } = &q.kind else {
                // A notification behind waiting requests goes when they do.
                if stalled.is_some() {
                    break;
                }
                if let Some(q) = self.waiting.remove(i) {
                    self.queued_octets -= q.text.len();
                    self.send_message(q.text, q.kind, Corr::default(), q.label, q.attached);
                }
                continue;
            };
            if self.id_outstanding(q) {
                i += 1;
                continue;
            }
            let len = q.text.len();
            let room = self.outgoing.len() < self.config.max_outstanding
                && (self.outgoing.is_empty() || self.sent_octets + len <= self.config.budget);
            let shared = if room {
                self.config.shared.take(true, len)
            } else {
                Err(Full::InFlight)
            };
            if let Err(full) = shared {
                if self.party == Party::Callers {
                    // HTTP callers are not read from a stream: they are
                    // told at once.
                    let Some(q) = self.waiting.remove(i) else {
                        break;
                    };
                    self.queued_octets -= q.text.len();
                    let id = q.text.slice(id_range(&q.kind));
                    let f = Failure::Unavailable(full_detail(full, room, &self.config));
                    self.refuse_local(q.batch, q.ticket, &id, f);
                    continue;
                }
                if room {
                    self.retry_local = Some(now + SHARED_RETRY);
                }
                stalled = Some(q.since);
                break;
            }
            let Some(q) = self.waiting.remove(i) else {
                break;
            };
            self.queued_octets -= len;
            self.send_request(now, q);
        }
        self.stalled_since = stalled;
        self.update_reading_local();
    }

    /// Whether a waiting request is held back because a request with its
    /// id is outstanding (§8.2: one party, canonical ids).
    fn id_outstanding(&self, q: &Queued<T>) -> bool {
        match &q.kind {
            Kind::Request { id, .. } => {
                self.config.role.correlation() == CorrelationMode::Canonical
                    && id.kind != IdKind::Null
                    && self.outgoing.contains(&q.text[id.token.clone()])
            }
            _ => false,
        }
    }

    fn update_reading_local(&mut self) {
        let reading = self.stalled_since.is_none()
            && self.waiting.len() < self.config.max_outstanding
            && self.queued_octets < self.config.budget;
        if reading && !self.reading_local {
            self.push(Action::ResumeLocal);
        }
        self.reading_local = reading;
    }

    fn send_request(&mut self, now: Instant, q: Queued<T>) {
        let id = id_range(&q.kind);
        let id_kind = match &q.kind {
            Kind::Request { id, .. } => id.kind,
            _ => IdKind::Null,
        };
        let serial = self.serial();
        let octets = q.text.len();
        let resend_safe = q.label.as_ref().is_some_and(|l| l.effect.resend_safe());
        let lasting = match &q.kind {
            Kind::Request { method, .. } if self.config.lasting.is_some() => {
                method_of(&q.text, method).and_then(|m| self.lasting(m.as_bytes()))
            }
            _ => None,
        };
        let begin = self.outgoing.begin(
            &q.text[id.clone()],
            id_kind,
            Pending {
                id: q.text[id].into(),
                octets,
                started: now,
                batch: q.batch,
                ticket: q.ticket,
                interim: q.interim,
                serial,
                resend_safe,
            },
        );
        let Begin::Assigned(corr) = begin else {
            // Unreachable: room and ids were checked above.
            self.config.shared.give(true, octets);
            return;
        };
        self.sent_octets += octets;
        self.config.observer.in_flight(1);
        let outgoing = &self.outgoing;
        let (deadlines, timeout) = match lasting {
            Some(l) => (&mut self.out_lasting, l.lifetime + LASTING_MARGIN),
            None => (&mut self.out_deadlines, self.config.request_timeout),
        };
        deadlines.push(
            (now + timeout, serial, corr.clone()),
            outgoing.len(),
            |serial, corr| outgoing.get(corr).is_some_and(|p| p.serial == serial),
        );
        self.send_message(q.text, q.kind, corr, q.label, q.attached);
    }

    /// The lasting kind a request of this method (its name) is of.
    fn lasting(&self, method: &[u8]) -> Option<Lasting> {
        self.config
            .lasting
            .filter(|l| l.method.as_bytes() == method)
    }

    fn send_message(
        &mut self,
        text: Bytes,
        kind: Kind,
        corr: Corr,
        label: Option<Label>,
        attached: Option<Attached>,
    ) {
        self.push(Action::Send(ToPeer::Message {
            text,
            kind,
            corr,
            label,
            attached,
        }));
    }

    /// A request of the local party answered here, without crossing.
    fn refuse_local(&mut self, batch: Option<u64>, ticket: Option<T>, id: &[u8], f: Failure) {
        self.config.observer.answered(f.class(), None);
        match ticket {
            Some(t) => self.push(Action::Answer(t, Reply::Failed(f))),
            None => self.answer_local(batch, f.response(Some(id)).into()),
        }
    }

    /// One answer for a stream: alone, or into its batch's array.
    fn answer_local(&mut self, batch: Option<u64>, text: Bytes) {
        self.answer_local_with(batch, text, None);
    }

    /// [`Exchange::answer_local`], with what crossed beside the answer (a
    /// batch's array has none).
    fn answer_local_with(&mut self, batch: Option<u64>, text: Bytes, attached: Option<Attached>) {
        let Some(b) = batch else {
            self.push(Action::Deliver(text, attached));
            return;
        };
        let Some(batch) = self.batches.get_mut(&b) else {
            return;
        };
        batch.join.push(&text);
        batch.waiting = batch.waiting.saturating_sub(1);
        if batch.waiting == 0
            && let Some(array) = self.batches.remove(&b).and_then(|b| b.join.finish())
        {
            self.push(Action::Deliver(array.into(), None));
        }
    }

    /// Completes a request of the local party: its reply or failure goes to
    /// it, and what waited for its id or its room goes on.
    fn finish(&mut self, now: Instant, p: Pending<T>, outcome: Result<Replied, Failure>) {
        self.sent_octets -= p.octets;
        self.config.shared.give(true, p.octets);
        self.config.observer.in_flight(-1);
        let latency = now.saturating_duration_since(p.started);
        match outcome {
            Ok(Replied {
                text,
                is_error,
                attached,
            }) => {
                let class = if is_error {
                    ReplyClass::Error
                } else {
                    ReplyClass::Success
                };
                self.config.observer.answered(class, Some(latency));
                match p.ticket {
                    Some(t) => self.push(Action::Answer(
                        t,
                        Reply::Message {
                            text,
                            is_error,
                            attached,
                        },
                    )),
                    None => self.answer_local_with(p.batch, text, attached),
                }
            }
            Err(f) => {
                self.config.observer.answered(f.class(), Some(latency));
                match p.ticket {
                    Some(t) => self.push(Action::Answer(t, Reply::Failed(f))),
                    None => self.answer_local(p.batch, f.response(Some(&p.id)).into()),
                }
            }
        }
        if !self.waiting.is_empty() {
            self.admit(now);
        }
    }

    /// The requests of callers that `gone` says have stopped waiting (an
    /// HTTP client that left) are given up: what waits here is not sent,
    /// and what crossed is forgotten (its reply, if it comes, is dropped
    /// and counted as late). The ids and correlation ids of those that
    /// crossed, for the caller to tell the peer (MCP:
    /// `notifications/cancelled`, with [`Attached::Cancel`]).
    pub fn abandon_where(
        &mut self,
        now: Instant,
        mut gone: impl FnMut(&T) -> bool,
    ) -> Vec<(Bytes, Corr)> {
        let mut crossed = Vec::new();
        let picked = (self.outgoing).remove_where(|p| p.ticket.as_ref().is_some_and(&mut gone));
        for (corr, p) in picked {
            self.sent_octets -= p.octets;
            self.config.shared.give(true, p.octets);
            self.config.observer.in_flight(-1);
            crossed.push((Bytes::copy_from_slice(&p.id), corr));
        }
        let mut freed = 0;
        self.waiting.retain(|q| {
            let keep = !q.ticket.as_ref().is_some_and(&mut gone);
            if !keep {
                freed += q.text.len();
            }
            keep
        });
        self.queued_octets -= freed;
        if !self.waiting.is_empty() {
            self.admit(now);
        }
        crossed
    }

    /// A message of the local party over `--max-body` (`len` octets) was
    /// dropped unread; `head` is its start. If the head shows it is the
    /// reply to a request of the peer, that request is answered
    /// NotDelivered, saying why, rather than left to time out.
    pub fn local_too_large(&mut self, now: Instant, head: &[u8], len: usize, max_body: usize) {
        self.config.observer.dropped();
        let found = response_id(head).and_then(|id| self.take_incoming(&head[id.token], id.kind));
        let Some(incoming) = found else {
            warn!(
                len,
                "a message over --max-body from the {}; dropped", self.config.local_name
            );
            return;
        };
        warn!(
            len,
            "a reply over --max-body from the {}; its request is answered NotDelivered",
            self.config.local_name
        );
        let detail =
            super::failure::reply_over_max_body(&self.config.local_name, Some(len), max_body);
        self.not_delivered(incoming.corr.clone(), detail);
        self.released(now, incoming);
    }

    /// The local party will not answer the peer's request with this id (an
    /// MCP upstream's exchange for it ended without a reply): it is
    /// answered NotDelivered with `detail`. `reached`: the local party took
    /// it (it may have run), so a request that must not run twice says so
    /// (the edge answers it MayHaveExecuted), as [`Exchange::local_down`]
    /// does. False when no such request waits (already answered, or timed
    /// out).
    pub fn local_cannot_answer(
        &mut self,
        now: Instant,
        token: &[u8],
        kind: IdKind,
        detail: String,
        reached: bool,
    ) -> bool {
        let Some(incoming) = self.take_incoming(token, kind) else {
            return false;
        };
        let detail = match reached && !incoming.resend_safe {
            true => format!("{MAY_HAVE_EXECUTED}{detail}"),
            false => detail,
        };
        self.not_delivered(incoming.corr.clone(), detail);
        self.released(now, incoming);
        true
    }

    /// What a request given out by [`Action::Serve`] came to: the local
    /// party's reply (a single response, scanned), or why there is none.
    pub fn served(&mut self, now: Instant, corr: &[u8], outcome: Served) {
        self.served_with(now, corr, outcome, None);
    }

    /// [`Exchange::served`], with what goes back beside the reply (the
    /// upstream's refusal of a forwarded credential).
    pub fn served_with(
        &mut self,
        now: Instant,
        corr: &[u8],
        outcome: Served,
        attached: Option<Attached>,
    ) {
        let Some(incoming) = self.incoming.remove(corr) else {
            return;
        };
        match outcome {
            Err(detail) => self.not_delivered(incoming.corr.clone(), detail),
            Ok((text, kind)) => {
                let (Kind::Success { id } | Kind::Error { id }) = &kind else {
                    let d = format!(
                        "the {} answered with something other than a response",
                        self.config.local_name
                    );
                    self.not_delivered(incoming.corr.clone(), d);
                    self.released(now, incoming);
                    return;
                };
                let undetermined = matches!(kind, Kind::Error { .. }) && id.kind == IdKind::Null;
                if !undetermined
                    && !same_id(
                        &text[id.token.clone()],
                        id.kind,
                        &incoming.id,
                        incoming.kind,
                    )
                {
                    let d = format!(
                        "{} answered with another request's id",
                        self.config.local_name
                    );
                    self.not_delivered(incoming.corr.clone(), d);
                } else {
                    let corr = incoming.corr.clone();
                    self.config.observer.replied();
                    self.send_message(text, kind, corr, None, attached);
                }
            }
        }
        self.released(now, incoming);
    }

    /// The local party is being (re)started: the peer's messages wait.
    pub fn local_starting(&mut self) {
        self.local = Local::Starting;
    }

    /// The local party is there.
    pub fn local_up(&mut self) {
        self.local = Local::Up;
    }

    /// The local party went away (`why`): requests it had not answered get
    /// NotDelivered, and so do new ones until [`Exchange::local_starting`];
    /// its own requests are forgotten (nobody is left to take the replies).
    pub fn local_down(&mut self, why: &str) {
        self.local_gone(format!(
            "the {} is not running: {why}",
            self.config.local_name
        ));
        let detail = format!(
            "the {} went away before replying: {why}",
            self.config.local_name
        );
        // What was handed to the local party and must not be sent twice
        // has an unknown fate: the detail says so (the edge answers it
        // MayHaveExecuted).
        let unknown = format!("{MAY_HAVE_EXECUTED}{detail}");
        let owed: Vec<Incoming> = self.incoming.drain().map(|(_, i)| i).collect();
        for i in owed {
            self.config.shared.give(false, i.octets);
            let detail = if i.resend_safe { &detail } else { &unknown };
            self.not_delivered(i.corr, detail.clone());
        }
        for h in std::mem::take(&mut self.held_in) {
            self.not_delivered(h.incoming.corr, detail.clone());
        }
        self.in_octets = 0;
        self.held_octets = 0;
        self.in_deadlines.0.clear();
        self.in_lasting.0.clear();
        self.retry_peer = None;
        let forgotten: Vec<Pending<T>> = self.outgoing.drain().map(|(_, p)| p).collect();
        for p in forgotten {
            self.sent_octets -= p.octets;
            self.config.shared.give(true, p.octets);
            self.config.observer.in_flight(-1);
        }
        self.out_deadlines.0.clear();
        self.out_lasting.0.clear();
        self.waiting.clear();
        self.queued_octets = 0;
        self.batches.clear();
        self.stalled_since = None;
        self.retry_local = None;
        self.update_reading_local();
        self.update_reading_peer();
    }

    /// Whether the local party presents a forwarded credential (an MCP
    /// server over HTTP does; a child process or a WebSocket does not).
    pub fn set_takes_credentials(&mut self, takes: bool) {
        self.takes_credentials = takes;
    }

    /// The local party's notifications name the requests they belong to
    /// (it gives none a stream of its own): what each request of the peer
    /// may be named by is read as it arrives
    /// ([`Exchange::handle_local_related`]), and the local party is told
    /// of a request given up unanswered (its deadline passed), so that
    /// nothing it sends later names another request with its id.
    pub fn set_names(&mut self, relations: Relations) {
        self.relations = Some(relations);
    }

    /// There is no local party at all: every request is answered
    /// NotDelivered with `detail`.
    pub fn local_gone(&mut self, detail: String) {
        self.local = Local::Down(detail);
    }

    // ---- the peer -------------------------------------------------------

    /// A Bridge frame from the peer: `read` decodes and checks its payload
    /// ([`super::receive`]), and a message the exchange keeps it keeps with
    /// [`PeerPayload::keep`], once nothing it read borrows the payload any
    /// more (a large message then costs neither a copy nor an allocation).
    pub fn handle_peer<P: PeerPayload>(
        &mut self,
        now: Instant,
        payload: P,
        read: impl FnOnce(&[u8]) -> Received<'_>,
    ) {
        let octets = payload.octets();
        let base = octets.as_ptr() as usize;
        // Where a part of the payload lies in it.
        let at = |part: &[u8]| {
            let start = (part.as_ptr() as usize).wrapping_sub(base);
            start..start.saturating_add(part.len())
        };
        let received = read(octets);
        match received {
            Received::Message(Inbound::JsonRpc {
                kind,
                text,
                correlation_id,
                safety,
                extension,
            }) => match kind {
                Kind::Request { method, id } => {
                    // A cancellation goes beside a notification alone.
                    let attached = Attached::of_request(extension)
                        .filter(|a| !matches!(a, Attached::Cancel(_)));
                    if attached.is_some() && !self.takes_credentials {
                        let d = "a forwarded Authorization (or authorization server request) goes to an HTTP upstream alone, and this origin's upstream is not one";
                        self.transport_error(
                            correlation_id.into(),
                            TransportError::NOT_DELIVERED,
                            d.into(),
                        );
                        return;
                    }
                    if self.party == Party::Callers {
                        let d = "stateless ingress (HTTP): no client session to deliver a server-originated request to";
                        self.transport_error(
                            correlation_id.into(),
                            TransportError::NOT_DELIVERED,
                            d.into(),
                        );
                        return;
                    }
                    let name = method_of(text, &method);
                    let refusal = match attached {
                        // An HTTP request, not a method: the method policy
                        // is not for it.
                        Some(Attached::HttpRequest(_)) => self.local_refusal(),
                        _ => self.refusal(name.as_deref(), safety, text.len()),
                    };
                    if let Some((code, detail)) = refusal {
                        if code == TransportError::NOT_DELIVERED {
                            self.config.observer.not_delivered();
                        }
                        self.transport_error(correlation_id.into(), code, detail);
                        return;
                    }
                    let resend_safe = SafetyPolicy::effective_effect(
                        safety,
                        name.as_deref().unwrap_or_default(),
                        self.config.labeler.table(),
                    )
                    .resend_safe();
                    let lasting = name
                        .as_deref()
                        .and_then(|m| self.lasting(m.as_bytes()))
                        .is_some();
                    let corr = correlation_id.into();
                    let part = at(text);
                    let text = payload.keep(part);
                    let names = (self.relations.map(|r| (r.names_of)(&text)))
                        .filter(|n| *n != Names::default())
                        .map(Box::new);
                    let incoming = Incoming {
                        corr,
                        id: text[id.token.clone()].into(),
                        kind: id.kind,
                        names,
                        given_up: false,
                        octets: text.len(),
                        serial: 0,
                        deadline: now,
                        resend_safe,
                        lasting,
                    };
                    let key = match self.party {
                        Party::Served => incoming.corr.clone(),
                        _ => incoming.id.clone(),
                    };
                    self.in_octets += incoming.octets;
                    self.held_octets += incoming.octets;
                    self.held_in.push_back(HeldIn {
                        text,
                        attached,
                        key,
                        incoming,
                        since: now,
                    });
                    self.deliver_held(now);
                }
                Kind::Notification { method } => {
                    // One that belongs to a request of a caller here
                    // (BRIDGE_STREAM_DATA): for that caller, if it takes
                    // them and still waits.
                    if !correlation_id.is_empty() && self.party == Party::Callers {
                        let interim =
                            (self.outgoing.get(correlation_id)).and_then(|p| p.interim.clone());
                        match interim {
                            Some(i) => {
                                let part = at(text);
                                self.push(Action::Interim(i, payload.keep(part)));
                            }
                            None => self.config.observer.dropped(),
                        }
                        return;
                    }
                    // What the origin would refuse as a request it drops as
                    // a notification (nobody to tell).
                    let name = method_of(text, &method);
                    let refused = self.refusal(name.as_deref(), safety, text.len()).is_some();
                    if refused || self.party == Party::Callers {
                        self.config.observer.dropped();
                        return;
                    }
                    let attached = match Attached::of_request(extension) {
                        // The edge's cancellation of a request of its
                        // caller's: delivered with that request's id while
                        // it waits here, so that it ends that request and
                        // no other with its id; else nothing to end.
                        Some(Attached::Cancel(corr)) => {
                            let Some((key, waiting)) =
                                self.incoming.iter().find(|(_, i)| i.corr[..] == corr[..])
                            else {
                                self.config.observer.dropped();
                                return;
                            };
                            let id = Bytes::copy_from_slice(&waiting.id);
                            // A subscription has no answer to wait for; any
                            // other keeps its id until its deadline, for the
                            // answer a server may still send (MCP lets it).
                            let subscription =
                                waiting.names.as_ref().is_some_and(|n| n.subscription);
                            if self.relations.is_some() && subscription {
                                let entry = (now + CANCELLED_GRACE, waiting.serial, key.clone());
                                let incoming = &self.incoming;
                                self.cancelled.push(entry, incoming.len(), |serial, key| {
                                    incoming.get(key).is_some_and(|i| i.serial == serial)
                                });
                            }
                            Some(Attached::Cancel(id))
                        }
                        other => other,
                    };
                    let credential = matches!(
                        attached,
                        Some(Attached::Authorization(_) | Attached::HttpRequest(_))
                    );
                    // An HTTP request goes beside a request alone.
                    if matches!(attached, Some(Attached::HttpRequest(_)))
                        || credential && !self.takes_credentials
                    {
                        // Never delivered without the credential it came
                        // with; nobody to tell.
                        self.config.observer.dropped();
                        return;
                    }
                    let part = at(text);
                    let text = payload.keep(part);
                    match self.party {
                        Party::Served => self.push(Action::Serve(ToServe {
                            text,
                            corr: None,
                            resend_safe: false,
                            wait: self.config.stall_timeout,
                            time_left: self.config.request_timeout,
                            attached,
                        })),
                        _ => self.push(Action::Deliver(text, attached)),
                    }
                }
                Kind::Success { ref id } | Kind::Error { ref id } => {
                    let is_error = matches!(kind, Kind::Error { .. });
                    let attached = Attached::of_reply(extension);
                    let token = &text[id.token.clone()];
                    match self
                        .outgoing
                        .complete(correlation_id, token, id.kind, is_error)
                    {
                        Ok(p) => {
                            let part = at(text);
                            let text = payload.keep(part);
                            let replied = Replied {
                                text,
                                is_error,
                                attached,
                            };
                            self.finish(now, p, Ok(replied));
                        }
                        Err(CorrelationError::Unknown) => {
                            self.config.observer.dropped();
                            debug!("a reply for no outstanding request (late?); dropped");
                        }
                        Err(e) => {
                            warn!(error = %e, "reply does not match its request");
                            if let Some(p) = self.outgoing.abandon(correlation_id) {
                                let f = Failure::Transport(
                                    TransportError::ENVELOPE_MALFORMED,
                                    e.to_string(),
                                );
                                self.finish(now, p, Err(f));
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
                self.config.observer.transport_error(code, false);
                match self.outgoing.abandon(correlation_id) {
                    Some(p) => {
                        let detail = String::from_utf8_lossy(detail).into_owned();
                        self.finish(now, p, Err(Failure::from_peer(code, detail)));
                    }
                    None => self.config.observer.dropped(),
                }
            }
            Received::Malformed {
                error,
                correlation_id,
            } => {
                warn!(%error, "malformed Bridge frame");
                self.config.observer.dropped();
                if let Some(corr) = correlation_id {
                    self.transport_error(corr.into(), TransportError::ENVELOPE_MALFORMED, error);
                }
            }
            Received::WrongProtocol {
                protocol,
                correlation_id,
                request,
            } => {
                if !request {
                    // Nothing can be sent back for what is not a request:
                    // counted as the peer's.
                    self.config
                        .observer
                        .transport_error(TransportError::PROTOCOL_UNSUPPORTED, false);
                    self.config.observer.dropped();
                    return;
                }
                let ours = self.config.labeler.protocol();
                let detail = format!(
                    "this gateway carries protocol_id {:#04x}, not {:#04x}",
                    ours.0, protocol.0
                );
                self.transport_error(
                    correlation_id.into(),
                    TransportError::PROTOCOL_UNSUPPORTED,
                    detail,
                );
            }
        }
    }

    /// The refusals of a request (or notification) of the peer, if any.
    fn refusal(
        &self,
        method: Option<&str>,
        label: Option<Effect>,
        len: usize,
    ) -> Option<(TransportError, String)> {
        if let Some(gate) = &self.config.gate
            && let Some(refusal) = gate.refusal(method.unwrap_or_default(), label, len)
        {
            return Some(refusal);
        }
        self.local_refusal()
    }

    /// Why the local party cannot take a message of the peer now.
    fn local_refusal(&self) -> Option<(TransportError, String)> {
        match &self.local {
            Local::Down(detail) => Some((TransportError::NOT_DELIVERED, detail.clone())),
            _ => None,
        }
    }

    /// Hands the peer's requests that wait to the local party while it has
    /// room; a request whose id it still owes an answer on stays back, one
    /// held past its limit is refused.
    fn deliver_held(&mut self, now: Instant) {
        self.refuse_expired_held(now);
        let mut i = 0;
        while i < self.held_in.len() && self.incoming.len() < self.config.max_incoming {
            if self.incoming.contains_key(&self.held_in[i].key) {
                i += 1;
                continue;
            }
            let octets = self.held_in[i].incoming.octets;
            if self.config.shared.take(false, octets).is_err() {
                self.retry_peer = Some(now + SHARED_RETRY);
                break;
            }
            let Some(mut h) = self.held_in.remove(i) else {
                break;
            };
            self.held_octets -= octets;
            let serial = self.serial();
            h.incoming.serial = serial;
            // A lasting request's lifetime counts from its arrival, as its
            // edge's does from its sending.
            let (deadlines, deadline) = match self.config.lasting {
                Some(l) if h.incoming.lasting => (&mut self.in_lasting, h.since + l.lifetime),
                _ => (&mut self.in_deadlines, now + self.config.request_timeout),
            };
            h.incoming.deadline = deadline;
            let timeout = deadline.saturating_duration_since(now);
            let incoming = &self.incoming;
            deadlines.push(
                (h.incoming.deadline, serial, h.key.clone()),
                incoming.len(),
                |serial, key| incoming.get(key).is_some_and(|i| i.serial == serial),
            );
            let corr = (self.party == Party::Served).then(|| h.incoming.corr.clone());
            let resend_safe = h.incoming.resend_safe;
            self.incoming.insert(h.key, h.incoming);
            self.config.observer.delivered();
            match corr {
                Some(corr) => self.push(Action::Serve(ToServe {
                    text: h.text,
                    corr: Some(corr),
                    resend_safe,
                    // Until the deadline its refusal is held to.
                    wait: (h.since + self.held_limit()).saturating_duration_since(now),
                    // The deadline just set.
                    time_left: timeout,
                    attached: h.attached,
                })),
                None => self.push(Action::Deliver(h.text, h.attached)),
            }
        }
        self.update_reading_peer();
    }

    fn update_reading_peer(&mut self) {
        let reading =
            self.held_octets < self.config.budget && self.held_in.len() < self.config.max_incoming;
        if reading && !self.reading_peer {
            self.push(Action::ResumePeer);
        }
        self.reading_peer = reading;
    }

    /// The deadline of the peer's request with this id that the local
    /// party has (none when no such request waits): when the exchange
    /// answers it if the party has not, and so when the party's work on it
    /// may stop.
    pub fn deadline_of(&self, token: &[u8], kind: IdKind) -> Option<Instant> {
        let found = self.incoming.get(token).or_else(|| {
            (self.incoming.iter())
                .find(|(k, v)| same_id(k, v.kind, token, kind))
                .map(|(_, v)| v)
        });
        found.map(|i| i.deadline)
    }

    /// The request of the peer waiting here that `named` names.
    fn named_incoming(&self, named: &Named) -> Option<&Incoming> {
        fn names(i: &Incoming) -> Option<&Names> {
            i.names.as_deref()
        }
        // The one request that matches: tokens are the clients' own, and
        // two clients' requests on one association may give the same one.
        fn only<'a>(mut matching: impl Iterator<Item = &'a Incoming>) -> Option<&'a Incoming> {
            match (matching.next(), matching.next()) {
                (Some(one), None) => Some(one),
                _ => None,
            }
        }
        let waiting = self.incoming.values();
        match named {
            Named::Id(token, kind) => self.find_incoming(token, *kind),
            Named::Subscription(token, kind) => self
                .find_incoming(token, *kind)
                .filter(|i| names(i).is_some_and(|n| n.subscription)),
            Named::Progress(token) => only(
                waiting.filter(|i| names(i).is_some_and(|n| n.progress.as_ref() == Some(token))),
            ),
            Named::Log => only(waiting.filter(|i| names(i).is_some_and(|n| n.logs))),
        }
    }

    /// The request of the peer whose id is `token`, still waiting for its
    /// reply.
    fn find_incoming(&self, token: &[u8], kind: IdKind) -> Option<&Incoming> {
        self.incoming
            .get(token)
            .or_else(|| (self.incoming.values()).find(|v| same_id(&v.id, v.kind, token, kind)))
    }

    /// Removes the request of the peer a reply with id `token` answers: the
    /// same token, else the same id value (`1` and `1.0`, escapes).
    fn take_incoming(&mut self, token: &[u8], kind: IdKind) -> Option<Incoming> {
        if let Some(i) = self.incoming.remove(token) {
            return Some(i);
        }
        let key = self
            .incoming
            .iter()
            .find(|(k, v)| same_id(k, v.kind, token, kind))
            .map(|(k, _)| k.clone())?;
        self.incoming.remove(&key)
    }

    /// Removes the request of the peer whose numeric id a reply's id
    /// `token` is a rounding of: a party that keeps ids as IEEE doubles
    /// (JavaScript) answers `12345678901234567890` with
    /// `12345678901234567000`. Only when exactly one outstanding id rounds
    /// to it (an id of the same value was looked for first).
    fn take_rounded(&mut self, token: &[u8], kind: IdKind) -> Option<Incoming> {
        if kind != IdKind::Number {
            return None;
        }
        let double = |t: &[u8]| std::str::from_utf8(t).ok()?.parse::<f64>().ok();
        let value = double(token)?;
        let mut found = self
            .incoming
            .iter()
            .filter(|(_, v)| v.kind == IdKind::Number && double(&v.id) == Some(value));
        let key = match (found.next(), found.next()) {
            (Some((k, _)), None) => k.clone(),
            _ => return None,
        };
        self.incoming.remove(&key)
    }

    /// A request of the peer is done with: its room goes to what waits.
    fn released(&mut self, now: Instant, incoming: Incoming) {
        self.in_octets -= incoming.octets;
        self.config.shared.give(false, incoming.octets);
        self.deliver_held(now);
    }

    fn not_delivered(&mut self, corr: Corr, detail: String) {
        self.config.observer.not_delivered();
        self.transport_error(corr, TransportError::NOT_DELIVERED, detail);
    }

    fn transport_error(&mut self, corr: Corr, code: TransportError, detail: String) {
        self.config.observer.transport_error(code, true);
        self.push(Action::Send(ToPeer::Error { corr, code, detail }));
    }

    /// The association ended (`f` says how): every request of the local
    /// party still waiting gets its answer, at once and from now on.
    pub fn peer_ended(&mut self, now: Instant, f: Failure) {
        self.closed = Some(f.clone());
        // A request that was sent and must not be sent twice has an
        // unknown fate: the client is told so (never "not delivered").
        let unknown = match &f {
            Failure::Lost(why) => Failure::MayHaveExecuted(format!(
                "{why}; the request had been sent and is not read-only or idempotent: \
                 the upstream may have executed it, and it is not sent again"
            )),
            other => other.clone(),
        };
        let pending: Vec<Pending<T>> = self.outgoing.drain().map(|(_, p)| p).collect();
        for p in pending {
            let f = if p.resend_safe { &f } else { &unknown };
            self.finish(now, p, Err(f.clone()));
        }
        self.out_deadlines.0.clear();
        self.out_lasting.0.clear();
        // What waited never crossed: it fails the same way.
        self.admit(now);
        for (_, i) in std::mem::take(&mut self.incoming) {
            self.config.shared.give(false, i.octets);
        }
        self.held_in.clear();
        self.in_octets = 0;
        self.held_octets = 0;
        self.retry_peer = None;
        self.in_deadlines.0.clear();
        self.in_lasting.0.clear();
        self.update_reading_local();
        self.update_reading_peer();
    }

    // ---- time -----------------------------------------------------------

    /// Answers what waited too long: requests of the local party with no
    /// reply (Timeout), requests of the peer the local party did not answer
    /// (NotDelivered), local messages that found no room (Unavailable).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((serial, corr)) = self.out_deadlines.pop_due(now) {
            if self.outgoing.get(&corr).is_some_and(|p| p.serial == serial)
                && let Some(p) = self.outgoing.abandon(&corr)
            {
                self.finish(now, p, Err(Failure::Timeout));
            }
        }

        while let Some((serial, key)) = self.in_deadlines.pop_due(now) {
            if self.incoming.get(&key).is_some_and(|i| i.serial == serial) {
                self.incoming_expired(now, key);
            }
        }

        while let Some((serial, corr)) = self.out_lasting.pop_due(now) {
            if let Some(l) = self.config.lasting
                && self.outgoing.get(&corr).is_some_and(|p| p.serial == serial)
                && let Some(p) = self.outgoing.abandon(&corr)
            {
                let id = p.id.clone();
                let (text, _) = (l.ended)(&id);
                let replied = Replied {
                    text,
                    is_error: false,
                    attached: None,
                };
                self.finish(now, p, Ok(replied));
                // Given up at the peer too, as for a caller that left.
                let (text, method) = (l.given_up)(&id);
                let kind = Kind::Notification {
                    method: crate::jsonrpc::StrToken {
                        raw: method,
                        escaped: false,
                    },
                };
                let cancel = Attached::Cancel(Bytes::copy_from_slice(&corr));
                self.one(now, text, kind, None, (None, None), Some(cancel));
            }
        }

        while let Some((serial, key)) = self.in_lasting.pop_due(now) {
            if self.incoming.get(&key).is_some_and(|i| i.serial == serial) {
                self.incoming_expired(now, key);
            }
        }

        while let Some((serial, key)) = self.cancelled.pop_due(now) {
            if self.incoming.get(&key).is_some_and(|i| i.serial == serial)
                && let Some(i) = self.incoming.remove(&key)
            {
                if !i.given_up {
                    let detail = "cancelled: its client went away".to_owned();
                    self.not_delivered(i.corr.clone(), detail);
                }
                self.released(now, i);
            }
        }

        if self
            .stalled_since
            .is_some_and(|s| s + self.config.stall_timeout <= now)
        {
            self.refuse_stalled(now);
        }
        if self.retry_local.is_some_and(|r| r <= now) {
            self.admit(now);
        }
        if self.retry_peer.is_some_and(|r| r <= now) {
            self.retry_peer = None;
            self.deliver_held(now);
        }
        if self.held_deadline().is_some_and(|d| d <= now) {
            self.deliver_held(now);
        }
    }

    /// A request of the peer the local party did not answer by its
    /// deadline: its sender's edge has answered Timeout by now; the peer
    /// learns NotDelivered and the entry does not stay forever. A local
    /// party that names its requests ([`Relations`]) is told the request
    /// was given up, and the request keeps its id [`CANCELLED_GRACE`] more,
    /// so that an answer the party wrote before it read that goes to no
    /// later request with the id.
    fn incoming_expired(&mut self, now: Instant, key: Corr) {
        let detail = format!(
            "no answer from the {} within {:?}",
            self.config.local_name, self.config.request_timeout
        );
        let relations = self
            .relations
            .filter(|_| !matches!(self.local, Local::Down(_)));
        let lasting = self.config.lasting;
        let Some(i) = self.incoming.get_mut(&key) else {
            return;
        };
        let corr = i.corr.clone();
        // A lasting request's lifetime ended: its end, not a failure.
        let ended = lasting
            .filter(|_| i.lasting)
            .map(|l| ((l.ended)(&i.id), i.kind));
        let answer = |x: &mut Self| match ended {
            Some(((text, id), kind)) => {
                let kind = Kind::Success {
                    id: crate::jsonrpc::IdToken { token: id, kind },
                };
                x.config.observer.replied();
                x.send_message(text, kind, corr, None, None);
            }
            None => x.not_delivered(corr, detail),
        };
        let Some(r) = relations else {
            if let Some(i) = self.incoming.remove(&key) {
                answer(self);
                self.released(now, i);
            }
            return;
        };
        i.given_up = true;
        let (id, serial) = (i.id.clone(), i.serial);
        let cancellable = !i.names.as_ref().is_some_and(|n| n.uncancellable);
        answer(self);
        if cancellable {
            self.push(Action::Deliver((r.given_up)(&id), None));
        }
        let incoming = &self.incoming;
        self.cancelled.push(
            (now + CANCELLED_GRACE, serial, key),
            incoming.len(),
            |serial, key| incoming.get(key).is_some_and(|i| i.serial == serial),
        );
    }

    /// How long a request of the peer may be held: a served request waits
    /// for room under the gateway's `--max-in-flight` and `--memory-budget`
    /// no longer than `stall_timeout` (as one already served waits for a
    /// permit); a stream's party (given up on by its own stall bound when
    /// it takes nothing) no longer than the request timeout, after which
    /// its sender has been answered and the request must not go on.
    fn held_limit(&self) -> Duration {
        match self.party {
            Party::Served => self.config.stall_timeout,
            _ => self.config.request_timeout,
        }
    }

    /// When the oldest request of the peer held back has waited its limit.
    fn held_deadline(&self) -> Option<Instant> {
        let limit = self.held_limit();
        self.held_in.front().map(|h| h.since + limit)
    }

    /// Requests of the peer held back for their limit are answered
    /// NotDelivered (they never reached the local party, so a retry is
    /// safe), before room that frees at the same moment can take them.
    fn refuse_expired_held(&mut self, now: Instant) {
        let limit = self.held_limit();
        let waiting_for_budget = self.retry_peer.is_some();
        while self.held_in.front().is_some_and(|h| h.since + limit <= now) {
            let Some(h) = self.held_in.pop_front() else {
                break;
            };
            self.held_octets -= h.incoming.octets;
            self.in_octets -= h.incoming.octets;
            let (secs, name) = (limit.as_secs_f64(), &self.config.local_name);
            let bound = match self.party {
                Party::Served => "--stall-timeout",
                _ => "the request timeout",
            };
            let detail = match self.party {
                _ if waiting_for_budget => format!(
                    "requests in flight hold this gateway's --memory-budget and none finished within {secs:.1} s ({bound})"
                ),
                Party::Served => format!(
                    "{} requests of this association are at the {name} (--max-in-flight) and none finished within {secs:.1} s ({bound})",
                    self.incoming.len(),
                ),
                _ => format!(
                    "the {name} answered none of its {} requests in flight within {secs:.1} s ({bound}), so this one never reached it",
                    self.incoming.len(),
                ),
            };
            self.not_delivered(h.incoming.corr, detail);
        }
    }

    /// Local requests that waited `stall_timeout` for room are answered
    /// Unavailable; the rest go on when room comes.
    fn refuse_stalled(&mut self, now: Instant) {
        let limit = self.config.stall_timeout;
        let mut i = 0;
        while i < self.waiting.len() {
            let q = &self.waiting[i];
            if q.since + limit > now
                || self.id_outstanding(q)
                || !matches!(q.kind, Kind::Request { .. })
            {
                i += 1;
                continue;
            }
            let Some(q) = self.waiting.remove(i) else {
                break;
            };
            self.queued_octets -= q.text.len();
            let id = q.text.slice(id_range(&q.kind));
            let f = Failure::Unavailable(format!(
                "no room for this request within {:.1} s (--stall-timeout): {} requests ({} octets) of this session await replies",
                limit.as_secs_f64(),
                self.outgoing.len(),
                self.sent_octets
            ));
            self.refuse_local(q.batch, q.ticket, &id, f);
        }
        self.admit(now);
    }

    fn push(&mut self, a: Action<T>) {
        self.actions.push_back(a);
    }
}

/// The id token's range in a request's text (empty for other kinds).
fn id_range(kind: &Kind) -> std::ops::Range<usize> {
    match kind {
        Kind::Request { id, .. } | Kind::Success { id } | Kind::Error { id } => id.token.clone(),
        Kind::Notification { .. } => 0..0,
    }
}

/// What a caller is told when the shared limits leave no room.
fn full_detail(full: Full, room: bool, config: &Config) -> String {
    match (room, full) {
        (false, _) => format!(
            "{} requests are in flight on this association",
            config.max_outstanding
        ),
        (true, Full::InFlight) => format!(
            "{} requests are in flight in this gateway (--max-in-flight)",
            config.shared.max_in_flight()
        ),
        (true, Full::Octets) => format!(
            "the requests in flight hold this gateway's --memory-budget of {} octets",
            config.shared.max_octets()
        ),
    }
}

fn invalid(e: &ScanError) -> Failure {
    Failure::Invalid(e.to_string())
}

/// Checks that a request or notification can be carried, and labels it
/// (SafetyLabel: effect class and scope).
pub fn label_of(text: &[u8], kind: &Kind, labeler: &Labeler) -> Result<Option<Label>, Uncarriable> {
    let (Kind::Request { method, .. } | Kind::Notification { method }) = kind else {
        return Ok(None);
    };
    let m = method_of(text, method).ok_or(Uncarriable::MethodNotUnicode)?;
    if m.len() > bridge::FIELD_MAX_LEN {
        return Err(Uncarriable::MethodTooLong(m.len()));
    }
    let mut label = labeler.label(&m, text);
    if label.scope.len() > bridge::FIELD_MAX_LEN {
        label.scope.clear();
    }
    Ok(Some(label))
}
