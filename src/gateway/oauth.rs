//! The edge as an OAuth 2.1 resource server (`--oauth-issuer`): a client's
//! `Authorization: Bearer` JWT access token is checked before any octet of
//! its request reaches the association, as MCP (2025-06-18 and later) and
//! RFC 9728 ask of a protected resource.
//!
//! - The signature, against the issuer's JWKS (`--oauth-jwks`, else its
//!   `jwks_uri` from the issuer's RFC 8414 or OpenID metadata), with
//!   `jsonwebtoken` over aws-lc-rs: no signature code of our own. Each key
//!   is used with the one algorithm it declares (or its type's: RSA RS256,
//!   EC P-256 ES256 and P-384 ES384, Ed25519 EdDSA); a token whose header
//!   names another is refused, and symmetric (`oct`) keys are never taken,
//!   so neither `none` nor HMAC keyed with a public key can pass.
//! - The keys are cached; an unknown `kid` fetches them again (a rotated
//!   key is picked up without a restart), as does their age past
//!   [`REFRESH`]; at most one fetch per [`MIN_FETCH_INTERVAL`].
//! - `iss` must be the issuer, `aud` the resource (`--oauth-audience`),
//!   `exp` required; `exp` and `nbf` with [`LEEWAY_S`] seconds of skew.
//! - `scope` (space-separated, or an `scp` array) must hold every
//!   `--oauth-scope`.
//! - A token that passed is remembered (by its SHA-256) until it expires,
//!   up to [`CACHE`] tokens, and forgotten whenever the keys are fetched
//!   again: a client's next requests cost a digest and a lookup, not a
//!   signature check (an ES256 check is most of a request's cost at the
//!   edge, `results/2026-12-06-oauth-cost/`).
//!
//! A request without a token gets 401 and `WWW-Authenticate: Bearer
//! resource_metadata="…", scope="…"`; a bad token 401 with
//! `error="invalid_token"`; a token without a required scope 403 with
//! `error="insufficient_scope"`. The resource's metadata (RFC 9728) is
//! served at `/.well-known/oauth-protected-resource` and at its
//! path-inserted form. The token is never carried further: only the
//! message crosses the pair.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tracing::{debug, warn};

use super::scopes::Rules;
pub use super::scopes::{Held, ScopeRule};

/// Seconds of clock skew allowed on `exp` and `nbf`.
pub const LEEWAY_S: u64 = 60;

/// Keys older than this are fetched again before use.
pub const REFRESH: Duration = Duration::from_secs(300);

/// Fetches of the keys (and metadata) are this far apart at least.
pub const MIN_FETCH_INTERVAL: Duration = Duration::from_secs(1);

/// Tokens remembered as valid, at most (then all are forgotten at once:
/// a bound, not a policy).
pub const CACHE: usize = 4096;

/// The most a metadata or JWKS document may hold.
const MAX_DOCUMENT: usize = 1 << 20;

/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// What `--oauth-*` configure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthSpec {
    pub issuer: String,
    /// The resource: what `aud` must name, and what the metadata calls it.
    pub audience: String,
    /// The JWKS; `None`: from the issuer's metadata.
    pub jwks: Option<String>,
    /// Scopes every request needs.
    pub scopes: Vec<String>,
    /// Scopes some methods, or some tools, need besides
    /// (`--require-scope`).
    pub rules: Vec<ScopeRule>,
}

impl OAuthSpec {
    /// Where the resource's metadata is (RFC 9728 §3: the well-known path
    /// inserted before the resource's own path).
    pub fn metadata_url(&self) -> String {
        metadata_url_of(&self.audience)
    }

    /// The paths the metadata is served at: the path-inserted form, and
    /// the bare one.
    pub fn metadata_paths(&self) -> [String; 2] {
        metadata_paths_of(&self.audience)
    }

    /// The metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> String {
        serde_json::json!({
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "scopes_supported": self.scopes,
            "bearer_methods_supported": ["header"],
        })
        .to_string()
    }
}

/// Scopes a message needs that its token lacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lacking {
    /// The scopes it lacks.
    pub missing: Vec<String>,
    /// Every scope the message needs, beside `--oauth-scope`.
    pub needed: Vec<String>,
}

