//! Browsers at the ingress: which web origins may use the edge
//! (`--cors-origin`), the CORS answers they get, and the same check on a
//! WebSocket handshake.
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

/// The web origins allowed at an edge's ingress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrowserOrigins {
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

    /// Whether any foreign origin is allowed.
    pub fn is_empty(&self) -> bool {
        !self.any && self.listed.is_empty()
    }

    /// Who sent a request with these headers.
    pub fn caller(&self, headers: &HeaderMap) -> Caller {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Caller::Program;
        };
        let text = origin.to_str().unwrap_or("").trim();
        let canonical = canonical(text);
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase);
        if let (Some(c), Some(host)) = (&canonical, &host)
            && authority_of(c).is_some_and(|a| same_authority(a, host))
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
        let none = BrowserOrigins::default();
        let host = ("host", "127.0.0.1:8081");
        assert_eq!(none.caller(&headers(&[host])), Caller::Program);
        assert_eq!(
            none.caller(&headers(&[host, ("origin", "http://127.0.0.1:8081")])),
            Caller::SameOrigin
        );
        assert_eq!(
            none.caller(&headers(&[
                ("host", "edge.example:80"),
                ("origin", "http://EDGE.example")
            ])),
            Caller::SameOrigin
        );
        assert_eq!(
            none.caller(&headers(&[host, ("origin", "https://evil.example")])),
            Caller::Foreign("https://evil.example".into())
        );
        assert_eq!(
            none.caller(&headers(&[host, ("origin", "null")])),
            Caller::Foreign("null".into())
        );
    }

    #[test]
    fn listed_origins_are_matched_as_browsers_send_them() {
        let o = BrowserOrigins::parse(&["https://App.example:443/", "http://localhost:3000"])
            .expect("valid");
        let h = |origin| headers(&[("host", "127.0.0.1:8080"), ("origin", origin)]);
        assert!(
            matches!(o.caller(&h("https://app.example")), Caller::Allowed(v) if v == "https://app.example")
        );
        assert!(matches!(
            o.caller(&h("http://localhost:3000")),
            Caller::Allowed(_)
        ));
        assert!(matches!(
            o.caller(&h("http://localhost:3001")),
            Caller::Foreign(_)
        ));
        assert!(matches!(
            o.caller(&h("http://app.example")),
            Caller::Foreign(_)
        ));
        let mut out = HeaderMap::new();
        o.caller(&h("https://app.example"))
            .decorate(&mut out, "mcp-session-id");
        assert_eq!(out["access-control-allow-origin"], "https://app.example");
        assert_eq!(out["vary"], "Origin");
        assert_eq!(out["access-control-allow-credentials"], "true");
        assert_eq!(out["access-control-expose-headers"], "mcp-session-id");
    }

    #[test]
    fn any_origin_is_answered_with_a_star_and_no_credentials() {
        let o = BrowserOrigins::parse(&["*"]).expect("valid");
        let c = o.caller(&headers(&[
            ("host", "a:1"),
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
}
