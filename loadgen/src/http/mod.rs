//! The load generator's HTTP clients: an HTTP target (`http://`,
//! `https://`, HTTP/1.1 or HTTP/2, the run's request headers), and one
//! connection's worth of exchanges with it, plain JSON-RPC or an MCP
//! session over Streamable HTTP.
//!
//! - `h1`: HTTP/1.1, the engine's own (one write per request, responses
//!   read with `httparse`): a load generator's client does one thing, so
//!   it does it without a general client's machinery;
//! - `h2`: HTTP/2 (hyper's client), `--streams` requests in flight on
//!   each of the run's connections.

mod h1;
mod h2;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::header::Header;
use crate::tls::{Tls, TlsOptions};

/// An HTTP target: where, over what, with which headers.
#[derive(Clone, Debug)]
pub struct HttpTarget {
    pub uri: hyper::Uri,
    /// `host:port`, the port filled in from the scheme.
    authority: String,
    tls: Option<Tls>,
    /// HTTP/2: by ALPN over TLS, with prior knowledge (h2c) over TCP.
    pub http2: bool,
    /// HTTP/2: requests in flight on each connection (as oha's `-p`,
    /// h2load's `-m`): a run has connections × streams of them.
    pub streams: usize,
    pub headers: Vec<Header>,
    /// HTTP/2: the run's connections, shared by its workers.
    h2: Option<Arc<h2::Connections>>,
}

impl std::str::FromStr for HttpTarget {
    type Err = String;

    /// An `http://` or `https://` URL (the system's roots), HTTP/1.1, no
    /// headers.
    fn from_str(url: &str) -> Result<Self, String> {
        let uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
        Self::new(uri, &TlsOptions::default(), false, 1, Vec::new())
    }
}

impl HttpTarget {
    pub fn new(
        uri: hyper::Uri,
        tls: &TlsOptions,
        http2: bool,
        streams: usize,
        headers: Vec<Header>,
    ) -> Result<Self, String> {
        let alpn: &[&[u8]] = if http2 { &[b"h2"] } else { &[b"http/1.1"] };
        let (authority, tls) = endpoint(&uri, ["http", "https"], tls, alpn)?;
        Ok(Self {
            authority,
            tls,
            http2,
            streams: streams.max(1),
            headers,
            h2: None,
            uri,
        })
    }

    /// The URL, and HTTP/2 when that is what it speaks (a run's target
    /// in its summary: the headers, secrets maybe, are not shown).
    pub fn describe(&self) -> String {
        if self.http2 {
            format!("{} (HTTP/2)", shown(&self.uri))
        } else {
            shown(&self.uri)
        }
    }

    /// Whether its connections run on the worker threads (HTTP/1.1: one
    /// connection each) or on the main runtime (HTTP/2: shared).
    pub(crate) fn shares_connections(&self) -> bool {
        self.http2
    }

    /// The target as a run uses it: HTTP/2's `connections` connections,
    /// made as the workers need them.
    pub(crate) fn for_run(&self, connections: usize) -> Self {
        Self {
            h2: self
                .http2
                .then(|| Arc::new(h2::Connections::new(connections))),
            ..self.clone()
        }
    }
}

