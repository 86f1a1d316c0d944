//! Two exchanges joined in memory on a virtual clock: what the edge sends
//! is written as a real Bridge payload and read back at the origin (and the
//! other way), so every exchange semantic is tested without a socket, a
//! runtime or a sleep.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Value, json};

use super::*;
use crate::bridge::{Effect, ProtocolId, TransportError};
use crate::jsonrpc::{EffectTable, IdKind, Labeler, Limits, Scanned, scan};

const PROTOCOL: ProtocolId = ProtocolId::JSONRPC_EXPERIMENTAL;
const TIMEOUT: Duration = Duration::from_secs(30);
const STALL: Duration = Duration::from_secs(10);
/// How long a `watch` lasts (the tests' lasting request, [`Lasting`]).
const LIFETIME: Duration = Duration::from_secs(120);

/// `watch` lasts [`LIFETIME`], and ends with `{"id":ID,"result":"ended"}`.
fn lasting() -> Lasting {
    Lasting {
        method: "watch",
        lifetime: LIFETIME,
        ended: |id| {
            let head = br#"{"jsonrpc":"2.0","id":"#;
            let text = [&head[..], id, br#","result":"ended"}"#].concat();
            (text.into(), head.len()..head.len() + id.len())
        },
        given_up: |id| {
            let head = br#"{"jsonrpc":"2.0","method":""#;
            let text = [&head[..], br#"unwatch","params":["#, id, b"]}"].concat();
            (text.into(), head.len()..head.len() + "unwatch".len())
        },
    }
}

#[derive(Default)]
struct Counts {
    answered: AtomicU64,
    unavailable: AtomicU64,
    timeouts: AtomicU64,
    dropped: AtomicU64,
    in_flight: AtomicI64,
    not_delivered: AtomicU64,
}

impl Observer for Counts {
    fn answered(&self, class: ReplyClass, _: Option<Duration>) {
        self.answered.fetch_add(1, Relaxed);
        match class {
            ReplyClass::Unavailable => self.unavailable.fetch_add(1, Relaxed),
            ReplyClass::Timeout => self.timeouts.fetch_add(1, Relaxed),
            _ => 0,
        };
    }
    fn in_flight(&self, d: i64) {
        self.in_flight.fetch_add(d, Relaxed);
    }
    fn dropped(&self) {
        self.dropped.fetch_add(1, Relaxed);
    }
    fn not_delivered(&self) {
        self.not_delivered.fetch_add(1, Relaxed);
    }
}

/// The limits of one side.
#[derive(Clone, Copy)]
struct Room {
    max_outstanding: usize,
    max_incoming: usize,
    budget: usize,
}

impl Default for Room {
    fn default() -> Self {
        Self {
            max_outstanding: 128,
            max_incoming: 128,
            budget: 8 << 20,
        }
    }
}

fn config(role: Role, l: Room, shared: Arc<Shared>, counts: Arc<Counts>) -> Config {
    Config {
        role,
        request_timeout: TIMEOUT,
        stall_timeout: STALL,
        max_outstanding: l.max_outstanding,
        max_incoming: l.max_incoming,
        budget: l.budget,
        local_name: if role.is_edge() { "client" } else { "upstream" }.into(),
        labeler: Arc::new(Labeler::new(
            PROTOCOL,
            EffectTable::for_protocol(PROTOCOL)
                .with("read", Effect::ReadOnly)
                .with("put", Effect::IdempotentWrite),
        )),
        gate: None,
        shared,
        observer: counts,
        lasting: Some(lasting()),
    }
}

/// One side: its exchange, what its local party received, its counts.
struct Side<T> {
    x: Exchange<T>,
    local: Vec<Value>,
    answers: Vec<(T, Reply)>,
    served: Vec<ToServe>,
    /// What came beside the messages delivered.
    beside: Vec<Attached>,
    counts: Arc<Counts>,
}

impl<T> Side<T> {
    fn new(role: Role, l: Room, shared: Arc<Shared>) -> Self {
        let counts = Arc::new(Counts::default());
        Self {
            x: Exchange::new(config(role, l, shared, counts.clone())),
            local: Vec::new(),
            answers: Vec::new(),
            served: Vec::new(),
            beside: Vec::new(),
            counts,
        }
    }

    /// What the local party sends, scanned as a gateway would.
    fn local(&mut self, now: Instant, text: &str, ticket: Option<T>) {
        let text = Bytes::copy_from_slice(text.as_bytes());
        let scanned = scan(&text, &Limits::default());
        self.x.handle_local(now, text, scanned, ticket);
    }

    /// Takes the actions: local ones are recorded, the peer's returned as
    /// Bridge payloads.
    fn actions(&mut self) -> Vec<(crate::wire::FrameType, Vec<u8>)> {
        let mut wire = Vec::new();
        while let Some(a) = self.x.poll_action() {
            match a {
                Action::Send(msg) => wire.push(encode(&msg)),
                Action::Deliver(text, attached) => {
                    self.local.push(parse(&text));
                    self.beside.extend(attached);
                }
                Action::Answer(t, r) => self.answers.push((t, r)),
                Action::Interim(i, text) => (i.0)(text),
                Action::Serve(s) => self.served.push(s),
                Action::ResumeLocal | Action::ResumePeer => {}
            }
        }
        wire
    }

    fn take_local(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.local)
    }
}

fn encode(msg: &ToPeer) -> (crate::wire::FrameType, Vec<u8>) {
    let mut out = Vec::new();
    msg.write(&mut out, PROTOCOL);
    (msg.frame_type(), out)
}

fn parse(text: &[u8]) -> Value {
    serde_json::from_slice(text).expect("JSON")
}

/// An edge and an origin joined in memory, and the virtual clock.
struct Pair<T> {
    edge: Side<T>,
    origin: Side<()>,
    now: Instant,
}

impl<T> Pair<T> {
    fn new(edge: Role, origin: Role, e: Room, o: Room) -> Self {
        Self {
            edge: Side::new(edge, e, Arc::new(Shared::unlimited())),
            origin: Side::new(origin, o, Arc::new(Shared::unlimited())),
            now: Instant::now(),
        }
    }

    /// Moves every frame across until both sides are quiet.
    fn drive(&mut self) {
        for _ in 0..10_000 {
            let to_origin = self.edge.actions();
            let to_edge = self.origin.actions();
            if to_origin.is_empty() && to_edge.is_empty() {
                return;
            }
            for (ft, p) in to_origin {
                self.origin.x.handle_peer(self.now, &p[..], |octets| {
                    receive(ft, octets, PROTOCOL, &Limits::default())
                });
            }
            for (ft, p) in to_edge {
                self.edge.x.handle_peer(self.now, &p[..], |octets| {
                    receive(ft, octets, PROTOCOL, &Limits::default())
                });
            }
        }
        panic!("the pair never went quiet");
    }

    /// Moves the clock on; as the shell's timer does, each exchange's
    /// timeout is handled only once `poll_timeout` says it is due.
    fn advance(&mut self, by: Duration) {
        self.now += by;
        let now = self.now;
        if self.edge.x.poll_timeout().is_some_and(|due| due <= now) {
            self.edge.x.handle_timeout(now);
        }
        if self.origin.x.poll_timeout().is_some_and(|due| due <= now) {
            self.origin.x.handle_timeout(now);
        }
        self.drive();
    }

    fn client(&mut self, text: &str) {
        let now = self.now;
        self.edge.local(now, text, None);
        self.drive();
    }

    fn upstream(&mut self, text: &str) {
        let now = self.now;
        self.origin.local(now, text, None);
        self.drive();
    }

    /// The upstream answers everything it has: `result` = the request's
    /// params.
    fn upstream_answers_all(&mut self) -> usize {
        let got = self.origin.take_local();
        for r in &got {
            let reply = json!({"jsonrpc":"2.0","id":r["id"],"result":r["params"]}).to_string();
            self.upstream(&reply);
        }
        got.len()
    }
}

impl<T: std::fmt::Debug> Pair<T> {
    /// The served upstream answers `request` with `reply`.
    fn serve(&mut self, request: ToServe, reply: &str) {
        let reply = Bytes::copy_from_slice(reply.as_bytes());
        let kind = kind_of(&reply);
        let now = self.now;
        self.origin
            .x
            .served(now, &request.corr.expect("a request"), Ok((reply, kind)));
        self.drive();
    }

    /// The last answer to a caller, which must be a transport error: its
    /// ticket, code and detail.
    fn transport_failure(&mut self) -> (T, TransportError, String) {
        let (t, r) = self.edge.answers.pop().expect("answered");
        let Reply::Failed(Failure::Transport(code, detail)) = r else {
            panic!("{r:?}");
        };
        (t, code, detail)
    }
}

fn req(id: impl Into<Value>, method: &str, params: Value) -> String {
    json!({"jsonrpc":"2.0","id":id.into(),"method":method,"params":params}).to_string()
}

/// An edge pool (callers numbered by their tickets) and a served origin.
fn pool_pair() -> Pair<u32> {
    Pair::new(
        Role::EdgePool,
        Role::OriginStateless,
        Room::default(),
        Room::default(),
    )
}

/// An edge pool (callers numbered by their tickets) and an origin session
/// (one local party on a stream, as a child process).
fn pool_to_session() -> Pair<u32> {
    Pair::new(
        Role::EdgePool,
        Role::OriginSession,
        Room::default(),
        Room::default(),
    )
}

/// What one JSON-RPC message is, as the gateway's scanner reads it.
fn kind_of(text: &[u8]) -> crate::jsonrpc::Kind {
    match scan(text, &Limits::default()) {
        Ok(Scanned::Single(kind)) => kind,
        other => panic!("not one message: {other:?}"),
    }
}

fn session_pair() -> Pair<()> {
    Pair::new(
        Role::EdgeSession,
        Role::OriginSession,
        Room::default(),
        Room::default(),
    )
}

#[test]
fn a_request_crosses_and_its_reply_comes_back_verbatim() {
    let mut p = session_pair();
    p.origin.x.local_up();
    p.client(&req(7, "echo", json!([1])));
    let at_upstream = p.origin.take_local();
    assert_eq!(
        at_upstream,
        vec![json!({"jsonrpc":"2.0","id":7,"method":"echo","params":[1]})]
    );
    // Spacing and member order are the upstream's own, untouched.
    p.upstream(r#"{"id":7,  "result":{"b":1,"a":2},"jsonrpc":"2.0"}"#);
    assert_eq!(
        p.edge.take_local(),
        vec![json!({"jsonrpc":"2.0","id":7,"result":{"b":1,"a":2}})]
    );
    assert_eq!(p.edge.x.outstanding(), 0);
    assert_eq!(p.edge.counts.in_flight.load(Relaxed), 0);
}

#[test]
fn a_reused_id_is_held_back_until_the_first_is_answered() {
    let mut p = session_pair();
    p.client(&req(9, "sleep", json!(["first"])));
    p.client(&req(9, "echo", json!(["second"])));
    p.client(&req(10, "echo", json!(["other"])));
    // The other id is not held behind it.
    let first = p.origin.take_local();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(first[1]["id"], 10);
    assert!(p.edge.x.reading_local(), "a held id does not stop reading");
    p.upstream(&json!({"jsonrpc":"2.0","id":9,"result":"first"}).to_string());
    let second = p.origin.take_local();
    assert_eq!(
        second,
        vec![json!({"jsonrpc":"2.0","id":9,"method":"echo","params":["second"]})]
    );
}

#[test]
fn a_batch_is_answered_as_one_array_when_every_request_is() {
    let mut p = session_pair();
    let batch = format!(
        "[{},{},{},{}]",
        req(1, "a", json!([1])),
        json!({"jsonrpc":"2.0","method":"note"}),
        req(2, "b", json!([2])),
        json!({"nope":true})
    );
    p.client(&batch);
    // The invalid element is answered at once, into the array: nothing
    // reaches the client until both requests are answered.
    assert!(p.edge.take_local().is_empty());
    assert_eq!(
        p.upstream_answers_all(),
        3,
        "two requests and the notification"
    );
    let got = p.edge.take_local();
    assert_eq!(got.len(), 1, "{got:?}");
    let array = got[0].as_array().expect("an array");
    assert_eq!(array.len(), 3, "{array:?}");
    assert!(array.iter().any(|a| a["error"]["code"] == -32600));
    assert!(
        array
            .iter()
            .any(|a| a["id"] == 1 && a["result"] == json!([1]))
    );
    assert!(
        array
            .iter()
            .any(|a| a["id"] == 2 && a["result"] == json!([2]))
    );
}

#[test]
fn deadlines_answer_timeout_at_the_edge_and_not_delivered_at_the_origin() {
    let mut p = session_pair();
    p.client(&req(1, "never", json!([])));
    assert_eq!(p.origin.take_local().len(), 1);
    assert_eq!(p.edge.x.poll_timeout(), Some(p.now + TIMEOUT));
    p.advance(TIMEOUT - Duration::from_millis(1));
    assert!(p.edge.take_local().is_empty(), "not before its deadline");
    p.advance(Duration::from_millis(1));
    let got = p.edge.take_local();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32010, "{got:?}");
    assert_eq!(p.edge.counts.timeouts.load(Relaxed), 1);
    // The origin told the edge NotDelivered at its own deadline; the edge
    // had already answered, so that answer is dropped as late.
    assert_eq!(p.origin.counts.not_delivered.load(Relaxed), 1);
    assert_eq!(p.edge.counts.dropped.load(Relaxed), 1);
    // A reply after all that is for nobody.
    p.upstream(&json!({"jsonrpc":"2.0","id":1,"result":0}).to_string());
    assert_eq!(p.origin.counts.dropped.load(Relaxed), 1);
    assert!(p.edge.take_local().is_empty());
    assert_eq!(p.edge.x.poll_timeout(), None, "nothing left to time");
}

/// A session party's request has the exchange's deadline while it waits
/// for the party (by its id, as the party knows it); none once answered.
#[test]
fn a_waiting_request_has_the_deadline_it_is_answered_at() {
    use crate::jsonrpc::IdKind;
    let mut p = session_pair();
    let delivered_at = p.now;
    p.client(&req("a-1", "never", json!([])));
    assert_eq!(p.origin.take_local().len(), 1);
    let deadline = p.origin.x.deadline_of(b"\"a-1\"", IdKind::String);
    assert_eq!(deadline, Some(delivered_at + TIMEOUT));
    assert_eq!(p.origin.x.deadline_of(b"\"a-2\"", IdKind::String), None);
    p.advance(TIMEOUT);
    assert_eq!(
        p.origin.counts.not_delivered.load(Relaxed),
        1,
        "answered then"
    );
    assert_eq!(p.origin.x.deadline_of(b"\"a-1\"", IdKind::String), None);
}

#[test]
fn the_upstream_may_ask_the_client_and_hear_its_answer() {
    let mut p = session_pair();
    p.upstream(&req("s1", "sampling/createMessage", json!({"q":1})));
    let asked = p.edge.take_local();
    assert_eq!(asked[0]["method"], "sampling/createMessage");
    p.client(&json!({"jsonrpc":"2.0","id":"s1","result":{"a":1}}).to_string());
    assert_eq!(
        p.origin.take_local(),
        vec![json!({"jsonrpc":"2.0","id":"s1","result":{"a":1}})]
    );
    // A reply to nothing is dropped, not carried.
    p.client(&json!({"jsonrpc":"2.0","id":"s1","result":{"a":1}}).to_string());
    assert_eq!(p.edge.counts.dropped.load(Relaxed), 1);
}

#[test]
fn a_pipelining_client_waits_for_room_and_every_request_is_answered() {
    let mut p = session_pair();
    let mut answered = 0;
    let mut read = 0;
    // The client writes 1000 requests; the gateway reads while it may.
    while read < 1000 {
        if p.edge.x.reading_local() {
            p.client(&req(read, "echo", json!([read])));
            read += 1;
            continue;
        }
        assert_eq!(
            p.edge.x.outstanding(),
            128 + 1,
            "128 in flight, one waiting"
        );
        assert!(p.upstream_answers_all() > 0);
        answered += p.edge.take_local().len();
    }
    while p.upstream_answers_all() > 0 {}
    answered += p.edge.take_local().len();
    assert_eq!(answered, 1000);
    assert_eq!(p.edge.counts.unavailable.load(Relaxed), 0, "never -32011");
    assert_eq!(p.origin.counts.not_delivered.load(Relaxed), 0);
}

#[test]
fn a_message_that_waits_longer_than_the_stall_timeout_is_answered_unavailable() {
    let mut p = session_pair();
    for i in 0..129 {
        p.client(&req(i, "never", json!([])));
    }
    assert!(!p.edge.x.reading_local());
    p.advance(STALL);
    let got = p.edge.take_local();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 128);
    assert_eq!(got[0]["error"]["code"], -32011);
    assert!(
        p.edge.x.reading_local(),
        "reading again: the next one may find room"
    );
}

