//! The JSON-RPC scanner over arbitrary bytes: never panics, agrees with
//! serde_json (`&RawValue`: RFC 8259 + UTF-8) on validity, every kernel gives
//! the same answer, and every range it returns lies inside the input.

use npamp_gateway::jsonrpc::{
    KernelChoice, Kind, Limits, ScanError, Scanned, decode_string, scan, scan_using,
};
use serde_json::value::RawValue;

fn check_kind(data: &[u8], kind: &Kind) {
    match kind {
        Kind::Request { method, id } => {
            assert!(method.raw.end <= data.len() && id.token.end <= data.len());
            let _ = decode_string(&data[method.raw.clone()]).expect("method decodes");
            serde_json::from_slice::<&RawValue>(&data[id.token.clone()]).expect("id token is JSON");
        }
        Kind::Notification { method } => {
            let _ = decode_string(&data[method.raw.clone()]).expect("method decodes");
        }
        Kind::Success { id } | Kind::Error { id } => {
            serde_json::from_slice::<&RawValue>(&data[id.token.clone()]).expect("id token is JSON");
        }
    }
}

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    // Depth beyond the default would be a limit error, not a validity verdict.
    let limits = Limits {
        max_depth: 10_000,
        max_batch: usize::MAX,
        ..Limits::default()
    };
    let ours = scan(data, &limits);
    for k in KernelChoice::available() {
        assert_eq!(
            scan_using(k, data, &limits),
            Some(ours.clone()),
            "kernel {k:?}"
        );
    }
    let oracle_valid = serde_json::from_slice::<&RawValue>(data).is_ok();
    let ours_valid = !matches!(ours, Err(ScanError::Parse { .. }));
    assert_eq!(ours_valid, oracle_valid, "validity disagrees: {ours:?}");
    match &ours {
        Ok(Scanned::Single(kind)) => check_kind(data, kind),
        Ok(Scanned::Batch(elements)) => {
            for el in elements {
                let text = &data[el.range.clone()];
                serde_json::from_slice::<&RawValue>(text).expect("element is JSON");
                if let Ok(kind) = &el.kind {
                    check_kind(data, kind);
                }
            }
        }
        Err(_) => {}
    }
}