impl Lacking {
    /// Joins another message's (of one batch).
    pub fn join(&mut self, other: Lacking) {
        for (into, from) in [
            (&mut self.missing, other.missing),
            (&mut self.needed, other.needed),
        ] {
            for s in from {
                if !into.contains(&s) {
                    into.push(s);
                }
            }
        }
    }
}

/// Where RFC 9728 puts a protected resource's metadata.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The URL of the metadata of the resource at `resource` (RFC 9728 §3: the
/// well-known path inserted before the resource's own path).
pub fn metadata_url_of(resource: &str) -> String {
    let (origin, path) = split_url(resource);
    format!("{origin}{WELL_KNOWN}{path}")
}

/// The paths the metadata of the resource at `resource` is served at: the
/// path-inserted form, and the bare one.
pub fn metadata_paths_of(resource: &str) -> [String; 2] {
    let (_, path) = split_url(resource);
    [format!("{WELL_KNOWN}{path}"), WELL_KNOWN.to_owned()]
}

/// `https://host:port/path/` as (`https://host:port`, `/path`): the path
/// without its trailing slash, empty for the root.
pub fn split_url(url: &str) -> (&str, &str) {
    let after = url.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match url[after..].find('/') {
        Some(i) => url.split_at(after + i),
        None => (url, ""),
    };
    // RFC 9728 §3.1: the path as the resource has it; only a path that is
    // "/" alone is none.
    (origin, if path == "/" { "" } else { path })
}

/// A valid token: who it was issued to (a digest of `iss` and `sub`), and
/// which scopes of `--require-scope` it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub who: u64,
    pub held: Held,
    /// Unix seconds: until when it may be used (its `exp` and the skew).
    pub until: u64,
}

impl Grant {
    /// Whether it may be used no longer (a WebSocket's token, checked at
    /// its upgrade, runs out while the connection lasts).
    pub fn expired(until: u64) -> bool {
        unix_now() > until
    }
}

/// What a token is worth.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid.
    Allowed(Grant),
    /// No bearer token.
    Missing,
    /// A token that is not valid here, and why (said to the client).
    Invalid(String),
    /// Valid, without these required scopes.
    InsufficientScope(Vec<String>),
    /// The keys cannot be had: nothing can be checked now.
    Unavailable(String),
}

/// The claims checked here beside what `jsonwebtoken` validates.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    iss: String,
    #[serde(default)]
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    /// Microsoft's `scp`: a space-separated string, or a list.
    #[serde(default)]
    scp: Option<Scopes>,
    #[serde(default)]
    exp: u64,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Scopes {
    Text(String),
    List(Vec<String>),
}

/// A token that passed: what it grants, and until when it may.
#[derive(Clone)]
struct Passed {
    grant: Grant,
    /// The key that signed it (see [`pick`]).
    kid: Option<String>,
    /// Unix seconds: its `exp` and the skew allowed.
    until: u64,
}

type FetchClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    Empty<Bytes>,
>;

/// The keys of the issuer, each with its one algorithm.
struct Keys {
    by_kid: HashMap<String, (DecodingKey, Algorithm)>,
    /// Keys without a `kid`, usable by tokens without one.
    unnamed: Vec<(DecodingKey, Algorithm)>,
    fetched: Instant,
}

