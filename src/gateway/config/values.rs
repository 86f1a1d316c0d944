//! The typed values of the options: each parses from the text a flag or a
//! file key gives (`FromStr`, which clap uses) and deserializes from TOML
//! through the same parser, so a bad value is refused with one message
//! wherever it was written.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

use super::super::{HedgeAfter, IngressUrl, Upstream};
use crate::assoc::PeerAddr;
use crate::assoc::endpoint::Congestion;
use crate::bridge::{Effect, ProtocolId};

/// `Deserialize` through `FromStr` for values written as strings.
macro_rules! deserialize_from_str {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<str>::deserialize(d)?;
                s.parse().map_err(de::Error::custom)
            }
        }
    )*};
}

deserialize_from_str!(
    PeerAddr,
    IngressUrl,
    Upstream,
    Congestion,
    Protocol,
    crate::framing::Framing,
    EffectRule,
    EffectClass,
    RouteRule,
    UpstreamHeader,
    PeerKey,
    HostPort,
    super::super::oauth::ScopeRule,
);

/// A length of time: `500ms`, `5s`, `2m`, `1h`, or a bare number of
/// seconds (`2.5`); above zero and below about 115 days.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seconds(pub Duration);

impl Seconds {
    const MAX_SECS: f64 = 1e7;

    fn from_secs(secs: f64, written: &dyn fmt::Display) -> Result<Self, String> {
        if secs.is_finite() && secs > 0.0 && secs < Self::MAX_SECS {
            Ok(Self(Duration::from_secs_f64(secs)))
        } else {
            Err(format!(
                "{written}: expected a time above 0 (500ms, 5s, 2m, 1h, or seconds)"
            ))
        }
    }
}

impl FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let scale = match unit.trim() {
            "" | "s" => 1.0,
            "ms" => 1e-3,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => f64::NAN,
        };
        let secs = number.trim().parse::<f64>().map_or(f64::NAN, |n| n * scale);
        Self::from_secs(secs, &format_args!("{s:?}"))
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        let secs = d.as_secs();
        if d.subsec_nanos() == 0 && secs.is_multiple_of(3600) {
            write!(f, "{}h", secs / 3600)
        } else if d.subsec_nanos() == 0 && secs.is_multiple_of(60) {
            write!(f, "{}m", secs / 60)
        } else if d.subsec_nanos() == 0 {
            write!(f, "{secs}s")
        } else if d.subsec_nanos().is_multiple_of(1_000_000) {
            write!(f, "{}ms", d.as_millis())
        } else {
            write!(f, "{}s", d.as_secs_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText::<Seconds>::new(
            "a time (500ms, 5s, 2m) or seconds",
        ))
    }
}

/// `--hedge-after`: a time (`20ms`), or a percentile of the recent
/// read-only latencies (`p95`, `p99.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HedgeAfterArg(pub HedgeAfter);

impl FromStr for HedgeAfterArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let Some(p) = t.strip_prefix(['p', 'P']) else {
            return t
                .parse::<Seconds>()
                .map(|d| Self(HedgeAfter::Delay(d.0)))
                .map_err(|e| format!("{e}, or a percentile such as p95"));
        };
        // Hundredths of a percent: at most two decimals.
        let hundredths = p
            .parse::<f64>()
            .ok()
            .map(|v| v * 100.0)
            .filter(|h| h.is_finite() && (h - h.round()).abs() < 1e-6)
            .map(|h| h.round() as i64);
        match hundredths {
            Some(h @ 100..10_000) => Ok(Self(HedgeAfter::Percentile(h as u32))),
            _ => Err(format!(
                "{s:?}: expected a percentile from p1 to below p100 (p95, p99.5)"
            )),
        }
    }
}

impl fmt::Display for HedgeAfterArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            HedgeAfter::Delay(d) => Seconds(d).fmt(f),
            HedgeAfter::Percentile(h) if h % 100 == 0 => write!(f, "p{}", h / 100),
            HedgeAfter::Percentile(h) => {
                let fraction = format!("{:02}", h % 100);
                write!(f, "p{}.{}", h / 100, fraction.trim_end_matches('0'))
            }
        }
    }
}

impl<'de> Deserialize<'de> for HedgeAfterArg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText::<HedgeAfterArg>::new(
            "a time (20ms, 1s), seconds, or a percentile (p95)",
        ))
    }
}

impl FromNumber for HedgeAfterArg {
    fn from_number(v: f64) -> Result<Self, String> {
        Seconds::from_number(v).map(|d| Self(HedgeAfter::Delay(d.0)))
    }
}

/// A rate or a count per second: a number above 0.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Rate(pub f64);

impl Rate {
    fn new(v: f64, written: &dyn fmt::Display) -> Result<Self, String> {
        if v.is_finite() && v > 0.0 && v < 1e12 {
            Ok(Self(v))
        } else {
            Err(format!("{written}: expected a number above 0"))
        }
    }
}

