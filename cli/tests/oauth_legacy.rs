//! An MCP server of the 2025-03-26 layout behind a pair that forwards
//! credentials (issue 53): the server is its own authorization server at
//! its own origin, without protected-resource metadata, and a client looks
//! for its metadata and endpoints at the origin of the URL it called, the
//! edge's. The edge carries those requests to the origin gateway, which
//! makes them to its upstream; URLs of the upstream in the answers are
//! mapped to the edge's public origin.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use support::*;

const PUBLIC: &str = "https://edge.example/mcp";
/// `Basic` of the client the server registers, `c1:s1`.
const CLIENT_BASIC: &str = "Basic YzE6czE=";

/// What the server saw: method, path, `Authorization`, whether a cookie.
type Seen = Arc<Mutex<Vec<(String, String, Option<String>, bool)>>>;

/// The server: its authorization endpoints under `/oauth/` named by its
/// metadata (`with_metadata`), else at the root where a client falls back
/// to them; its JSON-RPC endpoint answers `Bearer issued` alone, anything
/// else a bare `401 Bearer`; `/private` is a page of its own.
async fn legacy_server(with_metadata: bool, seen: Seen) -> String {
    let listener = loopback().await;
    let me = format!("http://{}", listener.local_addr().expect("addr"));
    let url = format!("{me}/mcp");
    serve_http(listener, move |req| {
        let (seen, me) = (seen.clone(), me.clone());
        async move { legacy_answer(req, &me, with_metadata, &seen).await }
    });
    url
}

async fn legacy_answer(
    req: hyper::Request<hyper::body::Incoming>,
    me: &str,
    with_metadata: bool,
    seen: &Seen,
) -> hyper::Response<Full<Bytes>> {
    let respond = response;
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let auth = header("authorization");
    let cookie = req.headers().contains_key("cookie");
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    seen.lock()
        .expect("seen")
        .push((method.clone(), path.clone(), auth.clone(), cookie));
    let json = ("content-type", "application/json".to_owned());
    let prefix = if with_metadata { "/oauth" } else { "" };
    let endpoint = |name: &str| format!("{prefix}/{name}");
    match (method.as_str(), path.as_str()) {
        ("GET", "/.well-known/oauth-authorization-server") if with_metadata => {
            let doc = json!({
                "issuer": me,
                "authorization_endpoint": format!("{me}/oauth/authorize"),
                "token_endpoint": format!("{me}/oauth/token"),
                "registration_endpoint": format!("{me}/oauth/register"),
                "jwks_uri": "https://keys.example/jwks",
                "response_types_supported": ["code"],
            });
            respond(200, &[json], doc.to_string())
        }
        ("POST", p) if p == endpoint("register") => {
            let asked: Value = serde_json::from_str(&body).unwrap_or_default();
            let r = json!({"client_id": "c1", "client_secret": "s1", "redirect_uris": asked["redirect_uris"]});
            respond(201, &[json], r.to_string())
        }
        ("GET", p) if p == endpoint("authorize") => {
            let param = |name: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .unwrap_or_default()
                    .to_owned()
            };
            let back = format!("{}?code=c&state={}", param("redirect_uri"), param("state"));
            respond(
                302,
                &[("location", back), ("set-cookie", "login=1".into())],
                String::new(),
            )
        }
        ("POST", p) if p == endpoint("token") => {
            if auth.as_deref() != Some(CLIENT_BASIC) {
                let e = r#"{"error":"invalid_client"}"#;
                return respond(401, &[json, ("www-authenticate", "Basic".into())], e.into());
            }
            if !body.contains("grant_type=authorization_code") || !body.contains("code=c") {
                return respond(400, &[json], r#"{"error":"invalid_grant"}"#.into());
            }
            let r = r#"{"access_token":"issued","token_type":"Bearer","expires_in":3600}"#;
            respond(200, &[json, ("cache-control", "no-store".into())], r.into())
        }
        ("GET", "/private") => respond(200, &[], "the server's own page".into()),
        ("POST", "/mcp") if auth.as_deref() == Some("Bearer issued") => {
            let msg: Value = serde_json::from_str(&body).unwrap_or_default();
            let r = match msg["method"].as_str() {
                Some("initialize") => json!({"jsonrpc":"2.0","id":msg["id"],"result":{
                    "protocolVersion":"2025-03-26","capabilities":{},
                    "serverInfo":{"name":"legacy","version":"1"}}}),
                _ => json!({"jsonrpc":"2.0","id":msg["id"],"result":"ok"}),
            };
            respond(200, &[json], r.to_string())
        }
        ("POST", "/mcp") => respond(401, &[("www-authenticate", "Bearer".into())], String::new()),
        _ => respond(404, &[], String::new()),
    }
}

