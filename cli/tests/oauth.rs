//! The edge as an OAuth 2.1 resource server (issue 53, item 1): an
//! authorization server of the test's own (its RFC 8414 metadata and its
//! JWKS, served over loopback; its keys made here, tokens signed with
//! `jsonwebtoken`) issues access tokens; the edge lets in what it issued
//! for this resource with the scope asked, and refuses the rest with the
//! status and challenge RFC 6750 and RFC 9728 name, before anything is
//! carried.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::*;

const AUDIENCE: &str = "https://edge.example/rpc";
const SCOPE: &str = "rpc:call";
const ECHO: &str = r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":[7]}"#;

/// A signing key: its JWK (public) and its private key.
struct Key {
    kid: String,
    jwk: Value,
    private: EncodingKey,
}

impl Key {
    fn new(kid: &str) -> Self {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        // An uncompressed point: 0x04, then x and y.
        let raw = pair.public_key_raw();
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "kid": kid,
            "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
        });
        let private =
            EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).expect("a private key");
        Self {
            kid: kid.into(),
            jwk,
            private,
        }
    }

    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.private).expect("a token")
    }
}

/// The test's authorization server: its metadata and its keys.
async fn authorization_server(keys: Arc<Mutex<Vec<Value>>>) -> String {
    let listener = loopback().await;
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let me = issuer.clone();
    serve_http(listener, move |req| {
        let body = match req.uri().path() {
            "/.well-known/oauth-authorization-server" => {
                json!({"issuer": me, "jwks_uri": format!("{me}/jwks")})
            }
            "/jwks" => json!({"keys": keys.lock().expect("keys").clone()}),
            _ => Value::Null,
        };
        let status = if body.is_null() { 404 } else { 200 };
        let mut r = hyper::Response::new(Full::new(Bytes::from(body.to_string())));
        *r.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
        std::future::ready(r)
    });
    issuer
}

/// A POST of ECHO with `token`: status, `WWW-Authenticate`, body.
async fn call(url: &str, token: Option<&str>) -> (u16, String, String) {
    post(url, token, ECHO).await
}

