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
//!
//! The edge checks the same headers of a client's POST against its body,
//! as a server of that revision does ([`mismatch`]): what disagrees, or a
//! required one missing from a request of the stateless revision, is
//! refused with 400 and `HeaderMismatch` (-32020) before anything is
//! carried.

use std::borrow::Cow;

use base64::Engine as _;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde::de::IgnoredAny;

pub const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
pub const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
pub const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// MCP's `HeaderMismatch` error code (2026-07-28).
pub const HEADER_MISMATCH: i32 = -32020;

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

/// The methods whose requests carry `Mcp-Name`: those that name what they
/// use (a tool, a prompt, a resource's URI).
pub fn named(method: &str) -> bool {
    matches!(method, "tools/call" | "resources/read" | "prompts/get")
}

/// The values of a message's body the headers mirror.
#[derive(Debug, Default, PartialEq, Eq)]
struct Fields<'a> {
    method: Option<Cow<'a, str>>,
    /// `params.name` or `params.uri`, on the methods that carry `Mcp-Name`.
    name: Option<Cow<'a, str>>,
    /// `_meta`'s protocol version: a request of the stateless revision.
    protocol_version: Option<Cow<'a, str>>,
}

/// The fields of `body` (one JSON-RPC message); none for a response or a
/// batch. `Err`: what the headers would be checked against cannot be read
/// for certain (not JSON of this shape, or a member given twice, which
/// servers read differently).
fn read_fields(body: &[u8]) -> Result<Fields<'_>, serde_json::Error> {
    let head = serde_json::from_slice::<Head<'_>>(body)?;
    let Some(Text::Str(method)) = head.method else {
        return Ok(Fields::default());
    };
    let (mut name, mut protocol_version) = (None, None);
    if let Some(p) = head.params {
        if named(&method) {
            // `resources/read` names its resource by `uri`; the other two
            // name theirs by `name`.
            let (first, second) = match &*method {
                "resources/read" => (p.uri, p.name),
                _ => (p.name, p.uri),
            };
            name = match (first, second) {
                (Some(Text::Str(n)), _) | (None | Some(Text::Other(_)), Some(Text::Str(n))) => {
                    Some(n)
                }
                _ => None,
            };
        }
        protocol_version = match p.meta.and_then(|m| m.protocol_version) {
            Some(Text::Str(v)) => Some(v),
            _ => None,
        };
    }
    Ok(Fields {
        method: Some(method),
        name,
        protocol_version,
    })
}

/// What a `tools/call`, `prompts/get` or `resources/read` message names
/// (`params.name`, or `params.uri`), unescaped; `Ok(None)` for other
/// messages and those that name nothing, `Err` for a body that cannot be
/// read for certain (a member given twice).
pub fn name_of(body: &[u8]) -> Result<Option<Cow<'_, str>>, serde_json::Error> {
    read_fields(body).map(|f| f.name)
}

/// [`read_fields`], none for what cannot be read.
fn fields(body: &[u8]) -> Fields<'_> {
    read_fields(body).unwrap_or_default()
}

/// The headers `body` (one JSON-RPC message) gives; none for a response, a
/// batch, or what does not parse.
pub fn mirrored(body: &[u8]) -> Mirrored {
    let f = fields(body);
    Mirrored {
        // A method is a plain token; one a header cannot carry is not sent
        // (only `Mcp-Name` has a base64 form).
        method: f
            .method
            .as_deref()
            .and_then(|m| HeaderValue::from_str(m).ok()),
        name: f.name.as_deref().map(encoded),
        // A version is a token: sent as it is, or not at all.
        protocol_version: f
            .protocol_version
            .as_deref()
            .and_then(|v| HeaderValue::from_str(v).ok()),
    }
}

/// How a client's POST of `body` with `headers` disagrees with itself, as
/// a server of MCP 2026-07-28 checks it: `Mcp-Method`, `Mcp-Name` (decoded)
/// or `MCP-Protocol-Version` not what the body says, or, on a request of
/// the stateless revision (a version in its `_meta`), one of them missing.
/// `None`: nothing to refuse (a client of an earlier revision sends none).
pub fn mismatch(headers: &HeaderMap, body: &[u8]) -> Option<String> {
    let ours = [&MCP_PROTOCOL_VERSION, &MCP_METHOD, &MCP_NAME];
    // A header given twice: which one a server reads is anyone's guess.
    if let Some(twice) = ours
        .iter()
        .find(|h| headers.get_all(**h).iter().count() > 1)
    {
        return Some(format!("header {twice} is given more than once"));
    }
    let f = match read_fields(body) {
        Ok(f) => f,
        // The headers cannot be checked against a body that cannot be read
        // for certain (a member given twice, which the scanner allows
        // below the top level): refused when it has them.
        Err(e) if ours.iter().any(|h| headers.contains_key(*h)) => {
            return Some(format!(
                "the body cannot be checked against the headers: {e}"
            ));
        }
        Err(_) => return None,
    };
    let method = f.method.as_deref()?;
    let stateless = f.protocol_version.is_some();
    let checks = [
        (
            MCP_PROTOCOL_VERSION,
            "MCP-Protocol-Version",
            f.protocol_version.as_deref(),
            stateless,
        ),
        (MCP_METHOD, "Mcp-Method", Some(method), stateless),
        (
            MCP_NAME,
            "Mcp-Name",
            f.name.as_deref(),
            stateless && named(method),
        ),
    ];
    for (header, shown, body_value, required) in checks {
        match (headers.get(&header), body_value) {
            (None, _) if required => return Some(format!("required header {shown} is missing")),
            (None, _) => {}
            (Some(got), want) => {
                // Only `Mcp-Name` may come in base64 (and `Mcp-Param-*`).
                let got = match header == MCP_NAME {
                    true => decoded(got),
                    false => got.to_str().ok().map(str::to_owned),
                };
                // A version header without one in the body is the session
                // revision's (the version `initialize` settled): not this
                // check's. `Mcp-Name` is defined for three methods only.
                if (header == MCP_PROTOCOL_VERSION && want.is_none())
                    || (header == MCP_NAME && !named(method))
                {
                    continue;
                }
                if got.as_deref() != want {
                    let got = got.as_deref().unwrap_or("(not a valid value)");
                    let want = want.unwrap_or("(none)");
                    return Some(format!(
                        "{shown} header value '{got}' does not match body value '{want}'"
                    ));
                }
            }
        }
    }
    None
}

