//! The JSON-RPC scanner against serde_json as the oracle.
//!
//! 1. Generated JSON-RPC objects — random member order, whitespace, escapes
//!    (`\/`, `\uXXXX`, surrogate pairs), unicode, nested params with their own
//!    `method`/`id` members — are classified exactly as a serde_json parse says,
//!    and the method and id the scanner points at are the ones serde_json sees.
//! 2. On mutated texts, the scanner and `serde_json::from_slice::<&RawValue>`
//!    (pure RFC 8259 + UTF-8 validation) agree on validity.
//! 3. Every kernel gives the same answer.

use npamp_gateway::jsonrpc::{
    IdKind, KernelChoice, Kind, Limits, ScanError, Scanned, decode_string, scan, scan_using,
};
use proptest::prelude::*;
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON value tree we render ourselves, so we control whitespace and escapes.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Int(i64),
    Float(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_/.]{0,12}",
        "\\PC{0,16}",
        Just("method".to_string()),
        Just("id".to_string()),
        Just("tools/call".to_string()),
        Just("quote\" back\\ slash/ ctl\u{1}\u{1f}".to_string()),
    ]
}

fn arb_json() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        any::<i64>().prop_map(J::Int),
        prop_oneof![
            Just("0.5".to_string()),
            Just("-1.25e-7".to_string()),
            Just("3E+2".to_string()),
            Just("1e300".to_string()),
            Just("-0".to_string()),
        ]
        .prop_map(J::Float),
        arb_string().prop_map(J::Str),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(J::Arr),
            proptest::collection::vec((arb_string(), inner), 0..6).prop_map(J::Obj),
        ]
    })
}

/// Rendering choices drawn per text: whitespace and how to escape.
#[derive(Debug, Clone)]
struct Style {
    ws: Vec<&'static str>,
    escape_mode: u8,
}

fn arb_style() -> impl Strategy<Value = Style> {
    (
        proptest::collection::vec(
            prop_oneof![Just(""), Just(" "), Just("\n  "), Just("\t"), Just("\r\n")],
            1..5,
        ),
        0u8..4,
    )
        .prop_map(|(ws, escape_mode)| Style { ws, escape_mode })
}

struct Renderer<'a> {
    style: &'a Style,
    n: usize,
    out: String,
}

impl Renderer<'_> {
    fn ws(&mut self) {
        self.n += 1;
        let w = self.style.ws[self.n % self.style.ws.len()];
        self.out.push_str(w);
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for (i, c) in s.chars().enumerate() {
            let fancy = self.style.escape_mode != 0 && (i + self.n).is_multiple_of(3);
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '/' if fancy => self.out.push_str("\\/"),
                c if (c as u32) < 0x20 => self.out.push_str(&format!("\\u{:04x}", c as u32)),
                c if fancy && self.style.escape_mode >= 2 => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        if self.style.escape_mode == 3 {
                            self.out.push_str(&format!("\\u{u:04X}"));
                        } else {
                            self.out.push_str(&format!("\\u{u:04x}"));
                        }
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn value(&mut self, j: &J) {
        match j {
            J::Null => self.out.push_str("null"),
            J::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            J::Int(i) => self.out.push_str(&i.to_string()),
            J::Float(f) => self.out.push_str(f),
            J::Str(s) => self.string(s),
            J::Arr(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.ws();
                    self.value(item);
                    self.ws();
                }
                self.out.push(']');
            }
            J::Obj(members) => {
                self.out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.ws();
                    self.string(k);
                    self.ws();
                    self.out.push(':');
                    self.ws();
                    self.value(v);
                    self.ws();
                }
                self.out.push('}');
            }
        }
    }
}

fn render(j: &J, style: &Style) -> String {
    let mut r = Renderer {
        style,
        n: 0,
        out: String::new(),
    };
    r.ws();
    r.value(j);
    r.ws();
    r.out
}

