//! An MCP server over Streamable HTTP behind an origin (`--protocol mcp`,
//! `--upstream http://…`), reached by an MCP client through `connect`:
//! session ids, event-stream replies with the server's own messages before
//! them, server-to-client requests, the GET stream, an expired session, and
//! the DELETE when the client goes. The server is a small Streamable HTTP
//! implementation in this file; real processes over 127.0.0.1.

use crate::support;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use support::*;
use tokio::sync::{mpsc, oneshot};

type Body = BoxBody<Bytes, Infallible>;

const VERSION: &str = "2025-06-18";

/// The server's state, and what it saw.
#[derive(Default)]
struct Server {
    sessions: Mutex<HashMap<String, bool>>,
    next: Mutex<u32>,
    /// What happened, in order: "initialized s-1", "deleted s-1", "get s-1",
    /// "accept: …" for a POST without both media types.
    log: Mutex<Vec<String>>,
    /// Server-to-client requests waiting for the client's answer, by id.
    waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Each session's GET stream, ended with its session.
    get_streams: Mutex<HashMap<String, mpsc::Sender<Value>>>,
}

impl Server {
    fn note(&self, s: String) {
        self.log.lock().expect("log").push(s);
    }

    fn saw(&self, s: &str) -> bool {
        self.log.lock().expect("log").iter().any(|l| l == s)
    }
}

fn json_body(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", "application/json".parse().expect("value"));
    r
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::new()).boxed());
    *r.status_mut() = status;
    r
}

/// An event stream fed by the returned sender; it ends when the sender goes.
/// It starts as the TypeScript SDK's servers start theirs (MCP 2025-11-25,
/// for resumability): an event with an id and empty data, and a retry hint.
fn event_stream() -> (mpsc::Sender<Value>, Response<Body>) {
    let (tx, rx) = mpsc::channel::<Value>(16);
    let priming = futures_util::stream::once(async {
        Ok::<_, Infallible>(Frame::data(Bytes::from_static(
            b"id: 0\ndata:\n\nretry: 1000\n\n",
        )))
    });
    let messages = futures_util::stream::unfold(rx, |mut rx| async move {
        let v = rx.recv().await?;
        let event = format!("id: 1\nevent: message\ndata: {v}\n\n");
        Some((Ok::<_, Infallible>(Frame::data(Bytes::from(event))), rx))
    });
    let stream = futures_util::StreamExt::chain(priming, messages);
    let mut r = Response::new(StreamBody::new(stream).boxed());
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().expect("value"));
    (tx, r)
}

async fn handle(server: Arc<Server>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(auth) = header("authorization") {
        server.note(format!("{} auth: {auth}", req.method()));
    }
    let accept = header("accept").unwrap_or_default();
    let session = header("mcp-session-id");
    let version = header("mcp-protocol-version");
    let mirrored = (
        header("mcp-method"),
        header("mcp-name"),
        header("mcp-param-region"),
    );
    let known = session
        .as_ref()
        .is_some_and(|s| server.sessions.lock().expect("sessions").contains_key(s));
    match *req.method() {
        hyper::Method::GET => {
            if !known {
                return empty(StatusCode::NOT_FOUND);
            }
            let s = session.unwrap_or_default();
            server.note(format!("get {s}"));
            let (tx, resp) = event_stream();
            let note = json!({"jsonrpc":"2.0","method":"notifications/message",
                "params":{"level":"info","data":format!("from the GET stream of {s}")}});
            let _ = tx.try_send(note);
            // Held open until the session ends, as a server's GET stream is.
            server.get_streams.lock().expect("streams").insert(s, tx);
            return resp;
        }
        hyper::Method::DELETE => {
            if let Some(s) = &session
                && server
                    .sessions
                    .lock()
                    .expect("sessions")
                    .remove(s)
                    .is_some()
            {
                server.get_streams.lock().expect("streams").remove(s);
                server.note(format!("deleted {s}"));
                return empty(StatusCode::OK);
            }
            return empty(StatusCode::NOT_FOUND);
        }
        _ => {}
    }
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        server.note(format!("accept: {accept}"));
        return empty(StatusCode::NOT_ACCEPTABLE);
    }
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let msg: Value = serde_json::from_slice(&body).expect("JSON");
    let method = msg["method"].as_str().unwrap_or_default().to_owned();
    if msg["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].is_string() {
        return stateless(&msg, version.as_deref(), mirrored);
    }
    if method == "initialize" {
        let id = {
            let mut n = server.next.lock().expect("next");
            *n += 1;
            format!("s-{n}")
        };
        server
            .sessions
            .lock()
            .expect("sessions")
            .insert(id.clone(), false);
        let (tx, mut resp) = event_stream();
        resp.headers_mut()
            .insert("mcp-session-id", id.parse().expect("value"));
        let reply = json!({"jsonrpc":"2.0","id":msg["id"],"result":{
            "protocolVersion":VERSION,"capabilities":{"tools":{}},"serverInfo":{"name":"test"}}});
        tokio::spawn(async move { tx.send(reply).await });
        return resp;
    }
    let Some(session) = session else {
        let e = json!({"jsonrpc":"2.0","id":"server-error",
            "error":{"code":-32600,"message":"Bad Request: Missing session ID"}});
        // Some servers name a session on their errors too (one that is
        // not, or no longer, theirs): only initialize's names one.
        let mut resp = json_body(StatusCode::BAD_REQUEST, &e);
        resp.headers_mut()
            .insert("mcp-session-id", "from-an-error".parse().expect("value"));
        return resp;
    };
    if !known {
        return empty(StatusCode::NOT_FOUND);
    }
    if version.as_deref() != Some(VERSION) {
        let e = json!({"jsonrpc":"2.0","id":msg["id"],
            "error":{"code":-32600,"message":format!("MCP-Protocol-Version {version:?}")}});
        return json_body(StatusCode::BAD_REQUEST, &e);
    }
    if msg.get("method").is_none() {
        // The client's answer to one of this server's requests.
        let id = msg["id"].as_str().unwrap_or_default().to_owned();
        if let Some(tx) = server.waiting.lock().expect("waiting").remove(&id) {
            let _ = tx.send(msg["result"].clone());
        }
        return empty(StatusCode::ACCEPTED);
    }
    if msg.get("id").is_none() {
        if method == "notifications/initialized" {
            server
                .sessions
                .lock()
                .expect("sessions")
                .insert(session.clone(), true);
        }
        server.note(format!("{method} {session}"));
        return empty(StatusCode::ACCEPTED);
    }
    // As the MCP SDKs' servers do: nothing but initialize before the
    // client says it is initialized.
    if server.sessions.lock().expect("sessions").get(&session) != Some(&true) {
        let e = json!({"jsonrpc":"2.0","id":msg["id"],
            "error":{"code":-32602,"message":"Received request before initialization was complete"}});
        return json_body(StatusCode::OK, &e);
    }
    let id = msg["id"].clone();
    let result = move |r: Value| json!({"jsonrpc":"2.0","id":id,"result":r});
    match method.as_str() {
        "echo" => json_body(
            StatusCode::OK,
            &result(json!({"params":msg["params"],"session":session,"version":version})),
        ),
        "slow_tool" => {
            let (tx, resp) = event_stream();
            let token = msg["params"]["_meta"]["progressToken"].clone();
            let reply = result(json!({"content":[{"type":"text","text":"done"}]}));
            tokio::spawn(async move {
                let progress = json!({"jsonrpc":"2.0","method":"notifications/progress",
                    "params":{"progressToken":token,"progress":1,"total":2}});
                let _ = tx.send(progress).await;
                let _ = tx.send(reply).await;
            });
            resp
        }
        "ask" => {
            let (tx, resp) = event_stream();
            let (answer_tx, answer_rx) = oneshot::channel();
            server
                .waiting
                .lock()
                .expect("waiting")
                .insert("srv-1".into(), answer_tx);
            tokio::spawn(async move {
                let ask = json!({"jsonrpc":"2.0","id":"srv-1","method":"sampling/createMessage",
                    "params":{"messages":[]}});
                let _ = tx.send(ask).await;
                let answer = tokio::time::timeout(Duration::from_secs(10), answer_rx).await;
                let answer = answer.ok().and_then(Result::ok).unwrap_or(Value::Null);
                let _ = tx.send(result(json!({"answer":answer}))).await;
            });
            resp
        }
        "no_reply" => {
            // An event stream that ends with no event (no id to resume
            // from: `a_stream_the_server_closes_before_the_reply_is_resumed`).
            let mut r = Response::new(Full::new(Bytes::new()).boxed());
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().expect("value"));
            r
        }
        "expire" => {
            server.sessions.lock().expect("sessions").remove(&session);
            server.get_streams.lock().expect("streams").remove(&session);
            json_body(StatusCode::OK, &result(json!(true)))
        }
        _ => json_body(
            StatusCode::OK,
            &json!({"jsonrpc":"2.0","id":msg["id"],"error":{"code":-32601,"message":"no such method"}}),
        ),
    }
}