/// Checks tokens for one resource.
pub struct Verifier {
    spec: OAuthSpec,
    keys: RwLock<Option<std::sync::Arc<Keys>>>,
    /// When the keys were last fetched, successfully or not.
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
    /// Tokens that passed, by their SHA-256 (see [`CACHE`]).
    passed: std::sync::Mutex<HashMap<[u8; 32], Passed>>,
    /// The JWKS's URL: `--oauth-jwks`, or the one the issuer's metadata
    /// gave (found once).
    jwks_url: RwLock<Option<String>>,
    /// Where the metadata is served (see [`OAuthSpec::metadata_paths`]).
    metadata_paths: [String; 2],
    /// `--require-scope`, compiled.
    rules: Rules,
    client: FetchClient,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.spec.issuer)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier of `spec`'s tokens, fetching keys with `tls`; refused
    /// where its rules name too many scopes.
    pub fn new(spec: OAuthSpec, tls: rustls::ClientConfig) -> Result<Self, String> {
        let (jwks_url, metadata_paths) = (spec.jwks.clone(), spec.metadata_paths());
        let rules = Rules::new(&spec.rules)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Ok(Self {
            spec,
            keys: RwLock::new(None),
            last_fetch: tokio::sync::Mutex::new(None),
            passed: std::sync::Mutex::new(HashMap::new()),
            jwks_url: RwLock::new(jwks_url),
            metadata_paths,
            rules,
            client,
        })
    }

    pub fn spec(&self) -> &OAuthSpec {
        &self.spec
    }

    /// Takes `old`'s keys where it checks the same issuer's tokens with the
    /// same keys (a reload that changed scopes or rules): no fetch, and no
    /// 503 if the issuer cannot be reached then. The tokens it remembered
    /// are not taken (what they hold is read by the old rules).
    pub fn adopt_keys(&self, old: &Verifier) {
        if old.spec.issuer != self.spec.issuer || old.spec.jwks != self.spec.jwks {
            return;
        }
        let keys = old.keys.read().unwrap_or_else(|p| p.into_inner()).clone();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
        let url = old
            .jwks_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        *self.jwks_url.write().unwrap_or_else(|p| p.into_inner()) = url;
    }

    /// Whether the resource's metadata is served at `path`.
    pub fn serves_metadata_at(&self, path: &str) -> bool {
        self.metadata_paths.iter().any(|p| p == path)
    }

    /// What the `Authorization` header value `authorization` is worth.
    pub async fn verify(&self, authorization: Option<&[u8]>) -> Verdict {
        let Some(token) = authorization.and_then(super::auth::bearer) else {
            return Verdict::Missing;
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return Verdict::Invalid("a token must be ASCII".into());
        };
        let digest = token_digest(token);
        if let Some(grant) = self.remembered(&digest) {
            return Verdict::Allowed(grant);
        }
        let header = match jsonwebtoken::decode_header(token) {
            Ok(h) => h,
            Err(_) => return Verdict::Invalid("not a JWT".into()),
        };
        let (key, alg) = match self.key_for(header.kid.as_deref()).await {
            Ok(k) => k,
            Err(v) => return v,
        };
        if header.alg != alg {
            return Verdict::Invalid(format!(
                "the token's algorithm ({:?}) is not its key's ({alg:?})",
                header.alg
            ));
        }
        let (verdict, until) = self.check(token, &key, alg);
        if let Verdict::Allowed(grant) = verdict {
            let kid = header.kid;
            self.remember(digest, Passed { grant, kid, until });
        }
        verdict
    }

    /// What a token that passed grants, while it is valid.
    fn remembered(&self, digest: &[u8; 32]) -> Option<Grant> {
        let passed = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        let p = passed.get(digest)?;
        (unix_now() <= p.until).then_some(p.grant)
    }

    fn remember(&self, digest: [u8; 32], p: Passed) {
        let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        if passed.len() >= CACHE {
            let now = unix_now();
            passed.retain(|_, p| p.until >= now);
            if passed.len() >= CACHE {
                passed.clear();
            }
        }
        passed.insert(digest, p);
    }

    /// The signature and claims of `token`, signed with `key` for `alg`,
    /// and until when it is valid (Unix seconds, the skew included).
    fn check(&self, token: &str, key: &DecodingKey, alg: Algorithm) -> (Verdict, u64) {
        let mut v = Validation::new(alg);
        v.set_issuer(&[&self.spec.issuer]);
        v.set_audience(&[&self.spec.audience]);
        // `sub` too (RFC 9068 §2.2): it names the client, whose rate limit
        // and MCP sessions are its own.
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.leeway = LEEWAY_S;
        v.validate_nbf = true;
        let claims = match jsonwebtoken::decode::<Claims>(token, key, &v) {
            Ok(data) => data.claims,
            Err(e) => return (Verdict::Invalid(why_invalid(&e)), 0),
        };
        let until = claims.exp.saturating_add(LEEWAY_S);
        let held: Vec<&str> = match (&claims.scope, &claims.scp) {
            (Some(s), _) | (None, Some(Scopes::Text(s))) => s.split_whitespace().collect(),
            (None, Some(Scopes::List(list))) => list.iter().map(String::as_str).collect(),
            (None, None) => Vec::new(),
        };
        let missing: Vec<String> = self
            .spec
            .scopes
            .iter()
            .filter(|s| !held.contains(&s.as_str()))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return (Verdict::InsufficientScope(missing), 0);
        }
        let who = aws_lc_rs::digest::digest(
            &aws_lc_rs::digest::SHA256,
            format!("{}\n{}", claims.iss, claims.sub).as_bytes(),
        );
        let mut first = [0u8; 8];
        first.copy_from_slice(&who.as_ref()[..8]);
        let grant = Grant {
            who: u64::from_be_bytes(first),
            held: self.rules.held(held.iter().copied()),
            until,
        };
        (Verdict::Allowed(grant), until)
    }

    /// The scopes a token holding `held` lacks for the message `message`
    /// of `method` (`--require-scope`), and every scope the message needs
    /// (for the challenge); `None` when it lacks none.
    pub fn lacks(&self, held: Held, method: &str, message: &[u8]) -> Option<Lacking> {
        if self.rules.is_empty() {
            return None;
        }
        let need = self.rules.needs(method, message);
        let lacking = self.rules.lacking(held, need);
        if lacking.is_empty() {
            return None;
        }
        Some(Lacking {
            missing: lacking.into_iter().map(str::to_owned).collect(),
            needed: self.rules.named(need).map(str::to_owned).collect(),
        })
    }

    /// Every scope of the rules `held` lacks, for a message whose method
    /// cannot be read; `None` when it lacks none.
    pub fn lacks_all(&self, held: Held) -> Option<Lacking> {
        let all = self.rules.all();
        let lacking = self.rules.lacking(held, all);
        (!lacking.is_empty()).then(|| Lacking {
            missing: lacking.into_iter().map(str::to_owned).collect(),
            needed: self.rules.named(all).map(str::to_owned).collect(),
        })
    }

    /// Whether any method needs a scope of its own (`--require-scope`):
    /// whether messages are to be looked at.
    pub fn has_rules(&self) -> bool {
        !self.rules.is_empty()
    }

    /// The key `kid` names (or the one key without a name), fetching the
    /// keys again when it is unknown or they are old.
    async fn key_for(&self, kid: Option<&str>) -> Result<(DecodingKey, Algorithm), Verdict> {
        let cached = self.cached();
        let fresh = cached
            .as_ref()
            .is_some_and(|k| k.fetched.elapsed() < REFRESH);
        let found = cached.as_ref().and_then(|k| pick(k, kid));
        if let Some(found) = &found
            && fresh
        {
            return Ok(found.clone());
        }
        // Old keys that know this kid serve while another request fetches
        // new ones: only an unknown kid waits for a fetch.
        let waits = found.is_none();
        let keys = match self.refetch(waits).await {
            Some(keys) => keys,
            None => cached.ok_or_else(|| {
                Verdict::Unavailable("the issuer's keys cannot be fetched".into())
            })?,
        };
        pick(&keys, kid)
            .ok_or_else(|| Verdict::Invalid("signed with a key the issuer does not publish".into()))
    }

    fn cached(&self) -> Option<std::sync::Arc<Keys>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Fetches the keys, unless one fetch ended less than
    /// [`MIN_FETCH_INTERVAL`] ago, or ended while this caller waited for it
    /// (the callers queued behind a fetch take its keys, they do not each
    /// fetch again); without `wait`, unless another is under way. The keys
    /// then, if any.
    async fn refetch(&self, wait: bool) -> Option<std::sync::Arc<Keys>> {
        let asked = Instant::now();
        let mut last = if wait {
            self.last_fetch.lock().await
        } else {
            match self.last_fetch.try_lock() {
                Ok(last) => last,
                Err(_) => return self.cached(),
            }
        };
        if last.is_some_and(|t| t >= asked || t.elapsed() < MIN_FETCH_INTERVAL) {
            return self.cached();
        }
        let fetched = self.fetch_keys().await;
        *last = Some(Instant::now());
        match fetched {
            Ok(keys) => {
                let keys = std::sync::Arc::new(keys);
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Some(keys.clone());
                // A withdrawn key: what it signed is checked again.
                self.passed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|_, p| pick(&keys, p.kid.as_deref()).is_some());
                Some(keys)
            }
            Err(why) => {
                warn!(issuer = %self.spec.issuer, "OAuth: cannot fetch the issuer's keys: {why}");
                self.cached()
            }
        }
    }

    async fn fetch_keys(&self) -> Result<Keys, String> {
        let known = self
            .jwks_url
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let jwks_url = match known {
            Some(url) => url,
            None => {
                let url = self.discover().await?;
                // Keys that came over the network in the clear could be
                // anyone's.
                fetchable(&url)?;
                *self.jwks_url.write().unwrap_or_else(|p| p.into_inner()) = Some(url.clone());
                url
            }
        };
        let set: JwkSet = serde_json::from_slice(&self.get(&jwks_url).await?)
            .map_err(|e| format!("{jwks_url}: not a JWKS: {e}"))?;
        let mut keys = Keys {
            by_kid: HashMap::new(),
            unnamed: Vec::new(),
            fetched: Instant::now(),
        };
        for jwk in &set.keys {
            let Some(usable) = usable(jwk) else { continue };
            match &jwk.common.key_id {
                Some(kid) => {
                    keys.by_kid.insert(kid.clone(), usable);
                }
                None => keys.unnamed.push(usable),
            }
        }
        debug!(
            keys = keys.by_kid.len() + keys.unnamed.len(),
            "OAuth: issuer keys fetched"
        );
        Ok(keys)
    }

    /// The `jwks_uri` of the issuer's metadata: RFC 8414's, else OpenID's.
    async fn discover(&self) -> Result<String, String> {
        #[derive(Deserialize)]
        struct Metadata {
            issuer: String,
            jwks_uri: String,
        }
        let (origin, path) = split_url(&self.spec.issuer);
        let places = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ];
        let mut why = Vec::new();
        for url in places {
            match self.get(&url).await.and_then(|body| {
                serde_json::from_slice::<Metadata>(&body).map_err(|e| format!("{url}: {e}"))
            }) {
                // RFC 8414 §3.3: the metadata must be the issuer's own.
                Ok(m) if m.issuer == self.spec.issuer => {
                    return Ok(m.jwks_uri);
                }
                Ok(m) => why.push(format!("{url} names issuer {:?}", m.issuer)),
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    /// The body of a GET of `url` (at most [`MAX_DOCUMENT`] octets, within
    /// [`FETCH_TIMEOUT`]).
    async fn get(&self, url: &str) -> Result<Bytes, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
        let fetch = async {
            let resp = self
                .client
                .get(uri)
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("{url}: HTTP {}", resp.status()));
            }
            let body = http_body_util::Limited::new(resp.into_body(), MAX_DOCUMENT);
            body.collect()
                .await
                .map(|b| b.to_bytes())
                .map_err(|e| format!("{url}: {e}"))
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .map_err(|_| format!("{url}: no answer within {FETCH_TIMEOUT:?}"))?
    }
}

