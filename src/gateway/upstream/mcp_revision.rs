//! Which era of MCP an upstream member speaks, found as MCP 2026-07-28 has a
//! client find it ("stdio: Backward Compatibility"; "Versioning"), and what
//! the origin does with it.
//!
//! - The first session on a member over HTTP or stdio (not a WebSocket)
//!   asks it `server/discover` (with the
//!   stateless revision's `_meta`), and waits for the answer as long as a
//!   connection may take (`--upstream-connect-timeout`). A `DiscoverResult`
//!   (`supportedVersions`), or one of the errors only that revision has
//!   (-32020 to -32022), means the stateless era. Any other answer (another
//!   error, a result that is not a `DiscoverResult`: a server of the
//!   session era that runs whatever it is sent), or over stdio none within
//!   the request timeout, means the session era, whose client sends
//!   `initialize` first.
//! - Over HTTP the question is a POST of its own: stateless, it opens no
//!   session at the server. An answer with no JSON-RPC in it means the
//!   session era for a 4xx status (the spec's "400 with an empty body").
//!   Over stdio it goes to a child of the gateway's own, started and stopped
//!   before the session's: a server of both eras takes the era of the first
//!   message on its connection for good (the MCP Python SDK's answers
//!   `initialize` after a `server/discover` with "connection is serving the
//!   2026-07-28 protocol"), so a question on the session's child would
//!   choose its client's era. That child, the gateway's alone, is asked
//!   `initialize` too where the answer said the session era, for the
//!   version it settles on.
//! - A refused credential (401, 403), a server that is busy or failing
//!   (408, 429, 5xx), no connection or no answer over HTTP, or no room for
//!   one more process says nothing: nothing is refused, and the member is asked again a minute
//!   later.
//! - What is found is kept per member while sessions use it ([`Member`]),
//!   logged ("what the MCP upstream speaks"), asked again every ten minutes
//!   (a member may be upgraded in place) and at once when a session on it
//!   fails.
//! - A request of the stateless revision (a version newer than the session
//!   era's in its `_meta`) to a member of the session era is answered by the
//!   origin: Invalid Request (-32600), "send initialize first", as a server
//!   of that era refuses a request outside a session. Not the stateless
//!   revision's `UnsupportedProtocolVersion`: that error says the server is
//!   of the stateless era, and a client of both eras that gets it must not
//!   fall back to `initialize` ("Backward Compatibility"). Over stdio the
//!   member might otherwise run an era-ambiguous method such as
//!   `tools/call` under its own era's meaning (the spec's reason to probe);
//!   over HTTP its own refusal (400, with a null id) would reach the client
//!   as NotDelivered. `server/discover` itself crosses unchanged, so that a
//!   client's own probe ends where it ends direct.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

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

