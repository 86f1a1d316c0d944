//! A mock JSON-RPC upstream for tests, demos and load runs: HTTP, WebSocket,
//! newline-delimited TCP, or stdio (as a child process).
//!
//! Methods:
//! - `echo` → `result` = the params;
//! - `fail` → error -32042 with the params as `data`;
//! - `sleep` `[ms]` → waits, then echoes;
//! - `notify` → (sessions) a `mock/notified` notification first, then echoes;
//! - `ask` → (sessions) a server-originated request `mock/question` to the
//!   client; answers with `{"answer": <the client's result>}`;
//! - `subscribe` → (sessions) result `"0x1"`, then three `eth_subscription`
//!   notifications;
//! - `progress` → (sessions) as an MCP server over stdio names what belongs
//!   to a request (2026-07-28): two `notifications/progress` with the
//!   request's `_meta.progressToken`, 30 ms apart, and a
//!   `notifications/message` when its `_meta` asks for a log level; then
//!   result `"done"`;
//! - `subscriptions/listen` → (sessions) as MCP's: its
//!   acknowledgment and one `notifications/resources/updated`, each naming
//!   the request's id as `_meta`'s subscription id; then result
//!   `{"resultType":"complete"}`, or with params `{"open":true}` no result:
//!   it stays open until a `notifications/cancelled` names it (60 s at
//!   most), first sending `"flood"` more updates of `"pad"` octets each;
//! - `mock/cancelled` → the ids of the requests `notifications/cancelled`
//!   has named so far, in order;
//! - `server/discover` → as an MCP server of both eras answers it
//!   (`supportedVersions` 2026-07-28 and 2025-11-25); with
//!   `--mcp-sessions-only`, -32601 Method not found, as a server of the
//!   session era;
//! - `exit` → the process exits at once with status 3, no reply (a crash);
//! - `nosuch` → -32601 Method not found;
//! - any other method → `result` = the params, so any API's method names
//!   (`eth_call`, `tools/call`, ...) can be replayed against the mock.
//!
//! Notifications get no reply; batches get an array. [`MockOptions`] adds
//! latency, injected errors, padding, exact-count faults and periodic
//! server-pushed notifications.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use npamp_gateway::assoc::SchemeAddr;
use npamp_gateway::framing::{Framing, MessageReader, write_message};
use npamp_gateway::sse;

/// A byte stream: TCP, or TLS over TCP.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// What the mock does with one message, given a way to push messages to
/// the client (sessions only).
struct Peer {
    behavior: Arc<Behavior>,
    push: Option<mpsc::Sender<Bytes>>,
    /// Server-originated requests awaiting the client's answer.
    asked: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
    next: Arc<AtomicU64>,
    /// The request ids `notifications/cancelled` named.
    cancelled: Arc<Mutex<Vec<Value>>>,
    /// Subscriptions held open, by id, until cancelled.
    open: Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>,
}

impl Peer {
    fn new(behavior: Arc<Behavior>, push: Option<mpsc::Sender<Bytes>>) -> Self {
        Self {
            behavior,
            push,
            asked: Arc::default(),
            next: Arc::default(),
            cancelled: Arc::default(),
            open: Arc::default(),
        }
    }

    async fn push(&self, v: Value) {
        if let Some(p) = &self.push {
            let _ = p.send(Bytes::from(v.to_string())).await;
        }
    }

    /// The reply to a text, with the configured faults applied.
    async fn reply(&self, text: &[u8]) -> Replies {
        let Some(reply) = self.handle(text).await else {
            return Replies::None;
        };
        let (fault, tick) = self.behavior.next_fault();
        let replies = match fault {
            Fault::None => Replies::Some(reply, 1),
            Fault::Drop => Replies::Dropped,
            Fault::Duplicate => Replies::Some(reply, 2),
            Fault::WrongId => Replies::Some(wrong_id(&reply), 1),
        };
        if let Some(n) = tick {
            self.push(json!({"jsonrpc":"2.0","method":"mock/tick","params":{"replies":n}}))
                .await;
        }
        replies
    }

    /// The reply to a text (`None`: nothing to answer).
    async fn handle(&self, text: &[u8]) -> Option<Bytes> {
        let v: Value = match serde_json::from_slice(text) {
            Ok(v) => v,
            Err(e) => {
                return Some(Bytes::from(
                    json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":e.to_string()}})
                        .to_string(),
                ));
            }
        };
        match v {
            Value::Array(items) => {
                let replies: Vec<Value> =
                    futures_util::future::join_all(items.into_iter().map(|item| self.one(item)))
                        .await
                        .into_iter()
                        .flatten()
                        .collect();
                (!replies.is_empty()).then(|| Bytes::from(Value::Array(replies).to_string()))
            }
            v => self.one(v).await.map(|r| Bytes::from(r.to_string())),
        }
    }

