//! The load generator's HTTP/1.1 client: one keep-alive connection,
//! re-established when it breaks, the request written with one write and
//! the response read with `httparse` (Content-Length or chunked bodies),
//! plain JSON-RPC or an MCP session over Streamable HTTP.

use bytes::Bytes;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

/// One HTTP/1.1 keep-alive connection, re-established when it breaks: the
/// request written with one write, the response read with `httparse`
/// (Content-Length or chunked bodies). A load generator's client does one
/// thing, so it does it without a general client's machinery.
pub(crate) struct HttpConn {
    authority: String,
    /// The request line and the fixed headers.
    base: String,
    /// `base`, the session's headers (MCP), then `Content-Length: `.
    head: String,
    pub(crate) stream: Option<tokio::net::TcpStream>,
    /// Whether `stream` has carried a request already (a reused connection
    /// the server may have closed while idle).
    reused: bool,
    buf: bytes::BytesMut,
    out: Vec<u8>,
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

/// The MCP revision the load generator speaks.
pub(crate) const MCP_VERSION: &str = "2025-06-18";

impl HttpConn {
    pub(crate) fn new(uri: &hyper::Uri, mcp: bool) -> Result<Self, String> {
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{uri}: no host"))?
            .to_string();
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let mut base = format!(
            "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n"
        );
        if mcp {
            base.push_str("Accept: application/json, text/event-stream\r\n");
        }
        Ok(Self {
            authority,
            head: format!("{base}Content-Length: "),
            base,
            stream: None,
            reused: false,
            buf: bytes::BytesMut::with_capacity(16 << 10),
            out: Vec::with_capacity(4 << 10),
        })
    }

    /// Opens an MCP session: initialize, then notifications/initialized;
    /// later requests carry its id and protocol version.
    pub(crate) async fn open_mcp_session(&mut self) -> Result<(), String> {
        self.head = format!("{}Content-Length: ", self.base);
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
        let mut headers = String::new();
        if let Some(id) = &r.session {
            // Into a request head: visible ASCII only (as MCP requires).
            if id.is_empty() || !id.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                return Err(format!(
                    "MCP initialize: a session id that is not visible ASCII: {id:?}"
                ));
            }
            headers.push_str(&format!("Mcp-Session-Id: {id}\r\n"));
        }
        if let Some(v) = result.get("protocolVersion").and_then(Value::as_str)
            && !v.is_empty()
            && v.bytes().all(|b| (0x21..=0x7e).contains(&b))
        {
            headers.push_str(&format!("MCP-Protocol-Version: {v}\r\n"));
        }
        self.head = format!("{}{headers}Content-Length: ", self.base);
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
        if !self.head.contains("Mcp-Session-Id:") {
            return;
        }
        let post = std::mem::take(&mut self.head);
        self.head = format!("DELETE{}", post.strip_prefix("POST").unwrap_or(&post));
        let _ = self.exchange(b"").await;
        self.head = post;
    }

    pub(crate) async fn send(&mut self, body: Bytes) -> Result<HttpReply, String> {
        match self.exchange(&body).await {
            // The server closed a kept-alive connection before answering
            // anything: the request was not taken; once more on a new one.
            Err(Broken::BeforeReply) if self.reused => {
                self.stream = None;
                self.exchange(&body).await.map_err(|e| e.to_string())
            }
            r => r.map_err(|e| e.to_string()),
        }
    }

    pub(crate) async fn exchange(&mut self, body: &[u8]) -> Result<HttpReply, Broken> {
        use tokio::io::AsyncReadExt;
        if self.stream.is_none() {
            let tcp = tokio::net::TcpStream::connect(self.authority.as_str())
                .await
                .map_err(|e| Broken::Connect(e.kind()))?;
            let _ = tcp.set_nodelay(true);
            self.stream = Some(tcp);
            self.reused = false;
            self.buf.clear();
        }
        let result = async {
            let stream = self.stream.as_mut().ok_or(Broken::BeforeReply)?;
            self.out.clear();
            self.out.extend_from_slice(self.head.as_bytes());
            self.out
                .extend_from_slice(body.len().to_string().as_bytes());
            self.out.extend_from_slice(b"\r\n\r\n");
            self.out.extend_from_slice(body);
            stream
                .write_all(&self.out)
                .await
                .map_err(|_| Broken::BeforeReply)?;
            loop {
                if let Some(reply) = parse_response(&mut self.buf)? {
                    return Ok(reply);
                }
                self.buf.reserve(8 << 10);
                let n = stream
                    .read_buf(&mut self.buf)
                    .await
                    .map_err(|_| Broken::MidReply)?;
                if n == 0 {
                    return Err(if self.buf.is_empty() {
                        Broken::BeforeReply
                    } else {
                        Broken::MidReply
                    });
                }
            }
        }
        .await;
        match &result {
            Ok(r) if r.keep_alive => self.reused = true,
            _ => self.stream = None,
        }
        result
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) enum Broken {
    Connect(std::io::ErrorKind),
    BeforeReply,
    MidReply,
    Malformed(&'static str),
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Connect(k) => write!(f, "connect: {k}"),
            Broken::BeforeReply => f.write_str("connection closed before the reply"),
            Broken::MidReply => f.write_str("connection broken mid-reply"),
            Broken::Malformed(what) => write!(f, "malformed HTTP response: {what}"),
        }
    }
}