/// A URL as a run's summary and reports show it: a query, and a path
/// segment that looks like a key (20 or more letters, digits, `-` and `_`:
/// hosted RPC providers put API keys there), are left out.
pub(crate) fn shown(uri: &hyper::Uri) -> String {
    let key_like = |seg: &str| {
        seg.len() >= 20
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let path: Vec<&str> = uri
        .path()
        .split('/')
        .map(|seg| if key_like(seg) { "…" } else { seg })
        .collect();
    format!(
        "{}://{}{}{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str()),
        path.join("/"),
        if uri.query().is_some() { "?…" } else { "" }
    )
}

/// Where a URL's connections go (`host:port`, the port filled in from its
/// scheme) and, for the second of `schemes` (its TLS one), the TLS client
/// offering `alpn`; a URL of another scheme, without a host, or with
/// credentials is refused.
pub(crate) fn endpoint(
    uri: &hyper::Uri,
    [plain, secure]: [&str; 2],
    tls: &TlsOptions,
    alpn: &[&[u8]],
) -> Result<(String, Option<Tls>), String> {
    let secure = match uri.scheme_str() {
        Some(s) if s == secure => true,
        Some(s) if s == plain => false,
        _ => return Err(format!("{uri}: expected {plain}:// or {secure}://")),
    };
    let host = uri.host().ok_or_else(|| format!("{uri}: no host"))?;
    refuse_userinfo(uri)?;
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let tls = secure.then(|| Tls::new(tls, host, alpn)).transpose()?;
    Ok((format!("{host}:{port}"), tls))
}

/// A URL with `user:password@` is refused: it would go out in `Host`, and
/// into the summary; credentials go in a header (`--header`,
/// `--bearer-file`).
fn refuse_userinfo(uri: &hyper::Uri) -> Result<(), String> {
    match uri.authority() {
        Some(a) if a.as_str().contains('@') => Err(format!(
            "{}://…@{}: credentials in a URL are not sent; give them as a header (--header, --bearer-file)",
            uri.scheme_str().unwrap_or("http"),
            a.host()
        )),
        _ => Ok(()),
    }
}

/// A whole response.
#[derive(Debug)]
pub(crate) struct HttpReply {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
    pub(crate) keep_alive: bool,
    /// `Mcp-Session-Id`, if the server set one.
    pub(crate) session: Option<String>,
    /// The body is a `text/event-stream`.
    pub(crate) events: bool,
}

impl HttpReply {
    /// The JSON-RPC reply it carries: the body, or the event of an event
    /// stream that is a response (the server's own messages before it are
    /// not this request's reply).
    pub(crate) fn reply(&self) -> Bytes {
        if !self.events {
            return self.body.clone();
        }
        use npamp_gateway::jsonrpc::{Kind, Limits, Scanned, scan};
        let mut decoder = npamp_gateway::sse::SseDecoder::new(usize::MAX);
        let mut events = Vec::new();
        let _ = decoder.push(&self.body, &mut events);
        if events.len() == 1 {
            return events.pop().unwrap_or_default();
        }
        let limits = Limits::default();
        events
            .into_iter()
            .find(|e| {
                matches!(
                    scan(e, &limits),
                    Ok(Scanned::Single(Kind::Success { .. } | Kind::Error { .. }))
                )
            })
            .unwrap_or_default()
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) enum Broken {
    /// Connecting (TCP, TLS) failed: why.
    Connect(String),
    BeforeReply,
    MidReply,
    Malformed(&'static str),
    /// HTTP/2: the stream or its connection failed.
    H2(String),
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Connect(why) => f.write_str(why),
            Broken::BeforeReply => f.write_str("connection closed before the reply"),
            Broken::MidReply => f.write_str("connection broken mid-reply"),
            Broken::Malformed(what) => write!(f, "malformed HTTP response: {what}"),
            Broken::H2(why) => write!(f, "HTTP/2: {why}"),
        }
    }
}

/// The request methods the clients send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    Post,
    Delete,
}

/// One connection's worth of exchanges with an HTTP target (HTTP/1.1: a
/// keep-alive connection of its own; HTTP/2: a stream at a time on one of
/// the run's shared connections), re-established when it breaks.
pub(crate) struct HttpConn {
    wire: Wire,
    /// The headers of every request: the content type, what is accepted
    /// (MCP), the run's.
    fixed: Vec<Header>,
    /// The MCP session's, after `initialize`.
    session: Vec<Header>,
}

enum Wire {
    H1(h1::Conn),
    H2(h2::Stream),
}

/// The MCP revision the load generator speaks.
pub(crate) const MCP_VERSION: &str = "2025-06-18";

impl HttpConn {
    /// Worker `worker`'s connection to `target` (as prepared by
    /// [`HttpTarget::for_run`]).
    pub(crate) fn new(target: &HttpTarget, mcp: bool, worker: usize) -> Result<Self, String> {
        let own = |h: &str| target.headers.iter().any(|g| g.is(h));
        let mut fixed = Vec::new();
        if !own("content-type") {
            fixed.push(header("Content-Type", "application/json"));
        }
        if mcp && !own("accept") {
            fixed.push(header("Accept", "application/json, text/event-stream"));
        }
        fixed.extend(target.headers.iter().cloned());
        let wire = match &target.h2 {
            Some(connections) => Wire::H2(h2::Stream::new(target, connections.clone(), worker)),
            None => Wire::H1(h1::Conn::new(target)),
        };
        let mut conn = Self {
            wire,
            fixed,
            session: Vec::new(),
        };
        conn.headers_changed();
        Ok(conn)
    }

    fn headers_changed(&mut self) {
        if let Wire::H1(c) = &mut self.wire {
            c.set_headers(self.fixed.iter().chain(&self.session));
        }
    }

