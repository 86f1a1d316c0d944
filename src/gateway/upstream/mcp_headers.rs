//! The request headers MCP's Streamable HTTP transport mirrors from a
//! message's body (MCP 2026-07-28, "Request Metadata"): `Mcp-Method` from
//! `method` on every request and notification, `Mcp-Name` from
//! `params.name` or `params.uri` on `tools/call`, `resources/read` and
//! `prompts/get`, and `MCP-Protocol-Version` from the body's
//! `_meta["io.modelcontextprotocol/protocolVersion"]` where a request
//! carries its own (the stateless revision; a session's is the one
//! `initialize` negotiated). The client's headers do not cross the pair,
//! only the message does, so the origin derives them again from it, as the
//! spec asks a client to: a server of that revision refuses a request
//! without them (`HeaderMismatch`), and one of an earlier revision ignores
//! them.
//!
//! Values outside what a header may carry plainly (visible ASCII, inner
//! spaces and tabs) are sent as `=?base64?…?=` of their UTF-8, as the spec's
//! "Value Encoding" says, and so is a plain value that looks like that.

use std::borrow::Cow;

use base64::Engine as _;
use hyper::header::{HeaderName, HeaderValue};
use serde::Deserialize;
use serde::de::IgnoredAny;

pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");

/// The headers one message's body gives.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mirrored {
    /// `Mcp-Method`.
    pub method: Option<HeaderValue>,
    /// `Mcp-Name`.
    pub name: Option<HeaderValue>,
    /// `MCP-Protocol-Version`: the request's own, from its `_meta`.
    pub protocol_version: Option<HeaderValue>,
}

/// What of a message's body the headers come from; anything else in it is
/// skipped unread.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    method: Option<Text<'a>>,
    #[serde(borrow, default)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default)]
    name: Option<Text<'a>>,
    #[serde(borrow, default)]
    uri: Option<Text<'a>>,
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<Meta<'a>>,
}

/// `_meta`: the request's own protocol version (MCP 2026-07-28).
#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    protocol_version: Option<Text<'a>>,
}

/// A string, or any other JSON value (which gives no header).
#[derive(Deserialize)]
#[serde(untagged)]
enum Text<'a> {
    Str(#[serde(borrow)] Cow<'a, str>),
    Other(IgnoredAny),
}

impl Text<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            Text::Str(s) => Some(s),
            Text::Other(_) => None,
        }
    }
}

/// The methods whose requests carry `Mcp-Name`.
fn named(method: &str) -> bool {
    matches!(method, "tools/call" | "resources/read" | "prompts/get")
}

/// The headers `body` (one JSON-RPC message) gives; none for a response, a
/// batch, or what does not parse.
pub fn mirrored(body: &[u8]) -> Mirrored {
    let Ok(head) = serde_json::from_slice::<Head<'_>>(body) else {
        return Mirrored::default();
    };
    let Some(method) = head.method.as_ref().and_then(Text::as_str) else {
        return Mirrored::default();
    };
    let params = head.params.as_ref();
    let name = params
        .filter(|_| named(method))
        .and_then(|p| p.name.as_ref().or(p.uri.as_ref()))
        .and_then(Text::as_str);
    let protocol_version = params
        .and_then(|p| p.meta.as_ref())
        .and_then(|m| m.protocol_version.as_ref())
        .and_then(Text::as_str);
    Mirrored {
        method: Some(encoded(method)),
        name: name.map(encoded),
        // A version is a token: sent as it is, or not at all.
        protocol_version: protocol_version.and_then(|v| HeaderValue::from_str(v).ok()),
    }
}

/// `value` as a header value: as it is when it is plain (visible ASCII and
/// inner spaces or tabs, no leading or trailing whitespace, not shaped like
/// the sentinel), else `=?base64?…?=` of its UTF-8.
pub fn encoded(value: &str) -> HeaderValue {
    let plain = value
        .bytes()
        .all(|b| b == b'\t' || (0x20..=0x7e).contains(&b))
        && value.trim_matches([' ', '\t']).len() == value.len()
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain && let Ok(v) = HeaderValue::from_str(value) {
        return v;
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
    // Base64's alphabet and the markers are visible ASCII.
    HeaderValue::from_str(&format!("=?base64?{b64}?=")).unwrap_or(HeaderValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Option<HeaderValue> {
        Some(HeaderValue::from_str(s).expect("a header value"))
    }

    #[test]
    fn a_stateless_tool_call_gives_its_method_name_and_version() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
                     "io.modelcontextprotocol/clientCapabilities":{}},
            "name":"get_weather","arguments":{"city":"Paris"}}}"#;
        assert_eq!(
            mirrored(body),
            Mirrored {
                method: h("tools/call"),
                name: h("get_weather"),
                protocol_version: h("2026-07-28"),
            }
        );
    }

    #[test]
    fn a_resource_is_named_by_its_uri_and_other_methods_by_nothing() {
        let read = br#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///projects/myapp/config.json"}}"#;
        let m = mirrored(read);
        assert_eq!(m.name, h("file:///projects/myapp/config.json"));
        assert_eq!(m.protocol_version, None, "a session request: none of its own");
        // tools/list has no name; a `name` in another method's params is not
        // mirrored.
        let list = br#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"name":"x"}}"#;
        assert_eq!(
            mirrored(list),
            Mirrored {
                method: h("tools/list"),
                ..Mirrored::default()
            }
        );
        // A notification has its method too.
        let n = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(mirrored(n).method, h("notifications/initialized"));
    }

    #[test]
    fn responses_batches_and_odd_shapes_give_nothing_or_what_they_can() {
        for body in [
            &br#"{"jsonrpc":"2.0","id":1,"result":{}}"#[..],
            br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
            b"not json",
            br#"{"jsonrpc":"2.0","id":1,"method":7}"#,
        ] {
            assert_eq!(mirrored(body), Mirrored::default(), "{body:?}");
        }
        // A name that is not a string, a version that is no token: left out.
        let odd = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":{"a":1},
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026\n07"}}}"#;
        assert_eq!(
            mirrored(odd),
            Mirrored {
                method: h("tools/call"),
                ..Mirrored::default()
            }
        );
    }

    #[test]
    fn values_a_header_cannot_carry_plainly_are_sent_in_base64() {
        // The spec's own examples.
        assert_eq!(encoded("us-west1"), "us-west1");
        assert_eq!(encoded("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(encoded(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encoded("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encoded("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
        // Inner spaces stay plain; an escaped name in the body is unescaped.
        assert_eq!(encoded("a b"), "a b");
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"caf\u00e9"}}"#;
        assert_eq!(mirrored(body).name, h("=?base64?Y2Fmw6k=?="));
    }
}