/// A JSON-RPC-shaped object: a random subset of the members, in random
/// order, with values that are usually right and sometimes wrong.
fn arb_message() -> impl Strategy<Value = J> {
    let version = prop_oneof![
        8 => Just(J::Str("2.0".into())),
        1 => Just(J::Str("1.0".into())),
        1 => Just(J::Float("2.0".into())),
    ];
    let method = prop_oneof![
        8 => arb_string().prop_map(J::Str),
        1 => any::<i64>().prop_map(J::Int),
    ];
    let id = prop_oneof![
        3 => any::<i64>().prop_map(J::Int),
        3 => arb_string().prop_map(J::Str),
        1 => Just(J::Null),
        1 => Just(J::Float("1.5".into())),
        1 => Just(J::Bool(true)),
    ];
    let params = prop_oneof![
        4 => arb_json().prop_map(|j| J::Arr(vec![j])),
        4 => arb_json().prop_map(|j| J::Obj(vec![("method".into(), j.clone()), ("id".into(), j)])),
        1 => Just(J::Int(3)),
    ];
    let error = prop_oneof![
        4 => (any::<i32>(), arb_string(), arb_json()).prop_map(|(c, m, d)| J::Obj(vec![
            ("code".into(), J::Int(c.into())),
            ("message".into(), J::Str(m)),
            ("data".into(), d),
        ])),
        1 => Just(J::Str("boom".into())),
        1 => Just(J::Obj(vec![("code".into(), J::Float("1.5".into())), ("message".into(), J::Str("x".into()))])),
    ];
    (
        proptest::option::weighted(0.95, version),
        proptest::option::weighted(0.6, method),
        proptest::option::weighted(0.7, id),
        proptest::option::weighted(0.5, params),
        proptest::option::weighted(0.3, arb_json()),
        proptest::option::weighted(0.2, error),
        proptest::option::weighted(0.2, (arb_string(), arb_json())),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(v, m, id, p, r, e, extra, rot)| {
            let mut members = Vec::new();
            let names = ["jsonrpc", "method", "id", "params", "result", "error"];
            for (name, value) in names.iter().zip([v, m, id, p, r, e]) {
                if let Some(value) = value {
                    members.push((name.to_string(), value));
                }
            }
            if let Some((k, v)) = extra
                && !names.contains(&k.as_str())
            {
                members.push((k, v));
            }
            if !members.is_empty() {
                let k = rot.index(members.len());
                members.rotate_left(k);
            }
            J::Obj(members)
        })
}

/// What serde_json says the object is.
#[derive(Debug, PartialEq)]
enum Expected {
    Request { method: String, id: Value },
    Notification { method: String },
    Success { id: Value },
    Error { id: Value },
    Invalid,
}

fn is_integer(v: &Value) -> bool {
    v.is_i64() || v.is_u64()
}

fn expected(v: &Value) -> Expected {
    let Some(o) = v.as_object() else {
        return Expected::Invalid;
    };
    if o.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Expected::Invalid;
    }
    // `null` params are taken (as LSP clients send them).
    if let Some(p) = o.get("params")
        && !(p.is_array() || p.is_object() || p.is_null())
    {
        return Expected::Invalid;
    }
    let id_ok = |id: &Value| id.is_string() || id.is_number() || id.is_null();
    if let Some(id) = o.get("id")
        && !id_ok(id)
    {
        return Expected::Invalid;
    }
    if let Some(e) = o.get("error") {
        let good = e.as_object().is_some_and(|e| {
            e.get("code").is_some_and(is_integer) && e.get("message").is_some_and(Value::is_string)
        });
        if !good {
            return Expected::Invalid;
        }
    }
    let id = o.get("id").cloned();
    match (
        o.get("method"),
        o.contains_key("result"),
        o.contains_key("error"),
    ) {
        (Some(Value::String(m)), false, false) => match id {
            Some(id) => Expected::Request {
                method: m.clone(),
                id,
            },
            None => Expected::Notification { method: m.clone() },
        },
        (None, true, false) => id.map_or(Expected::Invalid, |id| Expected::Success { id }),
        (None, false, true) => id.map_or(Expected::Invalid, |id| Expected::Error { id }),
        _ => Expected::Invalid,
    }
}

