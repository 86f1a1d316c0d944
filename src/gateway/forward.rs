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
//! The challenge's value on the wire: `status u16 ‖ map u8 ‖ challenge_len
//! u16 ‖ WWW-Authenticate ‖ metadata` (big-endian; the metadata may be
//! empty). `map` says how the metadata's `resource` relates to the URL the
//! origin calls ([`mapping`]): the same URL with its last `map` path
//! segments taken away, which the edge maps to its public URL with as many
//! taken away; [`NO_MAP`]: another URL, which the edge leaves as it is (a
//! client then refuses it, as RFC 9728 §3.3 asks: a proxy must not make a
//! resource that names another server look like itself).

use std::sync::Mutex;

use bytes::Bytes;

pub mod passthrough;

/// The most of the upstream's metadata carried back.
pub const MAX_METADATA: usize = 32 << 10;

/// The most of a `WWW-Authenticate` value carried back.
pub const MAX_CHALLENGE: usize = 4 << 10;

/// [`mapping`] of a `resource` that is not the upstream's.
pub const NO_MAP: u8 = u8::MAX;

/// How long the edge remembers that the upstream has no metadata to give,
/// before a GET of it asks again.
pub const PROBE_AGAIN: std::time::Duration = std::time::Duration::from_secs(60);

/// How long an origin keeps what it fetched of an upstream's metadata
/// (found or not).
pub const METADATA_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The most fetches of metadata an origin keeps (an upstream names the
/// URL, so it could name a new one each time).
const METADATA_KEPT: usize = 64;

/// An origin's fetches of its upstreams' metadata, found or not, by the
/// URL fetched, each kept [`METADATA_TTL`]: a flood of requests without a
/// credential costs the upstream one fetch a minute, not one each.
#[derive(Debug, Default)]
pub struct MetadataCache(Mutex<std::collections::HashMap<String, (std::time::Instant, u8, Bytes)>>);

impl MetadataCache {
    /// The upstream's metadata its refusal `challenge` names (else the
    /// well-known ones of `upstream`), and how its `resource` maps
    /// ([`mapping`]); `get` fetches one URL (its body on a 2xx, at most
    /// [`MAX_METADATA`]). Empty with [`NO_MAP`] when none can be had by
    /// `deadline` (or within 5 s).
    pub async fn fetch<F, Fut>(
        &self,
        challenge: &[u8],
        upstream: &hyper::Uri,
        deadline: tokio::time::Instant,
        get: F,
    ) -> (u8, Bytes)
    where
        F: Fn(hyper::Uri) -> Fut,
        Fut: std::future::Future<Output = Option<Bytes>>,
    {
        let uris = metadata_uris(challenge, upstream);
        let Some(key) = uris.first().map(ToString::to_string) else {
            return (NO_MAP, Bytes::new());
        };
        if let Some((at, map, doc)) = self.lock().get(&key)
            && at.elapsed() < METADATA_TTL
        {
            return (*map, doc.clone());
        }
        let deadline =
            deadline.min(tokio::time::Instant::now() + std::time::Duration::from_secs(5));
        let found = tokio::time::timeout_at(deadline, async {
            for uri in uris {
                if let Some(doc) = get(uri).await {
                    return Some(doc);
                }
            }
            None
        })
        .await;
        let (map, doc) = match found {
            Ok(Some(doc)) => (mapping(&doc, upstream), doc),
            Ok(None) => (NO_MAP, Bytes::new()),
            // Out of time: not kept, the next refusal tries again.
            Err(_) => return (NO_MAP, Bytes::new()),
        };
        let mut kept = self.lock();
        if kept.len() >= METADATA_KEPT {
            kept.clear();
        }
        kept.insert(key, (std::time::Instant::now(), map, doc.clone()));
        (map, doc)
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (std::time::Instant, u8, Bytes)>>
    {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

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
    /// When a probe last found none (see [`Forwarding::wants_probe`]).
    probed: Mutex<Option<std::time::Instant>>,
    /// The endpoints the upstream's authorization server metadata named
    /// at its own origin, carried from then on ([`passthrough`]).
    learned: Mutex<Vec<String>>,
}

impl Forwarding {
    pub fn new(spec: ForwardSpec) -> Self {
        Self {
            metadata_paths: metadata_paths_of(&spec.public_url),
            spec,
            metadata: Mutex::new(None),
            probed: Mutex::new(None),
            learned: Mutex::new(Vec::new()),
        }
    }

    /// Whether a request for `path` goes to the upstream's authorization
    /// server ([`passthrough::passes`]).
    pub fn passes(&self, path: &str) -> bool {
        passthrough::passes(
            path,
            &self.learned.lock().unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// What the client that asked for `path` is answered, of the
    /// upstream's answer `wire` ([`passthrough::answer_at_edge`]).
    pub fn passed(&self, path: &str, wire: &[u8]) -> Option<passthrough::Passed> {
        let mut learned = self.learned.lock().unwrap_or_else(|p| p.into_inner());
        passthrough::answer_at_edge(path, wire, &self.spec.public_url, &mut learned)
    }

    /// Whether a GET of the metadata, with none kept, is to ask the
    /// upstream for it (a request without a credential, whose refusal
    /// brings it): not again within [`PROBE_AGAIN`] of one that found none.
    pub fn wants_probe(&self) -> bool {
        let mut probed = self.probed.lock().unwrap_or_else(|p| p.into_inner());
        if probed.is_some_and(|at| at.elapsed() < PROBE_AGAIN) {
            return false;
        }
        *probed = Some(std::time::Instant::now());
        true
    }

    /// The metadata's URL at this edge (RFC 9728 §3).
    pub fn metadata_url(&self) -> String {
        metadata_url_of(&self.spec.public_url)
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
    /// status (401 or 403) and its `WWW-Authenticate`; the metadata is
    /// kept, mapped, to be served, and where the edge has some, the
    /// challenge's `resource_metadata` names it here (else the challenge is
    /// the upstream's as it came: no URL of the edge's that would answer
    /// 404). `None` for a value that is not one.
    pub fn answer(&self, challenge: &[u8]) -> Option<(u16, String)> {
        let (status, map, www_authenticate, metadata) = decode_challenge(challenge)?;
        let status = if status == 403 { 403 } else { 401 };
        let mut kept = self.metadata.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mapped) = self.map_metadata(metadata, map) {
            *kept = Some(mapped);
        }
        // A challenge that is not text (or was cut within a character)
        // still refuses: a bare one.
        let value = std::str::from_utf8(www_authenticate).unwrap_or("Bearer");
        Some(match kept.is_some() {
            true => (status, with_resource_metadata(value, &self.metadata_url())),
            false => (status, value.to_owned()),
        })
    }

    /// The upstream's metadata with its `resource` mapped to this edge's
    /// public URL as `map` says (with `map` path segments taken away; left
    /// as it is for [`NO_MAP`]); `None` for what is not a JSON object.
    fn map_metadata(&self, metadata: &[u8], map: u8) -> Option<Bytes> {
        if metadata.len() > MAX_METADATA {
            return None;
        }
        let mut doc: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(metadata).ok()?;
        if let Some(mapped) = without_segments(&self.spec.public_url, map) {
            doc.insert("resource".into(), serde_json::Value::String(mapped));
        }
        // Written again, a document may grow (numbers written out): what
        // grows past twice the limit is not kept.
        let mapped = serde_json::to_vec(&doc).ok()?;
        (mapped.len() <= 2 * MAX_METADATA).then(|| Bytes::from(mapped))
    }
}

pub use super::oauth::{WELL_KNOWN, split_url};
use super::oauth::{metadata_paths_of, metadata_url_of, quoted};

/// `url` with its last `n` path segments taken away; `None` for
/// [`NO_MAP`], or more segments than it has.
fn without_segments(url: &str, n: u8) -> Option<String> {
    if n == NO_MAP {
        return None;
    }
    let (origin, path) = split_url(url);
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let keep = segments.len().checked_sub(usize::from(n))?;
    Some(match keep {
        0 => origin.to_owned(),
        _ => format!("{origin}/{}", segments[..keep].join("/")),
    })
}

/// How the `resource` of an upstream's `metadata` relates to the URL the
/// origin calls it at, `upstream`: the number of path segments that URL
/// has beyond it (same scheme and authority, its path segments a prefix of
/// the URL's), else [`NO_MAP`].
pub fn mapping(metadata: &[u8], upstream: &hyper::Uri) -> u8 {
    #[derive(serde::Deserialize)]
    struct Doc {
        resource: String,
    }
    let Some(resource) = serde_json::from_slice::<Doc>(metadata)
        .ok()
        .and_then(|d| d.resource.parse::<hyper::Uri>().ok())
    else {
        return NO_MAP;
    };
    let same_host = resource.scheme() == upstream.scheme()
        && resource
            .authority()
            .zip(upstream.authority())
            .is_some_and(|(a, b)| a.as_str().eq_ignore_ascii_case(b.as_str()));
    let segments = |u: &hyper::Uri| -> Vec<String> {
        u.path()
            .split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let (theirs, ours) = (segments(&resource), segments(upstream));
    if !same_host || resource.query().is_some() || !ours.starts_with(&theirs) {
        return NO_MAP;
    }
    u8::try_from(ours.len() - theirs.len())
        .ok()
        .filter(|n| *n != NO_MAP)
        .unwrap_or(NO_MAP)
}

/// The wire value of a refusal (see the module's doc); the challenge and
/// the metadata cut to their limits (metadata over its limit is left out).
pub fn encode_challenge(status: u16, map: u8, www_authenticate: &[u8], metadata: &[u8]) -> Bytes {
    let challenge = &www_authenticate[..www_authenticate.len().min(MAX_CHALLENGE)];
    let metadata = if metadata.len() <= MAX_METADATA {
        metadata
    } else {
        &[]
    };
    let mut out = Vec::with_capacity(5 + challenge.len() + metadata.len());
    out.extend_from_slice(&status.to_be_bytes());
    out.push(map);
    // At most MAX_CHALLENGE: fits.
    out.extend_from_slice(&(challenge.len() as u16).to_be_bytes());
    out.extend_from_slice(challenge);
    out.extend_from_slice(metadata);
    out.into()
}

/// The status, mapping, `WWW-Authenticate` and metadata of a refusal's
/// wire value.
pub fn decode_challenge(value: &[u8]) -> Option<(u16, u8, &[u8], &[u8])> {
    let [s0, s1, map, l0, l1, rest @ ..] = value else {
        return None;
    };
    let len = usize::from(u16::from_be_bytes([*l0, *l1]));
    let (challenge, metadata) = (rest.get(..len)?, rest.get(len..)?);
    Some((u16::from_be_bytes([*s0, *s1]), *map, challenge, metadata))
}

/// The value of the auth-param `name` of a `WWW-Authenticate` value
/// (RFC 9110 §11.2: a token or a quoted string), unquoted; the first.
pub fn auth_param<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    let (start, end) = find_param(value, name)?;
    Some(value[start..end].trim_matches('"'))
}

/// Where the value of the auth-param `name` is in `value` (its name in any
/// case, at the start or after a space, a tab or a comma): where it starts
/// and ends, a quoted string's quotes included. A name without `=` after
/// it is none.
fn find_param(value: &str, name: &str) -> Option<(usize, usize)> {
    let lower = value.to_ascii_lowercase();
    let name = name.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower.get(from..)?.find(&name).map(|i| i + from) {
        from = i + name.len();
        let before = lower[..i].chars().next_back();
        if !before.is_none_or(|c| matches!(c, ' ' | ',' | '\t')) {
            continue;
        }
        let after = value[from..].trim_start_matches([' ', '\t']);
        let Some(v) = after.strip_prefix('=') else {
            continue;
        };
        let v = v.trim_start_matches([' ', '\t']);
        let start = value.len() - v.len();
        let len = match v.strip_prefix('"') {
            Some(q) => 1 + q.find('"').map_or(q.len(), |j| j + 1),
            None => v.find([',', ' ', '\t']).unwrap_or(v.len()),
        };
        return Some((start, start + len));
    }
    None
}

/// `value` with its `resource_metadata` naming `url` (added when it has
/// none). What a header cannot carry in a quoted string is left out of
/// `url`.
pub fn with_resource_metadata(value: &str, url: &str) -> String {
    let url = quoted(url);
    const NAME: &str = "resource_metadata";
    match find_param(value, NAME) {
        Some((start, end)) => format!("{}\"{url}\"{}", &value[..start], &value[end..]),
        None if value.trim().contains(' ') => format!("{}, {NAME}=\"{url}\"", value.trim()),
        None => format!("{} {NAME}=\"{url}\"", value.trim()),
    }
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
        Err(_) => {
            tracing::debug!("a forwarded Authorization that no header can carry: not presented")
        }
    }
}

/// Where an upstream's protected-resource metadata may be, in the order to
/// try: the URL its refusal's `challenge` names, else its well-known path
/// for `upstream` (path-inserted, then bare, as RFC 9728 and MCP clients
/// look). Fetched from the upstream's own scheme and authority alone (an
/// upstream does not make the origin fetch from elsewhere): a URL named on
/// another (a server that knows its public URL, the edge's, names that)
/// is taken for its path on the upstream's.
pub fn metadata_uris(challenge: &[u8], upstream: &hyper::Uri) -> Vec<hyper::Uri> {
    let named = std::str::from_utf8(challenge)
        .ok()
        .and_then(|c| auth_param(c, "resource_metadata"))
        .and_then(|u| u.parse::<hyper::Uri>().ok());
    let paths = match &named {
        Some(uri) => vec![
            uri.path_and_query()
                .map_or_else(|| WELL_KNOWN.to_owned(), |p| p.as_str().to_owned()),
        ],
        None => {
            let text = upstream.to_string();
            let path = split_url(&text).1;
            let mut paths = vec![format!("{WELL_KNOWN}{path}")];
            if !path.is_empty() {
                paths.push(WELL_KNOWN.to_owned());
            }
            paths
        }
    };
    let (Some(scheme), Some(authority)) = (upstream.scheme(), upstream.authority()) else {
        return Vec::new();
    };
    paths
        .into_iter()
        .filter_map(|path| {
            hyper::Uri::builder()
                .scheme(scheme.clone())
                .authority(authority.clone())
                .path_and_query(path)
                .build()
                .ok()
        })
        .collect()
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
        let wire = encode_challenge(401, 0, b"Bearer realm=\"x\"", b"{\"resource\":\"u\"}");
        assert_eq!(
            decode_challenge(&wire),
            Some((
                401,
                0,
                &b"Bearer realm=\"x\""[..],
                &b"{\"resource\":\"u\"}"[..]
            ))
        );
        assert_eq!(decode_challenge(&[0, 1, 0, 0, 9, b'x']), None);
        assert_eq!(decode_challenge(&[0, 1]), None);
        // Metadata over its limit is left out, not cut.
        let big = vec![b' '; MAX_METADATA + 1];
        let wire = encode_challenge(403, NO_MAP, b"Bearer", &big);
        assert_eq!(
            decode_challenge(&wire),
            Some((403, NO_MAP, &b"Bearer"[..], &b""[..]))
        );
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
            auth_param(
                "Bearer scope=\"a b\", resource_metadata=\"u\"",
                "resource_metadata"
            ),
            Some("u")
        );
        assert_eq!(
            auth_param("Bearer error=invalid_token", "error"),
            Some("invalid_token")
        );
        assert_eq!(auth_param("Bearer", "scope"), None);
    }

    #[test]
    fn the_metadata_is_fetched_from_the_upstream_alone() {
        let up: hyper::Uri = "http://127.0.0.1:9/mcp".parse().expect("uri");
        let at = |c: &str| {
            metadata_uris(c.as_bytes(), &up)
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            at(
                "Bearer resource_metadata=\"http://127.0.0.1:9/.well-known/oauth-protected-resource/x\""
            ),
            ["http://127.0.0.1:9/.well-known/oauth-protected-resource/x"]
        );
        // Named elsewhere (the server knows the edge's URL): its path here.
        assert_eq!(
            at(
                "Bearer resource_metadata=\"https://evil.example/.well-known/oauth-protected-resource/mcp\""
            ),
            ["http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp"]
        );
        // None named: the path-inserted one, then the bare one.
        assert_eq!(
            at("Bearer"),
            [
                "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp",
                "http://127.0.0.1:9/.well-known/oauth-protected-resource"
            ]
        );
    }

    #[test]
    fn a_resource_maps_to_the_edge_only_where_it_is_the_upstreams() {
        let up: hyper::Uri = "http://localhost:9/a/mcp".parse().expect("uri");
        let doc = |r: &str| format!("{{\"resource\":\"{r}\"}}");
        for (resource, map) in [
            ("http://localhost:9/a/mcp", 0),
            ("http://localhost:9/a/mcp/", 0),
            ("http://LOCALHOST:9/a", 1),
            ("http://localhost:9", 2),
            ("https://localhost:9/a/mcp", NO_MAP),
            ("http://localhost:10/a/mcp", NO_MAP),
            ("https://evil.example.com/mcp", NO_MAP),
            ("http://localhost:9/a/other", NO_MAP),
            ("http://localhost:9/a/mcp/more", NO_MAP),
        ] {
            assert_eq!(mapping(doc(resource).as_bytes(), &up), map, "{resource}");
        }
        assert_eq!(mapping(b"{}", &up), NO_MAP);
        assert_eq!(
            without_segments("https://edge.example/x/mcp", 1).as_deref(),
            Some("https://edge.example/x")
        );
        assert_eq!(
            without_segments("https://edge.example/mcp", 1).as_deref(),
            Some("https://edge.example")
        );
        assert_eq!(without_segments("https://edge.example/mcp", 2), None);
        assert_eq!(without_segments("https://edge.example/mcp", NO_MAP), None);
    }

    #[test]
    fn metadata_naming_another_server_is_served_as_it_came() {
        let f = Forwarding::new(ForwardSpec {
            public_url: "https://edge.example/mcp".into(),
        });
        let evil = br#"{"resource":"https://evil.example.com/mcp","authorization_servers":["https://as.example"]}"#;
        let wire = encode_challenge(401, NO_MAP, b"Bearer", evil);
        let (status, value) = f.answer(&wire).expect("an answer");
        assert_eq!(status, 401);
        assert!(value.contains("resource_metadata="), "{value}");
        let served = f
            .metadata_at("/.well-known/oauth-protected-resource/mcp")
            .flatten()
            .expect("kept");
        let doc: serde_json::Value = serde_json::from_slice(&served).expect("JSON");
        assert_eq!(doc["resource"], "https://evil.example.com/mcp");
        // No metadata at all: the challenge as the upstream gave it, and a
        // text that is not one still refuses.
        let bare = Forwarding::new(ForwardSpec {
            public_url: "https://edge.example/mcp".into(),
        });
        let wire = encode_challenge(403, NO_MAP, b"Bearer error=\"insufficient_scope\"", b"");
        assert_eq!(
            bare.answer(&wire),
            Some((403, "Bearer error=\"insufficient_scope\"".to_owned()))
        );
        let wire = encode_challenge(401, NO_MAP, &[0xC3], b"");
        assert_eq!(bare.answer(&wire), Some((401, "Bearer".to_owned())));
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
            0,
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