#[test]
fn the_octet_budget_bounds_what_is_in_flight() {
    let l = Room {
        budget: 1000,
        ..Room::default()
    };
    let mut p: Pair<()> = Pair::new(Role::EdgeSession, Role::OriginSession, l, Room::default());
    let big = "x".repeat(300);
    for i in 0..5 {
        if p.edge.x.reading_local() {
            p.client(&req(i, "echo", json!([big])));
        }
    }
    // Each is about 340 octets: two fit in 1000, the third waits and the
    // client is not read.
    assert_eq!(p.origin.local.len(), 2);
    assert!(!p.edge.x.reading_local());
    let (out, _) = p.edge.x.octets();
    assert!(out <= 1000 + 400, "{out}");
    p.upstream_answers_all();
    assert_eq!(p.origin.local.len(), 1, "the waiting one went on");
    assert!(p.edge.x.reading_local());
}

#[test]
fn a_single_message_larger_than_the_budget_still_crosses_alone() {
    let l = Room {
        budget: 100,
        ..Room::default()
    };
    let mut p: Pair<()> = Pair::new(Role::EdgeSession, Role::OriginSession, l, Room::default());
    p.client(&req(1, "echo", json!(["y".repeat(500)])));
    assert_eq!(p.origin.local.len(), 1);
}

