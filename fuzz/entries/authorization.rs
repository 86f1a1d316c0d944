//! An OAuth edge's handling of a client's `Authorization` header over
//! arbitrary bytes: finding the bearer token never panics and returns a
//! part of the input; reading a JWT's header never panics; and the
//! `WWW-Authenticate` challenge made for any reason stays one valid header
//! value (no quote, backslash or line break in a reason breaks out of it).

use npamp_gateway::gateway::auth::bearer;
use npamp_gateway::gateway::oauth::{OAuthSpec, Verdict, challenge};

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
    };
    let reason = String::from_utf8_lossy(data).into_owned();
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