impl FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::new(s.trim().parse().unwrap_or(f64::NAN), &format_args!("{s:?}"))
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NumberOrText::<Rate>::new("a number above 0"))
    }
}

/// A value TOML may give as a number or as text (`5` or `"5s"`).
trait FromNumber: FromStr<Err = String> {
    fn from_number(v: f64) -> Result<Self, String>;
}

impl FromNumber for Seconds {
    fn from_number(v: f64) -> Result<Self, String> {
        Self::from_secs(v, &v)
    }
}

impl FromNumber for Rate {
    fn from_number(v: f64) -> Result<Self, String> {
        Self::new(v, &v)
    }
}

struct NumberOrText<T> {
    expected: &'static str,
    of: std::marker::PhantomData<T>,
}

impl<T> NumberOrText<T> {
    fn new(expected: &'static str) -> Self {
        Self {
            expected,
            of: std::marker::PhantomData,
        }
    }
}

impl<T: FromNumber> Visitor<'_> for NumberOrText<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expected)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        T::from_number(v as f64).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        T::from_number(v as f64).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        T::from_number(v).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(E::custom)
    }
}

/// `--protocol`: the protocol_id of the Bridge envelope and the SafetyLabel
/// table that comes with it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    Mcp,
    A2a,
    /// Plain JSON-RPC (experimental id 0x10).
    #[default]
    JsonRpc,
    /// The Language Server Protocol (experimental id 0x11).
    Lsp,
}

impl Protocol {
    pub fn id(self) -> ProtocolId {
        match self {
            Protocol::Mcp => ProtocolId::MCP,
            Protocol::A2a => ProtocolId::A2A,
            Protocol::JsonRpc => ProtocolId::JSONRPC_EXPERIMENTAL,
            Protocol::Lsp => ProtocolId::LSP_EXPERIMENTAL,
        }
    }
}

impl FromStr for Protocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mcp" => Ok(Self::Mcp),
            "a2a" => Ok(Self::A2a),
            "jsonrpc" => Ok(Self::JsonRpc),
            "lsp" => Ok(Self::Lsp),
            other => Err(format!(
                "unknown protocol {other:?}: expected mcp, a2a, jsonrpc or lsp"
            )),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Mcp => "mcp",
            Protocol::A2a => "a2a",
            Protocol::JsonRpc => "jsonrpc",
            Protocol::Lsp => "lsp",
        })
    }
}

/// An effect class: read-only, idempotent-write, non-idempotent-write or
/// destructive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectClass(pub Effect);

impl FromStr for EffectClass {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "read-only" | "readonly" | "read_only" => Ok(Self(Effect::ReadOnly)),
            "idempotent-write" => Ok(Self(Effect::IdempotentWrite)),
            "non-idempotent-write" => Ok(Self(Effect::NonIdempotentWrite)),
            "destructive" => Ok(Self(Effect::Destructive)),
            other => Err(format!(
                "unknown effect class {other:?}: expected read-only, idempotent-write, non-idempotent-write or destructive"
            )),
        }
    }
}

/// `--effect METHOD=CLASS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectRule {
    pub method: String,
    pub effect: Effect,
}

impl FromStr for EffectRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (method, class) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected METHOD=CLASS"))?;
        Ok(Self {
            method: method.trim().to_owned(),
            effect: class.parse::<EffectClass>()?.0,
        })
    }
}

/// `--route GLOB=URL`: methods matching GLOB (`*` matches any run of
/// characters) go to the HTTP upstream URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteRule {
    pub methods: String,
    pub upstream: Upstream,
}

impl FromStr for RouteRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (methods, url) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected GLOB=URL (eth_getLogs=http://archive:8545)"))?;
        let upstream: Upstream = url.trim().parse()?;
        if upstream.http_uri().is_none() {
            return Err(format!(
                "{s:?}: a route goes to an http(s):// or http+unix:// upstream"
            ));
        }
        Ok(Self {
            methods: methods.trim().to_owned(),
            upstream,
        })
    }
}

/// Headers the gateway sets itself on upstream requests.
const MANAGED_HEADERS: &[&str] = &[
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "sec-websocket-key",
    "sec-websocket-version",
];

/// `--upstream-header "NAME: VALUE"`; the value is marked sensitive, so it
/// is never logged, not even by `Debug`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamHeader(
    pub hyper::header::HeaderName,
    pub hyper::header::HeaderValue,
);

impl FromStr for UpstreamHeader {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        use hyper::header::{HeaderName, HeaderValue};
        let (name, value) = s
            .split_once(':')
            .ok_or_else(|| "expected \"NAME: VALUE\"".to_owned())?;
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .map_err(|_| format!("{:?} is not a header name", name.trim()))?;
        if MANAGED_HEADERS.contains(&name.as_str()) {
            return Err(format!("{name} is set by the gateway itself"));
        }
        let mut value = HeaderValue::from_str(value.trim())
            .map_err(|_| format!("the value of {name} is not a valid header value"))?;
        value.set_sensitive(true);
        Ok(Self(name, value))
    }
}

