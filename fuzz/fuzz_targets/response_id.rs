//! The id of a response from the head of its text (an upstream's reply too
//! large to keep) over arbitrary bytes: never panics; an answer is a whole
//! JSON scalar of the kind it says; and where the bytes are a whole
//! response the scanner accepts, an answer is that response's own id token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use npamp_gateway::jsonrpc::{IdKind, Kind, Limits, Scanned, response_id, scan};
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let Some(id) = response_id(data) else {
        return;
    };
    let token = &data[id.token.clone()];
    // Raw: a number past f64's range is still one JSON value.
    let raw: Box<RawValue> = serde_json::from_slice(token).expect("the id is one JSON value");
    assert_eq!(raw.get().as_bytes(), token);
    match id.kind {
        IdKind::String => assert!(serde_json::from_slice::<String>(token).is_ok()),
        IdKind::Number => assert!(matches!(token[0], b'-' | b'0'..=b'9')),
        IdKind::Null => assert_eq!(token, b"null"),
    }
    if let Ok(Scanned::Single(Kind::Success { id: whole } | Kind::Error { id: whole })) =
        scan(data, &Limits::default())
    {
        assert_eq!(&data[whole.token], token);
    }
});