#[test]
fn the_origin_holds_what_its_upstream_has_no_room_for_and_stops_reading_the_peer() {
    let o = Room {
        max_incoming: 2,
        budget: 1,
        ..Room::default()
    };
    let mut p: Pair<()> = Pair::new(Role::EdgeSession, Role::OriginSession, Room::default(), o);
    for i in 0..4 {
        p.client(&req(i, "echo", json!([i])));
    }
    assert_eq!(p.origin.local.len(), 2, "two delivered");
    assert!(
        !p.origin.x.reading_peer(),
        "the rest held: the peer is not read"
    );
    assert_eq!(
        p.origin.counts.not_delivered.load(Relaxed),
        0,
        "never refused"
    );
    let mut answered = 0;
    for _ in 0..3 {
        p.upstream_answers_all();
        answered += p.edge.take_local().len();
    }
    assert_eq!(answered, 4);
    assert!(p.origin.x.reading_peer());
}

#[test]
fn an_association_that_ends_answers_everything_that_waits() {
    let mut p = session_pair();
    for i in 0..130 {
        p.client(&req(i, "never", json!([])));
    }
    let now = p.now;
    p.edge
        .x
        .peer_ended(now, Failure::Lost("the peer went away".into()));
    p.drive();
    let got = p.edge.take_local();
    assert_eq!(got.len(), 130, "the 128 in flight and the 2 that waited");
    // `never` is not read-only: what was sent may have been executed; what
    // waited was not sent.
    let codes = |code: i64| got.iter().filter(|g| g["error"]["code"] == code).count();
    assert_eq!((codes(-32014), codes(-32004)), (128, 2), "{:?}", got[0]);
    assert!(
        got[0]["error"]["data"]["detail"]
            .as_str()
            .unwrap()
            .contains("may have executed")
    );
    assert_eq!(p.edge.counts.in_flight.load(Relaxed), 0);
    // From now on a request is answered at once.
    p.client(&req(500, "late", json!([])));
    assert_eq!(p.edge.take_local()[0]["error"]["code"], -32004);
}

#[test]
fn a_lost_request_that_may_be_sent_again_is_not_delivered_and_the_others_may_have_executed() {
    let mut p = session_pair();
    for (i, method) in ["read", "put", "never"].into_iter().enumerate() {
        p.client(&req(i, method, json!([])));
    }
    let now = p.now;
    p.edge.x.peer_ended(now, Failure::Lost("gone".into()));
    p.drive();
    let mut codes: Vec<_> = p
        .edge
        .take_local()
        .iter()
        .map(|g| (g["id"].as_i64(), g["error"]["code"].as_i64()))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            (Some(0), Some(-32004)),
            (Some(1), Some(-32004)),
            (Some(2), Some(-32014))
        ]
    );
}

