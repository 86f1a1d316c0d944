//! How the origin reaches an HTTP upstream: TCP (with TLS for `https://`),
//! or a Unix domain socket (`http+unix://`), behind one connector, so the
//! one HTTP client (its pool, its limits, the MCP session over it) serves
//! both.
//!
//! An upstream on a Unix socket is written `http+unix:///run/app.sock`
//! (requests go to `/`) or, with a request path, with the socket's path
//! percent-encoded as the host: `http+unix://%2Frun%2Fapp.sock/rpc` (as
//! requests-unixsocket takes it). The connector finds the socket from the
//! URI's host, and the request's `Host` is `localhost`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{HttpsConnector, MaybeHttpsStream};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;

pub use crate::gateway::redact::{UNIX_SCHEME, socket_path};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The origin's HTTP client: pooled connections to an HTTP upstream, over
/// TCP, TLS or a Unix socket.
pub(super) type HttpsClient =
    hyper_util::client::legacy::Client<Connector, http_body_util::Full<bytes::Bytes>>;

/// `http+unix:///PATH` or `http+unix://%2FPATH/REQUEST-PATH` as the URI the
/// client is given; `None` when `s` is not an `http+unix` URL. The error
/// names the forms expected.
///
/// A URI's host cannot hold a path (nor, in the `http` crate, a
/// percent-encoded one), so the client's URI carries the socket's path in
/// hex as its host (as hyperlocal does); [`socket_path`] reads it back.
pub fn parse_unix_url(s: &str) -> Option<Result<Uri, String>> {
    let rest = s.strip_prefix("http+unix://")?;
    let bad = || {
        Err(format!(
            "bad URL {s:?}: expected http+unix:///PATH (an absolute path to the socket; requests go to /) \
             or http+unix://%2FPATH/REQUEST-PATH (the path percent-encoded)"
        ))
    };
    let (socket, request_path) = if rest.starts_with('/') {
        (Some(rest.to_owned()), "/")
    } else {
        let (host, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
        (percent_decode(host), path)
    };
    let Some(socket) = socket.filter(|p| Path::new(p).is_absolute()) else {
        return Some(bad());
    };
    Some(
        format!("{UNIX_SCHEME}://{}{request_path}", hex::encode(socket))
            .parse()
            .map_err(|e| format!("bad URL {s:?}: {e}")),
    )
}

/// `%XX` escapes decoded; `None` for a broken escape or a result that is
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let mut bytes = s.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex = [bytes.next()?, bytes.next()?];
            out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).ok()
}

/// The `Host` a request to `uri` carries when the URI's own host is not a
/// name: `localhost` for a Unix socket (its host is the socket's path in
/// hex, which a server checking `Host`, as MCP servers do against DNS
/// rebinding, would refuse).
pub fn host_override(uri: &Uri) -> Option<hyper::header::HeaderValue> {
    (uri.scheme_str() == Some(UNIX_SCHEME))
        .then(|| hyper::header::HeaderValue::from_static("localhost"))
}

/// Connects to an HTTP upstream over TCP (and TLS for `https`) or, for
/// `http+unix`, over the Unix socket its host names, within `timeout`
/// (`--upstream-connect-timeout`): a host that drops the SYNs, or takes
/// the connection and never answers the TLS handshake, is given up then
/// instead of holding the request for the whole request timeout, and the
/// request, which was not sent, may go to another upstream.
#[derive(Clone)]
pub struct Connector {
    pub inner: HttpsConnector<HttpConnector>,
    pub timeout: std::time::Duration,
}

/// The connection to an upstream was not made within the connect timeout.
#[derive(Debug, thiserror::Error)]
#[error("no connection within {0:?} (--upstream-connect-timeout)")]
pub struct ConnectTimedOut(std::time::Duration);

/// A connection to an HTTP upstream. The TCP/TLS stream is kept inline
/// (no pointer to follow on every read and write); a connection lives in its
/// own task (MCP's client) or boxed in the origin's pool, so its size costs
/// nothing per request.
#[allow(clippy::large_enum_variant)]
pub enum Conn {
    Tcp(MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>),
    #[cfg(unix)]
    Unix(TokioIo<tokio::net::UnixStream>),
}

