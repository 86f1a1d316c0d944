//! OAuth that crosses the pair (`--forward-authorization`, issue 53 item
//! 3): for an upstream that is itself an OAuth resource server, the edge
//! carries the client's `Authorization` header beside each request, the
//! origin presents it to the upstream, and the upstream's `401` or `403`
//! comes back to the client as that status with its `WWW-Authenticate`.
//! How it crosses is `docs/decisions.md` §9: this gateway's extension TLV
//! ([`crate::bridge::Extension`]).
//!
//! A client checks that the protected-resource metadata (RFC 9728) names
//! the URL it called, so the edge maps it as a reverse proxy maps
//! `Location`: the origin sends the upstream's metadata back beside the
//! refusal, the edge puts its own public URL (`--public-url`) in its
//! `resource` and serves it at its own well-known path, and the challenge's
//! `resource_metadata` names that. Such an upstream then receives tokens
//! issued for the edge's public URL, as any server behind a reverse proxy
//! does.
//!
//! The challenge's value on the wire: `status u16 ‖ challenge_len u16 ‖
//! WWW-Authenticate ‖ metadata` (big-endian; the metadata may be empty).

use std::sync::Mutex;

use bytes::Bytes;

/// The most of the upstream's metadata carried back.
pub const MAX_METADATA: usize = 32 << 10;

/// The most of a `WWW-Authenticate` value carried back.
pub const MAX_CHALLENGE: usize = 4 << 10;

/// What `--forward-authorization` configures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardSpec {
    /// The URL clients call (`--public-url`): what the upstream's metadata
    /// is mapped to.
    pub public_url: String,
}

/// An edge that forwards its clients' credentials.
#[derive(Debug)]
pub struct Forwarding {
    spec: ForwardSpec,
    /// Where the mapped metadata is served: the path-inserted form, and
    /// the bare one.
    metadata_paths: [String; 2],
    /// The upstream's metadata, mapped, as it last came back.
    metadata: Mutex<Option<Bytes>>,
}

impl Forwarding {
    pub fn new(spec: ForwardSpec) -> Self {
        let (_, path) = split_url(&spec.public_url);
        let bare = WELL_KNOWN.to_owned();
        Self {
            metadata_paths: [format!("{bare}{path}"), bare],
            spec,
            metadata: Mutex::new(None),
        }
    }

    /// The metadata's URL at this edge (RFC 9728 §3).
    pub fn metadata_url(&self) -> String {
        let (origin, path) = split_url(&self.spec.public_url);
        format!("{origin}{WELL_KNOWN}{path}")
    }

    /// The upstream's metadata, mapped, if `path` is where it is served:
    /// `Some(None)` when no refusal has brought it yet.
    pub fn metadata_at(&self, path: &str) -> Option<Option<Bytes>> {
        self.metadata_paths.iter().any(|p| p == path).then(|| {
            self.metadata
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        })
    }

    /// What the edge answers for a refusal `challenge` came back with: its
    /// status (401 or 403) and its `WWW-Authenticate`, `resource_metadata`
    /// mapped to this edge; the metadata is kept, mapped, to be served.
    /// `None` for a value that is not one.
    pub fn answer(&self, challenge: &[u8]) -> Option<(u16, String)> {
        let (status, www_authenticate, metadata) = decode_challenge(challenge)?;
        let status = if status == 403 { 403 } else { 401 };
        if let Some(mapped) = self.map_metadata(metadata) {
            *self.metadata.lock().unwrap_or_else(|p| p.into_inner()) = Some(mapped);
        }
        let value = std::str::from_utf8(www_authenticate).ok()?;
        Some((
            status,
            with_resource_metadata(value, &self.metadata_url()),
        ))
    }

    /// The upstream's metadata with this edge's public URL as its
    /// `resource`; `None` for what is not a JSON object.
    fn map_metadata(&self, metadata: &[u8]) -> Option<Bytes> {
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(metadata).ok()?;
        doc.insert(
            "resource".into(),
            serde_json::Value::String(self.spec.public_url.clone()),
        );
        serde_json::to_vec(&doc).ok().map(Bytes::from)
    }
}

/// Where RFC 9728 puts the metadata.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// `https://host:port/path/` as (`https://host:port`, `/path`): the path
/// without its trailing slash, empty for the root.
pub fn split_url(url: &str) -> (&str, &str) {
    let after = url.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match url[after..].find('/') {
        Some(i) => url.split_at(after + i),
        None => (url, ""),
    };
    (origin, if path == "/" { "" } else { path })
}

