//! The WebSocket ingress (`ws://`): one JSON-RPC message per text frame,
//! one session per connection.
//!
//! The handshake is HTTP/1.1 served by hyper, so that what is not a
//! WebSocket handshake gets an HTTP answer saying so (RFC 6455 §4.2): 426
//! for a request without `Upgrade: websocket` or of another protocol
//! version, 400 for a bad key, 405 for another method, 401 without an
//! accepted bearer token, 403 for a page of a foreign origin
//! ([`super::browser`]). A session ends with a close code: 1000 when it is
//! done, 1002 for a protocol error, 1007 for a text that is not UTF-8,
//! 1009 for a message over `--max-body`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{SinkExt, StreamExt};
use hyper::header::{self, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Error, Message};
use tracing::debug;

use super::browser::{Caller, Reach};
use super::client::{MessageSource, stream_client};
use super::conn::Opening;
use super::response::{HttpResponse, empty_response, status_only};
use super::{Admitted, Clients, Conn, Ingress, Kind, authenticate};
use crate::gateway::edge::Edge;
use crate::gateway::stall::{Moved, wrote};

/// A session's messages, and the close code its end calls for.
struct WsSource<S> {
    stream: S,
    close: Arc<AtomicU16>,
}

impl<S> MessageSource for WsSource<S>
where
    S: futures_util::Stream<Item = Result<Message, Error>> + Unpin + Send,
{
    async fn next_message(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            let e = match self.stream.next().await {
                Some(Ok(Message::Text(t))) => return Ok(Some(Bytes::from(t))),
                Some(Ok(Message::Binary(b))) => return Ok(Some(b)),
                Some(Ok(Message::Close(_))) | None => return Ok(None),
                Some(Ok(_)) => continue,
                // A client gone without a Close (or a TLS close_notify)
                // is gone: the session ends as if it had closed.
                Some(Err(Error::Protocol(ProtocolError::ResetWithoutClosingHandshake))) => {
                    return Ok(None);
                }
                Some(Err(Error::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Ok(None);
                }
                Some(Err(e)) => e,
            };
            let code = match &e {
                Error::Capacity(_) => CloseCode::Size,
                Error::Utf8(_) => CloseCode::Invalid,
                Error::Protocol(_) => CloseCode::Protocol,
                _ => CloseCode::Normal,
            };
            self.close.store(code.into(), Relaxed);
            return Err(match e {
                Error::Capacity(e) => {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
                }
                e => std::io::Error::other(e),
            });
        }
    }
}

/// `ws://` and `wss://`: one JSON-RPC message per text frame.
pub struct WebSocket;

impl Kind for WebSocket {
    fn scheme(&self) -> &'static str {
        "ws"
    }

    fn tls_scheme(&self) -> &'static str {
        "wss"
    }

    /// The handshake is HTTP/1.1 (RFC 8441's WebSocket over HTTP/2 is not
    /// offered).
    fn alpn(&self) -> &'static [&'static [u8]] {
        &[b"http/1.1"]
    }

    fn carries_tokens(&self) -> bool {
        true
    }

    fn serve(&self, clients: Clients, edge: Arc<Edge>) -> BoxFuture<'static, ()> {
        Box::pin(serve(clients, edge))
    }
}

async fn serve(clients: Clients, edge: Arc<Edge>) {
    let ingress = clients.ingress;
    let opening = Opening {
        first_octet: true,
        session: true,
    };
    clients
        .each(opening, move |conn| {
            handshake_on(conn, edge.clone(), ingress)
        })
        .await;
}

