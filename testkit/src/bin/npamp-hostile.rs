//! Hostile clients, at full size, for `results/run-hostile.sh`: each
//! attack on an edge's ingress that an edge must survive, run for a while
//! with a healthy client measured beside it. It prints one JSON object: what
//! the attackers got, and the healthy client's requests (answered right,
//! failed, answered wrong; latencies).
//!
//! The attackers connect from 127.0.0.1, the healthy client from
//! `--healthy-from` (127.0.0.2): one address is one client, and a per-source
//! limit must not count the healthy client with the attackers. Loopback
//! only: every target is checked to be a loopback address.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, Subcommand};
use futures_util::{SinkExt, StreamExt};
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Barrier;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(
    about = "Hostile clients against a gateway edge, with a healthy client measured beside them"
)]
struct Cli {
    /// The edge's HTTP ingress (`http://127.0.0.1:PORT/`), where the
    /// healthy client POSTs `echo`.
    #[arg(long)]
    healthy: String,
    /// The healthy client's source address.
    #[arg(long, default_value = "127.0.0.2")]
    healthy_from: IpAddr,
    /// One healthy request (a new connection each) every this many ms.
    #[arg(long, default_value_t = 250)]
    every_ms: u64,
    /// How long a healthy request may take before it counts as failed (ms).
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// The healthy client is an MCP client: it opens a session first
    /// (`initialize`) and asks within it.
    #[arg(long)]
    healthy_mcp: bool,
    /// How long the run lasts (s): the attack and the healthy client.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[command(subcommand)]
    attack: Attack,
}

#[derive(Subcommand)]
enum Attack {
    /// HTTP/2 (prior knowledge) connections that PING and never ask.
    H2Ping {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 4200)]
        connections: usize,
        #[arg(long, default_value_t = 4000)]
        interval_ms: u64,
    },
    /// HTTP/2 streams whose bodies stop one octet short of `size`.
    H2Bodies {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 4)]
        connections: usize,
        #[arg(long, default_value_t = 200)]
        streams: usize,
        #[arg(long, default_value_t = (1 << 20) - 1024)]
        size: usize,
    },
    /// HTTP/1.1 chunked bodies of one octet per chunk, never ended.
    H1Trickle {
        #[arg(long)]
        target: SocketAddr,
        #[arg(long, default_value_t = 20)]
        connections: usize,
        #[arg(long, default_value_t = (1 << 20) - 1024)]
        size: usize,
    },
    /// MCP `initialize` after `initialize` from one address: sessions
    /// opened and never ended.
    McpFlood {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 1020)]
        sessions: usize,
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
    },
    /// MCP `initialize` from `clients` clients at the same moment, each
    /// from an address of its own (127.1.x.y).
    McpHerd {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 300)]
        clients: usize,
    },
    /// WebSocket clients whose first requests are sent at the same moment,
    /// each from an address of its own (127.1.x.y).
    WsHerd {
        #[arg(long)]
        url: String,
        #[arg(long, default_value_t = 300)]
        clients: usize,
    },
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("npamp-hostile: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(cli: Cli) -> Result<Value, Error> {
    let healthy_target = loopback_of(&cli.healthy)?;
    let run_for = Duration::from_secs(cli.seconds);
    let until = Instant::now() + run_for;
    let session = if cli.healthy_mcp {
        let (status, text) = exchange(
            healthy_target,
            cli.healthy_from,
            &path_of(&cli.healthy),
            &initialize_body(),
            None,
        )
        .await?;
        let id = header(&text, "mcp-session-id").ok_or_else(|| {
            format!("the healthy client's initialize got {status}, no session: {text}")
        })?;
        Some(id.to_owned())
    } else {
        None
    };
    let healthy = tokio::spawn(healthy(
        Asker {
            path: path_of(&cli.healthy),
            target: healthy_target,
            from: cli.healthy_from,
            session,
        },
        Duration::from_millis(cli.every_ms),
        Duration::from_millis(cli.timeout_ms),
        until,
    ));
    let (name, attackers) = match cli.attack {
        Attack::H2Ping {
            target,
            connections,
            interval_ms,
        } => {
            let interval = Duration::from_millis(interval_ms);
            (
                "h2-ping",
                h2_ping(loopback(target)?, connections, interval, until).await,
            )
        }
        Attack::H2Bodies {
            target,
            connections,
            streams,
            size,
        } => (
            "h2-bodies",
            h2_bodies(loopback(target)?, connections, streams, size, until).await,
        ),
        Attack::H1Trickle {
            target,
            connections,
            size,
        } => (
            "h1-trickle",
            h1_trickle(loopback(target)?, connections, size, until).await,
        ),
        Attack::McpFlood {
            url,
            sessions,
            concurrency,
        } => {
            loopback_of(&url)?;
            (
                "mcp-flood",
                mcp_flood(url, sessions, concurrency, until).await,
            )
        }
        Attack::McpHerd { url, clients } => {
            loopback_of(&url)?;
            ("mcp-herd", mcp_herd(url, clients).await)
        }
        Attack::WsHerd { url, clients } => {
            loopback_of(&url)?;
            ("ws-herd", ws_herd(url, clients).await)
        }
    };
    let healthy = healthy.await?;
    Ok(
        json!({ "attack": name, "seconds": cli.seconds, "attackers": attackers, "healthy": healthy }),
    )
}