impl Connector {
    /// HTTP, or HTTPS under `tls`, over TCP; or a Unix socket; each
    /// connection made within `timeout`.
    pub fn new(tls: rustls::ClientConfig, timeout: std::time::Duration) -> Self {
        Self {
            inner: hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .build(),
            timeout,
        }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.timeout;
        let tcp = (uri.scheme_str() != Some(UNIX_SCHEME)).then(|| self.inner.call(uri.clone()));
        Box::pin(async move {
            let connect = async move {
                match tcp {
                    Some(tcp) => Ok(Conn::Tcp(tcp.await?)),
                    None => {
                        let path = socket_path(&uri).ok_or("no socket path in the URL")?;
                        connect_unix(path).await
                    }
                }
            };
            tokio::time::timeout(timeout, connect)
                .await
                .unwrap_or_else(|_| Err(ConnectTimedOut(timeout).into()))
        })
    }
}

#[cfg(unix)]
async fn connect_unix(path: PathBuf) -> Result<Conn, BoxError> {
    let stream = tokio::net::UnixStream::connect(&path)
        .await
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Conn::Unix(TokioIo::new(stream)))
}

#[cfg(not(unix))]
async fn connect_unix(_: PathBuf) -> Result<Conn, BoxError> {
    Err("Unix domain sockets are not available on this system".into())
}

impl Connection for Conn {
    /// What the pool must know of a connection (HTTP/2 negotiated, through
    /// a proxy), without the peer's addresses that hyper-util's TCP stream
    /// adds as an extra: the pool copies an extra into every response, which
    /// costs three allocations per request, and nothing here reads it.
    fn connected(&self) -> Connected {
        match self {
            Conn::Tcp(s) => {
                let full = s.connected();
                let lean = Connected::new().proxy(full.is_proxied());
                if full.is_negotiated_h2() {
                    lean.negotiated_h2()
                } else {
                    lean
                }
            }
            #[cfg(unix)]
            Conn::Unix(_) => Connected::new(),
        }
    }
}

/// Calls `$f` on whichever stream `$self` (a pinned `Conn`) holds.
macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Conn::Tcp($s) => $e,
            #[cfg(unix)]
            Conn::Unix($s) => $e,
        }
    };
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        each!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        each!(self, s => Pin::new(s).poll_shutdown(cx))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Tcp(s) => s.is_write_vectored(),
            #[cfg(unix)]
            Conn::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        each!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::redact::shown;

    #[test]
    fn both_forms_name_the_same_socket() {
        let plain = parse_unix_url("http+unix:///run/app.sock").and_then(Result::ok);
        let plain = plain.expect("the plain form parses");
        assert_eq!(plain.path(), "/");
        assert_eq!(socket_path(&plain), Some(PathBuf::from("/run/app.sock")));
        let with_path = parse_unix_url("http+unix://%2Frun%2Fapp.sock/rpc?x=1")
            .and_then(Result::ok)
            .expect("the encoded form parses");
        assert_eq!(
            socket_path(&with_path),
            Some(PathBuf::from("/run/app.sock"))
        );
        assert_eq!(with_path.path(), "/rpc");
        assert_eq!(
            shown(&with_path).as_deref(),
            Some("http+unix:///run/app.sock")
        );
        // Spaces and other reserved characters in the path survive.
        let odd = parse_unix_url("http+unix:///tmp/a b:c@d.sock").and_then(Result::ok);
        let odd = odd.expect("reserved characters are encoded");
        assert_eq!(socket_path(&odd), Some(PathBuf::from("/tmp/a b:c@d.sock")));
    }

    #[test]
    fn bad_unix_urls_are_refused_with_the_form_expected() {
        assert!(parse_unix_url("http://x").is_none());
        for bad in [
            "http+unix://",
            "http+unix://relative.sock/",
            "http+unix://%2/x",
            "http+unix://%FF/",
        ] {
            let err = parse_unix_url(bad).and_then(Result::err);
            let err = err.unwrap_or_else(|| panic!("{bad:?} was accepted"));
            assert!(
                err.contains("http+unix:///PATH") || err.contains("bad URL"),
                "{err}"
            );
        }
    }
}
