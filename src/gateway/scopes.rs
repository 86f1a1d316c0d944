//! Authorization by method and by tool (`--require-scope
//! METHOD[:NAME]=SCOPE`, on an OAuth edge): the scopes a JSON-RPC method
//! needs beside `--oauth-scope`, and for the MCP methods that name what
//! they use (`tools/call` a tool, `prompts/get` a prompt, `resources/read`
//! a resource's URI) the scopes one name of them needs.
//!
//! A token's scopes are read once, when it is checked, into a bit set over
//! the scopes the rules name ([`Held`]); a message then costs a hash lookup
//! of its method, and only for a method a rule names with a name, a read of
//! `params.name` (or `params.uri`). A message whose name cannot be read for
//! certain (a member given twice) needs every scope its method's rules
//! name. A message without a method (a response) needs none.

use std::collections::HashMap;

/// What [`is_scope_token`] asks, said to the user.
pub const SCOPE_TOKEN: &str =
    "a scope is one token of printable ASCII without spaces, '\"' or '\\'";

/// Whether `s` is a scope (RFC 6749 §3.3): printable ASCII but for space,
/// '"' and '\\', so it can stand in a challenge as it is.
pub fn is_scope_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
}

/// One `--require-scope`: `method` (and, for a method that names what it
/// uses, one `name` of it) needs `scope`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeRule {
    pub method: String,
    pub name: Option<String>,
    pub scope: String,
}

impl std::str::FromStr for ScopeRule {
    type Err = String;

    /// `METHOD=SCOPE`, or `METHOD:NAME=SCOPE` for `tools/call`,
    /// `prompts/get` and `resources/read` (the NAME of a resource is its
    /// URI, colons and `=` and all: the scope is what follows the last
    /// `=`, so a scope with `=` cannot be named here). A method with a
    /// colon of its own, another than those three, is the method whole.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{s:?}: {why}: expected METHOD[:NAME]=SCOPE");
        let (target, scope) = s.rsplit_once('=').ok_or_else(|| bad("no '='"))?;
        let (method, name) = match target.split_once(':') {
            Some((m, n)) if super::mcp_headers::named(m) => (m, Some(n)),
            _ => (target, None),
        };
        if method.is_empty() {
            return Err(bad("no method"));
        }
        if name.is_some_and(str::is_empty) {
            return Err(bad("an empty name"));
        }
        if !is_scope_token(scope) {
            return Err(bad(SCOPE_TOKEN));
        }
        Ok(Self {
            method: method.to_owned(),
            name: name.map(str::to_owned),
            scope: scope.to_owned(),
        })
    }
}

impl std::fmt::Display for ScopeRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{}:{name}={}", self.method, self.scope),
            None => write!(f, "{}={}", self.method, self.scope),
        }
    }
}

/// The scopes of the rules a token holds: one bit per scope the rules
/// name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held(u64);

impl Held {
    /// Every scope: a client let in otherwise than by a token (a client
    /// certificate), or an edge without rules.
    pub const ALL: Held = Held(u64::MAX);
}

/// The most distinct scopes the rules may name.
pub const MAX_SCOPES: usize = 64;

/// The rules, compiled.
#[derive(Debug, Default)]
pub struct Rules {
    /// The distinct scopes the rules name, bit `i` of a [`Held`] for
    /// `scopes[i]`.
    scopes: Vec<String>,
    /// By method: the bits any call needs, and by name the bits a call of
    /// that name needs besides.
    by_method: HashMap<String, Needs>,
}

#[derive(Debug, Default)]
struct Needs {
    always: u64,
    by_name: HashMap<String, u64>,
    /// Every bit of `by_name`: what a call whose name cannot be read needs.
    any_name: u64,
}

impl Rules {
    /// The rules compiled; refused over [`MAX_SCOPES`] distinct scopes.
    pub fn new(rules: &[ScopeRule]) -> Result<Self, String> {
        let mut me = Self::default();
        for rule in rules {
            let bit = match me.scopes.iter().position(|s| *s == rule.scope) {
                Some(i) => 1u64 << i,
                None if me.scopes.len() == MAX_SCOPES => {
                    return Err(format!(
                        "the rules name more than {MAX_SCOPES} distinct scopes"
                    ));
                }
                None => {
                    me.scopes.push(rule.scope.clone());
                    1u64 << (me.scopes.len() - 1)
                }
            };
            let needs = me.by_method.entry(rule.method.clone()).or_default();
            match &rule.name {
                Some(name) => {
                    *needs.by_name.entry(name.clone()).or_default() |= bit;
                    needs.any_name |= bit;
                }
                None => needs.always |= bit,
            }
        }
        Ok(me)
    }

    /// The bits of every scope the rules name.
    pub fn all(&self) -> u64 {
        match self.scopes.len() {
            MAX_SCOPES => u64::MAX,
            n => (1u64 << n) - 1,
        }
    }

    /// Whether there are none: nothing to look up per message.
    pub fn is_empty(&self) -> bool {
        self.by_method.is_empty()
    }

