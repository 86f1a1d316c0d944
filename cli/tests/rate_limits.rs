//! Rate limits per client at the edge (`--rate-limit`): a client is its
//! bearer token (here), its certificate or its source address. Over the
//! limit, HTTP answers 429 with `Retry-After` and -32013, a WebSocket
//! session -32013 for each request; other clients are not affected; every
//! refusal is counted exactly once.

use crate::support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::json;
use support::*;

const TOKEN_A: &str = "client-a-0123456789abcdef";
const TOKEN_B: &str = "client-b-0123456789abcdef";

struct Answer {
    status: u16,
    retry_after: Option<u64>,
    body: String,
}

async fn call(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
    url: &str,
    token: &str,
    id: u64,
) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "echo", "params": [id]}).to_string();
    let req = hyper::Request::post(url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("answer in time")
        .expect("answer");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Answer {
        status,
        retry_after,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_client_gets_its_rate_and_the_rest_is_refused_and_counted() {
    let dir = tempdir::Dir::new();
    let tokens = dir.0.join("tokens");
    std::fs::write(&tokens, format!("{TOKEN_A}\n{TOKEN_B}\n")).expect("tokens");
    let tokens = tokens.to_string_lossy().into_owned();
    let pair = Pair::start(PairOptions {
        ingresses: &["http", "ws"],
        edge_extra: &[
            "--auth-token-file",
            &tokens,
            "--rate-limit",
            "100",
            "--rate-limit-burst",
            "10",
        ],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();

    // Client A offers about 3x its rate for 3 s, closed loop on 4 tasks.
    let start = Instant::now();
    let run = Duration::from_secs(3);
    let tasks: Vec<_> = (0..4u64)
        .map(|t| {
            let (client, http) = (client.clone(), http.clone());
            tokio::spawn(async move {
                let (mut ok, mut refused, mut id) = (0u64, 0u64, t << 32);
                while start.elapsed() < run {
                    id += 1;
                    let a = call(&client, &http, TOKEN_A, id).await;
                    match a.status {
                        200 => {
                            assert!(a.body.contains(&format!("\"result\":[{id}]")), "{}", a.body);
                            ok += 1;
                        }
                        429 => {
                            assert_eq!(a.retry_after, Some(1), "{}", a.body);
                            let v = parse(&a.body);
                            assert_eq!(v["error"]["code"], -32013, "{}", a.body);
                            assert_eq!(v["id"], id, "the refusal answers the request's id");
                            assert!(a.body.contains("100 requests per second"), "{}", a.body);
                            refused += 1;
                        }
                        s => panic!("status {s}: {}", a.body),
                    }
                    // About 300 requests/s offered in all.
                    tokio::time::sleep(Duration::from_micros(13_000)).await;
                }
                (ok, refused)
            })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        let (o, r) = t.await.expect("task");
        ok += o;
        refused += r;
    }
    let elapsed = start.elapsed().as_secs_f64();
    // The burst, then 100/s: within 5 % (and the one request that may be
    // in flight at the end).
    let allowed = 10.0 + 100.0 * elapsed;
    assert!(
        (ok as f64) <= allowed + 1.0 && (ok as f64) >= 0.95 * allowed,
        "{ok} accepted in {elapsed:.2} s, {allowed:.0} allowed"
    );
    assert!(
        refused > ok / 2,
        "the client offered more than it was allowed"
    );
    // Exactly the refusals the client saw are counted.
    assert_eq!(
        metric(&pair.edge, "npamp_rate_limited_total").await,
        refused
    );
    assert_eq!(
        metric(&pair.edge, "npamp_replies_total{class=\"rate_limited\"}").await,
        refused
    );

    // Client B has its own bucket, untouched by A: its burst goes through
    // at once, then its rate.
    let start = Instant::now();
    let mut b_ok = 0;
    for id in 0..30 {
        if call(&client, &http, TOKEN_B, id).await.status == 200 {
            b_ok += 1;
        }
    }
    let allowed = 10.0 + 100.0 * start.elapsed().as_secs_f64();
    assert!(
        b_ok >= 10 && b_ok as f64 <= allowed + 1.0,
        "{b_ok} of 30, {allowed:.1} allowed"
    );

    // A WebSocket session of client B: the requests over its rate get
    // -32013 with their ids, the connection carries on.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ws = pair.ingress("ws://");
    let mut session = Client::ws_with_token(&ws, TOKEN_B).await;
    let start = Instant::now();
    for id in 100..130 {
        session
            .send(
                &json!({"jsonrpc": "2.0", "id": id, "method": "echo", "params": [id]}).to_string(),
            )
            .await;
    }
    let (mut results, mut limited) = (0, 0);
    for _ in 100..130 {
        let v = session.recv().await.expect("an answer for each request");
        if v["error"]["code"] == -32013 {
            assert!(
                v["id"].as_u64().is_some_and(|id| (100..130).contains(&id)),
                "{v}"
            );
            limited += 1;
        } else {
            assert!(v["result"].is_array(), "{v}");
            results += 1;
        }
    }
    let allowed = 10.0 + 100.0 * start.elapsed().as_secs_f64();
    assert!(
        results >= 10 && results as f64 <= allowed + 1.0,
        "{results} results, {limited} limited, {allowed:.1} allowed"
    );
    assert_eq!(results + limited, 30);
}

/// A batch of more requests than the client's burst can never be admitted:
/// it is refused at once with an error that says so, not with a 429 and a
/// `Retry-After` that no wait would honour. A batch within the burst is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_the_burst_is_refused_for_what_it_is() {
    let pair = Pair::start(PairOptions {
        ingresses: &["http"],
        edge_extra: &["--rate-limit", "20", "--rate-limit-burst", "3"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let batch = |n: u64| {
        let items: Vec<_> = (0..n)
            .map(|i| json!({"jsonrpc": "2.0", "id": i, "method": "echo", "params": [i]}))
            .collect();
        serde_json::Value::Array(items).to_string()
    };
    let (status, body) = post(&http, &batch(5)).await;
    assert_eq!(status, 200, "{body}");
    let v = parse(&body);
    assert_eq!(v["error"]["code"], json!(-32600), "{body}");
    let text = v["error"]["data"].to_string() + &v["error"]["message"].to_string();
    assert!(text.contains("never admitted"), "{body}");
    // Waiting does not change the answer, and a batch of 3 passes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, _) = post(&http, &batch(5)).await;
    assert_eq!(status, 200);
    let (status, body) = post(&http, &batch(3)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(parse(&body).as_array().map(Vec::len), Some(3), "{body}");
}
