//! An OAuth edge's handling of a client's `Authorization` header over
//! arbitrary bytes: finding the bearer token never panics and returns a
//! part of the input; reading a JWT's header never panics; and the
//! `WWW-Authenticate` challenge made for any reason stays one valid header
//! value (no quote, backslash or line break in a reason breaks out of it).
//! A `--require-scope` rule read from the bytes never panics, and the
//! scopes a message of arbitrary bytes needs are read without panicking.

use npamp_gateway::gateway::auth::bearer;
use npamp_gateway::gateway::oauth::{
    Held, Lacking, OAuthSpec, ScopeRule, Verdict, challenge, scope_challenge,
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
        assert!(rules.lacking(Held::ALL, need).is_empty());
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
}