/// The wire value of a refusal (see the module's doc); the challenge and
/// the metadata cut to their limits (metadata over its limit is left out).
pub fn encode_challenge(status: u16, www_authenticate: &[u8], metadata: &[u8]) -> Bytes {
    let challenge = &www_authenticate[..www_authenticate.len().min(MAX_CHALLENGE)];
    let metadata = if metadata.len() <= MAX_METADATA {
        metadata
    } else {
        &[]
    };
    let mut out = Vec::with_capacity(4 + challenge.len() + metadata.len());
    out.extend_from_slice(&status.to_be_bytes());
    // At most MAX_CHALLENGE: fits.
    out.extend_from_slice(&(challenge.len() as u16).to_be_bytes());
    out.extend_from_slice(challenge);
    out.extend_from_slice(metadata);
    out.into()
}

/// The status, `WWW-Authenticate` and metadata of a refusal's wire value.
pub fn decode_challenge(value: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    let [s0, s1, l0, l1, rest @ ..] = value else {
        return None;
    };
    let len = usize::from(u16::from_be_bytes([*l0, *l1]));
    let (challenge, metadata) = (rest.get(..len)?, rest.get(len..)?);
    Some((u16::from_be_bytes([*s0, *s1]), challenge, metadata))
}

/// The value of the auth-param `name` of a `WWW-Authenticate` value
/// (RFC 9110 §11.2: a token or a quoted string), unquoted; the first.
pub fn auth_param<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = value;
    while let Some(i) = find_param(rest, name) {
        let after = rest[i + name.len()..].trim_start();
        let Some(v) = after.strip_prefix('=') else {
            rest = &rest[i + name.len()..];
            continue;
        };
        let v = v.trim_start();
        return Some(match v.strip_prefix('"') {
            Some(q) => q.split('"').next().unwrap_or_default(),
            None => v
                .split(|c: char| c == ',' || c.is_ascii_whitespace())
                .next()
                .unwrap_or_default(),
        });
    }
    None
}

/// Where `name` starts as a parameter's name in `value`: at the start or
/// after a space or comma, in any case.
fn find_param(value: &str, name: &str) -> Option<usize> {
    let lower = value.to_ascii_lowercase();
    let name = name.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find(&name).map(|i| i + from) {
        let before = lower[..i].chars().next_back();
        if before.is_none_or(|c| c == ' ' || c == ',' || c == '\t') {
            return Some(i);
        }
        from = i + name.len();
    }
    None
}

/// `value` with its `resource_metadata` naming `url` (added when it has
/// none). What a header cannot carry in a quoted string is left out of
/// `url`.
pub fn with_resource_metadata(value: &str, url: &str) -> String {
    let url: String = url
        .chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control() && !matches!(c, '"' | '\\'))
        .collect();
    const NAME: &str = "resource_metadata";
    let Some(i) = find_param(value, NAME) else {
        return if value.trim().contains(' ') {
            format!("{value}, {NAME}=\"{url}\"")
        } else {
            format!("{} {NAME}=\"{url}\"", value.trim())
        };
    };
    let after = &value[i + NAME.len()..];
    let Some(eq) = after.find('=') else {
        return value.to_owned();
    };
    let v = after[eq + 1..].trim_start();
    let start = value.len() - v.len();
    let end = match v.strip_prefix('"') {
        Some(q) => start + 1 + q.find('"').map_or(q.len(), |j| j + 1),
        None => start + v.find([',', ' ', '\t']).unwrap_or(v.len()),
    };
    format!("{}\"{url}\"{}", &value[..start], &value[end..])
}

/// The `Authorization` the edge forwarded, presented: the client's, in
/// place of any `--upstream-header` one, or none when the client sent none.
pub fn present(headers: &mut hyper::HeaderMap, authorization: &Bytes) {
    headers.remove(hyper::header::AUTHORIZATION);
    if authorization.is_empty() {
        return;
    }
    match hyper::header::HeaderValue::from_maybe_shared(authorization.clone()) {
        Ok(mut v) => {
            v.set_sensitive(true);
            headers.insert(hyper::header::AUTHORIZATION, v);
        }
        Err(_) => tracing::debug!("a forwarded Authorization that no header can carry: not presented"),
    }
}

/// Where an upstream's protected-resource metadata is: the URL its
/// refusal's `challenge` names, else its well-known path for `upstream`.
/// Fetched from the upstream's own scheme and authority alone (an upstream
/// does not make the origin fetch from elsewhere): a URL named on another
/// (a server that knows its public URL, the edge's, names that) is taken
/// for its path on the upstream's.
pub fn metadata_uri(challenge: &[u8], upstream: &hyper::Uri) -> Option<hyper::Uri> {
    let named = std::str::from_utf8(challenge)
        .ok()
        .and_then(|c| auth_param(c, "resource_metadata"))
        .and_then(|u| u.parse::<hyper::Uri>().ok());
    let path = match &named {
        Some(uri) => uri
            .path_and_query()
            .map_or_else(|| WELL_KNOWN.to_owned(), |p| p.as_str().to_owned()),
        None => {
            let text = upstream.to_string();
            format!("{WELL_KNOWN}{}", split_url(&text).1)
        }
    };
    hyper::Uri::builder()
        .scheme(upstream.scheme()?.clone())
        .authority(upstream.authority()?.clone())
        .path_and_query(path)
        .build()
        .ok()
}

