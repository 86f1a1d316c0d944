//! From options to the [`GatewayConfig`] a gateway runs with: the checks
//! that need more than one option, or a file read. Each value was parsed
//! already (`values`); its default comes from the structs filled here.

use std::collections::HashSet;

use super::super::auth::Tokens;
use super::super::capture::{CaptureSpec, DEFAULT_MAX_BYTES, Redact, check_path};
use super::super::forward::ForwardSpec;
use super::super::ingress::browser::{AllowedHosts, BrowserOrigins};
use super::super::ingress::limit::RateLimit;
use super::super::ingress::tls::IngressTls;
use super::super::oauth::{OAuthSpec, fetchable as oauth_fetchable};
use super::super::scopes::{Rules, SCOPE_TOKEN, is_scope_token};
use super::super::{GatewayConfig, Limits, MAX_BODY_LIMIT, Upstream, outbox};
use super::{ConfigError, GatewayOptions, Sourced, random_identity, read_identity};
use crate::assoc::{Endpoint, TlsFiles};
use crate::handshake::Trust;
use crate::jsonrpc::{EffectTable, SafetyPolicy};

impl GatewayOptions {
    pub(super) fn build(&self, src: &Sourced) -> Result<GatewayConfig, ConfigError> {
        // Every upstream, built once for the checks and groups below.
        let all = self.upstreams().map_err(|(key, m)| src.error(key, m))?;
        let upstream = self.upstream(&all, src)?;
        self.check_peers(src)?;
        let protocol = self.protocol.unwrap_or_default().id();
        let effects = self
            .effect
            .iter()
            .fold(EffectTable::for_protocol(protocol), |t, rule| {
                t.with(&rule.method, rule.effect)
            });
        let policy = self
            .refuse_effect
            .iter()
            .fold(SafetyPolicy::allow_all(), |p, class| p.refuse(class.0));
        let tokens = self.tokens(src)?;
        let browsers = self.browsers(src)?;
        let ingress_tls = self.ingress_tls(tokens.is_some(), src)?;
        let endpoint = self.endpoint(src)?;
        let limits = self.limits(src)?;
        // An association's reader waits while its local party takes nothing
        // (a session client at an edge, an upstream at an origin) and answers
        // no PING meanwhile, until the stall timeout gives that party up: the
        // peer must not give up on the association first.
        let carries = !self.ingress.is_empty() || !self.listen.is_empty();
        if carries && endpoint.assoc.peer_timeout <= limits.stall_timeout {
            return Err(src.error(
                "peer-timeout",
                format!(
                    "{:?} must exceed --stall-timeout ({:?}): an association held up by a client or upstream that takes nothing answers no keepalive until that party is given up",
                    endpoint.assoc.peer_timeout, limits.stall_timeout
                ),
            ));
        }
        let rate_limit = self.rate_limit(limits.max_body, src)?;
        let capture = self.capture(src)?;
        let oauth = self.oauth(src)?;
        let forwarding = self.forwarding(src)?;
        let (upstream_group, routes) = self.group(&all);
        let session_group = self.session_group(all);
        Ok(GatewayConfig {
            listen: self.listen.clone(),
            upstream,
            upstream_group,
            routes,
            session_group,
            upstream_ca: self.upstream_ca.clone(),
            upstream_headers: self
                .upstream_header
                .iter()
                .map(|h| (h.0.clone(), h.1.clone()))
                .collect(),
            ingress: self.ingress.clone(),
            peers: self.peer.clone(),
            metrics: self.metrics.map(|m| m.0),
            capture,
            oauth,
            forwarding,
            protocol,
            framing: self.framing.unwrap_or_default(),
            effects,
            policy,
            allow_methods: (!self.allow_method.is_empty())
                .then(|| self.allow_method.iter().cloned().collect()),
            deny_methods: self.deny_method.iter().cloned().collect::<HashSet<_>>(),
            tokens,
            browsers,
            ingress_tls,
            rate_limit,
            ephemeral_identity: self.identity.is_none(),
            limits,
            shards: self.shards.unwrap_or_else(default_shards),
            ..GatewayConfig::new(endpoint)
        })
    }

