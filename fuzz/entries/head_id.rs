//! The id of a request or response from the head of its text (a message too
//! large to keep) over arbitrary bytes: never panics; an answer is a whole
//! JSON scalar of the kind it says; where the bytes are a whole message the
//! scanner accepts, an answer is that message's own id token; and no head is
//! both a request and a response.

use npamp_gateway::jsonrpc::{
    IdKind, IdToken, Kind, Limits, Scanned, request_id, response_id, scan,
};
use serde_json::value::RawValue;

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    let scanned = scan(data, &Limits::default());
    let response = match &scanned {
        Ok(Scanned::Single(Kind::Success { id } | Kind::Error { id })) => Some(id),
        _ => None,
    };
    let request = match &scanned {
        Ok(Scanned::Single(Kind::Request { id, .. })) => Some(id),
        _ => None,
    };
    for (found, whole) in [(response_id(data), response), (request_id(data), request)] {
        if let Some(id) = found {
            check(data, &id, whole);
        }
    }
    assert!(response_id(data).is_none() || request_id(data).is_none());
}

/// `id` is one JSON scalar of its kind and, where the scanner read the
/// whole message as that kind, its own id token.
fn check(data: &[u8], id: &IdToken, whole: Option<&IdToken>) {
    let token = &data[id.token.clone()];
    // Raw: a number past f64's range is still one JSON value.
    let raw: Box<RawValue> = serde_json::from_slice(token).expect("the id is one JSON value");
    assert_eq!(raw.get().as_bytes(), token);
    match id.kind {
        IdKind::String => assert!(serde_json::from_slice::<String>(token).is_ok()),
        IdKind::Number => assert!(matches!(token[0], b'-' | b'0'..=b'9')),
        IdKind::Null => assert_eq!(token, b"null"),
    }
    if let Some(whole) = whole {
        assert_eq!(&data[whole.token.clone()], token);
    }
}