/// What a member speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Revision {
    /// The stateless era: it answered `server/discover`, naming these.
    Stateless { supported: Vec<String> },
    /// The session era (`initialize` first): the version its `initialize`
    /// settled on, where the gateway asked (over stdio, its own child).
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
/// a `DiscoverResult`, or an error only the stateless revision has (with
/// the versions it names, if it does), is the stateless era; anything
/// else, the session era.
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
        // Errors only the stateless revision has: HeaderMismatch,
        // MissingRequiredClientCapability, UnsupportedProtocolVersion.
        (None, Some(e)) if (-32022..=-32020).contains(&e.code) => {
            Some(versions(e.data.as_ref().and_then(|d| d.get("supported"))).unwrap_or_default())
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
/// Invalid Request, "send initialize first". `None`: the member takes it.
pub fn refusal(revision: Option<&Revision>, request: &[u8]) -> Option<Bytes> {
    let Some(Revision::Sessions { version }) = revision else {
        return None;
    };
    let m = crate::gateway::mcp_headers::mirrored(request);
    let requested = m.protocol_version?;
    let requested = requested.to_str().ok()?;
    // A version of the session era in `_meta` is the member's to judge.
    let newer = !crate::gateway::mcp_headers::version_at_least(NEWEST_SESSION, requested);
    if !newer || m.method? == "server/discover" {
        return None;
    }
    let scanned = crate::jsonrpc::scan(request, &crate::jsonrpc::Limits::default());
    let Ok(crate::jsonrpc::Scanned::Single(crate::jsonrpc::Kind::Request { id, .. })) = scanned
    else {
        return None;
    };
    let why = format!(
        "Bad Request: the upstream MCP server speaks a session revision ({}), not {requested}: send initialize first",
        version.as_deref().unwrap_or("which one is not known")
    );
    let id = &request[id.token.clone()];
    Some(crate::jsonrpc::carriage::local_error(Some(id), -32600, &why, None).into())
}

/// How long a member's era stands before it is asked again, while sessions
/// use it.
const ASK_AGAIN: Duration = Duration::from_secs(600);
/// How soon a member that said nothing is asked again.
const RETRY: Duration = Duration::from_secs(60);
/// What a request of the stateless revision carries (its `_meta` key).
const VERSION_KEY: &[u8] = b"io.modelcontextprotocol/protocolVersion";

/// The members in use, by address: each is kept by the sessions on it.
#[derive(Default)]
pub struct Revisions(Mutex<HashMap<Address, Weak<Member>>>);

impl Revisions {
    /// The member at `address`, shared by the sessions on it: its first
    /// session starts asking it what it speaks with `ask`
    /// (`Member::keep_asking`; `shown` names it in the log), and every
    /// session waits for the first answer, at most `wait`.
    pub async fn join<F, A>(
        &self,
        address: &Address,
        (ask, shown): (F, String),
        wait: Duration,
    ) -> Arc<Member>
    where
        F: Fn() -> A + Send + 'static,
        A: std::future::Future<Output = Option<Revision>> + Send + 'static,
    {
        let (member, first) = self.member(address);
        if first {
            tokio::spawn(Member::keep_asking(Arc::downgrade(&member), ask, shown));
        }
        member.first_answer(wait).await;
        member
    }

    /// The member at `address`, shared by the sessions on it, and whether
    /// the caller is its first, who is to ask it.
    fn member(&self, address: &Address) -> (Arc<Member>, bool) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get(address).and_then(Weak::upgrade) {
            return (m, false);
        }
        map.retain(|_, m| m.strong_count() > 0);
        let m = Arc::new(Member::default());
        map.insert(address.clone(), Arc::downgrade(&m));
        (m, true)
    }

    /// A session on `address` failed: its member is asked again at once.
    pub fn forget(&self, address: &Address) {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get(address).and_then(Weak::upgrade) {
            m.forget();
        }
    }
}

/// What is known of one member.
#[derive(Default)]
pub struct Member {
    found: Mutex<Option<Revision>>,
    /// It speaks the session era: requests of the stateless revision are
    /// refused (what every message reads).
    refuses: AtomicBool,
    /// Asked: its first question was answered, or given up.
    asked: tokio::sync::Notify,
    asked_once: AtomicBool,
    /// Ask again now.
    again: Arc<tokio::sync::Notify>,
}

impl Member {
    fn get(&self) -> Option<Revision> {
        self.found.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, revision: Option<Revision>) {
        let refuses = matches!(revision, Some(Revision::Sessions { .. }));
        *self.found.lock().unwrap_or_else(|p| p.into_inner()) = revision;
        self.refuses.store(refuses, Relaxed);
        self.asked_once.store(true, Relaxed);
        self.asked.notify_waiters();
    }

    /// A session on it failed: what it speaks is not known until it is
    /// asked again, now.
    fn forget(&self) {
        *self.found.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.refuses.store(false, Relaxed);
        self.again.notify_one();
    }

    /// The origin's answer to `text` in the member's place ([`refusal`]);
    /// `None`: the member takes it. An atomic load, where the member is not
    /// of the session era; else a search for `_meta`'s version key, the
    /// message read only where it is there.
    pub fn refusal(&self, text: &[u8]) -> Option<Bytes> {
        if !self.refuses.load(Relaxed) || memchr::memmem::find(text, VERSION_KEY).is_none() {
            return None;
        }
        refusal(self.get().as_ref(), text)
    }

