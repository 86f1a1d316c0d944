//! The authorization endpoints of an MCP server of the 2025-03-26 layout,
//! through the pair (`--forward-authorization`; `docs/decisions.md` §10).
//!
//! Such a server is its own authorization server at its own origin, with
//! no protected-resource metadata: a client looks for
//! `/.well-known/oauth-authorization-server` at the origin of the URL it
//! called, and without it for `/authorize`, `/token` and `/register`
//! there (MCP 2025-03-26, "Authorization", 2.3.3). Behind a pair that
//! origin is the edge's, so the edge carries those requests to the origin
//! gateway, which makes them to its upstream's scheme and authority and
//! carries the answers back. URLs of the upstream's origin in an answer
//! (`Location`, and the authorization server's metadata) are mapped to the
//! edge's public origin, as a reverse proxy maps `Location`, and the
//! endpoints the metadata names there are carried from then on.
//!
//! An HTTP message crosses beside a JSON-RPC one of the edge's own, in
//! [`crate::bridge::Extension::HttpRequest`] and `HttpResponse`:
//! `head_len u16 ‖ head ‖ body`. The head is a start line of two fields
//! (a request's method and target; a response's status and the upstream's
//! origin) and header lines, each ending in CRLF. Only the headers an
//! authorization exchange needs cross ([`REQUEST_HEADERS`],
//! [`RESPONSE_HEADERS`]); cookies do not.

use bytes::Bytes;
use hyper::header::{self, HeaderName, HeaderValue};

/// The most of a request's body carried (a token or registration request).
pub const MAX_REQUEST_BODY: usize = 16 << 10;

/// The most an HTTP message may hold as it crosses: a TLV's value.
const MAX_WIRE: usize = u16::MAX as usize;

/// The request headers carried to the upstream.
pub const REQUEST_HEADERS: [HeaderName; 4] = [
    header::ACCEPT,
    header::CONTENT_TYPE,
    header::AUTHORIZATION,
    HeaderName::from_static("dpop"),
];

/// The response headers carried back (an authorization page's framing
/// and content policies among them: it is served at the edge's origin).
pub const RESPONSE_HEADERS: [HeaderName; 11] = [
    header::CONTENT_TYPE,
    header::LOCATION,
    header::CACHE_CONTROL,
    header::PRAGMA,
    header::WWW_AUTHENTICATE,
    header::RETRY_AFTER,
    header::X_FRAME_OPTIONS,
    header::CONTENT_SECURITY_POLICY,
    header::X_CONTENT_TYPE_OPTIONS,
    header::REFERRER_POLICY,
    HeaderName::from_static("dpop-nonce"),
];

/// Where a client of the 2025-03-26 layout looks for an authorization
/// server's endpoints when the server gives no metadata.
const DEFAULT_ENDPOINTS: [&str; 3] = ["/authorize", "/token", "/register"];

/// Where authorization server metadata is looked for (RFC 8414 §3, OpenID
/// Connect Discovery §4), with or without a path inserted after them.
const METADATA: [&str; 2] = [
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
];

/// The most endpoints learned from an authorization server's metadata.
const MAX_LEARNED: usize = 16;

/// Whether the edge carries a request for `path`: the metadata, the
/// default endpoints, or one `learned` from the metadata.
pub fn passes(path: &str, learned: &[String]) -> bool {
    plain(path)
        && (is_metadata(path)
            || DEFAULT_ENDPOINTS.contains(&path)
            || learned.iter().any(|p| p == path))
}