    async fn one(&self, v: Value) -> Option<Value> {
        let id = v.get("id").cloned();
        let Some(method) = v.get("method").and_then(Value::as_str) else {
            // A reply from the client to one of our questions.
            if let Some(key) = id.as_ref().map(Value::to_string)
                && let Some(tx) = self.asked.lock().ok()?.remove(&key)
            {
                let _ = tx.send(v.get("result").cloned().unwrap_or(Value::Null));
            }
            return None;
        };
        let params = v.get("params").cloned().unwrap_or(Value::Null);
        if method == "notifications/cancelled" {
            let named = params.get("requestId").cloned().unwrap_or(Value::Null);
            if let Some(tx) = self.open.lock().ok()?.remove(&named.to_string()) {
                let _ = tx.send(());
            }
            self.cancelled.lock().ok()?.push(named);
            return None;
        }
        let id = id?;
        let ok = |result: Value| Some(json!({"jsonrpc":"2.0","id":id,"result":result}));
        match method {
            "echo" => ok(params),
            "fail" => Some(
                json!({"jsonrpc":"2.0","id":id,"error":{"code":-32042,"message":"requested failure","data":params}}),
            ),
            "sleep" => {
                let ms = params
                    .get(0)
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .min(60_000);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ok(params)
            }
            "notify" => {
                self.push(json!({"jsonrpc":"2.0","method":"mock/notified","params":params}))
                    .await;
                ok(params)
            }
            "ask" => {
                let n = self.next.fetch_add(1, Relaxed);
                let qid = json!(format!("q-{n}"));
                let (tx, rx) = oneshot::channel();
                self.asked.lock().ok()?.insert(qid.to_string(), tx);
                self.push(
                    json!({"jsonrpc":"2.0","id":qid,"method":"mock/question","params":params}),
                )
                .await;
                match tokio::time::timeout(Duration::from_secs(10), rx).await {
                    Ok(Ok(answer)) => ok(json!({ "answer": answer })),
                    _ => Some(
                        json!({"jsonrpc":"2.0","id":id,"error":{"code":-32000,"message":"the client did not answer"}}),
                    ),
                }
            }
            "subscribe" => {
                if let Some(p) = self.push.clone() {
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        for i in 0..3 {
                            let n = json!({"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":i}});
                            let _ = p.send(Bytes::from(n.to_string())).await;
                        }
                    });
                }
                ok(json!("0x1"))
            }
            "progress" => {
                let meta = &params["_meta"];
                if let Some(token) = meta.get("progressToken") {
                    for n in 1..=2 {
                        self.push(json!({"jsonrpc":"2.0","method":"notifications/progress",
                            "params":{"progressToken":token,"progress":n}}))
                            .await;
                        tokio::time::sleep(Duration::from_millis(30)).await;
                    }
                }
                if meta.get("io.modelcontextprotocol/logLevel").is_some() {
                    self.push(json!({"jsonrpc":"2.0","method":"notifications/message",
                        "params":{"level":"info","data":"working"}}))
                        .await;
                }
                ok(json!("done"))
            }
            "subscriptions/listen" => {
                let meta = json!({ "io.modelcontextprotocol/subscriptionId": id });
                self.push(
                    json!({"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged",
                    "params":{"_meta":meta,"notifications":{"toolsListChanged":true}}}),
                )
                .await;
                tokio::time::sleep(Duration::from_millis(30)).await;
                self.push(
                    json!({"jsonrpc":"2.0","method":"notifications/resources/updated",
                    "params":{"_meta":meta,"uri":"mock://a"}}),
                )
                .await;
                if params["open"] == true {
                    let (tx, rx) = oneshot::channel();
                    self.open.lock().ok()?.insert(id.to_string(), tx);
                    let pad = "x".repeat(params["pad"].as_u64().unwrap_or(0).min(1 << 20) as usize);
                    for n in 0..params["flood"].as_u64().unwrap_or(0).min(100_000) {
                        if !self.open.lock().ok()?.contains_key(&id.to_string()) {
                            break;
                        }
                        self.push(
                            json!({"jsonrpc":"2.0","method":"notifications/resources/updated",
                            "params":{"_meta":meta,"uri":"mock://a","n":n,"pad":pad}}),
                        )
                        .await;
                    }
                    // Cancelled: no answer (MCP's cancellation).
                    let _ = tokio::time::timeout(Duration::from_secs(60), rx).await;
                    return None;
                }
                ok(json!({"resultType":"complete"}))
            }
            "mock/cancelled" => ok(Value::Array(self.cancelled.lock().ok()?.clone())),
            "server/discover" if !self.behavior.mcp_sessions_only => ok(json!({
                "resultType": "complete",
                "supportedVersions": ["2026-07-28", "2025-11-25"],
                "capabilities": {"tools": {}},
            })),
            "exit" => std::process::exit(3),
            "nosuch" | "server/discover" => Some(
                json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}}),
            ),
            _ => {
                let b = &self.behavior;
                if let Some(d) = b.latency.sample(b.next_random()) {
                    tokio::time::sleep(d).await;
                }
                if b.error_share > 0.0 && b.next_random() < b.error_share {
                    return Some(
                        json!({"jsonrpc":"2.0","id":id,"error":{"code":-32050,"message":"injected error","data":params}}),
                    );
                }
                if b.result_size > 0 {
                    return ok(json!({"params": params, "pad": "x".repeat(b.result_size)}));
                }
                ok(params)
            }
        }
    }
}