#[test]
fn an_upstream_that_goes_away_has_its_requests_answered_not_delivered_or_may_have_executed() {
    let mut p = session_pair();
    p.client(&req(1, "read", json!([])));
    p.client(&req(4, "a", json!([])));
    p.origin.x.local_down("it exited");
    p.drive();
    let mut got = p.edge.take_local();
    got.sort_by_key(|g| g["id"].as_i64());
    // A read-only request may be sent again: not delivered. A plain one
    // had been handed to the upstream: it may have executed.
    assert_eq!(got[0]["error"]["code"], -32004, "{got:?}");
    assert_eq!(got[1]["error"]["code"], -32014, "{got:?}");
    for g in &got {
        let detail = g["error"]["data"]["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("went away before replying: it exited"),
            "{detail}"
        );
    }
    // While it is down, new requests are refused at once.
    p.client(&req(2, "b", json!([])));
    let got = p.edge.take_local();
    assert!(
        got[0]["error"]["data"]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("not running")
    );
    p.origin.x.local_starting();
    p.client(&req(3, "c", json!([])));
    assert_eq!(
        p.origin.take_local().len(),
        3,
        "the two before it went, and the third"
    );
}

#[test]
fn pooled_callers_get_their_own_answers_for_the_same_id() {
    let mut p = pool_pair();
    let now = p.now;
    p.edge.local(now, &req(1, "echo", json!(["a"])), Some(100));
    p.edge.local(now, &req(1, "echo", json!(["b"])), Some(200));
    p.drive();
    let served = std::mem::take(&mut p.origin.served);
    assert_eq!(served.len(), 2, "the same id twice, both carried at once");
    // The upstream answers in the other order.
    for request in served.into_iter().rev() {
        let r = parse(&request.text);
        let reply = json!({"jsonrpc":"2.0","id":1,"result":r["params"]}).to_string();
        p.serve(request, &reply);
    }
    let mut answers: Vec<(u32, Value)> = p
        .edge
        .answers
        .drain(..)
        .map(|(t, r)| match r {
            Reply::Message { text, .. } => (t, parse(&text)["result"][0].clone()),
            Reply::Failed(f) => panic!("{f:?}"),
        })
        .collect();
    answers.sort_by_key(|a| a.0);
    assert_eq!(answers, vec![(100, json!("a")), (200, json!("b"))]);
}