/// A POST of `body` with `token`: status, `WWW-Authenticate`, body.
async fn post(url: &str, token: Option<&str>, body: &str) -> (u16, String, String) {
    let (status, challenge, _, body) = send(url, token, None, body).await;
    (status, challenge, body)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_lets_in_the_tokens_issued_for_it_and_says_why_not_to_others() {
    let signer = Key::new("k1");
    let keys = Arc::new(Mutex::new(vec![signer.jwk.clone()]));
    let issuer = authorization_server(keys.clone()).await;
    let pair = Pair::start(PairOptions {
        edge_extra: &[
            "--oauth-issuer",
            &issuer,
            "--oauth-audience",
            AUDIENCE,
            "--oauth-scope",
            SCOPE,
        ],
        ingresses: &["http", "ws"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let claims = |over: Value| {
        let mut c = json!({
            "iss": issuer, "aud": AUDIENCE, "sub": "alice", "scope": format!("openid {SCOPE}"),
            "exp": now() + 300, "iat": now(),
        });
        // A null takes the claim out.
        if let (Some(c), Some(o)) = (c.as_object_mut(), over.as_object()) {
            for (k, v) in o {
                match v {
                    Value::Null => c.remove(k),
                    v => c.insert(k.clone(), v.clone()),
                };
            }
        }
        c
    };
    let metadata_url = "https://edge.example/.well-known/oauth-protected-resource/rpc";

    // The resource's metadata, open to all at its path-inserted place.
    let (status, text) = http_get(&format!(
        "{}.well-known/oauth-protected-resource/rpc",
        http.trim_end_matches('/').to_owned() + "/"
    ))
    .await;
    assert_eq!(status, 200, "{text}");
    let m = parse(&text);
    assert_eq!(
        (m["resource"].clone(), m["authorization_servers"][0].clone()),
        (json!(AUDIENCE), json!(issuer))
    );

    // No token: 401, and where to learn how to get one.
    let (status, challenge, _) = call(&http, None).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"{SCOPE}\"")
    );

    // The token issued for it: carried, answered.
    let (status, _, body) = call(&http, Some(&signer.sign(&claims(json!({}))))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse(&body)["result"], json!([7]));

    // What is not valid here: 401 invalid_token, saying which check failed.
    let impostor = Key::new("k1");
    let hmac = jsonwebtoken::encode(
        &Header {
            kid: Some("k1".into()),
            ..Header::new(Algorithm::HS256)
        },
        &claims(json!({})),
        &EncodingKey::from_secret(signer.jwk.to_string().as_bytes()).expect("an HMAC key"),
    )
    .expect("an HS256 token");
    for (token, says) in [
        (
            signer.sign(&claims(json!({"aud": "https://other.example/"}))),
            "aud",
        ),
        (
            signer.sign(&claims(json!({"exp": now() - 3600}))),
            "expired",
        ),
        (
            signer.sign(&claims(json!({"iss": "https://evil.example"}))),
            "iss",
        ),
        (
            signer.sign(&claims(json!({"nbf": now() + 3600}))),
            "not valid yet",
        ),
        (impostor.sign(&claims(json!({}))), "signature"),
        (hmac, "algorithm"),
        ("not.a.jwt".to_owned(), "JWT"),
        (signer.sign(&claims(json!({"sub": null}))), "sub"),
    ] {
        let (status, challenge, body) = call(&http, Some(&token)).await;
        assert_eq!(status, 401, "{says}: {body}");
        assert!(
            challenge.starts_with("Bearer error=\"invalid_token\""),
            "{says}: {challenge}"
        );
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
            "{challenge}"
        );
        assert!(body.contains(says), "{says}: {body}");
        assert!(!body.contains(&token), "the token is not echoed");
    }

    // Without the scope asked: 403 insufficient_scope.
    let (status, challenge, _) = call(
        &http,
        Some(&signer.sign(&claims(json!({"scope": "openid"})))),
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains(SCOPE),
        "{challenge}"
    );

    // Microsoft's `scp`, a string: the scope is there.
    let scp = claims(json!({"scope": null, "scp": format!("openid {SCOPE}")}));
    let (status, _, body) = call(&http, Some(&signer.sign(&scp))).await;
    assert_eq!(status, 200, "scp as a string: {body}");

    // A rotated key: published, then used, without a restart.
    let rotated = Key::new("k2");
    keys.lock().expect("keys").push(rotated.jwk.clone());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, _, body) = call(&http, Some(&rotated.sign(&claims(json!({}))))).await;
    assert_eq!(status, 200, "a rotated key: {body}");

    // The WebSocket upgrade is checked alike.
    let ws = pair.ingress("ws://");
    let mut client = Client::ws_with_token(&ws, &signer.sign(&claims(json!({})))).await;
    client.send(ECHO).await;
    assert_eq!(client.recv().await.expect("reply")["result"], json!([7]));
    let refused = tokio_tungstenite::connect_async(ws.as_str()).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("401")),
        "{:?}",
        refused.err()
    );
}