    /// The resource server `--oauth-*` make of an edge: an issuer to check
    /// tokens against, on ingresses whose clients can present one.
    fn oauth(&self, src: &Sourced) -> Result<Option<OAuthSpec>, ConfigError> {
        let Some(issuer) = &self.oauth_issuer else {
            for (given, key) in [
                (self.oauth_audience.is_some(), "oauth-audience"),
                (self.oauth_jwks.is_some(), "oauth-jwks"),
                (!self.oauth_scope.is_empty(), "oauth-scope"),
                (!self.require_scope.is_empty(), "require-scope"),
            ] {
                if given {
                    return Err(src.error(key, "goes with --oauth-issuer URL"));
                }
            }
            return Ok(None);
        };
        if self.auth_token_file.is_some() {
            return Err(src.error(
                "oauth-issuer",
                "an edge takes its clients' tokens from one place: --auth-token-file or --oauth-issuer",
            ));
        }
        if let Some(url) = self.ingress.iter().find(|i| !i.kind().carries_tokens()) {
            return Err(src.error(
                "oauth-issuer",
                format!(
                    "a {}:// ingress ({url}) has no way to present a token",
                    url.scheme()
                ),
            ));
        }
        oauth_fetchable(issuer).map_err(|m| src.error("oauth-issuer", m))?;
        if let Some(jwks) = &self.oauth_jwks {
            oauth_fetchable(jwks).map_err(|m| src.error("oauth-jwks", m))?;
        }
        let audience = self.public_url_or(self.oauth_audience.as_ref(), "oauth-audience", src)?;
        resource_url(&audience).map_err(|m| src.error("oauth-audience", m))?;
        Rules::new(&self.require_scope).map_err(|m| src.error("require-scope", m))?;
        if let Some(bad) = self.oauth_scope.iter().find(|s| !is_scope_token(s)) {
            return Err(src.error("oauth-scope", format!("{bad:?}: {SCOPE_TOKEN}")));
        }
        Ok(Some(OAuthSpec {
            // As given: tokens name it exactly (RFC 8414 §3.3, RFC 9068 §4).
            issuer: issuer.clone(),
            audience,
            jwks: self.oauth_jwks.clone(),
            scopes: self.oauth_scope.clone(),
            rules: self.require_scope.clone(),
        }))
    }

    /// What `--forward-authorization` makes of an edge: its clients'
    /// credentials carried to an upstream that checks them, which no token
    /// of the edge's own may be (`--oauth-issuer`, `--auth-token-file`).
    fn forwarding(&self, src: &Sourced) -> Result<Option<ForwardSpec>, ConfigError> {
        if !self.forward_authorization {
            if self.public_url.is_some() {
                return Err(src.error("public-url", "goes with --forward-authorization"));
            }
            return Ok(None);
        }
        let key = "forward-authorization";
        if self.oauth_issuer.is_some() || self.auth_token_file.is_some() {
            return Err(src.error(
                key,
                "the edge checks no token of its own when it forwards them: not with --oauth-issuer or --auth-token-file",
            ));
        }
        if !self.ingress.iter().any(|i| i.uses_pool()) {
            return Err(src.error(key, "needs an http:// or https:// ingress"));
        }
        if let Some(url) = self.ingress.iter().find(|i| !i.uses_pool()) {
            return Err(src.error(
                key,
                format!(
                    "a {}:// ingress ({url}) does not forward its clients' credentials yet: HTTP ingresses alone",
                    url.scheme()
                ),
            ));
        }
        let public_url = self.public_url_or(self.public_url.as_ref(), "public-url", src)?;
        resource_url(&public_url).map_err(|m| src.error("public-url", m))?;
        Ok(Some(ForwardSpec { public_url }))
    }

    /// The URL clients call: `given` (the option `key`), else the first
    /// HTTP ingress's ([`Self::default_audience`]).
    fn public_url_or(
        &self,
        given: Option<&String>,
        key: &str,
        src: &Sourced,
    ) -> Result<String, ConfigError> {
        match given {
            Some(url) => Ok(url.clone()),
            None => self.default_audience().ok_or_else(|| {
                src.error(
                    key,
                    "give the URL clients call (no HTTP ingress on a fixed address to take it from)",
                )
            }),
        }
    }