fn token_digest(token: &str) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The key `kid` names, or the one key without a name.
fn pick(keys: &Keys, kid: Option<&str>) -> Option<(DecodingKey, Algorithm)> {
    match kid {
        Some(kid) => keys.by_kid.get(kid).cloned(),
        None => match keys.unnamed.as_slice() {
            [only] => Some(only.clone()),
            _ => None,
        },
    }
}

/// A JWK as a verification key and its one algorithm: the one it declares,
/// else its type's. Symmetric keys and encryption keys are not taken.
fn usable(jwk: &Jwk) -> Option<(DecodingKey, Algorithm)> {
    if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
        return None;
    }
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
        // Symmetric keys, and kinds this version does not know.
        _ => return None,
    };
    let alg = match jwk.common.key_algorithm {
        Some(declared) => Algorithm::try_from(declared).ok()?,
        None => by_type,
    };
    if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
        return None;
    }
    Some((DecodingKey::from_jwk(jwk).ok()?, alg))
}

/// Why a token failed `jsonwebtoken`'s checks, as the client is told.
fn why_invalid(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => "the token has expired",
        K::ImmatureSignature => "the token is not valid yet (nbf)",
        K::InvalidAudience => "the token was not issued for this resource (aud)",
        K::InvalidIssuer => "the token is not from the configured issuer (iss)",
        K::InvalidSignature => "the token's signature does not verify",
        K::MissingRequiredClaim(_) => "the token lacks exp, iss, aud or sub",
        K::InvalidAlgorithm => "the token's algorithm is not its key's",
        _ => "the token is malformed",
    }
    .to_owned()
}