/// `--require-scope` (issue 53, item 2): a method, and a tool of
/// `tools/call`, need the scopes configured for them; a token without one
/// gets 403 and a challenge naming every scope the request needs, before
/// anything is carried, on HTTP (one request or a batch) and WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_and_tools_need_the_scopes_configured_for_them() {
    let signer = Key::new("k1");
    let issuer = authorization_server(Arc::new(Mutex::new(vec![signer.jwk.clone()]))).await;
    let pair = Pair::start(PairOptions {
        edge_extra: &[
            "--oauth-issuer",
            &issuer,
            "--oauth-audience",
            AUDIENCE,
            "--oauth-scope",
            SCOPE,
            "--require-scope",
            "transfer=funds:write",
            "--require-scope",
            "tools/call:delete_repo=repo:admin",
        ],
        ingresses: &["http", "ws"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let token = |scope: &str| {
        signer.sign(&json!({
            "iss": issuer, "aud": AUDIENCE, "sub": "alice", "scope": scope,
            "exp": now() + 300,
        }))
    };
    let (plain, admin) = (token(SCOPE), token(&format!("{SCOPE} repo:admin")));
    let tool = |name: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"{name}"}}}}"#)
    };
    let transfer = r#"{"jsonrpc":"2.0","id":4,"method":"transfer","params":[1]}"#;

    // What no rule names, and a tool no rule names: the base scope does.
    for body in [ECHO, &tool("list_repos")] {
        let (status, _, text) = post(&http, Some(&plain), body).await;
        assert_eq!(status, 200, "{body}: {text}");
        assert!(parse(&text).get("result").is_some(), "{text}");
    }
    // A method, and one tool, that need more: 403, the scopes to ask for.
    for (body, scope, id) in [
        (transfer.to_owned(), "funds:write", 4),
        (tool("delete_repo"), "repo:admin", 3),
        (tool("delete\\u005frepo"), "repo:admin", 3),
    ] {
        let (status, challenge, text) = post(&http, Some(&plain), &body).await;
        assert_eq!(status, 403, "{body}: {text}");
        assert_eq!(
            challenge,
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{SCOPE} {scope}\", resource_metadata=\"https://edge.example/.well-known/oauth-protected-resource/rpc\""
            )
        );
        let e = parse(&text);
        assert_eq!(
            (e["id"].clone(), e["error"]["code"].clone()),
            (json!(id), json!(-32012))
        );
        assert!(
            e["error"]["data"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains(scope)),
            "{text}"
        );
    }
    // With the scope: carried.
    let (status, _, text) = post(&http, Some(&admin), &tool("delete_repo")).await;
    assert_eq!(status, 200, "{text}");
    // A batch with one request that needs what the token lacks: all of it
    // refused, nothing carried, the scopes of every member named.
    let batch = format!("[{ECHO},{transfer},{}]", tool("delete_repo"));
    let (status, challenge, _) = post(&http, Some(&plain), &batch).await;
    assert_eq!(status, 403);
    assert!(
        challenge.contains(&format!("scope=\"{SCOPE} funds:write repo:admin\"")),
        "{challenge}"
    );

    // WebSocket: each message is checked; one that needs more is answered
    // with the error, and the session goes on.
    let mut ws = Client::ws_with_token(&pair.ingress("ws://"), &plain).await;
    ws.send(&tool("delete_repo")).await;
    let e = ws.recv().await.expect("reply");
    assert_eq!(
        (e["id"].clone(), e["error"]["code"].clone()),
        (json!(3), json!(-32012))
    );
    ws.send(ECHO).await;
    assert_eq!(ws.recv().await.expect("reply")["result"], json!([7]));
}