fn loopback(addr: SocketAddr) -> Result<SocketAddr, Error> {
    if addr.ip().is_loopback() {
        Ok(addr)
    } else {
        Err(format!("{addr} is not a loopback address: these clients attack loopback only").into())
    }
}

/// The loopback `host:port` of an `http://` or `ws://` URL.
fn loopback_of(url: &str) -> Result<SocketAddr, Error> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("{url}: not a URL"))?;
    let host_port = rest.split('/').next().unwrap_or(rest);
    let addr: SocketAddr = host_port
        .parse()
        .map_err(|e| format!("{url}: the host must be a loopback IP with a port: {e}"))?;
    loopback(addr)
}

/// Counts by outcome, printed as a JSON object.
#[derive(Default)]
struct Tally(BTreeMap<String, u64>);

impl Tally {
    fn add(&mut self, outcome: impl Into<String>) {
        *self.0.entry(outcome.into()).or_default() += 1;
    }

    fn json(&self) -> Value {
        json!(self.0)
    }
}

/// Where and how the healthy client asks.
struct Asker {
    path: String,
    target: SocketAddr,
    from: IpAddr,
    /// The MCP session it asks in, if it is an MCP client.
    session: Option<String>,
}

/// The healthy client: an `echo` with a fresh number, on a new connection
/// from `from`, every `every` until `until`.
async fn healthy(asker: Asker, every: Duration, timeout: Duration, until: Instant) -> Value {
    let mut latency = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)
        .expect("static histogram bounds");
    let mut outcomes = Tally::default();
    let mut n = 0u64;
    let mut next = Instant::now();
    while next < until {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        n += 1;
        let nonce = format!("healthy-{n}");
        let body = json!({"jsonrpc":"2.0","id":n,"method":"echo","params":[nonce]}).to_string();
        let asked = Instant::now();
        let answer = exchange(
            asker.target,
            asker.from,
            &asker.path,
            &body,
            asker.session.as_deref(),
        );
        let answer = tokio::time::timeout(timeout, answer).await;
        let outcome = match answer {
            Err(_) => "timed out".to_owned(),
            Ok(Err(e)) => format!("failed: {}", first_words(&e.to_string())),
            Ok(Ok((200, text))) if text.contains(&nonce) => {
                let us = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
                let _ = latency.record(us.max(1));
                "ok".to_owned()
            }
            Ok(Ok((200, _))) => "WRONG ANSWER".to_owned(),
            Ok(Ok((status, _))) => format!("status {status}"),
        };
        outcomes.add(outcome);
    }
    let ms = |q: f64| latency.value_at_quantile(q) as f64 / 1000.0;
    let asked = n;
    let ok = outcomes.0.get("ok").copied().unwrap_or(0);
    json!({
        "asked": asked,
        "ok": ok,
        "ok_share": if asked == 0 { 0.0 } else { ok as f64 / asked as f64 },
        "outcomes": outcomes.json(),
        "p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": latency.max() as f64 / 1000.0,
    })
}

