//! An OAuth edge's handling of a client's `Authorization` header over
//! arbitrary bytes: finding the bearer token never panics and returns a
//! part of the input; reading a JWT's header never panics; and the
//! `WWW-Authenticate` challenge made for any reason stays one valid header
//! value (no quote, backslash or line break in a reason breaks out of it).
//! A `--require-scope` rule read from the bytes never panics, and the
//! scopes a message of arbitrary bytes needs are read without panicking.
//! An upstream's refusal carried back (`--forward-authorization`) is read
//! without panicking and comes back whole; its `WWW-Authenticate`, mapped
//! to the edge, stays one valid header value that names the edge's
//! metadata; the edge keeps at most what it may of its metadata. An HTTP
//! request or answer carried for an authorization server's endpoints is
//! read without panicking and crosses again whole; the edge's answer of
//! one keeps to its bounds and learns no path that is not one.

use npamp_gateway::gateway::auth::bearer;
use npamp_gateway::gateway::forward::passthrough::Crossing;
use npamp_gateway::gateway::forward::{
    ForwardSpec, Forwarding, MAX_CHALLENGE, MAX_METADATA, auth_param, decode_challenge,
    encode_challenge, mapping, metadata_uris, with_resource_metadata,
};
use npamp_gateway::gateway::oauth::{
    Lacking, OAuthSpec, ScopeRule, Verdict, challenge, scope_challenge,
};
use npamp_gateway::gateway::scopes::Rules;

/// One input, as the fuzzer hands it over.
pub fn run(data: &[u8]) {
    if let Some(token) = bearer(data) {
        assert!(token.len() < data.len(), "a token is part of its header");
        assert!(!token.is_empty());
        if let Ok(text) = std::str::from_utf8(token) {
            let _ = jsonwebtoken::decode_header(text);
        }
    }
    let spec = OAuthSpec {
        issuer: "https://auth.example".into(),
        audience: "https://edge.example/rpc".into(),
        jwks: None,
        scopes: vec!["rpc:call".into()],
        rules: Vec::new(),
    };
    let reason = String::from_utf8_lossy(data).into_owned();
    if let Ok(rule) = reason.parse::<ScopeRule>() {
        assert_eq!(rule.to_string().parse::<ScopeRule>(), Ok(rule));
    }
    let rules: Vec<ScopeRule> = ["tools/call:delete=admin", "tools/call=tools", "m=s"]
        .iter()
        .filter_map(|r| r.parse().ok())
        .collect();
    if let Ok(rules) = Rules::new(&rules) {
        let need = rules.needs("tools/call", data);
        // Whatever the message, what it needs is what the rules name.
        let named: Vec<&str> = rules.named(need).collect();
        assert!(
            named.iter().all(|s| ["admin", "tools"].contains(s)),
            "{named:?}"
        );
    }
    let lacking = Lacking {
        missing: vec![reason.clone()],
        needed: vec![reason.clone()],
    };
    assert!(hyper::header::HeaderValue::from_str(&scope_challenge(&spec, &lacking)).is_ok());
    for verdict in [
        Verdict::Invalid(reason.clone()),
        Verdict::InsufficientScope(vec![reason]),
        Verdict::Missing,
    ] {
        let (status, value) = challenge(&spec, &verdict).expect("a refusal has a challenge");
        assert!(status == 401 || status == 403);
        assert!(
            hyper::header::HeaderValue::from_str(&value).is_ok(),
            "not one header value: {value:?}"
        );
        assert!(value.contains(
            "resource_metadata=\"https://edge.example/.well-known/oauth-protected-resource/rpc\""
        ));
    }
    refusal(data);
}

/// An upstream's refusal, as it comes back across the pair and as the
/// edge answers it.
fn refusal(data: &[u8]) {
    if let Some((status, map, challenge, metadata)) = decode_challenge(data)
        && challenge.len() <= MAX_CHALLENGE
        && metadata.len() <= MAX_METADATA
    {
        let wire = encode_challenge(status, map, challenge, metadata);
        assert_eq!(
            decode_challenge(&wire),
            Some((status, map, challenge, metadata))
        );
    }
    let edge = "https://edge.example/.well-known/oauth-protected-resource/mcp";
    if let Ok(value) = std::str::from_utf8(data)
        && hyper::header::HeaderValue::from_str(value).is_ok()
    {
        let mapped = with_resource_metadata(value, edge);
        assert!(
            hyper::header::HeaderValue::from_str(&mapped).is_ok(),
            "not one header value: {mapped:?}"
        );
        assert_eq!(
            auth_param(&mapped, "resource_metadata"),
            Some(edge),
            "{mapped:?}"
        );
    }
    let upstream: hyper::Uri = "http://127.0.0.1:9/mcp".parse().expect("a URI");
    for uri in metadata_uris(data, &upstream) {
        assert_eq!(
            uri.authority(),
            upstream.authority(),
            "fetched elsewhere: {uri}"
        );
    }
    let _ = mapping(data, &upstream);
    let f = Forwarding::new(ForwardSpec {
        public_url: "https://edge.example/mcp".into(),
    });
    if f.answer(data).is_some() {
        let kept = f.metadata_at("/.well-known/oauth-protected-resource/mcp");
        assert!(kept.flatten().is_none_or(|m| m.len() <= 2 * MAX_METADATA));
    }
    passed(&f, data);
}

/// An authorization server's answer (or a client's request), as it
/// crosses the pair and as the edge answers it.
fn passed(f: &Forwarding, data: &[u8]) {
    if let Some(c) = Crossing::decode(data) {
        let wire = c.encode().expect("what was read fits again");
        assert_eq!(Crossing::decode(&wire).as_ref(), Some(&c));
    }
    if let Some(p) = f.passed("/.well-known/oauth-authorization-server", data) {
        assert!(p.headers.len() <= data.len());
    }
    // The paths learned are paths: a request for one is carried, a
    // request for one that is not a path is not.
    assert!(!f.passes("//evil.example/x"));
    assert!(!f.passes("/mcp"));
}
