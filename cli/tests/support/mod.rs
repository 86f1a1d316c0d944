//! Helpers shared by the integration tests: gateway processes on
//! 127.0.0.1, a mock upstream, clients of every ingress.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

pub mod pki;
pub mod udp_relay;

pub const BIN: &str = env!("CARGO_BIN_EXE_npamp-gateway");

/// A child process killed when dropped, with what it printed on stdout.
pub struct Proc {
    pub child: Child,
    pub lines: Vec<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Proc {
    /// Starts `npamp-gateway ARGS` and reads stdout until a line starting
    /// with `ready` appears (the last address it prints).
    pub async fn start(args: &[&str], ready: &str) -> Proc {
        Self::start_command(Command::new(BIN).stderr(Stdio::inherit()), args, ready).await
    }

    /// [`Proc::start`] logging at info level (and above) into `log`.
    pub async fn start_logged(args: &[&str], ready: &str, log: &std::path::Path) -> Proc {
        let file = std::fs::File::create(log).expect("log file");
        let mut cmd = Command::new(BIN);
        cmd.env("RUST_LOG", "info").stderr(Stdio::from(file));
        Self::start_command(&mut cmd, args, ready).await
    }

    async fn start_command(cmd: &mut Command, args: &[&str], ready: &str) -> Proc {
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start npamp-gateway");
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout).lines();
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = tokio::time::timeout(left, reader.next_line())
                .await
                .unwrap_or_else(|_| panic!("{args:?} did not print {ready:?}: {lines:?}"))
                .expect("read stdout")
                .unwrap_or_else(|| panic!("{args:?} exited: {lines:?}"));
            let done = line.starts_with(ready);
            lines.push(line);
            if done {
                break;
            }
        }
        // Keep draining stdout so the process never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = reader.next_line().await {} });
        Proc { child, lines }
    }

    /// The value after `prefix` on the first line that starts with it.
    pub fn printed(&self, prefix: &str) -> String {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in {:?}", self.lines))
            .trim()
            .to_owned()
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }
}

pub async fn mock(kind: &str) -> (Proc, String) {
    mock_with(kind, &[]).await
}