/// Whether `path` names what it says to any server: no `.` or `..`
/// segment (plain or percent-encoded), no encoded slash or backslash, no
/// empty first segment (`//host`), which a server or a proxy before it
/// might resolve to another path.
fn plain(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    path.starts_with('/')
        && !path.starts_with("//")
        && !path.contains('\\')
        && !lower.contains("%2f")
        && !lower.contains("%5c")
        && lower
            .split('/')
            .all(|s| !matches!(s.replace("%2e", ".").as_str(), "." | ".."))
}
fn is_metadata(path: &str) -> bool {
    METADATA.iter().any(|m| {
        path.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// An HTTP request or response as it crosses the pair. Never shows a
/// header's value (one may hold a credential).
#[derive(Clone, PartialEq, Eq)]
pub struct Crossing {
    /// A request's method and target; a response's status and the
    /// upstream's origin (`scheme://authority`).
    pub start: (String, String),
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// Its start line (a target without its query, which may hold a code),
/// its headers' names, its body's length.
impl std::fmt::Debug for Crossing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        let shown = self.start.1.split('?').next().unwrap_or_default();
        let (a, body) = (&self.start.0, self.body.len());
        write!(f, "{a} {shown} {names:?} <{body} octets>")
    }
}

impl Crossing {
    /// The request a client made of the edge: `target` its path and query.
    pub fn request(
        method: &hyper::Method,
        target: &str,
        headers: &hyper::HeaderMap,
        body: Bytes,
    ) -> Self {
        Self {
            start: (method.as_str().to_owned(), target.to_owned()),
            headers: kept(headers, &REQUEST_HEADERS),
            body,
        }
    }

    /// What the upstream at `origin` answered.
    pub fn response(status: u16, origin: &str, headers: &hyper::HeaderMap, body: Bytes) -> Self {
        Self {
            start: (status.to_string(), origin.to_owned()),
            headers: kept(headers, &RESPONSE_HEADERS),
            body,
        }
    }

    /// An answer of the origin gateway's own: `status`, and why as text.
    pub fn failed(status: u16, why: &str) -> Self {
        Self {
            start: (status.to_string(), String::new()),
            headers: vec![(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            body: Bytes::from(format!("{why}\n")),
        }
    }

    /// Its octets on the wire; `None` when they would not fit a TLV.
    pub fn encode(&self) -> Option<Bytes> {
        let mut head = Vec::with_capacity(64);
        head.extend_from_slice(self.start.0.as_bytes());
        head.push(b' ');
        head.extend_from_slice(self.start.1.as_bytes());
        head.extend_from_slice(b"\r\n");
        for (name, value) in &self.headers {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        let len = u16::try_from(head.len()).ok()?;
        if 2 + head.len() + self.body.len() > MAX_WIRE {
            return None;
        }
        let mut out = Vec::with_capacity(2 + head.len() + self.body.len());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&head);
        out.extend_from_slice(&self.body);
        Some(out.into())
    }

    /// What `wire` holds, if it is one.
    pub fn decode(wire: &[u8]) -> Option<Self> {
        let [l0, l1, rest @ ..] = wire else {
            return None;
        };
        let len = usize::from(u16::from_be_bytes([*l0, *l1]));
        let (head, body) = (rest.get(..len)?, rest.get(len..)?);
        // Lines each ending in CRLF: after the last, nothing.
        let mut lines = head.strip_suffix(b"\n")?.split(|b| *b == b'\n');
        let mut line = || lines.next().map(|l| l.strip_suffix(b"\r"));
        let start = std::str::from_utf8(line()??).ok()?;
        let (a, b) = start.split_once(' ')?;
        let mut headers = Vec::new();
        while let Some(line) = line() {
            let line = line?;
            let at = line.iter().position(|b| *b == b':')?;
            let name = HeaderName::from_bytes(&line[..at]).ok()?;
            let value = line[at + 1..].strip_prefix(b" ").unwrap_or(&line[at + 1..]);
            headers.push((name, HeaderValue::from_bytes(value).ok()?));
        }
        Some(Self {
            start: (a.to_owned(), b.to_owned()),
            headers,
            body: Bytes::copy_from_slice(body),
        })
    }
}

fn kept(headers: &hyper::HeaderMap, names: &[HeaderName]) -> Vec<(HeaderName, HeaderValue)> {
    names
        .iter()
        .flat_map(|n| {
            headers
                .get_all(n)
                .iter()
                .map(move |v| (n.clone(), v.clone()))
        })
        .collect()
}

/// At the edge: the answer a client gets for its request of `path`, with
/// URLs of the upstream's origin mapped to the origin of `public` (the
/// edge's public URL), and the endpoints the authorization server's
/// metadata names there added to `learned` (never the public URL's own
/// path, where JSON-RPC is served). `None` for what is not an answer.
pub fn answer_at_edge(
    path: &str,
    wire: &[u8],
    public: &str,
    learned: &mut Vec<String>,
) -> Option<Passed> {
    let Crossing {
        start: (status, upstream),
        mut headers,
        body,
    } = Crossing::decode(wire)?;
    let status = status
        .parse::<u16>()
        .ok()
        .and_then(|s| hyper::StatusCode::from_u16(s).ok())?;
    let (public, own) = super::split_url(public);
    // What an origin should not have sent is not answered with.
    headers.retain(|(name, _)| RESPONSE_HEADERS.contains(name));
    for (name, value) in &mut headers {
        if *name == header::LOCATION
            && let Some(mapped) = value
                .to_str()
                .ok()
                .and_then(|v| map_url(v, &upstream, public))
            && let Ok(v) = HeaderValue::from_str(&mapped)
        {
            *value = v;
        }
    }
    let body = match status.is_success() && is_metadata(path) {
        true => {
            let learn = Learn { own, learned };
            map_metadata(&body, &upstream, public, learn).unwrap_or(body)
        }
        false => body,
    };
    Some(Passed {
        status,
        headers,
        body,
    })
}

/// What the edge answers a client with, of the upstream's answer.
pub struct Passed {
    pub status: hyper::StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// Its status and headers' names (a `Location` or a body may hold a code
/// or a token).
impl std::fmt::Debug for Passed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        write!(f, "{} {names:?} <{} octets>", self.status, self.body.len())
    }
}

/// Where endpoints are learned, and the path never to learn.
struct Learn<'a> {
    own: &'a str,
    learned: &'a mut Vec<String>,
}

/// `url` with the upstream's `origin` replaced by `public`, where it is on
/// that origin.
fn map_url(url: &str, origin: &str, public: &str) -> Option<String> {
    if origin.is_empty() {
        return None;
    }
    let rest = url.strip_prefix(origin)?;
    (rest.is_empty() || rest.starts_with(['/', '?', '#'])).then(|| format!("{public}{rest}"))
}

/// An authorization server's metadata with every URL of the upstream's
/// origin mapped (`issuer` too: RFC 8414 §3.3 has a client check it is
/// where the metadata was fetched); the paths of those endpoints are
/// learned.
fn map_metadata(body: &[u8], origin: &str, public: &str, learn: Learn<'_>) -> Option<Bytes> {
    let Learn { own, learned } = learn;
    let mut doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    for value in doc.values_mut() {
        let serde_json::Value::String(url) = value else {
            continue;
        };
        let Some(mapped) = map_url(url, origin, public) else {
            continue;
        };
        let path = super::split_url(&mapped).1;
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let own = own.split(['?', '#']).next().unwrap_or_default();
        let is_own = path == own || path == "/" && own.is_empty();
        if plain(path)
            && !is_own
            && learned.len() < MAX_LEARNED
            && !learned.iter().any(|p| p == path)
        {
            learned.push(path.to_owned());
        }
        *url = mapped;
    }
    serde_json::to_vec(&doc).ok().map(Bytes::from)
}

/// At the origin: the request an edge carried, made to `upstream`'s scheme
/// and authority (never its user information) by `send` (which answers
/// with the status, headers and body, read within what fits), by
/// `deadline`; the answer's wire. `host`: the `Host` the upstream is
/// called by where it is not its authority (a Unix socket's).
pub async fn pass<F, Fut>(
    wire: &[u8],
    upstream: &hyper::Uri,
    host: Option<HeaderValue>,
    deadline: tokio::time::Instant,
    send: F,
) -> Bytes
where
    F: FnOnce(hyper::Request<http_body_util::Full<Bytes>>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(u16, hyper::HeaderMap, Bytes), String>>,
{
    let scheme = upstream.scheme_str().unwrap_or("http");
    let authority = upstream.authority().map_or("", |a| a.as_str());
    let bare = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    // What the upstream's URLs of itself start with, for the edge to map.
    let origin = match host.as_ref().and_then(|h| h.to_str().ok()) {
        Some(h) => format!("http://{h}"),
        None => format!("{scheme}://{bare}"),
    };
    let host = host.or_else(|| HeaderValue::from_str(bare).ok());
    let answer = match request_to(wire, scheme, bare) {
        Err(why) => Crossing::failed(400, &why),
        Ok(mut req) => {
            if let Some(host) = host {
                req.headers_mut().insert(header::HOST, host);
            }
            // Room for the head beside the body.
            let room = MAX_WIRE - 4096;
            match tokio::time::timeout_at(deadline, send(req, room)).await {
                Ok(Ok((status, headers, body))) => {
                    Crossing::response(status, &origin, &headers, body)
                }
                Ok(Err(why)) => Crossing::failed(502, &why),
                Err(_) => Crossing::failed(504, "the upstream did not answer in time"),
            }
        }
    };
    answer.encode().unwrap_or_else(|| {
        let big = Crossing::failed(502, "the upstream's answer is too large to carry");
        big.encode().unwrap_or_default()
    })
}

/// The request `wire` holds, to `scheme` and `authority`.
fn request_to(
    wire: &[u8],
    scheme: &str,
    authority: &str,
) -> Result<hyper::Request<http_body_util::Full<Bytes>>, String> {
    let c = Crossing::decode(wire).ok_or("a malformed HTTP request")?;
    let method = match c.start.0.as_str() {
        "GET" => hyper::Method::GET,
        "POST" => hyper::Method::POST,
        other => return Err(format!("method {other} is not carried")),
    };
    let target = &c.start.1;
    if !plain(target.split('?').next().unwrap_or_default()) {
        return Err("a target that is not a plain path".into());
    }
    let uri = hyper::Uri::builder()
        .scheme(scheme)
        .authority(authority)
        .path_and_query(target.as_str())
        .build()
        .map_err(|e| format!("the target: {e}"))?;
    let mut req = hyper::Request::new(http_body_util::Full::new(c.body));
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    for (name, mut value) in c.headers {
        if REQUEST_HEADERS.contains(&name) {
            value.set_sensitive(name == header::AUTHORIZATION || name.as_str() == "dpop");
            req.headers_mut().append(name, value);
        }
    }
    Ok(req)
}

/// The origin's reply to the carried `request` beside the upstream's
/// `answer`, scanned with `limits`.
pub fn reply_to(
    request: &[u8],
    answer: &[u8],
    limits: &crate::jsonrpc::Limits,
) -> Result<(Bytes, crate::jsonrpc::Kind), String> {
    use crate::jsonrpc::{Kind, Scanned, scan};
    let id = match scan(request, limits) {
        Ok(Scanned::Single(Kind::Request { id, .. })) => request.get(id.token),
        _ => None,
    };
    let text = Bytes::from(reply(id.ok_or("a request without an id")?, answer));
    match scan(&text, limits) {
        Ok(Scanned::Single(kind)) => Ok((text, kind)),
        _ => Err("the reply to an authorization server request".into()),
    }
}

/// The origin's reply beside the upstream's answer: a result with the
/// request's id (`id`, its token) and the status.
fn reply(id: &[u8], answer: &[u8]) -> Vec<u8> {
    let status = Crossing::decode(answer).map_or_else(|| "502".to_owned(), |c| c.start.0);
    let mut out = Vec::with_capacity(64 + id.len());
    out.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    out.extend_from_slice(id);
    out.extend_from_slice(b",\"result\":{\"status\":");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_crosses_whole() {
        let mut h = hyper::HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        h.insert(header::COOKIE, HeaderValue::from_static("s=1"));
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        let c = Crossing::request(
            &hyper::Method::POST,
            "/token?x=1",
            &h,
            Bytes::from_static(b"grant_type=authorization_code&code=c"),
        );
        let wire = c.encode().expect("fits");
        let back = Crossing::decode(&wire).expect("decodes");
        assert_eq!(back, c);
        assert_eq!(back.headers.len(), 2, "no cookie crosses");
        let shown = format!("{back:?}");
        assert!(!shown.contains("abc"), "{shown}");
        for cut in 0..wire.len() {
            let _ = Crossing::decode(&wire[..cut]);
        }
        let big = Crossing {
            body: vec![b'x'; MAX_WIRE].into(),
            ..c
        };
        assert_eq!(big.encode(), None);
        assert_eq!(Crossing::decode(b"\x00\x03GET"), None);
        assert_eq!(
            Crossing::decode(b"\x00\x06GET /\n"),
            None,
            "a line without CR"
        );
        let bare = Crossing {
            start: ("GET".into(), "/authorize".into()),
            headers: Vec::new(),
            body: Bytes::new(),
        };
        let wire = bare.encode().expect("fits");
        assert_eq!(Crossing::decode(&wire), Some(bare), "no header at all");
    }

    #[test]
    fn the_edge_carries_the_authorization_endpoints_alone() {
        let learned = vec!["/oauth/token".to_owned()];
        for (path, carried) in [
            ("/.well-known/oauth-authorization-server", true),
            ("/.well-known/oauth-authorization-server/mcp", true),
            ("/.well-known/openid-configuration", true),
            ("/.well-known/oauth-authorization-serverX", false),
            ("/.well-known/oauth-protected-resource", false),
            ("/authorize", true),
            ("/token", true),
            ("/register", true),
            ("/oauth/token", true),
            ("/oauth/other", false),
            ("/mcp", false),
            ("/", false),
            ("/.well-known/oauth-authorization-server/../../mcp", false),
            ("/.well-known/oauth-authorization-server/%2E%2e/mcp", false),
            ("/.well-known/oauth-authorization-server/.", false),
            ("/.well-known/oauth-authorization-server/a%2fb", false),
            ("/.well-known/oauth-authorization-server/a\\b", false),
            ("/.well-known/oauth-authorization-server/.x", true),
        ] {
            assert_eq!(passes(path, &learned), carried, "{path}");
        }
    }

    #[test]
    fn urls_of_the_upstream_are_mapped_to_the_edge() {
        let up = "http://127.0.0.1:9";
        let edge = "https://edge.example/mcp";
        let doc = br#"{"issuer":"http://127.0.0.1:9","authorization_endpoint":"http://127.0.0.1:9/oauth/authorize","introspection_endpoint":"http://127.0.0.1:9/mcp","revocation_endpoint":"http://127.0.0.1:9//evil.example/r","token_endpoint":"http://127.0.0.1:99/token","jwks_uri":"https://idp.example/jwks","registration_endpoint":"http://127.0.0.1:9/oauth/register?x=1","scopes_supported":["a"]}"#;
        let mut h = hyper::HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let wire = Crossing::response(200, up, &h, Bytes::from_static(doc))
            .encode()
            .expect("fits");
        let mut learned = Vec::new();
        let Passed { status, body, .. } = answer_at_edge(
            "/.well-known/oauth-authorization-server",
            &wire,
            edge,
            &mut learned,
        )
        .expect("an answer");
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(v["issuer"], "https://edge.example");
        assert_eq!(
            v["authorization_endpoint"],
            "https://edge.example/oauth/authorize"
        );
        assert_eq!(
            v["token_endpoint"], "http://127.0.0.1:99/token",
            "another port"
        );
        assert_eq!(v["jwks_uri"], "https://idp.example/jwks");
        assert_eq!(
            v["registration_endpoint"],
            "https://edge.example/oauth/register?x=1"
        );
        assert_eq!(
            learned,
            ["/oauth/authorize", "/oauth/register"],
            "not the edge's own path, nor what is not a path"
        );

        let mut h = hyper::HeaderMap::new();
        h.insert(
            header::LOCATION,
            HeaderValue::from_static("http://127.0.0.1:9/login?next=1"),
        );
        let wire = Crossing::response(302, up, &h, Bytes::new())
            .encode()
            .expect("fits");
        let Passed {
            status, headers, ..
        } = answer_at_edge("/authorize", &wire, edge, &mut learned).expect("an answer");
        assert_eq!(status, 302);
        assert_eq!(headers[0].1, "https://edge.example/login?next=1");
        let mut h = hyper::HeaderMap::new();
        h.insert(
            header::LOCATION,
            HeaderValue::from_static("http://localhost:3000/callback?code=c"),
        );
        let wire = Crossing::response(302, up, &h, Bytes::new())
            .encode()
            .expect("fits");
        let Passed { headers, .. } =
            answer_at_edge("/authorize", &wire, edge, &mut learned).expect("an answer");
        assert_eq!(
            headers[0].1, "http://localhost:3000/callback?code=c",
            "the client's own"
        );
        assert_eq!(map_url("http://127.0.0.1:99/x", up, "https://e"), None);
    }

    #[tokio::test]
    async fn the_origin_makes_the_request_to_its_upstream_alone() {
        // User information in the upstream's URL goes nowhere.
        let up: hyper::Uri = "http://user:key@127.0.0.1:9/mcp".parse().expect("uri");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        let wire = |method: &str, target: &str| {
            Crossing {
                start: (method.into(), target.into()),
                headers: vec![(header::COOKIE, HeaderValue::from_static("s=1"))],
                body: Bytes::new(),
            }
            .encode()
            .expect("fits")
        };
        let seen = std::sync::Mutex::new(Vec::new());
        for (method, target, want) in [
            ("GET", "/authorize?a=1", "200"),
            ("POST", "/token", "200"),
            ("DELETE", "/token", "400"),
            ("GET", "//evil.example/x", "400"),
            ("GET", "http://evil.example/x", "400"),
            ("GET", "/authorize/../mcp?a=1", "400"),
            ("GET", "/authorize/%2e%2E/mcp", "400"),
        ] {
            let answer = pass(&wire(method, target), &up, None, deadline, |req, _| {
                let host = req.headers().get(header::HOST).cloned();
                seen.lock().expect("lock").push((
                    req.uri().to_string(),
                    req.headers().contains_key(header::COOKIE),
                    host,
                ));
                async { Ok((200, hyper::HeaderMap::new(), Bytes::new())) }
            })
            .await;
            let c = Crossing::decode(&answer).expect("an answer");
            assert_eq!(c.start.0, want, "{method} {target}");
            if want == "200" {
                assert_eq!(c.start.1, "http://127.0.0.1:9", "what the edge maps from");
            }
        }
        let host = Some(HeaderValue::from_static("127.0.0.1:9"));
        assert_eq!(
            *seen.lock().expect("lock"),
            [
                (
                    "http://127.0.0.1:9/authorize?a=1".to_owned(),
                    false,
                    host.clone()
                ),
                ("http://127.0.0.1:9/token".to_owned(), false, host)
            ]
        );
        // A Unix socket's upstream is called, and maps from, `localhost`.
        let answer = pass(
            &wire("GET", "/authorize"),
            &up,
            Some(HeaderValue::from_static("localhost")),
            deadline,
            |req, _| {
                let host = req.headers().get(header::HOST).cloned();
                async move {
                    assert_eq!(host, Some(HeaderValue::from_static("localhost")));
                    Ok((200, hyper::HeaderMap::new(), Bytes::new()))
                }
            },
        )
        .await;
        let c = Crossing::decode(&answer).expect("an answer");
        assert_eq!(c.start.1, "http://localhost");
        assert_eq!(
            reply(b"7", &answer_of(200)),
            br#"{"jsonrpc":"2.0","id":7,"result":{"status":200}}"#
        );
    }

    fn answer_of(status: u16) -> Bytes {
        Crossing::response(status, "http://u", &hyper::HeaderMap::new(), Bytes::new())
            .encode()
            .expect("fits")
    }
}