fn scanned_as_expected(text: &str) -> Result<Expected, ScanError> {
    let limits = Limits::default();
    let mut results = KernelChoice::available()
        .into_iter()
        .map(|k| scan_using(k, text.as_bytes(), &limits).expect("kernel"));
    let first = results.next().expect("one kernel");
    for other in results {
        assert_eq!(first, other, "kernels disagree on {text:?}");
    }
    let token = |r: &std::ops::Range<usize>| -> Value {
        serde_json::from_str(&text[r.clone()]).expect("id token parses alone")
    };
    let method = |r: &std::ops::Range<usize>| {
        decode_string(&text.as_bytes()[r.clone()]).expect("method decodes")
    };
    match first {
        Ok(Scanned::Single(Kind::Request { method: m, id })) => {
            let v = token(&id.token);
            assert_eq!(id.kind == IdKind::String, v.is_string());
            Ok(Expected::Request {
                method: method(&m.raw),
                id: v,
            })
        }
        Ok(Scanned::Single(Kind::Notification { method: m })) => Ok(Expected::Notification {
            method: method(&m.raw),
        }),
        Ok(Scanned::Single(Kind::Success { id })) => Ok(Expected::Success {
            id: token(&id.token),
        }),
        Ok(Scanned::Single(Kind::Error { id })) => Ok(Expected::Error {
            id: token(&id.token),
        }),
        Ok(Scanned::Batch(_)) => panic!("an object scanned as a batch"),
        Err(ScanError::Invalid(_)) => Ok(Expected::Invalid),
        Err(e) => Err(e),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn classification_matches_serde_json(m in arb_message(), style in arb_style()) {
        let text = render(&m, &style);
        let v: Value = serde_json::from_str(&text).expect("rendered JSON is valid");
        let got = scanned_as_expected(&text);
        prop_assert_eq!(got, Ok(expected(&v)), "text: {}", text);
    }

    #[test]
    fn validity_matches_serde_json_on_mutations(
        m in arb_message(),
        style in arb_style(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), prop_oneof![
            Just(b'"'), Just(b'\\'), Just(b','), Just(b':'), Just(b'{'), Just(b'}'), Just(b'['),
            Just(b']'), Just(b' '), Just(b'0'), Just(b'-'), Just(b'e'), Just(b'.'), Just(b'u'),
            Just(0x01), Just(0x80), Just(0xC3), Just(0xFF), any::<u8>()]), 1..4),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = render(&m, &style).into_bytes();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len() + 1));
        }
        let oracle = serde_json::from_slice::<&RawValue>(&bytes).is_ok();
        let ours = !matches!(scan(&bytes, &Limits::default()), Err(ScanError::Parse { .. }));
        prop_assert_eq!(ours, oracle, "text: {:?}", String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn batches_split_into_untouched_elements(ms in proptest::collection::vec(arb_message(), 1..8), style in arb_style()) {
        let parts: Vec<String> = ms.iter().map(|m| render(m, &style)).collect();
        let text = format!("[{}]", parts.join(","));
        let limits = Limits::default();
        let Ok(Scanned::Batch(elements)) = scan(text.as_bytes(), &limits) else {
            return Err(TestCaseError::fail(format!("not a batch: {text}")));
        };
        prop_assert_eq!(elements.len(), parts.len());
        for (el, part) in elements.iter().zip(&parts) {
            prop_assert_eq!(&text[el.range.clone()], part.trim());
            let v: Value = serde_json::from_str(part).expect("valid");
            prop_assert_eq!(el.kind.is_ok(), expected(&v) != Expected::Invalid);
        }
    }
}

/// RFC 8259 puts no range on numbers; neither does the scanner (nor the
/// `RawValue` oracle). Lone surrogate escapes are grammatical too.
#[test]
fn grammar_edge_cases_agree_with_raw_value() {
    for text in [
        r#"{"jsonrpc":"2.0","method":"m","params":[1e400,-1E-400,123456789012345678901234567890]}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":["\ud800","\udc00x"]}"#,
    ] {
        assert!(serde_json::from_str::<&RawValue>(text).is_ok());
        assert!(matches!(
            scan(text.as_bytes(), &Limits::default()),
            Ok(Scanned::Single(Kind::Notification { .. }))
        ));
    }
}