/// The OAuth settings are reloaded as the token file is (SIGHUP): a rule
/// added to the configuration file applies from then on, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_what_scopes_are_required() {
    let signer = Key::new("k1");
    let issuer = authorization_server(Arc::new(Mutex::new(vec![signer.jwk.clone()]))).await;
    let dir = tempdir::Dir::new();
    let config = dir.0.join("edge.toml");
    let toml = |rules: &str| {
        format!("oauth-issuer = \"{issuer}\"\noauth-audience = \"{AUDIENCE}\"\n{rules}")
    };
    std::fs::write(&config, toml("")).expect("config");
    let config_arg = config.to_string_lossy().into_owned();
    let pair = Pair::start(PairOptions {
        edge_extra: &["--config", &config_arg],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let token = signer.sign(&json!({
        "iss": issuer, "aud": AUDIENCE, "sub": "alice", "scope": "rpc:call",
        "exp": now() + 300,
    }));
    let transfer = r#"{"jsonrpc":"2.0","id":4,"method":"transfer","params":[1]}"#;
    assert_eq!(post(&http, Some(&token), transfer).await.0, 200);

    std::fs::write(
        &config,
        toml("require-scope = [\"transfer=funds:write\"]\n"),
    )
    .expect("config");
    hup(&pair.edge);
    let mut status = 200;
    for _ in 0..100 {
        status = post(&http, Some(&token), transfer).await.0;
        if status != 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 403, "the rule added applies after the reload");
    let (status, _, body) = call(&http, Some(&token)).await;
    assert_eq!(status, 200, "what the rule does not name goes on: {body}");
}

/// An upstream that is itself an OAuth resource server: it answers only
/// `Bearer good` (and refuses `Bearer narrow` for want of a scope), serves
/// its metadata at its well-known path, and records the `Authorization`
/// each request came with.
async fn resource_server(seen: Arc<Mutex<Vec<Option<String>>>>) -> String {
    let listener = loopback().await;
    let me = format!("http://{}", listener.local_addr().expect("addr"));
    let url = format!("{me}/rpc");
    serve_http(listener, move |req| {
        let (seen, me) = (seen.clone(), me.clone());
        async move { resource_answer(req, &me, &seen).await }
    });
    url
}

async fn resource_answer(
    req: hyper::Request<hyper::body::Incoming>,
    me: &str,
    seen: &Mutex<Vec<Option<String>>>,
) -> hyper::Response<Full<Bytes>> {
    let metadata_url = format!("{me}/.well-known/oauth-protected-resource/rpc");
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let respond = |status: u16, challenge: Option<String>, body: String| {
        let mut r = hyper::Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
        if let Some(c) = challenge {
            r.headers_mut()
                .insert("www-authenticate", c.parse().expect("header"));
        }
        r
    };
    if req.uri().path() == "/.well-known/oauth-protected-resource/rpc" {
        let doc = json!({
            "resource": format!("{me}/rpc"),
            "authorization_servers": ["https://as.example"],
            "scopes_supported": ["rpc"],
        });
        return respond(200, None, doc.to_string());
    }
    let body = req.into_body().collect().await.expect("body").to_bytes();
    seen.lock().expect("seen").push(auth.clone());
    match auth.as_deref() {
        Some("Bearer good") => {
            let request: Value = serde_json::from_slice(&body).expect("JSON");
            let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": "ok"});
            respond(200, None, reply.to_string())
        }
        Some("Bearer narrow") => respond(
            403,
            Some(format!(
                "Bearer error=\"insufficient_scope\", scope=\"rpc admin\", resource_metadata=\"{metadata_url}\""
            )),
            "{\"error\":\"insufficient_scope\"}".into(),
        ),
        _ => respond(
            401,
            Some(format!(
                "Bearer resource_metadata=\"{metadata_url}\", scope=\"rpc\""
            )),
            "{\"error\":\"invalid_token\"}".into(),
        ),
    }
}

/// `--forward-authorization` (issue 53, item 3): the client's
/// `Authorization` crosses the pair and is presented to an upstream that
/// is the resource server; its 401 and 403 come back as that status, the
/// challenge's `resource_metadata` naming the edge, where the upstream's
/// metadata is served with the edge's public URL as its `resource`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upstreams_oauth_crosses_the_pair_with_forward_authorization() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = resource_server(seen.clone()).await;
    let public = "https://edge.example/rpc";
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--upstream", &upstream],
        edge_extra: &["--forward-authorization", "--public-url", public],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let edge_metadata = "https://edge.example/.well-known/oauth-protected-resource/rpc";

    // Before any request, a client may look for the metadata: the edge
    // asks the upstream for it (a request without a credential, refused).
    let base = http.trim_end_matches('/');
    let metadata_path = format!("{base}/.well-known/oauth-protected-resource/rpc");
    let (status, text) = http_get(&metadata_path).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(parse(&text)["resource"], json!(public));
    // Another well-known document is not the edge's to give (an
    // authorization server's is carried: `oauth_legacy.rs`).
    let (status, _) = http_get(&format!("{base}/.well-known/security.txt")).await;
    assert_eq!(status, 404);

    // No credential: the upstream's 401, its challenge naming the edge.
    let (status, challenge, body) = call(&http, None).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{edge_metadata}\", scope=\"rpc\"")
    );
    let e = parse(&body);
    assert_eq!(
        (e["id"].clone(), e["error"]["code"].clone()),
        (json!(7), json!(-32012))
    );

    // The metadata, served at the edge, names the edge.
    let (status, text) = http_get(&metadata_path).await;
    assert_eq!(status, 200, "{text}");
    let m = parse(&text);
    assert_eq!(m["resource"], json!(public));
    assert_eq!(m["authorization_servers"][0], json!("https://as.example"));

    // A token without the scope: 403 and the scopes to ask for.
    let (status, challenge, _) = call(&http, Some("narrow")).await;
    assert_eq!(status, 403);
    assert!(
        challenge.contains("error=\"insufficient_scope\"")
            && challenge.contains("scope=\"rpc admin\"")
            && challenge.contains(edge_metadata),
        "{challenge}"
    );

    // The right token: presented as the client sent it, answered.
    let (status, _, body) = call(&http, Some("good")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse(&body)["result"], json!("ok"));
    assert_eq!(
        *seen.lock().expect("seen"),
        [
            None,
            None,
            Some("Bearer narrow".into()),
            Some("Bearer good".into())
        ]
    );

    // Without the option, no credential crosses: the upstream sees none.
    let plain = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--upstream", &upstream],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let (status, challenge, body) = call(&plain.ingress("http://"), Some("good")).await;
    assert_eq!((status, challenge.as_str()), (502, ""), "{body}");
    assert_eq!(seen.lock().expect("seen").last(), Some(&None));
}