#[test]
fn a_served_reply_with_another_id_is_not_delivered() {
    let mut p = pool_pair();
    let now = p.now;
    p.edge.local(now, &req(5, "echo", json!([])), Some(1));
    p.drive();
    let request = p.origin.served.pop().expect("served");
    p.serve(request, r#"{"jsonrpc":"2.0","id":6,"result":0}"#);
    let (t, code, detail) = p.transport_failure();
    assert_eq!(t, 1);
    assert_eq!(code, TransportError::NOT_DELIVERED);
    assert!(detail.contains("another request's id"), "{detail}");
}

#[test]
fn a_server_originated_request_to_the_pool_is_not_delivered() {
    let mut p = pool_to_session();
    p.upstream(&req(1, "ask", json!([])));
    let got = p.origin.take_local();
    assert_eq!(got[0]["error"]["code"], -32004, "{got:?}");
}

#[test]
fn the_pool_refuses_at_once_when_the_gateway_is_full() {
    let shared = Arc::new(Shared::new(2, usize::MAX));
    let mut edge: Side<u32> = Side::new(Role::EdgePool, Room::default(), shared.clone());
    let now = Instant::now();
    for t in 0..3 {
        edge.local(now, &req(t, "a", json!([])), Some(t));
    }
    let _ = edge.actions();
    assert_eq!(edge.answers.len(), 1);
    let (t, Reply::Failed(f)) = &edge.answers[0] else {
        panic!("refused");
    };
    assert_eq!((*t, f.code()), (2, -32011));
    assert_eq!(shared.in_flight(), 2);
    edge.x.peer_ended(now, Failure::Lost("gone".into()));
    let _ = edge.actions();
    assert_eq!(shared.in_flight(), 0, "every share given back");
    assert_eq!(shared.octets(), 0);
}

#[test]
fn a_session_waits_for_the_gateway_wide_budget_and_goes_on_when_it_frees() {
    let shared = Arc::new(Shared::new(1, usize::MAX));
    let mut a: Side<()> = Side::new(Role::EdgeSession, Room::default(), shared.clone());
    let mut b: Side<()> = Side::new(Role::EdgeSession, Room::default(), shared.clone());
    let now = Instant::now();
    a.local(now, &req(1, "a", json!([])), None);
    assert_eq!(a.actions().len(), 1);
    b.local(now, &req(1, "b", json!([])), None);
    assert!(b.actions().is_empty(), "waits");
    assert!(!b.x.reading_local());
    let retry = b.x.poll_timeout().expect("looks again");
    assert!(retry < now + Duration::from_secs(1));
    a.x.peer_ended(now, Failure::Lost("gone".into()));
    b.x.handle_timeout(retry);
    assert_eq!(b.actions().len(), 1, "sent once the budget freed");
}

#[test]
fn deadline_queues_stay_small_under_steady_traffic() {
    // The shell handles an exchange's timeout only when its first deadline
    // is due, a whole request timeout away, so the entries of answered
    // requests must go as the queues grow, not then.
    let mut p = session_pair();
    let queued = |p: &Pair<()>| {
        (
            p.edge.x.deadlines_queued().0,
            p.origin.x.deadlines_queued().1,
        )
    };
    for i in 0..10_000 {
        p.client(&req(i, "echo", json!([])));
        p.upstream_answers_all();
        if i % 100 == 0 {
            p.advance(Duration::from_millis(1));
        }
    }
    assert_eq!(p.edge.take_local().len(), 10_000);
    let (out, inc) = queued(&p);
    assert!(out < 300 && inc < 300, "answered in order: {out} {inc}");

    // One request left unanswered holds the front of both queues; the
    // entries behind it still go.
    p.client(&req("slow", "sleep", json!([])));
    let slow = p.origin.take_local();
    assert_eq!(slow.len(), 1);
    for i in 0..10_000 {
        p.client(&req(i, "echo", json!([])));
        p.upstream_answers_all();
    }
    assert_eq!(p.edge.take_local().len(), 10_000);
    let (out, inc) = queued(&p);
    assert!(out < 300 && inc < 300, "behind a slow one: {out} {inc}");
    p.upstream(&json!({"jsonrpc":"2.0","id":"slow","result":1}).to_string());
    assert_eq!(p.edge.take_local().len(), 1);
}

#[test]
fn notifications_cross_both_ways_and_are_never_answered() {
    let mut p = session_pair();
    p.client(&json!({"jsonrpc":"2.0","method":"note","params":[1]}).to_string());
    assert_eq!(p.origin.take_local()[0]["method"], "note");
    p.upstream(&json!({"jsonrpc":"2.0","method":"tick"}).to_string());
    assert_eq!(p.edge.take_local()[0]["method"], "tick");
    assert_eq!(p.edge.counts.answered.load(Relaxed), 0);
}

#[test]
fn the_origin_forgets_a_request_its_upstream_never_answers_and_the_next_on_its_id_goes_on() {
    // The origin's timeout is shorter than the edge's: its NotDelivered
    // reaches the client first, saying why.
    let mut p = session_pair();
    p.origin.x = Exchange::new(Config {
        request_timeout: Duration::from_secs(1),
        ..config(
            Role::OriginSession,
            Room::default(),
            Arc::new(Shared::unlimited()),
            p.origin.counts.clone(),
        )
    });
    p.client(&req(1, "sleep", json!([5000])));
    p.client(&req(1, "echo", json!(["next"])));
    assert_eq!(
        p.origin.take_local().len(),
        1,
        "the second waits for the id"
    );
    p.advance(Duration::from_secs(1));
    let got = p.edge.take_local();
    assert_eq!(
        got[0]["error"]["data"]["npamp_error"], "NotDelivered",
        "{got:?}"
    );
    let detail = got[0]["error"]["data"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.contains("no answer from the upstream within 1s"),
        "{detail}"
    );
    let next = p.origin.take_local();
    assert_eq!(
        next,
        vec![json!({"jsonrpc":"2.0","id":1,"method":"echo","params":["next"]})]
    );
}

#[test]
fn an_upstream_that_rounds_a_large_numeric_id_has_that_request_answered_not_delivered_at_once() {
    let mut p = session_pair();
    p.origin.x.local_up();
    p.client(r#"{"jsonrpc":"2.0","id":12345678901234567890,"method":"echo","params":[]}"#);
    p.client(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":[]}"#);
    assert_eq!(p.origin.take_local().len(), 2);
    // A JavaScript server keeps ids as doubles and answers with the
    // rounding of the first.
    p.upstream(r#"{"jsonrpc":"2.0","id":12345678901234567000,"result":1}"#);
    let got = p.edge.take_local();
    assert_eq!(
        got.len(),
        1,
        "answered at once, not at the timeout: {got:?}"
    );
    assert_eq!(got[0]["id"], json!(12345678901234567890u64));
    assert_eq!(got[0]["error"]["code"], -32004);
    let detail = got[0]["error"]["data"].to_string();
    assert!(detail.contains("another request's id"), "{detail}");
    assert!(detail.contains("12345678901234567000"), "{detail}");
    // The other request is untouched and still answered.
    p.upstream(r#"{"jsonrpc":"2.0","id":7,"result":2}"#);
    assert_eq!(p.edge.take_local()[0]["result"], 2);
    assert_eq!(p.edge.x.outstanding(), 0);
    assert_eq!(p.origin.counts.dropped.load(Relaxed), 0);

    // Two outstanding ids that round alike: which one was meant cannot be
    // told, so the reply is dropped as before (and both are answered
    // NotDelivered at the origin's deadline).
    p.client(r#"{"jsonrpc":"2.0","id":12345678901234567891,"method":"echo","params":[]}"#);
    p.client(r#"{"jsonrpc":"2.0","id":12345678901234567892,"method":"echo","params":[]}"#);
    assert_eq!(p.origin.take_local().len(), 2);
    p.upstream(r#"{"jsonrpc":"2.0","id":12345678901234567000,"result":1}"#);
    assert!(p.edge.take_local().is_empty());
    assert_eq!(p.origin.counts.dropped.load(Relaxed), 1);
}

/// A stateless origin holds what the edge sends beyond its room on one
/// association; what is held no longer than `stall_timeout` goes on when
/// room frees, what waits longer is answered NotDelivered naming the limit
/// (it never reached the upstream, so a retry is safe).
#[test]
fn a_served_request_held_for_room_waits_no_longer_than_the_stall_timeout() {
    let o = Room {
        max_incoming: 2,
        ..Room::default()
    };
    let mut p: Pair<u32> = Pair::new(Role::EdgePool, Role::OriginStateless, Room::default(), o);
    for t in 1..=3 {
        let now = p.now;
        p.edge.local(now, &req(t, "echo", json!([t])), Some(t));
        p.drive();
    }
    assert_eq!(p.origin.served.len(), 2, "the third is held");
    assert!(
        p.origin.served.iter().all(|s| s.wait == STALL),
        "served at once"
    );
    // Room frees before the bound: the held one is served, not refused,
    // and may wait for room at the upstream only what is left of the bound.
    p.advance(STALL / 4);
    let first = p.origin.served.remove(0);
    let id = parse(&first.text)["id"].clone();
    p.serve(
        first,
        &json!({"jsonrpc":"2.0","id":id,"result":0}).to_string(),
    );
    assert_eq!(p.origin.served.len(), 2, "the held one went on");
    assert_eq!(p.origin.served[1].wait, STALL - STALL / 4);
    assert_eq!(p.edge.answers.len(), 1);
    // A fourth finds no room and waits the whole bound.
    let now = p.now;
    p.edge.local(now, &req(4, "echo", json!([4])), Some(4));
    p.drive();
    p.advance(STALL - Duration::from_millis(1));
    assert_eq!(p.edge.answers.len(), 1, "not before the bound");
    assert_eq!(p.origin.x.poll_timeout(), Some(now + STALL));
    p.advance(Duration::from_millis(1));
    let (t, code, detail) = p.transport_failure();
    assert_eq!(t, 4);
    assert_eq!(code, TransportError::NOT_DELIVERED);
    assert!(detail.contains("--max-in-flight"), "{detail}");
    assert!(detail.contains("--stall-timeout"), "{detail}");
    assert_eq!(p.origin.x.octets().1, 2 * req(1, "echo", json!([1])).len());
    assert_eq!(p.origin.served.len(), 2, "the two at the upstream stay");
}

/// A served request carries its deadline, the exchange's: whoever serves
/// it stops where the exchange answers it, held for room or not.
#[test]
fn a_served_request_carries_the_deadline_the_exchange_answers_it_at() {
    let o = Room {
        max_incoming: 1,
        ..Room::default()
    };
    let mut p: Pair<u32> = Pair::new(Role::EdgePool, Role::OriginStateless, Room::default(), o);
    for t in 1..=2 {
        let now = p.now;
        p.edge.local(now, &req(t, "echo", json!([t])), Some(t));
        p.drive();
    }
    assert_eq!(p.origin.served.len(), 1, "the second is held");
    let first = p.origin.served.remove(0);
    assert_eq!(first.time_left, TIMEOUT);
    // Served a moment later, the held one's deadline is a whole request
    // timeout from then.
    let held_for = STALL / 4;
    p.advance(held_for);
    let id = parse(&first.text)["id"].clone();
    p.serve(
        first,
        &json!({"jsonrpc":"2.0","id":id,"result":0}).to_string(),
    );
    let second = p.origin.served.remove(0);
    assert_eq!(second.time_left, TIMEOUT);
    let served_at = p.now;
    assert_eq!(
        p.origin.x.poll_timeout(),
        Some(served_at + second.time_left)
    );
    // Unanswered, it is answered NotDelivered at that instant, not before.
    p.advance(second.time_left - Duration::from_millis(1));
    assert_eq!(p.origin.counts.not_delivered.load(Relaxed), 0);
    p.advance(Duration::from_millis(1));
    assert_eq!(p.origin.counts.not_delivered.load(Relaxed), 1);
}

/// A stream's party is not refused for room at the stall timeout (a
/// session upstream that answers slowly gets what waits for it, in order),
/// but what is still held at the request timeout, when its sender has been
/// answered, never reaches it.
#[test]
fn a_session_request_held_for_room_waits_up_to_the_request_timeout() {
    let o = Room {
        max_incoming: 1,
        ..Room::default()
    };
    let mut p: Pair<()> = Pair::new(Role::EdgeSession, Role::OriginSession, Room::default(), o);
    p.origin.x.local_up();
    p.client(&req(1, "a", json!([])));
    p.client(&req(2, "b", json!([])));
    assert_eq!(p.origin.take_local().len(), 1);
    p.advance(STALL * 2);
    assert!(p.edge.take_local().is_empty(), "nothing refused");
    p.upstream(r#"{"jsonrpc":"2.0","id":1,"result":0}"#);
    assert_eq!(p.origin.take_local()[0]["id"], 2, "the held one went on");
    assert_eq!(p.edge.take_local()[0]["id"], 1);
    // Held past the request timeout: its sender is answered Timeout, and
    // it is dropped at the origin, not delivered late.
    p.client(&req(3, "c", json!([])));
    p.advance(TIMEOUT);
    let got = p.edge.take_local();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|r| r["error"]["code"] == -32010), "{got:?}");
    assert_eq!(
        p.origin.counts.not_delivered.load(Relaxed),
        2,
        "2 timed out at the upstream, 3 held"
    );
    p.upstream(r#"{"jsonrpc":"2.0","id":2,"result":0}"#);
    assert!(
        p.origin.take_local().is_empty(),
        "3 is not delivered after all"
    );
    assert_eq!(p.origin.x.octets().1, 0);
}

/// What the upstream sends on a request's own stream (MCP progress) crosses
/// as that request's streamed reply (BRIDGE_STREAM_DATA) and reaches its
/// caller, in order, before the reply; what belongs to no waiting request
/// goes as a notification of its own, and a caller that takes none is
/// given none.
#[test]
fn what_belongs_to_a_request_reaches_its_caller_before_the_reply() {
    let mut p = pool_to_session();
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = got.clone();
    let interim = crate::relay::Interim(Arc::new(move |text: Bytes| {
        sink.lock().expect("lock").push(parse(&text));
    }));
    let now = p.now;
    let call = |text: String| {
        let text = Bytes::from(text);
        let kind = kind_of(&text);
        (text, kind)
    };
    let asked = call(req(7, "tools/call", json!({"name": "slow"})));
    (p.edge.x).handle_local_streamed(now, asked, Some(1), None, Some(interim));
    let other = call(req(8, "tools/call", json!({"name": "quick"})));
    (p.edge.x).handle_local_streamed(now, other, Some(2), None, None);
    p.drive();
    assert_eq!(p.origin.take_local().len(), 2);
    let progress = |n: u32| {
        json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":n}})
            .to_string()
    };
    let related = |p: &mut Pair<u32>, id: &[u8], text: String| {
        let text = Bytes::from(text);
        let kind = kind_of(&text);
        let now = p.now;
        p.origin.x.handle_local_related(
            now,
            text,
            kind,
            &Named::Id(Bytes::copy_from_slice(id), IdKind::Number),
        );
        p.drive();
    };
    related(&mut p, b"7", progress(1));
    related(&mut p, b"7", progress(2));
    // The other caller takes none: dropped at the edge, not delivered.
    related(&mut p, b"8", progress(9));
    p.upstream(r#"{"jsonrpc":"2.0","id":7,"result":"done"}"#);
    p.upstream(r#"{"jsonrpc":"2.0","id":8,"result":"done"}"#);
    // After the reply, nothing waits: a notification of its own (which a
    // pool drops: no session to give it to).
    related(&mut p, b"7", progress(3));
    let got = got.lock().expect("lock").clone();
    assert_eq!(
        got.iter()
            .map(|m| m["params"]["progress"].clone())
            .collect::<Vec<_>>(),
        [json!(1), json!(2)]
    );
    let answered: Vec<u32> = p.edge.answers.iter().map(|(t, _)| *t).collect();
    assert_eq!(answered, [1, 2]);
    assert_eq!(p.edge.counts.dropped.load(Relaxed), 2, "9 and 3");
}

/// A local party without a stream per request names the request in the
/// notification ([`Exchange::set_names`]): by the progress token the
/// request gave, or a log message by being sent for the one request that
/// asked for them. One both ask for names neither: a notification of its
/// own (dropped by a pool).
#[test]
fn a_notification_reaches_the_request_it_names() {
    let mut p = pool_to_session();
    p.origin.x.set_names(relations(|text| {
        let meta = &parse(text)["params"]["_meta"];
        Names {
            progress: meta["token"].as_str().map(|t| Bytes::from(t.to_owned())),
            logs: meta["logs"] == true,
            subscription: meta["listen"] == true,
            uncancellable: false,
        }
    }));
    let sinks: Vec<_> = (0..2)
        .map(|_| Arc::new(std::sync::Mutex::new(Vec::new())))
        .collect();
    let now = p.now;
    for (n, sink) in sinks.iter().enumerate() {
        let sink = sink.clone();
        let interim = crate::relay::Interim(Arc::new(move |text: Bytes| {
            sink.lock()
                .expect("lock")
                .push(parse(&text)["params"]["n"].clone());
        }));
        let meta = json!({"_meta": {"token": format!("t{n}"), "logs": true}});
        let text = Bytes::from(req(7 + n as u64, "tools/call", meta));
        let kind = kind_of(&text);
        (p.edge.x).handle_local_streamed(now, (text, kind), Some(n as u32), None, Some(interim));
    }
    p.drive();
    assert_eq!(p.origin.take_local().len(), 2);
    let notify = |p: &mut Pair<u32>, n: u32, named: Named| {
        let text = Bytes::from(
            json!({"jsonrpc":"2.0","method":"notifications/progress","params":{"n":n}}).to_string(),
        );
        let kind = kind_of(&text);
        let now = p.now;
        p.origin.x.handle_local_related(now, text, kind, &named);
        p.drive();
    };
    notify(&mut p, 1, Named::Progress(Bytes::from_static(b"t1")));
    notify(&mut p, 2, Named::Progress(Bytes::from_static(b"t0")));
    notify(&mut p, 3, Named::Progress(Bytes::from_static(b"t9")));
    notify(&mut p, 4, Named::Log);
    p.upstream(r#"{"jsonrpc":"2.0","id":8,"result":"done"}"#);
    notify(&mut p, 5, Named::Log);
    let got = |n: usize| sinks[n].lock().expect("lock").clone();
    assert_eq!(got(0), [json!(2), json!(5)]);
    assert_eq!(got(1), [json!(1)]);
    assert_eq!(p.edge.counts.dropped.load(Relaxed), 2, "3 and 4");
}

/// Relations with `names_of`; a request given up is told as
/// `{"cancelled": ID}`.
fn relations(names_of: fn(&[u8]) -> Names) -> Relations {
    Relations {
        names_of,
        given_up: |id| {
            Bytes::from(format!(
                r#"{{"cancelled":{}}}"#,
                String::from_utf8_lossy(id)
            ))
        },
    }
}

/// A subscription's notification names the request that opened it by its
/// id, and no other request with that id; a request whose deadline passes
/// unanswered is given up at the local party too (MCP's
/// notifications/cancelled), so that what the local party still sends for
/// it names no later request with its id.
#[test]
fn a_subscription_names_its_request_and_one_given_up_is_told() {
    let mut p = pool_to_session();
    p.origin.x.set_names(relations(|text| Names {
        subscription: parse(text)["method"] == "subscriptions/listen",
        ..Names::default()
    }));
    let got = Arc::new(std::sync::Mutex::new(Vec::new()));
    let now = p.now;
    for (n, method) in [(0u32, "subscriptions/listen"), (1, "tools/call")] {
        let got = got.clone();
        let interim = crate::relay::Interim(Arc::new(move |_: Bytes| {
            got.lock().expect("lock").push(n);
        }));
        let text = Bytes::from(req(7 + u64::from(n), method, json!({})));
        let kind = kind_of(&text);
        (p.edge.x).handle_local_streamed(now, (text, kind), Some(n), None, Some(interim));
    }
    p.drive();
    assert_eq!(p.origin.take_local().len(), 2);
    let update = |p: &mut Pair<u32>, id: &'static [u8]| {
        let text =
            Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/resources/updated"}"#);
        let kind = kind_of(&text);
        let now = p.now;
        let named = Named::Subscription(Bytes::from_static(id), IdKind::Number);
        p.origin.x.handle_local_related(now, text, kind, &named);
        p.drive();
    };
    update(&mut p, b"7");
    update(&mut p, b"8");
    assert_eq!(*got.lock().expect("lock"), [0], "8 opened no subscription");
    // Past the deadline: both given up, each told to the local party.
    p.advance(Duration::from_secs(31));
    let told: Vec<Value> = p.origin.take_local();
    assert_eq!(
        told,
        [json!({"cancelled": 7}), json!({"cancelled": 8})],
        "{told:?}"
    );
    // Its id stays taken a grace more, for an answer the local party wrote
    // before it read that: the next request with it waits.
    let now = p.now;
    p.edge.local(now, &req(7, "tools/call", json!({})), Some(2));
    p.drive();
    assert!(
        p.origin.take_local().is_empty(),
        "7 is still the given-up one's"
    );
    p.advance(CANCELLED_GRACE);
    assert_eq!(p.origin.take_local().len(), 1, "then it is delivered");
}

/// Two requests that give the same progress token (tokens are the
/// clients', and one association carries many clients' requests): their
/// progress names neither, so that no client gets another's.
#[test]
fn a_progress_token_two_requests_gave_names_neither() {
    let mut p = pool_to_session();
    p.origin.x.set_names(relations(|_| Names {
        progress: Some(Bytes::from_static(b"1")),
        ..Names::default()
    }));
    let got = Arc::new(std::sync::Mutex::new(0));
    let now = p.now;
    for n in 0..2 {
        let got = got.clone();
        let interim = crate::relay::Interim(Arc::new(move |_: Bytes| {
            *got.lock().expect("lock") += 1;
        }));
        let text = Bytes::from(req(7 + n, "tools/call", json!({})));
        let kind = kind_of(&text);
        (p.edge.x).handle_local_streamed(now, (text, kind), Some(n as u32), None, Some(interim));
    }
    p.drive();
    let text = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#);
    let kind = kind_of(&text);
    let named = Named::Progress(Bytes::from_static(b"1"));
    p.origin.x.handle_local_related(now, text, kind, &named);
    p.drive();
    assert_eq!(*got.lock().expect("lock"), 0);
    assert_eq!(p.edge.counts.dropped.load(Relaxed), 1);
}

/// On the wire, such a message is a BRIDGE_STREAM_DATA frame echoing the
/// request's correlation id; a notification of its own is a BRIDGE_NOTIFY
/// with none.
#[test]
fn a_related_notification_is_a_stream_data_frame() {
    let text = Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/progress"}"#);
    let kind = kind_of(&text);
    for (corr, frame) in [
        (&b"7"[..], crate::bridge::BRIDGE_STREAM_DATA),
        (b"", crate::bridge::BRIDGE_NOTIFY),
    ] {
        let msg = ToPeer::Message {
            text: text.clone(),
            kind: kind.clone(),
            corr: corr.into(),
            label: None,
            attached: None,
        };
        let (ft, payload) = encode(&msg);
        assert_eq!(ft, frame);
        let Received::Message(crate::jsonrpc::carriage::Inbound::JsonRpc {
            correlation_id, ..
        }) = receive(ft, &payload, PROTOCOL, &Limits::default())
        else {
            panic!("received");
        };
        assert_eq!(correlation_id, corr);
        // The other frame type for the same envelope is refused.
        let other = if corr.is_empty() {
            crate::bridge::BRIDGE_STREAM_DATA
        } else {
            crate::bridge::BRIDGE_NOTIFY
        };
        assert!(matches!(
            receive(other, &payload, PROTOCOL, &Limits::default()),
            Received::Malformed { .. }
        ));
    }
}

/// A caller that stopped waiting gives its request up: it is forgotten at
/// the edge (its room freed), its id returned for the peer to be told, and
/// its late reply dropped; the other callers are not touched.
#[test]
fn a_caller_that_leaves_gives_its_request_up() {
    let mut p = pool_pair();
    let now = p.now;
    p.edge.local(now, &req(1, "slow", json!([])), Some(100));
    p.edge.local(now, &req(2, "slow", json!([])), Some(200));
    p.drive();
    let served = std::mem::take(&mut p.origin.served);
    assert_eq!(served.len(), 2);
    let crossed = p.edge.x.abandon_where(now, |t| *t == 100);
    assert_eq!(crossed.len(), 1);
    assert_eq!(crossed[0].0, Bytes::from_static(b"1"));
    assert_eq!(p.edge.counts.in_flight.load(Relaxed), 1);
    for request in served {
        let r = parse(&request.text);
        let reply = json!({"jsonrpc":"2.0","id":r["id"],"result":"late"}).to_string();
        p.serve(request, &reply);
    }
    let answered: Vec<u32> = p.edge.answers.iter().map(|(t, _)| *t).collect();
    assert_eq!(answered, [200]);
    assert_eq!(p.edge.counts.dropped.load(Relaxed), 1, "the late reply");
}

/// The edge's cancellation of a request that crossed (its client left)
/// goes beside MCP's `notifications/cancelled` with the request's
/// correlation id: the origin delivers it with that request's own id while
/// it waits there, and drops it once the request is answered, so that it
/// never ends another request with the same id.
#[test]
fn a_cancellation_names_its_request_by_correlation() {
    let mut p = pool_to_session();
    let now = p.now;
    p.edge
        .local(now, &req(1, "tools/call", json!({})), Some(100));
    p.drive();
    assert_eq!(p.origin.take_local().len(), 1);
    let crossed = p.edge.x.abandon_where(now, |t| *t == 100);
    let (id, corr) = crossed.into_iter().next().expect("it crossed");
    let cancel = |p: &mut Pair<u32>, corr: &crate::relay::Corr| {
        let text = Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{}}}}}"#,
            String::from_utf8_lossy(&id)
        ));
        let kind = kind_of(&text);
        let attached = Some(Attached::Cancel(Bytes::copy_from_slice(corr)));
        let now = p.now;
        p.edge.x.handle_local_one(now, text, kind, None, attached);
        p.drive();
    };
    cancel(&mut p, &corr);
    assert_eq!(p.origin.take_local().len(), 1);
    assert_eq!(
        p.origin.beside,
        [Attached::Cancel(Bytes::from_static(b"1"))]
    );
    // Answered there: a cancellation of it is for nothing, and dropped.
    p.upstream(r#"{"jsonrpc":"2.0","id":1,"result":"done"}"#);
    let dropped = p.origin.counts.dropped.load(Relaxed);
    cancel(&mut p, &corr);
    assert!(p.origin.take_local().is_empty());
    assert_eq!(p.origin.counts.dropped.load(Relaxed), dropped + 1);
}

/// A subscription cancelled at a local party that names its requests (an
/// MCP server over stdio) has no answer to wait for: it is forgotten
/// CANCELLED_GRACE after (time for an answer written before the party read
/// the cancellation), and the next request with its id, held back
/// meanwhile, is delivered then (it waited until the request timeout: the
/// Python SDK's next subscriptions/listen, whose id is always "listen-1",
/// timed out through a pair).
#[test]
fn a_cancelled_request_gives_its_id_up_after_a_grace() {
    let mut p = pool_to_session();
    p.origin.x.set_names(relations(|_| Names {
        subscription: true,
        ..Names::default()
    }));
    let now = p.now;
    p.edge
        .local(now, &req(1, "subscriptions/listen", json!({})), Some(100));
    p.edge
        .local(now, &req(1, "subscriptions/listen", json!({})), Some(101));
    p.drive();
    assert_eq!(
        p.origin.take_local().len(),
        1,
        "the second waits for the id"
    );
    let crossed = p.edge.x.abandon_where(now, |t| *t == 100);
    let (_, corr) = crossed.into_iter().next().expect("it crossed");
    let text = Bytes::from_static(
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
    );
    let kind = kind_of(&text);
    let attached = Some(Attached::Cancel(Bytes::copy_from_slice(&corr)));
    p.edge.x.handle_local_one(now, text, kind, None, attached);
    p.drive();
    assert_eq!(p.origin.take_local().len(), 1, "the cancellation");
    p.advance(CANCELLED_GRACE / 2);
    assert!(p.origin.take_local().is_empty(), "still its id's");
    p.advance(CANCELLED_GRACE);
    let delivered = p.origin.take_local();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered[0]["method"], "subscriptions/listen");
}

/// A lasting request (a subscription) outlives the request timeout, and at
/// its lifetime's end the origin ends it: its caller gets the end as a
/// reply, not a failure, and the local party that names its requests is
/// told it was given up.
#[test]
fn a_lasting_request_outlives_the_request_timeout_and_ends_as_ended() {
    let mut p = pool_to_session();
    p.origin.x.set_names(relations(|_| Names::default()));
    let now = p.now;
    p.edge.local(now, &req(7, "watch", json!({})), Some(1));
    p.edge.local(now, &req(8, "call", json!({})), Some(2));
    p.drive();
    assert_eq!(p.origin.take_local().len(), 2);
    p.advance(TIMEOUT + Duration::from_secs(1));
    let (t, r) = p.edge.answers.pop().expect("the call timed out");
    assert!(matches!((t, r), (2, Reply::Failed(Failure::Timeout))));
    p.origin.take_local();
    assert!(p.edge.answers.is_empty(), "the watch goes on");
    p.advance(LIFETIME - TIMEOUT);
    let (t, r) = p.edge.answers.pop().expect("ended");
    let Reply::Message { text, is_error, .. } = r else {
        panic!("{r:?}");
    };
    assert_eq!((t, is_error), (1, false));
    assert_eq!(
        parse(&text),
        json!({"jsonrpc":"2.0","id":7,"result":"ended"})
    );
    assert_eq!(p.origin.take_local(), [json!({"cancelled": 7})]);
}

/// A served local party (an HTTP upstream) is let go the same way: the
/// origin answers the end, and its serving finds the request gone.
#[test]
fn a_served_lasting_request_ends_at_its_lifetime() {
    let mut p = pool_pair();
    let now = p.now;
    p.edge.local(now, &req("w", "watch", json!({})), Some(1));
    p.drive();
    let served = p.origin.served.pop().expect("served");
    assert_eq!(served.time_left, LIFETIME);
    p.advance(LIFETIME);
    let (_, r) = p.edge.answers.pop().expect("ended");
    let Reply::Message { text, .. } = r else {
        panic!("{r:?}");
    };
    assert_eq!(parse(&text)["result"], "ended");
    // The upstream's answer after it finds nothing to answer.
    p.serve(served, r#"{"jsonrpc":"2.0","id":"w","result":{}}"#);
    assert!(p.edge.answers.is_empty());
}

/// An edge whose origin never ends a lasting request ends it itself,
/// [`LASTING_MARGIN`] after its lifetime, alike, and gives it up at the
/// origin; a method written with escapes is the same method.
#[test]
fn an_edge_ends_a_lasting_request_its_origin_did_not() {
    let mut edge: Side<u32> = Side::new(
        Role::EdgePool,
        Room::default(),
        Arc::new(Shared::unlimited()),
    );
    let now = Instant::now();
    edge.local(now, &req(3, "watch", json!({})), Some(9));
    let escaped = r#"{"jsonrpc":"2.0","id":4,"method":"watch"}"#;
    edge.local(now, escaped, Some(10));
    assert_eq!(edge.actions().len(), 2, "sent");
    edge.x.handle_timeout(now + LIFETIME);
    edge.actions();
    assert!(edge.answers.is_empty());
    assert_eq!(edge.x.poll_timeout(), Some(now + LIFETIME + LASTING_MARGIN));
    edge.x.handle_timeout(now + LIFETIME + LASTING_MARGIN);
    let sent = edge.actions();
    let given_up: Vec<String> = (sent.iter())
        .map(|(_, p)| String::from_utf8_lossy(p).into_owned())
        .filter(|p| p.contains(r#""method":"unwatch""#))
        .collect();
    assert_eq!(given_up.len(), 2, "{sent:?}");
    let mut ended: Vec<(u32, Value)> = (edge.answers.drain(..))
        .map(|(t, r)| match r {
            Reply::Message { text, .. } => (t, parse(&text)),
            other => panic!("{other:?}"),
        })
        .collect();
    ended.sort_by_key(|(t, _)| *t);
    assert_eq!(
        ended,
        [
            (9, json!({"jsonrpc":"2.0","id":3,"result":"ended"})),
            (10, json!({"jsonrpc":"2.0","id":4,"result":"ended"}))
        ]
    );
}