/// Accepts TCP connections, with TLS on top when `tls` is given.
async fn accept(
    listener: &TcpListener,
    tls: &Option<tokio_rustls::TlsAcceptor>,
) -> Option<Box<dyn Io>> {
    loop {
        let (tcp, _) = listener.accept().await.ok()?;
        let _ = tcp.set_nodelay(true);
        match tls {
            None => return Some(Box::new(tcp)),
            Some(acceptor) => match acceptor.accept(tcp).await {
                Ok(s) => return Some(Box::new(s)),
                Err(_) => continue,
            },
        }
    }
}

/// What the mock does besides answering: latency, injected errors, result
/// size and faults. One per process (or per [`spawn`]).
#[derive(Debug, Default)]
pub struct Behavior {
    pub latency: Latency,
    /// Share of requests (other methods than the special ones) answered
    /// with error -32050.
    pub error_share: f64,
    /// Pad each result with this many octets.
    pub result_size: usize,
    pub faults: Faults,
    /// Sessions: a `mock/tick` notification after every this many replies.
    pub push_every: u64,
    /// HTTP: each reply as one `text/event-stream` event, notifications
    /// answered 202 (MCP's Streamable HTTP).
    pub event_stream: bool,
    /// MCP: a server of the session era only: `server/discover` is an
    /// unknown method (-32601).
    pub mcp_sessions_only: bool,
    replies: AtomicU64,
    random: AtomicU64,
}

/// The mock's flags (`npamp-gateway mock-upstream`, `npamp-loadgen upstream`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct MockOptions {
    /// Latency before answering plain methods: fixed:MS, uniform:MIN:MAX or
    /// exp:MEAN (milliseconds).
    #[arg(long, value_name = "DIST")]
    pub latency: Option<Latency>,
    /// Share of plain requests answered with error -32050 (0 to 1).
    #[arg(long, value_name = "SHARE", default_value_t = 0.0)]
    pub error_share: f64,
    /// Pad each plain result with this many octets.
    #[arg(long, value_name = "OCTETS", default_value_t = 0)]
    pub result_size: usize,
    /// Faults in percent of replies, exact by count: drop=P,dup=P,wrong-id=P.
    #[arg(long, value_name = "LIST")]
    pub faults: Option<Faults>,
    /// Sessions (WebSocket, TCP, stdio): push a `mock/tick` notification
    /// after every N replies (0: never).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub push_every: u64,
    /// HTTP: answer as an MCP server over Streamable HTTP does, each reply
    /// one `text/event-stream` event and notifications 202 Accepted.
    #[arg(long)]
    pub event_stream: bool,
    /// MCP: answer as a server of the session era only (2025), which knows
    /// no `server/discover` (-32601).
    #[arg(long)]
    pub mcp_sessions_only: bool,
}

impl MockOptions {
    pub fn behavior(&self) -> Arc<Behavior> {
        let mut b = Behavior::new(
            self.latency.unwrap_or_default(),
            self.error_share.clamp(0.0, 1.0),
            self.result_size,
            self.faults.unwrap_or_default(),
        );
        b.push_every = self.push_every;
        b.event_stream = self.event_stream;
        b.mcp_sessions_only = self.mcp_sessions_only;
        Arc::new(b)
    }
}