/// No token is ever shown (issue 53): not in the edge's or the origin's
/// log (info and above), not in a metric, not in any answer, whether the
/// edge checks tokens itself or forwards them to the upstream; refused,
/// accepted or lacking a scope alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_ever_shown() {
    let signer = Key::new("k1");
    let issuer = authorization_server(Arc::new(Mutex::new(vec![signer.jwk.clone()]))).await;
    let logs = tempdir::Dir::new();
    let dir = |name: &str| {
        let d = logs.0.join(name);
        std::fs::create_dir_all(&d).expect("a log directory");
        d
    };
    let checking = Pair::start(PairOptions {
        edge_extra: &[
            "--oauth-issuer",
            &issuer,
            "--oauth-audience",
            AUDIENCE,
            "--require-scope",
            "echo=rpc:echo",
        ],
        ingresses: &["http"],
        logs: Some(&dir("checking")),
        ..PairOptions::default()
    })
    .await;
    let token = |over: Value| {
        let mut c = json!({
            "iss": issuer, "aud": AUDIENCE, "sub": "alice", "scope": "rpc:echo", "exp": now() + 300,
        });
        if let (Some(c), Some(o)) = (c.as_object_mut(), over.as_object()) {
            c.extend(o.clone());
        }
        signer.sign(&c)
    };
    let tokens = [
        token(json!({})),
        token(json!({"scope": "other"})),
        token(json!({"aud": "https://elsewhere.example/"})),
        token(json!({"exp": now() - 3600})),
        Key::new("k1")
            .sign(&json!({"iss": issuer, "aud": AUDIENCE, "sub": "x", "exp": now() + 300})),
        "not-a-jwt-but-a-secret-0123456789".to_owned(),
    ];
    let http = checking.ingress("http://");
    let mut answers = String::new();
    for t in &tokens {
        let (status, challenge, body) = call(&http, Some(t)).await;
        answers.push_str(&format!("{status} {challenge} {body}\n"));
    }
    let (_, metrics) = http_get(&checking.edge.printed("metrics ")).await;
    drop(checking);

    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = resource_server(seen).await;
    let forwarding = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--upstream", &upstream],
        edge_extra: &[
            "--forward-authorization",
            "--public-url",
            "https://edge.example/rpc",
        ],
        ingresses: &["http"],
        logs: Some(&dir("forwarding")),
        ..PairOptions::default()
    })
    .await;
    let forwarded = ["good", "narrow", "forwarded-secret-0123456789"];
    for t in forwarded {
        let (status, challenge, body) = call(&forwarding.ingress("http://"), Some(t)).await;
        answers.push_str(&format!("{status} {challenge} {body}\n"));
    }
    let (_, forwarding_metrics) = http_get(&forwarding.edge.printed("metrics ")).await;
    drop(forwarding);

    let mut shown = vec![
        ("answers", answers),
        ("metrics", metrics),
        ("forwarding metrics", forwarding_metrics),
    ];
    for name in ["checking", "forwarding"] {
        for entry in std::fs::read_dir(logs.0.join(name)).expect("logs") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("a log");
            shown.push(("log", format!("{}: {text}", path.display())));
        }
    }
    assert_eq!(shown.iter().filter(|(what, _)| *what == "log").count(), 4);
    // A JWT's signature, or the whole of a token that is not one, and the
    // forwarded headers whole.
    let secrets: Vec<&str> = tokens
        .iter()
        .map(|t| t.rsplit('.').next().unwrap_or(t))
        .chain([
            "forwarded-secret-0123456789",
            "Bearer good",
            "Bearer narrow",
        ])
        .collect();
    for (what, text) in &shown {
        for secret in &secrets {
            assert!(!text.contains(secret), "{what} shows a token: {text}");
        }
    }
}