/// One request of a client: status, headers, body.
async fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, hyper::HeaderMap, String) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut req = hyper::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("in time")
        .expect("HTTP");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn header<'a>(headers: &'a hyper::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// The authorization code flow a client of the 2025-03-26 layout runs at
/// `base` (the edge's origin), with the endpoints at `prefix`: register,
/// authorize, token; the access token it ends with.
async fn code_flow(base: &str, prefix: &str) -> String {
    let registration = r#"{"client_name":"t","redirect_uris":["http://127.0.0.1:1/cb"]}"#;
    let (status, _, body) = request(
        "POST",
        &format!("{base}{prefix}/register"),
        &[("content-type", "application/json")],
        registration,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(parse(&body)["client_id"], json!("c1"));

    let (status, headers, _) = request(
        "GET",
        &format!(
            "{base}{prefix}/authorize?response_type=code&client_id=c1&redirect_uri=http://127.0.0.1:1/cb&state=s9"
        ),
        &[],
        "",
    )
    .await;
    assert_eq!(status, 302);
    // The client's own callback, not the upstream's: left as it is.
    assert_eq!(
        header(&headers, "location"),
        "http://127.0.0.1:1/cb?code=c&state=s9"
    );
    assert!(!headers.contains_key("set-cookie"), "no cookie crosses");

    let form = [("content-type", "application/x-www-form-urlencoded")];
    let grant = "grant_type=authorization_code&code=c&redirect_uri=http://127.0.0.1:1/cb";
    let (status, headers, body) =
        request("POST", &format!("{base}{prefix}/token"), &form, grant).await;
    assert_eq!(
        status, 401,
        "the client's credentials are the server's to ask: {body}"
    );
    assert_eq!(header(&headers, "www-authenticate"), "Basic");
    let with_basic = [form[0], ("authorization", CLIENT_BASIC)];
    let (status, headers, body) =
        request("POST", &format!("{base}{prefix}/token"), &with_basic, grant).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "cache-control"), "no-store");
    assert_eq!(header(&headers, "content-type"), "application/json");
    parse(&body)["access_token"]
        .as_str()
        .expect("a token")
        .to_owned()
}

