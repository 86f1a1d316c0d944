//! Streaming targets: many requests in flight on one connection, each
//! reply matched to its request by id (WebSocket, newline-delimited TCP).
//! A connection is its two halves behind two small traits, [`TextOut`] and
//! [`TextIn`]; one worker drives any pair.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use super::exchange::{classify, reply_id};
use super::{Job, Lane, Outcome, Source};
use crate::mix::Expect;

/// What a streaming connection has sent and not yet had answered.
struct Pending {
    by_id: HashMap<u64, (Expect, Instant, Arc<Job>)>,
}

/// Handles one message from a streaming target.
fn on_stream_message(run: &Lane, pending: &Mutex<Pending>, text: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(text) else {
        run.stats().unmatched(None);
        return;
    };
    let objects = match v {
        Value::Array(a) => a,
        v => vec![v],
    };
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    for o in objects {
        if o.get("method").is_some() {
            // A notification or request from the server: not an answer.
            continue;
        }
        let id = reply_id(&o);
        match id.and_then(|id| p.by_id.remove(&id)) {
            Some((e, intended, _job)) => run.stats().complete(e, intended, classify(&o, None)),
            None => run.stats().unmatched(id),
        }
    }
}

/// Times out what waited too long; on a broken connection, fails the rest.
fn expire(run: &Lane, pending: &Mutex<Pending>, all: Option<&str>) {
    let now = Instant::now();
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    let expired: Vec<u64> = p
        .by_id
        .iter()
        .filter(|(_, (_, t, _))| all.is_some() || now.saturating_duration_since(*t) >= run.timeout)
        .map(|(id, _)| *id)
        .collect();
    let mut s = run.stats();
    for id in expired {
        if let Some((e, intended, _)) = p.by_id.remove(&id) {
            let outcome = match all {
                Some(what) => Outcome::Transport(what.to_owned()),
                None => Outcome::Timeout,
            };
            s.complete(e, intended, outcome);
        }
    }
}

/// Where a streaming connection writes one message.
pub(super) trait TextOut: Send {
    fn send(&mut self, text: String) -> impl std::future::Future<Output = bool> + Send;
}

/// A WebSocket: one text frame per message.
struct WsOut<S>(S);

impl<S> TextOut for WsOut<S>
where
    S: futures_util::Sink<tokio_tungstenite::tungstenite::Message> + Unpin + Send,
{
    async fn send(&mut self, text: String) -> bool {
        use tokio_tungstenite::tungstenite::Message;
        self.0.send(Message::Text(text.into())).await.is_ok()
    }
}

/// Newline-delimited TCP: one line per message.
struct LineOut<W>(W);

impl<W: tokio::io::AsyncWrite + Unpin + Send> TextOut for LineOut<W> {
    async fn send(&mut self, text: String) -> bool {
        let mut line = text.into_bytes();
        line.push(b'\n');
        self.0.write_all(&line).await.is_ok()
    }
}

/// A streaming connection's sending side: each job is registered, its text
/// handed to `send` (moved, not copied), and what waits too long is timed
/// out; after the last send, timing out goes on until the reader is done
/// (or the run stops this task).
async fn send_loop(
    source: &mut Source,
    run: &Lane,
    pending: &Mutex<Pending>,
    reader: &tokio::task::JoinHandle<()>,
    mut out: impl TextOut,
) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tokio::select! {
            job = source.next(run) => {
                let Some(mut job) = job else { break };
                let text = std::mem::take(&mut job.send.text);
                register(pending, &Arc::new(job));
                if !out.send(text).await {
                    expire(run, pending, Some("connection broken"));
                    break;
                }
            }
            _ = tick.tick() => expire(run, pending, None),
        }
    }
    while !reader.is_finished() {
        tick.tick().await;
        expire(run, pending, None);
    }
}

fn register(pending: &Mutex<Pending>, job: &Arc<Job>) {
    let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
    for e in &job.send.expects {
        p.by_id.insert(e.id, (*e, job.intended, job.clone()));
    }
}

/// Where a streaming connection reads messages from.
pub(super) trait TextIn: Send + 'static {
    /// The next message; `None` once the connection is closed or broken.
    fn next(&mut self) -> impl Future<Output = Option<Bytes>> + Send;
}

/// A WebSocket's messages, text or binary (control frames are skipped).
struct WsIn<S>(S);