/// A peer's public key: 32 octets in hex (what `keygen` prints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerKey(pub [u8; 32]);

impl FromStr for PeerKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bytes = hex::decode(s.trim()).map_err(|_| format!("{s:?} is not hex"))?;
        bytes
            .try_into()
            .map(Self)
            .map_err(|b: Vec<u8>| format!("a key is 32 octets (64 hex digits), got {}", b.len()))
    }
}

/// `HOST:PORT`, resolved once when parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPort(pub SocketAddr);

impl FromStr for HostPort {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        std::net::ToSocketAddrs::to_socket_addrs(s)
            .ok()
            .and_then(|mut a| a.next())
            .map(Self)
            .ok_or_else(|| format!("bad address {s:?}: expected HOST:PORT"))
    }
}

/// A count of at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Count(pub NonZeroUsize);

impl Count {
    pub fn get(self) -> usize {
        self.0.get()
    }

    fn new(v: u64, written: &dyn fmt::Display) -> Result<Self, String> {
        usize::try_from(v)
            .ok()
            .and_then(NonZeroUsize::new)
            .map(Self)
            .ok_or_else(|| format!("{written}: expected a whole number of at least 1"))
    }
}

impl From<Count> for usize {
    fn from(c: Count) -> usize {
        c.get()
    }
}

impl FromStr for Count {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::new(s.trim().parse().unwrap_or(0), &format_args!("{s:?}"))
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of at least 1")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Count::new(v, &v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Count::new(u64::try_from(v).unwrap_or(0), &v).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
                v.parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A key that takes one value or a list of them (`peer = "quic://…"` or
/// `peer = ["quic://…", "quic://…"]`), each value's own error kept.
pub(super) fn one_or_many<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct OneOrMany<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for OneOrMany<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or a list of strings")
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<T>, E> {
            T::deserialize(de::value::StrDeserializer::<E>::new(s)).map(|v| vec![v])
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut all = Vec::new();
            while let Some(v) = seq.next_element()? {
                all.push(v);
            }
            Ok(all)
        }
    }

    d.deserialize_any(OneOrMany(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_take_units_and_bare_seconds() {
        let s = |t: &str| t.parse::<Seconds>().map(|s| s.0);
        assert_eq!(s("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(s("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(s(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(s("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(s("2.5"), Ok(Duration::from_millis(2500)));
        for bad in ["0", "0s", "-1", "5x", "s", "", "inf", "NaN", "1e9"] {
            let e = s(bad).unwrap_err();
            assert!(e.contains("expected a time above 0"), "{bad}: {e}");
        }
        for t in ["500ms", "5s", "90s", "5m", "1h"] {
            assert_eq!(t.parse::<Seconds>().unwrap().to_string(), t);
        }
    }

    #[test]
    fn toml_takes_numbers_or_text_for_times_and_rates() {
        #[derive(serde::Deserialize)]
        struct T {
            a: Seconds,
            b: Seconds,
            c: Rate,
            d: Rate,
        }
        let t: T = toml::from_str("a = 3\nb = \"250ms\"\nc = 0.5\nd = \"7\"").unwrap();
        assert_eq!(t.a.0, Duration::from_secs(3));
        assert_eq!(t.b.0, Duration::from_millis(250));
        assert_eq!((t.c.0, t.d.0), (0.5, 7.0));
        let e = toml::from_str::<T>("a = 0\nb = 1\nc = 1\nd = 1")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("line 1") && e.contains("above 0"), "{e}");
    }

    #[test]
    fn effect_rules_headers_and_keys() {
        let r: EffectRule = "eth_call = read-only".parse().unwrap();
        assert_eq!(
            (r.method.as_str(), r.effect),
            ("eth_call", Effect::ReadOnly)
        );
        assert!("eth_call".parse::<EffectRule>().is_err());
        assert!(
            "x=sideways"
                .parse::<EffectRule>()
                .unwrap_err()
                .contains("sideways")
        );
        let h: UpstreamHeader = "Authorization: Bearer s3cret".parse().unwrap();
        assert!(h.1.is_sensitive());
        assert!(!format!("{h:?}").contains("s3cret"));
        assert!("Host: x".parse::<UpstreamHeader>().is_err());
        assert!("no colon".parse::<UpstreamHeader>().is_err());
        assert!("ab".repeat(32).parse::<PeerKey>().is_ok());
        assert!("ab".parse::<PeerKey>().unwrap_err().contains("got 1"));
        assert!("zz".parse::<PeerKey>().unwrap_err().contains("not hex"));
        assert_eq!("3".parse::<Count>().map(Count::get), Ok(3));
        for bad in ["0", "-1", "x", ""] {
            assert!(
                bad.parse::<Count>().unwrap_err().contains("at least 1"),
                "{bad}"
            );
        }
    }
}
