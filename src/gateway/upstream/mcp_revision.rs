//! Which era of MCP an upstream member speaks, found as MCP 2026-07-28 has a
//! client find it ("stdio: Backward Compatibility"; "Versioning"), and what
//! the origin does with it.
//!
//! - When a session starts on a member whose era is not known, the origin
//!   asks it `server/discover` (with the stateless revision's `_meta`) on
//!   the side, while the session goes on. A `DiscoverResult`
//!   (`supportedVersions`), or a modern error naming the versions it
//!   supports (`UnsupportedProtocolVersion`, -32022), means the stateless
//!   era. Any other answer (an error, a result that is not a
//!   `DiscoverResult`: a server of the session era that runs whatever it is
//!   sent) means the session era, whose client sends `initialize` first.
//! - Over HTTP the question is a POST of its own: stateless, it opens no
//!   session at the server. Over stdio it goes to a child of its own, not
//!   the session's: a server of both eras takes the era of the first
//!   message on its connection for good (the MCP Python SDK's answers
//!   `initialize` after a `server/discover` with "connection is serving the
//!   2026-07-28 protocol"), so a question on the session's child would
//!   choose its client's era. That child, the gateway's alone, is then
//!   asked `initialize` where `server/discover` said the session era, for
//!   the version it settles on, and stopped as MCP's stdio shutdown asks.
//! - No answer, a refused credential, a server error or no room for one
//!   more process says nothing: the member stays unknown (and nothing is
//!   refused), asked again by its next session.
//! - What is found is kept per member ([`Revisions`]) and forgotten when a
//!   session there fails, so a member replaced by another version is
//!   found again.
//! - A request of the stateless revision (a version in its `_meta`) to a
//!   member of the session era gets `UnsupportedProtocolVersion` (-32022)
//!   from the origin, naming what the member supports (where known), as
//!   that revision's servers answer a version they do not speak: a
//!   deterministic failure, where the member itself would refuse it in its
//!   own way (HTTP: 400 "no session") or, over stdio, might run an
//!   era-ambiguous method such as `tools/call` under its own semantics
//!   (the spec's reason to probe). `server/discover` itself crosses
//!   unchanged, so that a client's own probe ends where it ends direct.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::Address;

/// The revision of the stateless era this gateway carries.
pub const STATELESS: &str = "2026-07-28";
/// The newest revision of the session era, which `initialize` asks for.
pub const NEWEST_SESSION: &str = "2025-11-25";
/// The id of the gateway's own `server/discover` (its token).
pub const DISCOVER_ID: &str = r#""npamp-gateway/discover""#;
/// The id of the gateway's own `initialize` (its token).
pub const INITIALIZE_ID: &str = r#""npamp-gateway/initialize""#;
/// MCP's `UnsupportedProtocolVersion` error code (2026-07-28).
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// What a member speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revision {
    /// The stateless era: it answered `server/discover`, naming these.
    Stateless { supported: Vec<String> },
    /// The session era (`initialize` first): the version its `initialize`
    /// settled on, where the gateway asked (over HTTP).
    Sessions { version: Option<String> },
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Revision::Stateless { supported } => {
                write!(f, "the stateless era ({})", supported.join(", "))
            }
            Revision::Sessions { version: Some(v) } => write!(f, "the session era ({v})"),
            Revision::Sessions { version: None } => f.write_str("the session era"),
        }
    }
}

/// The gateway's `server/discover`, as a client of the stateless revision
/// sends it.
pub fn discover_request() -> Bytes {
    let v = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientInfo": client_info(),
            "io.modelcontextprotocol/clientCapabilities": {},
        }},
    });
    with_id(v, DISCOVER_ID)
}

/// The gateway's `initialize`, asking for the newest session revision.
pub fn initialize_request() -> Bytes {
    let v = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "initialize",
        "params": {
            "protocolVersion": NEWEST_SESSION,
            "capabilities": {},
            "clientInfo": client_info(),
        },
    });
    with_id(v, INITIALIZE_ID)
}

fn client_info() -> Value {
    serde_json::json!({"name": "npamp-gateway", "version": env!("CARGO_PKG_VERSION")})
}

/// `v` with the id whose token is `id`, first (so that a reader of the
/// text finds it as the gateway wrote it).
fn with_id(v: Value, id: &str) -> Bytes {
    let rest = v.to_string();
    // `rest` is an object: `{...}`; the id goes first.
    Bytes::from(format!("{{\"id\":{id},{}", &rest[1..]))
}

#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    id: Value,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(Deserialize)]
struct ErrorObject {
    code: i64,
    #[serde(default)]
    data: Option<Value>,
}