/// Faults, in percent of replies, decided by a counter so their number is
/// exact: of every 100 replies, the first `drop` are never sent, the next
/// `duplicate` are sent twice, the next `wrong_id` carry another id. (HTTP
/// cannot answer twice: duplicates apply to WebSocket, TCP and stdio.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    pub drop: u64,
    pub duplicate: u64,
    pub wrong_id: u64,
}

impl std::str::FromStr for Faults {
    type Err = String;

    /// `drop=1,dup=1,wrong-id=1` (percent).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut f = Faults::default();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected NAME=PERCENT"))?;
            let v: u64 = v
                .trim()
                .parse()
                .map_err(|_| format!("{part:?}: not a whole percent"))?;
            match k.trim() {
                "drop" => f.drop = v,
                "dup" | "duplicate" => f.duplicate = v,
                "wrong-id" => f.wrong_id = v,
                other => {
                    return Err(format!(
                        "unknown fault {other:?}: expected drop, dup, wrong-id"
                    ));
                }
            }
        }
        if f.drop + f.duplicate + f.wrong_id > 100 {
            return Err("faults add up to more than 100 %".into());
        }
        Ok(f)
    }
}

impl Faults {
    /// The fault of the `n`-th reply (0-based).
    pub fn of(&self, n: u64) -> Fault {
        let k = n % 100;
        if k < self.drop {
            Fault::Drop
        } else if k < self.drop + self.duplicate {
            Fault::Duplicate
        } else if k < self.drop + self.duplicate + self.wrong_id {
            Fault::WrongId
        } else {
            Fault::None
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    Drop,
    Duplicate,
    WrongId,
}

/// A reply after faults: nothing to answer, dropped, or sent `n` times.
enum Replies {
    None,
    Dropped,
    Some(Bytes, usize),
}

/// The upstream's latency distribution, before it answers a plain method
/// (any method it has no special meaning for; `echo` answers at once).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Latency {
    #[default]
    None,
    Fixed(Duration),
    Uniform(Duration, Duration),
    /// Exponential with this mean.
    Exp(Duration),
}

impl std::str::FromStr for Latency {
    type Err = String;

    /// `fixed:MS`, `uniform:MIN:MAX`, `exp:MEAN` (milliseconds).
    fn from_str(s: &str) -> Result<Self, String> {
        let ms = |v: &str| -> Result<Duration, String> {
            let x: f64 = v
                .parse()
                .map_err(|_| format!("{v:?} is not a number of ms"))?;
            if !(0.0..=60_000.0).contains(&x) {
                return Err(format!("{x} ms is out of range"));
            }
            Ok(Duration::from_secs_f64(x / 1e3))
        };
        let parts: Vec<&str> = s.split(':').collect();
        match parts.as_slice() {
            ["fixed", v] => Ok(Self::Fixed(ms(v)?)),
            ["uniform", a, b] => Ok(Self::Uniform(ms(a)?, ms(b)?)),
            ["exp", v] => Ok(Self::Exp(ms(v)?)),
            _ => Err(format!(
                "{s:?}: expected fixed:MS, uniform:MIN:MAX or exp:MEAN"
            )),
        }
    }
}

impl Latency {
    /// A delay, given a uniform random number in [0, 1).
    fn sample(&self, u: f64) -> Option<Duration> {
        match *self {
            Self::None => None,
            Self::Fixed(d) => Some(d),
            Self::Uniform(a, b) => Some(a + (b.saturating_sub(a)).mul_f64(u)),
            Self::Exp(mean) => Some(mean.mul_f64(-(1.0 - u).ln()).min(Duration::from_secs(60))),
        }
    }
}

impl Behavior {
    pub fn new(latency: Latency, error_share: f64, result_size: usize, faults: Faults) -> Self {
        Self {
            latency,
            error_share,
            result_size,
            faults,
            push_every: 0,
            event_stream: false,
            mcp_sessions_only: false,
            replies: AtomicU64::new(0),
            random: AtomicU64::new(0x9E37_79B9_7F4A_7C15),
        }
    }

    /// The fault of the next reply, and whether a tick is due after it.
    fn next_fault(&self) -> (Fault, Option<u64>) {
        let n = self.replies.fetch_add(1, Relaxed);
        let tick =
            (self.push_every > 0 && (n + 1).is_multiple_of(self.push_every)).then_some(n + 1);
        (self.faults.of(n), tick)
    }