/// The `WWW-Authenticate` value of a refusal for `verdict` (none for an
/// allowed or unavailable one), and its HTTP status.
pub fn challenge(spec: &OAuthSpec, verdict: &Verdict) -> Option<(u16, String)> {
    let scope = spec.scopes.join(" ");
    let meta = quoted(&spec.metadata_url());
    Some(match verdict {
        Verdict::Allowed(_) | Verdict::Unavailable(_) => return None,
        Verdict::Missing if scope.is_empty() => {
            (401, format!("Bearer resource_metadata=\"{meta}\""))
        }
        Verdict::Missing => (
            401,
            format!(
                "Bearer resource_metadata=\"{meta}\", scope=\"{}\"",
                quoted(&scope)
            ),
        ),
        Verdict::Invalid(why) => (
            401,
            format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{meta}\"",
                quoted(why)
            ),
        ),
        Verdict::InsufficientScope(_) => (403, scope_challenge(spec, &Lacking::default())),
    })
}

/// The `WWW-Authenticate` value of a 403 for a request whose token lacks
/// scopes: `scope` names every scope the request needs (`--oauth-scope`
/// and those of `lacking`), as MCP's step-up authorization asks, so the
/// client can ask for a token that holds them all.
pub fn scope_challenge(spec: &OAuthSpec, lacking: &Lacking) -> String {
    let mut scopes: Vec<&str> = spec.scopes.iter().map(String::as_str).collect();
    for s in &lacking.needed {
        if !scopes.contains(&s.as_str()) {
            scopes.push(s);
        }
    }
    format!(
        "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
        quoted(&scopes.join(" ")),
        quoted(&spec.metadata_url())
    )
}