    /// Forgets the connection (one stuck on a request that timed out): the
    /// next exchange makes a new one. An HTTP/2 stream given up is reset
    /// alone.
    pub(crate) fn reset(&mut self) {
        if let Wire::H1(c) = &mut self.wire {
            c.stream = None;
        }
    }

    /// Opens an MCP session: initialize, then notifications/initialized;
    /// later requests carry its id and protocol version.
    pub(crate) async fn open_mcp_session(&mut self) -> Result<(), String> {
        self.session.clear();
        self.headers_changed();
        let init = serde_json::json!({"jsonrpc":"2.0","id":"npamp-loadgen-initialize",
            "method":"initialize","params":{"protocolVersion":MCP_VERSION,"capabilities":{},
            "clientInfo":{"name":"npamp-loadgen","version":env!("CARGO_PKG_VERSION")}}});
        let r = self.send(Bytes::from(init.to_string())).await?;
        let reply = serde_json::from_slice::<Value>(&r.reply()).unwrap_or_default();
        let Some(result) = reply.get("result").filter(|_| r.status == 200) else {
            return Err(format!(
                "MCP initialize refused (HTTP {}): {}",
                r.status,
                String::from_utf8_lossy(&r.body[..r.body.len().min(200)])
            ));
        };
        if let Some(id) = &r.session {
            // Into a request head: visible ASCII only (as MCP requires).
            if id.is_empty() || !id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                return Err(format!(
                    "MCP initialize: a session id that is not visible ASCII: {id:?}"
                ));
            }
            self.session.push(header("Mcp-Session-Id", id));
        }
        if let Some(v) = result.get("protocolVersion").and_then(Value::as_str)
            && !v.is_empty()
            && v.bytes().all(|b| (0x21..=0x7e).contains(&b))
        {
            self.session.push(header("MCP-Protocol-Version", v));
        }
        self.headers_changed();
        let initialized = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let r = self.send(Bytes::from_static(initialized)).await?;
        if !(200..300).contains(&r.status) {
            return Err(format!("MCP notifications/initialized: HTTP {}", r.status));
        }
        Ok(())
    }

    /// Ends the MCP session, if the server gave it an id (DELETE, as MCP
    /// asks of a client that is done).
    pub(crate) async fn end_mcp_session(&mut self) {
        if self.session.iter().any(|h| h.is("mcp-session-id")) {
            let _ = self.exchange(Method::Delete, Bytes::new()).await;
        }
    }

    /// POSTs `body`: once more on a new connection when a kept-alive one
    /// turns out closed before it answered anything (the request was not
    /// taken).
    pub(crate) async fn send(&mut self, body: Bytes) -> Result<HttpReply, String> {
        match self.exchange(Method::Post, body.clone()).await {
            Err(Broken::BeforeReply) if self.reused() => {
                self.reset();
                self.exchange(Method::Post, body)
                    .await
                    .map_err(|e| e.to_string())
            }
            r => r.map_err(|e| e.to_string()),
        }
    }

    fn reused(&self) -> bool {
        match &self.wire {
            Wire::H1(c) => c.reused,
            Wire::H2(_) => false,
        }
    }

    async fn exchange(&mut self, method: Method, body: Bytes) -> Result<HttpReply, Broken> {
        match &mut self.wire {
            Wire::H1(c) => c.exchange(method, &body).await,
            Wire::H2(s) => {
                s.exchange(method, body, self.fixed.iter().chain(&self.session))
                    .await
            }
        }
    }
}

/// A header the client writes itself (its name and value known good).
fn header(name: &str, value: &str) -> Header {
    Header {
        name: name.to_owned(),
        value: value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_shown_without_what_looks_like_a_key() {
        let show = |u: &str| shown(&u.parse().expect("uri"));
        assert_eq!(
            show("https://mainnet.example/v3/0123456789abcdef0123456789abcdef"),
            "https://mainnet.example/v3/…"
        );
        assert_eq!(
            show("https://rpc.example:8545/rpc?apikey=secret"),
            "https://rpc.example:8545/rpc?…"
        );
        assert_eq!(show("http://127.0.0.1:8080/"), "http://127.0.0.1:8080/");
        let e = "https://user:pw@rpc.example/"
            .parse::<HttpTarget>()
            .expect_err("userinfo");
        assert!(!e.contains("pw") && e.contains("header"), "{e}");
    }
}