impl<S> TextIn for WsIn<S>
where
    S: futures_util::Stream<
            Item = Result<
                tokio_tungstenite::tungstenite::Message,
                tokio_tungstenite::tungstenite::Error,
            >,
        > + Unpin
        + Send
        + 'static,
{
    async fn next(&mut self) -> Option<Bytes> {
        use tokio_tungstenite::tungstenite::Message;
        loop {
            match self.0.next().await? {
                Ok(Message::Text(t)) => return Some(Bytes::from(t)),
                Ok(Message::Binary(b)) => return Some(b),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }
}

/// Newline-delimited TCP: one message per line.
struct LinesIn<R>(tokio::io::Lines<R>);

impl<R: tokio::io::AsyncBufRead + Unpin + Send + 'static> TextIn for LinesIn<R> {
    async fn next(&mut self) -> Option<Bytes> {
        self.0.next_line().await.ok()?.map(Bytes::from)
    }
}

/// Drives one streaming connection once `connect` has opened it: a reader
/// task settles what comes back, the sender registers and writes each job
/// of `source`. A connection that could not be opened fails every job
/// with the reason.
pub(super) async fn worker<O: TextOut, I: TextIn>(
    connect: impl Future<Output = Result<(O, I), String>>,
    mut source: Source,
    run: Lane,
) {
    let (out, mut input) = match connect.await {
        Ok(halves) => halves,
        Err(why) => return source.fail_every_job(&run, &why).await,
    };
    let pending = Arc::new(Mutex::new(Pending {
        by_id: HashMap::new(),
    }));
    let reader = {
        let (pending, run) = (pending.clone(), run.clone());
        tokio::spawn(async move {
            while let Some(message) = input.next().await {
                on_stream_message(&run, &pending, &message);
            }
            expire(&run, &pending, Some("connection closed"));
        })
    };
    send_loop(&mut source, &run, &pending, &reader, out).await;
}

/// The read buffer of a WebSocket connection: small, as the gateway's own
/// (tungstenite zero-fills its whole read buffer, 128 KiB by default, before
/// each read).
const WS_READ_BUFFER: usize = 16 << 10;

/// A WebSocket target: its URL (`ws://`, `wss://`), the TLS client of a
/// `wss://` one, and the headers of its handshake.
#[derive(Clone, Debug)]
pub struct WsTarget {
    /// As the summary shows it (a key-like path segment and a query left
    /// out).
    pub url: String,
    /// As given: what the handshake asks for.
    request_url: String,
    authority: String,
    tls: Option<crate::tls::Tls>,
    pub headers: Vec<crate::header::Header>,
}

impl WsTarget {
    pub fn new(
        url: &str,
        tls: &crate::tls::TlsOptions,
        headers: Vec<crate::header::Header>,
    ) -> Result<Self, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
        let (authority, tls) = crate::http::endpoint(&uri, ["ws", "wss"], tls, &[b"http/1.1"])?;
        Ok(Self {
            url: crate::http::shown(&uri),
            request_url: url.to_owned(),
            authority,
            tls,
            headers,
        })
    }
}

impl std::str::FromStr for WsTarget {
    type Err = String;

    /// A `ws://` or `wss://` URL (the system's roots), no headers.
    fn from_str(url: &str) -> Result<Self, String> {
        Self::new(url, &Default::default(), Vec::new())
    }
}

/// Opens a WebSocket to `target`.
pub(super) async fn ws(target: WsTarget) -> Result<(impl TextOut, impl TextIn), String> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
    // Messages as large as a gateway may carry, in one frame (tungstenite's
    // default frame limit is 16 MiB).
    let max = npamp_gateway::gateway::MAX_BODY_LIMIT;
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .max_message_size(Some(max))
        .max_frame_size(Some(max));
    let mut request = target
        .request_url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("WebSocket request: {e}"))?;
    for h in &target.headers {
        // Checked when the run was set up (`Header`): both are valid.
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_str(&h.value),
        ) else {
            return Err(format!("WebSocket request: header {h:?} refused"));
        };
        request.headers_mut().append(name, value);
    }
    let stream = crate::tls::connect(&target.authority, target.tls.as_ref())
        .await
        .map_err(|e| format!("WebSocket {e}"))?;
    let (ws, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(config))
        .await
        .map_err(|e| format!("WebSocket connect: {e}"))?;
    let (sink, stream) = ws.split();
    Ok((WsOut(sink), WsIn(stream)))
}