/// The first few words of an error, so that outcomes group.
fn first_words(s: &str) -> String {
    s.split_whitespace().take(6).collect::<Vec<_>>().join(" ")
}

/// The path of an `http://` URL (`/` when it has none).
fn path_of(url: &str) -> String {
    url.split_once("://")
        .and_then(|(_, r)| r.find('/').map(|i| r[i..].to_owned()))
        .unwrap_or_else(|| "/".to_owned())
}

/// A header's value in an HTTP/1.1 answer's text.
fn header<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let head = text.split("\r\n\r\n").next()?;
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// One HTTP/1.1 POST on a new connection from `from`, in an MCP session
/// when one is given: status and the whole answer.
async fn exchange(
    target: SocketAddr,
    from: IpAddr,
    path: &str,
    body: &str,
    session: Option<&str>,
) -> Result<(u16, String), Error> {
    let mut tcp = connect_from(target, from).await?;
    let mcp = match session {
        Some(id) => format!("Accept: {MCP_ACCEPT}\r\nMcp-Session-Id: {id}\r\n"),
        None => format!("Accept: {MCP_ACCEPT}\r\n"),
    };
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\n{mcp}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut reply = Vec::new();
    tcp.read_to_end(&mut reply).await?;
    let text = String::from_utf8_lossy(&reply);
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or("no HTTP status line")?;
    Ok((status, text.into_owned()))
}

async fn connect(target: SocketAddr) -> std::io::Result<TcpStream> {
    TcpStream::connect(target).await
}

/// Client `i` of a herd: an address of its own, 127.1.x.y.
fn herd_member(i: usize) -> IpAddr {
    let [_, _, x, y] = u32::try_from(i + 1).unwrap_or(u32::MAX).to_be_bytes();
    IpAddr::from([127, 1, x, y])
}

