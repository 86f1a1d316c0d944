//! Which request an MCP server's notification belongs to, where the server
//! gives no request a stream of its own (stdio, a WebSocket). MCP
//! 2026-07-28 (stdio, "Receiving Messages") has such a server write
//! "notifications that relate to an in-flight request" on its one channel,
//! named by what the request gave:
//!
//! - `notifications/progress` by the request's `_meta.progressToken`
//!   ("Progress");
//! - a subscription's notifications by
//!   `_meta["io.modelcontextprotocol/subscriptionId"]`, the id of its
//!   `subscriptions/listen` request ("Subscriptions");
//! - `notifications/message` by nothing: it is request-scoped, and sent
//!   only for a request whose `_meta` asked for a log level ("Logging"),
//!   so it belongs to the one request that asked, when exactly one waits.
//!
//! A notification that names nothing waiting goes as one of its own, as
//! before. A request whose deadline passes unanswered is cancelled at the
//! server (`notifications/cancelled`), which then sends nothing more for it
//! ("Cancellation"), so that nothing names a later request with its id.
//!
//! Each request of such a session is read once more as it arrives (a
//! request of the stateless revision always has `_meta`): what it may be
//! named by, and nothing else, is kept, a progress token of at most
//! [`MAX_TOKEN`] octets.

use bytes::Bytes;
use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

use crate::jsonrpc::IdKind;
use crate::relay::{Named, Names};

/// The request that opens a subscription (MCP 2026-07-28, "Subscriptions").
pub const LISTEN: &str = "subscriptions/listen";

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    params: Option<Params>,
}

/// The longest progress token a request is named by; a longer one names
/// nothing (it would be kept for as long as the request waits).
pub const MAX_TOKEN: usize = 256;

#[derive(Deserialize)]
struct Params {
    /// A progress notification's token.
    #[serde(rename = "progressToken", default)]
    progress_token: Option<Value>,
    #[serde(rename = "_meta", default)]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    /// A request's progress token.
    #[serde(rename = "progressToken", default)]
    progress_token: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/subscriptionId", default)]
    subscription_id: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", default)]
    log_level: Option<IgnoredAny>,
}

/// What a notification of `method` may name a request by, read from the
/// notification or the request (`None`: it cannot be read, or has none).
fn params(text: &[u8]) -> Option<Params> {
    serde_json::from_slice::<Message<'_>>(text).ok()?.params
}

/// A progress token written one way whatever way the server wrote it
/// (escapes, spacing): the JSON value, compact. A token is a string or an
/// integer; anything else names nothing.
fn token(value: Value) -> Option<Bytes> {
    (value.is_string() || value.is_i64() || value.is_u64())
        .then(|| serde_json::to_vec(&value).ok())
        .flatten()
        .filter(|t| t.len() <= MAX_TOKEN)
        .map(Bytes::from)
}

/// What of an MCP request its server's notifications may name it by
/// ([`crate::relay::Exchange::set_names`]).
pub fn names_of(request: &[u8]) -> Names {
    let has = |s: &[u8]| request.windows(s.len()).any(|w| w == s);
    if !has(b"_meta") && !has(LISTEN.as_bytes()) && !has(b"initialize") {
        return Names::default();
    }
    let Ok(message) = serde_json::from_slice::<Message<'_>>(request) else {
        return Names::default();
    };
    let method = message.method.as_deref();
    let meta = message.params.and_then(|p| p.meta);
    Names {
        progress: meta
            .as_ref()
            .and_then(|m| m.progress_token.clone())
            .and_then(token),
        logs: meta.is_some_and(|m| m.log_level.is_some()),
        subscription: method == Some(LISTEN),
        // MCP: "The initialize request MUST NOT be cancelled by clients".
        uncancellable: method == Some("initialize"),
    }
}

/// How [`given_up`]'s text starts, and where its method is in it.
const CANCELLED_HEAD: &[u8] =
    br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"#;
const CANCELLED_AT: std::ops::Range<usize> = 27..50;

/// MCP's `notifications/cancelled` for the request with this id (its
/// token, as it came).
pub fn given_up(id: &[u8]) -> Bytes {
    let mut text = CANCELLED_HEAD.to_vec();
    text.extend_from_slice(id);
    text.extend_from_slice(
        br#","reason":"the gateway gave the request up: its time there ended"}}"#,
    );
    text.into()
}

/// `subscriptions/listen` as a request that lasts `lifetime`
/// (`--listen-timeout`), ended by [`listen_ended`].
pub fn lasting(lifetime: std::time::Duration) -> crate::relay::Lasting {
    crate::relay::Lasting {
        method: LISTEN,
        lifetime,
        ended: listen_ended,
        given_up: |id| (given_up(id), CANCELLED_AT),
    }
}

