//! `gateway::Client` through the public API alone: an origin started with
//! the builder in front of a small HTTP JSON-RPC upstream written here, and
//! a client that carries requests, batches and notifications to it.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use npamp_gateway::assoc::{PeerAddr, Scheme};
use npamp_gateway::gateway::{Client, Gateway};
use serde_json::{Value, json};

/// Answers each request with its params as the result; a notification
/// with 204.
async fn upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = req.into_body().collect().await?.to_bytes();
                        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let mut reply = hyper::Response::new(Full::new(Bytes::new()));
                        if v.get("id").is_some() {
                            let text =
                                json!({"jsonrpc": "2.0", "id": v["id"], "result": v["params"]});
                            *reply.body_mut() = Full::new(Bytes::from(text.to_string()));
                        } else {
                            *reply.status_mut() = hyper::StatusCode::NO_CONTENT;
                        }
                        Ok::<_, hyper::Error>(reply)
                    },
                );
                let io = hyper_util::rt::TokioIo::new(socket);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

fn parsed(reply: Option<Bytes>) -> Value {
    let text = reply.expect("an answer");
    serde_json::from_slice(&text).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_carries_requests_batches_and_notifications_as_an_edge_does() {
    let url = upstream().await;
    let origin = Gateway::builder()
        .identity_seed([3; 32])
        .insecure_accept_any_peer()
        .listen(PeerAddr {
            scheme: Scheme::Quic,
            addr: "127.0.0.1:0".parse().expect("addr"),
        })
        .upstream(url.parse().expect("an upstream URL"))
        .start()
        .await
        .expect("origin");
    let config = Gateway::builder()
        .identity_seed([4; 32])
        .insecure_accept_any_peer()
        .peer(origin.listening[0])
        .config()
        .expect("config");
    let client = Client::new(&config).expect("client");
    assert_eq!(client.peer(), origin.listening[0]);
    let call = |text: &'static str| {
        let client = &client;
        async move {
            tokio::time::timeout(
                Duration::from_secs(10),
                client.call(Bytes::from_static(text.as_bytes())),
            )
            .await
            .expect("answered in time")
        }
    };

    // A request: the upstream's reply, its octets as they came.
    let v = parsed(call(r#"{"jsonrpc":"2.0","id":7,"method":"echo","params":[1,"two"]}"#).await);
    assert_eq!(v, json!({"jsonrpc": "2.0", "id": 7, "result": [1, "two"]}));
    // A batch of a request, a notification and an element that is not
    // JSON-RPC: two answers in one array.
    let v = parsed(
        call(r#"[{"jsonrpc":"2.0","id":"a","method":"echo","params":[3]},{"jsonrpc":"2.0","method":"tick"},{"x":1}]"#)
            .await,
    );
    let answers = v.as_array().expect("an array");
    assert_eq!(answers.len(), 2, "{v}");
    assert!(
        answers
            .iter()
            .any(|a| a["id"] == "a" && a["result"] == json!([3])),
        "{v}"
    );
    assert!(answers.iter().any(|a| a["error"]["code"] == -32600), "{v}");
    // Notifications only: nothing to answer.
    assert_eq!(call(r#"{"jsonrpc":"2.0","method":"tick"}"#).await, None);
    // Not JSON: a parse error, as an edge answers it.
    assert_eq!(parsed(call("nonsense").await)["error"]["code"], -32700);
    origin.shutdown().await;
}

#[test]
fn a_client_needs_an_origin() {
    let config = Gateway::builder()
        .identity_seed([4; 32])
        .insecure_accept_any_peer()
        .config()
        .expect("config");
    let e = Client::new(&config).err().expect("refused");
    assert!(e.to_string().contains("origin"), "{e}");
}