    /// The first HTTP ingress's URL, where it names one address and port
    /// (not a wildcard a client cannot call).
    fn default_audience(&self) -> Option<String> {
        self.ingress.iter().find_map(|i| match i.place {
            super::super::ingress::Place::Tcp(a) | super::super::ingress::Place::Tls(a)
                if a.port() != 0
                    && !a.ip().is_unspecified()
                    && matches!(i.scheme(), "http" | "https") =>
            {
                Some(i.to_string())
            }
            _ => None,
        })
    }

    /// What `--capture` records, and where: at an edge alone (its clients'
    /// messages), in a directory that exists.
    fn capture(&self, src: &Sourced) -> Result<Option<CaptureSpec>, ConfigError> {
        let Some(path) = &self.capture else {
            for (given, key) in [
                (self.capture_max.is_some(), "capture-max"),
                (!self.capture_redact.is_empty(), "capture-redact"),
            ] {
                if given {
                    return Err(src.error(key, "goes with --capture FILE"));
                }
            }
            return Ok(None);
        };
        if self.ingress.is_empty() {
            return Err(src.error(
                "capture",
                "records what clients send an edge: give --ingress too",
            ));
        }
        check_path(path).map_err(|m| src.error("capture", m))?;
        let redact = self
            .capture_redact
            .iter()
            .map(|r| r.parse::<Redact>())
            .collect::<Result<_, _>>()
            .map_err(|m| src.error("capture-redact", m))?;
        Ok(Some(CaptureSpec {
            path: path.clone(),
            max_bytes: self
                .capture_max
                .map_or(DEFAULT_MAX_BYTES, |c| c.get() as u64),
            redact,
        }))
    }

    /// At most `MAX_PEERS` origins, and one at least where clients come in.
    fn check_peers(&self, src: &Sourced) -> Result<(), ConfigError> {
        if self.peer.len() > super::super::edge::MAX_PEERS {
            return Err(src.error(
                "peer",
                format!(
                    "{} origins: an edge carries to {} at most",
                    self.peer.len(),
                    super::super::edge::MAX_PEERS
                ),
            ));
        }
        if !self.ingress.is_empty() && self.peer.is_empty() {
            return Err(src.error(
                "ingress",
                "accepting clients needs a peer gateway: --peer quic://ADDR, tls://ADDR or npamp://ADDR",
            ));
        }
        Ok(())
    }

    /// The host names and web origins an ingress serves browsers from
    /// (`--allowed-host`, `--cors-origin`: only where there is an ingress).
    fn browsers(&self, src: &Sourced) -> Result<BrowserOrigins, ConfigError> {
        let hosts =
            AllowedHosts::parse(&self.allowed_host).map_err(|m| src.error("allowed-host", m))?;
        let browsers = BrowserOrigins::parse(&self.cors_origin)
            .map_err(|m| src.error("cors-origin", m))?
            .with_hosts(hosts);
        for (given, key, what) in [
            (!self.cors_origin.is_empty(), "cors-origin", "web origins"),
            (!self.allowed_host.is_empty(), "allowed-host", "host names"),
        ] {
            if given && self.ingress.is_empty() {
                return Err(src.error(
                    key,
                    format!(
                        "{what} are allowed at an ingress: give --ingress http://ADDR or ws://ADDR"
                    ),
                ));
            }
        }
        Ok(browsers)
    }

    /// Every `--upstream`, or every `--upstream-cmd` as a program and its
    /// arguments.
    fn upstreams(&self) -> Result<Vec<Upstream>, (&'static str, String)> {
        if !self.upstream.is_empty() && !self.upstream_cmd.is_empty() {
            return Err((
                "upstream",
                "give --upstream or --upstream-cmd, not both".into(),
            ));
        }
        let cmds = self.upstream_cmd.iter().map(|cmd| {
            let argv: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
            Upstream::command(argv).ok_or(("upstream-cmd", "empty command".to_owned()))
        });
        self.upstream.iter().cloned().map(Ok).chain(cmds).collect()
    }

