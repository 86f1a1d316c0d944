//! Browsers at the ingress: which host names the edge answers to
//! (`--allowed-host`), which web origins may use it (`--cors-origin`), the
//! CORS answers they get, and the same checks on a WebSocket handshake.
//!
//! A request must name an allowed host in its `Host` header (HTTP/1.1) or
//! its `:authority` (HTTP/2), whoever sends it: a page of a name the
//! attacker controls, resolved to the edge's address (DNS rebinding), sends
//! its own name there, and is its own "same origin". Without
//! `--allowed-host` the names allowed over plain TCP are IP literals (a
//! browser that sends one connected to that address) and `localhost` and
//! its subdomains; over TLS every name is, since the browser has checked it
//! against the ingress certificate already; over a Unix socket no page can
//! reach the edge. With `--allowed-host` only the listed names (or
//! `*.suffix`), and the defaults above, pass; `*` turns the check off.
//!
//! A request without an `Origin` header is from a program, not a page, and
//! is let through. A request with one is from a page: it is served when the
//! page is of the ingress's own origin (its `Origin` names the `Host` it
//! asks) or of a listed origin, and refused with 403 otherwise. Without
//! `--cors-origin` no foreign page may use the edge: not to read a reply
//! (CORS), not to send a request it cannot read (a `no-cors` POST still
//! reaches the server), not to open a WebSocket (cross-site WebSocket
//! hijacking of an edge on the user's own machine).
//!
//! `--cors-origin '*'` lets every page in, and is answered
//! `Access-Control-Allow-Origin: *` without `Access-Control-Allow-Credentials`,
//! so browsers send no credentials with it; a listed origin is answered by
//! name, with `Vary: Origin` and `Access-Control-Allow-Credentials: true`.

use hyper::header::{self, HeaderMap, HeaderValue};

/// The host names and the web origins allowed at an edge's ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrowserOrigins {
    /// The names the ingress answers to.
    hosts: AllowedHosts,
    /// `*`: every origin.
    any: bool,
    /// Serialized origins (`scheme://host[:port]`, lower case, no default
    /// port), as browsers send them.
    listed: Vec<String>,
}

/// What the `Origin` of a request is to the ingress.
#[derive(Debug, PartialEq, Eq)]
pub enum Caller {
    /// No `Origin`: a program, not a page.
    Program,
    /// A page of the ingress's own origin.
    SameOrigin,
    /// A page of an allowed origin: answer with these CORS headers.
    Allowed(HeaderValue),
    /// A page of another origin: refuse.
    Foreign(String),
    /// A request for a host name not allowed here (a page of a rebound
    /// name, or a misdirected request): refuse.
    ForeignHost(String),
}

/// How a connection reached the ingress, for the `Host` check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Plain TCP: the name a browser sends is checked here.
    Plain,
    /// TLS: the browser checked the name against the ingress certificate.
    Tls,
    /// A Unix domain socket: no page reaches it.
    Local,
}

/// The host names an ingress answers to (`--allowed-host`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `*`: every name, on every connection.
    any: bool,
    /// Lower case, without a trailing dot; `*.example` kept as `.example`.
    names: Vec<String>,
}