    /// Uniform in [0, 1) (splitmix64 over a shared counter; test data only).
    fn next_random(&self) -> f64 {
        let mut z = self.random.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The same reply with an id no request has (objects and batch elements).
fn wrong_id(reply: &[u8]) -> Bytes {
    let shift = |v: &mut Value| {
        if let Some(n) = v.get("id").and_then(Value::as_u64) {
            v["id"] = json!(n + (1 << 52));
        } else if v.get("id").is_some() {
            v["id"] = json!("wrong-id");
        }
    };
    match serde_json::from_slice::<Value>(reply) {
        Ok(Value::Array(mut items)) => {
            items.iter_mut().for_each(shift);
            Bytes::from(Value::Array(items).to_string())
        }
        Ok(mut v) => {
            shift(&mut v);
            Bytes::from(v.to_string())
        }
        Err(_) => Bytes::copy_from_slice(reply),
    }
}

/// Serves HTTP(S): each POST body is one message or batch.
pub async fn serve_http(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    behavior: Arc<Behavior>,
) {
    let peer = Arc::new(Peer::new(behavior, None));
    while let Some(tcp) = accept(&listener, &tls).await {
        let peer = peer.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let peer = peer.clone();
                    async move {
                        let events = peer.behavior.event_stream;
                        // A JSON-RPC endpoint takes POST alone (an MCP client's
                        // GET for a stream of its own gets 405, as MCP allows).
                        if req.method() != hyper::Method::POST {
                            let mut r = hyper::Response::new(Full::new(Bytes::new()));
                            *r.status_mut() = hyper::StatusCode::METHOD_NOT_ALLOWED;
                            return Ok::<_, Infallible>(r);
                        }
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let mut resp = match body {
                            Ok(body) => match peer.reply(&body).await {
                                Replies::None => {
                                    let mut r = hyper::Response::new(Full::new(Bytes::new()));
                                    *r.status_mut() = if events {
                                        hyper::StatusCode::ACCEPTED
                                    } else {
                                        hyper::StatusCode::NO_CONTENT
                                    };
                                    r
                                }
                                // A dropped reply never comes; the client times out.
                                Replies::Dropped => std::future::pending().await,
                                // HTTP cannot answer twice: the first copy goes.
                                Replies::Some(reply, _) if events => {
                                    let mut r = hyper::Response::new(Full::new(sse::event(&reply)));
                                    r.headers_mut().insert(
                                        hyper::header::CONTENT_TYPE,
                                        hyper::header::HeaderValue::from_static(
                                            "text/event-stream",
                                        ),
                                    );
                                    return Ok::<_, Infallible>(r);
                                }
                                Replies::Some(reply, _) => hyper::Response::new(Full::new(reply)),
                            },
                            Err(_) => {
                                let mut r = hyper::Response::new(Full::new(Bytes::new()));
                                *r.status_mut() = hyper::StatusCode::BAD_REQUEST;
                                r
                            }
                        };
                        resp.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(resp)
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                .await;
        });
    }
}

/// Serves one message stream: replies (and pushes) go to `out`.
async fn session(peer: Arc<Peer>, text: Bytes, out: mpsc::Sender<Bytes>) {
    // Each message is handled on its own task: a slow `sleep` or an `ask`
    // waiting for the client does not hold up the next message.
    tokio::spawn(async move {
        if let Replies::Some(reply, copies) = peer.reply(&text).await {
            for _ in 0..copies {
                let _ = out.send(reply.clone()).await;
            }
        }
    });
}

/// Serves WebSocket clients (over TLS when `tls` is given): one message
/// per text frame.
pub async fn serve_ws(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    behavior: Arc<Behavior>,
) {
    use tokio_tungstenite::tungstenite::Message;
    while let Some(tcp) = accept(&listener, &tls).await {
        let behavior = behavior.clone();
        tokio::spawn(async move {
            let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                return;
            };
            let (mut sink, mut stream) = ws.split();
            let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
            let writer = tokio::spawn(async move {
                while let Some(b) = rx.recv().await {
                    let Ok(t) = tokio_tungstenite::tungstenite::Utf8Bytes::try_from(b) else {
                        continue;
                    };
                    if sink.send(Message::Text(t)).await.is_err() {
                        return;
                    }
                }
            });
            let peer = Arc::new(Peer::new(behavior.clone(), Some(tx.clone())));
            while let Some(Ok(msg)) = stream.next().await {
                let text = match msg {
                    Message::Text(t) => Bytes::from(t),
                    Message::Binary(b) => b,
                    Message::Close(_) => break,
                    _ => continue,
                };
                session(peer.clone(), text, tx.clone()).await;
            }
            drop((tx, peer));
            let _ = writer.await;
        });
    }
}

/// Serves newline-delimited TCP clients.
pub async fn serve_tcp(listener: TcpListener, behavior: Arc<Behavior>) {
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        let behavior = behavior.clone();
        tokio::spawn(async move {
            let (r, w) = tcp.into_split();
            lines(r, w, behavior).await;
        });
    }
}