    /// Several upstreams served as sessions (WebSocket, IPC, child
    /// processes, MCP), checked by [`Self::upstream`].
    fn session_group(&self, all: Vec<Upstream>) -> Vec<Upstream> {
        let sessions = all.len() > 1 && !self.http_group(&all);
        if sessions { all } else { Vec::new() }
    }

    /// Whether these upstreams are HTTP JSON-RPC ones, served request by
    /// request (not MCP sessions).
    fn http_group(&self, all: &[Upstream]) -> bool {
        let protocol = self.protocol.unwrap_or_default().id();
        all.iter().all(|u| u.per_request(protocol))
    }

    /// Where an origin delivers: `--upstream` or `--upstream-cmd`, and the
    /// headers that go with an HTTP or WebSocket one.
    fn upstream(&self, all: &[Upstream], src: &Sourced) -> Result<Option<Upstream>, ConfigError> {
        let upstream = all.first().cloned();
        let protocol = self.protocol.unwrap_or_default().id();
        if !self.upstream_header.is_empty()
            && !upstream.as_ref().is_some_and(|u| u.takes_headers(protocol))
        {
            return Err(src.error(
                "upstream-header",
                "headers go to an http(s):// or ws(s):// --upstream; there is none",
            ));
        }
        let http = self.http_group(all);
        if !self.route.is_empty() && !http {
            return Err(src.error(
                "route",
                "routes are for HTTP JSON-RPC upstreams (http://, https://, http+unix://) \
                 without --protocol mcp: a WebSocket, IPC, child-process or MCP upstream is a \
                 session, whose requests all go to one upstream",
            ));
        }
        if all.len() > 1 && !http && all.iter().any(|u| u.per_request(protocol)) {
            return Err(src.error(
                "upstream",
                "several upstreams are all HTTP JSON-RPC ones (http://, https://, http+unix://), \
                 or all sessions (ws://, wss://, unix://, --upstream-cmd, MCP servers with \
                 --protocol mcp), not a mix",
            ));
        }
        if all.len() > super::super::edge::MAX_PEERS {
            let key = if self.upstream.is_empty() {
                "upstream-cmd"
            } else {
                "upstream"
            };
            return Err(src.error(
                key,
                format!("at most {} upstreams", super::super::edge::MAX_PEERS),
            ));
        }
        Ok(upstream)
    }

    /// The HTTP upstream group (all of `--upstream` when there are several
    /// or routes), and the routes.
    fn group(&self, all: &[Upstream]) -> (Vec<hyper::Uri>, Vec<(String, hyper::Uri)>) {
        let uri = |u: &Upstream| u.http_uri().cloned();
        let group = if (all.len() > 1 || !self.route.is_empty()) && self.http_group(all) {
            self.upstream.iter().filter_map(uri).collect()
        } else {
            Vec::new()
        };
        let routes = self
            .route
            .iter()
            .filter_map(|r| Some((r.methods.clone(), uri(&r.upstream)?)))
            .collect();
        (group, routes)
    }

    /// The bearer tokens of the ingresses: every ingress must have a way
    /// for its clients to present one (or a client certificate).
    fn tokens(&self, src: &Sourced) -> Result<Option<Tokens>, ConfigError> {
        let Some(path) = &self.auth_token_file else {
            return Ok(None);
        };
        let tokens = Tokens::load(path).map_err(|m| src.error("auth-token-file", m))?;
        if self.ingress.is_empty() {
            return Err(src.error(
                "auth-token-file",
                "bearer tokens guard an ingress: give --ingress http://ADDR or ws://ADDR",
            ));
        }
        let certificates = self.ingress_client_ca.is_some();
        if let Some(url) = self
            .ingress
            .iter()
            .find(|i| !(i.kind().carries_tokens() || i.is_tls() && certificates))
        {
            let how = if url.is_tls() {
                "authenticate its clients by certificate (--ingress-client-ca)"
            } else {
                "serve it over TLS with client certificates (tls+tcp:// and --ingress-client-ca), or from a gateway without --auth-token-file"
            };
            return Err(src.error(
                "auth-token-file",
                format!(
                    "a {}:// ingress ({url}) has no way to present a token: {how}",
                    url.scheme()
                ),
            ));
        }
        Ok(Some(tokens))
    }