/// [`mock`], with its flags `extra`.
pub async fn mock_with(kind: &str, extra: &[&str]) -> (Proc, String) {
    let listen = format!("{kind}://127.0.0.1:0");
    let args = [&["mock-upstream", "--listen", &listen][..], extra].concat();
    let p = Proc::start(&args, "mock upstream").await;
    let url = p.printed("mock upstream ");
    (p, url)
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Up {
    Http,
    Ws,
    Stdio,
    /// An upstream the test runs itself, at this `--upstream` URL.
    Url(&'static str),
    /// The test names it in the origin's extra arguments.
    Given,
}

/// An edge and an origin process, pinned to each other's identities.
pub struct Pair {
    pub upstream: Option<Proc>,
    /// The mock upstream's URL (HTTP and WebSocket upstreams).
    pub upstream_url: Option<String>,
    /// The origin's command line, with its listener's actual address.
    pub origin_args: Vec<String>,
    pub origin: Proc,
    pub edge: Proc,
    pub keys: tempdir::Dir,
    pub origin_pub: String,
    /// Between the edge and the origin, where asked for
    /// ([`PairOptions::hang`]).
    pub relay: Option<udp_relay::UdpRelay>,
}

pub mod tempdir {
    use std::path::PathBuf;

    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

    pub struct Dir(pub PathBuf);

    impl Dir {
        pub fn new() -> Self {
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("npamp-pair-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).expect("temp dir");
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// An edge with one HTTP ingress in front of `peer` (`extra`: identity and
/// trust flags); the edge and its ingress URL.
pub async fn http_edge(peer: &str, extra: &[&str]) -> (Proc, String) {
    start_http_edge(peer, extra, "ingress").await
}

/// [`http_edge`] serving /metrics too, on a port of its own (the
/// `metrics ` line it printed).
pub async fn http_edge_with_metrics(peer: &str, extra: &[&str]) -> (Proc, String) {
    let extra = [extra, &["--metrics", "127.0.0.1:0"]].concat();
    start_http_edge(peer, &extra, "metrics").await
}

async fn start_http_edge(peer: &str, extra: &[&str], ready: &str) -> (Proc, String) {
    let mut args = vec!["serve", "--ingress", "http://127.0.0.1:0", "--peer", peer];
    args.extend(extra);
    let edge = Proc::start(&args, ready).await;
    let url = edge.printed("ingress ");
    (edge, url)
}

pub fn keygen(path: &std::path::Path) -> String {
    let out = std::process::Command::new(BIN)
        .args(["keygen", "--out"])
        .arg(path)
        .output()
        .expect("keygen");
    assert!(out.status.success(), "keygen failed");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned()
}

pub struct PairOptions<'a> {
    pub transport: &'a str,
    pub upstream: Up,
    pub origin_extra: &'a [&'a str],
    pub edge_extra: &'a [&'a str],
    /// The edge's ingress schemes (each on 127.0.0.1:0).
    pub ingresses: &'a [&'a str],
    /// The edge reaches the origin (over QUIC) through a
    /// [`udp_relay::UdpRelay`] that leaves this connection hanging
    /// mid-handshake.
    pub hang: Option<udp_relay::Hang>,
    /// Where the origin and the edge log, at info and above (`origin.log`,
    /// `edge.log` in this directory); else their stderr is the test's.
    pub logs: Option<&'a std::path::Path>,
}

impl Default for PairOptions<'_> {
    fn default() -> Self {
        Self {
            transport: "quic",
            upstream: Up::Http,
            origin_extra: &[],
            edge_extra: &[],
            ingresses: &["http", "ws", "tcp"],
            hang: None,
            logs: None,
        }
    }
}

impl Pair {
    pub async fn start(o: PairOptions<'_>) -> Pair {
        let keys = tempdir::Dir::new();
        let (origin_key, edge_key) = (keys.0.join("origin.key"), keys.0.join("edge.key"));
        let (origin_pub, edge_pub) = (keygen(&origin_key), keygen(&edge_key));
        let (upstream, up_args): (Option<Proc>, Vec<String>) = match o.upstream {
            Up::Http => {
                let (p, url) = mock("http").await;
                (Some(p), vec!["--upstream".into(), url])
            }
            Up::Ws => {
                let (p, url) = mock("ws").await;
                (Some(p), vec!["--upstream".into(), url])
            }
            Up::Stdio => (
                None,
                vec![
                    "--upstream-cmd".into(),
                    format!("{BIN} mock-upstream --stdio"),
                ],
            ),
            Up::Url(url) => (None, vec!["--upstream".into(), url.to_owned()]),
            Up::Given => (None, Vec::new()),
        };
        let listen = format!("{}://127.0.0.1:0", o.transport);
        let mut args: Vec<&str> = vec!["serve", "--listen", &listen];
        args.extend(up_args.iter().map(String::as_str));
        let origin_key = origin_key.to_string_lossy().into_owned();
        args.extend(["--identity", &origin_key, "--trust", &edge_pub]);
        args.extend(o.origin_extra);
        // An origin with metrics prints their address last.
        let ready = if o.origin_extra.contains(&"--metrics") {
            "metrics"
        } else {
            "listening on"
        };
        let origin = match o.logs {
            Some(dir) => Proc::start_logged(&args, ready, &dir.join("origin.log")).await,
            None => Proc::start(&args, ready).await,
        };
        let peer = origin.printed("listening on ");
        let origin_args: Vec<String> = args
            .iter()
            .map(|a| {
                if *a == listen {
                    peer.clone()
                } else {
                    (*a).to_owned()
                }
            })
            .collect();
        let upstream_url = match o.upstream {
            Up::Stdio | Up::Given => None,
            _ => up_args.get(1).cloned(),
        };
        let relay = match o.hang {
            Some(hang) => {
                let target = peer
                    .strip_prefix("quic://")
                    .and_then(|a| a.parse().ok())
                    .expect("a relay needs a quic:// origin");
                Some(udp_relay::UdpRelay::start(target, hang).await)
            }
            None => None,
        };
        let edge_peer = match &relay {
            Some(r) => format!("quic://{}", r.addr),
            None => peer.clone(),
        };
        let edge_key = edge_key.to_string_lossy().into_owned();
        let ingresses: Vec<String> = o
            .ingresses
            .iter()
            .map(|scheme| format!("{scheme}://127.0.0.1:0"))
            .collect();
        let mut args = vec!["serve"];
        for i in &ingresses {
            args.extend(["--ingress", i.as_str()]);
        }
        args.extend([
            "--peer",
            &edge_peer,
            "--identity",
            &edge_key,
            "--trust",
            &origin_pub,
            "--metrics",
            "127.0.0.1:0",
        ]);
        args.extend(o.edge_extra);
        let edge = match o.logs {
            Some(dir) => Proc::start_logged(&args, "metrics", &dir.join("edge.log")).await,
            None => Proc::start(&args, "metrics").await,
        };
        Pair {
            upstream,
            upstream_url,
            origin_args,
            origin,
            edge,
            keys,
            origin_pub,
            relay,
        }
    }

    /// kill -9 the mock upstream.
    pub fn kill_upstream(&mut self) {
        if let Some(mut p) = self.upstream.take() {
            let _ = p.child.start_kill();
        }
    }

    /// Starts the mock upstream again at `url` (its old address).
    pub async fn restart_upstream(&mut self, url: &str) {
        let listen = url.trim_end_matches('/');
        self.upstream =
            Some(Proc::start(&["mock-upstream", "--listen", listen], "mock upstream").await);
    }

    /// SIGTERM the origin, wait until it has drained and exited, and start
    /// it again on the same address.
    pub async fn restart_origin(&mut self) {
        self.restart_origin_with("-TERM").await;
    }

    /// Sends the origin `signal` (`-TERM`, `-KILL`), waits until it has
    /// exited, and starts it again on the same address.
    pub async fn restart_origin_with(&mut self, signal: &str) {
        let pid = self.origin.pid();
        let _ = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status();
        let exited = tokio::time::timeout(Duration::from_secs(15), self.origin.child.wait()).await;
        assert!(
            matches!(exited, Ok(Ok(_))),
            "origin did not exit on {signal}"
        );
        let args: Vec<&str> = self.origin_args.iter().map(String::as_str).collect();
        self.origin = Proc::start(&args, "listening on").await;
    }

    pub fn ingress(&self, scheme: &str) -> String {
        self.edge
            .lines
            .iter()
            .find_map(|l| l.strip_prefix("ingress ").filter(|u| u.starts_with(scheme)))
            .unwrap_or_else(|| panic!("no {scheme} ingress in {:?}", self.edge.lines))
            .to_owned()
    }

    pub fn peer(&self) -> String {
        self.origin.printed("listening on ")
    }

    /// A `connect` (stdio ingress) process with the edge's identity.
    pub async fn stdio_client(&self) -> Client {
        let key = self.keys.0.join("edge.key").to_string_lossy().into_owned();
        Client::stdio(
            &self.peer(),
            &["--identity", &key, "--trust", &self.origin_pub],
        )
        .await
    }
}

/// POSTs a body; returns the status and the body.
pub async fn post(url: &str, body: &str) -> (u16, String) {
    post_with(url, body, "application/json").await
}

pub async fn post_with(url: &str, body: &str, content_type: &str) -> (u16, String) {
    post_headers(url, body, &[("content-type", content_type)]).await
}

/// POSTs a body with these headers; returns the status and the body.
pub async fn post_headers(url: &str, body: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = hyper::Request::post(url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    answer(client.request(req)).await
}

/// The status and body of an HTTP answer, within 20 s.
async fn answer(resp: hyper_util::client::legacy::ResponseFuture) -> (u16, String) {
    let resp = tokio::time::timeout(Duration::from_secs(20), resp)
        .await
        .expect("HTTP answer in time")
        .expect("HTTP answer");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Asks the gateway `p` to reload its configuration (SIGHUP).
pub fn hup(p: &Proc) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &p.pid().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

pub fn parse(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A message-stream client: WebSocket, TCP or stdio (`connect`).
pub enum Client {
    Ws(
        tokio_tungstenite::WebSocketStream<
            tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
        >,
    ),
    Lines {
        write: Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
        read: tokio::io::Lines<BufReader<Box<dyn tokio::io::AsyncRead + Unpin + Send>>>,
        _proc: Option<Child>,
    },
}

impl Client {
    /// A WebSocket client whose handshake carries `Authorization: Bearer
    /// TOKEN`.
    pub async fn ws_with_token(url: &str, token: &str) -> Client {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = url.into_client_request().expect("request");
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("header"),
        );
        let (ws, _) = tokio_tungstenite::connect_async(request)
            .await
            .expect("WebSocket");
        Client::Ws(ws)
    }

    pub async fn ws(url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url)
            .await
            .expect("WebSocket");
        Client::Ws(ws)
    }

    pub async fn tcp(url: &str) -> Client {
        let addr = url.strip_prefix("tcp://").expect("tcp URL");
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("TCP");
        let (r, w) = tcp.into_split();
        Client::Lines {
            write: Box::new(w),
            read: BufReader::new(Box::new(r) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)
                .lines(),
            _proc: None,
        }
    }

    pub async fn stdio(peer: &str, extra: &[&str]) -> Client {
        let mut child = Command::new(BIN)
            .args(["connect", "--peer", peer])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("connect");
        let write = Box::new(child.stdin.take().expect("stdin"));
        let read = Box::new(child.stdout.take().expect("stdout"));
        Client::Lines {
            write,
            read: BufReader::new(read as Box<dyn tokio::io::AsyncRead + Unpin + Send>).lines(),
            _proc: Some(child),
        }
    }

    pub async fn send(&mut self, text: &str) {
        match self {
            Client::Ws(ws) => ws
                .send(tokio_tungstenite::tungstenite::Message::Text(text.into()))
                .await
                .expect("send"),
            Client::Lines { write, .. } => {
                write.write_all(text.as_bytes()).await.expect("send");
                write.write_all(b"\n").await.expect("send");
                write.flush().await.expect("flush");
            }
        }
    }

    /// The next message, or `None` when the connection ended.
    pub async fn recv(&mut self) -> Option<Value> {
        let next = async {
            match self {
                Client::Ws(ws) => loop {
                    match ws.next().await {
                        Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t))) => {
                            return Some(parse(&t));
                        }
                        Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | None => {
                            return None;
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(_)) => return None,
                    }
                },
                Client::Lines { read, .. } => {
                    read.next_line().await.ok().flatten().map(|l| parse(&l))
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), next)
            .await
            .expect("a message in time")
    }

    pub async fn call(&mut self, req: Value) -> Value {
        self.send(&req.to_string()).await;
        self.recv().await.expect("a reply")
    }
}