/// Text inside a quoted string of one header value: no quote, backslash,
/// control character or non-ASCII one can end it, or the header.
pub fn quoted(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control() && !matches!(c, '"' | '\\'))
        .collect()
}

/// Whether `url` may be fetched for keys: HTTPS, or HTTP to this machine.
pub fn fetchable(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url.parse().map_err(|e| format!("{url:?}: {e}"))?;
    let host = uri.host().unwrap_or_default();
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if loopback => Ok(()),
        _ => Err(format!(
            "{url}: keys and metadata are fetched over https:// (http:// only from this machine)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(audience: &str) -> OAuthSpec {
        OAuthSpec {
            issuer: "https://auth.example".into(),
            audience: audience.into(),
            jwks: None,
            scopes: vec!["mcp:tools".into()],
            rules: Vec::new(),
        }
    }

    #[test]
    fn the_metadata_sits_at_the_well_known_path_of_the_resource() {
        let s = spec("https://edge.example/mcp");
        assert_eq!(
            s.metadata_url(),
            "https://edge.example/.well-known/oauth-protected-resource/mcp"
        );
        // RFC 9728 §3.1: the resource's path as it is, a sole "/" none.
        assert_eq!(
            spec("https://edge.example/mcp/").metadata_url(),
            "https://edge.example/.well-known/oauth-protected-resource/mcp/"
        );
        assert_eq!(
            spec("https://edge.example/").metadata_url(),
            "https://edge.example/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            s.metadata_paths(),
            [
                "/.well-known/oauth-protected-resource/mcp".to_owned(),
                "/.well-known/oauth-protected-resource".to_owned()
            ]
        );
        let root = spec("http://127.0.0.1:8080");
        assert_eq!(
            root.metadata_url(),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
        let m: serde_json::Value = serde_json::from_str(&s.metadata()).expect("JSON");
        assert_eq!(m["resource"], "https://edge.example/mcp");
        assert_eq!(m["authorization_servers"][0], "https://auth.example");
    }

    #[test]
    fn challenges_name_the_metadata_and_the_scope() {
        let s = spec("https://edge.example/");
        let (status, v) = challenge(&s, &Verdict::Missing).expect("a challenge");
        assert_eq!(status, 401);
        assert_eq!(
            v,
            "Bearer resource_metadata=\"https://edge.example/.well-known/oauth-protected-resource\", scope=\"mcp:tools\""
        );
        let (status, v) =
            challenge(&s, &Verdict::Invalid("bad \"sig\"".into())).expect("a challenge");
        assert_eq!(status, 401);
        assert!(v.starts_with("Bearer error=\"invalid_token\""), "{v}");
        assert!(v.contains("error_description=\"bad sig\""), "{v}");
        let (status, v) = challenge(&s, &Verdict::InsufficientScope(vec!["mcp:tools".into()]))
            .expect("a challenge");
        assert_eq!(status, 403);
        assert!(v.contains("error=\"insufficient_scope\""), "{v}");
        assert_eq!(
            challenge(
                &s,
                &Verdict::Allowed(Grant {
                    who: 1,
                    held: Held::ALL,
                    until: 0,
                })
            ),
            None
        );
    }

    /// An issuer whose metadata sends for its keys in the clear is not
    /// followed: nothing can be checked (503), no key is taken.
    #[tokio::test]
    async fn a_jwks_uri_in_the_clear_is_not_followed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let issuer = format!("http://{}", listener.local_addr().expect("addr"));
        let metadata = serde_json::json!({
            "issuer": issuer, "jwks_uri": "http://keys.example/jwks"
        })
        .to_string();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let body = metadata.clone();
                let service = hyper::service::service_fn(move |_req| {
                    let r =
                        hyper::Response::new(http_body_util::Full::new(Bytes::from(body.clone())));
                    std::future::ready(Ok::<_, std::convert::Infallible>(r))
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service),
                );
            }
        });
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut s = spec("https://edge.example/rpc");
        s.issuer = issuer;
        let v = Verifier::new(s, tls).expect("verifier");
        // {"alg":"ES256","kid":"k1"}, no claims, no signature worth the name.
        let token = b"Bearer eyJhbGciOiJFUzI1NiIsImtpZCI6ImsxIn0.e30.c2ln";
        match v.verify(Some(token)).await {
            Verdict::Unavailable(_) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            v.jwks_url.read().unwrap_or_else(|p| p.into_inner()).clone(),
            None,
            "the clear-text URL is not kept"
        );
    }

    #[test]
    fn keys_are_fetched_over_https_or_from_this_machine() {
        assert!(fetchable("https://auth.example/jwks").is_ok());
        assert!(fetchable("http://127.0.0.1:9/jwks").is_ok());
        assert!(fetchable("http://[::1]:9/jwks").is_ok());
        assert!(fetchable("http://auth.example/jwks").is_err());
        assert!(fetchable("ftp://auth.example/jwks").is_err());
    }

    #[test]
    fn symmetric_keys_are_never_taken() {
        let oct: Jwk = serde_json::from_value(serde_json::json!({
            "kty": "oct", "kid": "h", "k": "c2VjcmV0"
        }))
        .expect("JWK");
        assert!(usable(&oct).is_none());
        let rsa_as_hmac: Jwk = serde_json::from_value(serde_json::json!({
            "kty": "RSA", "kid": "r", "alg": "HS256",
            "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw",
            "e": "AQAB"
        }))
        .expect("JWK");
        assert!(usable(&rsa_as_hmac).is_none(), "HMAC with a public key");
    }
}