/// What an upstream saw: each message's method, and its `Authorization`.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An MCP server over Streamable HTTP that is its own OAuth resource
/// server: `Bearer good` opens sessions and calls tools, `Bearer narrow`
/// is refused `tools/call` for want of a scope, anything else gets 401. It
/// records the `Authorization` of each POST, by method.
async fn mcp_resource_server(seen: Seen) -> String {
    let listener = loopback().await;
    let me = format!("http://{}", listener.local_addr().expect("addr"));
    let url = format!("{me}/mcp");
    serve_http(listener, move |req| {
        let (seen, me) = (seen.clone(), me.clone());
        async move { mcp_answer(req, &me, &seen).await }
    });
    url
}

async fn mcp_answer(
    req: hyper::Request<hyper::body::Incoming>,
    me: &str,
    seen: &Seen,
) -> hyper::Response<Full<Bytes>> {
    let respond = response;
    let metadata = format!("{me}/.well-known/oauth-protected-resource/mcp");
    if req.uri().path() == "/.well-known/oauth-protected-resource/mcp" {
        let doc = json!({"resource": format!("{me}/mcp"), "authorization_servers": ["https://as.example"]});
        return respond(
            200,
            &[("content-type", "application/json".into())],
            doc.to_string(),
        );
    }
    if req.method() != hyper::Method::POST {
        return respond(405, &[], String::new());
    }
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let msg: Value = serde_json::from_slice(&body).unwrap_or_default();
    let method = msg["method"].as_str().unwrap_or_default().to_owned();
    seen.lock()
        .expect("seen")
        .push((method.clone(), auth.clone()));
    let json = ("content-type", "application/json".to_owned());
    match (auth.as_deref(), method.as_str()) {
        (Some("Bearer good"), "initialize") => {
            let r = json!({"jsonrpc":"2.0","id":msg["id"],"result":{
                "protocolVersion":"2025-06-18","capabilities":{"tools":{}},
                "serverInfo":{"name":"rs","version":"1"}}});
            respond(
                200,
                &[json, ("mcp-session-id", "s-1".into())],
                r.to_string(),
            )
        }
        (Some("Bearer good" | "Bearer narrow"), m) if m.starts_with("notifications/") => {
            respond(202, &[], String::new())
        }
        (Some("Bearer good"), "tools/call") => {
            let r = json!({"jsonrpc":"2.0","id":msg["id"],"result":{"content":[{"type":"text","text":"done"}]}});
            respond(200, &[json], r.to_string())
        }
        (Some("Bearer narrow"), _) => respond(
            403,
            &[(
                "www-authenticate",
                format!(
                    "Bearer error=\"insufficient_scope\", scope=\"mcp:tools\", resource_metadata=\"{metadata}\""
                ),
            )],
            String::new(),
        ),
        _ => respond(
            401,
            &[(
                "www-authenticate",
                format!("Bearer resource_metadata=\"{metadata}\""),
            )],
            String::new(),
        ),
    }
}