/// One whole response from the front of `buf` (consumed), or `None` when
/// more octets are needed: status, body, and whether the connection stays
/// open.
pub(crate) fn parse_response(buf: &mut bytes::BytesMut) -> Result<Option<HttpReply>, Broken> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Broken::Malformed("bad status line or headers")),
    };
    let status = resp.code.ok_or(Broken::Malformed("no status"))?;
    let mut length = None;
    let mut chunked = false;
    let mut keep_alive = resp.version == Some(1);
    let mut session = None;
    let mut events = false;
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
        if h.name.eq_ignore_ascii_case("mcp-session-id") {
            session = Some(value.to_owned());
        } else if h.name.eq_ignore_ascii_case("content-type") {
            events = value.to_ascii_lowercase().starts_with("text/event-stream");
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| Broken::Malformed("bad Content-Length"))?,
            );
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep_alive = !value.eq_ignore_ascii_case("close");
        }
    }
    let reply = |body: Bytes| HttpReply {
        status,
        body,
        keep_alive,
        session: session.clone(),
        events,
    };
    if status == 204 || status == 304 || (100..200).contains(&status) {
        let _ = buf.split_to(head_len);
        return Ok(Some(reply(Bytes::new())));
    }
    if chunked {
        let mut body = Vec::new();
        let mut at = head_len;
        loop {
            let Some(eol) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
                return Ok(None);
            };
            let size_text = std::str::from_utf8(&buf[at..at + eol])
                .map_err(|_| Broken::Malformed("bad chunk size"))?;
            let size_text = size_text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| Broken::Malformed("bad chunk size"))?;
            let data = at + eol + 2;
            if buf.len() < data + size + 2 {
                return Ok(None);
            }
            if size == 0 {
                // No trailers expected: the last chunk ends with CRLF.
                let _ = buf.split_to(data + 2);
                return Ok(Some(reply(Bytes::from(body))));
            }
            body.extend_from_slice(&buf[data..data + size]);
            at = data + size + 2;
        }
    }
    match length {
        Some(n) if buf.len() >= head_len + n => {
            let mut whole = buf.split_to(head_len + n);
            Ok(Some(reply(whole.split_off(head_len).freeze())))
        }
        Some(_) => Ok(None),
        // No length: the body runs to the end of the connection, which this
        // client does not wait for.
        None => Err(Broken::Malformed(
            "a body without Content-Length or chunking",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(s: &str) -> bytes::BytesMut {
        bytes::BytesMut::from(s.as_bytes())
    }

    #[test]
    fn responses_with_length_chunks_or_nothing() {
        let mut b =
            buf("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 204 No Content\r\n\r\n");
        let r = parse_response(&mut b).unwrap().unwrap();
        assert_eq!(
            (r.status, &r.body[..], r.keep_alive),
            (200, &b"hello"[..], true)
        );
        let r = parse_response(&mut b).unwrap().unwrap();
        assert_eq!((r.status, r.body.len()), (204, 0));
        assert!(b.is_empty());

        let mut b = buf(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n",
        );
        let r = parse_response(&mut b).unwrap().unwrap();
        assert_eq!(
            (r.status, &r.body[..], r.keep_alive),
            (200, &b"abcde"[..], false)
        );
    }

    #[test]
    fn an_mcp_reply_is_the_response_event_of_its_stream() {
        let mut b = buf(concat!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nMcp-Session-Id: ab12\r\n",
            "Transfer-Encoding: chunked\r\n\r\n",
            "42\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"id\":1}\n\n\r\n",
            "2b\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":7}\n\n\r\n0\r\n\r\n",
        ));
        let r = parse_response(&mut b).unwrap().unwrap();
        assert_eq!((r.session.as_deref(), r.events), (Some("ab12"), true));
        assert_eq!(&r.reply()[..], br#"{"jsonrpc":"2.0","id":1,"result":7}"#);
    }

    #[test]
    fn partial_responses_wait_and_garbage_is_refused() {
        for partial in [
            "HTTP/1.1 200 OK\r\nContent-Len",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
        ] {
            assert!(
                parse_response(&mut buf(partial)).unwrap().is_none(),
                "{partial}"
            );
        }
        assert!(parse_response(&mut buf("garbage\r\n\r\n")).is_err());
        assert!(parse_response(&mut buf("HTTP/1.1 200 OK\r\n\r\nbody")).is_err());
        assert!(parse_response(&mut buf("HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")).is_err());
    }
}