    /// The associations' side: identity, trust, handshakes, key updates.
    fn endpoint(&self, src: &Sourced) -> Result<Endpoint, ConfigError> {
        let seed = match &self.identity {
            Some(path) => read_identity(path).map_err(|m| src.error("identity", m))?,
            None => random_identity().map_err(|m| src.error("identity", m))?,
        };
        let trust = match (self.insecure_accept_any_peer, self.trust.is_empty()) {
            (true, false) => {
                return Err(src.error("insecure-accept-any-peer", "conflicts with --trust"));
            }
            (true, true) => Trust::InsecureAcceptAny,
            (false, true) => {
                return Err(src.error(
                    "trust",
                    "no trusted peer key: pass --trust HEX (the peer's `keygen` public key), or --insecure-accept-any-peer to skip authentication",
                ));
            }
            (false, false) => Trust::Pinned(self.trust.iter().map(|k| k.0).collect()),
        };
        let mut endpoint = Endpoint::with_seed(seed, trust);
        let e = &mut endpoint;
        set(
            &mut e.handshake_timeout,
            self.handshake_timeout.map(|s| s.0),
        );
        set(&mut e.congestion, self.congestion);
        set(&mut e.max_handshakes, self.max_handshakes.map(usize::from));
        set(
            &mut e.max_handshakes_per_source,
            self.max_handshakes_per_source.map(usize::from),
        );
        set(
            &mut e.first_octets_timeout,
            self.first_octets_timeout.map(|s| s.0),
        );
        set(
            &mut e.assoc.key_update_after,
            self.key_update_after.map(|s| s.0),
        );
        if let Some(v) = self.key_update_after_bytes {
            if v < 1 << 16 {
                return Err(src.error(
                    "key-update-after-bytes",
                    format!(
                        "{v}: at least 65536 octets (a key update per few frames helps no one)"
                    ),
                ));
            }
            e.assoc.key_update_after_bytes = v;
        }
        if let Some(timeout) = self.peer_timeout {
            e.assoc.peer_timeout = timeout.0;
            e.assoc.keepalive_after = timeout.0 / 3;
        }
        if let (Some(cert_chain), Some(private_key)) = (&self.tls_cert, &self.tls_key) {
            e.tls_files = Some(TlsFiles {
                cert_chain: cert_chain.clone(),
                private_key: private_key.clone(),
            });
        }
        Ok(endpoint)
    }

    /// The gateway's own bounds: sizes, counts and timeouts.
    fn limits(&self, src: &Sourced) -> Result<Limits, ConfigError> {
        let mut limits = Limits::for_protocol(self.protocol.unwrap_or_default().id());
        let l = &mut limits;
        if let Some(v) = self.max_body.map(usize::from) {
            if v > MAX_BODY_LIMIT {
                return Err(src.error(
                    "max-body",
                    format!("{v}: at most {MAX_BODY_LIMIT} (64 MiB, one message per frame)"),
                ));
            }
            l.max_body = v;
        }
        if let Some(v) = self.session_buffer {
            if !(64 << 10..=outbox::MAX_BUDGET).contains(&v) {
                return Err(src.error(
                    "session-buffer",
                    format!("{v}: expected 65536 to {} octets", outbox::MAX_BUDGET),
                ));
            }
            l.session_buffer = v;
        }
        if let Some(v) = self.memory_budget {
            if v < 1 << 20 {
                return Err(src.error(
                    "memory-budget",
                    format!("{v}: at least 1048576 octets (1 MiB)"),
                ));
            }
            l.memory_budget = v;
        }
        set(&mut l.max_batch, self.max_batch.map(usize::from));
        set(&mut l.max_in_flight, self.max_in_flight.map(usize::from));
        set(
            &mut l.max_in_flight_per_connection,
            self.max_in_flight_per_connection.map(usize::from),
        );
        set(
            &mut l.max_connections,
            self.max_connections.map(usize::from),
        );
        set(
            &mut l.max_sessions_per_client,
            self.max_sessions_per_client.map(usize::from),
        );
        l.max_upstream_processes = self
            .max_upstream_processes
            .map_or(16 * default_shards(), usize::from);
        l.max_connections_per_source = self
            .max_connections_per_source
            .map_or((l.max_connections / 2).max(1), usize::from);
        set(&mut l.pool_size, self.pool_size.map(usize::from));
        set(&mut l.request_timeout, self.request_timeout.map(|s| s.0));
        set(&mut l.listen_timeout, self.listen_timeout.map(|s| s.0));
        set(&mut l.idle_timeout, self.idle_timeout.map(|s| s.0));
        set(&mut l.stall_timeout, self.stall_timeout.map(|s| s.0));
        set(
            &mut l.upstream_connect_timeout,
            self.upstream_connect_timeout.map(|s| s.0),
        );
        set(&mut l.drain_timeout, self.drain_timeout.map(|s| s.0));
        if let Some(p) = self.retry_budget {
            if p > 100 {
                return Err(src.error("retry-budget", format!("{p}: a percent, 0 to 100")));
            }
            l.retry_budget = p;
        }
        l.hedge_after = self.hedge_after.map(|s| s.0);
        Ok(limits)
    }

