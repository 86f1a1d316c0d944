//! `Mcp-Param-{Name}` headers (MCP 2026-07-28, Streamable HTTP, "Custom
//! Headers from Tool Parameters"): a server may have a tool parameter
//! mirrored into a header by marking its schema with `x-mcp-header`, and
//! then refuses a `tools/call` without it (400, `HeaderMismatch`). The
//! client's headers do not cross the pair, so the origin derives these as
//! it derives `Mcp-Method` ([`super::mcp_headers`]): from the tools'
//! schemas, learned from the `tools/list` answers it carries from that
//! server, and the call's arguments.
//!
//! A tool not listed through this origin yet gets none; its server's
//! refusal has the client list the tools again and retry ("Client
//! Behavior"), and that listing is learned. An annotation the spec does not
//! allow (off a chain of `properties`, on a type other than string,
//! integer or boolean, not a token, given twice) makes the tool's
//! definition invalid, and it gets none either, as a client excludes it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hyper::header::{HeaderName, HeaderValue};
use serde_json::Value;

use super::mcp_headers::encoded;

/// The most tools whose annotations one origin keeps (all upstreams); past
/// it, what was kept is forgotten and learned again.
const MAX_TOOLS: usize = 4096;
/// The most annotated parameters kept for one tool (the spec sets none; a
/// tool with more gets none, as if its definition were invalid).
const MAX_PARAMS: usize = 32;
/// The longest tool name kept (MCP's limit for a tool's name is 128).
const MAX_NAME: usize = 128;
/// The integers a header may carry: JavaScript's safe range.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// One annotated parameter: its header, and the `properties` keys that
/// lead to it from the schema's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    header: HeaderName,
    path: Box<[String]>,
}

/// The annotated parameters of the tools of each upstream, by (upstream,
/// tool); a tool without any is kept too (an empty list).
#[derive(Default)]
pub struct Cache(Mutex<HashMap<Tool, Arc<[Param]>>>);

/// An upstream and the name of one of its tools.
type Tool = (String, String);

impl Cache {
    /// Learns the tools of a `tools/list` answer (`reply`) of `upstream`.
    pub fn learn(&self, upstream: &str, reply: &[u8]) {
        let Ok(reply) = serde_json::from_slice::<Value>(reply) else {
            return;
        };
        let Some(tools) = reply["result"]["tools"].as_array() else {
            return;
        };
        // Read before the lock is taken.
        let learned: Vec<(Tool, Arc<[Param]>)> = tools
            .iter()
            .filter_map(|tool| {
                let name = tool["name"].as_str().filter(|n| n.len() <= MAX_NAME)?;
                let params = params_of(&tool["inputSchema"]).unwrap_or_default();
                Some(((upstream.to_owned(), name.to_owned()), params.into()))
            })
            .collect();
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (tool, params) in learned {
            if kept.len() >= MAX_TOOLS && !kept.contains_key(&tool) {
                kept.clear();
            }
            kept.insert(tool, params);
        }
    }

    /// The `Mcp-Param-*` headers of a `tools/call` of `upstream` (`body`):
    /// none when its tool's annotations are not known.
    pub fn headers(&self, upstream: &str, body: &[u8]) -> Vec<(HeaderName, HeaderValue)> {
        let Ok(call) = serde_json::from_slice::<Value>(body) else {
            return Vec::new();
        };
        let Some(tool) = call["params"]["name"].as_str() else {
            return Vec::new();
        };
        let params = {
            let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match kept.get(&(upstream.to_owned(), tool.to_owned())) {
                Some(p) => p.clone(),
                None => return Vec::new(),
            }
        };
        let arguments = &call["params"]["arguments"];
        params
            .iter()
            .filter_map(|p| {
                let value = p.path.iter().try_fold(arguments, |v, key| v.get(key))?;
                Some((p.header.clone(), header_value(value)?))
            })
            .collect()
    }
}

/// A parameter's value as its header carries it: a string encoded as
/// `Mcp-Name` is, an integer or a boolean as JSON writes it; anything else
/// (which the schema does not allow) gives none.
fn header_value(value: &Value) -> Option<HeaderValue> {
    match value {
        Value::String(s) => Some(encoded(s)),
        Value::Bool(b) => Some(HeaderValue::from_static(if *b { "true" } else { "false" })),
        // An integer, also as a float with no fraction (`3.0`), in the
        // safe range.
        Value::Number(n) => {
            let int = n.as_i64().or_else(|| {
                let f = n.as_f64()?;
                (f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64).then_some(f as i64)
            })?;
            (int.abs() <= MAX_SAFE_INTEGER).then(|| HeaderValue::from(int))
        }
        _ => None,
    }
}

/// The annotated parameters of a tool's `inputSchema`; `None` when an
/// annotation makes the definition invalid.
fn params_of(schema: &Value) -> Option<Vec<Param>> {
    let mut found = Vec::new();
    reachable(schema, &mut Vec::new(), &mut found)?;
    // Every annotation in the schema must be one reached by `properties`
    // alone.
    if annotations(schema) != found.len() || found.len() > MAX_PARAMS {
        return None;
    }
    let mut seen: Vec<String> = Vec::new();
    for p in &found {
        let name = p.header.as_str().to_owned();
        if seen.contains(&name) {
            return None;
        }
        seen.push(name);
    }
    Some(found)
}

