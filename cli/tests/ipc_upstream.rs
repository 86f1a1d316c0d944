//! Upstreams on a Unix domain socket: in the style of geth's IPC (JSON
//! values back to back on the stream, no newline required), and HTTP over
//! the socket (`http+unix://`). Small servers written here answer; clients
//! reach them through a gateway pair.
#![cfg(unix)]

use crate::support;

use std::time::Duration;

use support::{Client, Pair, PairOptions, Up, post, tempdir};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// Answers every request with its params as the result, and pushes a
/// subscription notification after `eth_subscribe`; replies go out with no
/// separator, two at a time where it can, one split over two writes.
async fn ipc_server(listener: tokio::net::UnixListener) {
    while let Ok((mut socket, _)) = listener.accept().await {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                let Ok(n) = socket.read(&mut chunk).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                buf.extend_from_slice(&chunk[..n]);
                // Every complete request in the buffer, values back to back.
                let mut stream =
                    serde_json::Deserializer::from_slice(&buf).into_iter::<serde_json::Value>();
                let mut replies = String::new();
                let mut used = 0;
                while let Some(Ok(v)) = stream.next() {
                    used = stream.byte_offset();
                    let answer = |v: &serde_json::Value| serde_json::json!({"jsonrpc": "2.0", "id": v["id"], "result": v["params"]});
                    match &v {
                        serde_json::Value::Array(batch) => {
                            let all: Vec<_> = batch.iter().map(answer).collect();
                            replies.push_str(&serde_json::Value::Array(all).to_string());
                        }
                        one => {
                            replies.push_str(&answer(one).to_string());
                            if one["method"] == "eth_subscribe" {
                                replies.push_str(
                                    r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":"block"}}"#,
                                );
                            }
                        }
                    }
                }
                buf.drain(..used);
                // Split the replies in the middle: the gateway must join them.
                let (a, b) = replies.as_bytes().split_at(replies.len() / 2);
                if socket.write_all(a).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                if socket.write_all(b).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// One request through `http`, answered with its params.
async fn one_request(http: &str) {
    let (status, body) = post(
        http,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":["0x10"]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(
        (v["id"].clone(), v["result"].clone()),
        (1.into(), serde_json::json!(["0x10"]))
    );
}

/// Fifty requests through `http` at once, each answered with its own.
async fn fifty_at_once(http: &str) {
    let calls = (10..60).map(|id| {
        let http = http.to_owned();
        tokio::spawn(async move {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_getBalance","params":[{id}]}}"#
            );
            let (status, reply) = post(&http, &body).await;
            let v: serde_json::Value = serde_json::from_str(&reply).expect("JSON");
            (status, v["id"].as_i64(), v["result"][0].as_i64())
        })
    });
    for (id, call) in (10..60).zip(calls) {
        assert_eq!(call.await.expect("call"), (200, Some(id), Some(id)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_geth_style_ipc_upstream_serves_http_and_websocket_clients() {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("geth.ipc");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the IPC socket");
    tokio::spawn(ipc_server(listener));
    let url: &'static str = Box::leak(format!("unix://{}", path.display()).into_boxed_str());
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(url),
        ingresses: &["http", "ws"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    // One request, then a batch, over HTTP.
    one_request(&http).await;
    let (status, body) = post(
        &http,
        r#"[{"jsonrpc":"2.0","id":2,"method":"eth_call","params":[2]},{"jsonrpc":"2.0","id":3,"method":"eth_call","params":[3]}]"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let mut ids: Vec<i64> = v
        .as_array()
        .expect("a batch reply")
        .iter()
        .filter_map(|r| r["id"].as_i64())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [2, 3]);
    // Many at once: replies arrive back to back and split, each matched.
    fifty_at_once(&http).await;
    // A WebSocket client: a reply and the subscription it asked for.
    let mut ws = Client::ws(&pair.ingress("ws://")).await;
    ws.send(r#"{"jsonrpc":"2.0","id":7,"method":"eth_subscribe","params":["newHeads"]}"#)
        .await;
    let mut got = Vec::new();
    while got.len() < 2 {
        got.push(ws.recv().await.expect("a message"));
    }
    assert!(
        got.iter()
            .any(|v| v["id"] == 7 && v["result"][0] == "newHeads"),
        "{got:?}"
    );
    assert!(
        got.iter().any(|v| v["method"] == "eth_subscription"),
        "{got:?}"
    );
}

#[test]
fn an_ipc_upstream_is_an_absolute_path() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_npamp-gateway"))
        .args([
            "serve",
            "--listen",
            "quic://127.0.0.1:0",
            "--insecure-accept-any-peer",
            "--upstream",
            "unix://geth.ipc",
        ])
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("an absolute path"), "{err}");
}

/// An HTTP/1.1 JSON-RPC server on a Unix socket: answers each POST with its
/// params as the result, and sends what it saw (request path and `Host`)
/// down `seen`.
async fn http_server(
    listener: tokio::net::UnixListener,
    seen: tokio::sync::mpsc::UnboundedSender<(String, String)>,
) {
    use http_body_util::{BodyExt, Full};
    while let Ok((socket, _)) = listener.accept().await {
        let seen = seen.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(
                move |req: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let host = req
                            .headers()
                            .get(hyper::header::HOST)
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        let _ = seen.send((req.uri().path().to_owned(), host));
                        let body = req.into_body().collect().await?.to_bytes();
                        let v: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        let answer = |v: &serde_json::Value| serde_json::json!({"jsonrpc": "2.0", "id": v["id"], "result": v["params"]});
                        let reply = match &v {
                            serde_json::Value::Array(batch) => {
                                serde_json::Value::Array(batch.iter().map(answer).collect())
                            }
                            one => answer(one),
                        };
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(bytes::Bytes::from(
                            reply.to_string(),
                        ))))
                    }
                },
            );
            let io = hyper_util::rt::TokioIo::new(socket);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_on_a_unix_socket_serves_through_the_pair() {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("rpc.sock");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the socket");
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(http_server(listener, seen_tx));
    // The socket's path percent-encoded as the host, then the request path.
    let encoded: String = path
        .display()
        .to_string()
        .bytes()
        .map(|b| match b {
            b'/' => "%2F".to_owned(),
            b => char::from(b).to_string(),
        })
        .collect();
    let url: &'static str = Box::leak(format!("http+unix://{encoded}/rpc").into_boxed_str());
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(url),
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    one_request(&http).await;
    let (path_seen, host) = seen.recv().await.expect("the server saw the request");
    assert_eq!((path_seen.as_str(), host.as_str()), ("/rpc", "localhost"));
    // Many at once, over the client's pool of socket connections.
    fifty_at_once(&http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_unix_socket_is_a_prompt_error_that_names_it() {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("nobody-listens.sock");
    let url: &'static str = Box::leak(format!("http+unix://{}", path.display()).into_boxed_str());
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(url),
        ..PairOptions::default()
    })
    .await;
    let started = std::time::Instant::now();
    let (status, body) = post(
        &pair.ingress("http://"),
        r#"{"jsonrpc":"2.0","id":99,"method":"eth_blockNumber","params":[]}"#,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_ne!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a JSON-RPC error");
    assert_eq!(v["id"], 99, "{body}");
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
        + v["error"]["data"].to_string().as_str();
    assert!(message.contains(url), "{body}");
    assert!(!body.contains("%2F"), "{body}");
}

#[test]
fn an_http_unix_upstream_is_an_absolute_path() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_npamp-gateway"))
        .args([
            "serve",
            "--listen",
            "quic://127.0.0.1:0",
            "--insecure-accept-any-peer",
            "--upstream",
            "http+unix://rpc.sock/",
        ])
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("http+unix:///PATH"), "{err}");
}

/// An IPC upstream that answers every request with its own `name`, until
/// the sender is dropped or sends `true`: then it stops accepting and
/// drops every connection (as a killed node would).
async fn named_ipc_server(
    path: std::path::PathBuf,
    name: &'static str,
) -> tokio::sync::watch::Sender<bool> {
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the IPC socket");
    let (kill, killed) = tokio::sync::watch::channel(false);
    let mut accepting = killed.clone();
    tokio::spawn(async move {
        loop {
            // The kill first: after it nothing is accepted or answered (a
            // select that picks at random among ready branches once answered
            // a request sent after the kill).
            let socket = tokio::select! {
                biased;
                _ = accepting.changed() => return,
                a = listener.accept() => match a {
                    Ok((s, _)) => s,
                    Err(_) => return,
                },
            };
            let mut killed = killed.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                loop {
                    let line = tokio::select! {
                        biased;
                        _ = killed.changed() => return,
                        l = lines.next_line() => match l {
                            Ok(Some(l)) => l,
                            _ => return,
                        },
                    };
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                        continue;
                    };
                    let reply =
                        serde_json::json!({"jsonrpc": "2.0", "id": v["id"], "result": name});
                    if write.write_all(reply.to_string().as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    kill
}

/// Two IPC upstreams behind one origin: the WebSocket clients' sessions are
/// spread over both; when one upstream dies, the sessions on it move to the
/// other at once, and every client is answered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_spread_over_two_ipc_upstreams_and_move_when_one_dies() {
    let dir = tempdir::Dir::new();
    let (path_a, path_b) = (dir.0.join("a.ipc"), dir.0.join("b.ipc"));
    let kill_a = named_ipc_server(path_a.clone(), "a").await;
    let _b = named_ipc_server(path_b.clone(), "b").await;
    let url: &'static str = Box::leak(format!("unix://{}", path_a.display()).into_boxed_str());
    let b = format!("unix://{}", path_b.display());
    let pair = Pair::start(PairOptions {
        upstream: Up::Url(url),
        origin_extra: &["--upstream", &b],
        ingresses: &["ws"],
        ..PairOptions::default()
    })
    .await;
    let mut clients = Vec::new();
    let mut on = Vec::new();
    for id in 0..4 {
        let mut ws = Client::ws(&pair.ingress("ws://")).await;
        let r = ws
            .call(serde_json::json!({"jsonrpc":"2.0","id":id,"method":"eth_chainId"}))
            .await;
        on.push(r["result"].as_str().expect("a result").to_owned());
        clients.push(ws);
    }
    assert!(
        on.iter().any(|n| n == "a") && on.iter().any(|n| n == "b"),
        "{on:?}"
    );

    kill_a.send(true).expect("kill a");
    // Every client, those whose session was on `a` too, is answered by `b`
    // within a second or two (a request that raced the kill may be told it
    // was not delivered, or may have executed: never a hang).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    for (k, ws) in clients.iter_mut().enumerate() {
        let mut id = 100 + 10 * k as i64;
        loop {
            id += 1;
            let r = ws
                .call(serde_json::json!({"jsonrpc":"2.0","id":id,"method":"eth_chainId"}))
                .await;
            if r["result"] == "b" {
                break;
            }
            let code = r["error"]["data"]["npamp_error"]
                .as_str()
                .unwrap_or_default();
            assert!(
                ["NotDelivered", "MayHaveExecuted"].contains(&code),
                "client {k}: {r}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "client {k} still not answered: {r}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A new client starts on the one left.
    let mut ws = Client::ws(&pair.ingress("ws://")).await;
    let r = ws
        .call(serde_json::json!({"jsonrpc":"2.0","id":1,"method":"eth_chainId"}))
        .await;
    assert_eq!(r["result"], "b", "{r}");
}
