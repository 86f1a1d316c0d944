//! Addresses: [`SchemeAddr`], the `SCHEME://HOST:PORT` form every socket
//! address flag takes, and [`PeerAddr`], a peer or listener:
//! `quic://HOST:PORT`, `tls://HOST:PORT` or `npamp://HOST:PORT` (the
//! protocol's URI scheme, draft §9.2).

use std::net::SocketAddr;

use super::error::LinkError;

/// Which transport an address is reached over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// QUIC (the primary transport), `quic://`.
    Quic,
    /// TCP + TLS 1.3 (the fallback transport), `tls://`.
    Tls,
    /// Negotiated, `npamp://`: a listener accepts both on one port number, a
    /// client prefers QUIC and falls back to TCP + TLS.
    Npamp,
}

impl Scheme {
    pub const fn name(self) -> &'static str {
        match self {
            Self::Quic => "quic",
            Self::Tls => "tls",
            Self::Npamp => "npamp",
        }
    }
}

/// A parsed `quic://HOST:PORT`, `tls://HOST:PORT` or `npamp://HOST:PORT`
/// (a host name is resolved here, once; the first address is used).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    pub scheme: Scheme,
    pub addr: SocketAddr,
}

impl std::str::FromStr for PeerAddr {
    type Err = LinkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| LinkError::BadUrl {
            url: s.to_owned(),
            why,
        };
        // An `npamp` URI may name a resource path within the endpoint
        // (draft §9.2); an association has no use for one, so only an empty
        // path is accepted rather than one silently ignored. N-PAMP reserves
        // no default port (draft §9.2).
        let SchemeAddr { scheme, addr } = s.parse().map_err(bad)?;
        let scheme = match scheme.as_str() {
            "quic" => Scheme::Quic,
            "tls" => Scheme::Tls,
            "npamp" => Scheme::Npamp,
            _ => return Err(bad("unknown scheme: expected quic://, tls:// or npamp://")),
        };
        Ok(Self { scheme, addr })
    }
}

/// `SCHEME://HOST:PORT`, with an optional trailing `/`: the one form of
/// every socket address the gateway's flags take (associations, ingress
/// listeners, mocks). The scheme is lower-cased (schemes are
/// case-insensitive, RFC 3986 §3.1); the host is resolved here, once, and
/// the first address is used. The error says what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemeAddr {
    pub scheme: String,
    pub addr: SocketAddr,
}

impl std::str::FromStr for SchemeAddr {
    type Err = &'static str;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (scheme, rest) = s.split_once("://").ok_or("no scheme")?;
        if scheme.is_empty()
            || !scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return Err("no scheme");
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err("the gateway uses no resource path, query or fragment");
        }
        if authority.contains('@') {
            return Err("user information is not allowed");
        }
        if !authority.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && !port.is_empty() && !host.ends_with(':')
        }) {
            return Err("HOST:PORT needed (there is no default port)");
        }
        let addr = std::net::ToSocketAddrs::to_socket_addrs(authority)
            .map_err(|_| "not an address or a host name that resolves")?
            .next()
            .ok_or("the host name resolves to no address")?;
        Ok(Self {
            scheme: scheme.to_ascii_lowercase(),
            addr,
        })
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme.name(), self.addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<PeerAddr, LinkError> {
        s.parse()
    }

    fn why(s: &str) -> &'static str {
        match parse(s) {
            Err(LinkError::BadUrl { why, .. }) => why,
            other => panic!("{s}: expected BadUrl, got {other:?}"),
        }
    }

    #[test]
    fn addresses_of_all_three_schemes_parse_and_print() {
        for (text, scheme, printed) in [
            (
                "quic://127.0.0.1:4433",
                Scheme::Quic,
                "quic://127.0.0.1:4433",
            ),
            ("tls://127.0.0.1:4434", Scheme::Tls, "tls://127.0.0.1:4434"),
            (
                "npamp://127.0.0.1:7443",
                Scheme::Npamp,
                "npamp://127.0.0.1:7443",
            ),
            (
                "NPAMP://127.0.0.1:7443/",
                Scheme::Npamp,
                "npamp://127.0.0.1:7443",
            ),
            ("npamp://[::1]:7443", Scheme::Npamp, "npamp://[::1]:7443"),
        ] {
            let addr = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(addr.scheme, scheme, "{text}");
            assert_eq!(addr.to_string(), printed, "{text}");
            assert_eq!(parse(printed).ok(), Some(addr), "{text} round trip");
        }
    }

    #[test]
    fn bad_addresses_say_what_is_wrong() {
        assert_eq!(why("127.0.0.1:7443"), "no scheme");
        assert_eq!(
            why("udp://127.0.0.1:7443"),
            "unknown scheme: expected quic://, tls:// or npamp://"
        );
        assert_eq!(
            why("npamp://127.0.0.1"),
            "HOST:PORT needed (there is no default port)"
        );
        assert_eq!(
            why("npamp://[::1]"),
            "HOST:PORT needed (there is no default port)"
        );
        assert_eq!(
            why("npamp://::1"),
            "HOST:PORT needed (there is no default port)"
        );
        for resource in [
            "npamp://127.0.0.1:7443/tools",
            "npamp://127.0.0.1:7443?x=1",
            "npamp://127.0.0.1:7443#f",
        ] {
            assert_eq!(
                why(resource),
                "the gateway uses no resource path, query or fragment",
                "{resource}"
            );
        }
        assert_eq!(
            why("tls://me@127.0.0.1:1"),
            "user information is not allowed"
        );
        assert_eq!(
            why("quic://127.0.0.1:99999"),
            "not an address or a host name that resolves"
        );
        let message = parse("npamp://127.0.0.1").unwrap_err().to_string();
        assert!(
            message.contains("npamp://127.0.0.1") && message.contains("no default port"),
            "{message}"
        );
    }
}