    /// Which of the rules' scopes a token holding `held` (its `scope` or
    /// `scp` claim, split) has.
    /// Without rules, [`Held::ALL`]: nothing is looked up per message.
    pub fn held<'a>(&self, held: impl IntoIterator<Item = &'a str> + Clone) -> Held {
        if self.is_empty() {
            return Held::ALL;
        }
        let mut bits = 0;
        for (i, scope) in self.scopes.iter().enumerate() {
            if held.clone().into_iter().any(|h| h == scope) {
                bits |= 1 << i;
            }
        }
        Held(bits)
    }

    /// The bits a message of `method` (its text `message`) needs.
    pub fn needs(&self, method: &str, message: &[u8]) -> u64 {
        let Some(needs) = self.by_method.get(method) else {
            return 0;
        };
        if needs.by_name.is_empty() {
            return needs.always;
        }
        let by_name = match super::mcp_headers::name_of(message) {
            Ok(Some(name)) => needs.by_name.get(&*name).copied().unwrap_or(0),
            Ok(None) => 0,
            Err(_) => needs.any_name,
        };
        needs.always | by_name
    }

    /// The scopes of `need` that `held` lacks, in the order the rules
    /// first name them; empty when it lacks none.
    pub fn lacking(&self, held: Held, need: u64) -> Vec<&str> {
        let lacks = need & !held.0;
        if lacks == 0 {
            return Vec::new();
        }
        (0..self.scopes.len())
            .filter(|i| lacks & (1 << i) != 0)
            .map(|i| self.scopes[i].as_str())
            .collect()
    }

    /// The scopes `need` names, all of them (for the challenge: the
    /// scopes the request needs, held or not).
    pub fn named(&self, need: u64) -> impl Iterator<Item = &str> {
        (0..self.scopes.len())
            .filter(move |i| need & (1 << i) != 0)
            .map(|i| self.scopes[i].as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &[&str]) -> Rules {
        let parsed: Vec<ScopeRule> = text
            .iter()
            .map(|t| t.parse().unwrap_or_else(|e| panic!("{t}: {e}")))
            .collect();
        Rules::new(&parsed).expect("rules")
    }

    #[test]
    fn rules_parse_with_a_name_only_where_a_method_names_what_it_uses() {
        let r: ScopeRule = "tools/call:delete_repo=repo:admin".parse().expect("rule");
        assert_eq!(r.method, "tools/call");
        assert_eq!(r.name.as_deref(), Some("delete_repo"));
        assert_eq!(r.scope, "repo:admin");
        let r: ScopeRule = "resources/read:file:///etc/x=files:read"
            .parse()
            .expect("rule");
        assert_eq!(r.name.as_deref(), Some("file:///etc/x"));
        assert_eq!(r.to_string(), "resources/read:file:///etc/x=files:read");
        // A URI with `=` in it: the scope is what follows the last one.
        let r: ScopeRule = "resources/read:https://x/api?id=7=files:read"
            .parse()
            .expect("rule");
        assert_eq!(r.name.as_deref(), Some("https://x/api?id=7"));
        assert_eq!(r.scope, "files:read");
        // Another method keeps its colon.
        let r: ScopeRule = "admin:reset=ops".parse().expect("rule");
        assert_eq!((r.method.as_str(), r.name), ("admin:reset", None));
        for bad in [
            "eth_call",
            "=scope",
            "tools/call:=s",
            "eth_call=",
            "eth_call=two words",
            "eth_call=quo\"te",
            "eth_call=back\\slash",
            "eth_call=caf\u{e9}",
        ] {
            let e = bad.parse::<ScopeRule>().unwrap_err();
            assert!(e.contains("METHOD[:NAME]=SCOPE"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_message_needs_its_methods_scopes_and_its_names() {
        let r = rules(&[
            "eth_sendRawTransaction=chain:write",
            "tools/call=tools",
            "tools/call:delete_repo=repo:admin",
            "tools/call:delete_repo=audit",
        ]);
        let call = |tool: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}"}}}}"#
            )
        };
        let tools_only = r.held(["tools", "other"]);
        let need = r.needs("tools/call", call("echo").as_bytes());
        assert!(r.lacking(tools_only, need).is_empty());
        let need = r.needs("tools/call", call("delete_repo").as_bytes());
        assert_eq!(r.lacking(tools_only, need), ["repo:admin", "audit"]);
        assert_eq!(
            r.named(need).collect::<Vec<_>>(),
            ["tools", "repo:admin", "audit"]
        );
        let admin = r.held(["tools", "repo:admin", "audit"]);
        assert!(r.lacking(admin, need).is_empty());
        // An escaped name is the same name.
        let escaped = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete\u005frepo"}}"#;
        assert_eq!(
            r.lacking(tools_only, r.needs("tools/call", escaped)).len(),
            2
        );
        // A name given twice cannot be read for certain: every name's scope.
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"delete_repo"}}"#;
        assert_eq!(
            r.lacking(tools_only, r.needs("tools/call", twice)),
            ["repo:admin", "audit"]
        );
        // Methods no rule names need nothing.
        assert_eq!(r.needs("eth_call", b"{}"), 0);
        let need = r.needs("eth_sendRawTransaction", b"{}");
        assert_eq!(r.lacking(Held(0), need), ["chain:write"]);
        assert!(r.lacking(Held::ALL, need).is_empty());
    }

    #[test]
    fn at_most_64_distinct_scopes() {
        let many: Vec<ScopeRule> = (0..=MAX_SCOPES)
            .map(|i| format!("m{i}=s{i}").parse().expect("rule"))
            .collect();
        assert!(Rules::new(&many[..MAX_SCOPES]).is_ok());
        let e = Rules::new(&many).unwrap_err();
        assert!(e.contains("64"), "{e}");
    }
}