    /// The rate limits per client, when asked for (an edge's).
    fn rate_limit(&self, max_body: usize, src: &Sourced) -> Result<Option<RateLimit>, ConfigError> {
        let requests = self.rate_limit.map(|r| r.0);
        let octets = self.rate_limit_octets.map(|r| r.0);
        if requests.is_none() && octets.is_none() {
            return Ok(None);
        }
        if self.ingress.is_empty() {
            let key = if requests.is_some() {
                "rate-limit"
            } else {
                "rate-limit-octets"
            };
            return Err(src.error(
                key,
                "rate limits are per client of an ingress: give --ingress",
            ));
        }
        let tenth = |r: Option<f64>| r.map_or(1.0, |r| (r / 10.0).max(1.0));
        Ok(Some(RateLimit {
            requests,
            burst: self
                .rate_limit_burst
                .map_or_else(|| tenth(requests), |b| b.0),
            octets,
            octets_burst: tenth(octets).max(max_body as f64),
        }))
    }

    /// The TLS settings of the ingresses: a TLS ingress needs a
    /// certificate, and a certificate or a client CA needs a TLS ingress.
    fn ingress_tls(&self, tokens: bool, src: &Sourced) -> Result<Option<IngressTls>, ConfigError> {
        let tls_ingress = self.ingress.iter().find(|i| i.is_tls());
        match (&self.ingress_cert, &self.ingress_key, tls_ingress) {
            (Some(cert_chain), Some(private_key), Some(_)) => Ok(Some(IngressTls {
                files: TlsFiles {
                    cert_chain: cert_chain.clone(),
                    private_key: private_key.clone(),
                },
                client_ca: self.ingress_client_ca.clone(),
                certless: tokens,
            })),
            (None, None, None) if self.ingress_client_ca.is_none() => Ok(None),
            (_, _, Some(url)) => Err(src.error(
                "ingress",
                format!("{url}: a TLS ingress needs --ingress-cert and --ingress-key"),
            )),
            (_, _, None) => {
                let key = if self.ingress_client_ca.is_some() && self.ingress_cert.is_none() {
                    "ingress-client-ca"
                } else {
                    "ingress-cert"
                };
                Err(src.error(
                    key,
                    "certificates are for a TLS ingress: give --ingress https://ADDR, wss://ADDR or tls+tcp://ADDR",
                ))
            }
        }
    }
}

/// `*field = v` when an option gave `v`; the default stays otherwise.
fn set<T>(field: &mut T, v: Option<T>) {
    if let Some(v) = v {
        *field = v;
    }
}

/// `--shards` when it is not given: one per core the process may use.
pub(super) fn default_shards() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// A resource's URL, as a token's `aud` and a challenge name it: an
/// absolute http(s) URL, no fragment, nothing a quoted header value cannot
/// hold.
fn resource_url(url: &str) -> Result<(), String> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!("{url:?}: expected an absolute http(s):// URL"));
    }
    if url.contains('#') || url.contains('"') || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{url:?}: no fragment, spaces, quotes or characters outside visible ASCII"
        ));
    }
    Ok(())
}
