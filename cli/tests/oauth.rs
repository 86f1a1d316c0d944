//! The edge as an OAuth 2.1 resource server (issue 53, item 1): an
//! authorization server of the test's own (its RFC 8414 metadata and its
//! JWKS, served over loopback; its keys made here, tokens signed with
//! `jsonwebtoken`) issues access tokens; the edge lets in what it issued
//! for this resource with the scope asked, and refuses the rest with the
//! status and challenge RFC 6750 and RFC 9728 name, before anything is
//! carried.

use crate::support;

use std::convert::Infallible;
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let me = issuer.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (keys, me) = (keys.clone(), me.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
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
                    std::future::ready(Ok::<_, Infallible>(r))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    issuer
}

/// A POST of ECHO with `token`: status, `WWW-Authenticate`, body.
async fn call(url: &str, token: Option<&str>) -> (u16, String, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = hyper::Request::post(url).header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(Full::new(Bytes::from(ECHO))).expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("in time")
        .expect("HTTP");
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (
        status,
        challenge,
        String::from_utf8_lossy(&body).into_owned(),
    )
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