/// A POST to an MCP edge: status, `WWW-Authenticate`, `Mcp-Session-Id`,
/// body.
async fn mcp_post(
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &Value,
) -> (u16, String, Option<String>, String) {
    send(url, token, session, &body.to_string()).await
}

/// A POST of `body` (JSON, accepting an event stream too) with `token` and
/// `session`: status, `WWW-Authenticate`, `Mcp-Session-Id`, body.
pub(crate) async fn send(
    url: &str,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> (u16, String, Option<String>, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("in time")
        .expect("HTTP");
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (status, challenge, session) = (
        resp.status().as_u16(),
        header("www-authenticate").unwrap_or_default(),
        header("mcp-session-id"),
    );
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        challenge,
        session,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

/// The body of an answer: JSON, or the data of an event stream's one event.
fn reply_of(body: &str) -> Value {
    let data = body
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(body);
    parse(data.trim())
}

/// `--forward-authorization` with MCP sessions (`--protocol mcp`): an
/// `initialize` the upstream refuses gets its 401 and opens no session;
/// with a token it takes, the session opens and its tool calls carry the
/// client's credential; a 403 on one call comes back as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_oauth_crosses_the_pair() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let upstream = mcp_resource_server(seen.clone()).await;
    let public = "https://edge.example/mcp";
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--protocol", "mcp", "--upstream", &upstream],
        edge_extra: &[
            "--protocol",
            "mcp",
            "--forward-authorization",
            "--public-url",
            public,
        ],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let initialize = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let edge_metadata = "https://edge.example/.well-known/oauth-protected-resource/mcp";

    // No token: the server's 401, naming the edge's metadata; no session.
    let (status, challenge, session, body) = mcp_post(&http, None, None, &initialize).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{edge_metadata}\"")
    );
    assert_eq!(session, None);
    assert_eq!(reply_of(&body)["error"]["code"], json!(-32012), "{body}");
    let base = http.trim_end_matches('/');
    let (status, text) =
        http_get(&format!("{base}/.well-known/oauth-protected-resource/mcp")).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(parse(&text)["resource"], json!(public));

    // With the token: a session, and tools called with it.
    let (status, _, session, body) = mcp_post(&http, Some("good"), None, &initialize).await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("a session");
    assert_eq!(
        reply_of(&body)["result"]["serverInfo"]["name"],
        json!("rs"),
        "{body}"
    );
    let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
    let (status, _, _, _) = mcp_post(&http, Some("good"), Some(&session), &initialized).await;
    assert_eq!(status, 202);
    let call =
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{}}});
    let (status, _, _, body) = mcp_post(&http, Some("good"), Some(&session), &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        reply_of(&body)["result"]["content"][0]["text"],
        json!("done"),
        "{body}"
    );

    // A token the server refuses for the tool: its 403 and scope.
    let call =
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{}}});
    let (status, challenge, _, body) = mcp_post(&http, Some("narrow"), Some(&session), &call).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        challenge.contains("error=\"insufficient_scope\"") && challenge.contains(edge_metadata),
        "{challenge}"
    );

    // The session's GET and DELETE need the credential its POSTs had:
    // another finds no session (a forwarding edge checks no token, so the
    // session id alone would do otherwise).
    for (method, token, status) in [
        ("GET", "someone-else", 404),
        ("DELETE", "someone-else", 404),
        ("DELETE", "good", 200),
    ] {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let req = hyper::Request::builder()
            .method(method)
            .uri(&http)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("authorization", format!("Bearer {token}"))
            .body(Full::new(Bytes::new()))
            .expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(10), client.request(req))
            .await
            .expect("in time")
            .expect("HTTP");
        assert_eq!(resp.status().as_u16(), status, "{method} with {token}");
    }

    let seen = seen.lock().expect("seen").clone();
    let by = |method: &str| -> Vec<Option<String>> {
        seen.iter()
            .filter(|(m, _)| m == method)
            .map(|(_, a)| a.clone())
            .collect()
    };
    assert_eq!(by("initialize"), [None, Some("Bearer good".into())]);
    assert_eq!(
        by("tools/call"),
        [Some("Bearer good".into()), Some("Bearer narrow".into())]
    );
}