/// Walks `properties` chains from `schema`, collecting the annotated
/// properties; `None` for an annotation the spec does not allow there.
fn reachable(schema: &Value, path: &mut Vec<String>, found: &mut Vec<Param>) -> Option<()> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Some(());
    };
    for (key, property) in properties {
        path.push(key.clone());
        if let Some(name) = property.get("x-mcp-header") {
            let name = name.as_str().filter(|n| !n.is_empty())?;
            let primitive = matches!(
                property.get("type").and_then(Value::as_str),
                Some("string" | "integer" | "boolean")
            );
            // A token (RFC 9110 5.1), which HeaderName checks, lower-cased.
            let header = HeaderName::from_bytes(format!("mcp-param-{name}").as_bytes()).ok();
            let header = header.filter(|_| primitive && name.bytes().all(is_tchar))?;
            found.push(Param {
                header,
                path: path.clone().into_boxed_slice(),
            });
        }
        reachable(property, path, found)?;
        path.pop();
    }
    Some(())
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// How many `x-mcp-header` annotations the schema has, in any subschema
/// (a property named so, or such a member inside `default`, `const` or
/// `examples`, is none).
fn annotations(schema: &Value) -> usize {
    let Some(m) = schema.as_object() else {
        return 0;
    };
    let mut n = usize::from(m.contains_key("x-mcp-header"));
    for (keyword, value) in m {
        n += match keyword.as_str() {
            // Maps of names to subschemas.
            "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                value
                    .as_object()
                    .map_or(0, |m| m.values().map(annotations).sum())
            }
            // Lists of subschemas.
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => value
                .as_array()
                .map_or(0, |a| a.iter().map(annotations).sum()),
            // One subschema (or, for `items`, a list of them).
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "unevaluatedProperties"
            | "unevaluatedItems"
            | "contains"
            | "propertyNames"
            | "not"
            | "if"
            | "then"
            | "else" => match value {
                Value::Array(a) => a.iter().map(annotations).sum(),
                v => annotations(v),
            },
            _ => 0,
        };
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed(tools: Value) -> Cache {
        let cache = Cache::default();
        let reply = json!({"jsonrpc":"2.0","id":1,"result":{"tools":tools}});
        cache.learn("up", reply.to_string().as_bytes());
        cache
    }

    fn call(name: &str, arguments: Value) -> Vec<u8> {
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":name,"arguments":arguments}})
            .to_string()
            .into_bytes()
    }

    fn shown(headers: Vec<(HeaderName, HeaderValue)>) -> Vec<(String, String)> {
        headers
            .into_iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("?").to_owned()))
            .collect()
    }

    #[test]
    fn an_annotated_parameter_is_mirrored_from_the_call() {
        let cache = listed(
            json!([{"name":"execute_sql","inputSchema":{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "options":{"type":"object","properties":{
                "priority":{"type":"integer","x-mcp-header":"Priority"},
                "dry":{"type":"boolean","x-mcp-header":"Dry-Run"}}},
            "query":{"type":"string"}}}}]),
        );
        let body = call(
            "execute_sql",
            json!({"region":"Hello, 世界","options":{"priority":3,"dry":false},"query":"x"}),
        );
        let mut got = shown(cache.headers("up", &body));
        got.sort();
        assert_eq!(
            got,
            [
                ("mcp-param-dry-run".into(), "false".into()),
                ("mcp-param-priority".into(), "3".into()),
                (
                    "mcp-param-region".into(),
                    "=?base64?SGVsbG8sIOS4lueVjA==?=".into()
                ),
            ]
        );
        // A value that is not there: no header.
        let body = call("execute_sql", json!({"query":"x"}));
        assert!(cache.headers("up", &body).is_empty());
        // Another upstream's tool of that name, or a tool not listed: none.
        let body = call("execute_sql", json!({"region":"eu"}));
        assert!(cache.headers("other", &body).is_empty());
        assert!(
            cache
                .headers("up", &call("other", json!({"region":"eu"})))
                .is_empty()
        );
    }

    #[test]
    fn integers_in_the_safe_range_and_odd_schemas() {
        let cache = listed(
            json!([{"name":"t","inputSchema":{"type":"object","properties":{
            "n":{"type":"integer","x-mcp-header":"N"},
            // A property named as the annotation is, and one in a default:
            // neither is an annotation.
            "x-mcp-header":{"type":"string","default":{"x-mcp-header":"no"}}}}}]),
        );
        let header = |n: Value| shown(cache.headers("up", &call("t", json!({ "n": n }))));
        assert_eq!(header(json!(3.0)), [("mcp-param-n".into(), "3".into())]);
        assert_eq!(header(json!(-9007199254740991_i64)).len(), 1);
        assert!(header(json!(9007199254740992_i64)).is_empty());
        assert!(header(json!(1.5)).is_empty());
    }

    #[test]
    fn an_annotation_the_spec_does_not_allow_invalidates_the_tool() {
        for schema in [
            // Under items, not a chain of properties.
            json!({"type":"object","properties":{"list":{"type":"array","items":{
                "type":"string","x-mcp-header":"Item"}},"r":{"type":"string","x-mcp-header":"R"}}}),
            // A number.
            json!({"type":"object","properties":{"n":{"type":"number","x-mcp-header":"N"}}}),
            // Not a token.
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A B"}}}),
            // Twice, whatever the case.
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"X"},
                "b":{"type":"string","x-mcp-header":"x"}}}),
            // Empty.
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":""}}}),
            // Under oneOf.
            json!({"type":"object","oneOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}],
                "properties":{"r":{"type":"string","x-mcp-header":"R"}}}),
        ] {
            let cache = listed(json!([{"name":"t","inputSchema":schema}]));
            let body = call("t", json!({"r":"1","n":1,"a":"1","b":"2"}));
            assert!(cache.headers("up", &body).is_empty(), "{schema}");
        }
    }
}