/// GETs a URL; returns the status and the body.
pub async fn http_get(url: &str) -> (u16, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    answer(client.get(url.parse().expect("uri"))).await
}

/// The value of an unlabelled metric of a gateway process started with
/// `--metrics` (0 when absent).
pub async fn metric(gateway: &Proc, name: &str) -> u64 {
    let (status, text) = http_get(&gateway.printed("metrics ")).await;
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

/// Waits (at most `limit`) until `metric(gateway, name)` is at least `want`.
pub async fn metric_reaches(gateway: &Proc, name: &str, want: u64, limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let v = metric(gateway, name).await;
        if v >= want || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A TCP listener on 127.0.0.1, on a port of the system's choosing.
pub async fn loopback() -> tokio::net::TcpListener {
    tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
}

/// Serves HTTP/1.1 on `listener` for as long as the test runs, each
/// request answered by `answer` (a server of the test's own: an upstream,
/// an authorization server).
pub fn serve_http<F, Fut, B>(listener: tokio::net::TcpListener, answer: F)
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = hyper::Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
}

/// A response of a test's own server: `status`, `headers`, `body`.
pub fn response(
    status: u16,
    headers: &[(&str, String)],
    body: String,
) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
    for (k, v) in headers {
        let name = hyper::header::HeaderName::from_bytes(k.as_bytes()).expect("a header name");
        r.headers_mut()
            .append(name, v.parse().expect("a header value"));
    }
    r
}