/// A pair of MCP gateways (`--protocol mcp` both sides) in front of
/// `upstream`, with an HTTP ingress.
async fn mcp_pair(upstream: Up) -> Pair {
    mcp_pair_with(upstream, &[], &[]).await
}

/// [`mcp_pair`], with `origin_extra` and `edge_extra` after `--protocol
/// mcp`.
async fn mcp_pair_with(upstream: Up, origin_extra: &[&str], edge_extra: &[&str]) -> Pair {
    let origin = [&["--protocol", "mcp"][..], origin_extra].concat();
    let edge = [&["--protocol", "mcp"][..], edge_extra].concat();
    Pair::start(PairOptions {
        upstream,
        origin_extra: &origin,
        edge_extra: &edge,
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await
}

/// How many of the `forever` tool's streams the server saw end.
static FOREVER_CLOSED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// MCP's stateless revision, whose requests carry their own version.
const STATELESS: &str = "2026-07-28";

/// A request of the stateless revision, as its servers check one: no
/// session; `MCP-Protocol-Version` and `Mcp-Method` must be there and
/// agree with the body (`_meta`'s version, `method`), else 400
/// HeaderMismatch (-32020); `Mcp-Name` too on `tools/call` (compared when
/// plain); `Mcp-Param-Region` on a call of `regional`, whose `region`
/// parameter its `tools/list` marks `x-mcp-header`. The result says what
/// headers came.
fn stateless(
    msg: &Value,
    version: Option<&str>,
    (got_method, got_name, got_region): (Option<String>, Option<String>, Option<String>),
) -> Response<Body> {
    let method = msg["method"].as_str().unwrap_or_default();
    let meta_version = msg["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].as_str();
    let name = msg["params"]["name"].as_str();
    let plain = name.is_some_and(|n| n.is_ascii() && !n.contains('\n'));
    let region = msg["params"]["arguments"]["region"].as_str();
    let mismatch = meta_version != version
        || got_method.as_deref() != Some(method)
        || (method == "tools/call" && got_name.is_none())
        || (method == "tools/call" && plain && got_name.as_deref() != name)
        || (name == Some("regional") && got_region.as_deref() != region);
    if mismatch {
        let e = json!({"jsonrpc":"2.0","id":msg["id"],"error":{"code":-32020,
            "message":format!("Header mismatch: {got_method:?} {got_name:?} for {method}")}});
        return json_body(StatusCode::BAD_REQUEST, &e);
    }
    // As the revision asks: 400 for a version it does not speak, 404 for
    // a method it does not have.
    if version != Some(STATELESS) {
        let e = json!({"jsonrpc":"2.0","id":msg["id"],"error":{"code":-32022,
            "message":"Unsupported protocol version","data":{"supported":[STATELESS]}}});
        return json_body(StatusCode::BAD_REQUEST, &e);
    }
    if method == "tools/list" {
        let tool = json!({"name":"regional","inputSchema":{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"}}}});
        return json_body(
            StatusCode::OK,
            &json!({"jsonrpc":"2.0","id":msg["id"],"result":{"tools":[tool]}}),
        );
    }
    if !matches!(method, "tools/call" | "server/discover" | "echo") {
        let e = json!({"jsonrpc":"2.0","id":msg["id"],"error":{"code":-32601,"message":"Method not found"}});
        return json_body(StatusCode::NOT_FOUND, &e);
    }
    if name == Some("forever") {
        // A stream that never ends by itself (as subscriptions/listen's):
        // one message, then held until the client's side goes.
        let (tx, resp) = event_stream();
        let id = msg["id"].clone();
        tokio::spawn(async move {
            let hello = json!({"jsonrpc":"2.0","method":"notifications/message",
                "params":{"level":"info","data":id}});
            let _ = tx.send(hello).await;
            tx.closed().await;
            FOREVER_CLOSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        return resp;
    }
    if name == Some("progress") {
        // Its progress on the request's own stream, then the result.
        let (tx, resp) = event_stream();
        let token = msg["params"]["_meta"]["progressToken"].clone();
        let reply = json!({"jsonrpc":"2.0","id":msg["id"],"result":{"content":[{"type":"text","text":"done"}]}});
        tokio::spawn(async move {
            for n in 1..=2 {
                let progress = json!({"jsonrpc":"2.0","method":"notifications/progress",
                    "params":{"progressToken":token,"progress":n,"total":2}});
                let _ = tx.send(progress).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let _ = tx.send(reply).await;
        });
        return resp;
    }
    let mut result = json!({"mcp-method":got_method,"mcp-name":got_name,
        "mcp-param-region":got_region,"version":STATELESS});
    if method == "server/discover" {
        // A server of both eras.
        result["supportedVersions"] = json!([STATELESS, VERSION]);
    }
    json_body(
        StatusCode::OK,
        &json!({"jsonrpc":"2.0","id":msg["id"],"result":result}),
    )
}

/// A fresh server on 127.0.0.1, and its URL.
async fn new_server() -> (Arc<Server>, String) {
    let server = Arc::new(Server::default());
    let url = start_server(server.clone()).await;
    (server, url)
}

/// Ends a `connect` client the way an MCP client does: EOF on its stdin.
fn close_stdin(client: &mut Client) {
    if let Client::Lines { write, .. } = client {
        drop(std::mem::replace(write, Box::new(tokio::io::sink())));
    }
}

/// The server on 127.0.0.1; its URL.
async fn start_server(server: Arc<Server>) -> String {
    let listener = loopback().await;
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    serve_http(listener, move |req| handle(server.clone(), req));
    url
}

async fn origin_for(url: &str) -> Proc {
    origin_with(url, &[]).await
}

async fn origin_with(url: &str, extra: &[&str]) -> Proc {
    let args = [
        &[
            "serve",
            "--listen",
            "quic://127.0.0.1:0",
            "--protocol",
            "mcp",
            "--upstream",
            url,
            "--insecure-accept-any-peer",
            "--request-timeout",
            "5",
            "--stall-timeout",
            "2",
            "--peer-timeout",
            "10",
            "--metrics",
            "127.0.0.1:0",
        ][..],
        extra,
    ]
    .concat();
    Proc::start(&args, "metrics").await
}

async fn mcp_client(origin: &Proc) -> Client {
    let peer = origin.printed("listening on ");
    Client::stdio(&peer, &["--protocol", "mcp", "--insecure-accept-any-peer"]).await
}

async fn initialize(client: &mut Client, id: u32) -> Value {
    client
        .call(
            json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
            "protocolVersion":VERSION,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        )
        .await
}

/// Waits (up to 5 s) until the server's log holds `line`.
async fn server_saw(server: &Server, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.saw(line) {
        assert!(
            Instant::now() < deadline,
            "the server never saw {line:?}: {:?}",
            server.log.lock().expect("log")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends notifications/initialized and, right behind it, `request`: what
/// the GET stream pushes then (outside any request), and the reply, which
/// may come in either order.
async fn initialized_then(client: &mut Client, request: Value) -> (Value, Value) {
    client
        .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    client.send(&request.to_string()).await;
    let (a, b) = (
        client.recv().await.expect("a message"),
        client.recv().await.expect("a message"),
    );
    if a.get("method").is_some() {
        (a, b)
    } else {
        (b, a)
    }
}

/// The detail of a NotDelivered answer (-32004); panics on anything else.
fn not_delivered(r: &Value) -> String {
    assert_eq!(r["error"]["code"], -32004, "{r}");
    r["error"]["data"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_works_with_a_streamable_http_server_through_the_pair() {
    let (server, url) = new_server().await;
    let origin = origin_for(&url).await;
    let mut client = mcp_client(&origin).await;

    // initialize: the reply comes as an event stream, with a session id.
    let r = initialize(&mut client, 1).await;
    assert_eq!(r["result"]["protocolVersion"], VERSION, "{r}");
    // A request right behind notifications/initialized reaches the server
    // after it (the server refuses requests before it).
    let (pushed, r) = initialized_then(
        &mut client,
        json!({"jsonrpc":"2.0","id":2,"method":"echo","params":{"x":1}}),
    )
    .await;
    assert_eq!(
        pushed["params"]["data"], "from the GET stream of s-1",
        "{pushed}"
    );
    assert!(server.saw("notifications/initialized s-1"));
    assert!(server.saw("get s-1"));

    // Requests carry the session id and the negotiated version.
    assert_eq!(r["result"]["session"], "s-1", "{r}");
    assert_eq!(r["result"]["version"], VERSION, "{r}");
    assert_eq!(r["result"]["params"], json!({"x":1}), "{r}");

    // A tool's progress arrives before its result, in order.
    client
        .send(
            &json!({"jsonrpc":"2.0","id":3,"method":"slow_tool",
                "params":{"_meta":{"progressToken":"p-3"}}})
            .to_string(),
        )
        .await;
    let progress = client.recv().await.expect("progress");
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(progress["params"]["progressToken"], "p-3");
    let done = client.recv().await.expect("result");
    assert_eq!(
        (
            done["id"].clone(),
            done["result"]["content"][0]["text"].clone()
        ),
        (json!(3), json!("done")),
        "{done}"
    );

    // The server asks the client in the middle of a request (sampling); the
    // client's answer is posted back and the request completes with it.
    client
        .send(r#"{"jsonrpc":"2.0","id":4,"method":"ask"}"#)
        .await;
    let ask = client.recv().await.expect("the server's request");
    assert_eq!(ask["method"], "sampling/createMessage", "{ask}");
    assert_eq!(ask["id"], "srv-1");
    client
        .send(r#"{"jsonrpc":"2.0","id":"srv-1","result":{"text":"42"}}"#)
        .await;
    let r = client.recv().await.expect("the reply to ask");
    assert_eq!(r["id"], 4, "{r}");
    assert_eq!(r["result"]["answer"], json!({"text":"42"}), "{r}");

    // A stream that ends without the reply is answered, and says so: the
    // server took the request (200), so it may have run, and a method that
    // must not run twice is answered MayHaveExecuted, not NotDelivered.
    let r = client
        .call(json!({"jsonrpc":"2.0","id":5,"method":"no_reply"}))
        .await;
    assert_eq!(r["error"]["code"], -32014, "{r}");
    let detail = r["error"]["data"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("may have executed: ") && detail.contains("HTTP 200 OK without a reply"),
        "{detail}"
    );

    // The server forgets the session: the next request is told to
    // initialize again, and a new initialize gets a new session.
    let r = client
        .call(json!({"jsonrpc":"2.0","id":6,"method":"expire"}))
        .await;
    assert_eq!(r["result"], true, "{r}");
    let r = client
        .call(json!({"jsonrpc":"2.0","id":7,"method":"echo"}))
        .await;
    let detail = not_delivered(&r);
    assert!(
        detail.contains("session s-1 has ended (HTTP 404)") && detail.contains("initialize again"),
        "{detail}"
    );
    let r = initialize(&mut client, 8).await;
    assert_eq!(r["result"]["protocolVersion"], VERSION, "{r}");
    // The new session gets a GET stream of its own.
    let (pushed, r) =
        initialized_then(&mut client, json!({"jsonrpc":"2.0","id":9,"method":"echo"})).await;
    assert_eq!(
        pushed["params"]["data"], "from the GET stream of s-2",
        "{pushed}"
    );
    assert_eq!(r["result"]["session"], "s-2", "{r}");

    // Every POST asked for both media types.
    assert!(
        !server
            .log
            .lock()
            .expect("log")
            .iter()
            .any(|l| l.starts_with("accept")),
        "{:?}",
        server.log.lock().expect("log")
    );

    // Every event stream began with a priming event (id, no data) and a
    // retry hint: skipped, as the MCP SDK clients skip them, not dropped.
    assert_eq!(metric(&origin, "npamp_dropped_total").await, 0);

    // The client goes (EOF on connect's stdin): its association ends, and
    // so does the MCP session.
    close_stdin(&mut client);
    server_saw(&server, "deleted s-2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_headers_go_with_every_request_to_the_server() {
    // A hosted MCP server wants its bearer token on every request: POST,
    // the GET stream and the DELETE at the end.
    let (server, url) = new_server().await;
    let origin = origin_with(&url, &["--upstream-header", "Authorization: Bearer t0k3n"]).await;
    let mut client = mcp_client(&origin).await;
    let r = initialize(&mut client, 1).await;
    assert_eq!(r["result"]["protocolVersion"], VERSION, "{r}");
    let (pushed, r) =
        initialized_then(&mut client, json!({"jsonrpc":"2.0","id":2,"method":"echo"})).await;
    assert_eq!(r["result"]["session"], "s-1", "{r} {pushed}");
    close_stdin(&mut client);
    server_saw(&server, "deleted s-1").await;
    for method in ["POST", "GET", "DELETE"] {
        assert!(
            server.saw(&format!("{method} auth: Bearer t0k3n")),
            "{method}: {:?}",
            server.log.lock().expect("log")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_headers_go_with_plain_json_rpc_posts_too() {
    // An RPC provider that wants an API key: the stateless HTTP path.
    let (server, url) = new_server().await;
    let origin = Proc::start(
        &[
            "serve",
            "--listen",
            "quic://127.0.0.1:0",
            "--upstream",
            &url,
            "--upstream-header",
            "Authorization: Basic dTpw",
            "--insecure-accept-any-peer",
        ],
        "listening on",
    )
    .await;
    let peer = origin.printed("listening on ");
    let mut client = Client::stdio(&peer, &["--insecure-accept-any-peer"]).await;
    // This server wants MCP's Accept header, so the reply is a refusal;
    // what counts here is the header it saw.
    let _ = client
        .call(json!({"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}))
        .await;
    assert!(
        server.saw("POST auth: Basic dTpw"),
        "{:?}",
        server.log.lock().expect("log")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_id_a_stateful_server_refusal_is_quoted() {
    // A client that skips initialize: the server's 400 (whose error has
    // another id) is not passed off as the reply; the detail quotes it.
    let (_server, url) = new_server().await;
    let origin = origin_for(&url).await;
    let mut client = mcp_client(&origin).await;
    // Twice: the session id the 400 named is not taken up, so the second
    // request is refused as the first (not sent with it and answered 404).
    for id in 1..=2 {
        let r = client
            .call(json!({"jsonrpc":"2.0","id":id,"method":"echo"}))
            .await;
        let detail = not_delivered(&r);
        assert!(
            detail.contains("HTTP 400 Bad Request") && detail.contains("Missing session ID"),
            "{id}: {detail}"
        );
    }
    // initialize's reply names the session, and it is used.
    let init = initialize(&mut client, 3).await;
    assert!(init["result"]["protocolVersion"].is_string(), "{init}");
    let (_, r) =
        initialized_then(&mut client, json!({"jsonrpc":"2.0","id":4,"method":"echo"})).await;
    assert_eq!(r["result"]["session"], "s-1", "{r}");
}

/// A request of the stateless revision (2026-07-28) reaches its server
/// with the headers the revision requires, derived at the origin from the
/// message (the client's own headers do not cross the pair): its method,
/// its tool's name (in base64 where a header cannot carry it plainly), its
/// protocol version from its `_meta`; and no session id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_request_reaches_its_server_with_the_headers_it_requires() {
    let (_server, url) = new_server().await;
    let origin = origin_for(&url).await;
    let mut client = mcp_client(&origin).await;
    let meta = json!({"io.modelcontextprotocol/protocolVersion":STATELESS,
        "io.modelcontextprotocol/clientCapabilities":{}});
    for (id, name, header) in [
        (1, "get_weather", "get_weather"),
        (2, "café", "=?base64?Y2Fmw6k=?="),
    ] {
        let r = client
            .call(json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                "params":{"_meta":meta,"name":name,"arguments":{}}}))
            .await;
        assert_eq!(r["result"]["mcp-method"], "tools/call", "{r}");
        assert_eq!(r["result"]["mcp-name"], header, "{r}");
    }
    let r = client
        .call(json!({"jsonrpc":"2.0","id":3,"method":"server/discover","params":{"_meta":meta}}))
        .await;
    assert_eq!(r["result"]["mcp-method"], "server/discover", "{r}");
    assert_eq!(r["result"]["mcp-name"], Value::Null, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_edge_answers_a_notification_post_with_202() {
    // MCP's Streamable HTTP asks for 202 Accepted; plain JSON-RPC gets 204.
    let pair = mcp_pair(Up::Http).await;
    let url = pair.ingress("http");
    let (status, body) = post(
        &url,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!((status, body.as_str()), (202, ""));
    // A plain JSON-RPC server (no session id, JSON replies) still answers
    // through an MCP origin.
    let (status, body) = post(
        &url,
        r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse(&body)["result"], json!([1]), "{body}");
}

/// An MCP edge checks the headers MCP 2026-07-28 has a client mirror from
/// the body, as its servers do: one that disagrees with the body, or a
/// stateless request without them, is refused 400 HeaderMismatch (-32020)
/// and never carried; one that agrees is carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_edge_refuses_headers_that_disagree_with_the_body() {
    let pair = mcp_pair(Up::Http).await;
    let url = pair.ingress("http");
    let body = json!({"jsonrpc":"2.0","id":7,"method":"echo","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":STATELESS}}})
    .to_string();
    let json = ("content-type", "application/json");
    let version = ("mcp-protocol-version", STATELESS);
    for (headers, why) in [
        (
            vec![json, version, ("mcp-method", "tools/list")],
            "Mcp-Method header value 'tools/list' does not match body value 'echo'",
        ),
        (vec![json, version], "required header Mcp-Method is missing"),
        (
            vec![
                json,
                ("mcp-protocol-version", "2025-11-25"),
                ("mcp-method", "echo"),
            ],
            "MCP-Protocol-Version header value '2025-11-25'",
        ),
    ] {
        let (status, answer) = support::post_headers(&url, &body, &headers).await;
        assert_eq!(status, 400, "{answer}");
        let a = parse(&answer);
        assert_eq!(a["id"], 7, "{answer}");
        assert_eq!(a["error"]["code"], -32020, "{answer}");
        let message = a["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("Header mismatch: ") && message.contains(why),
            "{message}"
        );
    }
    let (status, answer) =
        support::post_headers(&url, &body, &[json, version, ("mcp-method", "echo")]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(parse(&answer)["id"], 7, "{answer}");
    assert!(parse(&answer).get("result").is_some(), "{answer}");
}

/// The HTTP status a server of the stateless revision answers with (400
/// for an unsupported version, 404 for an unknown method) reaches the
/// client through the pair, though only the reply crosses it: the edge
/// gives the status the reply's error code stands for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_server_s_error_status_reaches_the_client() {
    let (_server, url) = new_server().await;
    let url: &'static str = Box::leak(url.into_boxed_str());
    let pair = mcp_pair(Up::Url(url)).await;
    let edge = pair.ingress("http");
    let call = |version: &str, method: &str| {
        json!({"jsonrpc":"2.0","id":1,"method":method,"params":{
            "_meta":{"io.modelcontextprotocol/protocolVersion":version},"name":"t"}})
        .to_string()
    };
    for (version, method, status, code) in [
        (STATELESS, "tools/call", 200, None),
        ("2099-01-01", "tools/call", 400, Some(-32022)),
        (STATELESS, "no/such", 404, Some(-32601)),
    ] {
        let headers = [
            ("content-type", "application/json"),
            ("mcp-protocol-version", version),
            ("mcp-method", method),
            ("mcp-name", "t"),
        ];
        let (got, answer) = support::post_headers(&edge, &call(version, method), &headers).await;
        assert_eq!(got, status, "{method} {version}: {answer}");
        assert_eq!(parse(&answer)["error"]["code"].as_i64(), code, "{answer}");
    }
}

/// An MCP client over Streamable HTTP, as the SDKs' transports are.
mod http_client {
    use std::collections::VecDeque;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper::body::Incoming;
    use npamp_gateway::sse::SseDecoder;
    use serde_json::Value;

    pub const BOTH: &str = "application/json, text/event-stream";

    /// Sends one request to the edge; the response, unread.
    pub async fn send(
        url: &str,
        method: hyper::Method,
        session: Option<&str>,
        accept: &str,
        body: Option<Value>,
    ) -> hyper::Response<Incoming> {
        send_as(None, url, method, session, accept, body).await
    }

    /// As [`send`], with `Authorization: Bearer TOKEN` when given.
    pub async fn send_as(
        token: Option<&str>,
        url: &str,
        method: hyper::Method,
        session: Option<&str>,
        accept: &str,
        body: Option<Value>,
    ) -> hyper::Response<Incoming> {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", &a[..])).collect();
        send_with(url, method, session, accept, &headers, body).await
    }

    /// As [`send`], with `headers` too.
    pub async fn send_with(
        url: &str,
        method: hyper::Method,
        session: Option<&str>,
        accept: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> hyper::Response<Incoming> {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(url)
            .header("accept", accept);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let req = req.body(Full::new(body)).expect("request");
        tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .expect("an answer in time")
            .expect("HTTP")
    }

    /// The messages of an event-stream response, as they come.
    pub struct Events {
        body: Incoming,
        decoder: SseDecoder,
        ready: VecDeque<Value>,
        /// Every octet read, as it came.
        pub raw: String,
    }

    impl Events {
        pub fn of(resp: hyper::Response<Incoming>) -> Self {
            let ct = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            assert_eq!(ct, "text/event-stream", "status {}", resp.status());
            Self {
                body: resp.into_body(),
                decoder: SseDecoder::new(1 << 20),
                ready: VecDeque::new(),
                raw: String::new(),
            }
        }

        /// The id of the last event read, primed or not.
        pub fn last_id(&self) -> String {
            String::from_utf8_lossy(self.decoder.last_event_id()).into_owned()
        }

        /// The next message, or `None` when the stream ended.
        pub async fn next(&mut self) -> Option<Value> {
            loop {
                if let Some(v) = self.ready.pop_front() {
                    return Some(v);
                }
                let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                    .await
                    .expect("an event in time")?
                    .expect("a frame");
                if let Ok(data) = frame.into_data() {
                    self.raw.push_str(&String::from_utf8_lossy(&data));
                    let mut events = Vec::new();
                    self.decoder
                        .push(&data, &mut events)
                        .expect("an event stream");
                    // A priming event (an id, no data) is no message.
                    self.ready.extend(
                        (events.iter())
                            .filter(|e| npamp_gateway::sse::carries_a_message(e))
                            .map(|e| serde_json::from_slice::<Value>(e).expect("JSON")),
                    );
                }
            }
        }
    }

    /// A POST of `body` in session `session`, answered as an event stream.
    pub async fn post_events(url: &str, session: Option<&str>, body: Value) -> Events {
        Events::of(send(url, hyper::Method::POST, session, BOTH, Some(body)).await)
    }

    /// The whole body, as JSON.
    pub async fn json(resp: hyper::Response<Incoming>) -> Value {
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&body).expect("JSON")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_http_client_gets_a_session_of_its_own_at_the_edge() {
    use http_client::{BOTH, Events, json, post_events, send};
    use hyper::Method;
    // The upstream is a stdio server, one per association: what it
    // remembers (its questions) must stay with one client.
    let pair = mcp_pair(Up::Stdio).await;
    let url = pair.ingress("http");
    let init =
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":VERSION}});

    // initialize opens a session: its id in the header, the reply as an event.
    let resp = send(&url, Method::POST, None, BOTH, Some(init.clone())).await;
    assert_eq!(resp.status(), 200);
    let s = resp.headers()["mcp-session-id"]
        .to_str()
        .expect("ASCII")
        .to_owned();
    assert_eq!(s.len(), 32, "{s}");
    let mut events = Events::of(resp);
    assert_eq!(events.next().await.expect("reply")["id"], 1);
    assert!(
        events.next().await.is_none(),
        "the stream ends after the reply"
    );
    // Another client, another session.
    let other = send(&url, Method::POST, None, BOTH, Some(init)).await;
    assert_ne!(other.headers()["mcp-session-id"].to_str().expect("id"), s);
    let sid = Some(s.as_str());

    // What the server sends while a request runs comes first, on its stream.
    let mut events = post_events(
        &url,
        sid,
        json!({"jsonrpc":"2.0","id":2,"method":"notify","params":{"n":2}}),
    )
    .await;
    let first = events.next().await.expect("notification");
    assert_eq!(first["method"], "mock/notified", "{first}");
    assert_eq!(events.next().await.expect("reply")["id"], 2);

    // A server request in the middle of a client request: the client
    // answers it with a POST of its own, and the request completes.
    let mut events = post_events(
        &url,
        sid,
        json!({"jsonrpc":"2.0","id":3,"method":"ask","params":{"q":1}}),
    )
    .await;
    let question = events.next().await.expect("the server's question");
    assert_eq!(question["method"], "mock/question", "{question}");
    let answer = json!({"jsonrpc":"2.0","id":question["id"],"result":42});
    let accepted = send(&url, Method::POST, sid, BOTH, Some(answer)).await;
    assert_eq!(accepted.status(), 202);
    let r = events.next().await.expect("the reply to ask");
    assert_eq!(
        (r["id"].clone(), r["result"]["answer"].clone()),
        (json!(3), json!(42)),
        "{r}"
    );

    // The GET stream takes what the server sends outside any request; a
    // client that accepts only JSON gets the reply alone.
    let mut get = Events::of(send(&url, Method::GET, sid, "text/event-stream", None).await);
    let r = json(
        send(
            &url,
            Method::POST,
            sid,
            "application/json",
            Some(json!({"jsonrpc":"2.0","id":4,"method":"subscribe"})),
        )
        .await,
    )
    .await;
    assert_eq!(r["result"], "0x1", "{r}");
    for i in 0..3 {
        let n = get.next().await.expect("a subscription event");
        assert_eq!(n["params"]["result"], i, "{n}");
    }

    // Unknown sessions are 404; DELETE ends one, which is then unknown.
    let resp = send(
        &url,
        Method::POST,
        Some("nosuchsession"),
        BOTH,
        Some(json!({"jsonrpc":"2.0","id":5,"method":"echo"})),
    )
    .await;
    assert_eq!(resp.status(), 404);
    assert_eq!(
        send(&url, Method::DELETE, sid, BOTH, None).await.status(),
        200
    );
    let resp = send(
        &url,
        Method::POST,
        sid,
        BOTH,
        Some(json!({"jsonrpc":"2.0","id":6,"method":"echo"})),
    )
    .await;
    assert_eq!(resp.status(), 404);
    assert!(
        get.next().await.is_none(),
        "the GET stream ends with its session"
    );
    // Without a session id, plain requests keep the stateless path.
    let r = json(
        send(
            &url,
            Method::POST,
            None,
            BOTH,
            Some(json!({"jsonrpc":"2.0","id":7,"method":"echo","params":[7]})),
        )
        .await,
    )
    .await;
    assert_eq!(r["result"], json!([7]), "{r}");
}

/// A session's stream is resumable at the edge (MCP 2025-11-25): a client
/// of that revision gets its stream primed, every event has an id, and a
/// client that lost the stream mid-request GETs with `Last-Event-ID` and is
/// sent what came after that event (here the reply, which came while it was
/// away), and no more. An id no stream knows gets 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stream_a_client_lost_is_resumed_at_the_edge() {
    use http_client::{BOTH, Events, json, send, send_with};
    use hyper::Method;
    let pair = mcp_pair(Up::Stdio).await;
    let url = pair.ingress("http");
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize",
        "params":{"protocolVersion":"2025-11-25"}});
    let resp = send(&url, Method::POST, None, BOTH, Some(init)).await;
    let s = resp.headers()["mcp-session-id"]
        .to_str()
        .expect("ASCII")
        .to_owned();
    let sid = Some(s.as_str());
    // The revision it asks for primes its first stream, the session's 1st.
    let mut events = Events::of(resp);
    assert_eq!(events.next().await.expect("reply")["id"], 1);
    assert!(
        events.raw.starts_with("id: 1-0\ndata: \n\nid: 1-1\n"),
        "{:?}",
        events.raw
    );
    let version = [("mcp-protocol-version", "2025-11-25")];

    // A request whose server asks the client a question, then waits.
    let ask = json!({"jsonrpc":"2.0","id":2,"method":"ask","params":{"q":1}});
    let resp = send_with(&url, Method::POST, sid, BOTH, &version, Some(ask)).await;
    let mut events = Events::of(resp);
    let question = events.next().await.expect("the server's question");
    assert_eq!(question["method"], "mock/question", "{question}");
    let last = events.last_id();
    let (stream, n) = last.split_once('-').expect("an id of the edge's");
    assert_eq!(n, "1", "the priming event is 0, the question 1: {last}");
    let primed = format!("id: {stream}-0\ndata: \n\n");
    assert!(events.raw.starts_with(&primed), "{:?}", events.raw);
    // The connection drops; the answer to the question goes on without it.
    drop(events);
    let answer = json!({"jsonrpc":"2.0","id":question["id"],"result":42});
    let accepted = send(&url, Method::POST, sid, BOTH, Some(answer)).await;
    assert_eq!(accepted.status(), 202);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Resumed after the question: the reply, then the end.
    let resumed = [("last-event-id", &last[..]), version[0]];
    let resp = send_with(&url, Method::GET, sid, "text/event-stream", &resumed, None).await;
    let mut events = Events::of(resp);
    let r = events.next().await.expect("the reply, replayed");
    assert_eq!(
        (r["id"].clone(), r["result"]["answer"].clone()),
        (json!(2), json!(42)),
        "{r}"
    );
    assert_eq!(events.last_id(), format!("{stream}-2"));
    assert!(
        events.next().await.is_none(),
        "the stream ends with its reply"
    );

    // A client of an earlier revision gets ids, and no priming event.
    let echo = json!({"jsonrpc":"2.0","id":3,"method":"echo","params":[3]});
    let mut events = Events::of(send(&url, Method::POST, sid, BOTH, Some(echo)).await);
    assert_eq!(events.next().await.expect("reply")["id"], 3);
    assert!(events.last_id().ends_with("-1"), "{}", events.last_id());
    assert!(events.raw.starts_with("id: "), "{:?}", events.raw);
    assert!(!events.raw.contains("data: \n"), "{:?}", events.raw);

    // An id no stream of the session has, or an event its stream never
    // sent: 400, said.
    let beyond = format!("{stream}-9");
    for unknown in ["99-1", "not-ours", &beyond] {
        let resumed = [("last-event-id", unknown)];
        let resp = send_with(&url, Method::GET, sid, "text/event-stream", &resumed, None).await;
        assert_eq!(resp.status(), 400, "{unknown}");
        let e = json(resp).await;
        assert!(
            e["error"]["message"]
                .as_str()
                .expect("message")
                .contains("no event stream"),
            "{e}"
        );
    }
}

/// MCP sessions are bounded: one client (here its address) holds at most
/// `--max-sessions-per-client`, one more `initialize` gets 503 saying so
/// while another address is served; an open GET stream does not keep a
/// session from idling out from its last POST (once one client held
/// sessions forever that way), and an ended session gives its slot back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_are_bounded_per_client_and_a_get_stream_does_not_hold_one() {
    use http_client::{BOTH, Events, send};
    use hyper::Method;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pair = Pair::start(PairOptions {
        upstream: Up::Stdio,
        origin_extra: &["--protocol", "mcp"],
        edge_extra: &[
            "--protocol",
            "mcp",
            "--max-sessions-per-client",
            "2",
            "--idle-timeout",
            "1",
        ],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let url = pair.ingress("http");
    let init =
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":VERSION}});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let resp = send(&url, Method::POST, None, BOTH, Some(init.clone())).await;
        assert_eq!(resp.status(), 200);
        ids.push(
            resp.headers()["mcp-session-id"]
                .to_str()
                .expect("id")
                .to_owned(),
        );
    }
    let third = send(&url, Method::POST, None, BOTH, Some(init.clone())).await;
    assert_eq!(third.status(), 503);
    let text =
        String::from_utf8_lossy(&third.into_body().collect().await.expect("body").to_bytes())
            .into_owned();
    assert!(text.contains("--max-sessions-per-client"), "{text}");
    assert_eq!(
        metric(&pair.edge, "npamp_mcp_sessions_refused_total").await,
        1
    );

    // Another address is another client.
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.2:0".parse().expect("address"))
        .expect("bind");
    let mut tcp = socket
        .connect(addr.parse().expect("address"))
        .await
        .expect("connect from 127.0.0.2");
    let body = init.to_string();
    tcp.write_all(
        format!(
            "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\naccept: {BOTH}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("write");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // A GET stream open on the first session, no POST: it idles out.
    let mut get =
        Events::of(send(&url, Method::GET, Some(&ids[0]), "text/event-stream", None).await);
    let ended = tokio::time::timeout(Duration::from_secs(5), get.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the GET stream should end with its idle session"
    );
    let echo = json!({"jsonrpc":"2.0","id":2,"method":"echo","params":[2]});
    let resp = send(&url, Method::POST, Some(&ids[0]), BOTH, Some(echo)).await;
    assert_eq!(resp.status(), 404);
    // Its slot is free again (the second session has idled out too).
    let resp = send(&url, Method::POST, None, BOTH, Some(init)).await;
    assert_eq!(resp.status(), 200);
}

/// An MCP session belongs to the credential that opened it (issue 53: with
/// another valid token, a client used and then DELETEd someone else's
/// session, 200, and its owner then got 404): another token gets 404 for
/// it, on POST, GET and DELETE alike, and the owner's session goes on; one
/// GET stream at a time (a second silently took the first's messages).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_belongs_to_the_credential_that_opened_it() {
    use http_client::{BOTH, Events, send_as};
    use hyper::Method;
    const ALICE: &str = "alice-0123456789abcdef";
    const MALLORY: &str = "mallory-0123456789abcdef";
    let dir = support::tempdir::Dir::new();
    let tokens = dir.0.join("tokens");
    std::fs::write(&tokens, format!("{ALICE}\n{MALLORY}\n")).expect("token file");
    let tokens = tokens.to_string_lossy().into_owned();
    let pair = Pair::start(PairOptions {
        upstream: Up::Stdio,
        origin_extra: &["--protocol", "mcp"],
        edge_extra: &["--protocol", "mcp", "--auth-token-file", &tokens],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let url = pair.ingress("http");
    let init =
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":VERSION}});
    let resp = send_as(Some(ALICE), &url, Method::POST, None, BOTH, Some(init)).await;
    assert_eq!(resp.status(), 200);
    let id = resp.headers()["mcp-session-id"]
        .to_str()
        .expect("id")
        .to_owned();
    let sid = Some(id.as_str());
    let echo = |n: u32| json!({"jsonrpc":"2.0","id":n,"method":"echo","params":[n]});

    // Mallory, with a valid token of her own and Alice's session id: the
    // session is unknown to her, whatever she does with it.
    for method in [Method::POST, Method::GET, Method::DELETE] {
        let body = (method == Method::POST).then(|| echo(2));
        let resp = send_as(Some(MALLORY), &url, method.clone(), sid, BOTH, body).await;
        assert_eq!(resp.status(), 404, "{method} with another token");
    }
    // Without a token: 401, before any session is looked at.
    let resp = send_as(None, &url, Method::POST, sid, BOTH, Some(echo(3))).await;
    assert_eq!(resp.status(), 401);

    // Alice's session goes on: her GET stream, then a second one refused.
    let mut events =
        Events::of(send_as(Some(ALICE), &url, Method::POST, sid, BOTH, Some(echo(4))).await);
    assert_eq!(events.next().await.expect("reply")["result"], json!([4]));
    let get = send_as(
        Some(ALICE),
        &url,
        Method::GET,
        sid,
        "text/event-stream",
        None,
    )
    .await;
    assert_eq!(get.status(), 200);
    let second = send_as(
        Some(ALICE),
        &url,
        Method::GET,
        sid,
        "text/event-stream",
        None,
    )
    .await;
    assert_eq!(second.status(), 409, "one GET stream at a time");
    // Once the first ends (its client gone), a GET takes its place.
    drop(get);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let again = send_as(
            Some(ALICE),
            &url,
            Method::GET,
            sid,
            "text/event-stream",
            None,
        )
        .await;
        if again.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a GET after the first ended: {}",
            again.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        send_as(Some(ALICE), &url, Method::DELETE, sid, BOTH, None)
            .await
            .status(),
        200
    );
}

/// What the polling server saw of its resumption: the `Last-Event-ID` of
/// each GET that named one, and how long after it closed the request's
/// stream that GET came.
#[derive(Default)]
struct Polled {
    closed: Mutex<Option<Instant>>,
    resumed: Mutex<Vec<(String, Duration)>>,
}

/// A session server that closes a tool call's event stream before the
/// reply, as MCP 2025-11-25 lets a server do to have the client poll: the
/// stream gives an event id and `retry: 300`, and the reply comes on the
/// GET that names that id. It offers no other GET stream.
async fn polling_server(polled: Arc<Polled>) -> String {
    let listener = loopback().await;
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    serve_http(listener, move |req| {
        let polled = polled.clone();
        async move { poll_answer(&polled, req).await }
    });
    url
}

async fn poll_answer(polled: &Polled, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let sse = |text: String| {
        let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().expect("value"));
        r.headers_mut()
            .insert("mcp-session-id", "p-1".parse().expect("value"));
        r
    };
    if req.method() == hyper::Method::GET {
        let Some(last) = req.headers().get("last-event-id") else {
            return empty(StatusCode::METHOD_NOT_ALLOWED);
        };
        let last = last.to_str().unwrap_or_default().to_owned();
        if last == "n-1" {
            return empty(StatusCode::METHOD_NOT_ALLOWED);
        }
        if last == "r-1" {
            // The first resumed stream ends with no event: the next GET
            // names r-1 again, as an event source keeps its last id.
            let mut resumed = polled.resumed.lock().expect("resumed");
            if resumed.iter().filter(|(l, _)| l == "r-1").count() == 0 {
                resumed.push((last, Duration::ZERO));
                return sse(String::new());
            }
            resumed.push((last, Duration::ZERO));
            let reply = json!({"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"on the second GET"}]}});
            return sse(format!("data: {reply}\n\n"));
        }
        let since = polled.closed.lock().expect("closed").map(|t| t.elapsed());
        polled
            .resumed
            .lock()
            .expect("resumed")
            .push((last, since.unwrap_or_default()));
        let reply = json!({"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"after polling"}]}});
        return sse(format!("id: e-2\ndata:\n\nid: e-3\ndata: {reply}\n\n"));
    }
    if req.method() == hyper::Method::DELETE {
        return empty(StatusCode::OK);
    }
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
    match msg["method"].as_str() {
        Some("initialize") => {
            let mut r = json_body(
                StatusCode::OK,
                &json!({"jsonrpc":"2.0","id":msg["id"],"result":{"protocolVersion":"2025-11-25",
                    "capabilities":{"tools":{}},"serverInfo":{"name":"poll","version":"1"}}}),
            );
            r.headers_mut()
                .insert("mcp-session-id", "p-1".parse().expect("value"));
            r
        }
        Some("tools/call") if msg["params"]["name"] == "never" => {
            sse("id: n-1\nretry: 50\ndata:\n\n".into())
        }
        Some("tools/call") if msg["params"]["name"] == "twice" => {
            sse("id: r-1\nretry: 50\ndata:\n\n".into())
        }
        Some("tools/call") => {
            *polled.closed.lock().expect("closed") = Some(Instant::now());
            sse("id: e-1\nretry: 300\ndata:\n\n".into())
        }
        _ => empty(StatusCode::ACCEPTED),
    }
}

/// MCP 2025-11-25's resumable streams at the origin: a server that closes
/// a request's event stream before the reply is asked again with a GET
/// naming the last event id, after the `retry` it gave, and the reply that
/// comes there answers the client, who sees one uninterrupted request
/// (was MayHaveExecuted: the conformance suite's `sse-retry` through a
/// pair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_the_server_closes_before_the_reply_is_resumed() {
    let polled = Arc::new(Polled::default());
    let url = polling_server(polled.clone()).await;
    let origin = origin_for(&url).await;
    let mut client = mcp_client(&origin).await;
    let r = initialize(&mut client, 1).await;
    assert_eq!(r["result"]["serverInfo"]["name"], "poll", "{r}");
    client
        .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let r = client
        .call(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{}}}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "after polling", "{r}");
    let resumed = polled.resumed.lock().expect("resumed").clone();
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    let (last, after) = &resumed[0];
    assert_eq!(last, "e-1");
    assert!(
        *after >= Duration::from_millis(290) && *after < Duration::from_secs(2),
        "the GET came {after:?} after the close, not after the 300 ms asked"
    );

    // A server that will not resume it: answered as a stream closed early
    // (the tool may have run).
    let r = client
        .call(json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"never","arguments":{}}}))
        .await;
    assert_eq!(r["error"]["code"], -32014, "{r}");
    let detail = r["error"]["data"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("refused to resume it (HTTP 405"),
        "{detail}"
    );

    let r = client
        .call(json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"twice","arguments":{}}}))
        .await;
    assert_eq!(
        r["result"]["content"][0]["text"], "on the second GET",
        "{r}"
    );
    let named: Vec<String> = (polled.resumed.lock().expect("resumed").iter())
        .map(|(l, _)| l.clone())
        .filter(|l| l == "r-1")
        .collect();
    assert_eq!(named.len(), 2, "{named:?}");
}

/// One request, a stream of messages (issue 52, item 2): a stateless
/// request's progress, which its server sends on the request's own stream,
/// reaches an HTTP client through the pair, in order, before the result,
/// on one event stream (was dropped at the edge: 0 of 2). A client that
/// takes JSON alone gets the result alone, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_requests_progress_reaches_its_client_before_the_result() {
    let (_server, url) = new_server().await;
    let url: &'static str = Box::leak(url.into_boxed_str());
    let pair = mcp_pair(Up::Url(url)).await;
    let edge = pair.ingress("http");
    let call = json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":STATELESS,"progressToken":"p-1"},
        "name":"progress","arguments":{}}})
    .to_string();
    let headers = |accept| {
        [
            ("content-type", "application/json"),
            ("accept", accept),
            ("mcp-protocol-version", STATELESS),
            ("mcp-method", "tools/call"),
            ("mcp-name", "progress"),
        ]
    };
    let (status, body) = support::post_headers(&edge, &call, &headers(http_client::BOTH)).await;
    assert_eq!(status, 200, "{body}");
    let messages = event_messages(&body);
    assert_eq!(messages.len(), 3, "{body}");
    for (n, m) in messages[..2].iter().enumerate() {
        assert_eq!(m["method"], "notifications/progress", "{m}");
        assert_eq!(m["params"]["progressToken"], "p-1", "{m}");
        assert_eq!(m["params"]["progress"], n + 1, "{m}");
    }
    assert_eq!(messages[2]["id"], 9, "{body}");
    assert_eq!(
        messages[2]["result"]["content"][0]["text"], "done",
        "{body}"
    );

    let (status, body) = support::post_headers(&edge, &call, &headers("application/json")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        parse(&body)["result"]["content"][0]["text"],
        "done",
        "{body}"
    );
}

/// A tool whose server has a parameter mirrored into a header
/// (`x-mcp-header`, MCP 2026-07-28) gets it through the pair: the origin
/// learns the annotation from the `tools/list` answer it carries and sends
/// `Mcp-Param-Region` with each call, as that revision's clients do (the
/// server refused the call, 400 HeaderMismatch, before). Before the tool is
/// listed through the pair the server refuses, and the client lists the
/// tools and calls again, as the revision has it do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parameter_a_tool_mirrors_into_a_header_crosses_the_pair() {
    let (_server, url) = new_server().await;
    let url: &'static str = Box::leak(url.into_boxed_str());
    let pair = mcp_pair(Up::Url(url)).await;
    let edge = pair.ingress("http");
    let post = |id: u32, method: &'static str, params: Value| {
        let edge = edge.clone();
        async move {
            let client_header = [("mcp-param-region", "us-west1")];
            let extra: &[_] = if method == "tools/call" {
                &client_header
            } else {
                &[]
            };
            let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":params});
            let (status, body) = post_stateless(&edge, body, "application/json", extra).await;
            (status, parse(&body))
        }
    };
    let call = || json!({"name":"regional","arguments":{"region":"us-west1"}});
    let (status, refused) = post(1, "tools/call", call()).await;
    assert_eq!(
        (status, refused["error"]["code"].clone()),
        (400, json!(-32020)),
        "{refused}"
    );
    let (status, listed) = post(2, "tools/list", json!({})).await;
    assert_eq!(status, 200, "{listed}");
    let (status, called) = post(3, "tools/call", call()).await;
    assert_eq!(status, 200, "{called}");
    assert_eq!(called["result"]["mcp-param-region"], "us-west1", "{called}");
}

/// POSTs `body` as a client of the stateless revision sends it: its
/// version in `_meta` and in `MCP-Protocol-Version`, `Mcp-Method`, and
/// `Mcp-Name` when it names something; `extra` headers beside them. The
/// status and body of the answer.
async fn post_stateless(
    edge: &str,
    mut body: Value,
    accept: &str,
    extra: &[(&str, &str)],
) -> (u16, String) {
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!(STATELESS);
    let method = body["method"].as_str().unwrap_or_default().to_owned();
    let name = body["params"]["name"].as_str().map(str::to_owned);
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", accept),
        ("mcp-protocol-version", STATELESS),
        ("mcp-method", &method),
    ];
    if let Some(name) = &name {
        headers.push(("mcp-name", name));
    }
    headers.extend_from_slice(extra);
    support::post_headers(edge, &body.to_string(), &headers).await
}

/// The JSON-RPC messages of an event stream's body, in order.
fn event_messages(body: &str) -> Vec<Value> {
    let mut events = Vec::new();
    npamp_gateway::sse::SseDecoder::new(1 << 20)
        .push(body.as_bytes(), &mut events)
        .expect("an event stream");
    events
        .iter()
        .filter(|e| !e.is_empty())
        .map(|e| parse(&String::from_utf8_lossy(e)))
        .collect()
}

/// An MCP server over stdio gives no request a stream of its own: what
/// belongs to a request names it (MCP 2026-07-28, stdio): progress by the
/// request's progress token, a log message by being sent for the one
/// request that asked for them, a subscription's notifications by its
/// request's id. Two stateless clients at once, through the pooled
/// association to one child, each get theirs, in order, then the result
/// (none of them arrived before: they crossed as notifications of their
/// own, which a pool drops).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_messages_reach_the_request_they_name() {
    // One association, so one child for both clients.
    let pair = mcp_pair_with(Up::Stdio, &[], &["--pool-size", "1"]).await;
    let edge = pair.ingress("http");
    let post = |id: &str, method: &'static str, meta: Value| {
        let body = json!({"jsonrpc":"2.0","id":id,"method":method,"params":{"_meta":meta}});
        let edge = edge.clone();
        async move {
            let (status, body) = post_stateless(&edge, body, http_client::BOTH, &[]).await;
            assert_eq!(status, 200, "{body}");
            event_messages(&body)
        }
    };
    let (a, b) = tokio::join!(
        post(
            "a",
            "progress",
            json!({"progressToken":"pa","io.modelcontextprotocol/logLevel":"info"})
        ),
        post("b", "progress", json!({"progressToken":7})),
    );
    let progress = |m: &[Value]| -> Vec<(Value, Value)> {
        m.iter()
            .filter(|m| m["method"] == "notifications/progress")
            .map(|m| {
                (
                    m["params"]["progressToken"].clone(),
                    m["params"]["progress"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(
        progress(&a),
        [(json!("pa"), json!(1)), (json!("pa"), json!(2))],
        "{a:?}"
    );
    assert_eq!(
        progress(&b),
        [(json!(7), json!(1)), (json!(7), json!(2))],
        "{b:?}"
    );
    assert_eq!(a[2]["method"], "notifications/message", "{a:?}");
    assert_eq!((a.len(), b.len()), (4, 3), "a: {a:?}\nb: {b:?}");
    for (m, id) in [(&a, "a"), (&b, "b")] {
        let last = m.last().expect("the result");
        assert_eq!(
            (&last["id"], &last["result"]),
            (&json!(id), &json!("done")),
            "{m:?}"
        );
    }

    let listened = post("l-1", "subscriptions/listen", json!({})).await;
    let methods: Vec<_> = listened.iter().map(|m| m["method"].clone()).collect();
    assert_eq!(
        methods,
        [
            json!("notifications/subscriptions/acknowledged"),
            json!("notifications/resources/updated"),
            Value::Null
        ],
        "{listened:?}"
    );
    assert_eq!(
        listened[2]["result"]["resultType"], "complete",
        "{listened:?}"
    );
}

/// A client that leaves a stateless request's stream (as a client ends its
/// `subscriptions/listen`) is heard at the server: the edge gives the
/// request up and tells the origin (MCP's `notifications/cancelled`), which
/// ends the request's POST. The next request with the same id is served at
/// once (was held behind the first until --request-timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_a_stream_ends_it_at_the_server() {
    use std::sync::atomic::Ordering::Relaxed;
    let (_server, url) = new_server().await;
    let url: &'static str = Box::leak(url.into_boxed_str());
    let pair = mcp_pair(Up::Url(url)).await;
    let edge = pair.ingress("http");
    let body = json!({"jsonrpc":"2.0","id":"sub-1","method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":STATELESS},"name":"forever","arguments":{}}});
    let before = FOREVER_CLOSED.load(Relaxed);
    for round in 0..2 {
        let started = Instant::now();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let req = Request::post(&edge)
            .header("content-type", "application/json")
            .header("accept", http_client::BOTH)
            .header("mcp-protocol-version", STATELESS)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "forever")
            .body(Full::new(Bytes::from(body.to_string())))
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(5), client.request(req))
            .await
            .expect("an answer in time")
            .expect("HTTP");
        assert_eq!(resp.status(), 200);
        let mut body = resp.into_body();
        let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the first event in time");
        let first = first
            .expect("a frame")
            .expect("data")
            .into_data()
            .expect("data");
        assert!(
            String::from_utf8_lossy(&first).contains("sub-1"),
            "round {round}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "round {round}: {:?}",
            started.elapsed()
        );
        // The client leaves.
        drop(body);
        drop(client);
        let deadline = Instant::now() + Duration::from_secs(5);
        while FOREVER_CLOSED.load(Relaxed) < before + round + 1 {
            assert!(
                Instant::now() < deadline,
                "round {round}: the server's stream never ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A subscription lasts `--listen-timeout`, not `--request-timeout`: one
/// that outlives the request timeout ends at its lifetime with its
/// `complete` result on the client's stream (MCP's graceful end), and the
/// server is told (`notifications/cancelled`), so that it sends no more.
/// Before, it ended at the request timeout with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_lasts_its_own_lifetime_and_ends_gracefully() {
    let times = ["--request-timeout", "0.5", "--listen-timeout", "1.5"];
    // One association, so one child: the probe asks the listen's.
    let edge = [&times[..], &["--pool-size", "1"]].concat();
    let pair = mcp_pair_with(Up::Stdio, &times, &edge).await;
    let edge = pair.ingress("http");
    let started = Instant::now();
    let listen = json!({"jsonrpc":"2.0","id":"l-1","method":"subscriptions/listen",
        "params":{"open":true}});
    let (status, body) = post_stateless(&edge, listen, http_client::BOTH, &[]).await;
    let lasted = started.elapsed();
    assert_eq!(status, 200, "{body}");
    let got = event_messages(&body);
    let methods: Vec<_> = got.iter().map(|m| m["method"].clone()).collect();
    assert_eq!(
        methods,
        [
            json!("notifications/subscriptions/acknowledged"),
            json!("notifications/resources/updated"),
            Value::Null
        ],
        "{got:?}"
    );
    let end = &got[2];
    assert_eq!(end["id"], "l-1", "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], "l-1",
        "{end}"
    );
    assert!(
        lasted >= Duration::from_millis(1500) && lasted < Duration::from_millis(4500),
        "{lasted:?}"
    );
    let probe = json!({"jsonrpc":"2.0","id":"c","method":"mock/cancelled","params":{}});
    let (_, body) = post_stateless(&edge, probe, "application/json", &[]).await;
    let r: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(r["result"], json!(["l-1"]), "{r}");
}

/// A subscription whose client does not read what it is sent is ended when
/// what waits for it fills its bound (`--max-body`), not thinned: the
/// server is told (`notifications/cancelled`) and stops, at once. Before,
/// its notifications were dropped one by one until the client was dropped
/// for not reading (`--stall-timeout`, here 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_whose_client_does_not_read_is_ended() {
    use tokio::io::AsyncWriteExt;
    let edge_extra = [
        "--max-body",
        "65536",
        "--stall-timeout",
        "20",
        "--pool-size",
        "1",
    ];
    let pair = mcp_pair_with(Up::Stdio, &[], &edge_extra).await;
    let edge = pair.ingress("http");
    let uri: hyper::Uri = edge.parse().expect("a URL");
    let body = json!({"jsonrpc":"2.0","id":"l-9","method":"subscriptions/listen",
        "params":{"open":true,"flood":5000,"pad":4000,
            "_meta":{"io.modelcontextprotocol/protocolVersion":STATELESS}}})
    .to_string();
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\naccept: {}\r\nmcp-protocol-version: {STATELESS}\r\nmcp-method: subscriptions/listen\r\ncontent-length: {}\r\n\r\n",
        uri.path(),
        uri.authority().expect("an authority"),
        http_client::BOTH,
        body.len()
    );
    let mut client = tokio::net::TcpStream::connect(uri.authority().expect("authority").as_str())
        .await
        .expect("connect");
    client
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .expect("sent");
    // It reads nothing from here on.
    let probe = json!({"jsonrpc":"2.0","id":"c","method":"mock/cancelled","params":{}});
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, got) = post_stateless(&edge, probe.clone(), "application/json", &[]).await;
        let r: Value = serde_json::from_str(&got).expect("JSON");
        if r["result"] == json!(["l-9"]) {
            break;
        }
        assert!(Instant::now() < deadline, "never ended: {r}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(client);
}

/// What an upstream member speaks is found (issue 52, item 1): a server of
/// the session era alone (it knows no `server/discover`) is asked, over
/// stdio with a child of the gateway's own, and a request of the stateless
/// revision to it gets Invalid Request (-32600, "send initialize first")
/// from the origin, naming its version where that is known, as a server of
/// that era refuses a request outside a session. Before, the request
/// reached the server, which ran `tools/call` under its own era's meaning
/// (the mock echoes it). Not `UnsupportedProtocolVersion`: a client of both
/// eras must still fall back to `initialize`. `server/discover` itself
/// crosses, so a client's own probe ends where it ends direct (-32601,
/// 404), and a plain request is carried as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_request_to_a_server_of_the_session_era_is_refused_for_it() {
    let (mock, url) = support::mock_with("http", &["--mcp-sessions-only"]).await;
    let command = format!("{} mock-upstream --stdio --mcp-sessions-only", support::BIN);
    for (upstream, version) in [
        (["--upstream", &url[..]], "which one is not known"),
        (["--upstream-cmd", &command[..]], "2025-11-25"),
    ] {
        let pair = mcp_pair_with(Up::Given, &upstream, &["--pool-size", "1"]).await;
        let edge = pair.ingress("http");
        let call = json!({"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"t"}});
        let (status, body) = post_stateless(&edge, call, "application/json", &[]).await;
        let r: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            (status, &r["error"]["code"]),
            (200, &json!(-32600)),
            "{upstream:?}: {r}"
        );
        let message = r["error"]["message"].as_str().expect("a message");
        assert!(
            message.contains(version) && message.contains("send initialize first"),
            "{upstream:?}: {r}"
        );
        let discover = json!({"jsonrpc":"2.0","id":"d","method":"server/discover","params":{}});
        let (status, body) = post_stateless(&edge, discover, "application/json", &[]).await;
        let r: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            (status, &r["error"]["code"]),
            (404, &json!(-32601)),
            "{upstream:?}: {r}"
        );
        let plain = json!({"jsonrpc":"2.0","id":"p","method":"echo","params":[1]});
        let (status, body) = support::post_headers(
            &edge,
            &plain.to_string(),
            &[
                ("content-type", "application/json"),
                ("accept", "application/json"),
            ],
        )
        .await;
        assert_eq!(status, 200, "{upstream:?}: {body}");
        assert!(body.contains(r#""result":[1]"#), "{upstream:?}: {body}");
    }
    drop(mock);
}

/// A member whose session fails is asked again what it speaks when its next
/// session starts (it may have come back another version).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_is_asked_again_after_its_session_fails() {
    let logs = support::tempdir::Dir::new();
    let command = format!("{} mock-upstream --stdio --mcp-sessions-only", support::BIN);
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--protocol", "mcp", "--upstream-cmd", &command],
        edge_extra: &["--protocol", "mcp", "--pool-size", "1"],
        ingresses: &["http"],
        logs: Some(&logs.0),
        ..PairOptions::default()
    })
    .await;
    let edge = pair.ingress("http");
    let asked = || {
        let log = std::fs::read_to_string(logs.0.join("origin.log")).unwrap_or_default();
        log.matches("what the MCP upstream speaks").count()
    };
    let plain = |method: &str| json!({"jsonrpc":"2.0","id":1,"method":method}).to_string();
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json"),
    ];
    let (status, _) = support::post_headers(&edge, &plain("echo"), &headers).await;
    assert_eq!((status, asked()), (200, 1));
    // The child exits: the session fails, and starts again.
    support::post_headers(&edge, &plain("exit"), &headers).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while asked() < 2 {
        assert!(Instant::now() < deadline, "not asked again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
