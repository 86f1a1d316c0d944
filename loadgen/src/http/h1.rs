//! HTTP/1.1, the engine's own: one keep-alive connection, re-established
//! when it breaks, the request written with one write and the response
//! read with `httparse` (Content-Length or chunked bodies).

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

use super::{Broken, HttpReply, HttpTarget, Method};
use crate::header::Header;
use crate::tls::{Stream, Tls};

/// One HTTP/1.1 keep-alive connection: the request head made once (again
/// when the headers change), each request written with one write.
pub(super) struct Conn {
    authority: String,
    tls: Option<Tls>,
    /// The request line's path, and the `Host` header's value.
    path: String,
    host: String,
    /// `POST`'s request line and headers, then `Content-Length: `.
    post: String,
    /// `DELETE`'s.
    delete: String,
    pub(super) stream: Option<Stream>,
    /// Whether `stream` has carried a request already (a reused connection
    /// the server may have closed while idle).
    pub(super) reused: bool,
    buf: bytes::BytesMut,
    out: Vec<u8>,
}

impl Conn {
    pub(super) fn new(target: &HttpTarget) -> Self {
        let host = target
            .uri
            .authority()
            .map_or_else(|| target.authority.clone(), |a| a.to_string());
        Self {
            authority: target.authority.clone(),
            tls: target.tls.clone(),
            path: target
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned(),
            host,
            post: String::new(),
            delete: String::new(),
            stream: None,
            reused: false,
            buf: bytes::BytesMut::with_capacity(16 << 10),
            out: Vec::with_capacity(4 << 10),
        }
    }

    /// The heads of the requests to come, with `headers`.
    pub(super) fn set_headers<'a>(&mut self, headers: impl Iterator<Item = &'a Header>) {
        let mut lines = String::new();
        for h in headers {
            lines.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        let head = |method: &str| {
            format!(
                "{method} {} HTTP/1.1\r\nHost: {}\r\n{lines}Content-Length: ",
                self.path, self.host
            )
        };
        (self.post, self.delete) = (head("POST"), head("DELETE"));
    }

    pub(super) async fn exchange(
        &mut self,
        method: Method,
        body: &[u8],
    ) -> Result<HttpReply, Broken> {
        use tokio::io::AsyncReadExt;
        if self.stream.is_none() {
            let stream = crate::tls::connect(&self.authority, self.tls.as_ref())
                .await
                .map_err(Broken::Connect)?;
            self.stream = Some(stream);
            self.reused = false;
            self.buf.clear();
        }
        let result = async {
            let stream = self.stream.as_mut().ok_or(Broken::BeforeReply)?;
            self.out.clear();
            self.out.extend_from_slice(match method {
                Method::Post => self.post.as_bytes(),
                Method::Delete => self.delete.as_bytes(),
            });
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

/// The largest reply taken (a gateway's largest message): a server that
/// announces more is answering something else.
const MAX_REPLY: usize = npamp_gateway::gateway::MAX_BODY_LIMIT;

/// The longest response head taken.
const MAX_HEAD: usize = 64 << 10;

/// One whole response from the front of `buf` (consumed), or `None` when
/// more octets are needed: status, body, and whether the connection stays
/// open.
pub(crate) fn parse_response(buf: &mut bytes::BytesMut) -> Result<Option<HttpReply>, Broken> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(Broken::Malformed("a response head over 64 KiB"));
        }
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
                .ok()
                .filter(|size| body.len().saturating_add(*size) <= MAX_REPLY)
                .ok_or(Broken::Malformed("bad chunk size, or a reply over 64 MiB"))?;
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
        Some(n) if n > MAX_REPLY => Err(Broken::Malformed("a reply over 64 MiB")),
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
        // Sizes a server may announce and no reply has: refused, not an
        // overflow (the test build would panic on one).
        let huge = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", usize::MAX);
        assert!(parse_response(&mut buf(&huge)).is_err());
        let chunk = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nab";
        assert!(parse_response(&mut buf(chunk)).is_err());
        let endless = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(70_000));
        assert!(parse_response(&mut buf(&endless)).is_err());
    }
}