/// Opens a TCP connection to `addr` for newline-delimited JSON-RPC.
pub(super) async fn tcp(addr: String) -> Result<(impl TextOut, impl TextIn), String> {
    let tcp = tokio::net::TcpStream::connect(addr.as_str())
        .await
        .map_err(|e| format!("TCP connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (r, w) = tcp.into_split();
    Ok((LineOut(w), LinesIn(tokio::io::BufReader::new(r).lines())))
}

/// LSP over TCP: each message with its `Content-Length` header, handed to
/// the connection's writer task ([`lsp_writer`]).
struct LspOut(mpsc::Sender<String>);

impl TextOut for LspOut {
    async fn send(&mut self, text: String) -> bool {
        self.0.send(text).await.is_ok()
    }
}

/// LSP over TCP: messages from the server, less its requests to the
/// editor, which are answered here (as an editor answers them) through the
/// writer task, never waiting: the reader must keep reading while the
/// server, blocked on its own writes, takes nothing from the connection.
struct LspIn {
    read: npamp_gateway::lsp::LspReader<tokio::net::tcp::OwnedReadHalf>,
    answers: mpsc::UnboundedSender<String>,
}

impl TextIn for LspIn {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            let message = match self.read.next().await {
                Ok(Some(m)) => m,
                // One message over the limit, skipped: the stream reads on.
                Err(e) if npamp_gateway::lines::LineSkipped::of(&e).is_some() => continue,
                Ok(None) | Err(_) => return None,
            };
            match editor_answer(&message) {
                Some(answer) => {
                    if self.answers.send(answer).is_err() {
                        return None;
                    }
                }
                None => return Some(message),
            }
        }
    }
}

/// Writes an LSP connection's messages: the editor's answers to the server
/// first, then the load. Ends when the load's sender is gone.
async fn lsp_writer(
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut load: mpsc::Receiver<String>,
    mut answers: mpsc::UnboundedReceiver<String>,
) {
    loop {
        let text = tokio::select! {
            biased;
            Some(a) = answers.recv() => a,
            m = load.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        if npamp_gateway::lsp::write_message(&mut w, text.as_bytes())
            .await
            .is_err()
        {
            return;
        }
    }
}

/// What an editor answers a server's request with, when `message` is one:
/// `workspace/configuration` gets a `null` (no settings) for each item
/// asked, `workspace/applyEdit` `{"applied": false}`, any other request
/// (`client/registerCapability`, `window/workDoneProgress/create`, ...) a
/// `null` result.
fn editor_answer(message: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(message).ok()?;
    let (method, id) = (v.get("method")?.as_str()?, v.get("id")?);
    let result = match method {
        "workspace/configuration" => {
            let items = v["params"]["items"].as_array().map_or(0, Vec::len);
            Value::Array(vec![Value::Null; items])
        }
        // A load generator applies no edit.
        "workspace/applyEdit" => serde_json::json!({"applied": false}),
        _ => Value::Null,
    };
    Some(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
}

/// How long a language server may take to answer `initialize`.
const LSP_INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens a TCP connection to a language server (or an edge's TCP ingress)
/// at `addr` and opens an LSP session on it: `initialize` (answered),
/// `initialized`, then a `didOpen` of each of the scenario's documents.
pub(super) async fn lsp(
    addr: String,
    session: Arc<crate::scenario::LspSession>,
) -> Result<(impl TextOut, impl TextIn), String> {
    use serde_json::json;
    let tcp = tokio::net::TcpStream::connect(addr.as_str())
        .await
        .map_err(|e| format!("TCP connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (r, w) = tcp.into_split();
    let (load, load_rx) = mpsc::channel(1024);
    let (answers, answers_rx) = mpsc::unbounded_channel();
    tokio::spawn(lsp_writer(w, load_rx, answers_rx));
    let max = npamp_gateway::gateway::MAX_BODY_LIMIT;
    let mut input = LspIn {
        read: npamp_gateway::lsp::LspReader::new(r, max),
        answers,
    };
    let mut out = LspOut(load);
    let id = "npamp-loadgen-initialize";
    let initialize = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "processId": null,
        "rootUri": session.root_uri,
        "capabilities": {
            "workspace": {"configuration": true},
            "window": {"workDoneProgress": true},
            "textDocument": {"hover": {}, "completion": {}, "definition": {}},
        },
    }});
    if !out.send(initialize.to_string()).await {
        return Err("LSP: sending initialize failed".into());
    }
    let answered = async {
        while let Some(m) = input.next().await {
            let v: Value = serde_json::from_slice(&m).unwrap_or_default();
            if v.get("id").and_then(Value::as_str) == Some(id) {
                return match v.get("error") {
                    Some(e) => Err(format!("LSP: initialize refused: {e}")),
                    None => Ok(()),
                };
            }
        }
        Err("LSP: the connection closed before initialize was answered".to_owned())
    };
    tokio::time::timeout(LSP_INITIALIZE_TIMEOUT, answered)
        .await
        .map_err(|_| format!("LSP: initialize not answered in {LSP_INITIALIZE_TIMEOUT:?}"))??;
    let mut opening = vec![json!({"jsonrpc": "2.0", "method": "initialized", "params": {}})];
    for d in &session.open {
        opening.push(json!({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {
            "textDocument": {"uri": d.uri, "languageId": d.language_id, "version": 1, "text": d.text},
        }}));
    }
    for m in opening {
        if !out.send(m.to_string()).await {
            return Err("LSP: opening the session failed".into());
        }
    }
    Ok((out, input))
}
