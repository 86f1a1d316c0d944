//! TLS at the ingress: `https://` with HTTP/2 (ALPN) and HTTP/1.1, HTTP/2
//! by prior knowledge on `http://` (h2c), `wss://`, and `tls+tcp://` lines
//! whose clients are authenticated by certificate (`--ingress-client-ca`)
//! beside bearer tokens. Certificates come from a CA made here; curl plays
//! the HTTP clients.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::pki::Pki;
use support::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use support::pki::TOKEN;
const ECHO: &str = r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":["hi"]}"#;
const REPLY: &str = r#"{"id":7,"jsonrpc":"2.0","result":["hi"]}"#;

/// curl with `args`; `None` when there is no curl here.
fn curl(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("curl")
        .args(args)
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn curl_has_http2() -> bool {
    curl(&["-V"]).is_some_and(|v| v.contains("HTTP2"))
}

/// POSTs ECHO with curl and `extra` flags; returns "VERSION STATUS BODY".
async fn curl_post(url: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "-sS",
        "--max-time",
        "20",
        "-H",
        "content-type: application/json",
        "-d",
        ECHO,
        "-w",
        " %{http_version} %{http_code}",
    ];
    args.extend(extra);
    args.push(url);
    let args: Vec<String> = args.into_iter().map(String::from).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&args).unwrap_or_default()
    })
    .await
    .expect("curl")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_speaks_http2_and_http1_and_plain_http_takes_h2c() {
    if !curl_has_http2() {
        eprintln!("skipped: needs curl with HTTP2");
        return;
    }
    let pki = Pki::new();
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let pair = Pair::start(PairOptions {
        ingresses: &["https", "http"],
        edge_extra: &["--ingress-cert", &cert, "--ingress-key", &key],
        ..PairOptions::default()
    })
    .await;
    let https = pair.ingress("https://");
    let http = pair.ingress("http://");
    let ca = pki.path("ca.pem");
    assert_eq!(
        curl_post(&https, &["--http2", "--cacert", &ca]).await,
        format!("{REPLY} 2 200")
    );
    assert_eq!(
        curl_post(&https, &["--http1.1", "--cacert", &ca]).await,
        format!("{REPLY} 1.1 200")
    );
    assert_eq!(
        curl_post(&http, &["--http2-prior-knowledge"]).await,
        format!("{REPLY} 2 200")
    );
    assert_eq!(curl_post(&http, &[]).await, format!("{REPLY} 1.1 200"));
    // A client that does not trust the certificate gets no answer.
    assert!(!curl_post(&https, &[]).await.contains(REPLY));
    assert!(
        metric_reaches(
            &pair.edge,
            "npamp_client_tls_failures_total",
            1,
            Duration::from_secs(5)
        )
        .await
            >= 1
    );
    assert_eq!(
        metric(&pair.edge, "npamp_requests_total{ingress=\"http\"}").await,
        4,
        "https and http count as the HTTP ingress"
    );
}

/// One line out, one line back, over TLS with `config`; `None` when the
/// handshake or the exchange fails.
async fn tls_line(url: &str, config: Arc<rustls::ClientConfig>) -> Option<String> {
    let addr = url.strip_prefix("tls+tcp://")?;
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").ok()?;
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .ok()?;
    let (r, mut w) = tokio::io::split(tls);
    w.write_all(format!("{ECHO}\n").as_bytes()).await.ok()?;
    let mut line = String::new();
    let mut r = BufReader::new(r);
    let read = r.read_line(&mut line);
    match tokio::time::timeout(std::time::Duration::from_secs(10), read).await {
        Ok(Ok(n)) if n > 0 => Some(line.trim_end().to_owned()),
        _ => None,
    }
}