impl AllowedHosts {
    /// From the `--allowed-host` values: `*`, `NAME` or `*.SUFFIX` (a host
    /// name or an IP address, without a port).
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, String> {
        let mut h = Self::default();
        for v in values {
            let v = v.as_ref().trim();
            if v == "*" {
                h.any = true;
                continue;
            }
            let (wild, name) = match v.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, v),
            };
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            let bracketed = name.starts_with('[') && name.ends_with(']');
            let ok = !name.is_empty()
                && (bracketed
                    && name[1..name.len() - 1]
                        .parse::<std::net::Ipv6Addr>()
                        .is_ok()
                    || name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
            if !ok || (wild && bracketed) {
                return Err(format!(
                    "{v:?}: expected *, a host name or IP address without a port (edge.example, 10.0.0.5, [::1]) or *.SUFFIX"
                ));
            }
            let name = if wild { format!(".{name}") } else { name };
            if !h.names.contains(&name) {
                h.names.push(name);
            }
        }
        Ok(h)
    }

    /// Whether a request that names `authority` (`host[:port]`, as sent)
    /// may be served on a connection that reached the ingress so.
    pub fn allows(&self, authority: &str, reach: Reach) -> bool {
        if self.any || reach != Reach::Plain {
            return true;
        }
        // Compared as octets, in any case, without a copy: this runs for
        // every request.
        let host = host_of(authority);
        let host = host.strip_suffix('.').unwrap_or(host).as_bytes();
        let ends_with = |suffix: &[u8]| {
            host.len() > suffix.len()
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        };
        let ip = std::str::from_utf8(host).is_ok_and(|h| {
            h.parse::<std::net::Ipv4Addr>().is_ok()
                || h.strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok())
        });
        ip || host.eq_ignore_ascii_case(b"localhost")
            || ends_with(b".localhost")
            || self.names.iter().any(|n| {
                let n = n.as_bytes();
                // `.suffix`: a name under it, not the suffix itself.
                if n.first() == Some(&b'.') {
                    ends_with(n)
                } else {
                    host.eq_ignore_ascii_case(n)
                }
            })
    }
}

/// The host of an authority (`host[:port]`, `[v6][:port]`).
fn host_of(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => &authority[..=end],
            None => authority,
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => authority,
    }
}

impl BrowserOrigins {
    /// From the `--cors-origin` values: `*`, or `http(s)://HOST[:PORT]`.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, String> {
        let mut o = Self::default();
        for v in values {
            let v = v.as_ref().trim();
            if v == "*" {
                o.any = true;
                continue;
            }
            let canonical = canonical(v).ok_or_else(|| {
                format!(
                    "{v:?}: expected * or an origin, scheme://host[:port] (http or https, no path)"
                )
            })?;
            if !o.listed.contains(&canonical) {
                o.listed.push(canonical);
            }
        }
        Ok(o)
    }

    /// The same, answering only to these host names.
    pub fn with_hosts(self, hosts: AllowedHosts) -> Self {
        Self { hosts, ..self }
    }

    /// Whether any foreign origin is allowed.
    pub fn is_empty(&self) -> bool {
        !self.any && self.listed.is_empty()
    }

    /// Whether the allowed host names differ from `other`'s.
    pub fn hosts_differ(&self, other: &Self) -> bool {
        self.hosts != other.hosts
    }

    /// Whether the allowed web origins differ from `other`'s.
    pub fn origins_differ(&self, other: &Self) -> bool {
        self.any != other.any || self.listed != other.listed
    }

    /// Who sent a request with these headers for this URI (whose authority
    /// is an HTTP/2 request's `:authority`) over a connection that reached
    /// the ingress so.
    pub fn caller(&self, headers: &HeaderMap, uri: &hyper::Uri, reach: Reach) -> Caller {
        let authority = headers
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{fffd}"))
            .or_else(|| uri.authority().map(hyper::http::uri::Authority::as_str));
        if let Some(a) = authority
            && !self.hosts.allows(a, reach)
        {
            return Caller::ForeignHost(a.to_owned());
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Caller::Program;
        };
        let text = origin.to_str().unwrap_or("").trim();
        let canonical = canonical(text);
        // Same origin: the page's origin names the host the request names,
        // which is allowed (above).
        if let (Some(c), Some(host)) = (&canonical, authority.map(str::to_ascii_lowercase))
            && authority_of(c).is_some_and(|a| same_authority(a, &host))
        {
            return Caller::SameOrigin;
        }
        if self.any {
            return Caller::Allowed(HeaderValue::from_static("*"));
        }
        match canonical {
            Some(c) if self.listed.contains(&c) => Caller::Allowed(origin.clone()),
            _ => Caller::Foreign(text.to_owned()),
        }
    }
}

impl Caller {
    /// Adds the CORS headers of an allowed origin to an answer; `expose`
    /// names the response headers its page may read.
    pub fn decorate(&self, headers: &mut HeaderMap, expose: &'static str) {
        let Caller::Allowed(origin) = self else {
            return;
        };
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        if origin != "*" {
            headers.append(header::VARY, HeaderValue::from_static("Origin"));
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        if !expose.is_empty() {
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(expose),
            );
        }
    }