/// Whether MCP revision `version` is `since` or later (revisions are dates,
/// which compare as text; a version not of that form is not).
pub fn version_at_least(version: &str, since: &str) -> bool {
    version.len() == since.len() && version >= since
}

/// Whether `body` is a request of MCP's stateless revision (2026-07-28):
/// it carries its protocol version in `_meta`.
pub fn stateless(body: &[u8]) -> bool {
    fields(body).protocol_version.is_some()
}

/// The HTTP status a server of MCP 2026-07-28 answers `reply` (one
/// JSON-RPC response) with: 400 for `HeaderMismatch` (-32020) and
/// `UnsupportedProtocolVersion` (-32022), 404 for an unknown method
/// (-32601), 200 otherwise. Only the reply crosses the pair, so the edge
/// gives its client the status the reply's error code stands for.
pub fn status_of(reply: &[u8]) -> u16 {
    #[derive(Deserialize)]
    struct Reply {
        #[serde(default)]
        error: Option<Error>,
    }
    #[derive(Deserialize)]
    struct Error {
        #[serde(default)]
        code: Option<i64>,
    }
    let code = serde_json::from_slice::<Reply>(reply)
        .ok()
        .and_then(|r| r.error)
        .and_then(|e| e.code);
    match code {
        Some(-32020 | -32022) => 400,
        Some(-32601) => 404,
        _ => 200,
    }
}

