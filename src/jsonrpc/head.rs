//! The `id` of a JSON-RPC request or response from the start of its text
//! alone.
//!
//! A message too large to keep (over `--max-body`) is dropped unread; the
//! request it is, or answers, should still get an answer saying why rather
//! than time out. Most senders write `{"jsonrpc":"2.0","id":…,"method":…` or
//! `…"id":…,"result":…`, so the head of the text shows the id. This reads
//! only what it can be sure of: top-level members whose values are scalars
//! (strings, numbers, literals), up to the `id` and proof of what the object
//! is (a `method` key for a request; `result` or `error` for a response)
//! before or right after it. A nested value before that point, an escaped
//! key, or text that ends too soon: no answer.

use super::{IdKind, IdToken};

/// What the head shows the message to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    Request,
    Response,
}

/// The `id` of the response whose text starts with `head`, when the head
/// shows it as described in the module documentation.
pub fn response_id(head: &[u8]) -> Option<IdToken> {
    shown_id(head).and_then(|(id, shown)| (shown == Shown::Response).then_some(id))
}

/// The `id` of the request whose text starts with `head`, likewise.
pub fn request_id(head: &[u8]) -> Option<IdToken> {
    shown_id(head).and_then(|(id, shown)| (shown == Shown::Request).then_some(id))
}