    /// The refusal text for a host name not allowed.
    pub fn host_refusal(authority: &str) -> String {
        format!(
            "host {:?} is not served here: allow it with --allowed-host {} (a name that is not this gateway's may be a DNS rebinding attack)",
            authority,
            host_of(authority)
        )
    }

    /// The log and refusal text for a foreign origin.
    pub fn refusal(origin: &str) -> String {
        format!(
            "origin {origin:?} is not allowed here: allow it with --cors-origin {origin} (a page of another origin may not use this gateway)"
        )
    }
}

/// `scheme://host[:port]` lower-cased, without a default port or a
/// trailing `/`; `None` when it is not an http(s) origin.
fn canonical(s: &str) -> Option<String> {
    let s = s.strip_suffix('/').unwrap_or(s).to_ascii_lowercase();
    let (scheme, authority) = s.split_once("://")?;
    let default = match scheme {
        "http" => ":80",
        "https" => ":443",
        _ => return None,
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let authority = authority.strip_suffix(default).unwrap_or(authority);
    Some(format!("{scheme}://{authority}"))
}

fn authority_of(canonical: &str) -> Option<&str> {
    canonical.split_once("://").map(|(_, a)| a)
}

/// Whether an origin's authority (no default port) names the `Host` a
/// request asked for (which may spell out the default port).
fn same_authority(origin: &str, host: &str) -> bool {
    origin == host
        || host
            .strip_suffix(":80")
            .or_else(|| host.strip_suffix(":443"))
            .is_some_and(|h| h == origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request over plain TCP with these headers, its URI a path only
    /// (as HTTP/1.1 sends it).
    trait Plain {
        fn call(&self, h: &HeaderMap) -> Caller;
    }

    impl Plain for BrowserOrigins {
        fn call(&self, h: &HeaderMap) -> Caller {
            self.caller(h, &hyper::Uri::from_static("/"), Reach::Plain)
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn programs_and_pages_of_the_edge_itself_pass_foreign_pages_do_not() {
        let none = BrowserOrigins::default()
            .with_hosts(AllowedHosts::parse(&["edge.example"]).expect("valid"));
        let host = ("host", "127.0.0.1:8081");
        assert_eq!(none.call(&headers(&[host])), Caller::Program);
        assert_eq!(
            none.call(&headers(&[host, ("origin", "http://127.0.0.1:8081")])),
            Caller::SameOrigin
        );
        assert_eq!(
            none.call(&headers(&[
                ("host", "edge.example:80"),
                ("origin", "http://EDGE.example")
            ])),
            Caller::SameOrigin
        );
        assert_eq!(
            none.call(&headers(&[host, ("origin", "https://evil.example")])),
            Caller::Foreign("https://evil.example".into())
        );
        assert_eq!(
            none.call(&headers(&[host, ("origin", "null")])),
            Caller::Foreign("null".into())
        );
    }

    #[test]
    fn listed_origins_are_matched_as_browsers_send_them() {
        let o = BrowserOrigins::parse(&["https://App.example:443/", "http://localhost:3000"])
            .expect("valid");
        let h = |origin| headers(&[("host", "127.0.0.1:8080"), ("origin", origin)]);
        assert!(
            matches!(o.call(&h("https://app.example")), Caller::Allowed(v) if v == "https://app.example")
        );
        assert!(matches!(
            o.call(&h("http://localhost:3000")),
            Caller::Allowed(_)
        ));
        assert!(matches!(
            o.call(&h("http://localhost:3001")),
            Caller::Foreign(_)
        ));
        assert!(matches!(
            o.call(&h("http://app.example")),
            Caller::Foreign(_)
        ));
        let mut out = HeaderMap::new();
        o.call(&h("https://app.example"))
            .decorate(&mut out, "mcp-session-id");
        assert_eq!(out["access-control-allow-origin"], "https://app.example");
        assert_eq!(out["vary"], "Origin");
        assert_eq!(out["access-control-allow-credentials"], "true");
        assert_eq!(out["access-control-expose-headers"], "mcp-session-id");
    }

    #[test]
    fn any_origin_is_answered_with_a_star_and_no_credentials() {
        let o = BrowserOrigins::parse(&["*"]).expect("valid");
        let c = o.call(&headers(&[
            ("host", "127.0.0.1:1"),
            ("origin", "https://x.example"),
        ]));
        let mut out = HeaderMap::new();
        c.decorate(&mut out, "");
        assert_eq!(out["access-control-allow-origin"], "*");
        assert!(!out.contains_key("access-control-allow-credentials"));
        assert!(!out.contains_key("vary"));
    }

    #[test]
    fn bad_origins_are_refused_with_the_form_expected() {
        for bad in [
            "ftp://x",
            "https://x/path",
            "x.example",
            "https://",
            "https://u@x",
        ] {
            let e = BrowserOrigins::parse(&[bad]).unwrap_err();
            assert!(e.contains("scheme://host[:port]"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_rebound_name_is_refused_whoever_asks_and_same_origin_needs_an_allowed_host() {
        let none = BrowserOrigins::default();
        let rebound = "rebind.attacker.example:8081";
        // The page of the rebound name is its own "same origin": refused
        // for the name, as a program asking for it is.
        for h in [
            headers(&[
                ("host", rebound),
                ("origin", "http://rebind.attacker.example:8081"),
            ]),
            headers(&[("host", rebound)]),
        ] {
            assert_eq!(none.call(&h), Caller::ForeignHost(rebound.into()));
        }
        // The defaults over plain TCP: IP literals and localhost names.
        for ok in [
            "127.0.0.1:8081",
            "[::1]:8081",
            "localhost:3000",
            "app.localhost",
            "10.1.2.3",
        ] {
            assert_eq!(
                none.call(&headers(&[("host", ok)])),
                Caller::Program,
                "{ok}"
            );
        }
        for bad in [
            "localhost.attacker.example",
            "127.0.0.1.nip.io:80",
            "[::1",
            "x\u{7f}",
        ] {
            assert!(
                !AllowedHosts::default().allows(bad, Reach::Plain),
                "{bad} passed"
            );
        }
        // TLS: the browser checked the name against the certificate; a Unix
        // socket: no page reaches it.
        let uri = hyper::Uri::from_static("/");
        let h = headers(&[("host", rebound)]);
        assert_eq!(none.caller(&h, &uri, Reach::Tls), Caller::Program);
        assert_eq!(none.caller(&h, &uri, Reach::Local), Caller::Program);
        // Listed names and suffixes; `*` turns the check off.
        let listed = AllowedHosts::parse(&["Edge.Example.", "*.corp.example"]).expect("valid");
        for (name, ok) in [
            ("edge.example:443", true),
            ("EDGE.EXAMPLE", true),
            ("api.corp.example:8080", true),
            ("corp.example", false),
            ("xcorp.example", false),
            ("other.example", false),
        ] {
            assert_eq!(listed.allows(name, Reach::Plain), ok, "{name}");
        }
        assert!(
            AllowedHosts::parse(&["*"])
                .expect("valid")
                .allows(rebound, Reach::Plain)
        );
        for bad in [
            "edge.example:80",
            "http://edge.example",
            "*.[::1]",
            "",
            "a b",
        ] {
            let e = AllowedHosts::parse(&[bad]).unwrap_err();
            assert!(e.contains("without a port"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_http2_request_is_judged_by_its_authority() {
        let none = BrowserOrigins::default();
        let uri = |a: &str| format!("http://{a}/").parse::<hyper::Uri>().expect("uri");
        let page = headers(&[("origin", "http://127.0.0.1:8081")]);
        assert_eq!(
            none.caller(&page, &uri("127.0.0.1:8081"), Reach::Plain),
            Caller::SameOrigin
        );
        assert_eq!(
            none.caller(&headers(&[]), &uri("rebind.attacker.example"), Reach::Plain),
            Caller::ForeignHost("rebind.attacker.example".into())
        );
    }
}