async fn connect_from(target: SocketAddr, from: IpAddr) -> std::io::Result<TcpStream> {
    let socket = if target.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(target).await
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Connections that send the HTTP/2 preface and then only PINGs: when the
/// edge closed each (or that it kept it to the end).
async fn h2_ping(
    target: SocketAddr,
    connections: usize,
    interval: Duration,
    until: Instant,
) -> Value {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(connections);
    for _ in 0..connections {
        tasks.push(tokio::spawn(async move {
            let Ok(tcp) = connect(target).await else {
                return Err("connect failed");
            };
            let (mut read, mut write) = tcp.into_split();
            let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
            if write.write_all(preface).await.is_err() {
                return Ok(Some(elapsed_ms(started)));
            }
            let ping = async move {
                let mut i = 0u64;
                loop {
                    tokio::time::sleep(interval).await;
                    let mut frame = b"\0\0\x08\x06\0\0\0\0\0".to_vec();
                    frame.extend_from_slice(&i.to_be_bytes());
                    i += 1;
                    if write.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            };
            let closed = async {
                let mut buf = [0u8; 512];
                while let Ok(n) = read.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            tokio::select! {
                () = closed => Ok(Some(elapsed_ms(started))),
                () = ping => Ok(Some(elapsed_ms(started))),
                () = tokio::time::sleep_until(until.into()) => Ok(None),
            }
        }));
    }
    let mut closed_at = Vec::new();
    let (mut kept, mut refused) = (0u64, 0u64);
    for t in tasks {
        match t.await {
            Ok(Ok(Some(ms))) => closed_at.push(ms),
            Ok(Ok(None)) => kept += 1,
            Ok(Err(_)) | Err(_) => refused += 1,
        }
    }
    closed_at.sort_unstable();
    let median = closed_at.get(closed_at.len() / 2).copied();
    json!({
        "connections": connections,
        "closed_by_the_edge": closed_at.len(),
        "closed_median_ms": median,
        "still_open_at_the_end": kept,
        "connect_failed": refused,
    })
}

/// `connections` HTTP/2 connections, each with up to `streams` POSTs whose
/// bodies stop one octet short of `size`: what each stream was answered.
async fn h2_bodies(
    target: SocketAddr,
    connections: usize,
    streams: usize,
    size: usize,
    until: Instant,
) -> Value {
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let Ok(tcp) = connect(target).await else {
                tally.add("connect failed");
                return tally;
            };
            let handshake = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(tcp),
            )
            .await;
            let Ok((send, conn)) = handshake else {
                tally.add("HTTP/2 handshake failed");
                return tally;
            };
            tokio::spawn(conn);
            let mut each = Vec::new();
            for _ in 0..streams {
                let mut send = send.clone();
                let sent = sent.clone();
                each.push(tokio::spawn(async move {
                    let chunks = (0..size.saturating_sub(1))
                        .step_by(16 * 1024)
                        .map(move |at| {
                            let n = (16 * 1024).min(size - 1 - at);
                            sent.fetch_add(n as u64, Relaxed);
                            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![
                                b' ';
                                n
                            ])))
                        });
                    let body = StreamBody::new(
                        futures_util::stream::iter(chunks).chain(futures_util::stream::pending()),
                    );
                    let req = hyper::Request::post(format!("http://{target}/"))
                        .header("content-type", "application/json")
                        .header("content-length", size.to_string())
                        .body(body);
                    let Ok(req) = req else {
                        return "request not built".to_owned();
                    };
                    let answer = tokio::time::timeout_at(until.into(), async {
                        send.ready().await?;
                        send.send_request(req).await
                    });
                    match answer.await {
                        Err(_) => "no answer by the end".to_owned(),
                        Ok(Err(e)) => format!("error: {}", first_words(&e.to_string())),
                        Ok(Ok(r)) => format!("status {}", r.status().as_u16()),
                    }
                }));
            }
            for e in each {
                tally.add(e.await.unwrap_or_else(|_| "task failed".to_owned()));
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for t in tasks {
        if let Ok(tally) = t.await {
            for (k, v) in tally.0 {
                *all.0.entry(k).or_default() += v;
            }
        }
    }
    json!({
        "connections": connections, "streams_each": streams, "size": size,
        "octets_sent": sent.load(Relaxed), "streams": all.json(),
    })
}

/// `connections` HTTP/1.1 POSTs whose chunked bodies come one octet per
/// chunk (many chunks to a write, as fast as the edge takes them), stopping
/// one octet short of `size` and never ended: what each was answered.
async fn h1_trickle(target: SocketAddr, connections: usize, size: usize, until: Instant) -> Value {
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            let Ok(tcp) = connect(target).await else {
                return "connect failed".to_owned();
            };
            let (mut read, mut write) = tcp.into_split();
            let send = async move {
                let head = format!(
                    "POST / HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                );
                write.write_all(head.as_bytes()).await?;
                let piece = b"1\r\n \r\n".repeat(1024);
                let mut left = size.saturating_sub(1);
                while left > 0 {
                    let n = left.min(1024);
                    write.write_all(&piece[..n * 6]).await?;
                    sent.fetch_add(n as u64, Relaxed);
                    left -= n;
                }
                std::future::pending::<()>().await;
                Ok::<_, std::io::Error>(())
            };
            let answer = async {
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    match read.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&got);
                match text.strip_prefix("HTTP/1.1 ").and_then(|r| r.get(..3)) {
                    Some(status) => format!("status {status}"),
                    None => "closed, no answer".to_owned(),
                }
            };
            tokio::select! {
                a = answer => a,
                r = send => match r {
                    Ok(()) => "sent".to_owned(),
                    Err(_) => "closed while sending".to_owned(),
                },
                () = tokio::time::sleep_until(until.into()) => "no answer by the end".to_owned(),
            }
        }));
    }
    let mut all = Tally::default();
    for t in tasks {
        all.add(t.await.unwrap_or_else(|_| "task failed".to_owned()));
    }
    json!({ "connections": connections, "size": size, "octets_sent": sent.load(Relaxed), "requests": all.json() })
}

const MCP_ACCEPT: &str = "application/json, text/event-stream";