/// A wss:// exchange of ECHO with `config` and these headers.
async fn wss_echo(
    url: &str,
    config: Arc<rustls::ClientConfig>,
    headers: &[(hyper::header::HeaderName, hyper::header::HeaderValue)],
) -> Result<String, String> {
    use futures_util::{SinkExt, StreamExt};
    let mut ws = npamp_gateway::gateway::ws_connect(url, 1 << 20, config, headers).await?;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(ECHO.into()))
        .await
        .map_err(|e| e.to_string())?;
    match ws.next().await {
        Some(Ok(m)) => Ok(m.to_text().map_err(|e| e.to_string())?.to_owned()),
        other => Err(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_and_tls_lines_authenticate_clients_by_certificate_or_token() {
    let pki = Pki::new();
    let (cert, key, ca, tokens) = (
        pki.path("server.pem"),
        pki.path("server.key"),
        pki.path("ca.pem"),
        pki.path("tokens"),
    );
    let pair = Pair::start(PairOptions {
        ingresses: &["wss", "tls+tcp"],
        edge_extra: &[
            "--ingress-cert",
            &cert,
            "--ingress-key",
            &key,
            "--ingress-client-ca",
            &ca,
            "--auth-token-file",
            &tokens,
        ],
        ..PairOptions::default()
    })
    .await;
    let wss = pair.ingress("wss://");
    let lines = pair.ingress("tls+tcp://");
    let bearer = (
        hyper::header::AUTHORIZATION,
        hyper::header::HeaderValue::from_str(&format!("Bearer {TOKEN}")).expect("header"),
    );

    // wss://: a token, or a client certificate, lets a client in.
    assert_eq!(
        wss_echo(&wss, pki.client(None), std::slice::from_ref(&bearer)).await,
        Ok(REPLY.to_owned())
    );
    assert_eq!(
        wss_echo(&wss, pki.client(Some("client")), &[]).await,
        Ok(REPLY.to_owned())
    );
    let refused = wss_echo(&wss, pki.client(None), &[]).await;
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("401")),
        "{refused:?}"
    );

    // tls+tcp://: only a certificate can (a line has no room for a token).
    assert_eq!(
        tls_line(&lines, pki.client(Some("client")))
            .await
            .as_deref(),
        Some(REPLY)
    );
    assert_eq!(tls_line(&lines, pki.client(None)).await, None);
    assert!(
        metric_reaches(
            &pair.edge,
            "npamp_unauthorized_total",
            2,
            Duration::from_secs(5)
        )
        .await
            >= 2
    );
    // A certificate from a CA the edge does not trust fails the handshake.
    assert_eq!(tls_line(&lines, pki.client(Some("intruder"))).await, None);
    assert!(
        metric_reaches(
            &pair.edge,
            "npamp_client_tls_failures_total",
            1,
            Duration::from_secs(5)
        )
        .await
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_a_client_ca_makes_certificates_required() {
    let pki = Pki::new();
    let (cert, key, ca) = (
        pki.path("server.pem"),
        pki.path("server.key"),
        pki.path("ca.pem"),
    );
    let pair = Pair::start(PairOptions {
        ingresses: &["tls+tcp"],
        edge_extra: &[
            "--ingress-cert",
            &cert,
            "--ingress-key",
            &key,
            "--ingress-client-ca",
            &ca,
        ],
        ..PairOptions::default()
    })
    .await;
    let lines = pair.ingress("tls+tcp://");
    assert_eq!(
        tls_line(&lines, pki.client(Some("client")))
            .await
            .as_deref(),
        Some(REPLY)
    );
    assert_eq!(tls_line(&lines, pki.client(None)).await, None);
    assert!(
        metric_reaches(
            &pair.edge,
            "npamp_client_tls_failures_total",
            1,
            Duration::from_secs(5)
        )
        .await
            >= 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_sends_no_request_is_dropped_at_the_stall_timeout() {
    let pki = Pki::new();
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let pair = Pair::start(PairOptions {
        ingresses: &["https"],
        edge_extra: &[
            "--ingress-cert",
            &cert,
            "--ingress-key",
            &key,
            "--stall-timeout",
            "0.5",
        ],
        ..PairOptions::default()
    })
    .await;
    let https = pair.ingress("https://");
    let tcp = tokio::net::TcpStream::connect(https.trim_start_matches("https://"))
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(pki.client(None))
        .connect(name, tcp)
        .await
        .expect("handshake");
    // The handshake done, nothing sent: the edge closes within about the
    // stall timeout, and counts it.
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read(&mut tls, &mut buf),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "still open after {:?}: {read:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        metric_reaches(
            &pair.edge,
            "npamp_stalled_clients_total",
            1,
            Duration::from_secs(5)
        )
        .await
            >= 1
    );
}