fn reply(text: &[u8]) -> Option<Reply> {
    serde_json::from_slice(text).ok()
}

/// Whether `text` is the answer to the gateway's request of id `id` (a
/// token, [`DISCOVER_ID`] or [`INITIALIZE_ID`]).
pub fn answers(text: &[u8], id: &str) -> bool {
    let want: Option<Value> = serde_json::from_str(id).ok();
    reply(text).is_some_and(|r| Some(&r.id) == want.as_ref())
}

/// What the answer to `server/discover` says, by the spec's three outcomes:
/// a `DiscoverResult`, or a modern error naming the versions it supports,
/// is the stateless era; anything else, the session era.
pub fn read_discover(text: &[u8]) -> Revision {
    let versions = |v: Option<&Value>| -> Option<Vec<String>> {
        let list = v?.as_array()?;
        list.iter().map(|s| s.as_str().map(str::to_owned)).collect()
    };
    let Some(r) = reply(text) else {
        return Revision::Sessions { version: None };
    };
    let found = match (&r.result, &r.error) {
        (Some(result), None) => versions(result.get("supportedVersions")),
        (None, Some(e)) if e.code == UNSUPPORTED_VERSION => {
            versions(e.data.as_ref().and_then(|d| d.get("supported")))
        }
        _ => None,
    };
    match found {
        Some(supported) => Revision::Stateless { supported },
        None => Revision::Sessions { version: None },
    }
}

/// The version the answer to `initialize` settled on.
pub fn read_initialize(text: &[u8]) -> Option<String> {
    let result = reply(text)?.result?;
    let v = result.get("protocolVersion")?.as_str()?;
    (!v.is_empty() && v.len() <= 64).then(|| v.to_owned())
}

/// The origin's answer to `request` for a member that speaks `revision`,
/// when it answers in the member's place: a request of the stateless
/// revision (but `server/discover`) to a member of the session era gets
/// `UnsupportedProtocolVersion`. `None`: the member takes it.
pub fn refusal(revision: Option<&Revision>, request: &[u8]) -> Option<Bytes> {
    let Some(Revision::Sessions { version }) = revision else {
        return None;
    };
    let m = crate::gateway::mcp_headers::mirrored(request);
    let requested = m.protocol_version?;
    let method = m.method?;
    if method == "server/discover" {
        return None;
    }
    let scanned = crate::jsonrpc::scan(request, &crate::jsonrpc::Limits::default());
    let Ok(crate::jsonrpc::Scanned::Single(crate::jsonrpc::Kind::Request { id, .. })) = scanned
    else {
        return None;
    };
    let supported: Vec<&str> = version.iter().map(String::as_str).collect();
    let requested = requested.to_str().unwrap_or_default();
    let error = serde_json::json!({
        "code": UNSUPPORTED_VERSION,
        "message": format!(
            "Unsupported protocol version: the upstream speaks a session revision of MCP ({}), whose client sends initialize first",
            version.as_deref().unwrap_or("which one is not known")
        ),
        "data": {"supported": supported, "requested": requested},
    });
    let head = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"error\":",
        String::from_utf8_lossy(&request[id.token.clone()])
    );
    Some(Bytes::from(format!("{head}{error}}}")))
}

/// Every member's revision, as found; by address.
#[derive(Default)]
pub struct Revisions(Mutex<HashMap<Address, Known>>);

/// What is known of one member.
enum Known {
    /// Being asked.
    Asking,
    Found(Revision),
}