fn initialize_body() -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},
        "clientInfo":{"name":"npamp-hostile","version":"1"}}})
    .to_string()
}

/// One MCP `initialize` over a new HTTP/1.1 connection from `from`: its
/// status.
async fn initialize(url: &str, from: IpAddr) -> String {
    let Ok(target) = loopback_of(url) else {
        return "bad URL".to_owned();
    };
    let init = initialize_body();
    let path = path_of(url);
    let attempt = async {
        let mut tcp = connect_from(target, from).await?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {target}\r\nContent-Type: application/json\r\nAccept: {MCP_ACCEPT}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{init}",
            init.len()
        );
        tcp.write_all(request.as_bytes()).await?;
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&head[9..12]).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(30), attempt).await {
        Ok(Ok(status)) => format!("status {status}"),
        Ok(Err(e)) => format!("error: {}", first_words(&e.to_string())),
        Err(_) => "no answer in 30 s".to_owned(),
    }
}

/// `sessions` MCP `initialize` calls, `concurrency` at a time.
async fn mcp_flood(url: String, sessions: usize, concurrency: usize, until: Instant) -> Value {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (url, next) = (url.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            while next.fetch_add(1, Relaxed) < sessions as u64 && Instant::now() < until {
                tally.add(initialize(&url, IpAddr::from([127, 0, 0, 1])).await);
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for w in workers {
        if let Ok(t) = w.await {
            for (k, v) in t.0 {
                *all.0.entry(k).or_default() += v;
            }
        }
    }
    json!({ "sessions_asked": sessions, "took_ms": elapsed_ms(started), "answers": all.json() })
}

/// `clients` MCP `initialize` calls released together.
async fn mcp_herd(url: String, clients: usize) -> Value {
    let go = Arc::new(Barrier::new(clients));
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (url, go) = (url.clone(), go.clone());
            tokio::spawn(async move {
                go.wait().await;
                initialize(&url, herd_member(i)).await
            })
        })
        .collect();
    let mut all = Tally::default();
    for t in tasks {
        all.add(t.await.unwrap_or_else(|_| "task failed".to_owned()));
    }
    json!({ "clients": clients, "answers": all.json() })
}

/// `clients` WebSocket clients, connected first, whose first requests are
/// then sent together: the answers, by result or error code.
async fn ws_herd(url: String, clients: usize) -> Value {
    let go = Arc::new(Barrier::new(clients));
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (url, go) = (url.clone(), go.clone());
            tokio::spawn(async move {
                let ws = async {
                    let target = loopback_of(&url)?;
                    let tcp = connect_from(target, herd_member(i)).await?;
                    let (ws, _) = tokio_tungstenite::client_async(url.as_str(), tcp).await?;
                    Ok::<_, Error>(ws)
                };
                let ws = ws.await;
                go.wait().await;
                let Ok(mut ws) = ws else {
                    return "WebSocket handshake failed".to_owned();
                };
                let nonce = format!("herd-{i}");
                let req = json!({"jsonrpc":"2.0","id":i,"method":"echo","params":[nonce]});
                let text = tokio_tungstenite::tungstenite::Message::text(req.to_string());
                if ws.send(text).await.is_err() {
                    return "send failed".to_owned();
                }
                let reply = tokio::time::timeout(Duration::from_secs(30), ws.next()).await;
                let outcome = match reply {
                    Ok(Some(Ok(m))) => match m.into_text() {
                        Ok(t) if t.contains(&nonce) => "ok".to_owned(),
                        Ok(t) => match serde_json::from_str::<Value>(&t) {
                            Ok(v) => format!("error {}", v["error"]["code"]),
                            Err(_) => "not JSON".to_owned(),
                        },
                        Err(_) => "not text".to_owned(),
                    },
                    Ok(_) => "closed".to_owned(),
                    Err(_) => "no answer in 30 s".to_owned(),
                };
                let _ = ws.close(None).await;
                outcome
            })
        })
        .collect();
    let mut all = Tally::default();
    for t in tasks {
        all.add(t.await.unwrap_or_else(|_| "task failed".to_owned()));
    }
    json!({ "clients": clients, "answers": all.json() })
}
