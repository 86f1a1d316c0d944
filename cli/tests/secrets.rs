//! No upstream secret leaves the origin: an upstream URL's user
//! information, path and query (where RPC providers put API keys) and a
//! child process's arguments never reach a client (NotDelivered details),
//! nor the edge, nor either gateway's log at info level.

use crate::support;

use std::time::Duration;

use support::*;

const SECRETS: [&str; 6] = ["alice", "s3cret", "KEY123", "QSECRET", "TSECRET", "CSECRET"];

fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} shows {secret:?}:\n{text}");
    }
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// An origin delivering to `upstream` (the flags that name it) and an edge
/// with HTTP and WebSocket ingresses, both logging at info level into
/// `keys`; returns them and the ingress URLs.
async fn pair(keys: &tempdir::Dir, upstream: &[&str]) -> (Proc, Proc, String, String) {
    let (ok, ek) = (keys.0.join("o.key"), keys.0.join("e.key"));
    let (opub, epub) = (keygen(&ok), keygen(&ek));
    let ok = ok.to_string_lossy().into_owned();
    let mut args = vec!["serve", "--listen", "quic://127.0.0.1:0"];
    args.extend(upstream);
    args.extend(["--identity", &ok, "--trust", &epub]);
    let origin = Proc::start_logged(&args, "listening on", &keys.0.join("origin.log")).await;
    let peer = origin.printed("listening on ");
    let ek = ek.to_string_lossy().into_owned();
    let edge = Proc::start_logged(
        &[
            "serve",
            "--ingress",
            "http://127.0.0.1:0",
            "--ingress",
            "ws://127.0.0.1:0",
            "--peer",
            &peer,
            "--identity",
            &ek,
            "--trust",
            &opub,
        ],
        "ingress ws",
        &keys.0.join("edge.log"),
    )
    .await;
    let http = edge.printed("ingress http");
    let ws = edge.printed("ingress ws");
    (origin, edge, format!("http{http}"), format!("ws{ws}"))
}

fn logs(keys: &tempdir::Dir) -> String {
    ["origin.log", "edge.log"]
        .iter()
        .map(|f| std::fs::read_to_string(keys.0.join(f)).unwrap_or_default())
        .collect()
}

const REQUEST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstreams_url_secrets_never_leave_the_origin() {
    let keys = tempdir::Dir::new();
    let url = format!(
        "http://alice:s3cret@127.0.0.1:{}/v3/KEY123?key=QSECRET",
        closed_port()
    );
    let (_origin, _edge, http, _) = pair(&keys, &["--upstream", &url]).await;
    let (status, body) = post(&http, REQUEST).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("NotDelivered") && body.contains("http://127.0.0.1:"),
        "{body}"
    );
    assert_clean("the client's answer", &body);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_clean("the logs", &logs(&keys));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_upstreams_and_a_childs_secrets_never_leave_the_origin() {
    for upstream in [
        vec![
            "--upstream".to_owned(),
            format!(
                "ws://alice:s3cret@127.0.0.1:{}/ws/KEY123?token=TSECRET",
                closed_port()
            ),
        ],
        vec![
            "--upstream-cmd".to_owned(),
            "/nonexistent/mcp-server --api-key=CSECRET".to_owned(),
        ],
    ] {
        let keys = tempdir::Dir::new();
        let flags: Vec<&str> = upstream.iter().map(String::as_str).collect();
        let (_origin, _edge, _, ws) = pair(&keys, &flags).await;
        let mut client = Client::ws(&ws).await;
        let reply = tokio::time::timeout(
            Duration::from_secs(20),
            client.call(serde_json::from_str(REQUEST).expect("json")),
        )
        .await
        .unwrap_or_else(|_| panic!("{flags:?}: no answer"));
        let text = reply.to_string();
        assert!(
            reply["error"]["code"].as_i64().is_some(),
            "{flags:?}: {text}"
        );
        assert_clean("the client's answer", &text);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_clean("the logs", &logs(&keys));
    }
}