/// With the server's metadata (`--protocol mcp`): the edge serves it with
/// the server's URLs mapped to its public origin, and carries the
/// endpoints it names; the client registers, is authorized, gets a token
/// and is let in; nothing else of the server's is reachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_servers_authorization_endpoints_cross_the_pair() {
    let seen: Seen = Arc::default();
    let upstream = legacy_server(true, seen.clone()).await;
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--upstream", &upstream, "--protocol", "mcp"],
        edge_extra: &[
            "--forward-authorization",
            "--public-url",
            PUBLIC,
            "--protocol",
            "mcp",
        ],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let base = http.trim_end_matches('/');
    let initialize = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})
    .to_string();
    let mcp_headers = |token: Option<&'static str>| {
        let mut h = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ];
        if let Some(t) = token {
            h.push(("authorization", t));
        }
        h
    };

    let (status, headers, _) = request("POST", &http, &mcp_headers(None), &initialize).await;
    assert_eq!(status, 401);
    assert_eq!(header(&headers, "www-authenticate"), "Bearer");

    let (status, headers, body) = request(
        "GET",
        &format!("{base}/.well-known/oauth-authorization-server"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "content-type"), "application/json");
    let m = parse(&body);
    assert_eq!(m["issuer"], json!("https://edge.example"));
    assert_eq!(
        m["authorization_endpoint"],
        json!("https://edge.example/oauth/authorize")
    );
    assert_eq!(
        m["token_endpoint"],
        json!("https://edge.example/oauth/token")
    );
    assert_eq!(
        m["registration_endpoint"],
        json!("https://edge.example/oauth/register")
    );
    assert_eq!(
        m["jwks_uri"],
        json!("https://keys.example/jwks"),
        "not the server's"
    );

    let token = code_flow(base, "/oauth").await;
    let bearer: &'static str = Box::leak(format!("Bearer {token}").into_boxed_str());
    let (status, _, body) = request("POST", &http, &mcp_headers(Some(bearer)), &initialize).await;
    assert_eq!(status, 200, "{body}");

    // What the metadata does not name is not carried.
    let (status, _, body) = request("GET", &format!("{base}/private"), &[], "").await;
    assert_ne!(status, 200, "{body}");
    let sneaked = format!("{base}/.well-known/oauth-authorization-server/%2e%2e/../private");
    let (status, _, body) = request("GET", &sneaked, &[], "").await;
    assert_ne!(status, 200, "{body}");
    let (status, _, _) = request("DELETE", &format!("{base}/oauth/token"), &[], "").await;
    assert_eq!(status, 405);
    let big = "x".repeat(20 << 10);
    let (status, headers, _) = request("POST", &format!("{base}/oauth/token"), &[], &big).await;
    assert_eq!(status, 413);
    assert_eq!(
        header(&headers, "connection"),
        "close",
        "its body is not read"
    );
    let seen = seen.lock().expect("seen").clone();
    assert!(
        seen.iter()
            .all(|(m, path, _, _)| (m == "GET" || m == "POST")
                && path != "/private"
                && !path.contains("..")
                && !path.contains("%2e")),
        "{seen:?}"
    );
    assert!(seen.iter().all(|(_, _, _, cookie)| !cookie), "{seen:?}");
    let token_auth: Vec<_> = seen
        .iter()
        .filter(|(m, p, _, _)| m == "POST" && p == "/oauth/token")
        .map(|(_, _, a, _)| a.clone())
        .collect();
    assert_eq!(token_auth, [None, Some(CLIENT_BASIC.to_owned())]);
}

/// Without metadata (JSON-RPC over HTTP): the server's 404 for it comes
/// back, and the endpoints a client falls back to at the root are carried.
/// Without `--forward-authorization` none is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_servers_default_endpoints_cross_the_pair() {
    let seen: Seen = Arc::default();
    let upstream = legacy_server(false, seen.clone()).await;
    let pair = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--upstream", &upstream],
        edge_extra: &["--forward-authorization", "--public-url", PUBLIC],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let base = http.trim_end_matches('/');
    let (status, _, _) = request(
        "GET",
        &format!("{base}/.well-known/oauth-authorization-server"),
        &[],
        "",
    )
    .await;
    assert_eq!(status, 404, "the server's own answer");
    let token = code_flow(base, "").await;
    let echo = r#"{"jsonrpc":"2.0","id":3,"method":"echo"}"#;
    let bearer = format!("Bearer {token}");
    let with = [
        ("content-type", "application/json"),
        ("authorization", bearer.as_str()),
    ];
    let (status, _, body) = request("POST", &http, &with, echo).await;
    assert_eq!(
        (status, parse(&body)["result"].clone()),
        (200, json!("ok")),
        "{body}"
    );

    let plain = Pair::start(PairOptions {
        upstream: Up::Given,
        origin_extra: &["--upstream", &upstream],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let before = seen.lock().expect("seen").len();
    let plain_base = plain.ingress("http://");
    let form = [("content-type", "application/x-www-form-urlencoded")];
    let (status, _, _) = request(
        "POST",
        &format!("{}/token", plain_base.trim_end_matches('/')),
        &form,
        "grant_type=authorization_code&code=c",
    )
    .await;
    assert_eq!(status, 415, "not JSON-RPC, and not carried");
    assert_eq!(seen.lock().expect("seen").len(), before);
}
