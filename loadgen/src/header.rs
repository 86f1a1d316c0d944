//! Request headers a run sends on every HTTP request and WebSocket
//! handshake (`--header 'Name: value'`, a scenario's `headers`, a bearer
//! token from a file), checked once before the run.

use std::path::Path;

/// One request header, as `Name: value`.
#[derive(Clone, PartialEq, Eq)]
pub struct Header {
    pub name: String,
    pub value: String,
}

/// Values are not shown: an `Authorization` header is a secret.
impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: …", self.name)
    }
}

/// Headers the client writes itself (the message's framing, the
/// connection's management): one given would contradict it.
const OWN: [&str; 9] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-connection",
];

impl std::str::FromStr for Header {
    type Err = String;

    /// `Name: value`: a name of token characters, a value of visible
    /// ASCII, spaces and tabs (no line break can slip into a request).
    fn from_str(s: &str) -> Result<Self, String> {
        // Not the whole text in the message: it may be a secret.
        let (name, value) = s.split_once(':').ok_or_else(|| {
            let first = s.split_whitespace().next().unwrap_or_default();
            format!("{first:?}…: expected 'Name: value' (a colon after the name)")
        })?;
        let (name, value) = (name.trim(), value.trim());
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!(
                "{name:?}: a header name is letters, digits and !#$%&'*+-.^_`|~"
            ));
        }
        if !value
            .bytes()
            .all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b))
        {
            return Err(format!(
                "header {name}: its value must be visible ASCII, spaces and tabs"
            ));
        }
        if OWN.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "header {name}: the client sets it itself (it frames the request or manages the connection)"
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            value: value.to_owned(),
        })
    }
}

impl<'de> serde::Deserialize<'de> for Header {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl Header {
    pub fn is(&self, name: &str) -> bool {
        self.name.eq_ignore_ascii_case(name)
    }
}

/// `Authorization: Bearer TOKEN`, the token the file holds (one line,
/// surrounding white space ignored).
pub fn bearer_from(path: &Path) -> Result<Header, String> {
    let bad = |e: &str| format!("--bearer-file {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| bad(&e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(bad("the file is empty"));
    }
    if token.contains(char::is_whitespace) {
        return Err(bad("a token is one word (white space found inside it)"));
    }
    format!("Authorization: Bearer {token}")
        .parse()
        .map_err(|_| bad("a token is visible ASCII"))
}

/// `extra` after `base`, each replacing any of `base` of its name: a
/// scenario's headers, then the command line's.
pub fn merged(base: &[Header], extra: &[Header]) -> Vec<Header> {
    let mut all: Vec<Header> = base
        .iter()
        .filter(|h| !extra.iter().any(|e| e.is(&h.name)))
        .cloned()
        .collect();
    all.extend(extra.iter().cloned());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_and_bad_ones_are_refused() {
        let h: Header = " X-Api-Key :  abc def ".parse().expect("header");
        assert_eq!(
            (h.name.as_str(), h.value.as_str()),
            ("X-Api-Key", "abc def")
        );
        assert_eq!(format!("{h:?}"), "X-Api-Key: …");
        let empty: Header = "X-Empty:".parse().expect("an empty value is a value");
        assert_eq!(empty.value, "");
        for (bad, why) in [
            ("NoColon", "expected"),
            (": v", "name"),
            ("Bad Name: v", "name"),
            ("X: a\rb", "visible ASCII"),
            ("X: é", "visible ASCII"),
            ("Content-Length: 5", "sets it itself"),
            ("host: evil", "sets it itself"),
        ] {
            let e = bad.parse::<Header>().expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn the_command_line_replaces_a_scenario_header_of_its_name() {
        let h = |s: &str| s.parse::<Header>().expect("header");
        let all = merged(
            &[h("Authorization: Bearer a"), h("X-A: 1")],
            &[h("authorization: Bearer b")],
        );
        assert_eq!(all, vec![h("X-A: 1"), h("authorization: Bearer b")]);
    }

    #[test]
    fn a_bearer_file_holds_one_token() {
        let dir = std::env::temp_dir().join(format!("npamp-bearer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("token");
        std::fs::write(&file, "  eyJhbGciOi.x.y \n").expect("write");
        let h = bearer_from(&file).expect("token");
        assert_eq!(h.value, "Bearer eyJhbGciOi.x.y");
        for bad in ["", " \n", "two words\n", "a\nb"] {
            std::fs::write(&file, bad).expect("write");
            assert!(bearer_from(&file).is_err(), "{bad:?}");
        }
        assert!(bearer_from(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