/// Serves one stream session on a reader and writer (stdio, TCP): one
/// message per line, or in LSP's framing when the client speaks it (found
/// from its first octets), answered in the same.
pub async fn lines<R, W>(r: R, mut w: W, behavior: Arc<Behavior>)
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut reader = MessageReader::new(r, Framing::Auto, Framing::Lines, 16 << 20);
    let framing = reader.decided();
    let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
    let writer = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if write_message(&mut w, framing.get(), &b).await.is_err() {
                return;
            }
            if rx.is_empty() && tokio::io::AsyncWriteExt::flush(&mut w).await.is_err() {
                return;
            }
        }
    });
    let peer = Arc::new(Peer::new(behavior, Some(tx.clone())));
    while let Ok(Some(line)) = reader.next().await {
        session(peer.clone(), line, tx.clone()).await;
    }
    drop((tx, peer));
    let _ = writer.await;
}

/// Where a mock listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MockAddr {
    Http(SocketAddr),
    Ws(SocketAddr),
    Tcp(SocketAddr),
    /// HTTP over TLS (needs a certificate).
    Https(SocketAddr),
    /// WebSocket over TLS (needs a certificate).
    Wss(SocketAddr),
}

impl std::str::FromStr for MockAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!(
                "bad address {s:?}: {why}: expected http://, https://, ws://, wss:// or tcp://HOST:PORT"
            )
        };
        let SchemeAddr { scheme, addr } = s.parse().map_err(bad)?;
        match scheme.as_str() {
            "http" => Ok(Self::Http(addr)),
            "ws" => Ok(Self::Ws(addr)),
            "tcp" => Ok(Self::Tcp(addr)),
            "https" => Ok(Self::Https(addr)),
            "wss" => Ok(Self::Wss(addr)),
            _ => Err(bad("unknown scheme")),
        }
    }
}

/// Binds a mock and serves it in the background; returns the bound address.
/// `tls` (a server config) is needed for `https://` and `wss://`.
pub async fn spawn(
    addr: MockAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    behavior: Arc<Behavior>,
) -> std::io::Result<MockAddr> {
    let (MockAddr::Http(a)
    | MockAddr::Ws(a)
    | MockAddr::Tcp(a)
    | MockAddr::Https(a)
    | MockAddr::Wss(a)) = addr;
    let acceptor = match (addr, tls) {
        (MockAddr::Https(_) | MockAddr::Wss(_), Some(tls)) => {
            Some(tokio_rustls::TlsAcceptor::from(tls))
        }
        (MockAddr::Https(_) | MockAddr::Wss(_), None) => {
            return Err(std::io::Error::other(format!(
                "{addr}: TLS needs --tls-cert and --tls-key"
            )));
        }
        _ => None,
    };
    let listener = TcpListener::bind(a).await?;
    let local = listener.local_addr()?;
    Ok(match addr {
        MockAddr::Http(_) => {
            tokio::spawn(serve_http(listener, None, behavior));
            MockAddr::Http(local)
        }
        MockAddr::Https(_) => {
            tokio::spawn(serve_http(listener, acceptor, behavior));
            MockAddr::Https(local)
        }
        MockAddr::Ws(_) => {
            tokio::spawn(serve_ws(listener, None, behavior));
            MockAddr::Ws(local)
        }
        MockAddr::Wss(_) => {
            tokio::spawn(serve_ws(listener, acceptor, behavior));
            MockAddr::Wss(local)
        }
        MockAddr::Tcp(_) => {
            tokio::spawn(serve_tcp(listener, behavior));
            MockAddr::Tcp(local)
        }
    })
}

impl std::fmt::Display for MockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MockAddr::Http(a) => write!(f, "http://{a}"),
            MockAddr::Ws(a) => write!(f, "ws://{a}"),
            MockAddr::Tcp(a) => write!(f, "tcp://{a}"),
            MockAddr::Https(a) => write!(f, "https://{a}"),
            MockAddr::Wss(a) => write!(f, "wss://{a}"),
        }
    }
}