fn shown_id(head: &[u8]) -> Option<(IdToken, Shown)> {
    let mut c = Cursor { s: head, i: 0 };
    c.ws();
    c.eat(b'{')?;
    let mut id: Option<IdToken> = None;
    let mut shown: Option<Shown> = None;
    loop {
        c.ws();
        let key = c.key()?;
        let this = match key {
            b"result" | b"error" => Some(Shown::Response),
            b"method" => Some(Shown::Request),
            _ => None,
        };
        if this.is_some() {
            if shown.is_some_and(|s| Some(s) != this) {
                // Both a method and a result: not a JSON-RPC message.
                return None;
            }
            shown = this;
        }
        if let (Some(id), Some(shown)) = (&id, shown) {
            return Some((id.clone(), shown));
        }
        c.ws();
        c.eat(b':')?;
        c.ws();
        let start = c.i;
        let kind = c.scalar()?;
        if key == b"id" {
            let kind = kind.id_kind()?;
            id = Some(IdToken {
                token: start..c.i,
                kind,
            });
        }
        c.ws();
        match c.next()? {
            b',' => {}
            // The object ended without both: nothing we can name.
            _ => return None,
        }
        if let (Some(id), Some(shown)) = (&id, shown) {
            return Some((id.clone(), shown));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scalar {
    String,
    Number,
    Null,
    Bool,
}

impl Scalar {
    fn id_kind(self) -> Option<IdKind> {
        match self {
            Scalar::String => Some(IdKind::String),
            Scalar::Number => Some(IdKind::Number),
            Scalar::Null => Some(IdKind::Null),
            Scalar::Bool => None,
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.i += 1;
        Some(b)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// A member name without escapes (an escaped one is not trusted to
    /// mean what it seems); its octets between the quotes.
    fn key(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            match self.next()? {
                b'"' => return Some(&self.s[start..self.i - 1]),
                b'\\' => return None,
                b if b < 0x20 => return None,
                _ => {}
            }
        }
    }

    /// One whole scalar value; `None` for anything else or a value the head
    /// cuts off (what follows it must be in view).
    fn scalar(&mut self) -> Option<Scalar> {
        let start = self.i;
        let kind = match self.peek()? {
            b'"' => {
                self.i += 1;
                loop {
                    match self.next()? {
                        b'"' => break,
                        b'\\' => {
                            self.next()?;
                        }
                        b if b < 0x20 => return None,
                        _ => {}
                    }
                }
                // UTF-8 and its escapes checked by a full parser: this runs
                // only for a message already too large to carry.
                serde_json::from_slice::<String>(&self.s[start..self.i]).ok()?;
                Scalar::String
            }
            b'-' | b'0'..=b'9' => {
                self.number()?;
                Scalar::Number
            }
            b'n' => self.literal(b"null", Scalar::Null)?,
            b't' => self.literal(b"true", Scalar::Bool)?,
            b'f' => self.literal(b"false", Scalar::Bool)?,
            _ => return None,
        };
        // A number or literal the head cut short would look whole: the
        // next octet must be in view and end the value.
        matches!(self.peek()?, b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}').then_some(kind)
    }

    fn literal(&mut self, word: &[u8], kind: Scalar) -> Option<Scalar> {
        let end = self.i.checked_add(word.len())?;
        (self.s.get(self.i..end)? == word).then(|| {
            self.i = end;
            kind
        })
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.first_digit()?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.first_digit()?;
            self.digits();
        }
        Some(())
    }

    fn first_digit(&mut self) -> Option<()> {
        self.next()?.is_ascii_digit().then_some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(head: &str) -> Option<(String, IdKind)> {
        response_id(head.as_bytes()).map(|t| (head[t.token].to_owned(), t.kind))
    }

    #[test]
    fn the_usual_order_shows_the_id() {
        let big = format!(r#"{{"jsonrpc":"2.0","id":7,"result":"{}"#, "x".repeat(100));
        assert_eq!(id(&big), Some(("7".into(), IdKind::Number)));
        assert_eq!(
            id(r#"{ "jsonrpc" : "2.0" , "id" : "a\"b" , "error" : {"code""#),
            Some((r#""a\"b""#.into(), IdKind::String))
        );
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":null,"error":"#),
            Some(("null".into(), IdKind::Null))
        );
        assert_eq!(
            id(r#"{"result":1,"id":-1.5e3,"#),
            Some(("-1.5e3".into(), IdKind::Number))
        );
    }

    #[test]
    fn anything_uncertain_is_no_answer() {
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"#).map(|t| t.token),
            Some(22..23)
        );
        assert_eq!(
            request_id(br#"{"method":"x","jsonrpc":"2.0","id":"q","params":[1,"#).map(|t| t.kind),
            Some(IdKind::String)
        );
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":7,"result":"#), None);
        assert_eq!(
            request_id(br#"{"method":"x","params":{"id":1},"id":2,"#),
            None
        );
        assert_eq!(request_id(br#"{"method":"x","result":1,"id":2,"#), None);
        for head in [
            // Not shown to be a response, or a request.
            r#"{"jsonrpc":"2.0","id":7"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"#,
            r#"{"jsonrpc":"2.0","method":"x","id":7,"result":1,"#,
            r#"{"jsonrpc":"2.0","id":7}"#,
            // The id cut short.
            r#"{"jsonrpc":"2.0","result":1,"id":12"#,
            r#"{"jsonrpc":"2.0","result":1,"id":"ab"#,
            // A nested value first: an "id" inside it is not the id.
            r#"{"result":{"id":3},"id":4,"#,
            r#"{"meta":[1],"id":4,"result":1,"#,
            // An escaped key, a bad id, not an object.
            r#"{"\u0069d":4,"result":1,"#,
            r#"{"id":true,"result":1,"#,
            r#"{"id":01,"result":1,"#,
            r#"{"id":"\x","result":1,"#,
            r#"[{"id":1,"result":1}]"#,
            "",
        ] {
            assert_eq!(id(head), None, "{head}");
        }
        // An id that is not UTF-8.
        assert_eq!(response_id(b"{\"id\":\"\xc4a\",\"result\":1,"), None);
    }

    proptest::proptest! {
        /// Against serde_json: whatever the members and wherever the text is
        /// cut, an answer is the response's own top-level id.
        #[test]
        fn an_answer_is_always_the_true_id(
            before in proptest::collection::vec(("[a-z]{1,6}", scalar()), 0..4),
            nested_first in proptest::bool::ANY,
            id_value in proptest::prop_oneof![
                proptest::num::i64::ANY.prop_map(serde_json::Value::from),
                "[ -~]{0,12}".prop_map(serde_json::Value::from),
                proptest::strategy::Just(serde_json::Value::Null),
            ],
            pretty in proptest::bool::ANY,
            request in proptest::bool::ANY,
            cut in 0.0f64..=1.0,
        ) {
            let mut text = String::from("{");
            let mut members: Vec<String> = Vec::new();
            if nested_first {
                members.push(r#""data":{"id":"nested","result":1}"#.into());
            }
            for (k, v) in &before {
                if k != "id" && k != "method" && k != "result" && k != "error" {
                    members.push(format!("{}:{}", serde_json::Value::from(k.as_str()), v));
                }
            }
            members.push(format!(r#""id":{id_value}"#));
            if request {
                members.push(r#""method":"m""#.into());
                members.push(r#""params":{"id":"inner","blob":"xyz"}"#.into());
            } else {
                members.push(r#""result":{"id":"inner","blob":"xyz"}"#.into());
            }
            type Find = fn(&[u8]) -> Option<IdToken>;
            let (this, other): (Find, Find) =
                if request { (request_id, response_id) } else { (response_id, request_id) };
            let sep = if pretty { " ,\n " } else { "," };
            text.push_str(&members.join(sep));
            text.push('}');
            let full: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
            prop_assert_eq!(&full["id"], &id_value);
            let at = ((text.len() as f64) * cut) as usize;
            let head = &text.as_bytes()[..at.min(text.len())];
            if let Some(t) = this(head) {
                let got: serde_json::Value = serde_json::from_slice(&head[t.token]).expect("a token");
                prop_assert_eq!(got, id_value.clone());
            }
            prop_assert_eq!(other(head), None);
            if !nested_first {
                // The whole text (or any head through the key that shows
                // what it is) shows the id.
                prop_assert!(this(text.as_bytes()).is_some(), "{}", text);
            }
        }
    }

    fn scalar() -> impl Strategy<Value = serde_json::Value> {
        prop_oneof![
            any::<i32>().prop_map(serde_json::Value::from),
            any::<f32>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::Value::from(f64::from(f))),
            "[ -~]{0,8}".prop_map(serde_json::Value::from),
            any::<bool>().prop_map(serde_json::Value::from),
            Just(serde_json::Value::Null),
        ]
    }
}