/// The JSON-RPC error an origin answers a request with whose forwarded
/// credential the upstream refused with `status` (-32012, the request's
/// id token `id`), beside the Challenge.
pub fn refused_reply(id: Option<&[u8]>, status: u16) -> Vec<u8> {
    let message = if status == 403 {
        "Forbidden by the upstream"
    } else {
        "Unauthorized by the upstream"
    };
    let data = format!("{{\"status\":{status}}}");
    crate::jsonrpc::carriage::local_error(id, crate::relay::UNAUTHORIZED_CODE, message, Some(&data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_crosses_and_comes_back_whole() {
        let wire = encode_challenge(401, b"Bearer realm=\"x\"", b"{\"resource\":\"u\"}");
        assert_eq!(
            decode_challenge(&wire),
            Some((401, &b"Bearer realm=\"x\""[..], &b"{\"resource\":\"u\"}"[..]))
        );
        assert_eq!(decode_challenge(&[0, 1, 0, 9, b'x']), None);
        assert_eq!(decode_challenge(&[0, 1]), None);
        // Metadata over its limit is left out, not cut.
        let big = vec![b' '; MAX_METADATA + 1];
        let wire = encode_challenge(403, b"Bearer", &big);
        assert_eq!(decode_challenge(&wire), Some((403, &b"Bearer"[..], &b""[..])));
    }

    #[test]
    fn the_challenge_names_the_edges_metadata() {
        let url = "https://edge.example/.well-known/oauth-protected-resource/mcp";
        for (given, want) in [
            (
                "Bearer resource_metadata=\"http://up:9/.well-known/oauth-protected-resource/mcp\", scope=\"a b\"",
                format!("Bearer resource_metadata=\"{url}\", scope=\"a b\""),
            ),
            (
                "Bearer error=\"insufficient_scope\", RESOURCE_METADATA=http://up:9/m",
                format!("Bearer error=\"insufficient_scope\", RESOURCE_METADATA=\"{url}\""),
            ),
            ("Bearer", format!("Bearer resource_metadata=\"{url}\"")),
            (
                "Bearer realm=\"up\"",
                format!("Bearer realm=\"up\", resource_metadata=\"{url}\""),
            ),
            // A parameter whose name only ends the same is not it.
            (
                "Bearer x_resource_metadata=\"a\"",
                format!("Bearer x_resource_metadata=\"a\", resource_metadata=\"{url}\""),
            ),
        ] {
            assert_eq!(with_resource_metadata(given, url), want, "{given}");
        }
        assert_eq!(
            auth_param("Bearer scope=\"a b\", resource_metadata=\"u\"", "resource_metadata"),
            Some("u")
        );
        assert_eq!(auth_param("Bearer error=invalid_token", "error"), Some("invalid_token"));
        assert_eq!(auth_param("Bearer", "scope"), None);
    }

    #[test]
    fn the_metadata_is_fetched_from_the_upstream_alone() {
        let up: hyper::Uri = "http://127.0.0.1:9/mcp".parse().expect("uri");
        let at = |c: &str| metadata_uri(c.as_bytes(), &up).map(|u| u.to_string());
        assert_eq!(
            at("Bearer resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/x\""),
            Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/x".into())
        );
        // Named elsewhere (the server knows the edge's URL): its path here.
        assert_eq!(
            at("Bearer resource_metadata=\"https://evil.example/.well-known/oauth-protected-resource/mcp\""),
            Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp".into())
        );
        assert_eq!(
            at("Bearer"),
            Some("http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp".into())
        );
    }

    #[test]
    fn the_upstreams_metadata_names_the_edge_and_is_served_where_the_challenge_says() {
        let f = Forwarding::new(ForwardSpec {
            public_url: "https://edge.example/mcp".into(),
        });
        let path = "/.well-known/oauth-protected-resource/mcp";
        assert_eq!(f.metadata_at(path), Some(None));
        assert_eq!(f.metadata_at("/mcp"), None);
        let wire = encode_challenge(
            401,
            b"Bearer resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp\"",
            br#"{"resource":"http://127.0.0.1:9/mcp","authorization_servers":["https://as.example"]}"#,
        );
        let (status, value) = f.answer(&wire).expect("an answer");
        assert_eq!(status, 401);
        assert_eq!(
            value,
            format!("Bearer resource_metadata=\"https://edge.example{path}\"")
        );
        let served = f.metadata_at(path).flatten().expect("kept");
        let doc: serde_json::Value = serde_json::from_slice(&served).expect("JSON");
        assert_eq!(doc["resource"], "https://edge.example/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://as.example");
        assert!(f.metadata_at(WELL_KNOWN).flatten().is_some());
    }
}