impl Revisions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Address, Known>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, member: &Address) -> Option<Revision> {
        match self.lock().get(member) {
            Some(Known::Found(r)) => Some(r.clone()),
            _ => None,
        }
    }

    /// Whether the caller is to ask `member` now: nothing is known of it,
    /// and nobody asks it already.
    pub fn ask(&self, member: &Address) -> bool {
        let mut map = self.lock();
        if map.contains_key(member) {
            return false;
        }
        map.insert(member.clone(), Known::Asking);
        true
    }

    /// What asking `member` found (`None`: nothing).
    pub fn found(&self, member: &Address, revision: Option<Revision>) {
        let mut map = self.lock();
        match revision {
            Some(r) => map.insert(member.clone(), Known::Found(r)),
            None => map.remove(member),
        };
    }

    /// A session on `member` failed: what it speaks is asked again.
    pub fn forget(&self, member: &Address) {
        let mut map = self.lock();
        if matches!(map.get(member), Some(Known::Found(_))) {
            map.remove(member);
        }
    }

    /// The origin's answer to `text` for `member`, in its place
    /// ([`refusal`]); `None`: the member takes it. Costs a look-up where
    /// the member is not of the session era.
    pub fn refusal(&self, member: &Address, text: &[u8]) -> Option<Bytes> {
        let version = match self.lock().get(member) {
            Some(Known::Found(Revision::Sessions { version })) => version.clone(),
            _ => return None,
        };
        refusal(Some(&Revision::Sessions { version }), text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_requests_carry_their_ids_first() {
        let d = discover_request();
        assert!(
            d.starts_with(br#"{"id":"npamp-gateway/discover","#),
            "{d:?}"
        );
        let v: Value = serde_json::from_slice(&d).expect("JSON");
        assert_eq!(v["method"], "server/discover");
        assert_eq!(
            v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
            STATELESS
        );
        let i: Value = serde_json::from_slice(&initialize_request()).expect("JSON");
        assert_eq!(i["params"]["protocolVersion"], NEWEST_SESSION);
        assert!(answers(
            br#"{"jsonrpc":"2.0","id":"npamp-gateway/discover","result":{}}"#,
            DISCOVER_ID
        ));
        assert!(!answers(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            DISCOVER_ID
        ));
    }

    #[test]
    fn the_discover_answer_is_read_by_the_three_outcomes() {
        let stateless = |s: &[&str]| Revision::Stateless {
            supported: s.iter().map(|v| (*v).to_owned()).collect(),
        };
        let sessions = Revision::Sessions { version: None };
        let cases: [(&[u8], Revision); 6] = [
            (
                br#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{}}}"#,
                stateless(&["2026-07-28", "2025-11-25"]),
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"x","data":{"supported":["2027-01-01"],"requested":"2026-07-28"}}}"#,
                stateless(&["2027-01-01"]),
            ),
            // A legacy server's own errors, whatever their code.
            (
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#,
                sessions.clone(),
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"not initialized"}}"#,
                sessions.clone(),
            ),
            // One that runs anything it is sent, echoing.
            (
                br#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{}}}"#,
                sessions.clone(),
            ),
            (b"<html>", sessions),
        ];
        for (text, want) in cases {
            assert_eq!(
                read_discover(text),
                want,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(
            read_initialize(
                br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18"}}"#
            )
            .as_deref(),
            Some("2025-06-18")
        );
        assert_eq!(
            read_initialize(br#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#),
            None
        );
    }

    #[test]
    fn a_member_is_asked_once_and_again_after_it_fails() {
        let r = Revisions::default();
        let m = Address::Tcp("127.0.0.1:1".into());
        assert!(r.ask(&m));
        assert!(!r.ask(&m), "asked already");
        r.found(&m, None);
        assert!(r.ask(&m), "nothing learned: asked again");
        let legacy = Revision::Sessions { version: None };
        r.found(&m, Some(legacy.clone()));
        assert_eq!(r.get(&m), Some(legacy));
        assert!(!r.ask(&m));
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(r.refusal(&m, call).is_some());
        r.forget(&m);
        assert_eq!(r.get(&m), None);
        assert!(r.refusal(&m, call).is_none());
        assert!(r.ask(&m));
        // A failure while it is asked leaves the question to its asker.
        r.forget(&m);
        assert!(!r.ask(&m));
    }

    #[test]
    fn a_stateless_request_to_a_session_era_member_is_refused_but_discover() {
        let legacy = Revision::Sessions {
            version: Some("2025-06-18".into()),
        };
        let call = br#"{"jsonrpc":"2.0","id":"c-1","method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let r = refusal(Some(&legacy), call).expect("refused");
        let v: Value = serde_json::from_slice(&r).expect("JSON");
        assert_eq!(v["id"], "c-1");
        assert_eq!(v["error"]["code"], UNSUPPORTED_VERSION);
        assert_eq!(
            v["error"]["data"],
            serde_json::json!({"supported":["2025-06-18"],"requested":"2026-07-28"})
        );
        // Not discover, not a session request, not to another era, not
        // when nothing is known.
        let discover = br#"{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(refusal(Some(&legacy), discover), None);
        let session = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t"}}"#;
        assert_eq!(refusal(Some(&legacy), session), None);
        let modern = Revision::Stateless {
            supported: vec![STATELESS.into()],
        };
        assert_eq!(refusal(Some(&modern), call), None);
        assert_eq!(refusal(None, call), None);
        // A notification of that revision has no answer to give.
        let note = br#"{"jsonrpc":"2.0","method":"notifications/x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(refusal(Some(&legacy), note), None);
    }
}