/// Serves the one request of a connection: a handshake, or an answer that
/// says why it was not one (and closes the connection). Its headers must
/// come within the stall timeout.
async fn handshake_on(conn: Conn, edge: Arc<Edge>, ingress: Ingress) {
    let Conn {
        stream,
        moved,
        from,
        certificate,
        permit,
    } = conn;
    let stall = edge.ctx.limits.stall_timeout;
    let metrics = edge.ctx.metrics.clone();
    let accepted = Arc::new(Accepted {
        edge,
        moved,
        ingress,
        from,
        certificate,
        reach: stream.reach(),
        _permit: permit,
    });
    let service = hyper::service::service_fn(|req| {
        let accepted = accepted.clone();
        async move { Ok::<_, Infallible>(accepted.handshake(req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(stall)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        if e.is_timeout() {
            metrics.stalled_clients.fetch_add(1, Relaxed);
        }
        debug!(%from, error = %e, "WebSocket handshake failed");
    }
}

/// A connection to a WebSocket port, before its handshake.
struct Accepted {
    edge: Arc<Edge>,
    /// When octets last moved to the client, for the stall clock.
    moved: Arc<Moved>,
    ingress: Ingress,
    from: super::Peer,
    /// The client certificate's fingerprint, when it presented one.
    certificate: Option<u64>,
    /// How the connection reached the ingress (for the `Host` check).
    reach: Reach,
    /// The connection's slot, held by the session once it runs.
    _permit: super::conn::Slot,
}

impl Accepted {
    /// Answers a handshake request: 101 and the session started on the
    /// upgraded connection, or the HTTP answer that says what is wrong
    /// (and closes the connection).
    async fn handshake(self: Arc<Self>, req: Request<hyper::body::Incoming>) -> HttpResponse {
        let mut r = self.upgrade(req).await;
        if r.status() != StatusCode::SWITCHING_PROTOCOLS {
            let close = if r.status() == StatusCode::UPGRADE_REQUIRED {
                "Upgrade, close"
            } else {
                "close"
            };
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static(close));
        }
        r
    }

    async fn upgrade(self: Arc<Self>, mut req: Request<hyper::body::Incoming>) -> HttpResponse {
        let ctx = &self.edge.ctx;
        let caller = ctx
            .live()
            .browsers
            .caller(req.headers(), req.uri(), self.reach);
        if let Caller::ForeignHost(host) = &caller {
            ctx.metrics.foreign_hosts.fetch_add(1, Relaxed);
            debug!(
                host,
                "WebSocket handshake for a host name not allowed refused"
            );
            return status_only(StatusCode::FORBIDDEN, &Caller::host_refusal(host));
        }
        if let Caller::Foreign(origin) = &caller {
            ctx.metrics.foreign_origins.fetch_add(1, Relaxed);
            debug!(
                origin,
                "WebSocket handshake from a page of a foreign origin refused"
            );
            return status_only(StatusCode::FORBIDDEN, &Caller::refusal(origin));
        }
        let key = match check_handshake(&req) {
            Ok(key) => key,
            Err(refusal) => return refusal,
        };
        let client = match authenticate(ctx, req.headers(), self.certificate, self.from).await {
            Ok(client) => client,
            Err(refusal) => {
                let status =
                    StatusCode::from_u16(refusal.status).unwrap_or(StatusCode::UNAUTHORIZED);
                let mut r = status_only(status, &refusal.why);
                if let Some(v) = refusal
                    .challenge
                    .and_then(|c| HeaderValue::from_str(&c).ok())
                {
                    r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
                }
                return r;
            }
        };
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let upgrade = hyper::upgrade::on(&mut req);
        let me = self.clone();
        tokio::spawn(async move {
            match upgrade.await {
                Ok(upgraded) => me.session(upgraded, client).await,
                Err(e) => debug!(error = %e, "WebSocket upgrade failed"),
            }
        });
        let mut r = empty_response(StatusCode::SWITCHING_PROTOCOLS);
        let h = r.headers_mut();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        if let Ok(v) = HeaderValue::from_str(&accept) {
            h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
        }
        caller.decorate(h, "");
        r
    }
}

/// The request's `Sec-WebSocket-Key` when it is a valid handshake
/// (RFC 6455 §4.2.1), else the answer that says what is missing.
#[allow(clippy::result_large_err)]
fn check_handshake<B>(req: &Request<B>) -> Result<String, HttpResponse> {
    let h = req.headers();
    let has = |name: header::HeaderName, token: &str| {
        h.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if req.method() != hyper::Method::GET {
        let mut r = status_only(
            StatusCode::METHOD_NOT_ALLOWED,
            "this is a WebSocket endpoint: open it with a GET handshake",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET"));
        return Err(r);
    }
    let upgrade_required = |why: &str| {
        let mut r = status_only(StatusCode::UPGRADE_REQUIRED, why);
        let h = r.headers_mut();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(
            header::SEC_WEBSOCKET_VERSION,
            HeaderValue::from_static("13"),
        );
        r
    };
    if req.version() != hyper::Version::HTTP_11
        || !has(header::UPGRADE, "websocket")
        || !has(header::CONNECTION, "upgrade")
    {
        return Err(upgrade_required(
            "this is a WebSocket endpoint: send an HTTP/1.1 GET with Upgrade: websocket",
        ));
    }
    if h.get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(upgrade_required("WebSocket version 13 only"));
    }
    match h
        .get(header::SEC_WEBSOCKET_KEY)
        .and_then(|k| k.to_str().ok())
    {
        Some(k) if is_key(k) => Ok(k.to_owned()),
        _ => Err(status_only(
            StatusCode::BAD_REQUEST,
            "Sec-WebSocket-Key must be 16 octets in base64",
        )),
    }
}

/// Whether `k` is 16 octets in base64 (24 characters, `==` at the end).
fn is_key(k: &str) -> bool {
    let b = k.as_bytes();
    b.len() == 24
        && b.ends_with(b"==")
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

impl Accepted {
    /// Serves one WebSocket session on an upgraded connection.
    async fn session(self: Arc<Self>, upgraded: hyper::upgrade::Upgraded, client: Admitted) {
        let (edge, moved, ingress) = (self.edge.clone(), self.moved.clone(), self.ingress);
        let config = crate::gateway::context::ws_config(edge.ctx.limits.max_body);
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            Some(config),
        )
        .await;
        let (mut sink, stream) = ws.split();
        let (tx, mut rx) = edge.ctx.limits.outbox();
        let (stall, metrics) = (edge.ctx.limits.stall_timeout, edge.ctx.metrics.clone());
        let close = Arc::new(AtomicU16::new(CloseCode::Normal.into()));
        let code = close.clone();
        let writer = tokio::spawn(async move {
            while let Some(text) = rx.recv().await {
                let msg = match tokio_tungstenite::tungstenite::Utf8Bytes::try_from(text) {
                    Ok(t) => Message::Text(t),
                    Err(_) => continue,
                };
                let write = async {
                    sink.feed(msg).await?;
                    if rx.is_empty() {
                        sink.flush().await?;
                    }
                    Ok::<_, Error>(())
                };
                // After the client's Close no message may follow (the Close
                // that answers it goes out below): what is left is dropped.
                let write = async {
                    match write.await {
                        Err(Error::Protocol(ProtocolError::SendAfterClosing)) => Ok(()),
                        r => r,
                    }
                };
                if !wrote(stall, &moved, &metrics, write).await {
                    return;
                }
            }
            let frame = CloseFrame {
                code: CloseCode::from(code.load(Relaxed)),
                reason: "".into(),
            };
            let _ = sink.send(Message::Close(Some(frame))).await;
            let _ = sink.close().await;
        });
        stream_client(WsSource { stream, close }, tx, edge, ingress, Some(client)).await;
        let _ = writer.await;
    }
}