/// A header's value as its sender meant it: `=?base64?…?=` decoded (UTF-8),
/// else as it is; `None` when it is neither valid.
fn decoded(value: &HeaderValue) -> Option<String> {
    let raw = value.to_str().ok()?;
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            let octets = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
            String::from_utf8(octets).ok()
        }
        None => Some(raw.to_owned()),
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
        assert_eq!(
            m.protocol_version, None,
            "a session request: none of its own"
        );
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
        let body =
            br#"{"jsonrpc":"2.0","id":1,"method":"prompts/get","params":{"name":"caf\u00e9"}}"#;
        assert_eq!(mirrored(body).name, h("=?base64?Y2Fmw6k=?="));
    }

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(
                (*name).clone(),
                HeaderValue::from_str(value).expect("value"),
            );
        }
        h
    }

    /// A stateless `tools/call` of the tool `café` (escaped in the JSON).
    const CALL: &[u8] = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"caf\u00e9"}}"#;

    #[test]
    fn a_stateless_request_whose_headers_agree_with_its_body_passes() {
        let ok = headers(&[
            (&MCP_PROTOCOL_VERSION, "2026-07-28"),
            (&MCP_METHOD, "tools/call"),
            (&MCP_NAME, "=?base64?Y2Fmw6k=?="),
        ]);
        assert_eq!(mismatch(&ok, CALL), None);
        // What the origin sends is what the edge accepts.
        let m = mirrored(CALL);
        let mut sent = HeaderMap::new();
        sent.insert(MCP_PROTOCOL_VERSION, m.protocol_version.expect("version"));
        sent.insert(MCP_METHOD, m.method.expect("method"));
        sent.insert(MCP_NAME, m.name.expect("name"));
        assert_eq!(mismatch(&sent, CALL), None);
    }

    #[test]
    fn headers_that_disagree_or_are_missing_are_named() {
        let cases = [
            (
                headers(&[
                    (&MCP_PROTOCOL_VERSION, "2026-07-28"),
                    (&MCP_METHOD, "tools/list"),
                    (&MCP_NAME, "=?base64?Y2Fmw6k=?="),
                ]),
                "Mcp-Method header value 'tools/list' does not match body value 'tools/call'",
            ),
            (
                headers(&[
                    (&MCP_PROTOCOL_VERSION, "2026-07-28"),
                    (&MCP_METHOD, "tools/call"),
                    (&MCP_NAME, "cafe"),
                ]),
                "Mcp-Name header value 'cafe' does not match body value 'café'",
            ),
            (
                headers(&[
                    (&MCP_PROTOCOL_VERSION, "2025-11-25"),
                    (&MCP_METHOD, "tools/call"),
                    (&MCP_NAME, "=?base64?Y2Fmw6k=?="),
                ]),
                "MCP-Protocol-Version header value '2025-11-25' does not match body value '2026-07-28'",
            ),
            (
                headers(&[(&MCP_PROTOCOL_VERSION, "2026-07-28"), (&MCP_NAME, "x")]),
                "required header Mcp-Method is missing",
            ),
            (
                headers(&[
                    (&MCP_PROTOCOL_VERSION, "2026-07-28"),
                    (&MCP_METHOD, "tools/call"),
                ]),
                "required header Mcp-Name is missing",
            ),
            (
                headers(&[
                    (&MCP_PROTOCOL_VERSION, "2026-07-28"),
                    (&MCP_METHOD, "tools/call"),
                    (&MCP_NAME, "=?base64?!!?="),
                ]),
                "Mcp-Name header value '(not a valid value)' does not match body value 'café'",
            ),
        ];
        for (h, want) in cases {
            assert_eq!(mismatch(&h, CALL).as_deref(), Some(want));
        }
    }

    #[test]
    fn a_client_of_an_earlier_revision_sends_none_and_passes() {
        let session = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#;
        assert_eq!(mismatch(&HeaderMap::new(), session), None);
        // The version `initialize` settled, on a session request: not
        // compared with a body that carries none.
        let v = headers(&[(&MCP_PROTOCOL_VERSION, "2025-11-25")]);
        assert_eq!(mismatch(&v, session), None);
        // But a method header it does send must agree.
        let wrong = headers(&[(&MCP_METHOD, "tools/list")]);
        assert!(mismatch(&wrong, session).is_some());
        // `Mcp-Name` on a method that has none: not this check's.
        let extra = headers(&[(&MCP_METHOD, "tools/list"), (&MCP_NAME, "x")]);
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        assert_eq!(mismatch(&extra, list), None);
        // Responses and what does not parse: nothing to check.
        assert_eq!(
            mismatch(&wrong, br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            None
        );
        assert_eq!(mismatch(&wrong, b"[1]"), None);
    }

    #[test]
    fn a_stateless_reply_has_the_status_its_error_stands_for() {
        let error = |code: i64| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"m"}}}}"#)
        };
        assert_eq!(status_of(error(-32020).as_bytes()), 400);
        assert_eq!(status_of(error(-32022).as_bytes()), 400);
        assert_eq!(status_of(error(-32601).as_bytes()), 404);
        assert_eq!(status_of(error(-32602).as_bytes()), 200);
        assert_eq!(
            status_of(br#"{"jsonrpc":"2.0","id":1,"result":{"error":{"code":-32601}}}"#),
            200
        );
        assert_eq!(status_of(b"not json"), 200);
        assert!(stateless(CALL));
        assert!(!stateless(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#
        ));
    }

    #[test]
    fn a_body_or_headers_that_say_two_things_are_refused() {
        // `params.name` twice: a server that reads the last runs "evil".
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{
            "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},
            "name":"safe","name":"evil"}}"#;
        let h = headers(&[
            (&MCP_PROTOCOL_VERSION, "2026-07-28"),
            (&MCP_METHOD, "tools/call"),
            (&MCP_NAME, "safe"),
        ]);
        let why = mismatch(&h, twice).expect("refused");
        assert!(
            why.starts_with("the body cannot be checked against the headers"),
            "{why}"
        );
        // Without the headers, nothing to check here (the scanner judges
        // the body).
        assert_eq!(mismatch(&HeaderMap::new(), twice), None);
        // A header given twice.
        let mut h = headers(&[
            (&MCP_PROTOCOL_VERSION, "2026-07-28"),
            (&MCP_NAME, "=?base64?Y2Fmw6k=?="),
        ]);
        h.append(MCP_METHOD, HeaderValue::from_static("tools/call"));
        h.append(MCP_METHOD, HeaderValue::from_static("tools/list"));
        assert_eq!(
            mismatch(&h, CALL).as_deref(),
            Some("header mcp-method is given more than once")
        );
        // Base64 is for Mcp-Name only.
        let b64_method = headers(&[
            (&MCP_PROTOCOL_VERSION, "2026-07-28"),
            (&MCP_METHOD, "=?base64?dG9vbHMvY2FsbA==?="),
            (&MCP_NAME, "=?base64?Y2Fmw6k=?="),
        ]);
        assert!(mismatch(&b64_method, CALL).is_some());
    }

    #[test]
    fn a_resource_read_is_named_by_its_uri_even_with_a_name() {
        let read = br#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"name":"n","uri":"file:///a"}}"#;
        assert_eq!(mirrored(read).name, h("file:///a"));
        let get = br#"{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"n","uri":"file:///a"}}"#;
        assert_eq!(mirrored(get).name, h("n"));
    }
}
