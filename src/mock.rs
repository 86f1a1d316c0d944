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
//! - `exit` → the process exits at once with status 3, no reply (a crash);
//! - `nosuch` → -32601 Method not found;
//! - any other method → `result` = the params, so any API's method names
//!   (`eth_call`, `tools/call`, ...) can be replayed against the mock.
//!
//! Notifications get no reply; batches get an array.

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

use crate::gateway::Io;
use crate::gateway::lines::{LineReader, write_line};

/// What the mock does with one message, given a way to push messages to
/// the client (sessions only).
struct Peer {
    push: Option<mpsc::Sender<Bytes>>,
    /// Server-originated requests awaiting the client's answer.
    asked: Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>,
    next: Arc<AtomicU64>,
}

impl Peer {
    fn new(push: Option<mpsc::Sender<Bytes>>) -> Self {
        Self {
            push,
            asked: Arc::default(),
            next: Arc::default(),
        }
    }

    async fn push(&self, v: Value) {
        if let Some(p) = &self.push {
            let _ = p.send(Bytes::from(v.to_string())).await;
        }
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
            "exit" => std::process::exit(3),
            "nosuch" => Some(
                json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}}),
            ),
            _ => ok(params),
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

/// Serves HTTP(S): each POST body is one message or batch.
pub async fn serve_http(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
    let peer = Arc::new(Peer::new(None));
    while let Some(tcp) = accept(&listener, &tls).await {
        let peer = peer.clone();
        tokio::spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let peer = peer.clone();
                    async move {
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let mut resp = match body {
                            Ok(body) => match peer.handle(&body).await {
                                Some(reply) => hyper::Response::new(Full::new(reply)),
                                None => {
                                    let mut r = hyper::Response::new(Full::new(Bytes::new()));
                                    *r.status_mut() = hyper::StatusCode::NO_CONTENT;
                                    r
                                }
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
        if let Some(reply) = peer.handle(&text).await {
            let _ = out.send(reply).await;
        }
    });
}

/// Serves WebSocket clients (over TLS when `tls` is given): one message
/// per text frame.
pub async fn serve_ws(listener: TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
    use tokio_tungstenite::tungstenite::Message;
    while let Some(tcp) = accept(&listener, &tls).await {
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
            let peer = Arc::new(Peer::new(Some(tx.clone())));
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
pub async fn serve_tcp(listener: TcpListener) {
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        tokio::spawn(async move {
            let (r, w) = tcp.into_split();
            lines(r, w).await;
        });
    }
}

/// Serves one line-delimited session on a reader and writer (stdio, TCP).
pub async fn lines<R, W>(r: R, mut w: W)
where
    R: tokio::io::AsyncRead + Unpin + Send,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::channel::<Bytes>(1024);
    let writer = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if write_line(&mut w, &b).await.is_err() {
                return;
            }
            if rx.is_empty() && tokio::io::AsyncWriteExt::flush(&mut w).await.is_err() {
                return;
            }
        }
    });
    let peer = Arc::new(Peer::new(Some(tx.clone())));
    let mut reader = LineReader::new(r, 16 << 20);
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
        let bad = || {
            format!(
                "bad address {s:?}: expected http://, https://, ws://, wss:// or tcp://HOST:PORT"
            )
        };
        let (scheme, rest) = s.split_once("://").ok_or_else(bad)?;
        let addr = std::net::ToSocketAddrs::to_socket_addrs(rest.trim_end_matches('/'))
            .map_err(|_| bad())?
            .next()
            .ok_or_else(bad)?;
        match scheme {
            "http" => Ok(Self::Http(addr)),
            "ws" => Ok(Self::Ws(addr)),
            "tcp" => Ok(Self::Tcp(addr)),
            "https" => Ok(Self::Https(addr)),
            "wss" => Ok(Self::Wss(addr)),
            _ => Err(bad()),
        }
    }
}

/// Binds a mock and serves it in the background; returns the bound address.
/// `tls` (a server config) is needed for `https://` and `wss://`.
pub async fn spawn(
    addr: MockAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
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
            tokio::spawn(serve_http(listener, None));
            MockAddr::Http(local)
        }
        MockAddr::Https(_) => {
            tokio::spawn(serve_http(listener, acceptor));
            MockAddr::Https(local)
        }
        MockAddr::Ws(_) => {
            tokio::spawn(serve_ws(listener, None));
            MockAddr::Ws(local)
        }
        MockAddr::Wss(_) => {
            tokio::spawn(serve_ws(listener, acceptor));
            MockAddr::Wss(local)
        }
        MockAddr::Tcp(_) => {
            tokio::spawn(serve_tcp(listener));
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
