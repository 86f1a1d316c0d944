//! The id of a response from the head of its text (an upstream's reply too
//! large to keep) over arbitrary bytes: never panics; an answer is a whole
//! JSON scalar of the kind it says; and where the bytes are a whole
//! response the scanner accepts, an answer is that response's own id token.
#![no_main]

use libfuzzer_sys::fuzz_target;
use npamp_gateway::jsonrpc::{IdKind, Kind, Limits, Scanned, response_id, scan};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some(id) = response_id(data) else {
        return;
    };
    let token = &data[id.token.clone()];
    let value: Value = serde_json::from_slice(token).expect("the id is one JSON value");
    match id.kind {
        IdKind::String => assert!(value.is_string()),
        IdKind::Number => assert!(value.is_number()),
        IdKind::Null => assert!(value.is_null()),
    }
    if let Ok(Scanned::Single(Kind::Success { id: whole } | Kind::Error { id: whole })) =
        scan(data, &Limits::default())
    {
        assert_eq!(&data[whole.token], token);
    }
});