/// A WebSocket's token is checked at its upgrade; the connection outlives
/// it, its messages do not: once the token has run out (its `exp` and the
/// 60 s of skew), each message is answered -32012, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_is_served_no_longer_than_its_token() {
    let signer = Key::new("k1");
    let issuer = authorization_server(Arc::new(Mutex::new(vec![signer.jwk.clone()]))).await;
    let pair = Pair::start(PairOptions {
        edge_extra: &["--oauth-issuer", &issuer, "--oauth-audience", AUDIENCE],
        ingresses: &["ws"],
        ..PairOptions::default()
    })
    .await;
    // Expired 56 s ago: within the skew for 4 s more.
    let token = signer.sign(&json!({
        "iss": issuer, "aud": AUDIENCE, "sub": "alice", "exp": now() - 56,
    }));
    let mut ws = Client::ws_with_token(&pair.ingress("ws://"), &token).await;
    ws.send(ECHO).await;
    assert_eq!(ws.recv().await.expect("reply")["result"], json!([7]));
    tokio::time::sleep(Duration::from_secs(6)).await;
    ws.send(ECHO).await;
    let e = ws.recv().await.expect("reply");
    assert_eq!(
        (e["id"].clone(), e["error"]["code"].clone()),
        (json!(7), json!(-32012)),
        "{e}"
    );
    assert!(e.to_string().contains("expired"), "{e}");
}

/// A request refused for its credentials is answered before its body is
/// read, so its connection cannot carry another request: the answer says
/// `Connection: close`, and a client does not send its next request on a
/// connection about to close (the MCP SDK's did, and lost its metadata
/// request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_before_the_body_closes_the_connection_and_says_so() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let signer = Key::new("k1");
    let issuer = authorization_server(Arc::new(Mutex::new(vec![signer.jwk.clone()]))).await;
    let pair = Pair::start(PairOptions {
        edge_extra: &["--oauth-issuer", &issuer, "--oauth-audience", AUDIENCE],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let addr = pair.ingress("http://");
    let addr = addr.trim_start_matches("http://").trim_end_matches('/');
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "POST / HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{ECHO}",
        ECHO.len()
    );
    tcp.write_all(request.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 401"), "{text}");
    assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
}

/// The same for what is refused from a request's head (415, 405, 501):
/// with a body the answer says `Connection: close`; without one the
/// connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_the_head_closes_the_connection_when_a_body_is_left() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pair = Pair::start(PairOptions {
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let addr = pair.ingress("http://");
    let addr = addr.trim_start_matches("http://").trim_end_matches('/');
    for (head, status, closes) in [
        ("POST / HTTP/1.1\r\ncontent-type: text/plain", "415", true),
        (
            "PUT / HTTP/1.1\r\ncontent-type: application/json",
            "405",
            true,
        ),
        (
            "POST / HTTP/1.1\r\ntransfer-encoding: gzip, chunked",
            "501",
            true,
        ),
        ("PUT / HTTP/1.1\r\ncontent-length: 0", "405", false),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let body = if head.contains("content-length: 0") {
            String::new()
        } else if head.contains("chunked") {
            format!("{:x}\r\n{ECHO}\r\n0\r\n\r\n", ECHO.len())
        } else {
            format!("content-length: {}\r\n\r\n{ECHO}", ECHO.len())
        };
        let sep = if head.contains("content-length") || head.contains("chunked") {
            "\r\n\r\n"
        } else {
            "\r\n"
        };
        let request = format!("{head}\r\nhost: {addr}{sep}{body}");
        tcp.write_all(request.as_bytes()).await.expect("write");
        let mut got = vec![0; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut got))
            .await
            .expect("an answer in time")
            .expect("read");
        let text = String::from_utf8_lossy(&got[..n]).to_ascii_lowercase();
        assert!(
            text.starts_with(&format!("http/1.1 {status}")),
            "{head}: {text}"
        );
        assert_eq!(
            text.contains("\r\nconnection: close\r\n"),
            closes,
            "{head}: {text}"
        );
    }
}