    /// Waits for the first answer, at most `wait`.
    async fn first_answer(&self, wait: Duration) {
        let asked = self.asked.notified();
        if self.asked_once.load(Relaxed) {
            return;
        }
        let _ = tokio::time::timeout(wait, asked).await;
    }

    /// Asks the member what it speaks with `ask`, and again [`ASK_AGAIN`]
    /// after (a minute after, when it said nothing; at once when a session
    /// on it failed), for as long as a session keeps it. `shown` names it
    /// in the log.
    async fn keep_asking<F, A>(me: Weak<Self>, ask: F, shown: String)
    where
        F: Fn() -> A,
        A: std::future::Future<Output = Option<Revision>> + Send + 'static,
    {
        let Some(again) = me.upgrade().map(|m| m.again.clone()) else {
            return;
        };
        loop {
            // A question that panics says nothing.
            let found = tokio::spawn(ask()).await.ok().flatten();
            let Some(member) = me.upgrade() else {
                return;
            };
            // Logged when it is news: a first answer, a change, or the
            // answer after a failure.
            if found.is_some() && found != member.get() {
                let revision = found.as_ref().map(ToString::to_string);
                tracing::info!(upstream = %shown, revision = revision.as_deref(), "what the MCP upstream speaks");
            }
            let pause = if found.is_some() { ASK_AGAIN } else { RETRY };
            member.set(found);
            drop(member);
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = again.notified() => {}
            }
            if me.strong_count() == 0 {
                return;
            }
        }
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
        let cases: [(&[u8], Revision); 7] = [
            (
                br#"{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{}}}"#,
                stateless(&["2026-07-28", "2025-11-25"]),
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"x","data":{"supported":["2027-01-01"],"requested":"2026-07-28"}}}"#,
                stateless(&["2027-01-01"]),
            ),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32020,"message":"Header mismatch"}}"#,
                stateless(&[]),
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

    #[tokio::test(start_paused = true)]
    async fn a_member_is_asked_while_kept_again_after_a_while_and_at_once_after_a_failure() {
        let revisions = Revisions::default();
        let address = Address::Tcp("127.0.0.1:1".into());
        let (m, first) = revisions.member(&address);
        assert!(first);
        assert!(!revisions.member(&address).1, "one member, one asker");
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let ask = move || {
            let n = counter.fetch_add(1, Relaxed);
            async move {
                match n {
                    0 => None,
                    _ => Some(Revision::Sessions { version: None }),
                }
            }
        };
        tokio::spawn(Member::keep_asking(Arc::downgrade(&m), ask, "m".into()));
        m.first_answer(Duration::from_secs(5)).await;
        assert_eq!((asked.load(Relaxed), m.get()), (1, None), "it said nothing");
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert!(m.refusal(call).is_none());
        tokio::time::sleep(RETRY + Duration::from_millis(1)).await;
        assert_eq!(asked.load(Relaxed), 2, "asked again a minute later");
        assert!(m.refusal(call).is_some());
        revisions.forget(&address);
        assert!(m.refusal(call).is_none(), "not known after a failure");
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(asked.load(Relaxed), 3, "asked again at once");
        assert!(m.refusal(call).is_some());
        tokio::time::sleep(ASK_AGAIN + Duration::from_millis(1)).await;
        assert_eq!(asked.load(Relaxed), 4, "and after a while");
        // No session keeps it: asked no more, and the next is another.
        drop(m);
        tokio::time::sleep(ASK_AGAIN * 2).await;
        assert_eq!(asked.load(Relaxed), 4);
        assert!(revisions.member(&address).1);
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
        // Not the stateless revision's own error: a client of both eras
        // must still fall back to initialize.
        assert_eq!(v["error"]["code"], -32600);
        let message = v["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("2025-06-18") && message.contains("initialize"),
            "{message}"
        );
        // Not discover, not a session request, not a session-era version
        // in `_meta`, not to another era, not when nothing is known.
        let discover = br#"{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(refusal(Some(&legacy), discover), None);
        let session = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"t"}}"#;
        assert_eq!(refusal(Some(&legacy), session), None);
        let old = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18"}}}"#;
        assert_eq!(refusal(Some(&legacy), old), None);
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
