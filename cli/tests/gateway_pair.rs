//! Two `npamp-gateway` processes on 127.0.0.1 (an edge and an origin) and a
//! mock upstream: every ingress (HTTP, WebSocket, TCP, stdio `connect`) ×
//! every upstream kind (HTTP, WebSocket, child process) × both transports
//! (QUIC, TLS), and the edge semantics of DESIGN.md §5, each with a test.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// One round of the basic exchanges on a session client.
async fn exercise_session(c: &mut Client, what: &str) {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let r = c
        .call(json!({"jsonrpc":"2.0","id":id,"method":"echo","params":{"n":id,"s":"é\"x"}}))
        .await;
    assert_eq!(
        r,
        json!({"jsonrpc":"2.0","id":id,"result":{"n":id,"s":"é\"x"}}),
        "{what}"
    );
    // The upstream's error, verbatim.
    let r = c
        .call(json!({"jsonrpc":"2.0","id":"e1","method":"fail","params":[1]}))
        .await;
    assert_eq!(r["error"]["code"], -32042, "{what}: {r}");
    assert_eq!(r["id"], "e1");
    // A null id is carried and answered as null.
    let r = c
        .call(json!({"jsonrpc":"2.0","id":null,"method":"echo","params":[2]}))
        .await;
    assert_eq!(r, json!({"jsonrpc":"2.0","id":null,"result":[2]}), "{what}");
    // A notification gets nothing; the next request's reply comes first.
    c.send(r#"{"jsonrpc":"2.0","method":"echo","params":[3]}"#)
        .await;
    // A batch: one array, the notification without an element.
    c.send(r#"[{"jsonrpc":"2.0","id":10,"method":"echo","params":[10]},{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","id":11,"method":"fail"},{"x":1}]"#)
        .await;
    let r = c.recv().await.expect("batch reply");
    let arr = r
        .as_array()
        .unwrap_or_else(|| panic!("{what}: batch answered with {r}"));
    assert_eq!(arr.len(), 3, "{what}: {r}");
    let by_id = |id: Value| arr.iter().find(|e| e["id"] == id).cloned();
    assert_eq!(by_id(json!(10)).expect("10")["result"], json!([10]));
    assert_eq!(by_id(json!(11)).expect("11")["error"]["code"], -32042);
    assert_eq!(
        by_id(Value::Null).expect("invalid element")["error"]["code"],
        -32600
    );
    // Malformed input is answered by the edge.
    c.send("{\"jsonrpc\":\"2.0\",\"id\":1,").await;
    let r = c.recv().await.expect("parse error reply");
    assert_eq!(r["error"]["code"], -32700, "{what}: {r}");
    c.send(r#"{"jsonrpc":"1.0","id":5,"method":"echo"}"#).await;
    let r = c.recv().await.expect("invalid request reply");
    assert_eq!(r["error"]["code"], -32600, "{what}: {r}");
}

async fn exercise_http(url: &str, what: &str) {
    let (s, b) = post(
        url,
        r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":["a"]}"#,
    )
    .await;
    assert_eq!(
        (s, parse(&b)),
        (200, json!({"jsonrpc":"2.0","id":1,"result":["a"]})),
        "{what}"
    );
    let (s, b) = post(url, r#"{"jsonrpc":"2.0","id":"f","method":"fail"}"#).await;
    assert_eq!(s, 200, "{what}");
    assert_eq!(parse(&b)["error"]["code"], -32042);
    let (s, b) = post(url, r#"{"jsonrpc":"2.0","method":"echo"}"#).await;
    assert_eq!((s, b.as_str()), (204, ""), "{what}: notification");
    let (s, b) = post(
        url,
        r#"[{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]},{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","id":2,"method":"fail"}]"#,
    )
    .await;
    assert_eq!(s, 200, "{what}");
    assert_eq!(parse(&b).as_array().map(Vec::len), Some(2), "{what}: {b}");
    let (s, _) = post(
        url,
        r#"[{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"echo"}]"#,
    )
    .await;
    assert_eq!(s, 204, "{what}: notification-only batch");
    let (s, b) = post(
        url,
        r#"{"jsonrpc":"2.0","id":null,"method":"echo","params":[0]}"#,
    )
    .await;
    assert_eq!(
        (s, parse(&b)),
        (200, json!({"jsonrpc":"2.0","id":null,"result":[0]})),
        "{what}"
    );
    let (s, b) = post(url, "{oops").await;
    assert_eq!(
        (s, parse(&b)["error"]["code"].clone()),
        (200, json!(-32700)),
        "{what}"
    );
    let (s, b) = post(url, r#"{"jsonrpc":"2.0","id":1}"#).await;
    assert_eq!(
        (s, parse(&b)["error"]["code"].clone()),
        (200, json!(-32600)),
        "{what}"
    );
}

/// Every ingress against one gateway pair.
async fn all_ingresses(transport: &str, upstream: Up) {
    let pair = Pair::start(PairOptions {
        transport,
        upstream,
        ..Default::default()
    })
    .await;
    let what = format!("{transport} → {upstream:?}");
    exercise_http(&pair.ingress("http://"), &format!("HTTP, {what}")).await;
    let mut ws = Client::ws(&pair.ingress("ws://")).await;
    exercise_session(&mut ws, &format!("WebSocket, {what}")).await;
    let mut tcp = Client::tcp(&pair.ingress("tcp://")).await;
    exercise_session(&mut tcp, &format!("TCP, {what}")).await;
    let mut stdio = pair.stdio_client().await;
    exercise_session(&mut stdio, &format!("stdio, {what}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_to_http_upstream() {
    all_ingresses("quic", Up::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_to_websocket_upstream() {
    all_ingresses("quic", Up::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_to_stdio_upstream() {
    all_ingresses("quic", Up::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_http_upstream() {
    all_ingresses("tls", Up::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_websocket_upstream() {
    all_ingresses("tls", Up::Ws).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_stdio_upstream() {
    all_ingresses("tls", Up::Stdio).await;
}

/// Server-originated requests and notifications reach the right client
/// (MCP sampling / progress, `eth_subscription`), over WebSocket and stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_originated_messages_reach_their_session() {
    for upstream in [Up::Ws, Up::Stdio] {
        let pair = Pair::start(PairOptions {
            upstream,
            ..Default::default()
        })
        .await;
        let clients = [
            ("WebSocket", Client::ws(&pair.ingress("ws://")).await),
            ("stdio", pair.stdio_client().await),
            ("TCP", Client::tcp(&pair.ingress("tcp://")).await),
        ];
        for (name, mut c) in clients {
            let what = format!("{name} client, {upstream:?} upstream");
            // The upstream asks the client a question before it answers.
            c.send(r#"{"jsonrpc":"2.0","id":"a1","method":"ask","params":{"q":"model?"}}"#)
                .await;
            let q = c.recv().await.expect("server-originated request");
            assert_eq!(q["method"], "mock/question", "{what}: {q}");
            assert_eq!(q["params"], json!({"q":"model?"}));
            let qid = q["id"].clone();
            c.send(&json!({"jsonrpc":"2.0","id":qid,"result":"claude"}).to_string())
                .await;
            let r = c.recv().await.expect("reply after the answer");
            assert_eq!(
                r,
                json!({"jsonrpc":"2.0","id":"a1","result":{"answer":"claude"}}),
                "{what}"
            );
            // A notification before the reply.
            let r1 = c
                .call(json!({"jsonrpc":"2.0","id":2,"method":"notify","params":[7]}))
                .await;
            assert_eq!(r1["method"], "mock/notified", "{what}: {r1}");
            let r2 = c.recv().await.expect("reply");
            assert_eq!(r2["result"], json!([7]));
            // Subscription pushes after the reply.
            let r = c
                .call(json!({"jsonrpc":"2.0","id":3,"method":"subscribe"}))
                .await;
            assert_eq!(r["result"], "0x1", "{what}");
            for i in 0..3 {
                let n = c.recv().await.expect("push");
                assert_eq!(n["method"], "eth_subscription", "{what}");
                assert_eq!(n["params"]["result"], i);
            }
        }
    }
}

/// Two HTTP clients using the same id at the same time get their own
/// replies (opaque correlation ids on the shared pool). (A session client
/// reusing an outstanding id: `relay::tests`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_ids_are_never_cross_wired() {
    let pair = Pair::start(PairOptions::default()).await;
    let url = pair.ingress("http://");
    let calls = (0..16).map(|i| {
        let url = url.clone();
        async move {
            let body =
                json!({"jsonrpc":"2.0","id":1,"method":"sleep","params":[20, i]}).to_string();
            let (s, b) = post(&url, &body).await;
            assert_eq!(s, 200);
            assert_eq!(parse(&b), json!({"jsonrpc":"2.0","id":1,"result":[20, i]}));
        }
    });
    futures_util::future::join_all(calls).await;
}

/// Upstream down, slow or crashing; peer gone; policy refusals; limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_answered_by_the_edge_and_name_the_error() {
    // An HTTP upstream that refuses connections: NotDelivered → 502; the
    // same over TCP: a local -32004 error naming NotDelivered.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let dead = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let keys = tempdir::Dir::new();
    let origin = Proc::start(
        &[
            "serve",
            "--listen",
            "quic://127.0.0.1:0",
            "--upstream",
            &dead,
            "--insecure-accept-any-peer",
            "--protocol",
            "mcp",
            "--refuse-effect",
            "destructive",
            "--deny-method",
            "admin/wipe",
        ],
        "listening on",
    )
    .await;
    let peer = origin.printed("listening on ");
    let edge = Proc::start(
        &[
            "serve",
            "--ingress",
            "http://127.0.0.1:0",
            "--ingress",
            "tcp://127.0.0.1:0",
            "--peer",
            &peer,
            "--insecure-accept-any-peer",
            "--protocol",
            "mcp",
            "--max-body",
            "2000",
            "--request-timeout",
            "2",
            // A session client waits this long for room before -32011
            // (below): the default 10 s made this the longest test.
            "--stall-timeout",
            "3",
            // The killed origin (below) is given up after this silence,
            // and a handshake with it after this wait, not the defaults',
            // which took most of this test's time.
            "--peer-timeout",
            "4",
            "--handshake-timeout",
            "1",
            "--metrics",
            "127.0.0.1:0",
        ],
        "metrics",
    )
    .await;
    let find = |scheme: &str| {
        edge.lines
            .iter()
            .find_map(|l| l.strip_prefix("ingress ").filter(|u| u.starts_with(scheme)))
            .expect("ingress")
            .to_owned()
    };
    let http = find("http://");
    let (s, b) = post(&http, r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#).await;
    let v = parse(&b);
    assert_eq!(s, 502, "{b}");
    assert_eq!(v["id"], 4);
    assert_eq!(v["error"]["code"], -32004);
    assert_eq!(v["error"]["data"]["npamp_error"], "NotDelivered");
    let mut tcp = Client::tcp(&find("tcp://")).await;
    let r = tcp
        .call(json!({"jsonrpc":"2.0","id":5,"method":"tools/list"}))
        .await;
    assert_eq!(r["error"]["code"], -32004, "{r}");
    assert_eq!(r["error"]["data"]["npamp_error"], "NotDelivered");
    // SafetyPolicy: an unlabelled-by-table tools/call counts as destructive.
    let (s, b) = post(
        &http,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"rm"}}"#,
    )
    .await;
    assert_eq!(s, 502, "{b}");
    assert_eq!(parse(&b)["error"]["data"]["npamp_error"], "SafetyPolicy");
    // MethodUnsupported.
    let (s, b) = post(&http, r#"{"jsonrpc":"2.0","id":7,"method":"admin/wipe"}"#).await;
    assert_eq!(s, 502, "{b}");
    assert_eq!(
        parse(&b)["error"]["data"]["npamp_error"],
        "MethodUnsupported"
    );
    // Body too large → 413; not application/json → 415; GET → 405.
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"echo","params":["{}"]}}"#,
        "x".repeat(3000)
    );
    assert_eq!(post(&http, &big).await.0, 413);
    assert_eq!(post_with(&http, "{}", "text/plain").await.0, 415);
    // Over a session: -32600 with the request's id (its head shows it),
    // the line skipped whole, and the connection carries on; a line whose
    // head does not show its id is answered with a null id.
    let mut tcp_big = Client::tcp(&find("tcp://")).await;
    tcp_big.send(&big).await;
    let r = tcp_big
        .recv()
        .await
        .expect("an answer to the over-long line");
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32600), json!(8)),
        "{r}"
    );
    let hidden = format!(
        r#"{{"jsonrpc":"2.0","params":["{}"],"id":9,"method":"echo"}}"#,
        "x".repeat(3000)
    );
    tcp_big.send(&hidden).await;
    let r = tcp_big.recv().await.expect("an answer");
    assert_eq!(
        (r["error"]["code"].clone(), r["id"].clone()),
        (json!(-32600), Value::Null),
        "{r}"
    );
    let r = tcp_big
        .call(json!({"jsonrpc":"2.0","id":10,"method":"tools/list"}))
        .await;
    assert_eq!(r["id"], 10, "the connection carries on: {r}");
    // A method name longer than an envelope carries: -32600 from the edge.
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":12,"method":"{}"}}"#,
        "m".repeat(300)
    );
    let (s, b) = post(&http, &long).await;
    assert_eq!(
        (s, parse(&b)["error"]["code"].clone()),
        (200, json!(-32600)),
        "{b}"
    );
    assert_eq!(parse(&b)["id"], 12);

    // ProtocolUnsupported: an edge carrying A2A to an MCP origin.
    let edge_a2a = Proc::start(
        &[
            "serve",
            "--ingress",
            "http://127.0.0.1:0",
            "--peer",
            &peer,
            "--insecure-accept-any-peer",
            "--protocol",
            "a2a",
        ],
        "ingress",
    )
    .await;
    let (s, b) = post(
        &edge_a2a.printed("ingress "),
        r#"{"jsonrpc":"2.0","id":9,"method":"message/send"}"#,
    )
    .await;
    assert_eq!(s, 502, "{b}");
    assert_eq!(
        parse(&b)["error"]["data"]["npamp_error"],
        "ProtocolUnsupported"
    );

    // Peer gateway gone (killed): requests on the dead association time out
    // (504) until QUIC declares it lost, then the edge cannot reconnect
    // (503); session clients get -32010 / -32011. Never a success.
    drop(origin);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (s, b) = post(&http, r#"{"jsonrpc":"2.0","id":10,"method":"tools/list"}"#).await;
        let v = parse(&b);
        assert_eq!(v["id"], 10, "{b}");
        let code = v["error"]["code"].as_i64().expect("an error");
        assert!((-32099..=-32000).contains(&code), "{b}");
        if s == 503 {
            assert_eq!(v["error"]["data"]["npamp_error"], "Unavailable", "{b}");
            break;
        }
        assert!(s == 504 || s == 502, "{s} {b}");
        assert!(Instant::now() < deadline, "the dead peer was never noticed");
    }
    let mut tcp2 = Client::tcp(&find("tcp://")).await;
    let r = tcp2
        .call(json!({"jsonrpc":"2.0","id":11,"method":"tools/list"}))
        .await;
    assert_eq!(r["error"]["code"], -32011, "{r}");
    assert_eq!(r["id"], 11);
    drop(keys);
}

/// A slow upstream → 504 after the request timeout; a crashing child
/// process → MayHaveExecuted for the request it was handed (`exit`, a plain
/// method: it did run), then it is restarted and serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_crashing_upstreams() {
    let pair = Pair::start(PairOptions {
        upstream: Up::Stdio,
        edge_extra: &["--request-timeout", "0.5"],
        ..Default::default()
    })
    .await;
    let http = pair.ingress("http://");
    let (s, b) = post(
        &http,
        r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":[3000]}"#,
    )
    .await;
    assert_eq!(s, 504, "{b}");
    assert_eq!(parse(&b)["error"]["data"]["npamp_error"], "Timeout");

    let mut tcp = Client::tcp(&pair.ingress("tcp://")).await;
    let r = tcp
        .call(json!({"jsonrpc":"2.0","id":"x","method":"exit"}))
        .await;
    assert_eq!(r["id"], "x", "{r}");
    assert_eq!(r["error"]["data"]["npamp_error"], "MayHaveExecuted", "{r}");
    // The child is restarted (with backoff); the session serves again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = tcp
            .call(json!({"jsonrpc":"2.0","id":"y","method":"echo","params":[1]}))
            .await;
        if r.get("result").is_some() {
            assert_eq!(r["result"], json!([1]));
            break;
        }
        assert_eq!(r["error"]["data"]["npamp_error"], "NotDelivered", "{r}");
        assert!(Instant::now() < deadline, "the upstream was not restarted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGTERM: the edge stops accepting, lets in-flight requests finish, and
/// exits cleanly.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests() {
    let mut pair = Pair::start(PairOptions::default()).await;
    let http = pair.ingress("http://");
    let slow = tokio::spawn({
        let http = http.clone();
        async move {
            post(
                &http,
                r#"{"jsonrpc":"2.0","id":1,"method":"sleep","params":[700]}"#,
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pid = pair.edge.pid();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let (s, b) = slow.await.expect("join");
    assert_eq!(
        (s, parse(&b)["result"].clone()),
        (200, json!([700])),
        "the in-flight request finished"
    );
    let exit = tokio::time::timeout(Duration::from_secs(10), pair.edge.child.wait())
        .await
        .expect("exits after draining")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    // New connections are refused now.
    let addr = http.strip_prefix("http://").expect("url");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// /metrics and /healthz of a running edge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_happened() {
    let pair = Pair::start(PairOptions::default()).await;
    let http = pair.ingress("http://");
    for _ in 0..3 {
        post(&http, r#"{"jsonrpc":"2.0","id":1,"method":"echo"}"#).await;
    }
    let metrics = pair.edge.printed("metrics ");
    let (s, text) = http_get(&metrics).await;
    assert_eq!(s, 200);
    assert!(
        text.contains("npamp_requests_total{ingress=\"http\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("npamp_replies_total{class=\"success\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("npamp_request_duration_seconds_count 3"),
        "{text}"
    );
    let health = metrics.replace("/metrics", "/healthz");
    assert_eq!(http_get(&health).await.0, 200);
}

/// 64 concurrent HTTP clients: every request gets exactly one reply, its
/// own (`npamp-gateway exactly-once` runs this for 60 s: `results/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_http_clients_get_exactly_their_own_replies() {
    let pair = Pair::start(PairOptions::default()).await;
    let tally =
        npamp_testkit::exactly_once::run(&pair.ingress("http://"), 64, Duration::from_secs(3))
            .await
            .expect("run");
    assert!(tally.sent > 64, "{tally:?}");
    assert!(tally.exact(), "{tally:?}");
    assert_eq!(tally.ok, tally.sent, "{tally:?}");
}

/// HTTPS and WSS upstreams, trusted through `--upstream-ca`; without it the
/// upstream's certificate is refused and the request is NotDelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_upstreams_with_an_operator_ca() {
    let dir = tempdir::Dir::new();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("certificate");
    let (cert_path, key_path) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
    let (cert_arg, key_arg) = (
        cert_path.to_string_lossy().into_owned(),
        key_path.to_string_lossy().into_owned(),
    );
    let mock = Proc::start(
        &[
            "mock-upstream",
            "--listen",
            "https://127.0.0.1:0",
            "--listen",
            "wss://127.0.0.1:0",
            "--tls-cert",
            &cert_arg,
            "--tls-key",
            &key_arg,
        ],
        "mock upstream wss",
    )
    .await;
    let find = |p: &Proc, prefix: &str| {
        p.lines
            .iter()
            .find_map(|l| {
                l.strip_prefix("mock upstream ")
                    .filter(|u| u.starts_with(prefix))
            })
            .expect("mock URL")
            .to_owned()
    };
    for (url, trusted) in [
        (find(&mock, "https://"), true),
        (find(&mock, "wss://"), true),
        (find(&mock, "https://"), false),
    ] {
        let mut args = vec![
            "serve",
            "--listen",
            "quic://127.0.0.1:0",
            "--upstream",
            &url,
            "--insecure-accept-any-peer",
        ];
        if trusted {
            args.extend(["--upstream-ca", &cert_arg]);
        }
        let origin = Proc::start(&args, "listening on").await;
        let peer = origin.printed("listening on ");
        let (_edge, url) = http_edge(&peer, &["--insecure-accept-any-peer"]).await;
        let (s, b) = post(
            &url,
            r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":["tls"]}"#,
        )
        .await;
        if trusted {
            assert_eq!(
                (s, parse(&b)),
                (200, json!({"jsonrpc":"2.0","id":1,"result":["tls"]})),
                "{url}"
            );
        } else {
            assert_eq!(s, 502, "{url}: {b}");
            let v = parse(&b);
            assert_eq!(v["error"]["data"]["npamp_error"], "NotDelivered");
            let detail = v["error"]["data"]["detail"].as_str().unwrap_or_default();
            assert!(detail.contains("certificate"), "{detail}");
        }
    }
}

/// Both gateways answer each other's keepalive PINGs: with a 1 s peer
/// timeout on both sides, a pair left idle for several timeouts keeps its
/// associations (no reconnect, no I/O failure) and serves at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_associations_stay_up_through_keepalive() {
    let pair = Pair::start(PairOptions {
        ingresses: &["http", "ws"],
        origin_extra: &["--peer-timeout", "1", "--stall-timeout", "0.5"],
        edge_extra: &[
            "--peer-timeout",
            "1",
            "--stall-timeout",
            "0.5",
            "--pool-size",
            "1",
        ],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    assert_eq!(post(&http, echo).await.0, 200);
    let mut ws = Client::ws(&pair.ingress("ws://")).await;
    let reply = ws
        .call(serde_json::json!({"jsonrpc":"2.0","id":2,"method":"echo","params":[2]}))
        .await;
    assert_eq!(reply["result"], serde_json::json!([2]), "{reply}");
    // One pooled association for HTTP, one for the WebSocket client.
    metric_reaches(
        &pair.edge,
        "npamp_associations{role=\"edge\"}",
        2,
        Duration::from_secs(5),
    )
    .await;
    let opened = metric(&pair.edge, "npamp_associations_opened_total{role=\"edge\"}").await;
    assert_eq!(opened, 2);

    tokio::time::sleep(Duration::from_millis(3500)).await;

    assert_eq!(post(&http, echo).await.0, 200);
    let reply = ws
        .call(serde_json::json!({"jsonrpc":"2.0","id":3,"method":"echo","params":[3]}))
        .await;
    assert_eq!(reply["result"], serde_json::json!([3]), "{reply}");
    assert_eq!(
        metric(&pair.edge, "npamp_associations_opened_total{role=\"edge\"}").await,
        opened,
        "an association was lost and reopened while idle"
    );
    assert_eq!(
        metric(&pair.edge, "npamp_associations{role=\"edge\"}").await,
        2
    );
    let (_, text) = http_get(&pair.edge.printed("metrics ")).await;
    assert!(
        text.contains("npamp_associations_failed_total{class=\"io\"} 0"),
        "{text}"
    );
}

/// A JSON-RPC message of `len` octets or more: `echo` with a string that
/// long.
/// An edge with an HTTP ingress makes its pooled associations when it
/// starts, not on the first requests: a process's first handshake (with
/// the seeding of AWS-LC's random generator) made the first request wait
/// 33-118 ms on a 2-core machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_is_made_before_the_first_request() {
    let pair = Pair::start(PairOptions {
        ingresses: &["http"],
        edge_extra: &["--pool-size", "2"],
        ..PairOptions::default()
    })
    .await;
    let made = metric_reaches(
        &pair.edge,
        "npamp_associations{role=\"edge\"}",
        2,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(made, 2, "pooled associations made with no request yet");
    let http = pair.ingress("http://");
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    for _ in 0..4 {
        assert_eq!(post(&http, echo).await.0, 200);
    }
    assert_eq!(
        metric(&pair.edge, "npamp_associations_opened_total{role=\"edge\"}").await,
        2,
        "the requests went over the associations made at the start"
    );
}

/// An edge whose origin is down when it starts tries once for its whole
/// pool, not once per slot, and a request then gets a clear refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_origin_is_down_at_start_tries_once() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let peer = format!("tls://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let (edge, url) =
        http_edge_with_metrics(&peer, &["--insecure-accept-any-peer", "--pool-size", "4"]).await;
    let failed = metric_reaches(
        &edge,
        "npamp_handshake_failures_total",
        1,
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(failed, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        metric(&edge, "npamp_handshake_failures_total").await,
        1,
        "one attempt for the pool of 4"
    );
    let (status, body) = post(
        &url,
        r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[]}"#,
    )
    .await;
    assert_eq!(status, 503, "{body}");
    let v = parse(&body);
    assert_eq!(v["id"], 1, "{body}");
    assert!(
        v["error"]["data"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&peer[6..])),
        "{body}"
    );
}

fn big_echo(id: u32, len: usize) -> (String, String) {
    let s = "y".repeat(len);
    let req = json!({"jsonrpc":"2.0","id":id,"method":"echo","params":[s]}).to_string();
    (req, s)
}

/// Messages far larger than the 1 MiB default, when both gateways allow
/// them (`--max-body`): a 5 MiB request and its 5 MiB reply, over QUIC and
/// over TCP + TLS (where every channel shares one stream), through the HTTP
/// and the WebSocket ingress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_mib_messages_cross_both_transports() {
    for transport in ["quic", "tls"] {
        let max = ["--max-body", "8388608"];
        let pair = Pair::start(PairOptions {
            transport,
            origin_extra: &max,
            edge_extra: &max,
            ingresses: &["http", "ws"],
            ..PairOptions::default()
        })
        .await;
        let (req, s) = big_echo(1, 5 << 20);
        let (status, body) = post(&pair.ingress("http://"), &req).await;
        assert_eq!(status, 200, "{transport}: {}", &body[..body.len().min(300)]);
        assert!(body.len() > 5 << 20, "{transport}");
        assert_eq!(
            parse(&body)["result"][0].as_str(),
            Some(s.as_str()),
            "{transport}"
        );
        let mut ws = Client::ws(&pair.ingress("ws://")).await;
        let (req, s) = big_echo(2, 5 << 20);
        ws.send(&req).await;
        let r = ws.recv().await.expect("a reply");
        assert_eq!(r["id"], 2, "{transport}");
        assert_eq!(r["result"][0].as_str(), Some(s.as_str()), "{transport}");
    }
}

/// Gateways that disagree on `--max-body` refuse the one message, clearly,
/// and keep their association: an edge that takes 8 MiB in front of an
/// origin that takes the default 1 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_origins_max_body_is_refused_alone() {
    let pair = Pair::start(PairOptions {
        edge_extra: &["--max-body", "8388608", "--pool-size", "1"],
        ingresses: &["http"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let (req, _) = big_echo(1, 2 << 20);
    let (status, body) = post(&http, &req).await;
    assert_eq!(status, 502, "{body}");
    let v = parse(&body);
    assert_eq!(v["error"]["data"]["npamp_error"], "NotDelivered", "{body}");
    let detail = v["error"]["data"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("--max-body (1048576)"), "{body}");
    // The same association carries the next request.
    let (status, body) = post(
        &http,
        r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":[2]}"#,
    )
    .await;
    assert_eq!(
        (status, parse(&body)["result"].clone()),
        (200, json!([2])),
        "{body}"
    );
    assert_eq!(
        metric(&pair.edge, "npamp_associations_opened_total{role=\"edge\"}").await,
        1
    );
    assert_eq!(
        metric(&pair.edge, "npamp_association_errors_total").await,
        0
    );
}

/// A WebSocket client that writes 1000 requests before it reads any (what
/// web3 libraries do under load) gets 1000 results at the default limits:
/// past its session's in-flight limit its socket is simply not read until
/// room comes, and the origin takes whatever the edge admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelining_websocket_client_gets_every_result() {
    let pair = Pair::start(PairOptions {
        ingresses: &["ws"],
        ..PairOptions::default()
    })
    .await;
    let mut ws = Client::ws(&pair.ingress("ws://")).await;
    for i in 0..1000 {
        let r = json!({"jsonrpc":"2.0","id":i,"method":"echo","params":[i]});
        ws.send(&r.to_string()).await;
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..1000 {
        let r = ws.recv().await.expect("a result");
        assert_eq!(r["result"], json!([r["id"]]), "{r}");
        seen.insert(r["id"].as_u64());
    }
    assert_eq!(seen.len(), 1000);
    assert_eq!(
        metric(&pair.edge, "npamp_replies_total{class=\"unavailable\"}").await,
        0
    );
}

/// A TCP client that sends 128 requests with 60 KB replies and starts
/// reading only 500 ms later: the replies back up through the kernel's
/// buffers into the edge's session queue, which fills, and every reply
/// that then waits for room still reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_late_gets_every_reply_that_waited_for_room() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    const REQUESTS: u64 = 128;
    let pair = Pair::start(PairOptions {
        ingresses: &["tcp"],
        ..PairOptions::default()
    })
    .await;
    let tcp = pair.ingress("tcp://");
    let addr = tcp.strip_prefix("tcp://").expect("tcp URL");
    let (r, mut w) = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect")
        .into_split();
    let payload = "x".repeat(60_000);
    let writer = tokio::spawn(async move {
        for id in 0..REQUESTS {
            let r = json!({"jsonrpc":"2.0","id":id,"method":"echo","params":[payload]});
            w.write_all(format!("{r}\n").as_bytes())
                .await
                .expect("send");
        }
        w
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut lines = BufReader::new(r).lines();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..REQUESTS {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a reply in time")
            .expect("read")
            .expect("a reply before the end");
        let reply = parse(&line);
        assert_eq!(
            reply["result"][0].as_str().map(str::len),
            Some(60_000),
            "{}",
            &line[..200.min(line.len())]
        );
        seen.insert(reply["id"].as_u64().expect("a numeric id"));
    }
    assert_eq!(seen, (0..REQUESTS).collect());
    let _w = writer.await.expect("writer");
}

/// `/readyz` says whether a request can go anywhere now, `/healthz` only
/// that the process lives: an origin whose upstream is down, once it has
/// ejected it, and an edge whose origin is gone, once it has ejected that,
/// answer 503 saying why, so an orchestrator stops sending them traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_upstream_and_the_origin() {
    let mut pair = Pair::start(PairOptions {
        ingresses: &["http"],
        origin_extra: &["--metrics", "127.0.0.1:0"],
        ..PairOptions::default()
    })
    .await;
    let http = pair.ingress("http://");
    let ready = |p: &Proc| p.printed("metrics ").replace("/metrics", "/readyz");
    let (edge_ready, origin_ready) = (ready(&pair.edge), ready(&pair.origin));
    for url in [&edge_ready, &origin_ready] {
        assert_eq!(http_get(url).await, (200, "ready\n".to_owned()), "{url}");
    }
    let echo = r#"{"jsonrpc":"2.0","id":1,"method":"echo","params":[1]}"#;
    assert_eq!(post(&http, echo).await.0, 200);

    // The upstream goes: the requests that find it gone eject it.
    pair.kill_upstream();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, text) = loop {
        let _ = post(&http, echo).await;
        let (status, text) = http_get(&origin_ready).await;
        if status == 503 || Instant::now() > deadline {
            break (status, text);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("no upstream is up"), "{text}");
    let (status, _) = http_get(
        &pair
            .origin
            .printed("metrics ")
            .replace("/metrics", "/healthz"),
    )
    .await;
    assert_eq!(status, 200, "liveness is not readiness");

    // The origin goes: the edge's requests eject it.
    let pid = pair.origin.pid().to_string();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    let _ = tokio::time::timeout(Duration::from_secs(10), pair.origin.child.wait()).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let (status, text) = loop {
        let _ = post(&http, echo).await;
        let (status, text) = http_get(&edge_ready).await;
        if status == 503 || Instant::now() > deadline {
            break (status, text);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("no origin is up"), "{text}");
}

/// A herd: 96 WebSocket clients whose first messages arrive together, each
/// needing an association of its own. The origin takes at most 32
/// handshakes from one source at once and refuses the rest; the edge makes
/// at most 16 at once to one origin and the others wait their turn, so
/// every client is answered (once, most got -32011).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_of_session_clients_waits_its_turn_and_is_served() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    const CLIENTS: usize = 96;
    let pair = Pair::start(PairOptions {
        ingresses: &["ws"],
        ..PairOptions::default()
    })
    .await;
    let ws = pair.ingress("ws://");
    let mut conns = Vec::new();
    for _ in 0..CLIENTS {
        let (conn, _) = tokio_tungstenite::connect_async(ws.as_str())
            .await
            .expect("WebSocket handshake");
        conns.push(conn);
    }
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(CLIENTS));
    let mut tasks = Vec::new();
    for (i, mut conn) in conns.into_iter().enumerate() {
        let together = together.clone();
        tasks.push(tokio::spawn(async move {
            together.wait().await;
            let req = json!({"jsonrpc": "2.0", "id": i, "method": "echo", "params": [i]});
            conn.send(Message::Text(req.to_string().into()))
                .await
                .expect("send");
            let reply = tokio::time::timeout(Duration::from_secs(30), conn.next())
                .await
                .expect("a reply within 30 s")
                .expect("a message")
                .expect("a frame");
            let reply: Value = serde_json::from_str(reply.to_text().expect("text")).expect("JSON");
            (i, reply)
        }));
    }
    let mut failed = Vec::new();
    for t in tasks {
        let (i, reply) = t.await.expect("client");
        if reply["result"] != json!([i]) {
            failed.push(reply);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {CLIENTS} clients not served: {:?}",
        failed.len(),
        failed.first()
    );
    assert!(metric(&pair.edge, "npamp_handshakes_queued_total").await > 0);
}
