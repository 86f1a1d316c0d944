//! The load generator against an edge as users deploy it (issue 54):
//! `https://` with the edge's own CA (`--ca`) or none checked
//! (`--insecure`), HTTP/2 by ALPN and h2c by prior knowledge, `wss://`,
//! and a bearer token in a header, where every request used to get 401.

use crate::support;

use npamp_loadgen::engine::{self, Target, WsTarget};
use npamp_loadgen::header::Header;
use npamp_loadgen::http::HttpTarget;
use npamp_loadgen::report::{Summary, summarize};
use npamp_loadgen::scenario::Scenario;
use npamp_loadgen::tls::TlsOptions;
use support::pki::{Pki, TOKEN};
use support::*;

fn scenario() -> Scenario {
    Scenario::parse(
        r#"
name = "reach"
duration = 1.0
warmup = 0.2
connections = 2
timeout = 5
[load]
model = "open"
rate = 150
[mix]
batch_share = 0.1
batch_size = 3
[[mix.message]]
method = "echo"
params = '{"n": {seq}}'
verify_echo = true
"#,
        "reach",
    )
    .expect("scenario")
}

async fn run(target: Target) -> Summary {
    let s = scenario();
    let described = target.describe();
    let stats = engine::run(&s, target, 7, |_, _| {})
        .await
        .expect("the load runs");
    summarize(&stats, &s, &described, "reach".into())
}

/// Every request answered, each with its own echo.
fn exact(summary: &Summary, what: &str) {
    let a = &summary.accounting;
    assert!(
        a.transport_errors.is_empty() && a.http_status.is_empty(),
        "{what}: {a:?}"
    );
    assert_eq!(a.ok, a.sent_requests, "{what}: {a:?}");
    assert_eq!(a.lost + a.wrong_result + a.unexpected_errors, 0, "{what}");
    assert!(a.sent_requests > 100, "{what}: {a:?}");
}

fn https(url: &str, tls: &TlsOptions, http2: bool, streams: usize, headers: &[Header]) -> Target {
    let uri = url.parse().expect("uri");
    Target::Http(HttpTarget::new(uri, tls, http2, streams, headers.to_vec()).expect("target"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_http2_h2c_and_wss_with_a_bearer_token() {
    let pki = Pki::new();
    let (cert, key, tokens) = (
        pki.path("server.pem"),
        pki.path("server.key"),
        pki.path("tokens"),
    );
    let pair = Pair::start(PairOptions {
        ingresses: &["https", "http", "wss"],
        edge_extra: &[
            "--ingress-cert",
            &cert,
            "--ingress-key",
            &key,
            "--auth-token-file",
            &tokens,
        ],
        ..PairOptions::default()
    })
    .await;
    let (secure, plain, wss) = (
        pair.ingress("https://"),
        pair.ingress("http://"),
        pair.ingress("wss://"),
    );
    let ca = TlsOptions {
        ca: Some(pki.path("ca.pem").into()),
        insecure: false,
    };
    let bearer: Header = format!("Authorization: Bearer {TOKEN}")
        .parse()
        .expect("header");
    let token = std::slice::from_ref(&bearer);

    // Without the token every request is refused: the run says so.
    let refused = run(https(&secure, &ca, false, 1, &[])).await;
    assert_eq!(refused.accounting.ok, 0);
    assert!(refused.not_served().is_some(), "{:?}", refused.accounting);

    // With it, HTTP/1.1 and HTTP/2 (one connection, several streams in
    // flight), over TLS checked against the edge's CA.
    exact(&run(https(&secure, &ca, false, 1, token)).await, "https");
    let h2 = https(&secure, &ca, true, 4, token);
    assert!(h2.describe().ends_with("(HTTP/2)"), "{}", h2.describe());
    exact(&run(h2).await, "https, HTTP/2");
    // h2c: HTTP/2 by prior knowledge on the plain ingress.
    let none = TlsOptions::default();
    exact(&run(https(&plain, &none, true, 2, token)).await, "h2c");

    // The system's roots do not know the test CA: TLS fails, and says why;
    // --insecure checks nothing.
    let untrusted = run(https(&secure, &none, false, 1, token)).await;
    let why = format!("{:?}", untrusted.accounting.transport_errors);
    assert!(why.contains("TLS") && why.contains("certificate"), "{why}");
    let insecure = TlsOptions {
        ca: None,
        insecure: true,
    };
    exact(
        &run(https(&secure, &insecure, false, 1, token)).await,
        "insecure",
    );

    // wss://, the token in the handshake (verify_echo is for
    // request/response targets: a plain echo here).
    let ws = WsTarget::new(&wss, &ca, token.to_vec()).expect("wss target");
    let mut s = scenario();
    s.mix.messages[0].verify_echo = false;
    let stats = engine::run(&s, Target::Ws(ws), 7, |_, _| {})
        .await
        .expect("the load runs");
    let summary = summarize(&stats, &s, "wss", "reach".into());
    exact(&summary, "wss");
    let ws = WsTarget::new(&wss, &ca, Vec::new()).expect("wss target");
    let stats = engine::run(&s, Target::Ws(ws), 7, |_, _| {})
        .await
        .expect("the load runs");
    let why = format!("{:?}", stats.transport);
    assert!(why.contains("401"), "a handshake without the token: {why}");
}