/// The answer that ends the subscription the request with this id (its
/// token) opened, gracefully (MCP 2026-07-28, Subscriptions, "Graceful
/// Closure"): its `complete` result, naming the subscription as every
/// message on its stream does. The text, and where the id is in it.
pub fn listen_ended(id: &[u8]) -> (Bytes, std::ops::Range<usize>) {
    let head = br#"{"jsonrpc":"2.0","id":"#;
    let mut text = head.to_vec();
    text.extend_from_slice(id);
    text.extend_from_slice(
        br#","result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":"#,
    );
    text.extend_from_slice(id);
    text.extend_from_slice(b"}}}");
    (text.into(), head.len()..head.len() + id.len())
}

/// The request an MCP server's notification of `method` (`text`) names,
/// if it names one.
pub fn named_by(method: &str, text: &[u8]) -> Option<Named> {
    if method == "notifications/message" {
        return Some(Named::Log);
    }
    let params = params(text)?;
    if method == "notifications/progress" {
        return params.progress_token.and_then(token).map(Named::Progress);
    }
    let id = params.meta?.subscription_id?;
    let kind = match &id {
        Value::String(_) => IdKind::String,
        Value::Number(_) => IdKind::Number,
        _ => return None,
    };
    Some(Named::Subscription(
        serde_json::to_vec(&id).ok()?.into(),
        kind,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subscription_ends_with_its_complete_result_naming_it() {
        for id in [&b"7"[..], b"\"listen-1\""] {
            let (text, at) = listen_ended(id);
            assert_eq!(&text[at], id);
            let v: Value = serde_json::from_slice(&text).expect("JSON");
            let want: Value = serde_json::from_slice(id).expect("an id");
            assert_eq!(v["id"], want);
            assert_eq!(v["result"]["resultType"], "complete");
            assert_eq!(
                v["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                want
            );
            let (text, at) = (lasting(std::time::Duration::from_secs(1)).given_up)(id);
            assert_eq!(&text[at], b"notifications/cancelled");
            let cancel: Value = serde_json::from_slice(&text).expect("JSON");
            assert_eq!(cancel["params"]["requestId"], want);
        }
    }

    #[test]
    fn a_request_is_named_by_its_progress_token_and_its_log_level() {
        let request = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":"p\u0031","io.modelcontextprotocol/logLevel":"info"}}}"#;
        let names = names_of(request);
        assert_eq!(names.progress.as_deref(), Some(&b"\"p1\""[..]));
        assert!(names.logs);
        let number =
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"progressToken":7}}}"#;
        assert_eq!(names_of(number).progress.as_deref(), Some(&b"7"[..]));
        assert!(!names_of(number).logs);
    }

    #[test]
    fn a_listen_is_named_by_its_subscription_and_a_long_token_names_nothing() {
        let listen = br#"{"jsonrpc":"2.0","id":"l","method":"subscriptions/listen","params":{}}"#;
        assert!(names_of(listen).subscription);
        let initialize = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        assert!(names_of(initialize).uncancellable);
        let long = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"_meta":{{"progressToken":"{}"}}}}}}"#,
            "t".repeat(MAX_TOKEN)
        );
        assert_eq!(names_of(long.as_bytes()), Names::default());
    }

    #[test]
    fn a_request_given_up_is_cancelled_by_its_id() {
        let text = given_up(br#""a\"b""#);
        let v: Value = serde_json::from_slice(&text).expect("JSON");
        assert_eq!(v["method"], "notifications/cancelled");
        assert_eq!(v["params"]["requestId"], "a\"b");
    }

    #[test]
    fn a_request_without_names_has_none() {
        for request in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"progressToken":{"a":1}}}}"#,
            br#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":"#,
        ] {
            assert_eq!(names_of(request), Names::default());
        }
    }

    #[test]
    fn a_notification_names_its_request() {
        let progress = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken": "p1","progress":1}}"#;
        assert_eq!(
            named_by("notifications/progress", progress),
            Some(Named::Progress(Bytes::from_static(b"\"p1\"")))
        );
        let update = br#"{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a","_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}"#;
        assert_eq!(
            named_by("notifications/resources/updated", update),
            Some(Named::Subscription(
                Bytes::from_static(b"\"listen-1\""),
                IdKind::String
            ))
        );
        let numbered = br#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}"#;
        assert_eq!(
            named_by("notifications/subscriptions/acknowledged", numbered),
            Some(Named::Subscription(
                Bytes::from_static(b"1"),
                IdKind::Number
            ))
        );
        let log = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        assert_eq!(named_by("notifications/message", log), Some(Named::Log));
        let plain = br#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        assert_eq!(named_by("notifications/tools/list_changed", plain), None);
        let unnamed =
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#;
        assert_eq!(named_by("notifications/progress", unnamed), None);
    }
}
